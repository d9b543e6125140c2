"""Preempt with a balance rule (placement.decide.preempt): the victim set is the least among every set of lower-priority
jobs under which some balanced mapping exists (brute force over the subsets and the device sets, judged by the
independent validator), also where the balanced mapping is not the one the solver would pick without the rule; the
job's ideal is solved once per process, shared with place or wait."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

import pytest

from placement.cost.evaluate import evaluate
from placement.decide import ideal
from placement.decide.preempt import RunningJob, preempt
from placement.decide.wait import decide
from placement.errors import InfeasibleError
from placement.io.native import cluster_from_dict, job_from_dict, state_from_dict
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.validate import validate
from placement.solve import SolveOptions
from tests.support_server import cluster_doc, job_doc

OPTS = SolveOptions(time_limit_s=4.0, workers=1, deterministic=True)


def _topo() -> Topology:
    """3 leaves of 2 hosts of 2 devices: leaf01 holds devices 0-3, leaf02 4-7, leaf03 8-11."""
    topo, _ = cluster_from_dict(cluster_doc(6, gpus=2, per_leaf=2), "c")
    return topo


def _job(ranks: int, slice_: int) -> Job:
    doc = job_doc(1, ranks, name="incoming")
    doc["constraints"] = {"balance": {"level": "leaf", "slice": slice_}}
    return job_from_dict(doc, "j")


def _state(topo: Topology, holders: dict[str, list[int]]) -> ClusterState:
    occ = [{"job": j, "devices": [topo.devices[d].id for d in ds]} for j, ds in holders.items()]
    return state_from_dict({"occupied": occ}, topo, "s")


def _freed(state: ClusterState, names: set[str]) -> ClusterState:
    return dataclasses.replace(state, occupied={d: j for d, j in state.occupied.items() if j not in names})


def _fits(topo: Topology, state: ClusterState, job: Job) -> bool:
    """Some device set of the job's size passes the validator (the ranks are interchangeable: one DP group, no
    level required, so one order of a set is as valid as any)."""
    free = [d for d in range(topo.num_devices) if d not in state.occupied]
    return any(not validate(topo, state, job, list(c)) for c in itertools.combinations(free, job.ranks))


def _least(
    topo: Topology, state: ClusterState, job: Job, running: list[RunningJob], priority: float
) -> tuple[tuple[int, float] | None, list[set[str]]]:
    """The least (victims, GPU-hours) over every subset of the lower-priority jobs that lets the job fit, and
    the subsets that reach it."""
    lower = [rj for rj in running if rj.priority < priority]
    best: tuple[int, float] | None = None
    sets: list[set[str]] = []
    for n in range(len(lower) + 1):
        for sub in itertools.combinations(lower, n):
            names = {rj.job for rj in sub}
            if not _fits(topo, _freed(state, names), job):
                continue
            key = (n, round(sum(rj.gpu_hours or 0.0 for rj in sub), 3))
            if best is None or key < best:
                best, sets = key, [names]
            elif key == best:
                sets.append(names)
    return best, sets


def _balanced(topo: Topology, mapping: list[int], slice_: int) -> bool:
    counts = Counter(topo.domain_column(1)[d] for d in mapping).values()
    return all(c % slice_ == 0 for c in counts) and max(counts) - min(counts) <= slice_


def _case() -> tuple[Topology, ClusterState, Job, list[RunningJob]]:
    """Free: leaf01 devices 1, 2, 3; leaf02 device 4 (host node03); leaf03 device 10. The job: 4 ranks in slices
    of 2 balanced over leaves (2 + 2 or 4 in one leaf). Freeing a (device 7, node04) allows 2 + 2 over three
    hosts, as many as the unbalanced 3 + 1; freeing b (device 5, node03) allows 2 + 2 over two hosts. p may not be
    preempted."""
    topo = _topo()
    state = _state(topo, {"p": [0, 6, 8, 9, 11], "a": [7], "b": [5]})
    running = [
        RunningJob("p", 9.0, gpu_hours=1.0),
        RunningJob("a", 0.0, gpu_hours=0.5),
        RunningJob("b", 0.0, gpu_hours=2.0),
    ]
    return topo, state, _job(4, 2), running


def test_a_balanced_placement_under_the_cheapest_set_is_found() -> None:
    topo, state, job, running = _case()
    expected, sets = _least(topo, state, job, running, 1.0)
    assert expected is not None
    res = preempt(topo, state, job, running, job_priority=1.0, options=OPTS, max_checks=64)
    chosen = res.chosen
    assert (chosen.count, round(chosen.gpu_hours, 3)) == expected
    names = {v.job for v in chosen.victims}
    assert names in sets
    assert validate(topo, _freed(state, names), job, chosen.mapping) == []
    assert _balanced(topo, chosen.mapping, 2)
    for a in res.answers:  # every answer is balanced and leaves p alone
        assert _balanced(topo, a.mapping, 2) and "p" not in {v.job for v in a.victims}


def _random_case(seed: int) -> tuple[Topology, ClusterState, Job, list[RunningJob]]:
    rng = random.Random(seed)
    topo = _topo()
    devs = list(range(topo.num_devices))
    rng.shuffle(devs)
    holders: dict[str, list[int]] = {}
    running: list[RunningJob] = []
    for j in range(rng.choice((3, 4, 5))):
        k = rng.choice((1, 2, 2, 3))
        take, devs = devs[:k], devs[k:]
        if not take:
            break
        holders[f"r{j}"] = take
        running.append(RunningJob(f"r{j}", float(rng.randrange(3)), gpu_hours=rng.choice((0.5, 1.0, 2.0))))
    ranks = rng.choice((4, 6))
    return topo, _state(topo, holders), _job(ranks, rng.choice((1, 2))), running


@pytest.mark.parametrize("seed", [0, 2, 5, 12, 24, 36])
def test_the_victims_are_the_least_set_with_a_balanced_placement(seed: int) -> None:
    topo, state, job, running = _random_case(seed)
    expected, sets = _least(topo, state, job, running, 2.0)
    if expected is None:
        with pytest.raises(InfeasibleError):
            preempt(topo, state, job, running, job_priority=2.0, options=OPTS, max_checks=256)
        return
    res = preempt(topo, state, job, running, job_priority=2.0, options=OPTS, max_checks=256)
    assert res.proven
    chosen = res.chosen
    assert (chosen.count, round(chosen.gpu_hours, 3)) == expected
    assert {v.job for v in chosen.victims} in sets
    slice_ = job.constraints.balance.slice if job.constraints.balance else 1
    for a in res.answers:
        names = {v.job for v in a.victims}
        assert validate(topo, _freed(state, names), job, a.mapping) == []
        assert _balanced(topo, a.mapping, slice_)


def test_the_ideal_is_solved_once_for_preempt_and_place_or_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ideal, "_cache", OrderedDict())
    calls: list[str] = []
    real: Callable[..., Any] = ideal.place_job

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append("ideal")
        return real(*args, **kwargs)

    monkeypatch.setattr(ideal, "place_job", counted)
    topo, state, job, running = _case()
    first = preempt(topo, state, job, running, job_priority=1.0, options=OPTS, max_slowdown=3.0)
    assert calls == ["ideal"] and first.ideal is not None
    placed = decide(topo, _freed(state, {"a", "b"}), job, OPTS, max_slowdown=3.0)
    again = preempt(topo, state, job, running, job_priority=1.0, options=OPTS, max_slowdown=3.0)
    assert calls == ["ideal"]  # place or wait and the second preempt found it in the cache
    assert again.ideal is not None and again.ideal.step_seconds == first.ideal.step_seconds
    hit = ideal.ideal_placement(topo, state, job, OPTS)
    assert hit is not None
    empty = dataclasses.replace(state, occupied={})
    mapping = list(hit[1])
    assert validate(topo, empty, job, mapping) == [] and _balanced(topo, mapping, 2)
    assert evaluate(topo, empty, job, mapping).step_seconds == pytest.approx(first.ideal.step_seconds)
    assert placed.verdict is not None
    assert placed.verdict.ideal_step_s <= first.ideal.step_seconds * (1 + 1e-9)
