"""The sample trace shipped for `placement replay` (examples/trace-small.csv): the script in the repo writes it
byte for byte, and a replay of it reads well: progress counts job runs (jobs x policies), the table fits 80
columns when piped (every column with --wide), nothing cut."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from placement.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "examples" / "trace-small.csv"
CLUSTER = ROOT / "examples" / "h100-256.yaml"


def test_the_sample_trace_is_what_the_script_writes(tmp_path: Path) -> None:
    out = tmp_path / "trace.csv"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_sample_trace.py"), str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == TRACE.read_bytes()
    with TRACE.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 40 and all(1 <= int(r["gpus"]) <= 256 for r in rows)
    assert [float(r["submit_time"]) for r in rows] == sorted(float(r["submit_time"]) for r in rows)


def test_a_replay_of_the_sample_counts_job_runs_and_fits_80_columns(tmp_path: Path) -> None:
    with TRACE.open(newline="") as f:
        jobs = sum(1 for _ in csv.DictReader(f))
    args = ["replay", str(TRACE), str(CLUSTER), "--policy", "first-fit", "--policy", "kueue-tas"]
    args += ["--workers", "0", "--no-plots", "--out", str(tmp_path / "out"), "--log-every", str(jobs)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    runs = 2 * jobs
    assert f"{runs}/{runs} job runs ({jobs} jobs x 2 policies)" in res.stderr
    assert f"{runs}/{runs} jobs" not in res.stderr
    lines = res.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 80 and "…" not in res.stdout
    assert any(line.startswith("│ first-fit ") for line in lines) and any(
        "kueue-tas" in line for line in lines
    )
    wide = CliRunner().invoke(app, [*args, "--resume", "--wide"])
    assert wide.exit_code == 0 and "frag index" in wide.stdout and "wall s" in wide.stdout
