"""Authentication fails closed: an empty token refuses to start, bytes without a token are UNAUTHENTICATED, the
metrics endpoint binds localhost by default and can require the token, and mTLS requires a client certificate
signed by the CA. Certificates are made here with the openssl CLI."""

from __future__ import annotations

import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest

from placement.v1 import placement_pb2_grpc as pb_grpc
from server.client import PlacementClient
from server.main import create_server, main
from server.settings import Settings, parse_settings
from tests.support_server import (
    Running,
    metrics_at,
    place_request,
    rpc_error,
    running,
)


def metrics_text(r: Running, headers: dict[str, str] | None = None) -> str:
    return metrics_at(r.server.metrics_port, headers)


def test_an_empty_token_refuses_to_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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


def test_garbage_bytes_without_a_token_are_unauthenticated() -> None:
    with running(token="s3cret") as r:
        raw = r.channel.unary_unary("/placement.v1.PlacementService/Place")
        for data in (b"\xff\xfe garbage", b"", place_request().SerializeToString()):
            err = rpc_error(lambda data=data: raw(data, timeout=5))
            assert err.code() is grpc.StatusCode.UNAUTHENTICATED, err.details()


def test_metrics_bind_localhost_by_default_and_can_require_the_token() -> None:
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
def test_mtls_requires_a_client_certificate_signed_by_the_ca(tmp_path: Path) -> None:
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
