"""Replay policies and fixes of issue #26: TP required in a node, cpsat-wait's place-or-wait rule, cpsat-preempt's
victims and their JCT, first-fit with max-slowdown not blocking, unknown device kinds, the first N arrivals, and
progress per job from worker processes."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from placement.cost.evaluate import evaluate
from placement.io.native import cluster_from_dict
from placement.model.state import ClusterState
from placement.model.traffic import job_traffic
from placement.sim.executors import LocalExecutor
from placement.sim.replay import SimConfig, TraceJob, parse_shape_rule, read_trace, simulate
from placement.sim.replay.device_kinds import FALLBACK_KIND, TRACE_KINDS, resolve_kinds
from placement.sim.replay.shapes import ShapeRule, job_for
from placement.sim.scenarios import fat_tree
from tests.support_executors import reporting_task

HUGE = 1e6


def blocked_cluster_jobs(b_duration: float, blocker_durations: list[float]) -> list[TraceJob]:
    """Eight 7-GPU jobs (TP 7, one per 8-GPU node) leave one free GPU per node; then an 8-GPU job (TP 8) arrives:
    it fits only split over nodes, or on a node one of them frees."""
    jobs = [TraceJob(f"blk{i}", 0.0, 7, d, i + 2) for i, d in enumerate(blocker_durations)]
    return [*jobs, TraceJob("b", 1.0, 8, b_duration, 20)]


def test_shape_rule_can_require_tp_in_a_node() -> None:
    rule = parse_shape_rule("tp_in_node=require")
    assert rule.tp_in_node == "require" and "TP required" in rule.describe()
    job = job_for("j", 16, rule, gpus_per_node=8, kind="H100", node_level="node")
    assert dict(job.constraints.require) == {"tp": "node"} and not job.constraints.prefer
    soft = job_for("j", 16, ShapeRule(), gpus_per_node=8, kind="H100")
    assert dict(soft.constraints.prefer) == {"tp": "node"} and not soft.constraints.require
    with pytest.raises(Exception, match="prefer or require"):
        parse_shape_rule("tp_in_node=maybe")


def test_required_tp_waits_for_a_node_where_preferred_tp_splits() -> None:
    topo = fat_tree(64, nodes_per_leaf=2, leaves_per_spine=2)
    durs = [500.0 + 100 * i for i in range(8)]
    jobs = blocked_cluster_jobs(1000.0, durs)
    soft = simulate(topo, jobs, SimConfig("cpsat", time_limit_s=0.2))
    hard = simulate(topo, jobs, SimConfig("cpsat", time_limit_s=0.2), parse_shape_rule("tp_in_node=require"))
    b_soft, b_hard = soft.records[-1], hard.records[-1]
    assert b_soft["start_s"] == 1.0 and b_soft["nodes"] > 1 and b_soft["slowdown"] > 1.0
    # required: it starts when the first blocker ends (a 1-node job runs exactly its trace duration)
    assert b_hard["start_s"] == pytest.approx(min(durs)) and b_hard["nodes"] == 1


def test_cpsat_wait_waits_when_the_wait_is_shorter_than_the_slowdown_costs() -> None:
    topo = fat_tree(64, nodes_per_leaf=2, leaves_per_spine=2)
    # a blocker ends at 50 s; the 8-GPU job runs 10,000 s: split, its slowdown would cost far more than 49 s
    short = blocked_cluster_jobs(10_000.0, [50.0] + [HUGE] * 7)
    res = simulate(topo, short, SimConfig("cpsat-wait", time_limit_s=0.2))
    b = res.records[-1]
    assert b["start_s"] == pytest.approx(50.0) and b["nodes"] == 1 and b["slowdown"] == pytest.approx(1.0)
    assert b["waits"] >= 1
    # every blocker runs ~forever and the job is short: waiting would cost more than the slowdown
    long = blocked_cluster_jobs(10.0, [HUGE] * 8)
    res = simulate(topo, long, SimConfig("cpsat-wait", time_limit_s=0.2))
    b = res.records[-1]
    split = simulate(topo, long, SimConfig("cpsat", time_limit_s=0.2)).records[-1]
    assert b["start_s"] == 1.0 and b["nodes"] > 1 and b["slowdown"] == pytest.approx(split["slowdown"])


def test_cpsat_preempt_stops_the_cheapest_lower_priority_job_and_charges_its_restart() -> None:
    topo = fat_tree(64, nodes_per_leaf=2, leaves_per_spine=2)
    cfg = SimConfig("cpsat-preempt", time_limit_s=0.2, checkpoint_s=1800.0, restart_s=60.0)
    full = [TraceJob(f"big{i}", 0.0, 8, 100_000.0, i + 2) for i in range(8)]
    b = TraceJob("b", 600.0, 8, 100.0, 20)
    res = simulate(topo, [*full, b], cfg)
    rec = res.records[-1]
    assert rec["start_s"] == 600.0 and rec["wait_s"] == 0.0  # it preempted rather than waiting ~100,000 s
    victims = [r for r in res.records[:-1] if r["preemptions"]]
    assert len(victims) == 1 and victims[0]["preemptions"] == 1
    # the victim loses the 600 s since its last checkpoint, pays the 60 s restart, and waits for b's 100 s
    assert victims[0]["jct_s"] == pytest.approx(100_000.0 + 600.0 + 60.0 + 100.0)
    assert all(r["jct_s"] == pytest.approx(100_000.0) for r in res.records[:-1] if not r["preemptions"])
    # a job with more GPU-time than every running one has lower priority: it never preempts them
    greedy = TraceJob("g", 600.0, 8, 200_000.0, 20)
    res = simulate(topo, [*full, greedy], cfg)
    assert sum(r["preemptions"] for r in res.records) == 0
    assert res.records[-1]["start_s"] == pytest.approx(100_000.0)


def test_cpsat_preempt_does_not_preempt_when_the_restart_costs_more_than_the_gain() -> None:
    topo = fat_tree(64, nodes_per_leaf=2, leaves_per_spine=2)
    # everything running ends 10 s after b arrives: waiting 10 s beats losing 1,790 s of 8 GPUs
    full = [TraceJob(f"big{i}", 0.0, 8, 1800.0, i + 2) for i in range(8)]
    b = TraceJob("b", 1790.0, 8, 5.0, 20)
    res = simulate(topo, [*full, b], SimConfig("cpsat-preempt", time_limit_s=0.2, checkpoint_s=3600.0))
    assert sum(r["preemptions"] for r in res.records) == 0
    assert res.records[-1]["start_s"] == pytest.approx(1800.0)


MIXED_NODES = {
    "name": "mixed",
    "levels": [
        {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
        {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
        {"name": "spine", "bandwidth_gbps": 25, "latency_us": 7},
    ],
    "node_types": [
        {"name": "two", "devices": 2, "kind": "H100"},
        {"name": "eight", "devices": 8, "kind": "H100"},
    ],
    "hosts": [
        *(
            {"name": f"small{i}", "node_type": "two", "domains": {"leaf": "l0", "spine": "s"}}
            for i in range(4)
        ),
        *(
            {"name": f"big{i}", "node_type": "eight", "domains": {"leaf": "l1", "spine": "s"}}
            for i in range(2)
        ),
    ],
}


def test_first_fit_with_max_slowdown_takes_another_placement_instead_of_blocking() -> None:
    topo, _ = cluster_from_dict(MIXED_NODES, "mixed.yaml", Path("."))
    jobs = [TraceJob("long", 0.0, 1, 10_000.0, 2)] + [
        TraceJob(f"p{i}", 10.0 + i, 8, 100.0, 3 + i) for i in range(3)
    ]
    rule = parse_shape_rule("tp_max=2")  # tp2 dp4: first-fit takes the 2-GPU nodes first, a split placement
    plain = simulate(topo, jobs, SimConfig("first-fit"), rule)
    assert plain.records[1]["nodes"] == 4 and plain.records[1]["slowdown"] > 1.05
    picky = simulate(topo, jobs, SimConfig("first-fit", max_slowdown=1.05), rule)
    p0, p1, p2 = picky.records[1:]
    # the other baselines' node-aligned placement is taken at once, on an 8-GPU node, within the bound
    assert p0["start_s"] == 10.0 and p0["nodes"] == 1 and p0["slowdown"] <= 1.05
    assert p1["start_s"] == 11.0 and p1["nodes"] == 1
    # the third waits for a whole node (while the 1-GPU job runs), not for the 1-GPU job to end
    assert p2["start_s"] == pytest.approx(p0["end_s"]) and p2["nodes"] == 1


def test_unknown_device_kinds_are_priced_and_noted() -> None:
    doc: dict[str, Any] = {
        "name": "odd",
        "levels": [
            {"name": "node", "bandwidth_gbps": 100, "latency_us": 2},
            {"name": "leaf", "bandwidth_gbps": 25, "latency_us": 5},
        ],
        "node_types": [{"name": "t", "devices": 2, "kind": "T4"}, {"name": "g", "devices": 8, "kind": "G2"}],
        "hosts": [
            {"name": "a", "node_type": "t", "domains": {"leaf": "l"}},
            {"name": "b", "node_type": "g", "domains": {"leaf": "l"}},
        ],
    }
    topo, _ = cluster_from_dict(doc, "odd.yaml", Path("."))
    job = TraceJob("one", 0.0, 1, 100.0, 2)
    with pytest.raises(ValueError, match="ideal step is 0"):
        simulate(topo, [job], SimConfig("first-fit"))
    fixed, notes = resolve_kinds(doc, topo)
    assert len(notes) == 2
    assert "'G2' (8 devices) is unknown" in notes[0] and FALLBACK_KIND in notes[0]
    assert "'T4' (2 devices)" in notes[1] and "datasheet" in notes[1]
    t2, _ = cluster_from_dict(fixed, "odd.yaml", Path("."))
    assert resolve_kinds(fixed, t2) == (fixed, [])
    res = simulate(t2, [job], SimConfig("first-fit"))
    assert res.records[0]["ideal_step_s"] > 0
    # a one-GPU step is compute alone: T4 against the fallback (V100) is the ratio of their peak TFLOP/s, within
    # the memory-bound optimizer step (step model v3), which does not scale with the peak and is ~1% of it here
    j = job_for("x", 1, ShapeRule(), gpus_per_node=8, kind=None)
    st = ClusterState()
    t4 = evaluate(t2, st, j, [0], traffic=job_traffic(j), check=False).step_seconds
    g2 = evaluate(t2, st, j, [2], traffic=job_traffic(j), check=False).step_seconds
    assert t4 / g2 == pytest.approx(125.0 / TRACE_KINDS["T4"].tflops, rel=0.01)


def test_jobs_n_takes_the_first_n_arrivals_not_the_first_rows(tmp_path: Path) -> None:
    p = tmp_path / "dlrm.csv"
    head = ["instance_sn", "role", "app_name", "gpu_request", "rdma_request"]
    head += ["creation_time", "scheduled_time", "deletion_time"]
    rows = [
        ["late", "HN", "x", 1, 0, 500, 510, 900],
        ["early", "HN", "x", 2, 0, 100, 120, 400],
        ["cpu", "HN", "x", 0, 0, 50, 60, 70],
        ["before", "HN", "x", 1, 0, "", "", ""],
        ["pending", "HN", "x", 1, 0, 300, "", 700],
        ["mid", "HN", "x", 4, 0, 200, 260, 1000],
    ]
    with p.open("w", newline="") as f:
        csv.writer(f).writerows([head, *rows])
    tr = read_trace(p, cluster_gpus=64, limit=2)
    assert tr.format == "dlrm2025" and tr.bad == []
    assert [(j.name, j.submit, j.duration) for j in tr.jobs] == [("early", 0.0, 280.0), ("mid", 100.0, 740.0)]
    assert tr.skipped == {"cpu-only": 1, "outside": 1, "never-ran": 1}


def test_progress_reaches_the_parent_from_worker_processes() -> None:
    seen: list[tuple[int, int, int]] = []
    done: dict[int, int] = {}
    LocalExecutor(1).run(
        reporting_task, [5, 3], done.__setitem__, lambda i, e: None, lambda i, d, t: seen.append((i, d, t))
    )
    assert done == {0: 5, 1: 3}
    # the first report of each task is sent at once, the last always: progress inside a task, not only its end
    assert (0, 1, 5) in seen and (0, 5, 5) in seen and (1, 1, 3) in seen and (1, 3, 3) in seen
