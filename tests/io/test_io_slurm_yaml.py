"""Tests of placement.io.importers.slurm on synthetic topology.yaml inputs: trees with children, errors named with their
path and line, and fuzzed documents that must raise InputError only."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.errors import InputError
from placement.io.importers.slurm import parse_topology_yaml
from tests.support_slurm import check_common, domain_sizes, problem_texts

# ------------------------------------------------------------------------------------------------- yaml


def _yaml_error(text: str, **kw: Any) -> list[str]:
    with pytest.raises(InputError) as info:
        parse_topology_yaml(text, "t.yaml", **kw)
    return problem_texts(info)


def test_yaml_tree_with_children() -> None:
    text = """
- topology: fabric
  cluster_default: true
  tree:
    switches:
      - switch: leaf1
        nodes: gpu[001-004]
      - switch: leaf2
        nodes: [gpu005, gpu006]
      - switch: spine
        children: leaf[1-2]
        link_speed: 400
"""
    cluster, warnings = parse_topology_yaml(text, "t.yaml", level_names=["leaf", "spine"])
    check_common(cluster)
    assert cluster["name"] == "fabric"
    assert domain_sizes(cluster, "leaf") == Counter({"leaf1": 4, "leaf2": 2})
    assert domain_sizes(cluster, "spine") == Counter({"spine": 6})
    assert warnings == []


def test_yaml_errors_name_path_and_line() -> None:
    text = """
- topology: a
  tree:
    switches:
      - switch: s0
        nodes: n[1-4]
      - switch: s1
        nodes: n[4-5]
        color: red
      - switch: top
        children: s[0-2]
- topology: b
  block:
    block_sizes: [4, 12]
    blocks:
      - block: b1
        nodes: n[1-4]
"""
    assert _yaml_error(text) == [
        'topology: no entry has cluster_default: true; pass topology= one of "a", "b"'
    ]
    assert _yaml_error(text, topology="a") == [
        '[0].tree.switches[1].color (line 9): unknown key "color"; expected switch, children, nodes',
        '[0].tree.switches[1].nodes (line 8): node "n4" is under switch "s1" but already under switch "s0" '
        "([0].tree.switches[0].nodes (line 6)); a node hangs off exactly one leaf switch",
        '[0].tree.switches[2].children (line 11): switch "s2" is listed in children of "top" but never '
        "defined; "
        'add a "- switch: s2" entry',
    ]
    assert _yaml_error(text, topology="b") == [
        "[1].block.block_sizes[1] (line 14): BlockSizes entry 12 is 3 x the base block size 4; each later "
        "size "
        "must be the base size times 2, 4, 8, ... (e.g. 8, 16)"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ["is empty; expected a list of topologies (- topology: NAME ...)"]),
        ("topology: a\n", ["line 1: expected a list of topologies (- topology: NAME ...), got a mapping"]),
        (
            "- topology: [\n",
            ["line 2, column 1: is not valid YAML: expected the node content, but found '<stream end>'"],
        ),
        (
            "- topology: a\n  tree: {switches: []}\n",
            ["[0].tree.switches (line 2): switches must be a non-empty list, got a list"],
        ),
        (
            "- topology: a\n  flat: true\n  block: {}\n",
            [
                '[0] (line 1): topology "a" must define exactly one '
                "of "
                "tree, block, flat: true (got block, flat)"
            ],
        ),
        (
            "- topology: a\n  tree: {switches: [{switch: s, nodes: n1}]}\n- topology: a\n  flat: true\n",
            ['[1].topology (line 3): topology "a" is defined twice (first at [0].topology (line 1))'],
        ),
        (
            "- topology: a\n  cluster_default: yes please\n  tree: {switches: [{switch: s, nodes: n1}]}\n",
            ['[0].cluster_default (line 2): must be true or false, got the string "yes please"'],
        ),
        (
            "- topology: d\n  when: 2024-02-30\n  flat: true\n",
            ["is not valid YAML: day is out of range for month"],
        ),
    ],
)
def test_yaml_structure_errors(text: str, expected: list[str]) -> None:
    assert _yaml_error(text) == expected


# --------------------------------------------------------------------------------- no raw exceptions


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-3, 40)
        | st.sampled_from(["n[1-4]", "s0", "tree", "block", ""]),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "topology",
                        "cluster_default",
                        "tree",
                        "block",
                        "flat",
                        "switches",
                        "switch",
                        "children",
                        "nodes",
                        "blocks",
                        "block_sizes",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_yaml_never_leaks_a_raw_exception(doc: Any) -> None:
    import yaml

    try:
        cluster, _ = parse_topology_yaml(yaml.safe_dump(doc), "fuzz.yaml")
    except InputError as err:
        assert err.problems
    else:
        check_common(cluster)
