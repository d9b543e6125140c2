"""placement.sim.scenarios (mixed-random occupancy, explicit twins, p2p-ring jobs) and bench/scotch.py's file writers."""

from __future__ import annotations

import importlib.util
import random
import sys
from collections import Counter
from types import ModuleType

import pytest

from placement.cost.evaluate import evaluate
from placement.model.devices import HostSpec, NodeType
from placement.model.job import CollectiveKind, Job
from placement.model.links import Level, Tier
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.sim.scenarios import (
    explicit_twin,
    fat_tree,
    megatron_job,
    occupy,
    occupy_mixed_random,
    p2p_ring_job,
)
from tests.conftest import ROOT


def _scotch() -> ModuleType:
    name = "bench_scotch"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "scotch.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _busy_per_node(topo: Topology, state: ClusterState) -> Counter[int]:
    return Counter(topo.devices[d].host_index for d in state.occupied)


# ---- mixed-random occupancy -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.3, 0.6])
def test_mixed_random_hits_the_target_and_alternates_whole_and_partial_nodes(fraction: float) -> None:
    topo = fat_tree(4096)
    state = occupy_mixed_random(topo, fraction, seed=1)
    assert len(state.occupied) == round(fraction * topo.num_devices)
    busy = _busy_per_node(topo, state)
    whole = sum(1 for n in busy.values() if n == 8)
    partial = [n for n in busy.values() if n < 8]
    # half and half; the last node may be cut, turning one whole node into a partial one
    assert abs(whole - len(partial)) <= 2
    assert all(1 <= n <= 7 for n in partial)
    assert len(set(partial)) >= 5  # 1..7 drawn uniformly, not one fixed fragment size


def test_mixed_random_leaves_few_wholly_free_nodes() -> None:
    topo = fat_tree(4096)
    nodes = len(topo.host_names)
    mixed = nodes - len(_busy_per_node(topo, occupy_mixed_random(topo, 0.6, seed=1)))
    whole = nodes - len(_busy_per_node(topo, occupy(topo, 0.6, seed=1, mode="whole")))
    assert 0 < mixed < 0.6 * whole  # far fewer empty nodes than whole-node occupancy leaves (issue 8: ~113)


def test_mixed_random_is_deterministic_by_seed_and_reachable_through_occupy() -> None:
    topo = fat_tree(1024)
    a = occupy_mixed_random(topo, 0.6, seed=7)
    assert dict(a.occupied) == dict(occupy_mixed_random(topo, 0.6, seed=7).occupied)
    assert dict(a.occupied) == dict(occupy(topo, 0.6, seed=7, mode="mixed-random").occupied)
    assert set(a.occupied) != set(occupy_mixed_random(topo, 0.6, seed=8).occupied)


def test_occupy_names_the_modes_and_mixed_random_checks_the_fraction() -> None:
    topo = fat_tree(256)
    with pytest.raises(ValueError, match="mixed-random"):
        occupy(topo, 0.3, mode="fragmented")
    with pytest.raises(ValueError, match=r"fraction 1\.5"):
        occupy_mixed_random(topo, 1.5)
    assert occupy_mixed_random(topo, 0.0).occupied == {}
    assert len(occupy_mixed_random(topo, 1.0).occupied) == topo.num_devices


# ---- explicit twins and p2p-ring jobs -------------------------------------------------------------------------


def _job13b(tp: int, pp: int, dp: int) -> Job:
    return megatron_job(
        f"tp{tp}-pp{pp}-dp{dp}", tp=tp, pp=pp, dp=dp, hidden=5120, layers=40, exposure={"dp": 0.5}
    )


@pytest.mark.parametrize("shape", [(8, 4, 4), (4, 4, 8), (2, 8, 4)])
def test_explicit_twin_has_the_same_traffic_and_cost(shape: tuple[int, int, int]) -> None:
    job = _job13b(*shape)
    twin = explicit_twin(job)
    assert not twin.structured and twin.ranks == job.ranks and twin.name == job.name
    assert job_traffic(twin) == job_traffic(job)
    topo = fat_tree(256)
    state = occupy_mixed_random(topo, 0.3, seed=2)
    free = [d for d in range(topo.num_devices) if d not in state.occupied]
    mapping = random.Random(0).sample(free, job.ranks)
    a = evaluate(topo, state, job, mapping)
    b = evaluate(topo, state, twin, mapping)
    assert a.comm_seconds == pytest.approx(b.comm_seconds, rel=1e-12) and a.comm_seconds > 0
    assert a.by_label == pytest.approx(b.by_label, rel=1e-12)


def test_p2p_ring_job_turns_each_group_into_its_ring() -> None:
    job = _job13b(4, 2, 4)
    t = job_traffic(job)
    ring = p2p_ring_job(job)
    rt = job_traffic(ring)
    assert rt.groups == () and ring.ranks == job.ranks
    assert len(rt.edges) == sum(len(g.members) for g in t.groups) + len(t.edges)
    for g in t.groups:
        n = len(g.members)
        per_member = (2 * (n - 1) / n if g.kind is CollectiveKind.ALL_REDUCE else (n - 1) / n) * g.bytes
        out = {e.src: e for e in rt.edges if e.label == g.label and e.src in g.members and e.dst in g.members}
        assert sorted(out) == sorted(g.members)  # every member sends once, to the next one
        assert {out[m].dst for m in g.members} == set(g.members)
        assert all(
            out[m].bytes == pytest.approx(per_member)
            and out[m].count == g.count
            and out[m].exposed == g.exposed
            for m in g.members
        )
    assert [e for e in rt.edges if e.label == "pp"] == list(t.edges)


# ---- bench/scotch.py ------------------------------------------------------------------------------------------


def _tiny_tree() -> Topology:
    """2 leaves x 2 nodes x 4 devices; node 100 GB/s, leaf 25, top 10."""
    nt = NodeType("n4", 4, "gpu")
    hosts = [HostSpec(f"h{h}", {"leaf": f"l{h // 2}", "top": "top"}, nt) for h in range(4)]
    levels = [Level("node", Tier(100.0, 1.0)), Level("leaf", Tier(25.0, 2.0)), Level("top", Tier(10.0, 5.0))]
    return Topology.build("tiny", levels, hosts)


def test_scotch_graph_text_is_symmetric_scaled_and_padded() -> None:
    sc = _scotch()
    text = sc.graph_text(5, {(0, 1): 4.0, (1, 2): 1.0, (0, 2): 1e-9}, max_weight=100)
    lines = text.splitlines()
    assert lines[:3] == ["0", "5 6", "0 010"]
    rows = [list(map(int, ln.split())) for ln in lines[3:]]
    assert len(rows) == 5
    adj = {}
    for v, row in enumerate(rows):
        assert row[0] * 2 == len(row) - 1
        for i in range(row[0]):
            adj[(v, row[2 + 2 * i])] = row[1 + 2 * i]
    assert all(adj[(b, a)] == w for (a, b), w in adj.items())
    assert adj[(0, 1)] == 100 and adj[(1, 2)] == 25 and adj[(0, 2)] == 1  # heaviest = 100, none below 1
    assert rows[3] == [0] and rows[4] == [0]  # padding vertices are isolated
    with pytest.raises(ValueError, match="edge"):
        sc.graph_text(2, {(0, 2): 1.0})


def test_scotch_traffic_weights_keep_the_total_volume() -> None:
    sc = _scotch()
    t = job_traffic(_job13b(4, 2, 2))
    clique, ring = sc.traffic_weights(t, groups="clique"), sc.traffic_weights(t, groups="ring")
    assert sum(clique.values()) == pytest.approx(sum(ring.values()))
    assert all(a < b for a, b in clique)
    with pytest.raises(ValueError, match="groups"):
        sc.traffic_weights(t, groups="star")


def test_scotch_target_follows_the_tree_and_keeps_only_free_devices() -> None:
    sc = _scotch()
    topo = _tiny_tree()
    assert sc.tleaf_levels(topo) == [(2, 100), (2, 40), (4, 10)]  # root first; link cost 10 x fastest / bw
    term = sc.terminal_numbers(topo)
    assert sorted(term) == list(range(16))
    for a in range(16):
        for b in range(16):  # a shared node means a shared block of 4 terminals, a shared leaf of 8
            assert (term[a] // 4 == term[b] // 4) == (topo.lca_level(a, b) == 0)
            assert (term[a] // 8 == term[b] // 8) == (topo.lca_level(a, b) <= 1)
    free = [1, 2, 5, 9, 12]
    sub, tleaf = sc.target_text(topo, free).splitlines()
    assert sub.split() == ["sub", "5"] + [str(term[d]) for d in free]
    assert tleaf == "tleaf 3 2 100 2 40 4 10"
    assert sc.read_mapping("3\n0 4\n1 0\n2 1\n", 2, free) == [12, 1]  # vertex 2 is padding
    with pytest.raises(ValueError, match="terminal 7"):
        sc.read_mapping("1\n0 7\n", 1, free)


def test_scotch_tleaf_refuses_a_non_uniform_tree() -> None:
    sc = _scotch()
    nt = NodeType("n4", 4, "gpu")
    hosts = [HostSpec(f"h{h}", {"leaf": "l0" if h < 3 else "l1", "top": "top"}, nt) for h in range(4)]
    levels = [Level("node", Tier(100.0, 1.0)), Level("leaf", Tier(25.0, 2.0)), Level("top", Tier(10.0, 5.0))]
    topo = Topology.build("odd", levels, hosts)
    with pytest.raises(ValueError, match="uniform"):
        sc.tleaf_levels(topo)


def test_scotch_maps_a_tiny_job_onto_free_devices() -> None:
    sc = _scotch()
    if sc.scotch_binary() is None:
        pytest.skip("scotch_gmap is not installed (Debian package scotch); the benchmark shows n/a")
    topo = _tiny_tree()
    state = ClusterState(occupied={d: "other" for d in (0, 1, 2, 3, 4, 8, 9)})
    job = explicit_twin(megatron_job("tiny", tp=4, pp=1, dp=2, kind=None, hidden=1024, layers=4))
    res = sc.scotch_map(topo, state, job, time_limit_s=30)
    assert res.status == "ok", res.detail
    assert res.mapping is not None and len(set(res.mapping)) == job.ranks
    assert not set(res.mapping) & set(state.occupied)
    assert res.seconds == pytest.approx(evaluate(topo, state, job, list(res.mapping)).comm_seconds)


def test_fat_tree_4096_is_the_issue_8_cluster() -> None:
    topo = fat_tree(4096)
    assert topo.level_names == ("node", "leaf", "spine", "core")
    assert [lv.tier.bandwidth_gbps for lv in topo.levels] == [450.0, 50.0, 25.0, 12.5]
    assert {len(d) for d in topo.devices_in_domain[0]} == {8}  # 8 GPUs per node
    assert {len(c) for c in topo.children[1]} == {16}  # 16 nodes per leaf
    assert {len(c) for c in topo.children[2]} == {8}  # 8 leaves per spine
    assert [len(c) for c in topo.children[3]] == [4]  # 4 spines under one core
