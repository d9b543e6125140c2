"""Trace replay: trace readers and bad rows by line, the shape rule, the simulator's invariants (no device
double-booked, every job ends, utilization <= 1), failures, the executors' retry, and the `replay` command."""

from __future__ import annotations

import csv
import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from placement.cli.app import app
from placement.errors import InputError
from placement.sim.executors import InlineExecutor, LocalExecutor
from placement.sim.replay import SimConfig, TraceJob, parse_shape_rule, read_trace, simulate
from placement.sim.replay.report import summarize, time_average
from placement.sim.replay.shapes import ShapeRule
from placement.sim.scenarios import fat_tree
from tests.conftest import DATA

TRACES = DATA / "traces"
CLUSTER_YAML = """
name: ft-64
levels:
  - {name: node, bandwidth_gbps: 450, latency_us: 2}
  - {name: leaf, bandwidth_gbps: 50, latency_us: 5}
  - {name: spine, bandwidth_gbps: 25, latency_us: 7}
node_types:
  - {name: hgx, devices: 8, kind: H100}
generate: {nodes: 8, node_type: hgx, fanout: {leaf: 2}}
"""


def write_csv(path: Path, rows: list[list[Any]]) -> Path:
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    return path


def mixed_jobs(n: int, gpus: int = 64, seed: int = 1) -> list[TraceJob]:
    import random

    rng = random.Random(seed)
    sizes = [1, 2, 4, 8, 8, 16, 32, gpus]
    return [
        TraceJob(f"t{i}", i * rng.uniform(5, 60), rng.choice(sizes), rng.uniform(50, 900), i + 2)
        for i in range(n)
    ]


# ---- traces ---------------------------------------------------------------------------------------------------


def test_plain_csv_bad_rows_are_reported_by_line_and_skipped_or_refused(tmp_path: Path) -> None:
    p = write_csv(
        tmp_path / "t.csv",
        [
            ["submit_time", "gpus", "duration", "tp", "pp", "dp"],
            [0, 8, 100, 8, 1, 1],  # line 2: good, own shape
            [10, 4, -5, "", "", ""],  # line 3: negative duration
            [20, -2, 100, "", "", ""],  # line 4: negative GPUs
            [30, 128, 100, "", "", ""],  # line 5: more than the cluster
            [40, 16, "", "", "", ""],  # line 6: no duration
            [50, 16, 60, 8, 1, 1],  # line 7: shape does not multiply to the GPUs
            [5, 16, 60, "", "", ""],  # line 8: good
            [7, 0, 60, "", "", ""],  # line 9: CPU-only: skipped and counted, not bad
        ],
    )
    tr = read_trace(p, cluster_gpus=64)
    assert tr.format == "csv"
    assert [j.line for j in tr.jobs] == [2, 8] and tr.jobs[0].shape is not None and tr.jobs[0].shape.tp == 8
    bad = {b.path: b.message for b in tr.bad}
    assert set(bad) == {"line 3", "line 4", "line 5", "line 6", "line 7"}
    assert "negative" in bad["line 3"] and "-5" in bad["line 3"]
    assert "GPUs is -2" in bad["line 4"]
    assert tr.skipped == {"cpu-only": 1} and any("1 CPU-only" in n for n in tr.notes())
    assert "more than the cluster's 64" in bad["line 5"]
    assert "duration" in bad["line 6"] and "missing" in bad["line 6"]
    assert "16 GPUs" in bad["line 7"]
    with pytest.raises(InputError) as ei:
        read_trace(p, cluster_gpus=64, strict=True)
    assert sorted(pr.path for pr in ei.value.problems) == ["line 3", "line 4", "line 5", "line 6", "line 7"]


def test_philly_json_lines_and_pai2020_jobs(tmp_path: Path) -> None:
    jobs = [
        {
            "status": "Pass",
            "jobid": "a",
            "submitted_time": "2017-10-07 01:11:39",
            "attempts": [
                {
                    "start_time": "2017-10-07 01:12:09",
                    "end_time": "2017-10-07 01:13:23",
                    "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}],
                }
            ],
        },
        {"status": "Killed", "jobid": "b", "submitted_time": "2017-10-07 01:20:00", "attempts": []},
    ]
    p = tmp_path / "cluster_job_log"
    p.write_text(json.dumps(jobs, indent=2))
    tr = read_trace(p, "philly", cluster_gpus=64)
    assert [(j.name, j.gpus, j.duration, j.submit) for j in tr.jobs] == [("a", 2, 74.0, 0.0)]
    opening = [i + 1 for i, line in enumerate(p.read_text().splitlines()) if line == "  {"]
    assert tr.jobs[0].line == opening[0] and tr.bad == [] and tr.skipped == {"never-ran": 1}
    # PAI 2020 task table without its header: one job = its tasks (2 x 50% + 1 x 100% GPUs -> 2 GPUs)
    q = write_csv(
        tmp_path / "pai_task_table.csv",
        [
            ["j1", "worker", 2, "Terminated", 100, 400, 600, 29, 50, "V100"],
            ["j1", "ps", 1, "Terminated", 90, 410, 600, 29, "", ""],
            ["j1", "evaluator", 1, "Terminated", 95, 300, 600, 29, 100, "V100"],
            ["j2", "worker", 1, "Terminated", 200, 100, 600, 29, 100, "V100"],
        ],
    )
    tr = read_trace(q, cluster_gpus=64)
    assert tr.format == "pai2020"
    assert [(j.name, j.gpus, j.duration, j.line) for j in tr.jobs] == [("j1", 2, 320.0, 1)]
    assert tr.bad[0].path == "line 4" and "negative" in tr.bad[0].message


@pytest.mark.skipif(
    not (TRACES / "alibaba_gpu_v2023").is_dir(), reason="shared trace data absent (../shared/data/traces)"
)
def test_public_samples_read() -> None:
    path = TRACES / "alibaba_gpu_v2023" / "openb_pod_list_default.first3000.csv"
    tr = read_trace(path, cluster_gpus=4096)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    cpu = sum(1 for r in rows if r["num_gpu"] == "0")
    never = sum(1 for r in rows if r["num_gpu"] != "0" and not r["scheduled_time"])
    sharing = sum(
        1
        for r in rows
        if r["num_gpu"] == "1" and r["scheduled_time"] and r["gpu_milli"] and int(r["gpu_milli"]) < 1000
    )
    assert tr.format == "openb" and tr.bad == []
    assert tr.skipped == {"cpu-only": cpu, "never-ran": never} and len(tr.jobs) == 3000 - cpu - never
    assert tr.shared == sharing == sum(j.shared for j in tr.jobs) and sharing > 0
    assert all(j.gpus in (1, 2, 4, 8) and j.duration >= 0 for j in tr.jobs)
    a = read_trace(TRACES / "acme" / "cluster_summary.csv", cluster_gpus=4096, limit=500, seed=3)
    b = read_trace(TRACES / "acme" / "cluster_summary.csv", cluster_gpus=4096, limit=500, seed=3)
    assert a.format == "acme-summary" and a.jobs == b.jobs and len(a.jobs) == 500
    assert max(j.gpus for j in a.jobs) <= 1024 and sum(j.gpus == 1 for j in a.jobs) > 150
    with pytest.raises(InputError, match="no cluster 'Nope'"):
        read_trace(TRACES / "acme" / "cluster_summary.csv", cluster_gpus=4096, acme_cluster="Nope")


def test_shape_rule() -> None:
    r = ShapeRule()
    assert (r.shape(64, 8).tp, r.shape(64, 8).dp, r.shape(64, 8).pp) == (8, 8, 1)
    assert r.shape(12, 8).tp == 6 and r.shape(12, 8).dp == 2
    assert r.shape(3, 8).tp == 3 and r.model(4) == "7b" and r.model(4096) == "70b"
    q = parse_shape_rule("tp_max=4,pp=4,pp_from=64,classes=16:1b/inf:13b")
    assert (q.shape(64, 8).tp, q.shape(64, 8).pp, q.shape(64, 8).dp) == (4, 4, 4)
    assert q.shape(32, 8).pp == 1 and q.model(16) == "1b" and q.model(17) == "13b"
    with pytest.raises(InputError) as ei:
        parse_shape_rule("tp_max=x,foo=1,classes=8:9b")
    assert {p.path for p in ei.value.problems} == {"tp_max", "foo", "classes"}


# ---- the simulation -------------------------------------------------------------------------------------------


def check_invariants(res: Any, jobs: list[TraceJob], devices: int) -> None:
    # every job ends: one record each, placed ones with start >= submit and end >= start
    assert len(res.records) == len(jobs) and all(r for r in res.records)
    for r in res.records:
        if r["placed"]:
            assert r["start_s"] >= r["submit_s"] - 1e-9 and r["end_s"] >= r["start_s"]
    # no device double-booked at any time: segments on one device never overlap
    by_dev: dict[int, list[tuple[float, float, int]]] = {}
    for idx, devs, a, b in res.segments:
        assert len(set(devs)) == len(devs) == jobs[idx].gpus
        for d in devs:
            by_dev.setdefault(d, []).append((a, b, idx))
    for segs in by_dev.values():
        segs.sort()
        for (_, b1, j1), (a2, _, j2) in pairwise(segs):
            assert a2 >= b1 - 1e-9, f"jobs {j1} and {j2} share a device"
    # utilization <= 1 at every moment and on average
    assert all(0 <= busy <= usable <= devices for _, busy, usable, _ in res.series)
    assert all(0.0 <= f <= 1.0 for *_, f in res.series)
    s = summarize(res, devices)
    assert 0.0 <= s["utilization"] <= 1.0 and 0.0 <= s["utilization_makespan"] <= 1.0


@pytest.mark.parametrize("policy", ["first-fit", "kueue-tas", "slurm-tree", "cpsat"])
def test_simulator_invariants(policy: str) -> None:
    topo = fat_tree(64, nodes_per_leaf=2, leaves_per_spine=2)
    jobs = mixed_jobs(40 if policy != "cpsat" else 20)
    res = simulate(topo, jobs, SimConfig(policy, backfill=3, time_limit_s=0.2, keep_segments=True))
    check_invariants(res, jobs, 64)
    assert all(r["placed"] for r in res.records)
    assert any(r["wait_s"] > 0 for r in res.records)  # the trace queues on 64 GPUs
    # without failures a job runs for its trace duration x its modeled slowdown
    for r in res.records:
        assert r["end_s"] - r["start_s"] == pytest.approx(r["trace_duration_s"] * r["slowdown"], rel=1e-9)


def test_max_slowdown_waits_for_better_placements() -> None:
    topo = fat_tree(64, nodes_per_leaf=2, leaves_per_spine=2)
    jobs = mixed_jobs(40, seed=6)
    free = simulate(topo, jobs, SimConfig("first-fit"))
    picky = simulate(topo, jobs, SimConfig("first-fit", max_slowdown=1.05, keep_segments=True))
    check_invariants(picky, jobs, 64)
    assert all(r["placed"] for r in picky.records)
    worst = max(r["slowdown"] for r in free.records)
    assert worst > 1.05  # first-fit scatters some jobs
    # a job placed worse than 1.05 x ideal started only when nothing else ran
    for idx, _, a, _ in picky.segments:
        if picky.records[idx]["slowdown"] > 1.05 + 1e-9:
            assert not any(j != idx and a2 < a < b2 for j, _, a2, b2 in picky.segments)
    assert sum(r["slowdown"] > 1.05 + 1e-9 for r in picky.records) < sum(
        r["slowdown"] > 1.05 + 1e-9 for r in free.records
    )


@pytest.mark.parametrize("mode", ["kill", "repair"])
def test_failures_kill_or_repair_and_every_job_ends(mode: str) -> None:
    topo = fat_tree(64, nodes_per_leaf=2, leaves_per_spine=2)
    jobs = mixed_jobs(40, seed=2)
    res = simulate(
        topo,
        jobs,
        SimConfig(
            "kueue-tas", seed=5, failure_rate=2.0, failure_mode=mode, repair_hours=0.2, keep_segments=True
        ),
    )
    check_invariants(res, jobs, 64)
    assert any(u < 64 for _, _, u, _ in res.series)  # devices did fail
    hit = sum(r["restarts"] + r["repairs"] for r in res.records)
    assert hit > 0
    if mode == "kill":
        assert sum(r["repairs"] for r in res.records) == 0
    else:
        assert sum(r["repairs"] for r in res.records) > 0


def test_same_seed_same_replay_and_unplaceable_jobs_end() -> None:
    topo = fat_tree(64, nodes_per_leaf=2, leaves_per_spine=2)
    jobs = mixed_jobs(25, seed=4)
    a = simulate(topo, jobs, SimConfig("cpsat", seed=1, time_limit_s=0.2))
    b = simulate(topo, jobs, SimConfig("cpsat", seed=1, time_limit_s=0.2))
    assert a.records == b.records and a.series == b.series
    # a whole-cluster job first, then a small one behind it: both run, one after the other
    big = [TraceJob("big", 0.0, 64, 100.0, 2), TraceJob("small", 1.0, 1, 10.0, 3)]
    res = simulate(topo, big, SimConfig("first-fit", keep_segments=True))
    check_invariants(res, big, 64)
    assert [r["placed"] for r in res.records] == [True, True]
    assert res.records[1]["start_s"] == pytest.approx(res.records[0]["end_s"])


def test_time_average() -> None:
    series = [(0.0, 0, 10, 0.0), (10.0, 10, 10, 0.5), (20.0, 5, 10, 1.0)]
    assert time_average(series, 30.0) == pytest.approx(((0 + 100 + 50) / 300, (0 + 5 + 10) / 30))


# ---- executors ------------------------------------------------------------------------------------------------


def flaky(arg: tuple[str, int]) -> int:
    """Fails the first time it sees `path`, then returns `value`; value < 0 always fails."""
    path, value = arg
    p = Path(path)
    if value < 0:
        raise ValueError(f"bad value {value}")
    if not p.exists():
        p.write_text("seen")
        raise RuntimeError("first attempt fails")
    return value


@pytest.mark.parametrize("kind", ["inline", "local"])
def test_executor_retries_once_then_reports(tmp_path: Path, kind: str) -> None:
    ex = InlineExecutor() if kind == "inline" else LocalExecutor(2)
    tasks = [(str(tmp_path / "a"), 1), (str(tmp_path / "b"), -1), (str(tmp_path / "c"), 3)]
    done: dict[int, int] = {}
    failed: dict[int, str] = {}
    ex.run(flaky, tasks, done.__setitem__, failed.__setitem__)
    assert done == {0: 1, 2: 3}
    assert list(failed) == [1] and "ValueError: bad value -1" in failed[1]


# ---- the command ----------------------------------------------------------------------------------------------


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def cli() -> typer.Typer:
    return app


def test_cli_replay_resume_and_strict(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER_YAML)
    rows: list[list[Any]] = [["submit_time", "gpus", "duration"]]
    rows += [[j.submit, j.gpus, j.duration] for j in mixed_jobs(30, seed=7)]
    rows.append([999, -1, 10])  # line 32: negative GPUs
    rows.append([1000, 0, 10])  # line 33: CPU-only: skipped and noted, not bad
    trace = write_csv(tmp_path / "trace.csv", rows)
    out = tmp_path / "out"
    args = [
        "replay",
        str(trace),
        str(cluster),
        "--policy",
        "first-fit",
        "--policy",
        "kueue-tas",
        "--workers",
        "0",
        "--out",
        str(out),
    ]
    res = CliRunner().invoke(cli(), args)
    assert res.exit_code == 0, res.output
    assert "skipped 1 bad row" in res.stderr and "line 32: GPUs is -1" in res.stderr
    assert "note: skipped 1 CPU-only row" in res.stderr
    assert "2 replay(s): 2 run now" in res.stderr
    assert "kueue-tas" in res.stdout and "first-fit" in res.stdout
    summary = read(out / "summary.csv")
    assert [r["policy"] for r in summary] == ["first-fit", "kueue-tas"] and all(
        r["status"] == "OK" for r in summary
    )
    assert len(read(out / "jobs.csv")) == 60
    for name in ("jct_cdf.png", "utilization.svg", "fragmentation.png"):
        assert (out / name).is_file()
    res = CliRunner().invoke(cli(), [*args, "--resume", "--no-plots", "--policy", "slurm-tree"])
    assert res.exit_code == 0, res.output
    assert "3 replay(s): 1 run now on 1 inline worker(s), 2 from an earlier run" in res.stderr
    assert len(read(out / "jobs.csv")) == 90
    res = CliRunner().invoke(cli(), [*args, "--strict"])
    assert res.exit_code == 2 and "line 32" in res.stderr and "Traceback" not in res.output
    res = CliRunner().invoke(cli(), [*args, "--policy", "best"])
    assert res.exit_code == 2 and "--policy" in res.stderr
