"""The `placement whatif` command through typer's CliRunner: a run, then --resume, and a clean input error."""

from __future__ import annotations

import warnings
from pathlib import Path

import yaml

from tests.support_whatif import sweep_doc

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"'click\.\w+(\.\w+)*' is deprecated", DeprecationWarning)
    import typer
    from typer.testing import CliRunner

    from placement.cli.app import app


def cli() -> typer.Typer:
    return app


def test_cli_whatif_runs_and_resumes(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(sweep_doc(strategies=["first-fit", "topology-greedy"])))
    out = tmp_path / "out"
    res = CliRunner().invoke(cli(), ["whatif", str(sweep), "--workers", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "tiny-sweep: occupancy=0" in res.stdout and "tp2 pp2 dp2" in res.stdout
    assert "8 points: 8 run now on 1 worker(s), 0 from an earlier run" in res.stderr
    assert (out / "results.csv").is_file() and (out / "step_seconds.svg").is_file()
    assert not (out / "improvement.png").exists()  # no optimizer in this sweep
    res = CliRunner().invoke(
        cli(), ["whatif", str(sweep), "--workers", "1", "--out", str(out), "--resume", "--no-plots"]
    )
    assert res.exit_code == 0, res.output
    assert "8 points: 0 run now on 1 worker(s), 8 from an earlier run" in res.stderr


def test_cli_whatif_input_error(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(sweep_doc(colours=["red"], occupancy=[])))
    res = CliRunner().invoke(cli(), ["whatif", str(sweep), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {sweep}: 2 error(s)")
    assert "axes.colours: unknown axis" in res.stderr and "axes.occupancy: is empty" in res.stderr
    assert "Traceback" not in res.output
    assert not (tmp_path / "out").exists()
