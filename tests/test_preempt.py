"""Preempt (placement.decide.preempt): the victim set is the least by its objective among all sets of lower-priority
jobs that let the job place within the bound (checked by brute force over every subset, <= 8 running jobs), no
job of higher or equal priority is ever a victim, every mapping is valid on the state with its victims freed, and
bad input names the field, the value and the rule."""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any

import pytest

from placement.decide.preempt import Objective, RunningJob, check_options, preempt
from placement.errors import InfeasibleError, InputError
from placement.io.native import cluster_from_dict, job_from_dict, state_from_dict
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.validate import validate
from placement.solve import SolveOptions, Strategy, place
from tests.support_server import cluster_doc, job_doc


def _case(seed: int, jobs: int) -> tuple[Topology, ClusterState, list[RunningJob]]:
    """8 hosts of 4 devices, 2 hosts per leaf; `jobs` running jobs on random whole or half hosts."""
    rng = random.Random(seed)
    topo, _ = cluster_from_dict(cluster_doc(8, gpus=4, per_leaf=2), "c")
    blocks = [(h, half) for h in range(1, 9) for half in (0, 1)]
    rng.shuffle(blocks)
    occupied: list[dict[str, Any]] = []
    running: list[RunningJob] = []
    for j in range(jobs):
        take = blocks[: rng.choice((1, 1, 2))]
        blocks = blocks[len(take) :]
        devs = [f"node{h:02d}/gpu{2 * half + k}" for h, half in take for k in (0, 1)]
        occupied.append({"job": f"r{j}", "devices": devs})
        cost: dict[str, float] = (
            {"gpu_hours": rng.choice((0.5, 1.0, 2.0, 4.0))}
            if rng.random() < 0.5
            else {"checkpoint_age_s": float(rng.choice((300, 900, 3600)))}
        )
        running.append(RunningJob(f"r{j}", float(rng.randrange(4)), **cost))
    state = state_from_dict({"occupied": occupied}, topo, "s")
    return topo, state, running


def _cost(rj: RunningJob, state: ClusterState) -> float:
    """The GPU-hours lost, computed here from the definition (docs/decisions.md)."""
    if rj.gpu_hours is not None:
        return rj.gpu_hours
    n = sum(1 for j in state.occupied.values() if j == rj.job)
    return n * (rj.checkpoint_age_s or 0.0) / 3600


def _brute_force(
    topo: Topology,
    state: ClusterState,
    job: Job,
    running: list[RunningJob],
    priority: float,
    bound: float,
    opts: SolveOptions,
    objective: Objective,
) -> tuple[float, float] | None:
    """The least (count, GPU-hours) or (GPU-hours, count) over every subset of the lower-priority jobs whose
    freeing lets `place` put the job within the bound."""
    lower = [rj for rj in running if rj.priority < priority]
    best: tuple[float, float] | None = None
    for n in range(len(lower) + 1):
        for subset in itertools.combinations(lower, n):
            names = {rj.job for rj in subset}
            freed = dataclasses.replace(
                state, occupied={d: j for d, j in state.occupied.items() if j not in names}
            )
            try:
                res = place(topo, freed, job, opts)
            except InfeasibleError:
                continue
            assert res.report is not None
            if res.report.step_seconds > bound * (1 + 1e-9):
                continue
            cost = round(sum(_cost(rj, state) for rj in subset) * 1000) / 1000
            key = (float(n), cost) if objective is Objective.FEWEST else (cost, float(n))
            if best is None or key < best:
                best = key
    return best


def _key(objective: Objective, count: int, gpu_hours: float) -> tuple[float, float]:
    cost = round(gpu_hours * 1000) / 1000
    return (float(count), cost) if objective is Objective.FEWEST else (cost, float(count))


CASES = [
    # seed, running jobs, objective, tp, dp, max_slowdown, strategy, the incoming job's priority
    (10, 8, Objective.FEWEST, 4, 4, None, Strategy.KUEUE_TAS, 3.0),
    (12, 8, Objective.GPU_HOURS, 4, 4, 1.05, Strategy.KUEUE_TAS, 3.0),
    (16, 8, Objective.FEWEST, 2, 6, 1.0, Strategy.KUEUE_TAS, 3.0),
    (20, 8, Objective.GPU_HOURS, 2, 6, 1.0, Strategy.KUEUE_TAS, 9.0),
    (18, 8, Objective.GPU_HOURS, 4, 3, 1.2, Strategy.FIRST_FIT, 3.0),
    (13, 8, Objective.FEWEST, 4, 4, None, Strategy.KUEUE_TAS, 3.0),
    (3, 7, Objective.FEWEST, 4, 2, 1.0, Strategy.KUEUE_TAS, 2.0),
    (6, 5, Objective.FEWEST, 4, 2, 1.0, Strategy.CPSAT, 2.0),
]


@pytest.mark.parametrize(("seed", "jobs", "objective", "tp", "dp", "slowdown", "strategy", "priority"), CASES)
def test_the_victims_are_the_least_set_that_fits_by_brute_force(
    seed: int,
    jobs: int,
    objective: Objective,
    tp: int,
    dp: int,
    slowdown: float | None,
    strategy: Strategy,
    priority: float,
) -> None:
    topo, state, running = _case(seed, jobs)
    job = job_from_dict(job_doc(tp, dp, name="incoming"), "j")
    opts = SolveOptions(strategy=strategy, time_limit_s=8.0, deterministic=True, workers=1)
    checks = check_options(opts)
    bound = float("inf")
    if slowdown is not None:
        empty = dataclasses.replace(
            state, occupied={}
        )  # the ideal's limit (docs/decisions.md): a quarter, <= 2 s
        ideal = place(
            topo, empty, job, dataclasses.replace(opts, time_limit_s=min(2.0, opts.time_limit_s / 4))
        ).report
        assert ideal is not None
        bound = slowdown * ideal.step_seconds
    expected = _brute_force(topo, state, job, running, priority, bound, checks, objective)
    kw: dict[str, Any] = {"max_slowdown": slowdown}
    if expected is None:
        with pytest.raises(InfeasibleError):
            preempt(topo, state, job, running, job_priority=priority, objective=objective, options=opts, **kw)
        return
    res = preempt(
        topo,
        state,
        job,
        running,
        job_priority=priority,
        objective=objective,
        options=opts,
        max_checks=256,
        **kw,
    )
    assert res.proven
    chosen = res.chosen
    assert _key(objective, chosen.count, chosen.gpu_hours) == pytest.approx(expected)
    assert chosen.within_bound and chosen.report.step_seconds <= bound * (1 + 1e-9)
    by_name = {rj.job: rj for rj in running}
    costs = sorted(a.report.step_seconds for a in res.answers)
    assert [a.report.step_seconds for a in res.answers] == costs[::-1]  # cheaper first, each later one faster
    for a in res.answers:
        names = {v.job for v in a.victims}
        assert all(by_name[v].priority < priority for v in names)  # never a job of higher or equal priority
        assert a.gpu_hours == pytest.approx(sum(_cost(by_name[v], state) for v in names))
        freed = dataclasses.replace(
            state, occupied={d: j for d, j in state.occupied.items() if j not in names}
        )
        assert validate(topo, freed, job, a.mapping) == []
        for v in a.victims:
            assert set(v.devices) == {d for d, j in state.occupied.items() if j == v.job}
            assert v.used_devices == len(set(v.devices) & set(a.mapping))
            assert v.job in v.explanation and f"{v.gpu_hours:.3f} GPU-hours" in v.explanation
            for where in v.clears:  # the domain holds some of its devices and nothing runs there afterwards
                inside = set(topo.resolve(where))
                assert inside & set(v.devices) and not inside & set(freed.occupied), where
    assert set(res.protected) == {rj.job for rj in running if rj.priority >= priority}


def test_no_victim_when_the_job_fits_now() -> None:
    topo, state, running = _case(7, 3)
    job = job_from_dict(job_doc(2, 2, name="small"), "j")
    opts = SolveOptions(strategy=Strategy.KUEUE_TAS, time_limit_s=4.0, deterministic=True)
    res = preempt(topo, state, job, running, job_priority=9.0, options=opts)
    assert res.chosen.count == 0 and res.chosen.name == "none" and res.proven


def test_equal_priority_is_never_preempted() -> None:
    """Every device is held by a job of the incoming job's own priority: nothing may be preempted."""
    topo, _ = cluster_from_dict(cluster_doc(2, gpus=4, per_leaf=2), "c")
    state = state_from_dict(
        {"occupied": [{"job": "a", "devices": ["node01"]}, {"job": "b", "devices": ["node02"]}]}, topo, "s"
    )
    running = [RunningJob("a", 1.0, gpu_hours=0.1), RunningJob("b", 0.0, gpu_hours=9.0)]
    job = job_from_dict(job_doc(4, 1, name="inc"), "j")
    opts = SolveOptions(strategy=Strategy.KUEUE_TAS, time_limit_s=4.0, deterministic=True)
    res = preempt(topo, state, job, running, job_priority=1.0, options=opts)
    assert [v.job for v in res.chosen.victims] == ["b"]  # a is cheaper, but of equal priority
    assert res.protected == ["a"]
    job8 = job_from_dict(job_doc(4, 2, name="inc8"), "j")
    with pytest.raises(InfeasibleError, match="may not be preempted"):
        preempt(topo, state, job8, running, job_priority=1.0, options=opts)


def test_bad_input_names_the_field_the_value_and_the_rule() -> None:
    topo, state, running = _case(8, 3)
    job = job_from_dict(job_doc(2, 2, name="inc"), "j")
    bad = [
        RunningJob("nope", 0.0, gpu_hours=1.0),
        RunningJob("r0", 0.0),
        RunningJob("r1", 0.0, gpu_hours=-2.0),
        RunningJob("r1", 0.0, gpu_hours=1.0),
    ]
    with pytest.raises(InputError) as info:
        preempt(topo, state, job, bad, max_slowdown=0.5, max_step_seconds=-1.0, max_checks=0)
    got = {p.path: p.message for p in info.value.problems}
    assert "no device of the state is occupied by job 'nope'" in got["running[0].job"]
    assert "give gpu_hours or checkpoint_age_s" in got["running[1]"]
    assert got["running[2].gpu_hours"] == "must be a number >= 0, got -2.0"
    assert "listed twice" in got["running[3].job"]
    assert got["max_slowdown"].startswith("must be a number >= 1") and "0.5" in got["max_slowdown"]
    assert got["max_step_seconds"] == "must be a number > 0, got -1.0"
    assert got["max_checks"] == "must be >= 1, got 0"
    with pytest.raises(InputError, match="objective: unknown objective 'cheapest'"):
        preempt(topo, state, job, running, objective="cheapest")


def test_cases_need_victims() -> None:
    """The brute-force cases are not trivial: in all but one the job does not fit now, or not within the bound."""
    needed = 0
    for seed, jobs, _, tp, dp, slowdown, strategy, _ in CASES:
        topo, state, _ = _case(seed, jobs)
        job = job_from_dict(job_doc(tp, dp, name="incoming"), "j")
        checks = check_options(
            SolveOptions(strategy=strategy, time_limit_s=8.0, deterministic=True, workers=1)
        )
        try:
            now = place(topo, state, job, checks).report
        except InfeasibleError:
            needed += 1
            continue
        ideal = place(topo, dataclasses.replace(state, occupied={}), job, checks).report
        assert now is not None and ideal is not None
        needed += slowdown is not None and now.step_seconds > slowdown * ideal.step_seconds * (1 + 1e-9)
    assert needed >= len(CASES) - 1
