"""Hardening of the gRPC server (issue 10): the request budget, deadlines and cancellation that free the worker and
are counted as such, bounded error details, fail-closed auth (token, metrics, mTLS); the hostile fuzz is in
test_hardening_fuzz.

Each test names the finding of the issue it covers (F1..F7). Certificates are made here with the openssl CLI.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2

from placement.limits import checkpoint
from placement.messages.files import request_from_dict
from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from server import interceptors
from server.client import PlacementClient
from server.errors import MAX_DETAIL_ITEMS
from server.interceptors import give_back_memory
from server.main import create_server, main
from server.settings import Settings, parse_settings
from server.telemetry import JsonFormatter
from tests.support_server import (
    TRAILER_LIMIT,
    Running,
    cluster_doc,
    details_of,
    fake_result,
    metrics_at,
    place_request,
    rpc_error,
    running,
    trailer_bytes,
)


@pytest.fixture(scope="module")
def srv() -> Iterator[Running]:
    with running(metrics_port=0) as r:
        yield r


def metrics_text(r: Running, headers: dict[str, str] | None = None) -> str:
    return metrics_at(r.server.metrics_port, headers)


def wait_until(cond: Any, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return bool(cond())


# ---- F1: a tiny request cannot take gigabytes -----------------------------------------------------------------


@pytest.mark.parametrize("rank", [30_000_000, 2**31 - 1])
def test_f1_a_huge_rank_in_an_evaluate_mapping_is_invalid_argument(srv: Running, rank: int) -> None:
    req = pb.EvaluateRequest(
        cluster=place_request().cluster,
        job=place_request().job,
        mapping=[pb.Assignment(rank=rank, device="node01/gpu0")],
    )
    assert req.ByteSize() < 1000
    err = rpc_error(lambda: srv.stub.Evaluate(req, timeout=10))
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT, err.details()
    (br,) = details_of(err, error_details_pb2.BadRequest)
    assert (
        br.field_violations[0].field == "mapping[0].rank"
        and "max_index" in br.field_violations[0].description
    )


@pytest.mark.parametrize(
    ("mutate", "subject"),
    [
        (lambda r: setattr(r.job.parallel, "dp", 2**31 - 1), "ranks"),
        (lambda r: setattr(r.cluster.generate[0], "nodes", 1_000_000_000), "hosts"),
        (lambda r: r.job.constraints.pins.update({i: "node01/gpu0" for i in range(40_000)}), "pins"),
    ],
)
def test_f1_counts_above_the_limits_are_resource_exhausted_naming_field_and_limit(
    srv: Running, mutate: Any, subject: str
) -> None:
    req = place_request()
    mutate(req)
    err = rpc_error(lambda: srv.stub.Place(req, timeout=10))
    assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
    (qf,) = details_of(err, error_details_pb2.QuotaFailure)
    assert qf.violations[0].subject == subject and f"max_{subject}=" in qf.violations[0].description


# ---- F2 / F7: deadlines and cancellation free the worker and are counted as such -------------------------------


def _slow_conversion(
    monkeypatch: pytest.MonkeyPatch, started: threading.Event, seconds: float = 30.0
) -> None:
    """Conversion that takes `seconds` unless a checkpoint stops it (stands for a super-linear request)."""
    from placement.messages import domain as convert

    real = convert.place_inputs

    def slow(request: Any, default: float = 10.0, resolved: Any = None) -> Any:
        started.set()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            checkpoint("converting")
            time.sleep(0.005)
        return real(request, default, resolved)

    monkeypatch.setattr("server.servicer.convert.place_inputs", slow)


def test_f2_an_expired_call_frees_its_worker_and_is_deadline_exceeded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = threading.Event()
    _slow_conversion(monkeypatch, started)
    with running(workers=1, metrics_port=0) as r:
        t0 = time.monotonic()
        err = rpc_error(lambda: r.stub.Place(place_request(), timeout=1.0))
        assert err.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert wait_until(lambda: r.server._pool.admitted == 0, 3.0)  # the worker is free again
        assert time.monotonic() - t0 < 10  # not the 30 s the conversion would take
        assert wait_until(lambda: 'code="DEADLINE_EXCEEDED",method="Place"' in metrics_text(r))
        assert 'code="OK",method="Place"' not in metrics_text(r)


def test_f2_a_cancelled_call_frees_its_worker_and_is_counted_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = threading.Event()
    _slow_conversion(monkeypatch, started)
    with running(workers=1, metrics_port=0) as r:
        future = r.stub.Place.future(place_request(), timeout=60)
        assert started.wait(10)
        future.cancel()
        assert wait_until(lambda: r.server._pool.admitted == 0, 3.0)
        assert wait_until(lambda: 'code="CANCELLED",method="Place"' in metrics_text(r))


def test_f7_an_answer_after_the_deadline_is_not_counted_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    def stubborn_place(topology: Any, state: Any, job: Any, options: Any) -> Any:
        time.sleep(1.5)  # ignores the stop event: the answer comes after the client's deadline
        return fake_result(list(range(job.ranks)))

    monkeypatch.setattr("server.servicer.place", stubborn_place)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("placement.server.access")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        with running(metrics_port=0) as r:
            err = rpc_error(lambda: r.stub.Place(place_request(), timeout=1.0))
            assert err.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            assert wait_until(lambda: 'code="DEADLINE_EXCEEDED",method="Place"' in metrics_text(r))
            assert 'code="OK",method="Place"' not in metrics_text(r)
    finally:
        log.removeHandler(handler)
    lines = [json.loads(x) for x in stream.getvalue().splitlines() if '"rpc"' in x]
    assert any(x.get("code") == "DEADLINE_EXCEEDED" for x in lines), lines


def test_f2_sixteen_thousand_pins_convert_and_a_duplicate_is_found(srv: Running) -> None:
    req = place_request(nodes=2048, tp=8, dp=2048, time_limit_s=1.0)
    for r in range(16_384):
        req.job.constraints.pins[r] = f"node{r // 8 + 1:04d}/gpu{r % 8}"
    req.job.constraints.pins[16_383] = "node0001/gpu0"
    err = rpc_error(lambda: srv.stub.Place(req, timeout=60))
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert "pinned to more than one rank" in (err.details() or "")


def test_f7_waiting_requests_hold_bounded_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    gate, started = threading.Event(), threading.Event()

    def gated_place(topology: Any, state: Any, job: Any, options: Any) -> Any:
        started.set()
        gate.wait(20)
        return fake_result(list(range(job.ranks)))

    monkeypatch.setattr("server.servicer.place", gated_place)
    size = place_request().ByteSize()
    with running(workers=1, queue_limit=8, max_queued_bytes=size + size // 2) as r:
        first = r.stub.Place.future(place_request(), timeout=30)
        assert started.wait(10)
        err = rpc_error(lambda: r.stub.Place(place_request(), timeout=10))
        assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and "queued bytes" in (err.details() or "")
        gate.set()
        assert first.result(timeout=30).result.mapping
        assert r.stub.Place(place_request(), timeout=30).result.mapping  # the bytes were released


def _resident_bytes() -> int:
    """This process's resident set size, from /proc."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(interceptors._malloc_trim is None, reason="malloc_trim is glibc's")
def test_f7_freed_memory_is_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        interceptors, "_last_trim", [-math.inf]
    )  # no trim of another test holds this one back
    mib = 2**20
    blocks = [bytes(4096) for _ in range(128 * mib // 4096)]  # 128 MiB from malloc (pymalloc stops at 512 B)
    pinned = bytes(4096)  # above the freed blocks: free() alone cannot shrink the heap past it
    del blocks
    before = _resident_bytes()
    give_back_memory()
    given_back = before - _resident_bytes()
    assert given_back > 64 * mib, f"{given_back / mib:.1f} MiB given back of 128 MiB freed"
    assert pinned  # alive until after the trim


def test_f7_memory_is_given_back_at_most_once_a_period(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []

    def counted_trim(pad: int) -> int:
        trims.append(pad)
        return 1

    monkeypatch.setattr(interceptors, "_malloc_trim", counted_trim)
    monkeypatch.setattr(interceptors, "_last_trim", [-math.inf])
    monkeypatch.setattr(interceptors, "_TRIM_EVERY_S", 1e9)  # every later call falls in the first period
    for _ in range(5):
        give_back_memory()
    assert trims == [0]  # one trim, keeping no padding


# ---- F3: error details stay small -------------------------------------------------------------------------------


def test_f3_thousands_of_violations_fit_a_default_clients_metadata_limit(srv: Running) -> None:
    doc: dict[str, Any] = {
        "cluster": cluster_doc(4),
        "job": {
            "name": "many",
            "ranks": 8,
            "groups": [
                {"label": f"g{i}", "kind": "no-such-collective", "members": [0, 1], "bytes": -1}
                for i in range(3000)
            ],
        },
    }
    req = request_from_dict(doc, pb.PlaceRequest)
    channel = grpc.insecure_channel(f"127.0.0.1:{srv.port}")  # default options: a 16 KB metadata limit
    try:
        err = rpc_error(lambda: pb_grpc.PlacementServiceStub(channel).Place(req, timeout=30))
    finally:
        channel.close()
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT, err.details()
    (br,) = details_of(err, error_details_pb2.BadRequest)
    assert len(br.field_violations) <= MAX_DETAIL_ITEMS + 1
    assert br.field_violations[0].field.startswith("job.groups[0]")
    assert "more" in br.field_violations[-1].description
    assert trailer_bytes(err) < TRAILER_LIMIT
    assert "job.groups[0]" in (err.details() or "") and "more" in (err.details() or "")


def test_f3_a_mapping_breaking_thousands_of_rules_is_bounded_too(srv: Running) -> None:
    base = place_request(nodes=256, tp=8, dp=256)
    mapping = [pb.Assignment(rank=r, device="node001/gpu0") for r in range(2048)]
    req = pb.EvaluateRequest(cluster=base.cluster, job=base.job, mapping=mapping)
    err = rpc_error(lambda: srv.stub.Evaluate(req, timeout=60))
    assert err.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INVALID_ARGUMENT), (
        err.details()
    )
    assert trailer_bytes(err) < TRAILER_LIMIT


# ---- F4: auth fails closed ----------------------------------------------------------------------------------------


def test_f4_an_empty_token_refuses_to_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="token is empty"):
        Settings(token="  ")
    with pytest.raises(SystemExit):
        parse_settings([], {"PLACEMENT_TOKEN": ""})
    with pytest.raises(SystemExit):
        parse_settings(["--token", ""], {})
    empty = tmp_path / "token"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        create_server(Settings(host="127.0.0.1", port=0, metrics_port=None, token_file=str(empty)))
    assert main(["--port", "0", "--metrics-port", "-1", "--token-file", str(tmp_path / "missing")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_f4_garbage_bytes_without_a_token_are_unauthenticated() -> None:
    with running(token="s3cret") as r:
        raw = r.channel.unary_unary("/placement.v1.PlacementService/Place")
        for data in (b"\xff\xfe garbage", b"", place_request().SerializeToString()):
            err = rpc_error(lambda data=data: raw(data, timeout=5))
            assert err.code() is grpc.StatusCode.UNAUTHENTICATED, err.details()


def test_f4_metrics_bind_localhost_by_default_and_can_require_the_token() -> None:
    assert Settings().metrics_host == "127.0.0.1"
    with running(token="s3cret", metrics_port=0, metrics_require_token=True) as r:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            with pytest.raises(urllib.error.HTTPError) as ei:
                metrics_text(r, headers)
            ei.value.close()
            assert ei.value.code == 401
        assert "placement_grpc_requests" in metrics_text(r, {"Authorization": "Bearer s3cret"})
    with pytest.raises(ValueError, match="metrics_require_token needs a token"):
        Settings(metrics_require_token=True)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _certs(d: Path) -> None:
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        cwd=d,
    )
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name in ("server", "client"):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.pem",
            "-days",
            "1",
            "-extfile",
            "san.ext",
            cwd=d,
        )
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "rogue.key",
        "-out",
        "rogue.pem",
        "-days",
        "1",
        "-subj",
        "/CN=rogue",
        cwd=d,
    )


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl CLI makes the test certificates")
def test_f4_mtls_requires_a_client_certificate_signed_by_the_ca(tmp_path: Path) -> None:
    _certs(tmp_path)
    rd = lambda n: (tmp_path / n).read_bytes()  # noqa: E731
    settings = Settings(
        host="127.0.0.1",
        port=0,
        metrics_port=None,
        workers=1,
        tls_cert=str(tmp_path / "server.pem"),
        tls_key=str(tmp_path / "server.key"),
        tls_client_ca=str(tmp_path / "ca.pem"),
    )
    server, port = create_server(settings)
    server.start()
    opts = [("grpc.ssl_target_name_override", "localhost")]
    try:

        def health(creds: Any) -> Any:
            with grpc.secure_channel(f"127.0.0.1:{port}", creds, options=opts) as ch:
                return pb_grpc.PlacementServiceStub(ch).Place(place_request(), timeout=30)

        assert health(
            grpc.ssl_channel_credentials(rd("ca.pem"), rd("client.key"), rd("client.pem"))
        ).result.mapping
        with PlacementClient(
            f"localhost:{port}",
            root_certificates=rd("ca.pem"),
            client_certificate=rd("client.pem"),
            client_key=rd("client.key"),
        ) as client:
            assert client.health(timeout_s=10) == "SERVING"
        for creds in (
            grpc.ssl_channel_credentials(rd("ca.pem")),  # no client certificate
            grpc.ssl_channel_credentials(rd("ca.pem"), rd("rogue.key"), rd("rogue.pem")),
        ):  # not the CA's
            with pytest.raises(grpc.RpcError) as ei:
                health(creds)
            assert ei.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(None).wait(10)
    with pytest.raises(ValueError, match="needs tls_cert"):
        Settings(tls_client_ca=str(tmp_path / "ca.pem"))
