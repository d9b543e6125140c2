"""placement.whatif and the `whatif` command: sweep parsing and its errors, the grid and its keys, the CSV, resume,
Ctrl-C, parallel workers, tables and plots. Tiny sweeps (16 GPUs, 8-rank jobs) keep the whole file fast."""

from __future__ import annotations

import copy
import csv
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from placement.errors import InputError
from placement.whatif import (
    Shape,
    canonical_strategy,
    csv_columns,
    factorizations,
    known_strategies,
    load_sweep,
    plot_sweep,
    ranked_tables,
    read_results,
    run_sweep,
    sweep_from_dict,
)
from tests.conftest import EXAMPLES

GREEDY = canonical_strategy("topology-greedy")  # the solver's name for it (kueue-tas)

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"'click\.\w+(\.\w+)*' is deprecated", DeprecationWarning)
    import typer
    from typer.testing import CliRunner

    from placement.cli_whatif import register

CLUSTER: dict[str, Any] = {
    "name": "tiny",
    "levels": [
        {"name": "node", "bandwidth_gbps": 400, "latency_us": 1},
        {"name": "leaf", "bandwidth_gbps": 40, "latency_us": 4},
        {"name": "spine", "bandwidth_gbps": 10, "latency_us": 10},
    ],
    "generate": {"nodes": 4, "devices": 4, "kind": "H100", "fanout": {"leaf": 2}},
}
JOB: dict[str, Any] = {
    "name": "small",
    "device_kind": "H100",
    "parallel": {"tp": 4, "dp": 2},
    "model": {"parameters": 1.0e9, "hidden": 1024, "layers": 4, "seq_len": 2048, "micro_batches": 2},
}


def sweep_doc(**axes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "shapes": [{"tp": 4, "dp": 2}, {"tp": 2, "pp": 2, "dp": 2}],
        "occupancy": [0, 0.9],
        "strategies": ["first-fit", "topology-greedy", "cpsat"],
        "time_limits": [0.5],
    }
    base.update(axes)
    return {
        "name": "tiny-sweep",
        "cluster": copy.deepcopy(CLUSTER),
        "job": copy.deepcopy(JOB),
        "gpus": 8,
        "axes": base,
    }


def problems(doc: Any) -> dict[str, str]:
    with pytest.raises(InputError) as ei:
        sweep_from_dict(doc, "sweep.yaml")
    return {p.path: p.message for p in ei.value.problems}


# ---- parsing --------------------------------------------------------------------------------------------------


def test_factorizations_filters() -> None:
    shapes = factorizations(8, {"cp": [1], "ep": [1]}, gpus_per_node=4, hidden=1024, layers=4)
    assert [s.key for s in shapes] == [
        "tp1-cp1-ep1-dp8-pp1",
        "tp1-cp1-ep1-dp4-pp2",
        "tp1-cp1-ep1-dp2-pp4",
        "tp2-cp1-ep1-dp4-pp1",
        "tp2-cp1-ep1-dp2-pp2",
        "tp2-cp1-ep1-dp1-pp4",
        "tp4-cp1-ep1-dp2-pp1",
        "tp4-cp1-ep1-dp1-pp2",
    ]
    assert all(s.world_size == 8 for s in shapes)
    # heads, max_pp and the node size all cut
    assert [
        s.label for s in factorizations(8, {"cp": [1], "ep": [1], "heads": 2, "max_pp": 1}, gpus_per_node=8)
    ] == ["tp1 pp1 dp8", "tp2 pp1 dp4"]
    # ep > 1 needs experts divisible by ep
    assert all(s.ep == 1 for s in factorizations(8, {"cp": [1]}, experts=0))
    assert any(s.ep == 2 for s in factorizations(8, {"cp": [1]}, experts=8))


def test_parse_grid_and_defaults() -> None:
    sw = sweep_from_dict(sweep_doc(), "sweep.yaml")
    # 2 shapes x 2 occupancy x (first-fit + topology-greedy + cpsat at one time limit)
    assert len(sw.points) == 12 and len(sw.keys) == 12
    assert GREEDY == "kueue-tas" and {p.strategy for p in sw.points} == {"first-fit", GREEDY, "cpsat"}
    assert {p.time_limit_s for p in sw.points if p.strategy != "cpsat"} == {None}
    assert {p.shape for p in sw.points} == {Shape(tp=4, dp=2), Shape(tp=2, pp=2, dp=2)}
    # no shapes axis: the base job's own shape; default strategies are every one the solver knows
    doc = sweep_doc()
    del doc["axes"]["shapes"], doc["axes"]["strategies"]
    sw = sweep_from_dict(doc, "sweep.yaml")
    assert {p.shape for p in sw.points} == {Shape(tp=4, dp=2)}
    assert {p.strategy for p in sw.points} == set(known_strategies()) >= {"first-fit", GREEDY, "cpsat"}
    assert sw.baselines == tuple(s for s in known_strategies() if s != "cpsat")
    # an alias and its name are one strategy
    assert "axes.strategies" in problems(sweep_doc(strategies=["topology-greedy", GREEDY]))


def test_parse_generated_shapes_depend_on_the_variant() -> None:
    doc = sweep_doc(
        shapes={"cp": [1], "ep": [1]}, gpus_per_node=[2, 4], occupancy=[0], strategies=["first-fit"]
    )
    sw = sweep_from_dict(doc, "sweep.yaml")
    per_variant = {
        sw.variants[i].gpus_per_node: {p.shape.tp for p in sw.points if p.variant == i and p.shape}
        for i in range(len(sw.variants))
    }
    assert per_variant == {2: {1, 2}, 4: {1, 2, 4}}  # tp stays inside a node of each variant
    assert [info["gpus_per_node"] for info in sw.variant_info] == ["2", "4"]


def test_cluster_variants_apply_overrides() -> None:
    doc = sweep_doc(
        nodes=[4, 8],
        nodes_per_leaf=[2, 4],
        tiers={"leaf": [{"bandwidth_gbps": 40}, {"bandwidth_gbps": 80, "latency_us": 2}]},
        occupancy=[0],
        strategies=["first-fit"],
        shapes=[{"tp": 4, "dp": 2}],
    )
    sw = sweep_from_dict(doc, "sweep.yaml")
    assert len(sw.variants) == 8
    infos = {
        (i["nodes"], i["nodes_per_leaf"], i["leaf_bandwidth_gbps"], i["leaf_latency_us"])
        for i in sw.variant_info
    }
    assert ("8", "4", "80", "2") in infos and ("4", "2", "40", "4") in infos
    assert len({p.key for p in sw.points}) == 8  # every variant is a different input


def test_keys_are_stable_and_follow_the_inputs() -> None:
    a = sweep_from_dict(sweep_doc(), "sweep.yaml")
    b = sweep_from_dict(sweep_doc(), "other-name.yaml")
    assert a.keys == b.keys
    doc = sweep_doc()
    doc["cluster"]["levels"][1]["bandwidth_gbps"] = 41
    assert not set(a.keys) & set(sweep_from_dict(doc, "sweep.yaml").keys)
    # the seed and mode of an empty, healthy cluster cannot matter: those points share a key (and run once)
    sw = sweep_from_dict(
        sweep_doc(seeds=[0, 1], modes=["whole", "partial"], strategies=["first-fit"]), "sweep.yaml"
    )
    empty = {p.key for p in sw.points if p.occupancy == 0}
    busy = {p.key for p in sw.points if p.occupancy > 0}
    assert len(empty) == 2 and len(busy) == 2 * 2 * 2


def test_error_unknown_axis() -> None:
    got = problems(sweep_doc(colours=["red"]))
    assert "axes.colours" in got and "unknown axis" in got["axes.colours"]


def test_error_empty_grid() -> None:
    got = problems(sweep_doc(occupancy=[]))
    assert got == {
        "axes.occupancy": "is empty: the grid would have no points; give at least one value or drop the axis"
    }
    assert "axes.shapes" in problems(sweep_doc(shapes=[]))
    # filters that leave no shape
    got = problems(sweep_doc(shapes={"tp": [8], "cp": [1], "ep": [1]}))
    assert got["axes.shapes"].startswith(
        "no factorization of 8 GPUs passes the filters: tp <= 4 GPUs per node"
    )


def test_error_shapes_that_do_not_multiply_to_the_gpu_count() -> None:
    got = problems(sweep_doc(shapes=[{"tp": 4, "dp": 4}, {"tp": 3}, {"tp": 2, "pp": 3, "dp": 1}]))
    assert got["axes.shapes[0]"] == "tp*cp*ep*dp*pp = 4*1*1*4*1 = 16, not the sweep's 8 GPUs"
    assert got["axes.shapes[1]"] == "tp*cp*ep*pp = 3 does not divide the sweep's 8 GPUs, so no dp fits"
    assert got["axes.shapes[2]"] == "tp*cp*ep*dp*pp = 2*1*1*1*3 = 6, not the sweep's 8 GPUs"


def test_error_shape_breaking_the_model_names_the_field() -> None:
    got = problems(sweep_doc(shapes=[{"tp": 1, "pp": 8}]))  # 4 layers over 8 stages
    assert got == {"axes.shapes[0] (model.layers)": "4 layers do not split evenly over pp=8 stages"}


def test_errors_are_all_reported_at_once() -> None:
    doc = sweep_doc(
        strategies=["cpsat", "greedy"],
        occupancy=[0, 1.5],
        modes=["scattered"],
        time_limits=[0],
        tiers={"rack": [{"bandwidth_gbps": 10}]},
    )
    doc["colour"] = "red"
    got = problems(doc)
    assert got["axes.strategies[1]"] == f"unknown strategy 'greedy'; known: {', '.join(known_strategies())}"
    assert got["axes.occupancy[1]"] == "must be a fraction in [0, 1), got 1.5"
    assert got["axes.modes[0]"].startswith("unknown mode 'scattered'")
    assert got["axes.time_limits[0]"] == "must be a number of seconds > 0, got 0"
    assert got["axes.tiers.rack"] == "unknown level; the cluster's levels are ['node', 'leaf', 'spine']"
    assert got["colour"].startswith("unknown field")


def test_error_in_the_base_documents_has_field_paths(tmp_path: Path) -> None:
    doc = sweep_doc()
    doc["cluster"]["levels"][1]["bandwidth_gbps"] = -1
    doc["job"]["model"]["layers"] = 0
    got = problems(doc)
    assert got["cluster.levels[1].bandwidth_gbps"] == "must be > 0, got -1"
    assert "job.model.layers" in got
    # files relative to the sweep file; their problems name the file
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(CLUSTER))
    (tmp_path / "j.yaml").write_text(yaml.safe_dump({**JOB, "parallel": {"tp": 4, "dp": 2, "xp": 2}}))
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"cluster": "c.yaml", "job": "j.yaml", "axes": {"occupancy": [0]}}))
    with pytest.raises(InputError) as ei:
        load_sweep(sweep)
    assert [(p.path, p.message) for p in ei.value.problems] == [
        ("job (j.yaml) parallel.xp", "unknown field; expected one of ['cp', 'dp', 'ep', 'order', 'pp', 'tp']")
    ]


def test_variant_axes_need_a_generated_cluster() -> None:
    doc = sweep_doc(nodes=[2])
    doc["cluster"] = {
        "levels": CLUSTER["levels"][:2],
        "hosts": [
            {"name": "a", "devices": 4, "domains": {"leaf": "l"}},
            {"name": "b", "devices": 4, "domains": {"leaf": "l"}},
        ],
    }
    got = problems(doc)
    assert got == {
        "axes.nodes": "needs a cluster made by exactly one `generate` entry (hosts listed one by one are not resized)"
    }


def test_example_sweep_parses() -> None:
    sw = load_sweep(EXAMPLES / "sweep-70b.yaml")
    filters = yaml.safe_load((EXAMPLES / "sweep-70b.yaml").read_text())["axes"]["shapes"]
    fit = factorizations(
        256,
        filters,
        gpus_per_node=8,
        hidden=8192,
        layers=80,
        seq_len=4096,
        parameters=70e9,
        device_memory_gb=80.0,
        global_micro_batches=8 * 16,  # the base job's dp8 x 16
        recompute=True,
    )  # the example keeps only each layer's input (full recomputation)
    n_strategies = len(set(sw.strategies))
    assert (
        fit and len(sw.points) == len(fit) * 3 * n_strategies
    )  # the shapes whose memory fits, 3 occupancies
    shapes = {p.shape for p in sw.points}
    assert {s.tp for s in shapes if s} <= {1, 2, 4, 8} and all(
        s is not None and s.cp == s.ep == 1 for s in shapes
    )
    assert all(s is not None and s.world_size == 256 and 80 % s.pp == 0 for s in shapes)


# ---- running --------------------------------------------------------------------------------------------------


def rows_of(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


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
    from placement.whatif import build_state

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
import signal, sys, typer
# Ctrl-C as a terminal gives it: whatever this test process blocked or ignored is not inherited
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
signal.signal(signal.SIGINT, signal.default_int_handler)
from placement.cli_whatif import register
app = typer.Typer()
app.callback()(lambda: None)
register(app)
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


def test_tables_and_plots(tmp_path: Path) -> None:
    from rich.console import Console

    sw = sweep_from_dict(sweep_doc(), "sweep.yaml")
    run = run_sweep(sw, tmp_path, workers=0)
    tables = ranked_tables(sw, run.rows)
    assert len(tables) == 2  # one per occupancy level
    con = Console(record=True, width=200)
    for t in tables:
        con.print(t)
    text = con.export_text()
    assert "tp4 pp1 dp2" in text and "cpsat gap" in text and "the job needs 8 H100 devices" in text
    assert "modeled step seconds, ranked" in text and "cpsat step s" in text and "vs first-fit" in text
    assert "comm s" in text and "MFU" in text and "tokens/s" in text
    # ranked by the best step seconds (ties: exposed comm), whatever the model says they are
    free = next(t for t in tables if "occupancy=0:" in str(t.title))
    shapes = {p.shape.label: p.shape for p in sw.points if p.shape is not None}
    order = [str(c) for c in free.columns[1].cells]
    best = {}
    for label in order:
        keys = {p.key for p in sw.points if p.shape == shapes[label] and p.occupancy == 0}
        best[label] = min(
            (float(run.rows[k]["step_seconds"]), float(run.rows[k]["comm_seconds"])) for k in keys
        )
    assert [best[label] for label in order] == sorted(best.values())
    files = plot_sweep(sw, run.rows, tmp_path)
    assert sorted(p.name for p in files) == sorted(
        f"{s}.{e}" for s in ("step_seconds", "tier_breakdown", "improvement") for e in ("png", "svg")
    )
    svg = (tmp_path / "step_seconds.svg").read_text()
    assert "step seconds" in svg and "seconds / step" not in svg
    assert all(p.stat().st_size > 1000 for p in files)


# ---- the command ----------------------------------------------------------------------------------------------


def cli() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """test app"""

    register(app)
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


def test_memory_filter_drops_shapes_whose_model_states_do_not_fit() -> None:
    from placement.whatif import Shape, factorizations, model_state_gb

    kw: dict[str, Any] = {
        "gpus_per_node": 8,
        "hidden": 8192,
        "layers": 80,
        "seq_len": 4096,
        "parameters": 70e9,
    }
    every = factorizations(256, {"tp": [1, 2, 4, 8], "cp": [1], "ep": [1]}, **kw)
    fits = factorizations(
        256, {"tp": [1, 2, 4, 8], "cp": [1], "ep": [1], "memory_gb": 80, "activations": False}, **kw
    )
    assert (
        Shape(1, 1, 1, 256, 1) in every and Shape(1, 1, 1, 256, 1) not in fits
    )  # 70B x 4 bytes alone is 280 GB
    assert Shape(8, 1, 1, 4, 8) in fits
    assert all(model_state_gb(70e9, s) <= 80 for s in fits)
    assert set(fits) < set(every)


def test_shapes_keep_the_base_jobs_global_batch() -> None:
    from placement.whatif import global_micro_batches, shape_job_doc

    assert global_micro_batches(JOB) == 4  # dp2 x 2 micro-batches
    doc = shape_job_doc(JOB, Shape(tp=2, pp=2, dp=2))
    assert doc["model"]["micro_batches"] == 2 and doc["parallel"]["pp"] == 2
    assert shape_job_doc(JOB, Shape(tp=1, pp=2, dp=4))["model"]["micro_batches"] == 1
    assert shape_job_doc(JOB, Shape(tp=1, dp=8), keep_global_batch=False)["model"]["micro_batches"] == 2
    with pytest.raises(ValueError, match="dp=8 does not divide the global batch of 4 micro-batches"):
        shape_job_doc(JOB, Shape(tp=1, dp=8))
    # generated shapes: dp must divide the global batch; a listed shape that cannot is an error naming it
    sw = sweep_from_dict(
        sweep_doc(shapes={"cp": [1], "ep": [1]}, occupancy=[0], strategies=["first-fit"]), "s.yaml"
    )
    assert {p.shape.dp for p in sw.points if p.shape} == {1, 2, 4}
    got = problems(sweep_doc(shapes=[{"tp": 1, "dp": 8}]))
    assert got == {
        "axes.shapes[0]": "dp=8 does not divide the global batch of 4 micro-batches (the base job's dp x "
        "micro_batches); pick another dp or set keep_global_batch: false"
    }
    free = sweep_from_dict({**sweep_doc(shapes=[{"tp": 1, "dp": 8}]), "keep_global_batch": False}, "s.yaml")
    assert {p.shape for p in free.points} == {Shape(tp=1, dp=8)}
    assert problems({**sweep_doc(), "keep_global_batch": "yes"}) == {
        "keep_global_batch": "must be true or false, got 'yes'"
    }


def test_memory_check_adds_activations_and_takes_the_device_kinds_memory() -> None:
    from placement.compute import activation_bytes, device_kind
    from placement.job import ModelShape, ParallelSpec
    from placement.whatif import activation_gb, device_memory_gb, model_state_gb

    model = ModelShape(parameters=70e9, hidden=8192, layers=80, seq_len=4096, micro_batches=16, heads=64)
    kw: dict[str, Any] = {
        "gpus_per_node": 8,
        "hidden": 8192,
        "layers": 80,
        "seq_len": 4096,
        "parameters": 70e9,
        "micro_batches": 16,
        "heads": 64,
    }
    filters: dict[str, Any] = {"tp": [1, 2, 4, 8], "cp": [1], "ep": [1]}
    h100 = device_kind("H100")
    assert h100 is not None and device_memory_gb("H100") == h100.memory_gb and device_memory_gb("gpu") is None

    def need(s: Shape) -> float:
        return model_state_gb(70e9, s) + activation_gb(
            s, hidden=8192, layers=80, seq_len=4096, micro_batches=16, heads=64
        )

    every = factorizations(256, filters, **kw)
    fits = factorizations(256, filters, device_memory_gb=h100.memory_gb, **kw)
    assert fits and set(fits) < set(every)
    assert {s for s in every if need(s) <= h100.memory_gb} == set(fits)
    states_only = factorizations(
        256, {**filters, "activations": False}, device_memory_gb=h100.memory_gb, **kw
    )
    assert set(fits) < set(states_only)  # activations take shapes out that the model states alone let in
    s = fits[0]
    assert activation_gb(
        s, hidden=8192, layers=80, seq_len=4096, micro_batches=16, heads=64
    ) == pytest.approx(activation_bytes(model, ParallelSpec(s.tp, s.cp, s.ep, s.dp, s.pp)) / 1e9)
    # an explicit memory_gb overrides the kind's memory
    assert set(
        factorizations(256, {**filters, "memory_gb": 1e6}, device_memory_gb=h100.memory_gb, **kw)
    ) == set(every)
    # a sweep over H100s applies the kind's memory without a memory_gb filter
    doc = sweep_doc(shapes={"cp": [1], "ep": [1]}, occupancy=[0], strategies=["first-fit"])
    doc["job"]["model"] = {
        "parameters": 70e9,
        "hidden": 8192,
        "layers": 80,
        "seq_len": 4096,
        "micro_batches": 16,
    }
    doc["gpus"] = 16
    doc["cluster"]["generate"] = {"nodes": 4, "devices": 4, "kind": "H100", "fanout": {"leaf": 2}}
    got = problems(doc)
    assert got["axes.shapes"].startswith("no factorization of 16 GPUs passes the filters")
    assert "model states + activations <= 80 GB per device" in got["axes.shapes"]
