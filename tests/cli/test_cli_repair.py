"""`placement repair`: --deterministic (one worker, deterministic time, the same answer twice), a result file of
another job refused unless --allow-other-job; `placement whatif defrag` needs --state or --empty."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import placement.cli.commands.repair as repair_cmd
from placement.cli.app import app
from placement.solve import SolveOptions
from tests.conftest import EXAMPLES

CLUSTER = EXAMPLES / "h100-256.yaml"
JOB = EXAMPLES / "tp8-dp4.yaml"


def _state(tmp_path: Path) -> Path:
    p = tmp_path / "state.yaml"
    p.write_text(
        "occupied:\n- job: tp8-dp4\n  devices: [node01, node02, node03, node04]\n"
        "- job: other\n  devices: [node05, node06/gpu0]\nfailed: [node02/gpu3]\n"
    )
    return p


def _answers(stdout: str) -> Any:
    """The RepairResponse without what measures the machine (wall times)."""
    doc = json.loads(stdout)
    doc.pop("stats", None)
    return doc


def test_deterministic_repair_runs_one_worker_in_deterministic_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[SolveOptions] = []
    real = repair_cmd.run_repair

    def spy(*a: Any, **k: Any) -> Any:
        seen.append(k["options"])
        return real(*a, **k)

    monkeypatch.setattr(repair_cmd, "run_repair", spy)
    args = ["repair", str(CLUSTER), str(JOB), str(EXAMPLES / "mapping-tp8-contiguous.json")]
    args += ["--state", str(_state(tmp_path)), "--time-limit", "1", "--output", "json"]
    runs = [CliRunner().invoke(app, [*args, "--deterministic"]) for _ in range(2)]
    for res in runs:
        assert res.exit_code == 0, res.output
    assert [(o.deterministic, o.workers, o.time_limit_s) for o in seen] == [(True, 1, 1.0)] * 2
    assert _answers(runs[0].stdout) == _answers(runs[1].stdout)
    plain = CliRunner().invoke(app, args)
    assert plain.exit_code == 0 and (seen[-1].deterministic, seen[-1].workers) == (False, 2)
    bad = CliRunner().invoke(app, [*args, "--deterministic", "--workers", "2"])
    assert bad.exit_code == 2 and "--workers" in bad.stderr and "--deterministic" in bad.stderr


def test_a_result_of_another_job_is_refused_unless_allowed(tmp_path: Path) -> None:
    placed = tmp_path / "placed.json"
    res = CliRunner().invoke(
        app, ["place", str(CLUSTER), str(JOB), "--strategy", "kueue-tas", "--out", str(placed)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(placed.read_text())
    failed = tmp_path / "failed.yaml"
    failed.write_text(f"failed: [{doc['result']['mapping'][5]['device']}]\n")
    doc["result"]["job"] = "jobC"  # the same ranks, another job's name
    other = tmp_path / "jobC.json"
    other.write_text(json.dumps(doc))
    args = ["repair", str(CLUSTER), str(JOB), str(other), "--state", str(failed), "--time-limit", "1"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: {other}: job: ")
    assert "'jobC'" in res.stderr and "'tp8-dp4'" in res.stderr and "--allow-other-job" in res.stderr
    assert "Traceback" not in res.output
    res = CliRunner().invoke(app, [*args, "--allow-other-job", "--output", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["forced_ranks"] == [5]


def test_whatif_defrag_needs_a_state_or_empty(tmp_path: Path) -> None:
    args = ["whatif", "defrag", str(CLUSTER), "--level", "leaf", "--hosts", "8", "--output", "json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "--state" in res.stderr and "--empty" in res.stderr
    empty = CliRunner().invoke(app, [*args, "--empty"])
    assert empty.exit_code == 0, empty.output
    doc = json.loads(empty.stdout)
    assert doc["fits_today"] and all(a["moved_ranks"] == 0 for a in doc["answers"])
    both = CliRunner().invoke(app, [*args, "--empty", "--state", str(_state(tmp_path))])
    assert both.exit_code == 2 and "--empty" in both.stderr
