"""`polish` (placement.solve.refine): it stops after a round that improves nothing, never returns a mapping worse
than its start by the evaluator, and keeps every hard rule; the same request gives the same polish. Started from
the valid heuristic mapping with the longest step."""

from __future__ import annotations

import dataclasses
import random

import pytest

import placement.solve.refine as refine
from placement.cost.evaluate import evaluate
from placement.model.state import ClusterState
from placement.model.validate import validate
from placement.sim.scenarios import fat_tree, megatron_job
from placement.solve import SolveOptions
from placement.solve.heuristics import HEURISTICS, rank_units
from placement.solve.incremental import StepEval
from placement.solve.prepared import PreparedRequest
from placement.solve.refine import polish
from placement.solve.types import report_key


def _request(seed: int) -> tuple[PreparedRequest, list[int]]:
    topo = fat_tree(128, nodes_per_leaf=4, leaves_per_spine=4)
    rng = random.Random(seed)
    busy = rng.sample(range(topo.num_devices), 40)
    state = ClusterState(occupied={d: "other" for d in busy})
    job = megatron_job("j", tp=4, pp=2, dp=4, hidden=2048, layers=8)
    req = PreparedRequest.prepare(topo, state, job, SolveOptions(seed=seed, deterministic=True))
    return req, _worst_valid_start(req)


def _worst_valid_start(req: PreparedRequest) -> list[int]:
    """The valid heuristic mapping with the longest modeled step: room for the polish to improve."""
    starts = []
    for name, heuristic in sorted(HEURISTICS.items()):
        m = heuristic(req.topology, req.state, req.job, req.traffic)
        if m is not None and not validate(req.topology, req.state, req.job, m):
            starts.append((report_key(evaluate(req.topology, req.state, req.job, m))[:2], name, m))
    assert starts
    return max(starts)[2]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_polish_never_worsens_its_start_and_stops_after_one_idle_round(seed: int) -> None:
    req, start = _request(seed)
    units = rank_units(req.job, req.traffic)
    out = polish(req, start, units, deadline=float("inf"), max_rounds=200)
    before = report_key(evaluate(req.topology, req.state, req.job, start))
    after = report_key(evaluate(req.topology, req.state, req.job, out.mapping))
    assert after[:2] <= before[:2]
    assert out.key == pytest.approx(after[:2], rel=1e-12)
    assert not validate(req.topology, req.state, req.job, out.mapping)
    assert out.stop_reason == "no_improvement"  # (200 rounds are never reached here)
    assert out.rounds <= out.improved + 1  # every round but the last (idle) one improved something
    again = polish(req, start, units, deadline=float("inf"), max_rounds=200)
    assert again.mapping == out.mapping and again.trials == out.trials
    # from its own answer, one idle round and it stops
    settled = polish(req, out.mapping, units, deadline=float("inf"), max_rounds=200)
    assert settled.rounds == 1 and settled.improved == 0 and settled.stop_reason == "no_improvement"
    assert settled.mapping == out.mapping


def test_moves_that_break_a_required_level_are_refused_without_pricing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topo = fat_tree(128, nodes_per_leaf=4, leaves_per_spine=4)
    state = ClusterState(occupied={d: "other" for d in random.Random(5).sample(range(topo.num_devices), 40)})
    job = megatron_job("j", tp=4, pp=2, dp=4, hidden=2048, layers=8)
    job = dataclasses.replace(job, constraints=dataclasses.replace(job.constraints, require={"tp": "node"}))
    req = PreparedRequest.prepare(topo, state, job, SolveOptions(seed=5, deterministic=True))
    start = _worst_valid_start(req)
    units = rank_units(job, req.traffic)
    priced: list[int] = []
    real_trial = StepEval.trial

    def counted(self: StepEval, moves: dict[int, int]) -> object:
        priced.append(1)
        return real_trial(self, moves)

    monkeypatch.setattr(StepEval, "trial", counted)
    fast = polish(req, start, units, deadline=float("inf"), max_rounds=200)
    fast_priced = len(priced)
    priced.clear()
    monkeypatch.setattr(refine, "_required_checks", lambda _req: {})  # every move priced, then validated
    slow = polish(req, start, units, deadline=float("inf"), max_rounds=200)
    assert (fast.mapping, fast.key, fast.trials, fast.rounds) == (
        slow.mapping,
        slow.key,
        slow.trials,
        slow.rounds,
    )
    assert fast_priced < len(priced)
    assert not validate(topo, state, job, fast.mapping)
