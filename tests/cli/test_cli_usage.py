"""A command's usage errors without importing the command (`placement.cli.usage`): the same words and exit code
as the command's own parser gives, no command module nor solver library imported, and the table is fresh."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import placement.cli.app as app_module
from placement.cli.app import app
from placement.cli.usage_gen import TABLE_PATH, render
from tests.conftest import ROOT

USAGE_ERRORS = [
    ["place", "--bogus"],
    ["place", "-q"],
    ["place", "a", "b", "c"],
    ["place", "a", "b", "--time-limit"],
    ["place", "--time-limit", "x", "a", "b"],
    ["place", "a", "b", "--deterministic=3"],
    ["evaluate", "--stat", "x"],
    ["evaluate", "a"],
    ["export"],
    ["export", "m", "--", "--x"],
    ["preempt", "a", "b"],
    ["repair", "a", "b", "c", "--workers", "many"],
    ["capacity", "c", "--place", "two"],
    ["place"],
    ["place", "c", "--request", "r.yaml"],
    ["place", "--request", "r.yaml", "j"],
]


def _without_fast_path(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> tuple[int, str]:
    monkeypatch.setattr(app_module, "check_usage", lambda *_a: None)
    res = CliRunner().invoke(app, argv)
    monkeypatch.undo()
    return res.exit_code, res.output


@pytest.mark.parametrize("argv", USAGE_ERRORS, ids=" ".join)
def test_a_usage_error_reads_as_the_command_itself_reports_it(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, expected = _without_fast_path(monkeypatch, argv)  # the command's own parser
    assert code == 2 and expected.strip()

    def no_import(name: str) -> object:
        raise AssertionError(f"the command module of {name} was imported for a usage error")

    monkeypatch.setattr(app_module, "load_command", no_import)
    res = CliRunner().invoke(app, argv)
    assert (res.exit_code, res.output) == (2, expected)


@pytest.mark.parametrize(
    "argv",
    [
        ["place", "--help"],
        ["place", "a", "b", "--time-limit", "1e-3x"],
        ["export", "missing.json", "--format", "rankfile"],
    ],
    ids=" ".join,
)
def test_what_is_not_certain_is_left_to_the_command(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list[str] = []
    real = app_module.load_command

    def spy(name: str) -> object:
        loaded.append(name)
        return real(name)

    monkeypatch.setattr(app_module, "load_command", spy)
    CliRunner().invoke(app, argv)
    assert loaded == [argv[0]]


def test_a_usage_error_imports_no_command_module_nor_the_solver() -> None:
    script = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from placement.cli.app import app\n"
        "res = CliRunner().invoke(app, ['place', '--bogus'])\n"
        "heavy = ('ortools', 'numpy', 'matplotlib', 'pandas', 'grpc', 'placement.cli.commands', 'placement.solve')\n"
        "mods = sorted(m for m in sys.modules if m.startswith(heavy))\n"
        "print(json.dumps({'code': res.exit_code, 'mods': mods}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "COLUMNS": "200", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    doc = json.loads(done.stdout)
    assert doc == {"code": 2, "mods": []}


def test_the_usage_table_is_fresh() -> None:
    assert TABLE_PATH.read_text() == render(), "run python -m placement.cli.usage_gen"
