"""placement.sim.whatif runs: the results CSV and its columns, resume, seeded states, explicit jobs, Ctrl-C (in
process and a real SIGINT to the command's workers), and parallel workers matching a serial run."""

from __future__ import annotations

import copy
import csv
from pathlib import Path

import pytest
import yaml

from placement.errors import InputError
from placement.sim.whatif import csv_columns, read_results, run_sweep, sweep_from_dict
from tests.support_whatif import CLUSTER, GREEDY, JOB, rows_of, sweep_doc


def test_run_writes_every_column_and_resume_skips_finished_points(tmp_path: Path) -> None:
    # a generous limit: cpsat stops as soon as it proves these 8-rank points, and a loaded machine still gets there
    sw = sweep_from_dict(sweep_doc(time_limits=[10]), "sweep.yaml")
    run = run_sweep(sw, tmp_path, workers=0)
    assert (run.total, run.executed, run.skipped, run.interrupted) == (12, 12, 0, False)
    header, rows = rows_of(tmp_path / "results.csv")
    assert header == csv_columns(sw)
    greedy = GREEDY.replace("-", "_")
    for col in (
        "key",
        "occupancy",
        "mode",
        "seed",
        "shape",
        "tp",
        "pp",
        "dp",
        "strategy",
        "time_limit_s",
        "status",
        "step_seconds",
        "comm_seconds",
        "comm_seconds_total",
        "compute_seconds",
        "bubble_seconds",
        "mfu",
        "tokens_per_s",
        "seconds_per_step",
        "label_tp_s",
        "label_dp_s",
        "label_pp_s",
        "tier_node_s",
        "tier_leaf_s",
        "lower_bound",
        "gap",
        "baseline_first_fit_s",
        "baseline_first_fit_step_s",
        f"baseline_{greedy}_s",
        f"baseline_{greedy}_step_s",
        "improvement_vs_first_fit",
        "step_improvement_vs_first_fit",
        "wall_s",
        "error",
        "leaf_bandwidth_gbps",
        "nodes",
        "gpus_per_node",
    ):
        assert col in header
    assert len(rows) == 12 and {r["key"] for r in rows} == set(sw.keys)
    free = [r for r in rows if r["occupancy"] == "0"]
    busy = [r for r in rows if r["occupancy"] == "0.9"]
    assert {r["status"] for r in free} <= {"OPTIMAL", "FEASIBLE"}
    assert {r["status"] for r in busy} == {"INFEASIBLE"}
    assert all("the job needs 8 H100 devices; 0 are usable" in r["error"] for r in busy)
    for r in free:
        step, comm = float(r["step_seconds"]), float(r["comm_seconds"])
        assert r["seconds_per_step"] == r["comm_seconds"]  # the deprecated column keeps its meaning
        assert step >= comm > 0 and float(r["comm_seconds_total"]) >= comm
        parts = sum(float(r[c]) for c in header if c.startswith("label_") and r[c])
        assert parts == pytest.approx(comm)
        tiers = sum(float(r[c]) for c in header if c.startswith("tier_") and r[c])
        assert tiers == pytest.approx(comm)
        assert comm <= float(r["baseline_first_fit_s"]) + 1e-12 or r["strategy"] == "first-fit"
        # a baseline's step: its exposed comm plus the same compute and bubble (they do not depend on the mapping)
        assert float(r["baseline_first_fit_step_s"]) == pytest.approx(
            float(r["baseline_first_fit_s"]) + step - comm
        )
    cps = [r for r in free if r["strategy"] == "cpsat"]
    assert all(r["lower_bound"] and r["gap"] for r in cps)

    again = run_sweep(sw, tmp_path, workers=0, resume=True)
    assert (again.executed, again.skipped, len(again.rows)) == (0, 12, 12)
    assert len(read_results(tmp_path / "results.csv")) == 12
    # without --resume the CSV starts over
    assert run_sweep(sw, tmp_path, workers=0).executed == 12


def test_resume_runs_only_the_missing_points(tmp_path: Path) -> None:
    sw = sweep_from_dict(sweep_doc(strategies=["first-fit", "topology-greedy"]), "sweep.yaml")
    run_sweep(sw, tmp_path, workers=0)
    header, rows = rows_of(tmp_path / "results.csv")
    with (tmp_path / "results.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, header)
        w.writeheader()
        w.writerows(rows[:3])
    again = run_sweep(sw, tmp_path, workers=0, resume=True)
    assert (again.skipped, again.executed) == (3, len(rows) - 3)
    assert sorted(r["key"] for r in read_results(tmp_path / "results.csv")) == sorted(r["key"] for r in rows)


def test_resume_ignores_a_row_cut_short(tmp_path: Path) -> None:
    sw = sweep_from_dict(sweep_doc(strategies=["first-fit"]), "sweep.yaml")
    run_sweep(sw, tmp_path, workers=0)
    path = tmp_path / "results.csv"
    text = path.read_text()
    path.write_text(
        text[: text.rstrip("\n").rfind("\n") + 1] + text.rstrip("\n").rsplit("\n", 1)[1][:60]
    )  # kill -9 mid-row
    again = run_sweep(sw, tmp_path, workers=0, resume=True)
    assert (again.skipped, again.executed) == (len(sw.keys) - 1, 1)
    _, rows = rows_of(path)
    assert len(rows) == len(sw.keys) and all(r["error"] is not None for r in rows)


def test_build_state_is_seeded_and_keeps_the_base_state() -> None:
    from placement.io.native import cluster_from_dict
    from placement.sim.whatif import build_state

    topo, _ = cluster_from_dict(CLUSTER)
    base = {"occupied": [{"job": "mine", "devices": ["node01"]}]}
    a = build_state(topo, None, base, occupancy=0.5, mode="partial", seed=3, failed=0.25)
    b = build_state(topo, None, base, occupancy=0.5, mode="partial", seed=3, failed=0.25)
    c = build_state(topo, None, base, occupancy=0.5, mode="partial", seed=4, failed=0.25)
    assert (
        a.occupied == b.occupied and a.failed == b.failed and (a.occupied, a.failed) != (c.occupied, c.failed)
    )
    assert len(a.failed) == 4  # round(0.25 * 16)
    assert all(a.occupied[d] == "mine" for d in range(4))
    assert len(a.occupied) >= 8


def test_explicit_job_without_shapes(tmp_path: Path) -> None:
    job = {
        "name": "pairs",
        "ranks": 4,
        "groups": [{"label": "ring", "kind": "all_reduce", "members": "0-3", "bytes": 1e9}],
        "edges": [{"label": "p2p", "src": 0, "dst": 3, "bytes": 1e8}],
    }
    doc = {
        "cluster": copy.deepcopy(CLUSTER),
        "job": job,
        "axes": {"occupancy": [0, 0.5], "strategies": ["first-fit", "cpsat"], "time_limits": [0.5]},
    }
    sw = sweep_from_dict(doc, "sweep.yaml")
    assert sw.labels == ("p2p", "ring") and {p.shape for p in sw.points} == {None}
    run = run_sweep(sw, tmp_path, workers=0)
    assert run.executed == 4
    header, rows = rows_of(tmp_path / "results.csv")
    assert "label_ring_s" in header and "tp" in header
    assert all(r["shape"] == "pairs" and r["ranks"] == "4" and r["label_ring_s"] for r in rows)
    with pytest.raises(InputError, match="needs a structured base job"):
        sweep_from_dict({**doc, "axes": {"shapes": "all"}}, "sweep.yaml")


def test_ctrl_c_keeps_finished_rows_and_resume_completes(tmp_path: Path) -> None:
    sw = sweep_from_dict(sweep_doc(strategies=["first-fit", "topology-greedy"]), "sweep.yaml")
    calls: list[int] = []

    def interrupt(done: int, total: int) -> None:
        calls.append(done)
        if done > 0:
            raise KeyboardInterrupt

    run = run_sweep(sw, tmp_path, workers=0, progress=interrupt)
    assert run.interrupted and 0 < run.executed < run.total
    assert len(read_results(tmp_path / "results.csv")) == run.executed
    rest = run_sweep(sw, tmp_path, workers=0, resume=True)
    assert rest.executed == run.total - run.executed and not rest.interrupted


RUN_CLI = """
import signal, sys
# Ctrl-C as a terminal gives it: whatever this test process blocked or ignored is not inherited
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
signal.signal(signal.SIGINT, signal.default_int_handler)
from placement.cli.app import app
app(sys.argv[1:])
"""


def test_sigint_stops_workers_and_keeps_rows(tmp_path: Path) -> None:
    """A real Ctrl-C (SIGINT to the process group) while CP-SAT runs in the workers: exit 130, rows kept."""
    import os
    import signal
    import subprocess
    import sys
    import time

    doc = sweep_doc(
        shapes=[{"tp": 2, "pp": 16, "dp": 8}],
        occupancy=[0.3],
        # 60 points: even when each is proven in a fraction of its second, the run outlasts the first row by
        # seconds, so the Ctrl-C below lands mid-run on a loaded machine too
        seeds=list(range(60)),
        strategies=["cpsat"],
        time_limits=[1.0],
    )
    doc["cluster"] = {
        **CLUSTER,
        "generate": {"nodes": 48, "devices": 8, "kind": "H100", "fanout": {"leaf": 8}},
    }
    doc["job"] = {**JOB, "model": {**JOB["model"], "layers": 80, "hidden": 8192}}
    doc["gpus"] = 256
    doc["keep_global_batch"] = False  # dp8 with the base job's 2 micro-batches per replica
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_CLI, "whatif", str(sweep), "--workers", "2", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(read_results(out / "results.csv")) < 1:
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "interrupted:" in err and "--resume" in err and "Traceback" not in err
    done = read_results(out / "results.csv")
    assert 1 <= len(done) < 60 and all(r["status"] in ("OPTIMAL", "FEASIBLE") for r in done)
    assert not (out / "step_seconds.png").exists()


def test_parallel_workers_match_a_serial_run(tmp_path: Path) -> None:
    sw = sweep_from_dict(
        sweep_doc(strategies=["first-fit", "topology-greedy"], occupancy=[0, 0.5], seeds=[0, 1]), "sweep.yaml"
    )
    seen: list[tuple[int, int]] = []
    par = run_sweep(sw, tmp_path / "par", workers=2, progress=lambda d, t: seen.append((d, t)))
    ser = run_sweep(sw, tmp_path / "ser", workers=0)
    assert seen[0] == (0, par.total) and seen[-1] == (par.total, par.total)
    strip = ("wall_s",)
    assert {k: {c: v for c, v in r.items() if c not in strip} for k, r in par.rows.items()} == {
        k: {c: v for c, v in r.items() if c not in strip} for k, r in ser.rows.items()
    }
