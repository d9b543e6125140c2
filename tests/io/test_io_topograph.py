"""NVIDIA topograph models and payloads: trees checked by hand against the model files, nesting rules, refusals."""

from __future__ import annotations

import pytest

from placement.errors import InputError
from placement.io.importers.topograph import parse_topograph, read_topograph
from tests.conftest import shared_file

TG = "topologies/cluster_fabric/nvidia_topograph/tests"


def hosts(fab: object) -> dict[str, dict[str, str]]:
    return {h["name"]: h["domains"] for h in fab.doc["hosts"]}  # type: ignore[attr-defined]


def test_medium_model_tree() -> None:
    fab = read_topograph(shared_file(f"{TG}/models/medium.yaml"))
    # sw3 > sw21, sw22 > sw11..sw14; blocks nvl1..nvl4 on sw11..sw14 (the leaf repeats the NVL block: folded)
    assert [lv["name"] for lv in fab.doc["levels"]] == ["node", "nvl", "spine", "core"]
    assert fab.roles == ["node", "accel", "switch", "switch"]
    # the NVLink domain is marked, so that NVLS runs across its trays
    assert [lv.get("nvlink", False) for lv in fab.doc["levels"]] == [False, True, False, False]
    h = hosts(fab)
    assert len(h) == 8
    assert h["1101"] == {"nvl": "nvl1", "spine": "sw21", "core": "sw3"}
    assert h["1402"] == {"nvl": "nvl4", "spine": "sw22", "core": "sw3"}


def test_dual_crossbar_drops_levels_that_do_not_nest() -> None:
    fab = read_topograph(shared_file(f"{TG}/models/dual-xclr-irregular.yaml"))
    assert [lv["name"] for lv in fab.doc["levels"]] == ["node", "nvl_sub", "nvl", "core"]
    assert [lv.get("nvlink", False) for lv in fab.doc["levels"]] == [False, True, True, False]
    assert any("level 'leaf' dropped" in w for w in fab.warnings)
    h = hosts(fab)
    assert len(h) == 255 and h["node0001"]["nvl"] == "domain-01" and h["node0001"]["nvl_sub"] == "rack-1-01"


def test_payloads_import_their_model_or_are_refused() -> None:
    fab = read_topograph(shared_file(f"{TG}/payloads/aws-sim-block.json"))
    assert len(hosts(fab)) == 8 and "medium.yaml" in fab.warnings[0]
    for name in ("test-tree.json", "example-netq.json"):
        with pytest.raises(InputError) as e:
            read_topograph(shared_file(f"{TG}/payloads/{name}"))
        assert len(e.value.problems) == 1 and "names no model file" in e.value.render()


def test_model_rule_violations() -> None:
    two_parents = (
        "switches:\n  a: {switches: [c]}\n  b: {switches: [c]}\nblocks:\n- switch: c\n  nodes: [n1]\n"
    )
    with pytest.raises(InputError, match="has two parents"):
        parse_topograph(two_parents)
    twice = "switches:\n  a: {switches: [c, d]}\nblocks:\n- {switch: c, nodes: [n1]}\n- {switch: d, nodes: ['n[1-2]']}\n"
    with pytest.raises(InputError, match="node 'n1' is also in blocks\\[0\\]"):
        parse_topograph(twice)
    with pytest.raises(InputError, match="unknown switch 'zz'"):
        parse_topograph("switches:\n  a: {switches: [c]}\nblocks:\n- {switch: zz, nodes: [n1]}\n")


def test_level_names_rename_bottom_up() -> None:
    fab = read_topograph(shared_file(f"{TG}/models/medium.yaml"), level_names=["rack", "pod", "dc"])
    assert [lv["name"] for lv in fab.doc["levels"]] == ["node", "rack", "pod", "dc"]
    with pytest.raises(InputError, match="has 2 name"):
        read_topograph(shared_file(f"{TG}/models/medium.yaml"), level_names=["a", "b"])


def test_netq_topology_graph() -> None:
    fab = read_topograph(shared_file(f"{TG}/output/netq/topologyGraph.json"))
    # net-unit-l1 links node21/24/22/2 (dgx-01..04), net-unit-l2 node12/19/25/7 (dgx-05..08); s1 above both
    assert [lv["name"] for lv in fab.doc["levels"]] == ["node", "leaf", "spine"]
    h = hosts(fab)
    assert h["dgx-01"] == {"leaf": "net-unit-l1", "spine": "net-unit-s1"}
    assert h["dgx-07"] == {"leaf": "net-unit-l2", "spine": "net-unit-s1"} and len(h) == 8
    with pytest.raises(InputError) as e:
        read_topograph(shared_file(f"{TG}/output/netq/computeNodes.json"))
    assert len(e.value.problems) == 1
