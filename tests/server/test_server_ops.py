"""The gRPC server as a service to operate: health and reflection, draining shutdown, token auth, metrics, JSON
logs with the request id, SIGTERM, and settings from flags and the environment."""

from __future__ import annotations

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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from placement.solve import PlacementResult
from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from server.main import SERVICE_NAME
from server.settings import parse_settings
from server.telemetry import JsonFormatter
from tests.conftest import ROOT
from tests.support_server import Running, fake_result, place_request, rpc_error, running, warm_server


@pytest.fixture(scope="module")
def srv() -> Iterator[Running]:
    """This module's own warm server (metrics on, a 10 s solve limit)."""
    with warm_server() as r:
        yield r


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
