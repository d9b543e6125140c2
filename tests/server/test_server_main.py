"""placement-server's entry: one meaning per variable (PLACEMENT_SERVER_HOST is the address to listen on,
PLACEMENT_HOST a node's name that the server never reads), a bind failure as one line naming the address, the
reason and where host and port came from, `--version`, and `--metrics-require-token` as a flag."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys

import pytest

from placement import __version__
from server.main import create_server
from server.settings import Settings, env_name, parse_settings
from tests.conftest import ROOT

OFF = ["--metrics-port", "-1", "--registry", "off"]


def _server(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PLACEMENT_")}
    return subprocess.run(
        [sys.executable, "-m", "server.main", *args],
        env={**clean, "PYTHONPATH": str(ROOT), **(env or {})},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_server_reads_placement_server_host_not_placement_host() -> None:
    default = Settings().host
    s = parse_settings([], {"PLACEMENT_HOST": "node03"})
    assert s.host == default and s.source_of("host") == "the default"
    s = parse_settings([], {"PLACEMENT_HOST": "node03", "PLACEMENT_SERVER_HOST": "127.0.0.1"})
    assert s.host == "127.0.0.1" and s.source_of("host") == "PLACEMENT_SERVER_HOST"
    s = parse_settings(["--host", "localhost"], {"PLACEMENT_SERVER_HOST": "127.0.0.1", "PLACEMENT_PORT": "7"})
    assert (s.host, s.source_of("host"), s.port, s.source_of("port")) == (
        "localhost",
        "--host",
        7,
        "PLACEMENT_PORT",
    )
    assert env_name("host") == "PLACEMENT_SERVER_HOST" and env_name("workers") == "PLACEMENT_WORKERS"


def test_placement_host_set_for_bind_does_not_stop_the_server() -> None:
    """The friction: PLACEMENT_HOST=node03 (this node's name for `placement bind`) made the server bind node03."""
    settings = parse_settings(["--port", "0", *OFF], {"PLACEMENT_HOST": "node03"})
    server, port = create_server(settings)
    try:
        assert port > 0
    finally:
        server.stop(None)


def test_an_unresolvable_host_is_one_line_naming_it_and_its_variable() -> None:
    host = "node03.invalid"  # .invalid never resolves (RFC 6761)
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo(host, 0)
    done = _server("--port", "0", *OFF, env={"PLACEMENT_SERVER_HOST": host})
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr  # no raw gRPC log line, no log record around it
    assert lines[0].startswith(
        f"placement-server: cannot start: cannot bind {host}:0: {host} does not resolve"
    )
    assert lines[0].endswith("host from PLACEMENT_SERVER_HOST, port from --port")


def test_a_port_in_use_is_one_line_naming_the_port_and_its_variable() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _server("--host", "127.0.0.1", *OFF, env={"PLACEMENT_PORT": str(port)})
    assert done.returncode == 1
    assert done.stderr == (
        f"placement-server: cannot start: cannot bind 127.0.0.1:{port}: port {port} is in use; "
        "host from --host, port from PLACEMENT_PORT\n"
    )


def test_an_address_of_another_machine() -> None:
    addr = "192.0.2.7"  # TEST-NET-1: never an address of this machine
    with contextlib.suppress(socket.gaierror):
        assert addr not in {i[4][0] for i in socket.getaddrinfo(socket.gethostname(), 0)}
    with pytest.raises(OSError) as info:
        create_server(parse_settings(["--host", addr, "--port", "0", *OFF], {}))
    assert str(info.value) == (
        f"cannot bind {addr}:0: {addr} is not an address of this machine; host from --host, port from --port"
    )


def test_version() -> None:
    done = _server("--version")
    assert (done.returncode, done.stdout) == (0, f"placement-server {__version__}\n")


def test_metrics_require_token_is_a_flag_and_the_variable_still_works(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tok = {"PLACEMENT_TOKEN": "t"}
    assert parse_settings([], tok).metrics_require_token is False
    assert parse_settings(["--metrics-require-token"], tok).metrics_require_token is True
    on = {**tok, "PLACEMENT_METRICS_REQUIRE_TOKEN": "true"}
    assert parse_settings([], on).metrics_require_token is True
    assert parse_settings(["--no-metrics-require-token"], on).metrics_require_token is False  # the flag wins
    assert (
        parse_settings([], {**tok, "PLACEMENT_METRICS_REQUIRE_TOKEN": "off"}).metrics_require_token is False
    )
    assert capsys.readouterr().err == ""
    # the form of earlier releases still reads, with a note
    assert parse_settings(["--metrics-require-token", "true"], tok).metrics_require_token is True
    assert parse_settings(["--metrics-require-token=false"], tok).metrics_require_token is False
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "placement-server: `--metrics-require-token true` is deprecated; write --metrics-require-token",
        "placement-server: `--metrics-require-token false` is deprecated; write --no-metrics-require-token",
    ]
    with pytest.raises(SystemExit) as info:
        parse_settings([], {**tok, "PLACEMENT_METRICS_REQUIRE_TOKEN": "maybe"})
    assert info.value.code == 2
    assert "PLACEMENT_METRICS_REQUIRE_TOKEN: 'maybe' is not a valid bool" in capsys.readouterr().err
    help_text = _server("--help").stdout
    assert "--metrics-require-token, --no-metrics-require-token" in help_text
    assert "<bool>" not in help_text and "PLACEMENT_SERVER_HOST" in help_text
