"""`polish` (placement.solve.refine): it stops after a round that improves nothing, never returns a mapping worse
than its start by the evaluator, and keeps every hard rule; the same request gives the same polish. Started from
a heuristic that packs badly (least-free)."""

from __future__ import annotations

import random

import pytest

from placement.cost.evaluate import evaluate
from placement.model.state import ClusterState
from placement.model.validate import validate
from placement.sim.scenarios import fat_tree, megatron_job
from placement.solve import SolveOptions
from placement.solve.heuristics import HEURISTICS, rank_units
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
    start = HEURISTICS["least-free"](topo, state, job, req.traffic)
    assert start is not None
    return req, start


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
