"""The gRPC server in process on port 0: each method, each error code with its details, deadline, cancellation,
concurrency, health on shutdown, token auth, metrics, logs, SIGTERM, and a hypothesis fuzz of requests.

Tests that need a solve of a given duration replace `server.servicer.place` with a fake: the server's
plumbing is under test there, not the optimizer.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from placement.cost import evaluate
from placement.errors import InfeasibleError
from placement.io.native import load_cluster, load_job
from placement.messages import domain as convert
from placement.messages.files import request_from_dict
from placement.solve import PlacementResult, SolveStatus
from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from server.main import SERVICE_NAME, PlacementServer, create_server
from server.settings import Settings, parse_settings
from server.telemetry import JsonFormatter

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


# ---- inputs -------------------------------------------------------------------------------------------------


def cluster_doc(nodes: int, gpus: int = 8, per_leaf: int = 4, kind: str = "H100") -> dict[str, Any]:
    """`nodes` hosts of `gpus` devices, `per_leaf` hosts per leaf, one spine (hosts node01, node02, ...)."""
    return {
        "name": f"c{nodes}",
        "levels": [
            {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
            {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
            {"name": "spine", "bandwidth_gbps": 25, "latency_us": 10},
        ],
        "generate": [{"nodes": nodes, "devices": gpus, "kind": kind, "fanout": {"leaf": per_leaf}}],
    }


def job_doc(tp: int, dp: int, pp: int = 1, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or f"tp{tp}-dp{dp}-pp{pp}",
        "device_kind": "H100",
        "parallel": {"tp": tp, "dp": dp, "pp": pp},
        "model": {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096, "micro_batches": 8},
        "constraints": {"require": {"tp": "node"}},
    }


def place_request(
    nodes: int = 4,
    tp: int = 8,
    dp: int = 2,
    pp: int = 1,
    occupied: tuple[str, ...] = (),
    time_limit_s: float = 5.0,
) -> pb.PlaceRequest:
    doc: dict[str, Any] = {
        "cluster": cluster_doc(nodes),
        "job": job_doc(tp, dp, pp),
        "options": {"time_limit_s": time_limit_s},
    }
    if occupied:
        doc["state"] = {"occupied": [{"job": "other", "devices": list(occupied)}]}
    return request_from_dict(doc, pb.PlaceRequest)


def example_request() -> pb.PlaceRequest:
    """examples/tp8-dp4.yaml on examples/dgx-h100-4node.yaml, empty state."""
    return request_from_dict(
        {"cluster_file": "dgx-h100-4node.yaml", "job_file": "tp8-dp4.yaml"},
        pb.PlaceRequest,
        base_dir=EXAMPLES,
    )


# ---- servers ------------------------------------------------------------------------------------------------


@dataclass
class Running:
    server: PlacementServer
    port: int
    channel: Any
    stub: pb_grpc.PlacementServiceStub
    health: Any


@contextlib.contextmanager
def running(**overrides: Any) -> Iterator[Running]:
    """A started server on 127.0.0.1:0 with a channel to it; stopped (no grace) on exit."""
    base: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "metrics_port": None, "workers": 2}
    server, port = create_server(Settings(**{**base, **overrides}))
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Running(
            server, port, channel, pb_grpc.PlacementServiceStub(channel), health_pb2_grpc.HealthStub(channel)
        )
    finally:
        channel.close()
        server.stop(None).wait(10)


@pytest.fixture(scope="module")
def srv() -> Iterator[Running]:
    with running(metrics_port=0, max_time_limit_s=10.0) as r:
        r.stub.Place(place_request(), timeout=30)  # warm up the solver (first CP-SAT call)
        yield r


def rpc_error(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    err = info.value
    assert "Traceback" not in (err.details() or "")
    return err


def details_of(err: grpc.RpcError, kind: Any) -> list[Any]:
    """The google.rpc details of type `kind` in a failed call's status."""
    status = rpc_status.from_call(err)
    assert status is not None, f"{err.code()} carries no google.rpc.Status: {err.details()}"
    out = []
    for any_msg in status.details:
        if any_msg.Is(kind.DESCRIPTOR):
            d = kind()
            any_msg.Unpack(d)
            out.append(d)
    return out


def field_violations(err: grpc.RpcError) -> dict[str, str]:
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT, err.details()
    return {
        v.field: v.description
        for d in details_of(err, error_details_pb2.BadRequest)
        for v in d.field_violations
    }


def fake_result(mapping: list[int], seconds: float = 1.0, bound: float | None = None) -> PlacementResult:
    from placement.cost import CostReport

    report = CostReport()
    report.add("tp", "node", seconds)
    report.comm_seconds_total = report.step_seconds = report.surrogate_seconds = seconds
    status = SolveStatus.FEASIBLE if bound is not None and bound < seconds else SolveStatus.OPTIMAL
    from placement.solve import Strategy

    return PlacementResult(status, Strategy.CPSAT, mapping, report, bound, [], {"wall_s": 0.0}, {})


# ---- the three methods --------------------------------------------------------------------------------------


def test_place_returns_a_valid_mapping_its_cost_and_the_request_id(srv: Running) -> None:
    req = example_request()
    resp, call = srv.stub.Place.with_call(req, timeout=30, metadata=[("x-request-id", "rid-place-1")])
    res = resp.result
    assert res.status in (pb.SOLVE_STATUS_OPTIMAL, pb.SOLVE_STATUS_FEASIBLE)
    assert res.job == "tp8-dp4" and res.strategy == "cpsat"
    assert [a.rank for a in res.mapping] == list(range(32))
    assert len({a.device for a in res.mapping}) == 32
    # the cost is the cost model's, recomputed independently from the returned mapping
    topo, _ = load_cluster(EXAMPLES / "dgx-h100-4node.yaml")
    job = load_job(EXAMPLES / "tp8-dp4.yaml")
    from placement.state import ClusterState

    report = evaluate(topo, ClusterState(), job, [topo.device_index(a.device) or 0 for a in res.mapping])
    assert res.cost.step_seconds == pytest.approx(report.step_seconds)
    assert res.cost.comm_seconds == pytest.approx(report.comm_seconds)
    assert res.cost.comm_seconds_total == pytest.approx(report.comm_seconds_total)
    assert [p.name for p in res.cost.phases] == [p.name for p in report.phases]
    assert res.seconds_per_step == pytest.approx(
        report.comm_seconds
    )  # the deprecated field keeps its meaning
    assert sum(res.breakdown.by_label_s.values()) == pytest.approx(report.comm_seconds)
    assert "first-fit" in {b.strategy for b in res.baselines}
    rest = report.step_seconds - report.comm_seconds  # compute and bubble do not depend on the mapping
    for b in res.baselines:
        assert b.HasField("comm_seconds") == b.HasField("step_seconds") == b.HasField("seconds_per_step")
        if b.HasField("comm_seconds"):
            assert b.comm_seconds >= res.cost.comm_seconds - 1e-12
            assert b.seconds_per_step == b.comm_seconds
            assert b.step_seconds == pytest.approx(b.comm_seconds + rest)
    assert res.stats.time_limit_s > 0 and res.stats.wall_s > 0
    assert ("x-request-id", "rid-place-1") in tuple(call.trailing_metadata())


def test_a_request_id_is_generated_when_none_is_sent(srv: Running) -> None:
    _, call = srv.stub.Place.with_call(place_request(), timeout=30)
    ids = [v for k, v in call.trailing_metadata() if k == "x-request-id"]
    assert len(ids) == 1 and len(ids[0]) == 32


def test_evaluate_scores_the_placed_mapping_and_a_running_job(srv: Running) -> None:
    req = place_request(nodes=4, tp=8, dp=2)
    placed = srv.stub.Place(req, timeout=30).result
    ev = srv.stub.Evaluate(
        pb.EvaluateRequest(cluster=req.cluster, job=req.job, mapping=placed.mapping), timeout=30
    )
    assert ev.seconds_per_step == pytest.approx(placed.seconds_per_step)
    assert ev.cost.step_seconds == pytest.approx(placed.cost.step_seconds)
    assert (
        ev.cost.comm_seconds == pytest.approx(placed.cost.comm_seconds) == pytest.approx(ev.seconds_per_step)
    )
    assert [(p.name, p.tier) for p in ev.cost.phases] == [(p.name, p.tier) for p in placed.cost.phases]
    assert ev.job == req.job.name and len(ev.mapping) == 16
    # the same job running on its own (occupied) devices is valid
    state = pb.State(occupied=[pb.Occupancy(job=req.job.name, devices=[a.device for a in placed.mapping])])
    ev2 = srv.stub.Evaluate(
        pb.EvaluateRequest(cluster=req.cluster, state=state, job=req.job, mapping=placed.mapping)
    )
    assert ev2.seconds_per_step == pytest.approx(placed.seconds_per_step)


def test_evaluate_of_a_rule_breaking_mapping_is_failed_precondition_with_every_violation(
    srv: Running,
) -> None:
    req = place_request(nodes=4, tp=8, dp=2)
    mapping = [pb.Assignment(rank=r, device=f"node01/gpu{r % 8}") for r in range(16)]  # every device twice
    state = pb.State(occupied=[pb.Occupancy(job="other", devices=["node01/gpu0"])])
    err = rpc_error(
        lambda: srv.stub.Evaluate(
            pb.EvaluateRequest(cluster=req.cluster, state=state, job=req.job, mapping=mapping), timeout=30
        )
    )
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION
    violations = [v for d in details_of(err, error_details_pb2.PreconditionFailure) for v in d.violations]
    kinds = {v.type for v in violations}
    assert {"one-rank-per-device", "occupied"} <= kinds
    assert len([v for v in violations if v.type == "one-rank-per-device"]) == 8
    assert all(v.subject == "mapping" for v in violations)


def test_compare_ranks_jobs_by_step_seconds_with_infeasible_last(srv: Running) -> None:
    jobs = [
        job_doc(8, 4, name="tp8-dp4"),
        job_doc(8, 8, name="too-big"),
        job_doc(4, 4, 2, name="tp4-dp4-pp2"),
        job_doc(8, 2, name="tp8-dp2"),
    ]
    req = request_from_dict(
        {"cluster": cluster_doc(4), "jobs": jobs, "options": {"time_limit_s": 5}}, pb.CompareRequest
    )
    ranking = srv.stub.Compare(req, timeout=30).ranking
    assert sorted(e.job_index for e in ranking) == [0, 1, 2, 3]
    assert [req.jobs[e.job_index].name for e in ranking] == [e.result.job for e in ranking]
    feasible = [e.result for e in ranking if e.result.status != pb.SOLVE_STATUS_INFEASIBLE]
    assert len(feasible) == 3
    keys = [(r.cost.step_seconds, r.cost.comm_seconds) for r in feasible]
    assert keys == sorted(keys)
    assert all(r.cost.step_seconds >= r.cost.comm_seconds > 0 for r in feasible)
    last = ranking[-1].result
    assert last.job == "too-big" and last.status == pb.SOLVE_STATUS_INFEASIBLE
    assert "64" in last.explanation[0] and not last.mapping


# ---- errors -------------------------------------------------------------------------------------------------


def test_invalid_argument_lists_every_violation_with_request_field_paths(srv: Running) -> None:
    cluster = cluster_doc(4)
    cluster["levels"][0]["bandwidth_gbps"] = 0
    job = job_doc(8, 2)
    job["parallel"]["order"] = "tp-dp"
    del job["model"]["layers"]
    req = request_from_dict(
        {"cluster": cluster, "job": job, "options": {"strategy": "magic", "time_limit_s": -1}},
        pb.PlaceRequest,
    )
    fields = field_violations(rpc_error(lambda: srv.stub.Place(req, timeout=30)))
    assert {
        "cluster.levels[0].bandwidth_gbps",
        "job.parallel.order",
        "job.model.layers",
        "options.strategy",
        "options.time_limit_s",
    } <= set(fields)
    assert "tp-cp-ep-dp-pp" in fields["job.parallel.order"]


def test_invalid_argument_for_state_mapping_compare_jobs_and_missing_parts(srv: Running) -> None:
    req = place_request(occupied=("node09/gpu0",))
    fields = field_violations(rpc_error(lambda: srv.stub.Place(req, timeout=30)))
    assert set(fields) == {"state.occupied[0].devices[0]"}
    assert "node09/gpu0" in fields["state.occupied[0].devices[0]"]

    bad_job = job_doc(8, 2)
    bad_job["parallel"]["order"] = "tp-tp-dp"
    creq = request_from_dict({"cluster": cluster_doc(4), "jobs": [job_doc(8, 2), bad_job]}, pb.CompareRequest)
    assert "jobs[1].parallel.order" in field_violations(rpc_error(lambda: srv.stub.Compare(creq, timeout=30)))

    ereq = pb.EvaluateRequest(
        cluster=req.cluster, job=req.job, mapping=[pb.Assignment(device="nope/gpu0")] + [pb.Assignment()] * 15
    )
    fields = field_violations(rpc_error(lambda: srv.stub.Evaluate(ereq, timeout=30)))
    assert "mapping[0].device" in fields
    fields = field_violations(rpc_error(lambda: srv.stub.Evaluate(pb.EvaluateRequest(), timeout=30)))
    assert {"cluster", "job", "mapping"} <= set(fields)
    fields = field_violations(rpc_error(lambda: srv.stub.Place(pb.PlaceRequest(), timeout=30)))
    assert {"cluster", "job"} <= set(fields)


def test_names_the_cluster_lacks_are_invalid_argument(srv: Running) -> None:
    job = job_doc(8, 2)
    job["device_kind"] = "A100"
    job["constraints"] = {
        "require": {"tp": "rack"},
        "prefer": {"dp": "pod"},
        "pins": {"0": "node99/gpu0"},
        "exclude": ["node01", "leaf77"],
        "spread": [{"kind": "power", "min_domains": 2}],
    }
    req = request_from_dict({"cluster": cluster_doc(4), "job": job}, pb.PlaceRequest)
    fields = field_violations(rpc_error(lambda: srv.stub.Place(req, timeout=30)))
    assert set(fields) == {
        "job.device_kind",
        "job.constraints.require.tp",
        "job.constraints.prefer.dp",
        "job.constraints.pins.0",
        "job.constraints.exclude[1]",
        "job.constraints.spread[0].kind",
    }


def test_malformed_bytes_are_invalid_argument_not_internal(srv: Running) -> None:
    raw = srv.channel.unary_unary("/placement.v1.PlacementService/Place")
    err = rpc_error(lambda: raw(b"\x0a\xff\xff\xff\x0f", timeout=10))
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid request" in (err.details() or "")


def test_infeasible_is_failed_precondition_with_the_binding_rule_and_numbers(srv: Running) -> None:
    req = place_request(nodes=4, tp=8, dp=4, occupied=("node02/gpu3",))
    err = rpc_error(lambda: srv.stub.Place(req, timeout=30))
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION
    violations = [v for d in details_of(err, error_details_pb2.PreconditionFailure) for v in d.violations]
    assert violations and all(v.type == "infeasible" and v.subject == "job" for v in violations)
    text = " ".join(v.description for v in violations)
    assert "32" in text and "31" in text  # needs 32, 31 usable


def test_server_limits_are_resource_exhausted_with_quota_failure() -> None:
    with running(max_devices=256, max_ranks=64, max_jobs=2, max_message_bytes=64 * 1024) as r:

        def subject(call: Callable[[], Any]) -> str:
            err = rpc_error(call)
            assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
            (qf,) = details_of(err, error_details_pb2.QuotaFailure)
            return str(qf.violations[0].subject)

        assert subject(lambda: r.stub.Place(place_request(nodes=64), timeout=10)) == "devices"
        assert subject(lambda: r.stub.Place(place_request(nodes=16, tp=8, dp=16), timeout=10)) == "ranks"
        creq = pb.CompareRequest(cluster=place_request().cluster, jobs=[place_request().job] * 3)
        assert subject(lambda: r.stub.Compare(creq, timeout=10)) == "jobs"
        big = place_request()
        big.cluster.description = "x" * 100_000
        err = rpc_error(lambda: r.stub.Place(big, timeout=10))
        assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # grpc's own message-size check
        assert r.stub.Place(place_request(), timeout=30).result.mapping  # and the server still answers


def test_a_full_solver_queue_is_resource_exhausted_and_health_stays_responsive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = threading.Event()

    def blocked_place(topology: Any, state: Any, job: Any, options: Any) -> PlacementResult:
        assert gate.wait(20)
        return fake_result(list(range(job.ranks)))

    monkeypatch.setattr("server.servicer.place", blocked_place)
    with running(workers=1, queue_limit=1) as r, ThreadPoolExecutor(2) as ex:
        futures = [ex.submit(r.stub.Place, place_request(), timeout=30) for _ in range(2)]
        deadline = time.monotonic() + 10
        while r.server.servicer._pool.admitted < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        err = rpc_error(lambda: r.stub.Place(place_request(), timeout=10))
        assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        (qf,) = details_of(err, error_details_pb2.QuotaFailure)
        assert qf.violations[0].subject == "solver queue"
        (retry,) = details_of(err, error_details_pb2.RetryInfo)
        assert retry.retry_delay.seconds == 1
        t0 = time.monotonic()
        assert (
            r.health.Check(health_pb2.HealthCheckRequest(), timeout=2).status
            == health_pb2.HealthCheckResponse.SERVING
        )
        assert time.monotonic() - t0 < 1.0
        gate.set()
        assert all(f.result(timeout=20).result.mapping for f in futures)


def test_an_unexpected_error_is_internal_without_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_place(*args: Any) -> PlacementResult:
        raise ZeroDivisionError("secret internals")

    monkeypatch.setattr("server.servicer.place", broken_place)
    with running() as r:
        err = rpc_error(
            lambda: r.stub.Place(place_request(), timeout=10, metadata=[("x-request-id", "rid-int")])
        )
        assert err.code() is grpc.StatusCode.INTERNAL
        assert "secret" not in (err.details() or "") and "rid-int" in (err.details() or "")


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


# ---- health, reflection, shutdown, auth, metrics, logs ------------------------------------------------------


def test_health_and_reflection_are_registered(srv: Running) -> None:
    for name in ("", SERVICE_NAME):
        resp = srv.health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(srv.channel)
    (answer,) = list(
        refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
    )
    names = {s.name for s in answer.list_services_response.service}
    assert {SERVICE_NAME, "grpc.health.v1.Health"} <= names


def test_shutdown_turns_health_not_serving_and_lets_in_flight_calls_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = threading.Event()

    def slow_place(topology: Any, state: Any, job: Any, options: Any) -> PlacementResult:
        started.set()
        time.sleep(0.8)
        return fake_result(list(range(job.ranks)))

    monkeypatch.setattr("server.servicer.place", slow_place)
    with running(drain_s=0.4) as r, ThreadPoolExecutor(1) as ex:
        watch = r.health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        in_flight = ex.submit(r.stub.Place, place_request(), timeout=10)
        assert started.wait(5)
        done = r.server.stop(5.0)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        watch.cancel()  # an open Watch stream would hold the shutdown for the whole grace
        status = r.health.Check(health_pb2.HealthCheckRequest(), timeout=2).status  # still draining
        assert status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert in_flight.result(timeout=10).result.mapping
        assert done.wait(10)
        err = rpc_error(lambda: r.stub.Place(place_request(), timeout=2))
        assert err.code() is grpc.StatusCode.UNAVAILABLE


def test_a_token_is_required_except_for_health() -> None:
    with running(token="s3cret") as r:
        for md in ([], [("authorization", "Bearer wrong")], [("authorization", "Basic s3cret")]):
            err = rpc_error(functools.partial(r.stub.Place, place_request(), timeout=10, metadata=md))
            assert err.code() is grpc.StatusCode.UNAUTHENTICATED
            assert any(k == "x-request-id" for k, _ in err.trailing_metadata())
        refl = reflection_pb2_grpc.ServerReflectionStub(r.channel)
        err = rpc_error(
            lambda: list(
                refl.ServerReflectionInfo(
                    iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
                )
            )
        )
        assert err.code() is grpc.StatusCode.UNAUTHENTICATED
        assert (
            r.health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
            == health_pb2.HealthCheckResponse.SERVING
        )
        ok = r.stub.Place(place_request(), timeout=30, metadata=[("authorization", "Bearer s3cret")])
        assert ok.result.mapping


def test_metrics_count_requests_by_method_and_code_and_observe_gap(srv: Running) -> None:
    srv.stub.Place(place_request(), timeout=30)
    rpc_error(lambda: srv.stub.Place(pb.PlaceRequest(), timeout=30))
    assert srv.server.metrics_port
    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{srv.server.metrics_port}/metrics", timeout=5)
        .read()
        .decode()
    )
    assert 'placement_grpc_requests_total{code="OK",method="Place"}' in text
    assert 'placement_grpc_requests_total{code="INVALID_ARGUMENT",method="Place"}' in text
    assert 'placement_grpc_request_seconds_bucket{le="0.1",method="Place"}' in text
    assert 'placement_solves_total{method="Place",status="OPTIMAL"}' in text
    assert "placement_solve_gap_count" in text and "placement_solves_queued" in text


def test_logs_are_json_lines_with_the_request_id(srv: Running) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("placement.server")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        srv.stub.Place(place_request(), timeout=30, metadata=[("x-request-id", "rid-log-7")])
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    mine = [x for x in lines if x["request_id"] == "rid-log-7"]
    assert {x["msg"] for x in mine} >= {"placed", "rpc"}
    access = next(x for x in mine if x["msg"] == "rpc")
    assert access["method"] == "/placement.v1.PlacementService/Place" and access["code"] == "OK"
    assert access["duration_ms"] > 0


def test_sigterm_drains_and_exits_0() -> None:
    env = {**os.environ, "PLACEMENT_PORT": "0", "PLACEMENT_METRICS_PORT": "-1", "PLACEMENT_GRACE_S": "5"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.main", "--host", "127.0.0.1"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        port = None
        for line in proc.stderr:
            rec = json.loads(line)
            if rec["msg"] == "serving":
                port = rec["port"]
                break
        assert port
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch, ThreadPoolExecutor(1) as ex:
            stub = pb_grpc.PlacementServiceStub(ch)
            in_flight = ex.submit(stub.Place, place_request(nodes=16, tp=8, dp=4, pp=2), timeout=20)
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            assert in_flight.result(timeout=20).result.mapping
        assert proc.wait(timeout=20) == 0
        rest = proc.stderr.read()
        assert '"msg": "stopped"' in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_settings_read_flags_over_environment() -> None:
    s = parse_settings(
        ["--port", "7000", "--metrics-port", "-1"],
        {"PLACEMENT_PORT": "6000", "PLACEMENT_WORKERS": "3", "PLACEMENT_TOKEN": "t"},
    )
    assert (s.port, s.workers, s.metrics_port, s.bearer_token()) == (7000, 3, None, "t")
    with pytest.raises(SystemExit):
        parse_settings([], {"PLACEMENT_WORKERS": "0"})


# ---- conversion (the design rule) ---------------------------------------------------------------------------


def test_native_files_are_messages_and_convert_to_the_same_domain_objects() -> None:
    req = example_request()
    inputs = convert.place_inputs(req)
    topo, _ = load_cluster(EXAMPLES / "dgx-h100-4node.yaml")
    assert [d.id for d in inputs.topology.devices] == [d.id for d in topo.devices]
    assert [d.rail for d in inputs.topology.devices] == [d.rail for d in topo.devices]
    assert inputs.topology.levels == topo.levels
    assert inputs.job == load_job(EXAMPLES / "tp8-dp4.yaml")
    # unset optional fields take the native defaults, explicit zeros are errors
    assert inputs.job.parallel is not None and inputs.job.parallel.cp == 1
    zero = copy.deepcopy(req)
    zero.job.parallel.cp = 0
    with pytest.raises(Exception, match=r"job\.parallel\.cp: must be >= 1"):
        convert.place_inputs(zero)


def test_the_step_models_cluster_and_model_fields_are_messages_too() -> None:
    from placement.io.native import cluster_from_dict, job_from_dict

    cluster = cluster_doc(4)
    cluster["levels"][1]["oversubscription"] = 2.0
    cluster["device_kinds"] = [{"name": "X1", "tflops": 500.0, "memory_gb": 96.0}]
    cluster["node_types"] = [
        {"name": "box", "devices": 8, "kind": "X1", "nics": 4, "nic_gbps": 50.0, "mesh_link_gbps": 64.0}
    ]
    cluster["generate"] = [{"nodes": 4, "node_type": "box", "fanout": {"leaf": 4}}]
    job = job_doc(8, 4)
    job["model"].update(recompute=True, mfu=0.45, heads=32)
    job.pop("device_kind", None)
    req = request_from_dict({"cluster": cluster, "job": job}, pb.PlaceRequest)
    inputs = convert.place_inputs(req)
    topo, _ = cluster_from_dict(cluster)
    assert inputs.topology.levels == topo.levels and inputs.topology.levels[1].oversubscription == 2.0
    assert inputs.topology.host_types == topo.host_types and inputs.topology.host_types[0].nics == 4
    assert dict(inputs.topology.device_kinds) == dict(topo.device_kinds) and "X1" in topo.device_kinds
    assert inputs.job == job_from_dict(job)
    assert inputs.job.model is not None and (
        inputs.job.model.recompute,
        inputs.job.model.mfu,
        inputs.job.model.heads,
    ) == (True, 0.45, 32)


def test_step_cost_carries_every_field_and_phase_through_json_and_bytes() -> None:
    from placement.cost import CostReport, PhaseCost

    report = CostReport(
        step_seconds=1.5,
        comm_seconds=0.25,
        comm_seconds_total=0.75,
        compute_seconds=1.0,
        bubble_seconds=0.25,
        tokens_per_s=1234.5,
        mfu=0.38,
        surrogate_seconds=2.0,
        phases=[
            PhaseCost("tp", 0.5, 0.2, "node:NV18", "tp[3]", "ring"),
            PhaseCost("dp", 0.25, 0.05, "leaf", "dp[0]", "hierarchical"),
        ],
    )
    msg = convert.step_cost(report)
    again = pb.StepCost.FromString(msg.SerializeToString())
    parsed = json_format.Parse(json_format.MessageToJson(again), pb.StepCost())
    for m in (again, parsed):
        assert (m.step_seconds, m.comm_seconds, m.comm_seconds_total) == (1.5, 0.25, 0.75)
        assert (m.compute_seconds, m.bubble_seconds, m.tokens_per_s, m.mfu) == (1.0, 0.25, 1234.5, 0.38)
        assert m.surrogate_seconds == 2.0
        assert [
            (p.name, p.seconds, p.exposed_seconds, p.tier, p.critical, p.algorithm) for p in m.phases
        ] == [
            ("tp", 0.5, 0.2, "node:NV18", "tp[3]", "ring"),
            ("dp", 0.25, 0.05, "leaf", "dp[0]", "hierarchical"),
        ]
    # a job without a model shape has no compute: the optional fields stay unset, not 0
    bare = convert.step_cost(CostReport(step_seconds=0.1, comm_seconds=0.1, comm_seconds_total=0.1))
    assert not any(bare.HasField(f) for f in ("compute_seconds", "bubble_seconds", "tokens_per_s", "mfu"))


def test_rails_minus_one_is_a_device_without_a_rail() -> None:
    doc = cluster_doc(2)
    doc["generate"][0] = {"nodes": 2, "node_type": "t"}
    doc["node_types"] = [{"name": "t", "devices": 2, "rails": [0, None]}]
    doc["levels"] = doc["levels"][:2]
    req = request_from_dict(
        {"cluster": doc, "job": {"ranks": 2, "edges": [{"src": 0, "dst": 1, "bytes": 1}]}}, pb.PlaceRequest
    )
    assert list(req.cluster.node_types[0].rails) == [0, -1]
    assert [d.rail for d in convert.place_inputs(req).topology.devices] == [0, None, 0, None]


# ---- fuzzing ------------------------------------------------------------------------------------------------

_BASE = json_format.MessageToDict(
    place_request(nodes=4, tp=4, dp=2, time_limit_s=1.0), preserving_proto_field_name=True
)
_BASE_BYTES = place_request(nodes=4, tp=4, dp=2, time_limit_s=1.0).SerializeToString()


def _slots(doc: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key) in a document: leaves, lists and mappings alike."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        yield doc, k
        yield from _slots(v)


@st.composite
def mutated_requests(draw: st.DrawFn) -> pb.PlaceRequest:
    doc = copy.deepcopy(_BASE)
    for _ in range(draw(st.integers(1, 4))):
        slots = list(_slots(doc))
        if not slots:
            break
        container, key = draw(st.sampled_from(slots))
        value = container[key]
        op = draw(st.sampled_from(["delete", "truncate", "number", "text"]))
        if op == "delete":
            del container[key]
        elif op == "truncate" and isinstance(value, list | str):
            container[key] = value[: draw(st.integers(0, max(len(value) - 1, 0)))]
        elif op == "number" and isinstance(value, int) and not isinstance(value, bool):
            container[key] = draw(
                st.sampled_from([0, -1, 1, 2**31 - 1, -(2**31)]) | st.integers(-(2**31), 2**31 - 1)
            )
        elif op == "number" and isinstance(value, float):
            container[key] = draw(
                st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -1.0, 1e308, 5e-324])
            )
        elif op == "text" and isinstance(value, str):
            container[key] = draw(
                st.text(max_size=12) | st.sampled_from(["", "{", "{:>99999999}", "node01", "X"])
            )
    msg = pb.PlaceRequest()
    with contextlib.suppress(json_format.ParseError):  # the mutation broke a type; send the part that parsed
        json_format.ParseDict(doc, msg)
    return msg


_FUZZ = hsettings(
    max_examples=120,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_FUZZ
@given(req=mutated_requests())
def test_fuzzed_requests_never_get_internal(srv: Running, req: pb.PlaceRequest) -> None:
    try:
        srv.stub.Place(req, timeout=20)
    except grpc.RpcError as err:
        assert err.code() in {
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        }, (err.code(), err.details())
        assert "Traceback" not in (err.details() or "")


@_FUZZ
@given(data=st.binary(max_size=300) | st.integers(0, len(_BASE_BYTES) - 1).map(lambda k: _BASE_BYTES[:k]))
def test_fuzzed_bytes_never_get_internal(srv: Running, data: bytes) -> None:
    raw = srv.channel.unary_unary("/placement.v1.PlacementService/Place")
    try:
        raw(data, timeout=20)
    except grpc.RpcError as err:
        assert err.code() in {
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        }, (err.code(), err.details())


def test_the_server_still_serves_after_hostile_calls() -> None:
    """Self-contained (its own server and its own hostile calls), so it holds in any test order."""
    with running() as r:
        raw = r.channel.unary_unary("/placement.v1.PlacementService/Place")
        for k in range(
            0, len(_BASE_BYTES), max(len(_BASE_BYTES) // 40, 1)
        ):  # every truncation step of a request
            with contextlib.suppress(grpc.RpcError):
                raw(_BASE_BYTES[:k] + b"\xff" * (k % 7), timeout=20)
        assert (
            r.health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
            == health_pb2.HealthCheckResponse.SERVING
        )
        assert len(r.stub.Place(example_request(), timeout=30).result.mapping) == 32
