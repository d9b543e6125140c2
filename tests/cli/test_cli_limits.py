"""The CLI on hostile input: bad files (undecodable, too deep, alias bombs, binary, absurd ranks) exit 2 naming the
file and never print a traceback; --time-limit and --gap are checked; `--limits` raises and lowers the limits."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from placement.cli.app import app
from tests.conftest import EXAMPLES
from tests.support_native import yaml_bomb

runner = CliRunner()


def _cli(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    text = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert "Traceback" not in text, text
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, text


def test_cli_bad_files_exit_2_without_traceback(tmp_path: Path) -> None:
    job_file, mapping = str(EXAMPLES / "tp8-dp4.yaml"), str(EXAMPLES / "mapping-tp8-split.json")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: c\n# 5 µs\n".encode("latin-1"))
    deep_y, deep_j = tmp_path / "deep.yaml", tmp_path / "deep.json"
    deep_y.write_text("a: " + "[" * 200_000 + "]" * 200_000)
    deep_j.write_text("[" * 200_000 + "]" * 200_000)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(yaml_bomb())
    ranks = tmp_path / "ranks.json"
    ranks.write_text(json.dumps({"name": "j", "ranks": 1e29, "groups": [{"members": [0, 1], "bytes": 1}]}))
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(bytes(range(256)))
    for bad in (latin, deep_y, deep_j, bomb, binary):
        code, text = _cli("evaluate", str(bad), job_file, mapping)
        assert code == 2 and str(bad.name) in text, text
    code, text = _cli("place", str(EXAMPLES / "h100-256.yaml"), str(ranks))
    assert code == 2 and "ranks" in text


def test_cli_time_limit_and_gap_are_checked() -> None:
    c, j = str(EXAMPLES / "h100-256.yaml"), str(EXAMPLES / "tp8-dp4.yaml")
    for args, needle in (
        (["--time-limit", "nan"], "--time-limit"),
        (["--time-limit", "inf"], "--time-limit"),
        (["--gap", "5"], "--gap"),
        (["--gap", "nan"], "--gap"),
        (["--gap", "1"], "--gap"),
    ):
        code, text = _cli("place", c, j, *args)
        assert code == 2 and needle in text, text


def test_cli_limits_flag_raises_and_lowers_limits() -> None:
    c, j = str(EXAMPLES / "h100-256.yaml"), str(EXAMPLES / "tp8-dp4.yaml")
    code, text = _cli("--limits", "max_hosts=2", "place", c, j)
    assert code == 2 and "max_hosts" in text and "--limits" in text
    code, text = _cli("--limits", "bogus=1", "place", c, j)
    assert code == 2 and "--limits" in text
