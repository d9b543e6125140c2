"""Launch files name the result relative to the directory the launch runs in (no absolute path from the machine
that exported them) and call the placement that wrote them (not a bare `placement` from PATH)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from placement.cli.app import app
from placement.cli.inputs import own_command

RESULT = {
    "result": {
        "job": "j",
        "mapping": [
            {"rank": 0, "host": "node01", "device": "node01/gpu0"},
            {"rank": 1, "host": "node02", "device": "node02/gpu0"},
        ],
    }
}


def test_launch_files_name_the_result_relative_to_the_launch_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "result.json").write_text(json.dumps(RESULT))
    monkeypatch.chdir(tmp_path)
    for fmt in ("slurm", "torchrun"):
        res = CliRunner().invoke(
            app, ["export", "out/result.json", "--format", fmt, "--out", f"out/{fmt}.sh"]
        )
        assert res.exit_code == 0, res.output
        text = (tmp_path / "out" / f"{fmt}.sh").read_text()
        assert str(tmp_path) not in text  # nothing of this machine's paths
        assert f"{own_command()} bind --placement out/result.json --" in text
        assert "out/result.json is relative to the directory this runs in" in text


def test_the_launch_command_is_the_placement_that_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    exe = venv_bin / "placement"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # not the PATH's `placement`
    monkeypatch.setattr(sys, "argv", [str(exe), "export"])
    assert own_command() == ".venv/bin/placement"  # as `make run` calls it, relative to the working directory
    monkeypatch.setenv("PATH", f"{venv_bin}{os.pathsep}/usr/bin")
    assert own_command() == "placement"  # the one on PATH is this one
    monkeypatch.setattr(
        sys, "argv", ["/some/where/placement/cli/app.py", "export"]
    )  # python -m placement.cli.app
    assert shlex.split(own_command()) == [sys.executable, "-m", "placement.cli.app"]
