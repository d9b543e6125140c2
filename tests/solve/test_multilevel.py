"""Mt-KaHyPar multilevel candidates: valid mappings with whole units on fragmented fat trees, no worse than
first-fit on clustered traffic, deterministic, and [] where they do not apply."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from placement.cost.surrogate import surrogate_seconds
from placement.model.job import Constraints, Edge, Job, SpreadRule
from placement.model.links import Tier
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, dimension_groups, job_traffic
from placement.model.validate import validate
from placement.sim.scenarios import fat_tree, megatron_job, occupy
from placement.solve.baselines import first_fit
from placement.solve.construct import HostPool, scope_domains, unit_capacity
from placement.solve.multilevel import mapping as multilevel
from placement.solve.multilevel.mapping import multilevel_candidates
from placement.solve.units import candidate_devices

pytestmark = pytest.mark.skipif(not multilevel.available(), reason="mtkahypar is not installed")


def tp_units(topology: Topology, state: ClusterState, job: Job) -> list[tuple[int, ...]]:
    """TP groups when enough hosts hold them whole, else single ranks (what the cpsat strategy passes)."""
    par = job.parallel
    assert par is not None
    groups = dimension_groups(par, ("tp",))
    pool = HostPool.of(topology, candidate_devices(topology, state, job))
    whole = sum(len(d) // par.tp for d in pool.devices.values())
    return groups if par.tp > 1 and whole >= len(groups) else [(r,) for r in range(job.ranks)]


def run(
    topology: Topology,
    state: ClusterState,
    job: Job,
    units: Sequence[tuple[int, ...]] | None = None,
    seed: int = 0,
    budget: float = 20.0,
) -> tuple[Traffic, list[int], list[tuple[str, list[int]]]]:
    traffic = job_traffic(job)
    cands = candidate_devices(topology, state, job)
    units = tp_units(topology, state, job) if units is None else units
    out = multilevel_candidates(
        topology, state, job, traffic, cands, units, seed=seed, deadline=time.perf_counter() + budget
    )
    return traffic, cands, out


def check_mapping(
    topology: Topology,
    state: ClusterState,
    job: Job,
    traffic: Traffic,
    cands: Sequence[int],
    units: Sequence[tuple[int, ...]],
    mapping: list[int],
) -> None:
    assert validate(topology, state, job, mapping, traffic=traffic) == []
    assert len(set(mapping)) == job.ranks
    assert set(mapping) <= set(cands)
    for u in units:
        assert len({topology.devices[mapping[r]].host_index for r in u}) == 1, f"unit {u} straddles hosts"


@pytest.mark.parametrize(
    ("gpus", "fraction", "mode", "shape"),
    [
        (256, 0.3, "partial", (2, 2, 4)),
        (256, 0.5, "mixed", (4, 2, 2)),
        (1024, 0.6, "mixed", (8, 2, 4)),
        (1024, 0.3, "partial", (4, 4, 8)),
    ],
)
def test_every_candidate_is_valid_and_keeps_units_whole(
    gpus: int, fraction: float, mode: str, shape: tuple[int, int, int]
) -> None:
    topo = fat_tree(gpus)
    state = occupy(topo, fraction, seed=3, mode=mode)
    tp, pp, dp = shape
    job = megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=2048, layers=8)
    units = tp_units(topo, state, job)
    traffic, cands, out = run(topo, state, job, units)
    assert [name for name, _ in out][:2] == ["multilevel-cut", "multilevel"]
    for _, mapping in out:
        check_mapping(topo, state, job, traffic, cands, units, mapping)


def test_multi_rank_units_of_mixed_sizes_stay_whole() -> None:
    topo = fat_tree(256)
    state = occupy(topo, 0.4, seed=5, mode="mixed")
    job = megatron_job("j", tp=4, pp=2, dp=4, hidden=2048, layers=8)
    tp = dimension_groups(job.parallel, ("tp",))  # type: ignore[arg-type]
    units = [tp[0][:2], tp[0][2:], *tp[1:5], *((r,) for g in tp[5:] for r in g)]  # sizes 2, 4 and 1
    traffic, cands, out = run(topo, state, job, units)
    assert out
    for _, mapping in out:
        check_mapping(topo, state, job, traffic, cands, units, mapping)


@pytest.mark.parametrize(("fraction", "mode"), [(0.3, "mixed"), (0.6, "mixed"), (0.5, "partial")])
def test_clustered_job_no_worse_than_first_fit(fraction: float, mode: str) -> None:
    topo = fat_tree(1024)
    state = occupy(topo, fraction, seed=1, mode=mode)
    job = megatron_job("j", tp=8, pp=4, dp=4)
    traffic, _, out = run(topo, state, job)
    ff = first_fit(topo, state, job)
    assert ff is not None and out
    costs = dict((name, surrogate_seconds(topo, state, m, traffic)) for name, m in out)
    assert costs["multilevel"] <= surrogate_seconds(topo, state, ff, traffic) + 1e-12


def test_keeps_tp_groups_on_hosts_when_only_some_fit_whole() -> None:
    """60% mixed: fewer wholly free hosts than TP groups, so units are single ranks; the candidates in the
    tightest domain still keep as many TP groups on one host as that domain has wholly free hosts."""
    topo = fat_tree(1024)
    state = occupy(topo, 0.6, seed=1, mode="mixed")
    job = megatron_job("j", tp=8, pp=4, dp=8)
    _, cands, out = run(topo, state, job)
    pool = HostPool.of(topo, cands)
    level, k = scope_domains(topo, unit_capacity(topo, pool, 1), job.ranks, limit=1)[0]
    col = topo.domain_column(level)
    full_hosts = sum(1 for d in pool.devices.values() if len(d) == 8 and col[d[0]] == k)
    groups = dimension_groups(job.parallel, ("tp",))  # type: ignore[arg-type]
    assert 0 < full_hosts < len(groups)
    assert len(tp_units(topo, state, job)) == job.ranks
    for name, mapping in out[:2]:
        whole = sum(1 for g in groups if len({topo.devices[mapping[r]].host_index for r in g}) == 1)
        assert whole >= full_hosts, name


def ring_twin(job: Job) -> Job:
    """The job as explicit p2p edges only: each group a ring in member order, its pipeline edges kept."""
    t = job_traffic(job)
    edges = [
        Edge(g.label, a, g.members[(i + 1) % len(g.members)], g.bytes, g.count, g.exposed)
        for g in t.groups
        for i, a in enumerate(g.members)
    ]
    return Job(job.name, job.ranks, job.device_kind, edges=(*edges, *t.edges))


def test_explicit_ring_job_keeps_tp_rings_on_hosts() -> None:
    """No groups, only p2p rings: the TP rings (the label that saves most inside a host) are still kept on
    one host as often as the tightest domain has wholly free hosts, and no worse than first-fit."""
    topo = fat_tree(1024)
    state = occupy(topo, 0.6, seed=1, mode="mixed")
    structured = megatron_job("j", tp=8, pp=4, dp=8)
    job = ring_twin(structured)
    traffic, cands, out = run(topo, state, job, units=[(r,) for r in range(job.ranks)])
    assert out
    pool = HostPool.of(topo, cands)
    level, k = scope_domains(topo, unit_capacity(topo, pool, 1), job.ranks, limit=1)[0]
    col = topo.domain_column(level)
    full_hosts = sum(1 for d in pool.devices.values() if len(d) == 8 and col[d[0]] == k)
    groups = dimension_groups(structured.parallel, ("tp",))  # type: ignore[arg-type]
    # ranks in order onto free devices, the topology-blind fill (first-fit itself keeps TP slices since issue 21
    # and waits here for whole free hosts)
    ff = candidate_devices(topo, state, job)[: job.ranks]
    assert len(ff) == job.ranks
    for name, mapping in out[:2]:
        check_mapping(topo, state, job, traffic, cands, [(r,) for r in range(job.ranks)], mapping)
        whole = sum(1 for g in groups if len({topo.devices[mapping[r]].host_index for r in g}) == 1)
        assert whole >= full_hosts, name
        assert surrogate_seconds(topo, state, mapping, traffic) <= surrogate_seconds(topo, state, ff, traffic)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gpn=st.sampled_from([2, 4, 8]),
    nodes=st.integers(2, 6),
    leaves=st.integers(1, 4),
    spines=st.integers(1, 3),
    fraction=st.sampled_from([0.0, 0.3, 0.6]),
    mode=st.sampled_from(["whole", "partial", "mixed"]),
    tp=st.sampled_from([1, 2, 4]),
    pp=st.integers(1, 3),
    dp=st.integers(1, 4),
    kind=st.integers(0, 2),
    budget=st.sampled_from([0.0, 5.0]),
    seed=st.integers(0, 3),
)
def test_random_trees_and_units_give_valid_mappings(
    gpn: int,
    nodes: int,
    leaves: int,
    spines: int,
    fraction: float,
    mode: str,
    tp: int,
    pp: int,
    dp: int,
    kind: int,
    budget: float,
    seed: int,
) -> None:
    """Random fat trees, occupancy, shapes and units (single ranks, TP groups, or both mixed; structured or
    p2p rings), with or without time: every candidate is valid and keeps units whole (and nothing crashes)."""
    topo = fat_tree(
        gpn * nodes * leaves * spines, gpus_per_node=gpn, nodes_per_leaf=nodes, leaves_per_spine=leaves
    )
    state = occupy(topo, fraction, seed=seed, mode=mode)
    job = megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=1024, layers=4)
    groups = dimension_groups(job.parallel, ("tp",))  # type: ignore[arg-type]
    units = groups if kind == 1 else [*groups[::2], *((r,) for g in groups[1::2] for r in g)]
    units = [(r,) for r in range(job.ranks)] if kind == 0 else units
    job = ring_twin(job) if seed % 2 else job
    if len(candidate_devices(topo, state, job)) < job.ranks:
        return
    traffic, cands, out = run(topo, state, job, units, seed=seed, budget=budget)
    event(f"{len(out)} candidates")
    for _, mapping in out:
        check_mapping(topo, state, job, traffic, cands, units, mapping)


def test_deterministic_for_a_fixed_seed() -> None:
    topo = fat_tree(1024)
    state = occupy(topo, 0.5, seed=2, mode="mixed")
    job = megatron_job("j", tp=4, pp=4, dp=4)
    _, _, a = run(topo, state, job, seed=7)
    _, _, b = run(topo, state, job, seed=7)
    assert a and a == b


def test_past_deadline_still_returns_a_valid_mapping() -> None:
    topo = fat_tree(256)
    state = occupy(topo, 0.3, seed=1, mode="partial")
    job = megatron_job("j", tp=2, pp=2, dp=8, hidden=2048, layers=8)
    traffic = job_traffic(job)
    cands = candidate_devices(topo, state, job)
    units = tp_units(topo, state, job)
    out = multilevel_candidates(
        topo, state, job, traffic, cands, units, seed=0, deadline=time.perf_counter() - 1.0
    )
    assert len(out) == 1
    check_mapping(topo, state, job, traffic, cands, units, out[0][1])


def _with(job: Job, **changes: Any) -> Job:
    return dataclasses.replace(job, constraints=dataclasses.replace(job.constraints, **changes))


def test_not_applicable_returns_empty() -> None:
    topo = fat_tree(256)
    state = ClusterState()
    job = megatron_job("j", tp=2, pp=2, dp=2, hidden=2048, layers=8)
    assert run(topo, state, _with(job, pins={0: topo.devices[0].id}))[2] == []
    assert (
        run(topo, state, _with(job, spread=(SpreadRule(kind="leaf", scope="job", min_domains=2),)))[2] == []
    )
    assert run(topo, state, job, units=[(r,) for r in range(job.ranks - 1)])[2] == []  # a rank left out
    assert run(topo, state, job, units=[(0, 1), (1, 2), *((r,) for r in range(3, job.ranks))])[2] == []
    big = megatron_job("big", tp=8, pp=4, dp=16)  # 512 ranks on 256 devices
    assert run(topo, state, big)[2] == []
    graph = Topology.from_pair_paths("g", [[Tier(100.0, 1.0)] * 4 for _ in range(4)])
    small = Job("s", 4, None, constraints=Constraints())
    assert run(graph, state, small, units=[(r,) for r in range(4)])[2] == []


def test_unavailable_library_returns_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multilevel, "_library", lambda: None)
    topo = fat_tree(256)
    job = megatron_job("j", tp=2, pp=2, dp=2, hidden=2048, layers=8)
    assert run(topo, ClusterState(), job)[2] == []
    assert not multilevel.available()


def test_repair_moves_least_tied_vertex_and_fails_when_nothing_fits() -> None:
    # block 0 holds 3 unit vertices with capacity 2; vertex 2 is tied to block 1 only
    part = multilevel._repair([0, 0, 0, 1], [1, 1, 1, 1], [2, 2], [[0, 1], [2, 3]], [5, 5], [True] * 4)
    assert part == [0, 0, 1, 1]
    assert multilevel._repair([0, 0, 0, 1], [1, 1, 1, 1], [2, 1], [[0, 1]], [5], [True] * 4) is None
    # fixed vertices are never moved
    part = multilevel._repair(
        [0, 0, 0, 1], [1, 1, 1, 1], [2, 2], [[0, 1], [2, 3]], [5, 5], [True, True, False, True]
    )
    assert part is not None and part[2] == 0
