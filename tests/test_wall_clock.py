"""Issue 23 item 6: batch, repair and replay limits are wall-clock limits (`placement.decide.batch.clock.WallClock`)
unless deterministic, where the limit is a deterministic budget and the result's stats say so. No timing is
asserted here (bench/limits.py measures the limits); only who stops what and what the stats call the limit.
"""

from __future__ import annotations

import threading

from placement.decide.batch.clock import WallClock, limit_kind
from placement.decide.batch.joint import place_batch
from placement.decide.batch.types import BatchJob
from placement.model.state import ClusterState
from placement.solve import SolveOptions, StopEvent
from tests.test_batch import cluster, job


def test_a_deterministic_limit_is_a_budget_and_gets_no_clock() -> None:
    opts = SolveOptions(time_limit_s=0.001, deterministic=True)
    clock = WallClock(opts)
    try:
        assert clock.options is opts and opts.stop is None
    finally:
        clock.cancel()
    assert limit_kind(opts) == "deterministic budget"
    assert limit_kind(SolveOptions(time_limit_s=1.0)) == "wall clock"


def test_the_callers_stop_event_stops_the_clocked_search() -> None:
    outer = StopEvent()
    clock = WallClock(SolveOptions(time_limit_s=3600.0, stop=outer))
    try:
        inner = clock.options.stop
        assert inner is not None and inner is not outer and not inner.is_set()
        outer.set()
        assert inner.is_set()
    finally:
        clock.cancel()


def test_a_plain_threading_event_of_the_caller_also_stops_it() -> None:
    outer = threading.Event()
    clock = WallClock(SolveOptions(time_limit_s=3600.0, stop=outer))
    try:
        inner = clock.options.stop
        assert inner is not None and not inner.is_set()
        outer.set()
        assert inner.wait(10.0)  # polled: set within a few ms, 10 s is only a bound for a stalled machine
    finally:
        clock.cancel()


def test_a_spent_limit_stops_the_search() -> None:
    clock = WallClock(SolveOptions(time_limit_s=0.0))
    try:
        inner = clock.options.stop
        assert inner is not None and inner.wait(10.0)
    finally:
        clock.cancel()


def test_batch_stats_name_the_kind_of_limit() -> None:
    topo = cluster(4)
    jobs = [BatchJob(job("a", 4)), BatchJob(job("b", 2, dp=2))]
    det = place_batch(topo, ClusterState(), jobs, SolveOptions(time_limit_s=1.0, deterministic=True))
    wall = place_batch(topo, ClusterState(), jobs, SolveOptions(time_limit_s=2.0, seed=0))
    assert det.stats["time_limit"] == "deterministic budget"
    assert wall.stats["time_limit"] == "wall clock"
    assert {o.name for o in wall.plan.admitted} == {"a", "b"}  # both fit: the clock did not cut the search
