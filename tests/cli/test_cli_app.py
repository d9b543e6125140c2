"""The root of `placement`: the command table agrees with the command modules, the root imports none of them (nor
the solver's libraries), -h and --version, the exit codes in the help and the README, and the help of every command
read the same way (positionals, flags, the server options)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from placement.cli.app import COMMANDS, app, load_command
from placement.cli.errors import EXIT_CODES
from placement.cli.help import Command, Group
from tests.conftest import ROOT

COMMANDS_DIR = ROOT / "placement" / "cli" / "commands"


def _walk(cmd: object, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], object]]:
    """Every command under `cmd` with its path of names (groups included)."""
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _walk(sub, (*path, name))


def every_command() -> list[tuple[tuple[str, ...], object]]:
    return [item for name in COMMANDS for item in _walk(load_command(name), (name,))]


def test_the_table_and_the_command_modules_agree() -> None:
    for name, entry in COMMANDS.items():
        cmd = load_command(name)
        assert isinstance(cmd, Command | Group), name
        assert cmd.name == name
        first = (cmd.help or "").split("\n\n")[0]
        assert first == entry.help, (name, first, entry.help)
    # every command module with an app is in the table, or one family of the `import` group
    imports = importlib.import_module("placement.cli.commands.imports")
    families = {g.typer_instance for g in imports.app.registered_groups}
    tabled = {e.module for e in COMMANDS.values()}
    for f in sorted(COMMANDS_DIR.glob("*.py")):
        mod = importlib.import_module(f"placement.cli.commands.{f.stem}")
        if hasattr(mod, "app"):
            assert mod.__name__ in tabled or mod.app in families, mod.__name__
    assert len(families) == 3


def test_the_root_imports_no_command_module_nor_the_solver_libraries() -> None:
    """`placement --help` lists every command from the table without importing a command's module (nor ortools,
    numpy, matplotlib or grpc): it answers at once."""
    script = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from placement.cli.app import app\n"
        "res = CliRunner().invoke(app, ['--help'])\n"
        "heavy = ('ortools', 'numpy', 'matplotlib', 'pandas', 'grpc', 'placement.cli.commands', 'placement.solve')\n"
        "mods = sorted(m for m in sys.modules if m.startswith(heavy))\n"
        "print(json.dumps({'code': res.exit_code, 'out': res.stdout, 'mods': mods}))\n"
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
    assert doc["code"] == 0 and doc["mods"] == []
    for name, entry in COMMANDS.items():
        assert re.search(rf"│ {re.escape(name)} +{re.escape(entry.help)}", doc["out"]), name


def test_short_help_version_and_a_mistyped_command() -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["-h"]).stdout == runner.invoke(app, ["--help"]).stdout
    place = runner.invoke(app, ["place", "-h"])
    assert place.exit_code == 0 and "Usage:" in place.stdout and "--time-limit" in place.stdout
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout == f"placement {version('placement')}\n"
    res = runner.invoke(app, ["plcae"])
    assert res.exit_code == 2 and "No such command 'plcae'" in res.output and "'place'" in res.output


def test_the_exit_codes_are_in_the_help_and_the_readme() -> None:
    help_text = " ".join(CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout.split())
    readme = (ROOT / "README.md").read_text()
    for code, meaning in EXIT_CODES.items():
        assert f"{code} {meaning}" in help_text, code
        assert re.search(rf"^\| {code} \| {re.escape(meaning)} \|$", readme, re.M), code
    assert {0, 1, 2, 3, 4, 130} <= set(EXIT_CODES)


def test_every_usage_line_spells_positionals_one_way_and_no_flag_shows_a_type() -> None:
    runner = CliRunner()
    for path, cmd in every_command():
        assert isinstance(cmd, Command | Group), path
        res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "300"})
        assert res.exit_code == 0, (path, res.output)
        assert "<bool>" not in res.stdout, path
        usage = next(line for line in res.stdout.splitlines() if "Usage:" in line)
        tail = usage.split(" ".join(path), 1)[1].split()
        assert tail[0] == "[OPTIONS]", usage
        for word in tail[1:]:  # NAME, [NAME] (optional), NAME... (repeated); groups: COMMAND [ARGS]...
            assert re.fullmatch(r"\[?[A-Z][A-Z_]*\]?(\.\.\.)?", word), (path, usage)


def test_every_command_that_talks_to_a_server_takes_the_same_options() -> None:
    """--server/-s (PLACEMENT_SERVER) and --token (PLACEMENT_TOKEN), wherever a command reaches a server."""
    served = []
    for path, cmd in every_command():
        params = {p.name: p for p in getattr(cmd, "params", [])}
        if "server" not in params or isinstance(cmd, Group):
            continue
        served.append(path[0])
        server, token = params["server"], params["token"]
        assert set(server.opts) == {"--server", "-s"} and server.envvar == "PLACEMENT_SERVER", path
        assert token.opts == ["--token"] and token.envvar == "PLACEMENT_TOKEN", path
    assert {"place", "place-batch", "registry"} <= set(served)


@pytest.mark.parametrize("target", ["test", "test-random"])
def test_make_test_prints_why_tests_skip(target: str) -> None:
    lines = (ROOT / "Makefile").read_text().split(f"\n{target}:", 1)[1].split("\n\n", 1)[0].splitlines()
    pytest_lines = [ln for ln in lines if "-m pytest" in ln]
    assert pytest_lines and all(" -rs" in ln for ln in pytest_lines), pytest_lines
