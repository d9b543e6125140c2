"""The one runner of `whatif` and `replay`: `--workers` means the same in both (0: this process, N: N local
worker processes, never more than the tasks), a bad value is refused alike, and both helps say so."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from placement.cli.app import app
from placement.cli.runner import WORKERS_HELP, choose_executor
from placement.sim.executors import InlineExecutor, LocalExecutor, default_workers
from tests.support_whatif import sweep_doc
from tests.test_cli_app import every_command


def test_workers_has_one_meaning() -> None:
    assert isinstance(choose_executor("local", 0, None), InlineExecutor)
    three = choose_executor("local", 3, None)
    assert isinstance(three, LocalExecutor) and three.workers == 3
    assert choose_executor("local", 8, None, tasks=2).workers == 2  # no idle worker processes
    assert choose_executor("local", None, None).workers == default_workers()
    for bad in (("local", -1), ("nowhere", 1)):
        with pytest.raises(typer.Exit) as e:
            choose_executor(bad[0], bad[1], None)
        assert e.value.exit_code == 2


def test_whatif_and_replay_document_workers_alike_and_both_run_in_this_process(tmp_path: Path) -> None:
    commands = dict(every_command())
    for path in (("whatif", "sweep"), ("replay",)):
        (opt,) = [p for p in commands[path].params if p.name == "workers"]  # type: ignore[attr-defined]
        assert opt.help == WORKERS_HELP, path
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(sweep_doc(strategies=["first-fit"], occupancy=[0])))
    res = CliRunner().invoke(
        app, ["whatif", str(sweep), "--workers", "0", "--no-plots", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 0, res.output
    assert "run now in this process" in res.stderr
    for cmd in (["whatif", str(sweep)], ["replay", "t.csv", "c.yaml"]):
        res = CliRunner().invoke(app, [*cmd, "--workers", "-1"])
        assert res.exit_code == 2 and "--workers: must be >= 0 (0: in this process)" in res.stderr, res.output
