"""The gRPC server under time pressure: a deadline shorter than the solve, a cancelled call, and 32 concurrent
calls of mixed sizes.

Tests that need a solve of a given duration replace `server.servicer.place` with a fake: the server's
plumbing is under test there, not the optimizer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from placement.errors import InfeasibleError
from placement.solve import PlacementResult
from placement.v1 import placement_pb2 as pb
from tests.support_server import Running, fake_result, place_request, rpc_error, running, warm_server


@pytest.fixture(scope="module")
def srv() -> Iterator[Running]:
    """This module's own warm server (metrics on, a 10 s solve limit)."""
    with warm_server() as r:
        yield r


# ---- deadline and cancellation ------------------------------------------------------------------------------


def test_a_deadline_shorter_than_the_solve_returns_the_best_answer_so_far(srv: Running) -> None:
    # 256 ranks on 512 GPUs: the optimizer needs several seconds to prove optimality; the deadline is 3 s
    req = place_request(
        nodes=64, tp=4, dp=16, pp=4, occupied=tuple(f"node{i:02d}" for i in range(1, 10)), time_limit_s=30
    )
    t0 = time.monotonic()
    res = srv.stub.Place(req, timeout=3.0).result
    assert time.monotonic() - t0 < 3.0
    assert res.stats.deadline_limited and 0 < res.stats.time_limit_s < 3.0
    assert len(res.mapping) == 256 and len({a.device for a in res.mapping}) == 256
    # the best answer so far: never worse than any scheduler baseline computed before the deadline
    baselines = [b.comm_seconds for b in res.baselines if b.HasField("comm_seconds")]
    assert baselines and res.cost.comm_seconds <= min(baselines) + 1e-9
    # its status and gap agree, whichever it is when the deadline falls
    assert res.HasField("gap") and (res.status == pb.SOLVE_STATUS_OPTIMAL) == (res.gap == 0)


def test_the_deadline_stops_the_search_and_its_best_answer_comes_back_with_its_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, float] = {}

    def anytime_place(topology: Any, state: Any, job: Any, options: Any) -> PlacementResult:
        seen["time_limit_s"] = options.time_limit_s
        options.stop.wait(options.time_limit_s)  # a solver that uses its whole budget
        return fake_result(list(range(job.ranks)), seconds=2.0, bound=1.5)

    monkeypatch.setattr("server.servicer.place", anytime_place)
    with running() as r:
        res = r.stub.Place(place_request(time_limit_s=60), timeout=1.0).result
    assert res.status == pb.SOLVE_STATUS_FEASIBLE and res.gap == pytest.approx(0.25)
    assert res.stats.deadline_limited and seen["time_limit_s"] < 1.0


def test_without_any_answer_by_the_deadline_it_is_deadline_exceeded(monkeypatch: pytest.MonkeyPatch) -> None:
    def fruitless_place(topology: Any, state: Any, job: Any, options: Any) -> PlacementResult:
        options.stop.wait(options.time_limit_s)
        raise InfeasibleError(["the solver found no mapping before it was stopped"])

    monkeypatch.setattr("server.servicer.place", fruitless_place)
    with running() as r:
        err = rpc_error(lambda: r.stub.Place(place_request(time_limit_s=60), timeout=1.0))
    assert err.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert "within the deadline" in (err.details() or "")  # the server's answer, before grpc's own


def test_cancelling_a_call_stops_its_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    started, stopped = threading.Event(), threading.Event()

    def waiting_place(topology: Any, state: Any, job: Any, options: Any) -> PlacementResult:
        started.set()
        if options.stop.wait(20):
            stopped.set()
        return fake_result(list(range(job.ranks)))

    monkeypatch.setattr("server.servicer.place", waiting_place)
    with running() as r:
        future = r.stub.Place.future(place_request(), timeout=30)
        assert started.wait(10)
        future.cancel()
        assert stopped.wait(5)


# ---- concurrency --------------------------------------------------------------------------------------------


def test_32_concurrent_calls_of_mixed_sizes_all_succeed(srv: Running) -> None:
    shapes = [(4, 8, 2, 1), (8, 8, 4, 1), (16, 8, 4, 2), (32, 8, 8, 2), (4, 4, 4, 1), (16, 4, 8, 2)]
    requests = [place_request(nodes=n, tp=tp, dp=dp, pp=pp, time_limit_s=5) for n, tp, dp, pp in shapes]
    evaluate_req = place_request()

    def one(i: int) -> int:
        if i % 8 == 7:  # some Evaluate calls in the mix
            placed = srv.stub.Place(evaluate_req, timeout=60).result
            ev = pb.EvaluateRequest(
                cluster=evaluate_req.cluster, job=evaluate_req.job, mapping=placed.mapping
            )
            return len(srv.stub.Evaluate(ev, timeout=60).mapping)
        return len(srv.stub.Place(requests[i % len(requests)], timeout=60).result.mapping)

    with ThreadPoolExecutor(32) as ex:
        sizes = list(ex.map(one, range(32)))
    expected = [
        16 if i % 8 == 7 else (lambda s: s[1] * s[2] * s[3])(shapes[i % len(shapes)]) for i in range(32)
    ]
    assert sizes == expected
