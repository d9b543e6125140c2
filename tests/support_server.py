"""Shared by the gRPC server tests: request builders (clusters, jobs, Place requests), a started server on port 0
and its warmed-up form, a server in a process of its own, and readers of a failed call's code and google.rpc
details; a fake solve result."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2_grpc
from grpc_status import rpc_status

from placement.messages.files import request_from_dict
from placement.solve import PlacementResult, SolveStatus
from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from server.main import PlacementServer, create_server
from server.settings import Settings
from tests.conftest import EXAMPLES, ROOT

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
    """A started server on 127.0.0.1:0 with a channel to it; stopped (no grace) on exit. Solves run in the
    server's process (``solve_mode="thread"``: tests replace `server.servicer.place`) and without the answer
    memo unless asked otherwise."""
    base: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 0,
        "metrics_port": None,
        "workers": 2,
        "solve_mode": "thread",
        "answer_memo": 0,  # tests replace `place` and send a request again: each call must reach it
    }
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


@contextlib.contextmanager
def warm_server() -> Iterator[Running]:
    """A started server (metrics on an ephemeral port, solves capped at 10 s) that has already solved once."""
    with running(metrics_port=0, max_time_limit_s=10.0) as r:
        r.stub.Place(place_request(), timeout=30)  # warm up the solver (first CP-SAT call)
        yield r


@dataclass
class ServerProcess:
    """`python -m server.main` in a process of its own, as it runs in production; its JSON log is `log`."""

    proc: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    channel: Any
    stub: pb_grpc.PlacementServiceStub
    log: Path


@contextlib.contextmanager
def server_process(log: Path, *args: str, start_s: float = 60.0) -> Iterator[ServerProcess]:
    """A server on 127.0.0.1 with ephemeral gRPC and metrics ports, run as its own process: a call's time is then
    the server's and the wire's alone, never a pause of the test process (its garbage collection, its fuzz
    generator) that an in-process server would share. Killed on exit."""
    env = {**os.environ, "PLACEMENT_PORT": "0", "PLACEMENT_METRICS_PORT": "0"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "server.main", "--host", "127.0.0.1", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        serving = None
        end = time.monotonic() + start_s
        while serving is None and time.monotonic() < end and proc.poll() is None:
            for line in log.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    rec = json.loads(line)
                    if isinstance(rec, dict) and rec.get("msg") == "serving":
                        serving = rec
            time.sleep(0.05)
        assert serving is not None, f"the server did not start: {log.read_text(errors='replace')[-2000:]}"
        channel = grpc.insecure_channel(f"127.0.0.1:{serving['port']}")
        try:
            yield ServerProcess(
                proc,
                int(serving["port"]),
                int(serving["metrics_port"]),
                channel,
                pb_grpc.PlacementServiceStub(channel),
                log,
            )
        finally:
            channel.close()
    finally:
        proc.kill()
        proc.wait(10)


TRAILER_LIMIT = 8 * 1024
"""What a default gRPC client accepts of a failed call's trailing metadata (8 KB)."""


def trailer_bytes(err: grpc.RpcError) -> int:
    """The size of a failed call's trailing metadata and status message."""
    md = err.trailing_metadata() or ()
    return sum(len(k) + len(v) for k, v in md) + len(err.details() or "")


def metrics_at(port: int | None, headers: dict[str, str] | None = None) -> str:
    """The Prometheus text a server's metrics port serves."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers or {})
    return str(urllib.request.urlopen(req, timeout=5).read().decode())


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
    from placement.cost.report import CostReport

    report = CostReport()
    report.add("tp", "node", seconds)
    report.comm_seconds_total = report.step_seconds = report.surrogate_seconds = seconds
    status = SolveStatus.FEASIBLE if bound is not None and bound < seconds else SolveStatus.OPTIMAL
    from placement.solve import Strategy

    return PlacementResult(status, Strategy.CPSAT, mapping, report, bound, [], {"wall_s": 0.0}, {})
