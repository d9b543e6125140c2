"""Solver v3 (issue 21): the answer is never worse, by the evaluator's (step, exposed comm), than any scheduler
baseline or constructive heuristic computed here independently of `place`, on generated fragmented states and
rank orders; the bound on exposed communication is below every valid mapping (brute force on small cases); the
incremental step model agrees with `evaluate`; OPTIMAL means the bound is met; the stop reason is reported."""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.cost.collectives import fabric_for, max_min_phase_seconds
from placement.cost.evaluate import evaluate
from placement.model.devices import HostSpec, NodeType
from placement.model.job import Constraints, Job
from placement.model.links import Level, Tier
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.model.validate import validate
from placement.sim.scenarios import explicit_twin, fat_tree, megatron_job, p2p_ring_job
from placement.solve import SolveOptions, SolveStatus, place
from placement.solve.baselines import BASELINES
from placement.solve.bound import comm_bound
from placement.solve.heuristics import HEURISTICS
from placement.solve.incremental import StepEval
from placement.solve.prepared import PreparedRequest
from placement.solve.types import key_better
from placement.solve.units import candidate_devices

ORDERS = ("tp-cp-ep-dp-pp", "dp-tp-pp-cp-ep", "pp-dp-tp-cp-ep", "tp-pp-dp-cp-ep")


def fragmented(topology: Topology, busy: float, seed: int) -> ClusterState:
    """About `busy` of the devices taken by other jobs: each busy node wholly busy or 1..n-1 of its GPUs (half
    and half), the fragments issue 21 describes."""
    rng = random.Random(seed)
    occupied: dict[int, str] = {}
    hosts = list(range(len(topology.host_names)))
    rng.shuffle(hosts)
    target = round(busy * topology.num_devices)
    for i, h in enumerate(hosts):
        if len(occupied) >= target:
            break
        devs = list(topology.devices_in_domain[0][h])
        k = len(devs) if i % 2 == 0 else rng.randint(1, len(devs) - 1)
        for d in rng.sample(devs, min(k, target - len(occupied))):
            occupied[d] = f"other-{h}"
    return ClusterState(occupied=occupied)


def with_order(job: Job, order: str) -> Job:
    assert job.parallel is not None
    return dataclasses.replace(job, parallel=dataclasses.replace(job.parallel, order=order))


def key(topology: Topology, state: ClusterState, job: Job, mapping: list[int]) -> tuple[float, float]:
    rep = evaluate(topology, state, job, mapping)
    return rep.step_seconds, rep.comm_seconds


def peers(topology: Topology, state: ClusterState, job: Job) -> dict[str, list[int]]:
    """Every scheduler baseline's and heuristic's valid mapping, computed here, not by `place`."""
    traffic = job_traffic(job)
    out: dict[str, list[int]] = {}
    for name, f in {**BASELINES, **HEURISTICS}.items():
        m = f(topology, state, job, traffic)
        if m is not None and not validate(topology, state, job, m, traffic=traffic):
            out[name] = m
    return out


# ---- never worse ------------------------------------------------------------------------------------------------


@settings(max_examples=14, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    busy=st.floats(0.3, 0.6),
    seed=st.integers(0, 10_000),
    shape=st.sampled_from([(2, 1, 4), (4, 2, 2), (8, 1, 2), (2, 4, 2), (4, 1, 4), (2, 2, 4), (8, 2, 1)]),
    order=st.sampled_from(ORDERS),
    explicit=st.booleans(),
)
def test_never_worse_than_any_baseline_or_heuristic(
    busy: float, seed: int, shape: tuple[int, int, int], order: str, explicit: bool
) -> None:
    topo = fat_tree(256, nodes_per_leaf=4, leaves_per_spine=4)
    state = fragmented(topo, busy, seed)
    tp, pp, dp = shape
    job = with_order(megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=2048, layers=8), order)
    if explicit:
        job = explicit_twin(job)
    res = place(topo, state, job, SolveOptions(time_limit_s=0.5, deterministic=True, workers=1))
    assert res.mapping is not None and res.report is not None and res.lower_bound is not None
    answer = key(topo, state, job, res.mapping)
    for name, m in peers(topo, state, job).items():
        other = key(topo, state, job, m)
        assert not key_better(other, answer), f"{name} {other} beats the answer {answer}"
        assert res.lower_bound <= other[1] * (1 + 1e-9), f"the bound is above {name}'s exposed comm"
    assert res.stats["stop_reason"] in ("gap_closed", "time_limit", "no_improvement")
    step_closed = res.report.step_seconds <= float(res.stats["step_bound"]) * (1 + 1e-9)
    assert (res.status is SolveStatus.OPTIMAL) == (res.gap is not None and res.gap <= 1e-9 and step_closed)
    for name, m in peers(topo, state, job).items():
        assert float(res.stats["step_bound"]) <= key(topo, state, job, m)[0] * (1 + 1e-9), name


def test_never_worse_on_a_dp_first_order_with_deep_pipeline() -> None:
    """Order dp-tp-pp splits every TP group for a scheduler that fills ranks in order; the answer keeps them."""
    topo = fat_tree(512, nodes_per_leaf=4, leaves_per_spine=4)
    state = fragmented(topo, 0.45, 7)
    job = with_order(megatron_job("j", tp=4, pp=8, dp=4, hidden=2048, layers=16), "dp-tp-pp-cp-ep")
    res = place(topo, state, job, SolveOptions(time_limit_s=1.0, deterministic=True, workers=1))
    assert res.mapping is not None
    answer = key(topo, state, job, res.mapping)
    got = peers(topo, state, job)
    assert {"kueue-tas", "tight-emptiest", "group-pack-dp"} <= set(got)
    for name, m in got.items():
        assert not key_better(key(topo, state, job, m), answer), name
    # the TP groups stay whole on hosts in the answer
    for g in job_traffic(job).groups:
        if g.label == "tp":
            assert topo.group_lca_level([res.mapping[r] for r in g.members]) == 0


# ---- the bound --------------------------------------------------------------------------------------------------


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


# ---- stopping ---------------------------------------------------------------------------------------------------


def test_a_constructive_answer_at_the_bound_stops_at_once() -> None:
    """TP8 x DP4 on an empty fat tree: whole hosts hold the TP groups and the bound's host-filling argument
    prices the DP reduce across hosts; a heuristic meets it, so no search runs and the answer is OPTIMAL."""
    topo = fat_tree(256)
    job = megatron_job("j", tp=8, pp=1, dp=4)
    res = place(topo, ClusterState(), job, SolveOptions(time_limit_s=10))
    assert res.status is SolveStatus.OPTIMAL
    assert res.stats["stop_reason"] == "gap_closed"
    assert "cpsat_status" not in res.stats
    assert res.comm_seconds is not None and res.lower_bound is not None
    assert res.comm_seconds == pytest.approx(res.lower_bound, rel=1e-9)
    for name, m in peers(topo, ClusterState(), job).items():
        assert evaluate(topo, ClusterState(), job, m).comm_seconds >= res.comm_seconds * (1 - 1e-9), name


# ---- the incremental step model ---------------------------------------------------------------------------------


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "dp-tp-pp-cp-ep"])
def test_incremental_step_model_agrees_with_evaluate(explicit: bool, order: str) -> None:
    topo = fat_tree(256, nodes_per_leaf=4, leaves_per_spine=4)
    state = fragmented(topo, 0.4, 3)
    job = with_order(megatron_job("j", tp=2, pp=2, dp=4, hidden=2048, layers=8), order)
    if explicit:
        job = explicit_twin(job)
    req = PreparedRequest.prepare(topo, state, job, SolveOptions())
    rng = random.Random(1)
    mapping = rng.sample(req.candidates, job.ranks)
    ev = StepEval(req, mapping)
    for step in range(60):
        unused = sorted(set(req.candidates) - set(ev.mapping))
        if step % 2 and unused:
            moves = {rng.randrange(job.ranks): rng.choice(unused)}
        else:
            a, b = rng.sample(range(job.ranks), 2)
            moves = {a: ev.mapping[b], b: ev.mapping[a]}
        trial = ev.trial(moves)
        moved = list(ev.mapping)
        for r, d in moves.items():
            moved[r] = d
        rep = evaluate(topo, state, job, moved, check=False)
        assert trial.key == pytest.approx((rep.step_seconds, rep.comm_seconds), rel=1e-12)
        if rng.random() < 0.5:
            ev.apply(trial)
    rep = evaluate(topo, state, job, ev.mapping, check=False)
    assert ev.key == pytest.approx((rep.step_seconds, rep.comm_seconds), rel=1e-12)


_FAT = fat_tree(256, nodes_per_leaf=4, leaves_per_spine=4)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), busy=st.sampled_from([0.3, 0.5, 0.7]), tp=st.sampled_from([1, 2, 4]))
def test_incremental_rounds_are_model_steps_max_min_sharing(seed: int, busy: float, tp: int) -> None:
    """Random mappings and moves on a fragmented cluster: after every applied move each round's operation
    times are, to the bit, what the full model's max-min sharing gives the round's plans made afresh, and trials
    agree with `evaluate`."""
    state = fragmented(_FAT, busy, seed)
    job = megatron_job("j", tp=tp, pp=2, dp=4, hidden=2048, layers=8)
    tr = job_traffic(job)
    req = PreparedRequest.prepare(_FAT, state, job, SolveOptions())
    rng = random.Random(seed)
    ev = StepEval(req, rng.sample(req.candidates, job.ranks))
    fab = fabric_for(_FAT, state)
    for _ in range(12):
        unused = sorted(set(req.candidates) - set(ev.mapping))
        if rng.random() < 0.5 and unused:
            moves = {rng.randrange(job.ranks): rng.choice(unused)}
        else:
            a, b = rng.sample(range(job.ranks), 2)
            moves = {a: ev.mapping[b], b: ev.mapping[a]}
        trial = ev.trial(moves)
        moved = list(ev.mapping)
        for r, d in moves.items():
            moved[r] = d
        rep = evaluate(_FAT, state, job, moved, check=False)
        assert trial.key == pytest.approx((rep.step_seconds, rep.comm_seconds), rel=1e-12)
        ev.apply(trial)
        plans = [fab.plan_group(g.kind, [moved[r] for r in g.members], g.bytes) for g in tr.groups]
        plans += [fab.plan_edge(moved[e.src], moved[e.dst], e.bytes) for e in tr.edges]
        for rows in ev.state.values():
            for rd in rows:
                fresh = max_min_phase_seconds(fab, [plans[o] for o in rd.ops])
                assert [rd.times[o] for o in rd.ops] == [t for t, _ in fresh]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), busy=st.sampled_from([0.3, 0.5, 0.7]), tp=st.sampled_from([1, 2, 4]))
def test_max_min_phases_stay_above_the_bounds_floors(seed: int, busy: float, tp: int) -> None:
    """`comm_bound` reads a phase as at least its slowest group alone and at least the bytes spanning groups push
    out of hosts over the hosts' NIC capacity: max-min sharing keeps both (no operation runs faster than alone,
    and no link carries more than its capacity), so every phase of random mappings stays above its floor."""
    state = fragmented(_FAT, busy, seed)
    job = megatron_job("j", tp=tp, pp=2, dp=4, hidden=2048, layers=8)
    tr = job_traffic(job)
    cands = candidate_devices(_FAT, state, job)
    bound = comm_bound(_FAT, state, job, tr, cands)
    rng = random.Random(seed)
    for _ in range(4):
        rep = evaluate(_FAT, state, job, rng.sample(cands, job.ranks), traffic=tr, check=False)
        for ph in rep.phases:
            assert bound.by_label.get(ph.name, 0.0) <= ph.exposed_seconds * (1 + 1e-12), (
                ph.name,
                bound.argument,
            )


# ---- the heuristics ---------------------------------------------------------------------------------------------


def test_heuristics_keep_pins_and_use_only_free_devices() -> None:
    topo = fat_tree(256, nodes_per_leaf=4, leaves_per_spine=4)
    state = fragmented(topo, 0.5, 11)
    job = megatron_job("j", tp=4, pp=2, dp=2, hidden=2048, layers=8)
    free = candidate_devices(topo, state, job)
    pin = free[5]
    job = dataclasses.replace(job, constraints=Constraints(pins={3: topo.devices[pin].id}))
    traffic = job_traffic(job)
    # counted from the state by hand: the devices no other job holds and none failed
    usable = {d for d in range(topo.num_devices) if d not in state.occupied and d not in state.failed}
    assert pin in usable and len(usable) >= job.ranks + 64  # room to spare: a fill must find its devices
    placed: set[str] = set()
    for name, f in HEURISTICS.items():
        m = f(topo, state, job, traffic)
        if m is None:
            continue
        placed.add(name)
        assert m[3] == pin, name
        assert len(set(m)) == job.ranks and set(m) <= usable, name
        assert not validate(topo, state, job, m, traffic=traffic), name
    # the fill heuristics need only enough free devices (no rule asks for whole units here): each must place the
    # job, so a family that returns None everywhere fails this test
    assert set(HEURISTICS) >= FILL_HEURISTICS
    assert placed >= FILL_HEURISTICS, sorted(FILL_HEURISTICS - placed)


FILL_HEURISTICS = {
    "tight-emptiest",
    "tight-fullest",
    "tight-emptiest-nested",
    "tight-fullest-nested",
    "least-free",
    "contiguous",
}
"""Heuristics that fill the free devices of a domain in some order: they place any job that has enough free devices
and no required level or spread rule."""


# ---- the bound's joint arguments (crossings, whole-group rooms, host-room floor) stay below every mapping -------


def two_per_host() -> Topology:
    """4 hosts of 2 GPUs, 2 hosts per leaf, one spine: a 4-rank job cannot stay on one host, nor a leaf at 3 busy."""
    nt = NodeType("t2", 2, "H100")
    hs = [HostSpec(f"h{i}", {"leaf": f"l{i // 2}", "spine": "s"}, nt) for i in range(4)]
    levels = [Level("node", Tier(400, 1)), Level("leaf", Tier(50, 5)), Level("spine", Tier(12.5, 10))]
    return Topology.build("two-per-host", levels, hs)


FORM = {"structured": lambda j: j, "explicit": explicit_twin, "p2p-ring": p2p_ring_job}


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
    reports = [
        evaluate(topo, state, job, list(p), traffic=traffic, check=False)
        for p in itertools.permutations(free, job.ranks)
        if not validate(topo, state, job, list(p), traffic=traffic)
    ]
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


@pytest.mark.parametrize("name", ["stage-fill", "tile-pack-pp"])
def test_tile_and_stage_packing_give_dp_groups_many_members_per_host(name: str) -> None:
    """4 empty 8-GPU hosts and 4 with 6 free: the 16 TP2 units of a tp2 pp2 dp8 job fit 4 to a host on the empty
    ones, so every DP group (one member per unit of its stage) can have 4 members on each of its hosts, and the
    packers that tile data-parallel neighbours onto one host give it that (a scheduler filling ranks in order
    gives 1)."""
    nt = NodeType("h8", 8, "H100")
    hs = [HostSpec(f"h{i}", {"leaf": f"l{i // 4}", "spine": "s"}, nt) for i in range(8)]
    levels = [Level("node", Tier(450, 1)), Level("leaf", Tier(50, 5)), Level("spine", Tier(25, 10))]
    topo = Topology.build("eight", levels, hs)
    busy = {d: "other" for h in range(4, 8) for d in topo.devices_in_domain[0][h][:2]}
    state = ClusterState(occupied=busy)
    job = megatron_job("j", tp=2, pp=2, dp=8, hidden=2048, layers=8)
    traffic = job_traffic(job)
    m = HEURISTICS[name](topo, state, job, traffic)
    assert m is not None and not validate(topo, state, job, m, traffic=traffic)
    for g in traffic.groups:
        hosts = [topo.devices[m[r]].host_index for r in g.members]
        if g.label == "tp":
            assert len(set(hosts)) == 1
        if g.label == "dp":
            assert min(hosts.count(h) for h in set(hosts)) == 4, (g.members, hosts)
