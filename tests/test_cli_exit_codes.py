"""What `placement` exits with when the reader of its output goes away (a closed pipe is not a failure), and when
a registry call meets a state that moved on (a conflict, not "infeasible"); the help lists both."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from placement.cli.app import app
from placement.cli.commands.remote import rpc_exit_code
from placement.cli.errors import CONFLICT_EXIT, EXIT_CODES, PIPE_CLOSED_EXIT

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"


def test_a_closed_pipe_ends_the_command_quietly_with_the_documented_code() -> None:
    """`placement place ... | head -1`: the reader closes the pipe before the tables are written."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [str(EX / "dgx-h100-4node.yaml"), str(EX / "tp8-dp4.yaml"), "--time-limit", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "placement.cli.app", "place", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `head` went away: every write to stdout now fails with EPIPE
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == PIPE_CLOSED_EXIT == 0, err
    assert "Traceback" not in err and "error" not in err.lower()
    # and a reader that takes one line, as the shell's `head -1` does (pipefail: placement's own code counts)
    line = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "placement.cli.app", "place", *args])
    shell = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {line} | head -1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert shell.returncode == 0 and shell.stdout.startswith("tp8-dp4 (32 ranks)"), shell.stderr


def test_the_help_says_what_a_closed_pipe_and_a_conflict_exit_with() -> None:
    text = " ".join(CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout.split())
    assert f"a closed pipe (placement ... | head) ends a command quietly with {PIPE_CLOSED_EXIT}" in text
    assert f"{CONFLICT_EXIT} conflict:" in text
    assert CONFLICT_EXIT not in (1, 2, 3, 4, 5, 130) and EXIT_CODES[3].startswith("infeasible")


def test_a_stale_generation_or_a_claimed_device_is_a_conflict_not_infeasible() -> None:
    assert rpc_exit_code("FAILED_PRECONDITION", ["stale-generation"]) == CONFLICT_EXIT
    assert rpc_exit_code("FAILED_PRECONDITION", ["claimed-device"]) == CONFLICT_EXIT
    assert rpc_exit_code("ABORTED") == CONFLICT_EXIT
    assert rpc_exit_code("FAILED_PRECONDITION", ["infeasible"]) == 3
    assert rpc_exit_code("INVALID_ARGUMENT") == 2 and rpc_exit_code("UNAVAILABLE") == 4
