"""`placement evaluate` through typer's CliRunner: the table and the JSON give what placement.cost.evaluate.evaluate says
(every phase and the compute side), an invalid mapping is refused, and the README's showcase numbers hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placement.cost.report import CostReport
from tests.conftest import EXAMPLES
from tests.support_cli import assert_input_error, modeled, run, write


def test_evaluate_table_and_json(tmp_path: Path, example: tuple[Path, Path]) -> None:
    cluster, job = example
    mapping = tmp_path / "m.json"
    mapping.write_text(json.dumps([f"node{h:02d}/gpu{k}" for h in range(1, 5) for k in range(8)]))
    rep = modeled(cluster, job, mapping)
    res = run("evaluate", cluster, job, mapping)
    assert res.exit_code == 0, res.output
    head = f"tp8-dp4 on dgx-h100-4node: step {rep.step_seconds:.4f} s, exposed comm {rep.comm_seconds:.4f} s"
    assert head in res.stdout
    lines = res.stdout.splitlines()
    for name, value in (
        ("step", rep.step_seconds),
        ("exposed comm", rep.comm_seconds),
        ("total comm", rep.comm_seconds_total),
    ):
        row = next(line for line in lines if line.strip("│ ").startswith(name))
        assert f"{value:.4f}" in row, row
    assert any(line.strip("│ ").startswith("MFU") for line in lines)
    assert any(line.strip("│ ").startswith("tokens/s") for line in lines)
    assert "compute" in res.stdout and "phases" in res.stdout and "critical group" in res.stdout
    for p in rep.phases:  # one row per phase, with its tier and exposed seconds
        assert any(p.name in line and p.tier in line and f"{p.exposed_seconds:.4f}" in line for line in lines)
    assert "tp" in res.stdout and "node" in res.stdout and "leaf" in res.stdout and "total" in res.stdout
    res = run("evaluate", cluster, job, mapping, "--output", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    cost = doc["cost"]  # the EvaluateResponse JSON mapping
    assert cost["step_seconds"] == pytest.approx(rep.step_seconds)
    assert cost["comm_seconds"] == pytest.approx(rep.comm_seconds)
    assert cost["comm_seconds_total"] == pytest.approx(rep.comm_seconds_total)
    assert doc["seconds_per_step"] == pytest.approx(rep.comm_seconds)  # the deprecated name keeps its meaning
    assert {"compute_seconds", "bubble_seconds", "tokens_per_s", "mfu", "surrogate_seconds"} <= set(cost)
    assert [p["name"] for p in cost["phases"]] == [p.name for p in rep.phases]
    assert set(doc["breakdown"]["by_label_s"]) == {"tp", "dp"}
    assert doc["mapping"][9] == {"rank": 9, "device": "node02/gpu1", "host": "node02", "kind": "H100"}


def test_evaluate_prints_every_phase_and_the_compute_side(
    tmp_path: Path, example: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report with phases and compute (what the v2 model gives) goes to the table and the JSON unchanged."""
    import placement.cli.commands.evaluate
    from placement.cost.report import PhaseCost

    cluster, job = example
    mapping = tmp_path / "m.json"
    mapping.write_text(json.dumps([f"node{h:02d}/gpu{k}" for h in range(1, 5) for k in range(8)]))
    real = modeled(cluster, job, mapping)
    fake = CostReport(
        step_seconds=1.25,
        comm_seconds=0.125,
        comm_seconds_total=0.5,
        compute_seconds=1.0,
        bubble_seconds=0.125,
        tokens_per_s=26214.4,
        mfu=0.375,
        by_label=real.by_label,
        by_tier=real.by_tier,
        by_label_tier=real.by_label_tier,
        phases=[
            PhaseCost("tp", 0.375, 0.0625, "node:NV18", "tp[2]", "ring"),
            PhaseCost("dp", 0.125, 0.0625, "leaf", "dp[5]", "hierarchical"),
        ],
    )
    monkeypatch.setattr(placement.cli.commands.evaluate, "evaluate_cost", lambda *a, **k: fake)
    res = run("evaluate", cluster, job, mapping)
    assert res.exit_code == 0, res.output
    assert "step 1.2500 s, exposed comm 0.1250 s, MFU 37.5%" in res.stdout
    lines = [line.strip("│ ") for line in res.stdout.splitlines()]
    assert any(line.startswith("MFU") and "37.5%" in line for line in lines)
    assert any(line.startswith("tokens/s") and "26,214" in line for line in lines)
    assert any(line.startswith("compute") and "1.0000" in line and "80.0%" in line for line in lines)
    assert any(line.startswith("pipeline bubble") and "0.1250" in line for line in lines)
    tp = next(line for line in lines if line.startswith("tp ") and "ring" in line)
    assert "node:NV18" in tp and "tp[2]" in tp and "0.3750" in tp and "0.0625" in tp
    dp = next(line for line in lines if line.startswith("dp ") and "hierarchical" in line)
    assert "leaf" in dp and "dp[5]" in dp
    cost = json.loads(run("evaluate", cluster, job, mapping, "--output", "json").stdout)["cost"]
    assert (cost["mfu"], cost["tokens_per_s"], cost["compute_seconds"]) == (0.375, 26214.4, 1.0)
    assert cost["phases"][1] == {
        "name": "dp",
        "seconds": 0.125,
        "exposed_seconds": 0.0625,
        "tier": "leaf",
        "critical": "dp[5]",
        "algorithm": "hierarchical",
    }


def test_evaluate_refuses_an_invalid_mapping(tmp_path: Path, example: tuple[Path, Path]) -> None:
    cluster, job = example
    mapping = write(tmp_path, "m.yaml", "[node01/gpu0, node01/gpu0]\n")
    res = run("evaluate", cluster, job, mapping)
    assert_input_error(
        res, "the mapping breaks 1 hard rule(s):\n  - [rank-count] the mapping places 2 ranks; the job has 32"
    )
    mapping.write_text(json.dumps([f"node{h:02d}/gpu{k}" for h in range(1, 5) for k in range(8)]))
    assert_input_error(
        run("evaluate", cluster, job, mapping, "--output", "xml"),
        "--output: unknown value 'xml'; use table or json",
    )


def test_evaluate_with_a_state_occupied_by_the_job_itself(tmp_path: Path, example: tuple[Path, Path]) -> None:
    cluster, job = example
    state = write(tmp_path, "s.yaml", "occupied: [{job: tp8-dp4, devices: [node01, node02]}]\n")
    mapping = write(
        tmp_path, "m.json", json.dumps({str(r): f"node{r // 8 + 1:02d}/gpu{r % 8}" for r in range(32)})
    )
    res = run("evaluate", cluster, job, mapping, "--state", state, "--output", "json")
    assert res.exit_code == 0, res.output
    other = write(tmp_path, "o.yaml", "occupied: [{job: other, devices: [node02/gpu7]}]\n")
    res = run("evaluate", cluster, job, mapping, "--state", other)
    assert_input_error(
        res,
        "the mapping breaks 1 hard rule(s):\n"
        "  - [occupied] rank 15: device node02/gpu7 is occupied by job 'other'",
    )


def test_readme_showcase_numbers(example: tuple[Path, Path]) -> None:
    cluster, job = example
    contiguous, split = EXAMPLES / "mapping-tp8-contiguous.json", EXAMPLES / "mapping-tp8-split.json"
    if not (contiguous.is_file() and split.is_file()):
        pytest.skip("examples/mapping-tp8-*.json are not in this checkout")
    a = json.loads(run("evaluate", cluster, job, contiguous, "--output", "json").stdout)["cost"]
    b = json.loads(run("evaluate", cluster, job, split, "--output", "json").stdout)["cost"]
    for got, mapping in ((a, contiguous), (b, split)):  # the numbers README.md quotes come from the model
        rep = modeled(cluster, job, mapping)
        assert got["step_seconds"] == pytest.approx(rep.step_seconds)
        assert got["comm_seconds"] == pytest.approx(rep.comm_seconds)
    # TP groups split over two nodes pay the NIC: slower in exposed comm and in the step
    assert b["comm_seconds"] > a["comm_seconds"] and b["step_seconds"] > a["step_seconds"]
