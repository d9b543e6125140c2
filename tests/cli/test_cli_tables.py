"""What the CLI prints fits 80 columns unless --wide: place-batch, whatif and `registry list` tables (ids whole, no
cell folded), warnings on one line; and the sweep table compares cpsat only with baselines it shows."""

from __future__ import annotations

import io
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from placement.cli.app import app
from placement.cli.commands import registry
from placement.cli.commands.whatif import narrow_table
from placement.io.importers.slurm import parse_topology_conf
from placement.sim.whatif import ranked_tables, run_sweep, sweep_from_dict
from placement.v1 import registry_pb2 as rpb
from tests.support_whatif import sweep_doc

NARROW = {"COLUMNS": "80"}


def widths(text: str) -> list[int]:
    return [len(line.rstrip()) for line in text.splitlines()]


def _cluster() -> dict[str, Any]:
    return {
        "name": "tiny",
        "levels": [
            {"name": "node", "bandwidth_gbps": 400, "latency_us": 1},
            {"name": "leaf", "bandwidth_gbps": 40, "latency_us": 4},
        ],
        "generate": {"nodes": 2, "devices": 4, "kind": "H100", "fanout": {"leaf": 2}},
    }


def _job(name: str, tp: int, dp: int) -> dict[str, Any]:
    return {
        "name": name,
        "device_kind": "H100",
        "parallel": {"tp": tp, "dp": dp},
        "model": {"parameters": 1.0e9, "hidden": 1024, "layers": 4, "seq_len": 2048, "micro_batches": 2},
    }


def test_place_batch_fits_80_columns_and_wide_keeps_each_job_on_one_row(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(_cluster()))
    batch = tmp_path / "batch.yaml"
    names = ["a-job-with-a-rather-long-name", "second", "third-one-too-many"]
    batch.write_text(yaml.safe_dump({"jobs": [{"job": _job(n, 4, 1)} for n in names]}))
    args = ["place-batch", str(cluster), str(batch), "--time-limit", "2", "--deterministic"]
    runner = CliRunner()
    doc = json.loads(runner.invoke(app, [*args, "--output", "json"]).stdout)
    left = [j for j in doc["plan"]["jobs"] if not j["admitted"]]
    assert len(left) == 1  # 8 GPUs, three 4-GPU jobs
    why = f"{left[0]['reason']}: " + "; ".join(left[0]["explanation"])
    assert len(why) > 80
    res = runner.invoke(app, args, env=NARROW)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert f"  {left[0]['job']}: {why}" in lines  # the reason on one line, under the table
    table_lines = [ln for ln in lines if not ln.startswith("  ")]
    assert max(widths("\n".join(table_lines))) <= 80
    assert all(any(f"│ {n} " in ln for ln in lines) for n in names)  # every name whole
    wide = runner.invoke(app, [*args, "--wide"], env=NARROW)
    row = next(ln for ln in wide.stdout.splitlines() if f"│ {left[0]['job']} " in ln)
    assert row.rstrip().endswith(f"│ {why} │")


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any, Any]:
    out = tmp_path_factory.mktemp("sweep")
    doc = sweep_doc(strategies=["first-fit", "cpsat"], time_limits=[0.3])
    path = out / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    sw = sweep_from_dict(doc, str(path))
    run = run_sweep(sw, out / "run", workers=0)
    return path, out / "run", sw, run


def test_the_sweep_table_compares_only_with_baselines_it_shows(
    sweep_run: tuple[Path, Path, Any, Any],
) -> None:
    _, _, sw, run = sweep_run
    # the solver costs every baseline on each answer: the CSV has a saving against kueue-tas and slurm-tree too
    reported = {
        c.removeprefix("step_improvement_vs_").replace("_", "-")
        for r in run.rows.values()
        for c, v in r.items()
        if c.startswith("step_improvement_vs_") and v
    }
    assert {"first-fit", "kueue-tas", "slurm-tree"} <= reported
    for t in ranked_tables(sw, run.rows):
        headers = [str(c.header) for c in t.columns]
        vs = {h.removeprefix("vs ") for h in headers if h.startswith("vs ")}
        shown = {h.removesuffix(" step s") for h in headers if h.endswith(" step s")}
        assert vs <= shown - {"cpsat"}, headers
    placed = next(t for t in ranked_tables(sw, run.rows) if "occupancy=0:" in str(t.title))
    assert "vs first-fit" in [str(c.header) for c in placed.columns]


def test_whatif_tables_fit_80_columns_and_wide_shows_every_column(
    sweep_run: tuple[Path, Path, Any, Any],
) -> None:
    path, out, sw, run = sweep_run
    runner = CliRunner()
    args = ["whatif", str(path), "--out", str(out), "--resume", "--no-plots"]
    res = runner.invoke(app, args, env=NARROW)
    assert res.exit_code == 0, res.output
    assert "0 run now" in res.stderr  # every point came from the run above
    tables = [ln for ln in res.stdout.splitlines() if not ln.startswith("  no placement for ")]
    assert max(widths("\n".join(tables))) <= 80
    assert "--wide adds" in res.stdout
    assert not any(h in line for line in tables if "┃" in line for h in ("MFU", "tokens/s", "comm s"))
    wide = runner.invoke(app, [*args, "--wide"], env=NARROW)
    con = Console(width=10_000, record=True, file=io.StringIO())
    for t in ranked_tables(sw, run.rows):
        con.print(t)
    assert wide.stdout == con.export_text()  # the tables as ranked_tables builds them, whole
    # a shape without a placement: its reason is printed under the narrow table, on one line
    full = next(t for t in ranked_tables(sw, run.rows) if "occupancy=0.9" in str(t.title))
    narrow, notes = narrow_table(full)
    why = [str(c) for c in next(c for c in full.columns if c.header == "why not placed").cells]
    assert notes and [n.split(": ", 1)[1] for n in notes] == [w for w in why if w]
    assert all(f"  no placement for {n}" in res.stdout.splitlines() for n in notes)
    assert "why not placed" not in [str(c.header) for c in narrow.columns]


def test_registry_list_fits_80_columns_with_whole_ids(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    now = time.time()
    rs = [
        rpb.Reservation(
            id=uuid.uuid4().hex,
            cluster_id="h100-cluster-east",
            job=job,
            status=rpb.RESERVATION_STATUS_HELD,
            devices=[f"node01/gpu{i}" for i in range(8)],
            idempotency_key=f"run-{i}-with-a-long-idempotency-key",
            expires_unix_s=now + 300,
        )
        for i, job in enumerate(["llama-13b-tp8-pp2-dp4", "a-job-whose-name-is-longer-than-any-column"])
    ]
    registry._table(rs, "2 reservation(s)", wide=False)
    text = capsys.readouterr().out
    assert max(widths(text)) <= 80
    lines = text.splitlines()
    assert len(lines) == 2 + len(rs)  # title, header, one line per reservation: no cell folded
    assert lines[1].split() == ["id", "job", "status", "devices", "expires"]
    for r, line in zip(rs, lines[2:], strict=True):
        rid, job, status, devices, expires = line.split()
        assert rid == r.id and status == "HELD" and devices == "8"  # the id whole, first
        assert job == r.job or (job.endswith("…") and r.job.startswith(job[:-1]))  # cut, never folded
        assert expires == time.strftime("%H:%M:%S", time.localtime(r.expires_unix_s))
    registry._table(rs, "2 reservation(s)", wide=True)
    wide = capsys.readouterr().out
    for r in rs:
        row = next(ln for ln in wide.splitlines() if r.id in ln)
        assert r.job in row and r.cluster_id in row and r.idempotency_key in row


def test_warnings_print_on_one_line(tmp_path: Path) -> None:
    text = (
        "SwitchName=l1 Nodes=a[1-2]\nSwitchName=l2 Nodes=b[1-2]\n"
        "SwitchName=sp Switches=l1\nSwitchName=core Switches=sp,l2\n"
    )
    conf = tmp_path / "topology.conf"
    conf.write_text(text)
    _, warnings = parse_topology_conf(text, str(conf), level_names=["leaf", "spine", "core"])
    assert warnings and len(warnings[0]) > 80
    res = CliRunner().invoke(
        app,
        ["import", "slurm", str(conf), "--levels", "leaf,spine,core", "--out", str(tmp_path / "c.yaml")],
        env=NARROW,
    )
    assert res.exit_code == 0, res.output
    assert f"warning: {warnings[0]}" in res.stderr.splitlines()
