"""Shared by the tests of placement.cli.app: run the app in process (typer's CliRunner), write a dedented file, the
cost placement.cost.evaluate.evaluate gives a mapping, and the shape of a clean input error (exit code 2, no traceback)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from click.testing import Result
from typer.testing import CliRunner

from placement.cli.app import app
from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
from placement.io.native import load_cluster, load_job, load_mapping


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def modeled(cluster: Path, job: Path, mapping: Path) -> CostReport:
    """What placement.cost.evaluate.evaluate says of the mapping: the numbers the CLI must print (the model may change)."""
    topo, static = load_cluster(cluster)
    from placement.model.state import ClusterState

    return evaluate(topo, static or ClusterState(), load_job(job), load_mapping(mapping, topo))


def assert_input_error(res: Result, message: str) -> None:
    """Exit code 2, the whole message on stderr after `error: `, nothing else, and no traceback."""
    assert res.exit_code == 2, res.output
    assert res.stderr == f"error: {message}\n"
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)  # not an escaped exception
