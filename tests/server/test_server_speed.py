"""Issue 23: the same request gives the same answer cold or warm, in thread or process mode; solves in worker
processes keep deadlines, cancellation, limits, error details and metrics; the prepared-cluster caches (fabric,
paths, conversions) give the numbers a cold computation gives.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import yaml
from google.rpc import error_details_pb2

from placement.cost.evaluate import evaluate
from placement.decide.wait import decide
from placement.io.native import cluster_from_dict, merge_states, state_from_dict
from placement.messages import domain as convert
from placement.messages.files import request_from_dict
from placement.model.state import ClusterState
from placement.model.traffic import job_traffic
from placement.solve import StopEvent, place
from placement.v1 import placement_pb2 as pb
from server.memo import MEMO_NOTE, AnswerMemo
from server.servicer import PlacementServicer
from server.settings import Settings
from server.workers import MetricsRecorder
from tests.conftest import EXAMPLES
from tests.support_server import (
    Running,
    details_of,
    field_violations,
    metrics_at,
    place_request,
    rpc_error,
    running,
)


def _doc(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((EXAMPLES / name).read_text()))


def make_run_request() -> pb.PlaceRequest:
    """`make run`'s request: llama-13b TP8 x PP2 x DP4 on h100-256 with its busy state; deterministic CP-SAT."""
    return request_from_dict(
        {
            "cluster": _doc("h100-256.yaml"),
            "state": _doc("h100-256-busy.yaml"),
            "job": _doc("llama-13b-tp8-pp2-dp4.yaml"),
            "options": {"time_limit_s": 5, "deterministic": True, "strategy": "cpsat"},
        },
        pb.PlaceRequest,
    )


def _answer(resp: pb.PlaceResponse) -> bytes:
    """Everything of an answer but its timings (wall seconds and solver statistics)."""
    out = pb.PlaceResponse()
    out.CopyFrom(resp)
    out.result.ClearField("stats")
    return out.SerializeToString(deterministic=True)


def _reference(req: pb.PlaceRequest) -> bytes:
    """The answer computed in this process with every cache cold: a new conversion (a new Topology, so no
    fabric, plan or path of an earlier request is reused)."""
    convert.CONVERTED.clear()
    inputs = convert.place_inputs(req)
    inputs.options.workers = 1  # the server's threads per solve with 2 workers on this test's settings
    res = decide(
        inputs.topology, inputs.state, inputs.job, inputs.options
    )  # Place: the answer and its slowdown
    convert.CONVERTED.clear()
    return _answer(
        pb.PlaceResponse(
            result=convert.result_to_proto(
                inputs.topology, inputs.job, res, time_limit_s=5.0, deadline_limited=False
            )
        )
    )


@pytest.fixture(scope="module")
def process_server() -> Iterator[Running]:
    """A server whose solves run in 2 worker processes, each with one CP-SAT thread, metrics on."""
    with running(solve_mode="process", workers=2, solver_threads=1, metrics_port=0) as r:
        yield r


# ---- answers stay the same -----------------------------------------------------------------------------------


def test_the_make_run_request_answers_the_same_cold_warm_thread_and_process(process_server: Running) -> None:
    req = make_run_request()
    expected = _reference(req)
    got = {}
    with running(solve_mode="thread", workers=2, solver_threads=1) as thread_server:
        got["thread cold"] = _answer(thread_server.stub.Place(req, timeout=120))
        got["thread warm"] = _answer(thread_server.stub.Place(req, timeout=120))
        got["thread warm again"] = _answer(thread_server.stub.Place(req, timeout=120))
    # two calls at once reach both worker processes: each has its first (cold) and then a warm request
    calls = [process_server.stub.Place.future(req, timeout=120) for _ in range(2)]
    got["process cold (both workers)"] = b"".join(sorted({_answer(c.result()) for c in calls}))
    for i in range(3):
        got[f"process warm {i}"] = _answer(process_server.stub.Place(req, timeout=120))
    assert {k: v == expected for k, v in got.items()} == dict.fromkeys(got, True)
    decoded = pb.PlaceResponse.FromString(expected).result
    assert (
        decoded.status in (pb.SOLVE_STATUS_OPTIMAL, pb.SOLVE_STATUS_FEASIBLE) and len(decoded.mapping) == 64
    )


# ---- process mode keeps the server's contract ----------------------------------------------------------------


def test_process_mode_reports_invalid_argument_with_field_paths(process_server: Running) -> None:
    req = place_request()
    req.job.parallel.order = "tp-xx"
    req.options.time_limit_s = -1
    v = field_violations(rpc_error(lambda: process_server.stub.Place(req, timeout=30)))
    assert "options.time_limit_s" in v and any(k.startswith("job.parallel") for k in v)


def test_process_mode_reports_infeasible_as_failed_precondition(process_server: Running) -> None:
    req = place_request(nodes=2, tp=8, dp=4)  # 32 ranks on 16 devices
    err = rpc_error(lambda: process_server.stub.Place(req, timeout=30))
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert details_of(err, error_details_pb2.PreconditionFailure)


def test_process_mode_deadline_returns_the_best_answer_so_far(process_server: Running) -> None:
    req = place_request(
        nodes=64, tp=4, dp=16, pp=4, occupied=tuple(f"node{i:02d}" for i in range(1, 10)), time_limit_s=30
    )
    t0 = time.monotonic()
    res = process_server.stub.Place(req, timeout=3.0).result
    assert time.monotonic() - t0 < 3.0
    assert res.stats.deadline_limited and 0 < res.stats.time_limit_s < 3.0
    assert len({a.device for a in res.mapping}) == 256


def test_process_mode_answers_a_call_without_a_deadline(process_server: Running) -> None:
    # a solve process sees "no deadline" as None, where gRPC gives a huge number: the template must take both
    req = place_request(nodes=2, tp=8, dp=2)
    res = process_server.stub.Place(req).result  # no timeout: the call has no deadline
    assert res.status in (pb.SOLVE_STATUS_OPTIMAL, pb.SOLVE_STATUS_FEASIBLE)
    assert not res.stats.deadline_limited
    assert sorted(a.rank for a in res.mapping) == list(range(16))
    assert len({a.device for a in res.mapping}) == 16


def test_process_mode_cancelling_a_call_frees_its_worker(process_server: Running) -> None:
    slow = place_request(
        nodes=64, tp=4, dp=16, pp=4, occupied=tuple(f"node{i:02d}" for i in range(1, 10)), time_limit_s=60
    )
    futures = [process_server.stub.Place.future(slow, timeout=120) for _ in range(2)]  # both workers busy
    time.sleep(1.0)
    t0 = time.monotonic()
    for f in futures:
        f.cancel()
    pool = process_server.server._pool
    end = time.monotonic() + 20
    while pool.admitted and time.monotonic() < end:
        time.sleep(0.02)
    assert pool.admitted == 0, "the cancelled solves still hold their workers"
    freed = time.monotonic() - t0
    assert freed < 10, f"the workers took {freed:.1f} s to stop a 60 s solve"
    res = process_server.stub.Place(place_request(), timeout=60).result  # the workers serve again
    assert len(res.mapping) == 16


def test_process_mode_counts_solves_in_the_server_metrics(process_server: Running) -> None:
    def solves() -> float:
        text = metrics_at(process_server.server.metrics_port)
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith('placement_solves_total{method="Place"')
        )

    before = solves()
    for _ in range(3):
        process_server.stub.Place(place_request(), timeout=60)
    assert solves() - before == 3


def test_process_mode_answers_a_repeated_request_from_the_memo_and_counts_it_apart() -> None:
    def count(text: str, name: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))

    with running(solve_mode="process", workers=1, solver_threads=1, answer_memo=4, metrics_port=0) as r:
        answers = [r.stub.Place(place_request(), timeout=60) for _ in range(3)]
        text = metrics_at(r.server.metrics_port)
    assert count(text, 'placement_solves_total{method="Place"') == 1
    assert count(text, 'placement_memo_hits_total{method="Place"}') == 2
    assert [MEMO_NOTE in a.result.stats.notes for a in answers] == [False, True, True]
    assert _answer(answers[1]) == _answer(answers[2]) == _answer(answers[0])


def slow_request() -> pb.PlaceRequest:
    """A request whose search runs for seconds: 128 ranks (tp2 pp8 dp8) on 64 hosts with 0-6 busy devices each
    (mixed fragments: the bound stays open, so the search goes on until its 10 s limit or no neighbourhood
    improves; about 20 s of search without the limit)."""
    busy = tuple(f"node{i:02d}/gpu{g}" for i in range(1, 65) for g in range((i * 3) % 7))
    return place_request(nodes=64, tp=2, dp=8, pp=8, occupied=busy, time_limit_s=10)


def test_process_mode_full_queue_is_resource_exhausted() -> None:
    slow = slow_request()
    with running(solve_mode="process", workers=1, queue_limit=0, solver_threads=1) as r:
        r.stub.Place(place_request(), timeout=60)  # the worker has started
        busy = r.stub.Place.future(slow, timeout=60)
        end = time.monotonic() + 10
        while r.server._pool.admitted < 1 and time.monotonic() < end:
            time.sleep(0.01)
        err = rpc_error(lambda: r.stub.Place(place_request(), timeout=30))
        busy.cancel()
    assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details_of(err, error_details_pb2.QuotaFailure)


def test_a_killed_worker_is_replaced_and_its_call_is_internal(process_server: Running) -> None:
    procs = process_server.server._pool.processes
    assert procs is not None
    slow = slow_request()
    before = set(procs.pids)
    futures = [process_server.stub.Place.future(slow, timeout=60) for _ in range(2)]
    time.sleep(1.0)
    victim = next(iter(before))
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    codes = []
    for f in futures:
        try:
            f.result()
            codes.append(grpc.StatusCode.OK)
        except grpc.RpcError as e:
            codes.append(e.code())
    assert grpc.StatusCode.INTERNAL in codes
    assert victim not in procs.pids and len(procs.pids) == 2
    assert len(process_server.stub.Place(place_request(), timeout=60).result.mapping) == 16


# ---- the caches give the cold numbers ------------------------------------------------------------------------


def _cold_topology() -> tuple[Any, ClusterState]:
    topo, base = cluster_from_dict(_doc("h100-256.yaml"), "cluster")
    return topo, base


def test_a_warm_fabric_prices_every_health_as_a_cold_one() -> None:
    req = make_run_request()
    inputs = convert.place_inputs(req)
    res = place(inputs.topology, inputs.state, inputs.job, inputs.options)
    topo, base = inputs.topology, inputs.state
    job, mapping = inputs.job, list(res.mapping)
    traffic = job_traffic(job)
    # a degraded device in the mapping: it slows its groups down
    slow_doc = {
        "degraded": [
            {"device": topo.devices[mapping[0]].id, "slowdown": 2.0},
        ],
    }
    healthy = evaluate(topo, base, job, mapping, traffic=traffic)
    degraded_state = merge_states(base, state_from_dict(slow_doc, topo, "state"))
    warm = evaluate(topo, degraded_state, job, mapping, traffic=traffic)
    again = evaluate(topo, base, job, mapping, traffic=traffic)
    # cold: a new Topology object from the same documents (no cache of the ones above applies)
    cold_topo, cold_base = _cold_topology()
    cold_busy = merge_states(cold_base, state_from_dict(_doc("h100-256-busy.yaml"), cold_topo, "state"))
    cold_degraded = merge_states(cold_busy, state_from_dict(slow_doc, cold_topo, "state"))
    cold = evaluate(cold_topo, cold_degraded, job, mapping, traffic=traffic)
    cold_healthy = evaluate(cold_topo, cold_busy, job, mapping, traffic=traffic)
    assert warm.step_seconds == cold.step_seconds and warm.surrogate_seconds == cold.surrogate_seconds
    assert healthy.step_seconds == again.step_seconds == cold_healthy.step_seconds
    assert warm.step_seconds > healthy.step_seconds  # the slowdown is priced, not a cached healthy plan


def test_a_repeated_cluster_message_is_converted_once() -> None:
    convert.CONVERTED.clear()
    req = make_run_request()
    first = convert.place_inputs(req)
    second = convert.place_inputs(make_run_request())
    assert second.topology is first.topology and second.state is first.state
    other = make_run_request()
    del other.state.occupied[-1]  # another state of the same cluster
    third = convert.place_inputs(other)
    assert third.topology is first.topology and third.state is not first.state
    assert set(third.state.occupied) < set(first.state.occupied)  # the first state is not reused
    convert.CONVERTED.clear()


def test_conversion_cache_is_safe_across_threads() -> None:
    convert.CONVERTED.clear()
    req = make_run_request()
    seen: list[Any] = []

    def one() -> None:
        seen.append(convert.place_inputs(req).topology)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 4 and all(t.num_devices == 256 for t in seen)
    convert.CONVERTED.clear()


# ---- the answer memo of a solve worker ------------------------------------------------------------------------


class _Ctx:
    """A call with no deadline that stays active (what the RPC template asks of a gRPC context)."""

    def time_remaining(self) -> float:
        return 1e9

    def is_active(self) -> bool:
        return True


def _servicer(memo: int) -> PlacementServicer:
    return PlacementServicer(Settings(answer_memo=memo), None, MetricsRecorder())  # type: ignore[arg-type]


def _one_more_busy(req: pb.PlaceRequest, device: str) -> pb.PlaceRequest:
    out = pb.PlaceRequest()
    out.CopyFrom(req)
    out.state.occupied.add(job="other", devices=[device])
    return out


def test_a_repeated_request_is_answered_from_the_memo_with_the_solved_answer() -> None:
    memo_on, memo_off = _servicer(8), _servicer(0)
    req = make_run_request()
    first = memo_on.serve_here("Place", req, _Ctx(), StopEvent())
    again = memo_on.serve_here("Place", make_run_request(), _Ctx(), StopEvent())
    solved = memo_off.serve_here("Place", make_run_request(), _Ctx(), StopEvent())  # a real solve, no memo
    assert MEMO_NOTE not in first.result.stats.notes and MEMO_NOTE not in solved.result.stats.notes
    assert again.result.stats.notes[MEMO_NOTE] == "memo"
    assert _answer(again) == _answer(first) == _answer(solved)
    assert (memo_on.memo.hits, memo_on.memo.misses) == (1, 1) and len(memo_off.memo) == 0


def test_the_memo_never_answers_another_state() -> None:
    svc = _servicer(8)
    req = make_run_request()
    first = svc.serve_here("Place", req, _Ctx(), StopEvent())
    used = first.result.mapping[0].device  # the answer's first device, busy in the second request
    other = _one_more_busy(req, used)
    second = svc.serve_here("Place", other, _Ctx(), StopEvent())
    assert MEMO_NOTE not in second.result.stats.notes and svc.memo.hits == 0
    assert used not in {m.device for m in second.result.mapping}
    assert AnswerMemo.key(req, 5.0, 1) != AnswerMemo.key(other, 5.0, 1)
    assert AnswerMemo.key(req, 5.0, 1) != AnswerMemo.key(req, 4.0, 1)  # another granted time limit
    named = pb.PlaceRequest(cluster_id="c", job=req.job, options=req.options)
    assert AnswerMemo.key(named, 5.0, 1) is None  # a registry cluster's state is not in the request


def test_a_registry_cluster_is_answered_from_the_memo_only_for_the_same_topology_and_state() -> None:
    req = make_run_request()
    inputs = convert.place_inputs(req)
    topo, state = inputs.topology, inputs.state
    named = pb.PlaceRequest(cluster_id="c", job=req.job, options=req.options)
    busier = merge_states(
        state, state_from_dict({"occupied": [{"job": "x", "devices": ["node01/gpu0"]}]}, topo, "s")
    )
    key = AnswerMemo.key(named, 5.0, 2, (topo, state))
    assert key is not None and key != AnswerMemo.key(named, 5.0, 2, (topo, busier))
    # the same content built in another order: the same key
    same = dataclasses.replace(state, occupied=dict(reversed(list(state.occupied.items()))))
    assert same is not state and key == AnswerMemo.key(named, 5.0, 2, (topo, same))
    memo = AnswerMemo(4)
    answer = pb.PlaceResponse()
    answer.result.job = "j"
    memo.put(key, answer, topo)
    cold_topo, _ = _cold_topology()  # the same cluster put again: another topology object
    assert memo.get(key, cold_topo) is None and memo.get(key, None) is None
    hit = memo.get(key, topo)
    assert hit is not None and hit.result.job == "j"


def test_the_memo_is_bounded_in_entries_and_bytes() -> None:
    answer = pb.PlaceResponse()
    answer.result.job = "j"
    size = len(answer.SerializeToString())
    memo = AnswerMemo(3, max_bytes=10 * size)
    keys = [bytes([i]) * 32 for i in range(5)]
    for k in keys:
        memo.put(k, answer)
    assert len(memo) == 3 and memo.get(keys[0]) is None and memo.get(keys[4]) is not None
    small = AnswerMemo(100, max_bytes=2 * size)
    for k in keys:
        small.put(k, answer)
    assert len(small) == 2 and small.size_bytes <= 2 * size
