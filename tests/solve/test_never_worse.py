"""The answer of `place` is never worse, by the evaluator's (step, exposed comm), than any scheduler baseline or
constructive heuristic, each computed here independently of `place`: on fragmented states, rank orders, structured,
explicit and point-to-point forms of a job, a degraded GPU, and 1 or 2 workers. The bounds are below every one
of them, the stop reason is reported, and OPTIMAL means both bounds are met."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.model.validate import validate
from placement.sim.scenarios import (
    fat_tree,
    megatron_job,
)
from placement.solve import SolveOptions, SolveStatus, place
from placement.solve.types import key_better
from tests.support_solve import FORM, ORDERS, fragmented, key, peers, with_order


@settings(max_examples=14, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    busy=st.floats(0.3, 0.6),
    seed=st.integers(0, 10_000),
    shape=st.sampled_from([(2, 1, 4), (4, 2, 2), (8, 1, 2), (2, 4, 2), (4, 1, 4), (2, 2, 4), (8, 2, 1)]),
    order=st.sampled_from(ORDERS),
    form=st.sampled_from(list(FORM)),
    degraded=st.booleans(),
    workers=st.sampled_from([1, 2]),
)
def test_never_worse_than_any_baseline_or_heuristic(
    busy: float, seed: int, shape: tuple[int, int, int], order: str, form: str, degraded: bool, workers: int
) -> None:
    topo = fat_tree(256, nodes_per_leaf=4, leaves_per_spine=4)
    state = fragmented(topo, busy, seed)
    if degraded:  # one free GPU 1000x slower: the evaluator prices it, the schedulers do not see it
        free = [d for d in range(topo.num_devices) if state.usable(d)]
        state = dataclasses.replace(state, device_slowdown={free[seed % len(free)]: 1000.0})
    tp, pp, dp = shape
    job = FORM[form](with_order(megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=2048, layers=8), order))
    res = place(topo, state, job, SolveOptions(time_limit_s=0.5, deterministic=True, workers=workers))
    assert res.mapping is not None and res.report is not None and res.lower_bound is not None
    assert validate(topo, state, job, res.mapping) == []
    answer = key(topo, state, job, res.mapping)
    others = peers(topo, state, job)
    assert others, "no baseline or heuristic placed the job: nothing to compare with"
    for name, m in others.items():
        other = key(topo, state, job, m)
        assert not key_better(other, answer), f"{name} {other} beats the answer {answer}"
        assert res.lower_bound <= other[1] * (1 + 1e-9), f"the bound is above {name}'s exposed comm"
        assert float(res.stats["step_bound"]) <= other[0] * (1 + 1e-9), (
            f"the step bound is above {name}'s step"
        )
    assert res.stats["stop_reason"] in ("gap_closed", "time_limit", "no_improvement")
    step_closed = res.report.step_seconds <= float(res.stats["step_bound"]) * (1 + 1e-9)
    assert (res.status is SolveStatus.OPTIMAL) == (res.gap is not None and res.gap <= 1e-9 and step_closed)
