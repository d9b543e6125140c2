"""The lower bound on exposed communication (placement.solve.bound): below the brute-force optimum on tiny
clusters, below random, constructive and every valid mapping on fragmented ones and across NVLink domains, its
joint arguments (crossings, whole-group rooms, host-room floor) included, and tighter where TP groups fill hosts."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.cost.evaluate import evaluate
from placement.cost.surrogate import surrogate_seconds
from placement.model.devices import HostSpec, NodeType
from placement.model.job import Edge, Job
from placement.model.links import Level, Tier
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.model.validate import validate
from placement.sim.scenarios import (
    fat_tree,
    megatron_job,
)
from placement.solve import SolveOptions, SolveStatus, place
from placement.solve.bound import comm_bound, lower_bounds
from placement.solve.units import candidate_devices
from tests.support_solve import FORM, ORDERS, brute_force, fragmented, peers, valid_reports, with_order


def tiny() -> Topology:
    nt = NodeType("t", 4, "H100")
    hs = [HostSpec(f"h{i}", {"leaf": f"l{i // 2}", "spine": "s"}, nt) for i in range(4)]
    levels = [Level("node", Tier(400, 1)), Level("leaf", Tier(50, 5)), Level("spine", Tier(12.5, 10))]
    return Topology.build("tiny", levels, hs)


@pytest.mark.parametrize(
    "busy",
    [
        (0, 1, 2, 3, 4, 5, 6, 7),
        (0, 1, 2, 3, 4, 8, 12, 13, 14),
        (0, 1, 4, 5, 8, 9, 12, 13),
    ],
)
@pytest.mark.parametrize(
    "shape,order",
    [((2, 1, 2), "tp-cp-ep-dp-pp"), ((2, 2, 1), "pp-dp-tp-cp-ep"), ((4, 1, 1), "tp-cp-ep-dp-pp")],
)
def test_bound_is_below_the_brute_force_optimum(
    busy: tuple[int, ...], shape: tuple[int, int, int], order: str
) -> None:
    """Every valid mapping of 4 ranks onto the free devices, scored by the evaluator: the least exposed
    communication is at least the bound, and an OPTIMAL answer meets the least exactly."""
    topo = tiny()
    state = ClusterState(occupied={d: "other" for d in busy})
    tp, pp, dp = shape
    job = with_order(megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=1024, layers=4, micro_batches=2), order)
    traffic = job_traffic(job)
    free = candidate_devices(topo, state, job)
    least = min(
        evaluate(topo, state, job, list(p), traffic=traffic, check=False).comm_seconds
        for p in itertools.permutations(free, job.ranks)
        if not validate(topo, state, job, list(p), traffic=traffic)
    )
    least_step = min(
        evaluate(topo, state, job, list(p), traffic=traffic, check=False).step_seconds
        for p in itertools.permutations(free, job.ranks)
        if not validate(topo, state, job, list(p), traffic=traffic)
    )
    bound = comm_bound(topo, state, job, traffic, free)
    assert bound.value <= least * (1 + 1e-12)
    assert bound.step <= least_step * (1 + 1e-12)
    res = place(topo, state, job, SolveOptions(time_limit_s=2))
    assert res.lower_bound is not None and res.lower_bound <= least * (1 + 1e-12)
    assert res.comm_seconds is not None and res.comm_seconds >= least * (1 - 1e-12)
    if res.status is SolveStatus.OPTIMAL:
        assert res.comm_seconds == pytest.approx(least, rel=1e-9)


def _small() -> Topology:
    nt = NodeType("t", 2, "H100")
    hs = [HostSpec(f"h{i}", {"leaf": f"l{i // 2}", "spine": "s"}, nt) for i in range(4)]
    return Topology.build(
        "small", [Level("node", Tier(400, 1)), Level("leaf", Tier(50, 5)), Level("spine", Tier(10, 10))], hs
    )


@pytest.mark.parametrize("occupied", [(), (0, 3), (1, 2, 5), (0, 2, 4)])
@pytest.mark.parametrize("shape", [(2, 1, 2), (1, 2, 2), (1, 1, 4), (2, 2, 1)])
def test_every_bound_is_below_brute_force(occupied: tuple[int, ...], shape: tuple[int, int, int]) -> None:
    topo = _small()
    state = ClusterState(occupied={d: "other" for d in occupied})
    tp, pp, dp = shape
    job = megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=1024, layers=4, micro_batches=2)
    traffic = job_traffic(job)
    best = math.inf
    for perm in itertools.permutations(range(topo.num_devices), job.ranks):
        if not validate(topo, state, job, list(perm)):
            best = min(best, surrogate_seconds(topo, state, list(perm), traffic))
    cap = lower_bounds(topo, state, traffic, candidate_devices(topo, state, job))
    assert cap.source == "capacity" and cap.value <= best + 1e-12
    res = place(topo, state, job, SolveOptions(time_limit_s=3))
    least_comm = min(
        evaluate(topo, state, job, list(perm), traffic=traffic, check=False).comm_seconds
        for perm in itertools.permutations(range(topo.num_devices), job.ranks)
        if not validate(topo, state, job, list(perm), traffic=traffic)
    )
    assert res.lower_bound is not None and res.lower_bound <= least_comm * (1 + 1e-12)
    assert res.stats["bound_source"].split(": ")[1].startswith(("capacity", "nic-floor"))
    if "surrogate_bound" in res.stats:
        assert float(res.stats["surrogate_bound"]) <= best + 1e-12


def assert_bound_below_mappings(topo: Topology, state: ClusterState, job: Job, seed: int) -> None:
    """20 random valid mappings (which split groups) and the heuristics' (which keep them whole) all cost at least
    the bound, in exposed communication and in step."""
    traffic = job_traffic(job)
    free = candidate_devices(topo, state, job)
    bound = comm_bound(topo, state, job, traffic, free)
    rng = random.Random(seed)
    mappings = [rng.sample(free, job.ranks) for _ in range(20)] + list(peers(topo, state, job).values())
    for m in mappings:
        rep = evaluate(topo, state, job, m, traffic=traffic)
        assert bound.value <= rep.comm_seconds * (1 + 1e-12), bound.source
        assert bound.step <= rep.step_seconds * (1 + 1e-12), bound.source


@settings(max_examples=10, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    busy=st.floats(0.3, 0.6),
    seed=st.integers(0, 10_000),
    shape=st.sampled_from([(2, 2, 4), (4, 2, 2), (8, 1, 2), (1, 4, 4)]),
    order=st.sampled_from(ORDERS),
)
def test_bound_is_below_random_and_constructive_mappings(
    busy: float, seed: int, shape: tuple[int, int, int], order: str
) -> None:
    """On clusters too large to enumerate: random valid mappings (which split groups) and the heuristics' (which
    keep them whole) all cost at least the bound."""
    topo = fat_tree(256, nodes_per_leaf=4, leaves_per_spine=4)
    state = fragmented(topo, busy, seed)
    tp, pp, dp = shape
    job = with_order(megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=2048, layers=8), order)
    assert_bound_below_mappings(topo, state, job, seed)


def _gb200_racks(racks: int, *, sharp: bool) -> Topology:
    """GB200 NVL72-like racks of 6 trays x 4 GPUs (one NVLink domain each, 721.8 GB/s per GPU), each tray with 4
    400G NICs (48 GB/s), racks on a leaf (SHARP or not)."""
    tray = NodeType("tray", 4, "GB200", nics=4, nic_gbps=48.0)
    hosts = [
        HostSpec(f"r{r}t{t}", {"rack": f"r{r}", "leaf": "l0"}, tray) for r in range(racks) for t in range(6)
    ]
    levels = [
        Level("node", Tier(721.8, 1.0)),
        Level("rack", Tier(721.8, 2.0), nvlink=True),
        Level("leaf", Tier(48.0, 5.0), sharp=sharp),
    ]
    return Topology.build("gb200", levels, hosts)


@settings(max_examples=12, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    busy=st.floats(0.2, 0.6),
    seed=st.integers(0, 10_000),
    shape=st.sampled_from([(4, 2, 4), (8, 1, 4), (2, 4, 4), (16, 1, 2)]),
    sharp=st.booleans(),
)
def test_bound_is_below_mappings_across_nvlink_domains(
    busy: float, seed: int, shape: tuple[int, int, int], sharp: bool
) -> None:
    """NVLink domains across hosts (NCCL's nodes: NVLS inside a rack, the racks' NICs together between them),
    SHARP leaves or not: random valid mappings and the heuristics' cost at least the bound."""
    topo = _gb200_racks(3, sharp=sharp)
    state = fragmented(topo, busy, seed)
    tp, pp, dp = shape
    job = megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=2048, layers=8)
    if len(candidate_devices(topo, state, job)) >= job.ranks:
        assert_bound_below_mappings(topo, state, job, seed)


def two_per_host() -> Topology:
    """4 hosts of 2 GPUs, 2 hosts per leaf, one spine: a 4-rank job cannot stay on one host, nor a leaf at 3 busy."""
    nt = NodeType("t2", 2, "H100")
    hs = [HostSpec(f"h{i}", {"leaf": f"l{i // 2}", "spine": "s"}, nt) for i in range(4)]
    levels = [Level("node", Tier(400, 1)), Level("leaf", Tier(50, 5)), Level("spine", Tier(12.5, 10))]
    return Topology.build("two-per-host", levels, hs)


@pytest.mark.parametrize("busy", [(), (0,), (0, 2), (1, 6)])
@pytest.mark.parametrize("form", list(FORM))
@pytest.mark.parametrize(
    "shape,order",
    [((2, 2, 1), "tp-cp-ep-dp-pp"), ((2, 1, 2), "dp-tp-pp-cp-ep"), ((1, 4, 1), "tp-cp-ep-dp-pp")],
)
def test_joint_bound_is_below_the_brute_force_optimum_on_two_gpu_hosts(
    busy: tuple[int, ...], form: str, shape: tuple[int, int, int], order: str
) -> None:
    """Every mapping of 4 ranks onto 2-GPU hosts, each scored by the evaluator: the least exposed communication
    and the least step are at least the bound's (where the crossing arguments force a TP group or a PP send off
    its host, and a job larger than a leaf across leaves)."""
    topo = two_per_host()
    state = ClusterState(occupied={d: "other" for d in busy})
    tp, pp, dp = shape
    job = with_order(megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=1024, layers=4, micro_batches=2), order)
    job = FORM[form](job)
    traffic = job_traffic(job)
    free = candidate_devices(topo, state, job)
    reports = valid_reports(topo, state, job, traffic, free)
    bound = comm_bound(topo, state, job, traffic, free)
    assert bound.value <= min(r.comm_seconds for r in reports) * (1 + 1e-12), bound.source
    assert bound.step <= min(r.step_seconds for r in reports) * (1 + 1e-12), bound.source


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    busy=st.floats(0.2, 0.7),
    seed=st.integers(0, 100_000),
    shape=st.sampled_from(
        [(2, 4, 4), (4, 2, 4), (8, 2, 2), (2, 8, 2), (4, 4, 2), (1, 4, 8), (2, 2, 8), (8, 1, 4), (4, 1, 8)]
    ),
    order=st.sampled_from(ORDERS),
    form=st.sampled_from(list(FORM)),
    gpus_per_node=st.sampled_from([4, 8]),
)
def test_joint_bound_is_below_every_mapping_on_fragmented_clusters(
    busy: float, seed: int, shape: tuple[int, int, int], order: str, form: str, gpus_per_node: int
) -> None:
    """Small leaves (4 hosts) and spines (4 leaves) so that the jobs cross hosts, leaves and spines: random valid
    mappings, mappings that keep TP groups whole but scatter the rest, and every baseline's and heuristic's
    (tile-pack included) cost at least the bound, in exposed communication and in step."""
    topo = fat_tree(16 * 4 * gpus_per_node, gpus_per_node=gpus_per_node, nodes_per_leaf=4, leaves_per_spine=4)
    state = fragmented(topo, busy, seed)
    tp, pp, dp = shape
    job = FORM[form](with_order(megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=2048, layers=8), order))
    traffic = job_traffic(job)
    free = candidate_devices(topo, state, job)
    if len(free) < job.ranks:
        return
    bound = comm_bound(topo, state, job, traffic, free)
    rng = random.Random(seed)
    mappings = [rng.sample(free, job.ranks) for _ in range(10)]
    # TP groups whole on random hosts that hold them, the other ranks anywhere left
    tp_groups = [
        g.members
        for g in job_traffic(with_order(megatron_job("j", tp=tp, pp=pp, dp=dp), order)).groups
        if g.label == "tp"
    ]
    for _ in range(10):
        by_host: dict[int, list[int]] = {}
        for d in rng.sample(free, len(free)):
            by_host.setdefault(topo.devices[d].host_index, []).append(d)
        out: dict[int, int] = {}
        for m in tp_groups:
            hosts = [h for h, v in by_host.items() if len(v) >= len(m)]
            if not hosts:
                break
            h = rng.choice(hosts)
            for r in m:
                out[r] = by_host[h].pop()
        rest = [d for v in by_host.values() for d in v]
        rng.shuffle(rest)
        for r in range(job.ranks):
            if r not in out:
                out[r] = rest.pop()
        mappings.append([out[r] for r in range(job.ranks)])
    mappings += list(peers(topo, state, job).values())
    for m in mappings:
        rep = evaluate(topo, state, job, m, traffic=traffic)
        assert bound.value <= rep.comm_seconds * (1 + 1e-12), bound.source
        assert bound.step <= rep.step_seconds * (1 + 1e-12), bound.source


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    occupied=st.sets(st.integers(0, 7), max_size=2), shape=st.sampled_from([(2, 2, 1), (2, 1, 2), (2, 2, 2)])
)
def test_host_filling_unit_bound_is_valid_and_binds(occupied: set[int], shape: tuple[int, int, int]) -> None:
    """TP groups that fill a host (TP2 on 2-GPU hosts): PP edges and DP groups that cross TP groups can share a
    host only with split TP groups. The joint bound stays below brute force and is never below the per-label one."""
    from placement.solve.bound import _joint_bound, _populations, level_paths

    topo = _small()
    state = ClusterState(occupied={d: "other" for d in occupied})
    tp, pp, dp = shape
    job = megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=1024, layers=4, micro_batches=2)
    traffic = job_traffic(job)
    cands = candidate_devices(topo, state, job)
    if len(cands) < job.ranks:
        return
    best = math.inf
    for perm in itertools.permutations(cands, job.ranks):
        if not validate(topo, state, job, list(perm)):
            best = min(best, surrogate_seconds(topo, state, list(perm), traffic))
    free = []
    for li in range(len(topo.levels)):
        col = topo.domain_column(li)
        free.append(
            sorted((sum(1 for d in cands if col[d] == k) for k in set(col[d] for d in cands)), reverse=True)
        )
    joint = _joint_bound(_populations(traffic, level_paths(topo, state), free, len(topo.levels)), free)
    assert 0 < joint <= best + 1e-12
    assert lower_bounds(topo, state, traffic, cands).value <= best + 1e-12


def test_host_filling_unit_bound_is_tighter_on_a_free_cluster() -> None:
    topo = _small()
    job = megatron_job("j", tp=2, pp=2, dp=1, hidden=1024, layers=4, micro_batches=2)
    traffic = job_traffic(job)
    from placement.solve.bound import _assign, _populations, level_paths

    cands = list(range(topo.num_devices))
    free = [[2, 2, 2, 2], [4, 4], [8]]
    plain = sum(_assign(p.costs, p.caps) for p in _populations(traffic, level_paths(topo), free, 3))
    # both TP groups whole: each fills a host, so the PP edges cannot stay on one (the per-label bound lets them)
    assert lower_bounds(topo, ClusterState(), traffic, cands).value > plain * (1 + 1e-9)


def test_bound_counts_rank_pairs_not_parallel_edges() -> None:
    from placement.model.job import Job
    from placement.model.traffic import job_traffic
    from placement.solve.bound import lower_bound

    topo = Topology.build(
        "t",
        [Level("node", Tier(100, 1)), Level("leaf", Tier(10, 5))],
        [HostSpec("h0", {"leaf": "l"}, NodeType("a", 2)), HostSpec("h1", {"leaf": "l"}, NodeType("b", 1))],
    )
    job = Job("j", 2, edges=(Edge("pp", 0, 1, 1e9), Edge("pp", 1, 0, 1e9)))
    best = brute_force(topo, ClusterState(), job)
    assert lower_bound(topo, ClusterState(), job_traffic(job), [0, 1, 2]) <= best + 1e-12


def test_bound_takes_the_lowest_latency_of_the_node_level() -> None:
    from placement.model.job import Job
    from placement.model.traffic import job_traffic
    from placement.solve.bound import lower_bound

    nt = NodeType("m", 2, "gpu", (("X", "NV4"), ("NV4", "X")))  # NV4: 100 GB/s at 1 us, the node tier 5 us
    topo = Topology.build(
        "t", [Level("node", Tier(100, 5)), Level("leaf", Tier(10, 5))], [HostSpec("h0", {"leaf": "l"}, nt)]
    )
    job = Job("j", 2, edges=(Edge("pp", 0, 1, 1e3, 1000.0),))
    assert (
        lower_bound(topo, ClusterState(), job_traffic(job), [0, 1])
        <= brute_force(topo, ClusterState(), job) + 1e-12
    )
