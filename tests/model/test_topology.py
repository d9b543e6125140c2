"""placement.model.topology: structure, lookups, distances, intra-node codes and every structural error of `build`."""

from __future__ import annotations

import pytest

from placement.errors import InputError
from placement.model.devices import HostSpec, NodeType
from placement.model.links import DEFAULT_INTRA_NODE_TIERS, Level, Tier, intra_node_tier
from placement.model.topology import Topology
from placement.sim.scenarios import A100_PCIE_PAIRS, DGX1_MATRIX, dgx1_node
from tests.conftest import LEAF_TIER, NODE_TIER, SPINE_TIER, tree

LEVELS = [Level("node", NODE_TIER), Level("leaf", LEAF_TIER), Level("spine", SPINE_TIER)]


def _build_error(levels: list[Level], hosts: list[HostSpec]) -> str:
    with pytest.raises(InputError) as info:
        Topology.build("c", levels, hosts, source="c.yaml")
    return str(info.value)


def test_devices_ids_and_indices(small_tree: Topology) -> None:
    t = small_tree
    assert t.num_devices == 16
    assert [d.id for d in t.devices[:5]] == ["h0/gpu0", "h0/gpu1", "h0/gpu2", "h0/gpu3", "h1/gpu0"]
    d = t.devices[13]
    assert (d.index, d.id, d.host, d.host_index, d.local_index, d.kind, d.rail) == (
        13,
        "h3/gpu1",
        "h3",
        3,
        1,
        "gpu",
        None,
    )
    assert t.level_names == ("node", "leaf", "spine")
    assert t.device_index("h2/gpu0") == 8 and t.device_index("h9/gpu0") is None
    assert t.kinds() == ("gpu",)


def test_domains_parents_and_children(small_tree: Topology) -> None:
    t = small_tree
    assert t.domain_names == (("h0", "h1", "h2", "h3"), ("l0", "l1"), ("spine",))
    assert t.parent == ((0, 0, 1, 1), (0, 0))
    assert t.children[1] == ((0, 1), (2, 3)) and t.children[2] == ((0, 1),)
    assert t.devices_in_domain[1][1] == tuple(range(8, 16))
    assert t.domain_column(1) == (0,) * 8 + (1,) * 8
    assert t.domain_of(5, 0) == 1 and t.domain_of(5, 1) == 0 and t.domain_of(15, 2) == 0


def test_lca_levels(small_tree: Topology) -> None:
    t = small_tree
    assert t.lca_level(0, 3) == 0  # one host
    assert t.lca_level(0, 4) == 1  # h0, h1 share leaf l0
    assert t.lca_level(0, 8) == 2  # leaves meet at the spine
    assert t.group_lca_level([5]) == 0 and t.group_lca_level([]) == 0
    assert t.group_lca_level([0, 1, 2]) == 0
    assert t.group_lca_level([0, 1, 4]) == 1
    assert t.group_lca_level([0, 4, 12]) == 2


def test_resolve_selectors(small_tree: Topology) -> None:
    t = small_tree
    assert t.resolve("h1/gpu2") == (6,)
    assert t.resolve("h1") == (4, 5, 6, 7)
    assert t.resolve("l1") == tuple(range(8, 16))
    assert t.resolve("leaf:l0") == tuple(range(8))
    assert t.resolve("spine") == tuple(range(16))
    with pytest.raises(KeyError) as info:
        t.resolve("h7")
    assert info.value.args[0] == "unknown device, host or domain 'h7'"
    with pytest.raises(KeyError) as info:
        t.resolve("leaf:l9")
    assert info.value.args[0] == "no leaf named 'l9'"
    with pytest.raises(KeyError) as info:
        t.level_index("rack")
    assert info.value.args[0] == "unknown level 'rack'; levels are ['node', 'leaf', 'spine']"


def test_resolve_ambiguous_name_asks_for_a_level() -> None:
    nt = NodeType("t", 2)
    t = Topology.build("c", LEVELS, [HostSpec("x", {"leaf": "x"}, nt), HostSpec("y", {"leaf": "x"}, nt)])
    with pytest.raises(KeyError) as info:
        t.resolve("x")
    assert info.value.args[0] == "'x' names domains at several levels; write one of node:x, leaf:x"
    assert t.resolve("leaf:x") == (0, 1, 2, 3) and t.resolve("node:x") == (0, 1)


def test_top_domain_may_stay_implicit() -> None:
    nt = NodeType("t", 1)
    t = Topology.build("c", LEVELS, [HostSpec("a", {"leaf": "l0"}, nt), HostSpec("b", {"leaf": "l1"}, nt)])
    assert t.domain_names[2] == ("spine",) and t.lca_level(0, 1) == 2


def test_intra_node_tier_codes() -> None:
    table = DEFAULT_INTRA_NODE_TIERS
    assert intra_node_tier("NV12", table) == Tier(300.0, 1.0)  # 12 links x 25 GB/s
    assert intra_node_tier("NV1", table) == Tier(25.0, 1.0)
    assert intra_node_tier("SYS", table) == Tier(10.0, 4.0)
    assert intra_node_tier("SOC", table) == Tier(10.0, 4.0)  # legacy name of SYS
    assert intra_node_tier("PIX", table) == Tier(24.0, 2.0)
    custom = dict(table) | {"NV": Tier(20.0, 0.5), "SYS": Tier(6.0, 5.0)}
    assert intra_node_tier("NV18", custom) == Tier(360.0, 0.5)
    assert intra_node_tier("SOC", custom) == Tier(6.0, 5.0)
    with pytest.raises(KeyError):
        intra_node_tier("QPI", table)


def test_pair_tier_with_and_without_matrix() -> None:
    nt = NodeType("pcie", 8, "A100", tuple(tuple(r.split()) for r in A100_PCIE_PAIRS))
    t = Topology.build("c", LEVELS[:2], [HostSpec("a", {}, nt), HostSpec("b", {}, nt)])
    assert t.pair_code(0, 1) == "NV12" and t.pair_code(0, 8) is None
    assert t.pair_tier(0, 1) == (Tier(300.0, 1.0), "node:NV12")
    assert t.pair_tier(0, 2) == (DEFAULT_INTRA_NODE_TIERS["NODE"], "node:NODE")
    assert t.pair_tier(0, 4) == (DEFAULT_INTRA_NODE_TIERS["SYS"], "node:SYS")
    assert t.pair_tier(0, 8) == (LEAF_TIER, "leaf")
    plain = tree()
    assert plain.pair_tier(0, 1) == (NODE_TIER, "node") and plain.pair_tier(0, 12) == (SPINE_TIER, "spine")


def test_uniform_hosts() -> None:
    uniform = NodeType(
        "nvs",
        4,
        matrix=tuple(
            tuple(r.split())
            for r in ("X NV18 NV18 NV18", "NV18 X NV18 NV18", "NV18 NV18 X NV18", "NV18 NV18 NV18 X")
        ),
    )
    mixed = NodeType("dgx1", 8, matrix=tuple(tuple(r.split()) for r in DGX1_MATRIX))
    t = Topology.build(
        "c",
        LEVELS[:2],
        [HostSpec("a", {}, uniform), HostSpec("b", {}, mixed), HostSpec("c", {}, NodeType("p", 2))],
    )
    assert t.uniform_hosts == (True, False, True)
    assert dgx1_node(2).uniform_hosts == (False, False)


def test_tier_scaled() -> None:
    assert Tier(100.0, 3.0).scaled(2.0) == Tier(50.0, 3.0)


def test_intra_node_tiers_override_is_merged_with_defaults() -> None:
    t = Topology.build(
        "c", LEVELS[:1], [HostSpec("a", {}, NodeType("t", 2))], intra_node_tiers={"SYS": Tier(8.0, 6.0)}
    )
    assert (
        t.intra_node_tiers["SYS"] == Tier(8.0, 6.0)
        and t.intra_node_tiers["PIX"] == DEFAULT_INTRA_NODE_TIERS["PIX"]
    )


# ---- structural errors: message per rule, and all of them at once ----------------------------------------------


def test_error_host_listed_twice() -> None:
    nt = NodeType("t", 8)
    msg = _build_error(LEVELS[:2], [HostSpec("a", {}, nt), HostSpec("b", {}, nt), HostSpec("a", {}, nt)])
    assert msg == "c.yaml: hosts[2].name: host 'a' is listed twice (first at hosts[0])"


def test_error_single_level_with_several_hosts() -> None:
    # with one level the hosts are the top domains: cross-host pairs would otherwise be priced at the host tier
    nt = NodeType("t", 8)
    msg = _build_error(LEVELS[:1], [HostSpec("a", {}, nt), HostSpec("b", {}, nt)])
    assert msg == (
        "c.yaml: levels[0]: the top level 'node' has 2 domains (a, b); "
        "the top level must be one domain: add a level above it"
    )
    one = Topology.build("c", LEVELS[:1], [HostSpec("a", {}, nt)])
    assert one.num_devices == 8


def test_error_top_level_with_several_domains() -> None:
    nt = NodeType("t", 1)
    hosts = [HostSpec(f"h{i}", {"leaf": f"l{i}", "spine": f"s{i}"}, nt) for i in range(5)]
    msg = _build_error(LEVELS, hosts)
    assert msg == (
        "c.yaml: levels[2]: the top level 'spine' has 5 domains (s0, s1, s2, s3...); "
        "the top level must be one domain: add a level above it"
    )


def test_error_domain_with_two_parents() -> None:
    nt = NodeType("t", 1)
    hosts = [HostSpec("a", {"leaf": "l0", "spine": "s"}, nt), HostSpec("b", {"leaf": "l0", "spine": "t"}, nt)]
    levels = [*LEVELS, Level("core", Tier(5.0, 20.0))]
    with pytest.raises(InputError) as info:
        Topology.build(
            "c", levels, [HostSpec(h.name, {**h.domains, "core": "core"}, nt) for h in hosts], source="c.yaml"
        )
    assert str(info.value) == (
        "c.yaml: hosts[1].domains.spine: leaf 'l0' is placed under spine 't' here but under 's' "
        "elsewhere; a domain has one parent"
    )


def test_all_structural_errors_are_reported_together() -> None:
    bad_matrix = NodeType("m", 2, matrix=(("X", "NV4"), ("NV2", "X")))
    unknown_code = NodeType("u", 2, matrix=(("X", "QPI"), ("QPI", "X")))
    levels = [Level("node", Tier(0.0, 1.0)), Level("node", Tier(10.0, -1.0)), Level("spine", SPINE_TIER)]
    hosts = [
        HostSpec("a/b", {"leaf": "l0"}, NodeType("t", 0)),
        HostSpec("c", {"rack": "r"}, NodeType("t", 2, rails=(0,))),
        HostSpec("d", {"node": "x"}, bad_matrix),
        HostSpec("e", {"node": "x"}, unknown_code),
        HostSpec("f", {"node": "x"}, NodeType("w", 2, matrix=(("X",),))),
    ]
    with pytest.raises(InputError) as info:
        Topology.build("c", levels, hosts, source="c.yaml")
    got = [str(p) for p in info.value.problems]
    assert got == [
        "levels[0].bandwidth_gbps: must be > 0, got 0",
        "levels[1].name: level 'node' is listed twice; level names must be unique",
        "levels[1].latency_us: must be >= 0, got -1",
        "hosts[0].name: 'a/b' is not a valid host name (non-empty, no '/')",
        "hosts[0].devices: must be >= 1, got 0",
        "hosts[0].domains: unknown level(s) ['leaf']; the levels above the host are ['node', 'spine']",
        "hosts[0].domains.node: missing; every host names its domain at each level",
        "hosts[1].domains: unknown level(s) ['rack']; the levels above the host are ['node', 'spine']",
        "hosts[1].domains.node: missing; every host names its domain at each level",
        "hosts[1].rails: has 1 entries for 2 devices",
        "hosts[2].matrix[0][1]: 'NV4' differs from [1][0] 'NV2'; the matrix must be symmetric",
        "hosts[2].matrix[1][0]: 'NV2' differs from [0][1] 'NV4'; the matrix must be symmetric",
        "hosts[3].matrix[0][1]: unknown link code 'QPI'; known: NV#, PIX, PXB, PHB, NODE, SYS, SOC",
        "hosts[3].matrix[1][0]: unknown link code 'QPI'; known: NV#, PIX, PXB, PHB, NODE, SYS, SOC",
        "hosts[4].matrix: must be 2x2 for 2 devices",
    ]
    assert str(info.value).startswith(
        "c.yaml: 15 error(s)\n  - levels[0].bandwidth_gbps: must be > 0, got 0\n"
    )


def test_errors_no_levels_and_no_hosts() -> None:
    assert _build_error([], []) == "c.yaml: levels: at least one level (the host level) is required"
    assert _build_error(LEVELS[:1], []) == "c.yaml: hosts: the cluster has no hosts"
