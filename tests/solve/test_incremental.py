"""The incremental step model (placement.solve.incremental): it agrees with `evaluate` after every move, its rounds
are the model's steps under max-min sharing, and its phases stay above the bound's floors."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.cost.collectives import fabric_for, max_min_phase_seconds
from placement.cost.evaluate import evaluate
from placement.model.traffic import job_traffic
from placement.sim.scenarios import (
    explicit_twin,
    fat_tree,
    megatron_job,
)
from placement.solve import SolveOptions
from placement.solve.bound import comm_bound
from placement.solve.incremental import StepEval
from placement.solve.prepared import PreparedRequest
from placement.solve.units import candidate_devices
from tests.support_solve import fragmented, with_order


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
