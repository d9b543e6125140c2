"""Tests of placement.io.importers.slurm on synthetic topology.conf inputs: tree, block and ring definitions, BlockSizes,
level names, every error named with its line and column, and fuzzed text that must raise InputError only."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.errors import InputError
from placement.io.importers.slurm import parse_topology_conf
from tests.support_slurm import check_common, domain_sizes, host_of, level_names_of, problem_texts

# ------------------------------------------------------------------------------------ synthetic inputs


def _conf_error(text: str, **kw: Any) -> list[str]:
    with pytest.raises(InputError) as info:
        parse_topology_conf(text, "t.conf", **kw)
    assert info.value.source == "t.conf"
    return problem_texts(info)


def test_node_under_two_switches() -> None:
    assert _conf_error("SwitchName=s0 Nodes=dev[0-5]\nSwitchName=s1 Nodes=dev[5-8]\n") == [
        'line 2, column 21: node "dev5" is under switch "s1" but already under switch "s0" (line 1, column '
        "21); "
        "a node hangs off exactly one leaf switch"
    ]
    assert _conf_error("SwitchName=s0 Nodes=dev[0-5]\nSwitchName=s1 Nodes=dev[3-8]\n") == [
        'line 2, column 21: 3 nodes (dev[3-5]) are under switch "s1" but already under switch "s0" '
        "(line 1, column 21); a node hangs off exactly one leaf switch"
    ]


def test_undefined_switch() -> None:
    assert _conf_error("SwitchName=s0 Nodes=dev[0-5]\nSwitchName=s3 Switches=s[0,9]\n") == [
        'line 2, column 24: switch "s9" is listed in Switches= of "s3" but never defined; '
        'add a "SwitchName=s9 ..." line'
    ]


def test_bad_hostlist_range() -> None:
    assert _conf_error("SwitchName=s0 Nodes=node[5-3]\n") == [
        'line 1, column 21: hostlist "node[5-3]": range "5-3" at character 6 runs backwards; '
        'write the lower bound first ("3-5")'
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "SwitchName=a Switches=b\nSwitchName=b Switches=a,c\nSwitchName=c Nodes=n1\n",
            ['line 1, column 12: switches form a cycle: "a" -> "b" -> "a"; each lists the next as a child'],
            id="cycle",
        ),
        pytest.param(
            "SwitchName=a Switches=a\n",
            ['line 1, column 12: switches form a cycle: "a" -> "a"; each lists the next as a child'],
            id="self-cycle",
        ),
        pytest.param(
            "SwitchName=s0 Nodes=n1 Foo=3\nFrob=1\nNodes=n2\nInclude /etc/slurm/more.conf\n",
            [
                'line 1, column 24: unknown key "Foo"; a SwitchName= line takes Switches=, Nodes=, LinkSpeed=',
                'line 2, column 1: unknown key "Frob"; a line starts with SwitchName=, BlockName=, RingName= or '
                "BlockSizes=",
                'line 3, column 1: "Nodes=" must follow SwitchName=, BlockName= or RingName= on the same line',
                "line 4, column 1: Include lines are not supported; paste the included lines here",
            ],
            id="unknown-keys",
        ),
        pytest.param(
            "BlockName=b1 Switches=s1 Nodes=n1\n",
            ['line 1, column 14: unknown key "Switches"; a BlockName= line takes Nodes='],
            id="wrong-key-for-kind",
        ),
        pytest.param(
            'SwitchName=s0 Nodes= LinkSpeed=100\nSwitchName=s1 Nodes=""\n',
            [
                'line 1, column 21: Nodes= is empty for switch "s0"; list its nodes as a hostlist, e.g. '
                "Nodes=node[01-08]",
                'line 2, column 21: Nodes= is empty for switch "s1"; list its nodes as a hostlist, e.g. '
                "Nodes=node[01-08]",
            ],
            id="empty-nodes",
        ),
        pytest.param(
            "SwitchName=s0 Nodes=n1\nSwitchName=s1\n",
            ['line 2, column 12: switch "s1" has no children; give Nodes= or Switches='],
            id="no-children",
        ),
        pytest.param(
            "SwitchName=s0 Nodes=n1 Switches=s1\nSwitchName=s1 Nodes=n2\n",
            [
                'line 1, column 12: switch "s0" has both Nodes= and Switches=; a switch holds either nodes or '
                "switches"
            ],
            id="both-children",
        ),
        pytest.param(
            "SwitchName=s0 Nodes=n1\nSwitchName=s0 Nodes=n2\n",
            [
                'line 2, column 12: switch "s0" is defined twice (first at line 1, column 12); each switch name '
                "must be unique"
            ],
            id="duplicate-switch",
        ),
        pytest.param(
            "SwitchName=l Nodes=n1\nSwitchName=a Switches=l\nSwitchName=b Switches=l\n",
            [
                'line 3, column 23: switch "l" is under switch "b" but already under switch "a" (line 2, '
                "column 23); "
                "a switch has one parent"
            ],
            id="two-parents",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[1-8]\nBlockName=b2 Nodes=n[9-16]\nBlockSizes=8,20\n",
            [
                "line 3, column 12: BlockSizes entry 20 is not a multiple of the base block size 8 (the first "
                "entry)"
            ],
            id="blocksize-not-multiple",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[1-8]\nBlockName=b2 Nodes=n[9-16]\nBlockSizes=8,24\n",
            [
                "line 3, column 12: BlockSizes entry 24 is 3 x the base block size 8; each later size must be "
                "the "
                "base size times 2, 4, 8, ... (e.g. 16, 32)"
            ],
            id="blocksize-not-power-of-two",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[1-8]\nBlockName=b2 Nodes=n[9-14]\nBlockSizes=8,16\n",
            [
                'line 2, column 11: block "b2" has 6 nodes, fewer than the base block size 8 (the first '
                "BlockSizes "
                "entry); every block needs at least that many"
            ],
            id="block-smaller-than-base",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[1-8]\nBlockName=b2 Nodes=n[8-15]\n",
            [
                'line 2, column 20: node "n8" is under block "b2" but already under block "b1" (line 1, column '
                "20); "
                "a node belongs to one block"
            ],
            id="node-in-two-blocks",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[1-8]\nBlockSizes=8,x\n",
            ['line 2, column 12: BlockSizes entry "x" is not a positive whole number of nodes'],
            id="blocksize-not-a-number",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[1-4]\nBlockSizes=4\nBlockSizes=4,8\n",
            ["line 3, column 12: BlockSizes= is given again (first at line 2, column 12); give it once"],
            id="blocksizes-twice",
        ),
        pytest.param(
            "RingName=r0 Nodes=n[1-4]\nRingName=r1 Nodes=n[4-5]\n",
            [
                'line 2, column 19: node "n4" is under ring "r1" but already under ring "r0" (line 1, column '
                "19); "
                "a node belongs to one ring"
            ],
            id="node-in-two-rings",
        ),
        pytest.param(
            "SwitchName=s0 Nodes=n1\nBlockName=b Nodes=n1\n",
            [
                'the file mixes tree (line 1) and block (line 2) definitions; pass topology="tree" or '
                'topology="block"'
            ],
            id="mixed-kinds",
        ),
        pytest.param(
            "# only a comment\n\n",
            ["no SwitchName=, BlockName= or RingName= lines: nothing to import"],
            id="empty",
        ),
        pytest.param(
            'SwitchName=s0 Nodes="n1\n',
            ['line 1, column 21: the quote opened after "Nodes=" is never closed'],
            id="open-quote",
        ),
    ],
)
def test_conf_errors(text: str, expected: list[str]) -> None:
    assert _conf_error(text) == expected


def test_all_problems_are_collected() -> None:
    text = (
        "SwitchName=s0 Nodes=dev[0-5]\n"
        "SwitchName=s1 Nodes=dev[5-3]\n"  # bad range
        "SwitchName=s2 Nodes=dev[4-6]\n"  # dev4, dev5 under two switches
        "SwitchName=top Switches=s[0-3]\n"  # s3 undefined
        "SwitchName=x Bogus=1\n"  # unknown key
    )
    problems = _conf_error(text)
    assert len(problems) == 4
    assert problems[0].startswith('line 5, column 14: unknown key "Bogus"')
    assert problems[1].startswith('line 2, column 21: hostlist "dev[5-3]"')
    assert problems[2].startswith('line 3, column 21: 2 nodes (dev[4-5]) are under switch "s2"')
    assert problems[3].startswith('line 4, column 25: switch "s3" is listed in Switches= of "top"')


def test_conf_syntax_oddities() -> None:
    text = (
        "\ufeff# header comment\r\n"
        "switchname=s0 \\\r\n"
        "   NODES=n[1-2,\\\n"
        "3-4]   # trailing comment\n"
        "  SwitchName = s1   nodes = m1 LinkSpeed=garbage\n"
        '\tSwitchName=top\tSwitches="s[0-1]"\n'
        "SwitchName=s2 Nodes=x\\#1\n"
        "SwitchName=s2top Switches=s2 linkspeed=100\n"
    )
    cluster, warnings = parse_topology_conf(text, "odd.conf")
    check_common(cluster)
    assert [h["name"] for h in cluster["hosts"]] == ["n1", "n2", "n3", "n4", "m1", "x#1"]
    assert domain_sizes(cluster, "switch1") == Counter({"s0": 4, "s1": 1, "s2": 1})
    assert domain_sizes(cluster, "switch2") == Counter({"top": 5, "s2top": 1})
    assert level_names_of(cluster) == ["node", "switch1", "switch2", "cluster"]
    assert warnings == [
        '2 top switches ("top", "s2top") are not connected to each other; added the level "cluster" above '
        "them "
        "(Slurm never spans one job across unconnected switches)"
    ]


def test_skipped_levels_are_filled_by_the_lower_switch() -> None:
    text = (
        "SwitchName=l1 Nodes=a[1-2]\n"
        "SwitchName=l2 Nodes=b[1-2]\n"
        "SwitchName=sp Switches=l1\n"
        "SwitchName=core Switches=sp,l2\n"
    )
    cluster, warnings = parse_topology_conf(text, "gap.conf", level_names=["leaf", "spine", "core"])
    check_common(cluster)
    assert host_of(cluster, "a1")["domains"] == {"leaf": "l1", "spine": "sp", "core": "core"}
    assert host_of(cluster, "b1")["domains"] == {"leaf": "l2", "spine": "l2", "core": "core"}
    assert warnings == [
        'switch "l2" (level leaf) hangs directly off "core" (level core); its hosts use "l2" as their domain '
        "at spine"
    ]


def test_mixed_file_with_topology_choice() -> None:
    text = "SwitchName=s0 Nodes=n[1-2]\nBlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[3-4]\n"
    cluster, warnings = parse_topology_conf(text, "mixed.conf", topology="block")
    assert level_names_of(cluster) == ["node", "block", "block_x2"]
    assert domain_sizes(cluster, "block_x2") == Counter({"b[1-2]": 4})
    assert warnings == ["ignored the tree definitions; imported the block ones"]
    cluster, _ = parse_topology_conf(text, "mixed.conf", topology="topology/tree")
    assert level_names_of(cluster) == ["node", "switch1"]
    assert _conf_error(text, topology="ring") == [
        'topology: "ring" was asked for but the file has no ring definitions (it has: tree, block)'
    ]
    assert _conf_error(text, topology="torus") == ['topology: "torus" is not one of "tree", "block", "ring"']


def test_blocks_without_blocksizes_use_slurm_defaults() -> None:
    text = "".join(f"BlockName=b{i} Nodes=n[{4 * i + 1}-{4 * i + 4}]\n" for i in range(5))
    cluster, warnings = parse_topology_conf(text, "b.conf")
    check_common(cluster)
    assert level_names_of(cluster) == ["node", "block", "block_x2", "block_x4", "block_x8"]
    assert domain_sizes(cluster, "block_x2") == Counter({"b[0-1]": 8, "b[2-3]": 8, "b4": 4})
    assert domain_sizes(cluster, "block_x4") == Counter({"b[0-3]": 16, "b4": 4})
    assert domain_sizes(cluster, "block_x8") == Counter({"b[0-4]": 20})
    assert warnings == [
        'the last block_x2 domain "b4" has only 1 of 2 blocks',
        'the last block_x4 domain "b4" has only 1 of 4 blocks',
        'the last block_x8 domain "b[0-4]" has only 5 of 8 blocks',
    ]


def test_blocksizes_larger_than_the_cluster_are_dropped() -> None:
    text = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4,8,16,32\n"
    cluster, warnings = parse_topology_conf(text, "b.conf")
    assert level_names_of(cluster) == ["node", "block", "block_x2"]
    assert warnings == ["BlockSizes 16, 32 ignored: 8 nodes (2 x the base block) already span all 2 blocks"]


def test_level_names_rules() -> None:
    text = "SwitchName=s0 Nodes=n1\nSwitchName=s1 Nodes=n2\n"
    assert _conf_error(text, level_names=["node"]) == [
        'level_names[0]: "node" is the host level; choose another name'
    ]
    with pytest.raises(InputError, match='the name "cluster" is taken'):
        parse_topology_conf(text, "t.conf", level_names=["cluster"])
    cluster, _ = parse_topology_conf(text, "t.conf", level_names=["tor"])
    assert level_names_of(cluster) == ["node", "tor", "cluster"]


def test_ring_longer_than_slurm_allows_is_a_warning() -> None:
    cluster, warnings = parse_topology_conf("RingName=r Nodes=n[1-17]\n", "r.conf")
    assert level_names_of(cluster) == ["node", "ring"]
    assert warnings == ['ring "r" has 17 nodes; Slurm accepts at most 16 per ring']


# --------------------------------------------------------------------------------- no raw exceptions


_conf_alphabet = st.sampled_from(
    [
        "SwitchName=",
        "Switches=",
        "Nodes=",
        "BlockName=",
        "BlockSizes=",
        "RingName=",
        "LinkSpeed=",
        "s0",
        "s1",
        "n[1-4]",
        "n[4-1]",
        "[",
        "]",
        ",",
        " ",
        "\n",
        "#",
        "\\",
        '"',
        "8",
        "16",
        "=",
        "x",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_conf_alphabet, max_size=40).map("".join))
def test_conf_never_leaks_a_raw_exception(text: str) -> None:
    try:
        cluster, _ = parse_topology_conf(text, "fuzz.conf")
    except InputError as err:
        assert err.problems
    else:
        check_common(cluster)
