"""placement.cost.evaluate: the v1 alpha-beta formulas with hand-computed numbers, paths (tiers, matrices, degradation,
rails) and `surrogate_report` with its breakdown; `evaluate` (step model v2) on the same cases; plus the showcase
of the issue (DGX H100, TP=8 split over two nodes). The v2 algorithms in detail: tests/cost/test_step_model.py."""

from __future__ import annotations

import math

import pytest

from placement.cost.evaluate import evaluate
from placement.cost.paths import Path, group_path, pair_path
from placement.cost.report import CostReport, InvalidMappingError
from placement.cost.surrogate import (
    collective_seconds,
    group_seconds,
    p2p_seconds,
    surrogate_report,
    surrogate_seconds,
)
from placement.io.native import load_cluster, load_job
from placement.model.job import CollectiveKind, Constraints, Edge, Group, Job
from placement.model.links import RailPolicy, Tier
from placement.model.state import ClusterState, Uplink
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.model.validate import validate
from placement.sim.scenarios import A100_PCIE_PAIRS, DGX1_MATRIX
from tests.conftest import EXAMPLES, tree

AR, AG, RS, A2A = (
    CollectiveKind.ALL_REDUCE,
    CollectiveKind.ALL_GATHER,
    CollectiveKind.REDUCE_SCATTER,
    CollectiveKind.ALL_TO_ALL,
)
P100 = Path(100.0, 10.0, "x", 1)  # 100 GB/s, 10 us
EMPTY = ClusterState()


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-12, abs=0.0)


# ---- formulas ---------------------------------------------------------------------------------------------------


def test_ring_all_reduce_volume_and_latency_steps() -> None:
    # 2(n-1)/n * S = 1.5e9 bytes at 100 GB/s = 15 ms, plus 2(n-1) = 6 steps of 10 us
    assert collective_seconds(AR, 4, 1e9, 1, 1.0, P100) == approx(0.015 + 6 * 10e-6)
    assert collective_seconds(AR, 2, 1e9, 1, 1.0, P100) == approx(0.010 + 2 * 10e-6)


@pytest.mark.parametrize("kind", [AG, RS, A2A])
def test_gather_scatter_and_all_to_all_volume(kind: CollectiveKind) -> None:
    # (n-1)/n * S = 0.75e9 bytes = 7.5 ms, in n-1 = 3 steps
    assert collective_seconds(kind, 4, 1e9, 1, 1.0, P100) == approx(0.0075 + 3 * 10e-6)


def test_count_and_exposure_multiply() -> None:
    one = collective_seconds(AR, 8, 3e8, 1, 1.0, P100)
    assert collective_seconds(AR, 8, 3e8, 12, 0.25, P100) == approx(3 * one)
    assert collective_seconds(AR, 8, 3e8, 0, 1.0, P100) == 0.0
    assert collective_seconds(AR, 8, 3e8, 5, 0.0, P100) == 0.0
    assert collective_seconds(AR, 1, 3e8, 5, 1.0, P100) == 0.0  # a group of one moves nothing


def test_p2p_latency_plus_size_over_bandwidth() -> None:
    path = Path(50.0, 5.0, "leaf", 1)
    assert p2p_seconds(1e9, 1, 1.0, path) == approx(5e-6 + 0.02)
    assert p2p_seconds(1e9, 4, 0.5, path) == approx(2 * (5e-6 + 0.02))
    assert p2p_seconds(1e9, 0, 1.0, path) == 0.0


def test_group_seconds_uses_the_group_fields() -> None:
    g = Group("tp", AR, (0, 1, 2, 3), 1e9, 2.0, 0.5)
    assert group_seconds(g, P100) == approx(0.015 + 6 * 10e-6)


# ---- paths ------------------------------------------------------------------------------------------------------


def test_slowest_tier_spanned(small_tree: Topology) -> None:
    t = small_tree  # node 400/1, leaf 40/4, spine 10/10; 4 GPUs per host, 2 hosts per leaf
    assert group_path(t, EMPTY, [0, 1, 2, 3]) == Path(400.0, 1.0, "node", 0)
    assert group_path(t, EMPTY, [0, 4]) == Path(40.0, 4.0, "leaf", 1)
    assert group_path(t, EMPTY, [0, 1, 4, 5]) == Path(40.0, 4.0, "leaf", 1)
    assert group_path(t, EMPTY, [0, 4, 8]) == Path(10.0, 10.0, "spine", 2)
    assert pair_path(t, EMPTY, 0, 1) == Path(400.0, 1.0, "node", 0)
    assert pair_path(t, EMPTY, 3, 12) == Path(10.0, 10.0, "spine", 2)


def _pcie_pairs() -> Topology:
    """Two 8x A100 PCIe hosts (NVLink bridges in pairs) on a 25 GB/s, 5 us leaf."""
    return tree(hosts_per_leaf=2, leaves=1, gpus=8, matrix=A100_PCIE_PAIRS, leaf_tier=Tier(25.0, 5.0))


def test_intra_node_codes_a100_pcie_pairs() -> None:
    t = _pcie_pairs()
    nv12 = group_path(t, EMPTY, [0, 1])
    node = group_path(t, EMPTY, [0, 1, 2, 3])
    sys_ = group_path(t, EMPTY, [0, 4])
    assert nv12 == Path(300.0, 1.0, "node:NV12", 0)  # 12 NVLinks x 25 GB/s
    assert node == Path(14.0, 3.5, "node:NODE", 0)  # the worst pair of the group
    assert sys_ == Path(10.0, 4.0, "node:SYS", 0)
    # TP=2 all-reduce of 100 MB: 2 steps and S over the path
    assert group_seconds(Group("tp", AR, (0, 1), 1e8, 1), nv12) == approx(2e-6 + 1e8 / 300e9)
    assert group_seconds(Group("tp", AR, (0, 4), 1e8, 1), sys_) == approx(8e-6 + 1e8 / 10e9)
    # the bridged pair is 30x faster in bandwidth than the pair across sockets
    assert nv12.bandwidth_gbps / sys_.bandwidth_gbps == 30


def test_intra_node_codes_of_a_multi_host_group() -> None:
    t = _pcie_pairs()
    # NV12 pairs on two hosts: the leaf (25 GB/s) is the bottleneck; latency is the worst of the two paths
    assert group_path(t, EMPTY, [0, 1, 8, 9]) == Path(25.0, 5.0, "leaf", 1)
    # SYS pairs (10 GB/s) are slower than the leaf: they are the bottleneck
    assert group_path(t, EMPTY, [0, 4, 8, 12]) == Path(10.0, 5.0, "node:SYS", 1)
    # one member per host: only the leaf
    assert group_path(t, EMPTY, [0, 8]) == Path(25.0, 5.0, "leaf", 1)


def test_dgx1_cube_mesh_codes() -> None:
    t = tree(hosts_per_leaf=1, leaves=1, gpus=8, matrix=DGX1_MATRIX)
    assert group_path(t, EMPTY, [0, 1]).bandwidth_gbps == 25.0  # NV1
    assert group_path(t, EMPTY, [0, 3]).bandwidth_gbps == 50.0  # NV2
    assert group_path(t, EMPTY, [0, 5]).bandwidth_gbps == 10.0  # SYS
    assert group_path(t, EMPTY, [0, 1, 2, 3]).tier == "node:NV1"


def test_host_tier_slower_than_the_network_is_still_spanned() -> None:
    # PCIe hosts (16 GB/s, no matrix) under a 50 GB/s leaf: a TP group split 4+4 over two hosts still moves its
    # intra-host pairs over PCIe, so splitting cannot be cheaper than one host
    t = tree(hosts_per_leaf=2, leaves=1, gpus=8, node_tier=Tier(16.0, 3.0), leaf_tier=Tier(50.0, 5.0))
    one = group_path(t, EMPTY, list(range(8)))
    split = group_path(t, EMPTY, [0, 1, 2, 3, 8, 9, 10, 11])
    assert one == Path(16.0, 3.0, "node", 0)
    assert split == Path(16.0, 5.0, "node", 1)
    assert group_path(t, EMPTY, [0, 8]) == Path(50.0, 5.0, "leaf", 1)  # no co-hosted pair: the leaf only
    g = Group("tp", AR, tuple(range(8)), 1e8, 10)
    assert group_seconds(g, split) >= group_seconds(g, one)


def test_degraded_device_slows_only_its_groups(small_tree: Topology) -> None:
    st = ClusterState(device_slowdown={3: 2.0})
    assert group_path(small_tree, st, [0, 1, 2, 3]).bandwidth_gbps == 200.0
    assert group_path(small_tree, st, [4, 5, 6, 7]).bandwidth_gbps == 400.0
    assert group_path(small_tree, st, [3, 8]).bandwidth_gbps == 5.0
    assert pair_path(small_tree, st, 3, 2).bandwidth_gbps == 200.0
    assert pair_path(small_tree, st, 0, 2).bandwidth_gbps == 400.0
    g = Group("tp", AR, (0, 1, 2, 3), 4e8, 1)
    fast, slow = group_path(small_tree, EMPTY, [0, 1, 2, 3]), group_path(small_tree, st, [0, 1, 2, 3])
    # latency is unchanged; the bandwidth term doubles
    assert group_seconds(g, slow) - group_seconds(g, fast) == approx(1.5 * 4e8 / 400e9)


def test_degraded_uplink_of_a_leaf_only_for_groups_crossing_it(small_tree: Topology) -> None:
    st = ClusterState(uplink_slowdown={Uplink(1, 0): 4.0})  # leaf l0's uplinks to the spine
    assert group_path(small_tree, st, [0, 1]).bandwidth_gbps == 400.0  # inside a host of l0
    assert group_path(small_tree, st, [0, 4]).bandwidth_gbps == 40.0  # inside l0
    assert group_path(small_tree, st, [8, 12]).bandwidth_gbps == 40.0  # inside l1
    assert group_path(small_tree, st, [0, 8]).bandwidth_gbps == 2.5  # crosses l0's uplink: 10 / 4
    assert group_path(small_tree, st, [0, 4, 8, 12]).bandwidth_gbps == 2.5
    assert pair_path(small_tree, st, 12, 1).bandwidth_gbps == 2.5
    node_up = ClusterState(uplink_slowdown={Uplink(0, 1): 2.0})  # host h1's NIC path
    assert group_path(small_tree, node_up, [4, 5]).bandwidth_gbps == 400.0
    assert group_path(small_tree, node_up, [0, 4]).bandwidth_gbps == 20.0


def test_degraded_intra_node_link(small_tree: Topology) -> None:
    st = ClusterState(pair_slowdown={(0, 1): 4.0})
    assert group_path(small_tree, st, [0, 1, 2]).bandwidth_gbps == 100.0
    assert group_path(small_tree, st, [0, 2]).bandwidth_gbps == 400.0
    assert pair_path(small_tree, st, 1, 0).bandwidth_gbps == 100.0


def test_rail_mismatch_penalty() -> None:
    rp = RailPolicy(extra_latency_us=3.0, bandwidth_factor=0.5)
    t = tree(rails=(0, 1, 2, 3), rail_policy=rp)
    assert group_path(t, EMPTY, [0, 4]) == Path(40.0, 4.0, "leaf", 1)  # gpu0 of h0 and h1: same rail
    assert group_path(t, EMPTY, [0, 5]) == Path(20.0, 7.0, "leaf", 1)  # rails 0 and 1: extra hop
    assert group_path(t, EMPTY, [0, 1, 4, 5]) == Path(40.0, 4.0, "leaf", 1)  # both hosts use rails {0, 1}
    assert group_path(t, EMPTY, [0, 1, 4, 6]) == Path(20.0, 7.0, "leaf", 1)  # {0, 1} vs {0, 2}
    assert group_path(t, EMPTY, [0, 1]) == Path(400.0, 1.0, "node", 0)  # inside a host: no rail
    assert pair_path(t, EMPTY, 0, 4) == Path(40.0, 4.0, "leaf", 1)
    assert pair_path(t, EMPTY, 0, 13) == Path(5.0, 13.0, "spine", 2)
    no_policy = tree(rails=(0, 1, 2, 3))
    assert group_path(no_policy, EMPTY, [0, 5]) == Path(40.0, 4.0, "leaf", 1)


# ---- evaluate ---------------------------------------------------------------------------------------------------


def _explicit_job(**cons: object) -> Job:
    groups = (
        Group("tp", AR, (0, 1), 4e8, 2.0),
        Group("tp", AR, (2, 3), 4e8, 2.0),
        Group("dp", AG, (0, 2), 1e9, 1.0, 0.5),
    )
    edges = (Edge("pp", 1, 3, 2e8, 3.0),)
    return Job("j", 4, groups=groups, edges=edges, constraints=Constraints(**cons))  # type: ignore[arg-type]


def test_surrogate_report_breakdown_by_hand(small_tree: Topology) -> None:
    job = _explicit_job(prefer={"tp": "node", "pp": "node"})
    rep = surrogate_report(
        small_tree, EMPTY, job, [0, 1, 4, 8]
    )  # tp (0,1) on h0; tp (2,3) on h1 + h2 (spine)
    tp_node = 2 * (2e-6 + 4e8 / 400e9)
    tp_spine = 2 * (2 * 10e-6 + 4e8 / 10e9)
    dp_leaf = 0.5 * (4e-6 + 0.5e9 / 40e9)
    pp_spine = 3 * (10e-6 + 2e8 / 10e9)
    assert rep.by_label_tier == {
        ("tp", "node"): approx(tp_node),
        ("tp", "spine"): approx(tp_spine),
        ("dp", "leaf"): approx(dp_leaf),
        ("pp", "spine"): approx(pp_spine),
    }
    assert rep.by_label == {"tp": approx(tp_node + tp_spine), "dp": approx(dp_leaf), "pp": approx(pp_spine)}
    assert rep.by_tier == {
        "node": approx(tp_node),
        "spine": approx(tp_spine + pp_spine),
        "leaf": approx(dp_leaf),
    }
    assert rep.seconds == approx(tp_node + tp_spine + dp_leaf + pp_spine)
    assert rep.preference_misses == {"tp": 1, "pp": 1}
    d = rep.to_dict()
    assert d["seconds_per_step"] == rep.seconds
    assert list(d["by_label"]) == ["dp", "pp", "tp"]  # type: ignore[call-overload]
    assert d["by_label_tier"][0] == {
        "label": "dp",
        "tier": "leaf",
        "seconds": rep.by_label_tier[("dp", "leaf")],
    }  # type: ignore[index]
    assert d["preference_misses"] == {"pp": 1, "tp": 1}
    assert rep.surrogate_seconds == rep.seconds == rep.step_seconds == rep.comm_seconds_total


def test_evaluate_v2_breakdown_by_hand(small_tree: Topology) -> None:
    """Same job under the step model: phases in sequence, the slowest group of a label decides its phase.

    small_tree: node 400 GB/s 1 us, leaf 40/4, spine 10/10; by default each host has 4 NICs of the leaf tier
    (40 GB/s), each leaf's uplinks carry 8 devices x 10 GB/s = 80 GB/s, and a device's flow across the spine runs
    at the spine tier (10 GB/s). Alone on their links, groups cost what v1 says; the step differs in concurrency.
    """
    job = _explicit_job(prefer={"tp": "node", "pp": "node"})
    mapping = [0, 1, 4, 8]
    rep = evaluate(small_tree, EMPTY, job, mapping)
    # tp (0,1) on h0: ring of 2 = S over NVSwitch-like 400 GB/s, 2 steps of 1 us; x2 per step
    tp_node = 2 * (2e-6 + 4e8 / 400e9)
    # tp (2,3) on h1 and h2 (leaves l0, l1): ring of 2 across the spine at 10 GB/s, 2 steps of 10 us
    tp_spine = 2 * (2 * 10e-6 + 4e8 / 10e9)
    # dp (0,2) all-gather inside leaf l0: (n-1)/n S over one NIC, 1 step of 4 us; half of it exposed
    dp = 4e-6 + 0.5e9 / 40e9
    # pp 1->3 across the spine: 3 transfers of 2e8 bytes at 10 GB/s, 10 us each
    pp = 3 * (10e-6 + 2e8 / 10e9)
    assert [(p.name, p.algorithm, p.tier) for p in rep.phases] == [
        ("tp", "ring", "spine"),
        ("pp", "p2p", "spine"),
        ("dp", "ring", "leaf"),
    ]
    assert [p.seconds for p in rep.phases] == [approx(max(tp_node, tp_spine)), approx(pp), approx(dp)]
    assert [p.exposed_seconds for p in rep.phases] == [approx(tp_spine), approx(pp), approx(0.5 * dp)]
    assert rep.phases[0].critical == "tp[1] ranks 2,3 (2)"
    assert (
        rep.comm_seconds == approx(tp_spine + pp + 0.5 * dp) == rep.step_seconds
    )  # no model shape: no compute
    assert rep.comm_seconds_total == approx(tp_spine + pp + dp)
    assert rep.by_label == {"tp": approx(tp_spine), "pp": approx(pp), "dp": approx(0.5 * dp)}
    assert (rep.compute_seconds, rep.bubble_seconds, rep.tokens_per_s, rep.mfu) == (None, None, None, None)
    assert rep.preference_misses == {"tp": 1, "pp": 1}
    assert rep.surrogate_seconds == approx(surrogate_seconds(small_tree, EMPTY, mapping, job_traffic(job)))
    assert rep.surrogate_seconds == approx(surrogate_report(small_tree, EMPTY, job, mapping).seconds)


def test_evaluate_refuses_an_invalid_mapping(small_tree: Topology) -> None:
    st = ClusterState(occupied={8: "other"})
    with pytest.raises(InvalidMappingError) as info:
        evaluate(small_tree, st, _explicit_job(), [0, 0, 4, 8])
    assert info.value.violations == validate(small_tree, st, _explicit_job(), [0, 0, 4, 8])
    assert str(info.value) == (
        "the mapping breaks 2 hard rule(s):\n"
        "  - [one-rank-per-device] device h0/gpu0 holds ranks 0, 1\n"
        "  - [occupied] rank 3: device h2/gpu0 is occupied by job 'other'"
    )
    # check=False scores it anyway (the solver's internal use)
    assert evaluate(small_tree, st, _explicit_job(), [0, 0, 4, 8], check=False).seconds > 0


def test_cost_report_add() -> None:
    rep = CostReport()
    rep.add("tp", "node", 1.0)
    rep.add("tp", "leaf", 2.0)
    rep.add("dp", "leaf", 4.0)
    assert (rep.seconds, rep.by_label, rep.by_tier) == (
        7.0,
        {"tp": 3.0, "dp": 4.0},
        {"node": 1.0, "leaf": 6.0},
    )
    assert rep.by_label_tier == {("tp", "node"): 1.0, ("tp", "leaf"): 2.0, ("dp", "leaf"): 4.0}


# ---- the showcase -----------------------------------------------------------------------------------------


def test_showcase_dgx_h100_tp8_split_over_two_nodes_costs_more_than_three_times(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster, job_file = EXAMPLES / "dgx-h100-4node.yaml", EXAMPLES / "tp8-dp4.yaml"
    if not (cluster.is_file() and job_file.is_file()):
        pytest.skip("examples/dgx-h100-4node.yaml or examples/tp8-dp4.yaml is not in this checkout")
    topo, static = load_cluster(cluster)
    state = static or ClusterState()
    job = load_job(job_file)
    contiguous = list(range(32))  # TP group g on node g
    # TP group g: GPUs 0-3 of node g and GPUs 4-7 of node g+1 (mod 4): every TP group spans two nodes
    split = [((g + (k >= 4)) % 4) * 8 + k for g in range(4) for k in range(8)]
    assert sorted(split) == contiguous
    a = surrogate_report(topo, state, job, contiguous)
    b = surrogate_report(topo, state, job, split)
    assert set(a.by_label_tier) == {("tp", "node"), ("dp", "leaf")}
    assert set(b.by_label_tier) == {("tp", "leaf"), ("dp", "leaf")}
    assert b.seconds > 3 * a.seconds
    # by hand: TP all-reduce of S = 4096*4096*2 bytes over 8 ranks, 1024 times per step, 4 groups
    s = 4096 * 4096 * 2
    tp_node = 4 * 1024 * (14 * 2e-6 + 2 * 7 / 8 * s / 450e9)
    assert a.by_label["tp"] == approx(tp_node)
    assert math.isclose(b.by_label["dp"], a.by_label["dp"])  # DP groups span the leaf either way
    # step model v2: the 4 TP groups run at the same time, so the phase costs one group, not 4
    va, vb = evaluate(topo, state, job, contiguous), evaluate(topo, state, job, split)
    # step model v3: inside an HGX H100 node NCCL runs NVLS (NVLink SHARP): 25 us, each device's link carries S
    # once each way at nvlsEfficiency 0.85 of it, on 15 of NCCL's 16 NVLS channels (v2 priced the ring, as v1 does)
    assert va.phases[0].algorithm == "nvls"
    assert va.phases[0].seconds == approx(1024 * (25e-6 + s / (450e9 * 0.85 * 15 / 16)))
    assert va.phases[0].seconds < a.by_label["tp"] / 4
    # split: NCCL's ring (its tree is capped at 4 channels x 41.4/2 GB/s on H100): 2(n-1)/n S out of each host
    # per group, two TP halves share each host's 8 x 50 GB/s, 14 steps at the leaf's 5 us
    ring = 14 * 5e-6 + 2 * 2 * 7 / 8 * s / 400e9
    # v3: NVLSTree beats it (NVLink SHARP in each half, a tree between the 2 hosts: S out of each host per group,
    # over the 4 NICs of its 4 GPUs, 200 GB/s; 25 us + 2 tree steps of 5 us)
    nvlstree = 25e-6 + 2 * 5e-6 + max(s / 200e9, 2 * s / 400e9, s / (450e9 * 0.85 * 15 / 16))
    assert nvlstree < ring
    assert (vb.phases[0].algorithm, vb.phases[0].seconds) == ("nvlstree", approx(1024 * nvlstree))
    assert vb.step_seconds > va.step_seconds and vb.phases[0].seconds > 1.5 * va.phases[0].seconds
    assert capsys.readouterr() == ("", "")
