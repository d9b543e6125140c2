"""The gRPC server's error codes and their google.rpc details (bad arguments, infeasible, limits, a full queue,
internal errors), and a hypothesis fuzz of requests and bytes that must never get INTERNAL.

Tests that need a solve of a given duration replace `server.servicer.place` with a fake: the server's
plumbing is under test there, not the optimizer.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from placement.messages.files import request_from_dict
from placement.solve import PlacementResult
from placement.v1 import placement_pb2 as pb
from tests.support_server import (
    Running,
    cluster_doc,
    details_of,
    example_request,
    fake_result,
    field_violations,
    job_doc,
    place_request,
    rpc_error,
    running,
    warm_server,
)


@pytest.fixture(scope="module")
def srv() -> Iterator[Running]:
    """This module's own warm server (metrics on, a 10 s solve limit)."""
    with warm_server() as r:
        yield r


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
        while r.server._pool.admitted < 2:
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
