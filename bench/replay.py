"""Replay benchmark and its bars: every policy on each workload, the bar checked against kueue-tas, and a lower
bound on any policy's mean JCT.

Bars: issue #26's (openb, acme: the best cpsat-based policy's mean JCT <= 0.90 x kueue-tas's, p95 no higher,
utilization no lower) and issue #31's (llm-tree, llm-h100: with contention on, mean JCT <= 0.85 x kueue-tas's, p95
no higher, GPU-hours lost to contention <= 0.5 x kueue-tas's).

Workloads: ``openb`` (the shared openb pod list on examples/h100-256.yaml, arrivals packed 50x) and ``acme``
(2,000 jobs sampled from the Acme Kalos summary on examples/fat-tree-4096.yaml, load 0.9); checks beside the bar:
``openb-100x`` (packed 100x) and ``loaded`` (a synthetic trace that keeps h100-256 busy, written by `loaded_trace`); ``llm-tree`` and ``llm-h100``: 2,000
multi-node LLM jobs (`placement.sim.replay.workloads`: Acme Kalos sizes up to 512 GPUs, Megatron shapes, log-normal
run times, Poisson arrivals at offered load 1.1) on the irregular real tree examples/real-tree-179.yaml (1,432 GPUs)
and on examples/h100-256.yaml, with the running jobs' traffic sharing the fabric (`SimConfig.contention`). Replays run on local
worker processes with per-job progress lines; finished replays are kept (``--out``), so that a rerun resumes.
Writes bench/REPLAY_RESULTS.md. Run: `nice -n 10 python bench/replay.py [--workload openb --workload acme]`.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement.io.native import cluster_from_dict, load_document
from placement.sim.executors import InlineExecutor, LocalExecutor
from placement.sim.replay import SimConfig, read_trace
from placement.sim.replay.device_kinds import resolve_kinds
from placement.sim.replay.report import markdown_table
from placement.sim.replay.run import ReplayTask, read_csv, run_replays, task_key
from placement.sim.replay.shapes import ShapeRule, parse_shape_rule
from placement.sim.replay.workloads import LlmWorkload, llm_workload, write_trace

ROOT = Path(__file__).resolve().parent.parent
TRACES = next(
    (
        p
        for p in (
            ROOT.parent / "shared" / "data" / "traces",
            ROOT.parent.parent / "shared" / "data" / "traces",
        )
        if p.is_dir()
    ),
    ROOT.parent / "shared" / "data" / "traces",
)
CPSAT_BASED = ("cpsat", "cpsat-wait", "cpsat-preempt", "cpsat-cluster", "cpsat tp-required")
LOADED_TRACE = Path(tempfile.gettempdir()) / "placement-bench-loaded-trace.csv"
LLM_TRACE = Path(tempfile.gettempdir()) / "placement-bench-llm-{gpus}-{max_gpus}.csv"
LLM_WORKLOAD = LlmWorkload(jobs=2000, max_gpus=512, load=1.1, seed=0)
"""Issue #31's workload: 2,000 multi-node LLM jobs of 1-512 GPUs at offered load 1.1 (on a small cluster the
largest job is a quarter of it: a FIFO queue behind a job as large as the cluster idles the rest of it)."""


def llm_trace(gpus: int, max_gpus: int) -> Path:
    """The LLM workload drawn for a cluster of `gpus` GPUs with jobs of at most `max_gpus`, written as a plain
    trace (the same file each time)."""
    spec = dataclasses.replace(LLM_WORKLOAD, max_gpus=max_gpus)
    return write_trace(llm_workload(spec, gpus), str(LLM_TRACE).format(gpus=gpus, max_gpus=max_gpus))


def loaded_trace(path: Path = LOADED_TRACE, jobs: int = 300, seed: int = 1) -> Path:
    """A plain CSV trace that keeps a 256-GPU cluster busy: one arrival every 20 s, GPUs drawn from 1, 2, 4, 8,
    16, run times uniform in 100-2,000 s (Python's `random.Random(seed)`); the same file for the same arguments."""
    rng = random.Random(seed)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "submit_time", "gpus", "duration"])
        for i in range(jobs):
            w.writerow(
                [f"job-{i:04d}", 20 * i, rng.choice((1, 2, 4, 8, 16)), round(rng.uniform(100, 2000), 1)]
            )
    return path


@dataclass(frozen=True)
class Variant:
    """One replay of a workload: the label in the table, the policy, the shape rule, the max-slowdown bound."""

    label: str
    policy: str
    rule: str = ""
    max_slowdown: float = 0.0


@dataclass(frozen=True)
class Workload:
    name: str
    trace: Path
    cluster: Path
    jobs: int
    arrival_scale: float
    variants: tuple[Variant, ...]
    describe: str
    contention: bool = False
    time_limit_s: float | None = None  # the cpsat budget per job, when not --time-limit's
    bar: tuple[float, float | None] = (0.90, None)  # mean JCT / kueue-tas's; contention GPU-h / kueue-tas's
    llm: tuple[int, int] | None = None  # a generated LLM workload (`llm_trace`): cluster GPUs, largest job


WORKLOADS = {
    "openb": Workload(
        "openb",
        TRACES / "alibaba_gpu_v2023" / "openb_pod_list_default.first3000.csv",
        ROOT / "examples" / "h100-256.yaml",
        3000,
        0.02,
        (
            Variant("first-fit", "first-fit"),
            Variant("first-fit max-slowdown 1.05", "first-fit", max_slowdown=1.05),
            Variant("kueue-tas", "kueue-tas"),
            Variant("slurm-tree", "slurm-tree"),
            Variant("cpsat", "cpsat"),
            Variant("cpsat-wait", "cpsat-wait"),
            Variant("cpsat-preempt", "cpsat-preempt"),
        ),
        "the shared openb pod list (Alibaba cluster-trace-gpu-v2023, its first 3,000 rows) on h100-256.yaml, "
        "arrivals packed 50x (`--arrival-scale 0.02`)",
    ),
    "openb-100x": Workload(
        "openb-100x",
        TRACES / "alibaba_gpu_v2023" / "openb_pod_list_default.first3000.csv",
        ROOT / "examples" / "h100-256.yaml",
        3000,
        0.01,
        (
            Variant("kueue-tas", "kueue-tas"),
            Variant("cpsat", "cpsat"),
            Variant("cpsat-wait", "cpsat-wait"),
            Variant("cpsat-preempt", "cpsat-preempt"),
        ),
        "the same pod list packed 100x (`--arrival-scale 0.01`): a sensitivity check, where queueing is a larger "
        "share of the JCT (not part of the bar)",
    ),
    "loaded": Workload(
        "loaded",
        LOADED_TRACE,
        ROOT / "examples" / "h100-256.yaml",
        300,
        1.0,
        (
            Variant("kueue-tas", "kueue-tas"),
            Variant("cpsat", "cpsat"),
            Variant("cpsat-wait", "cpsat-wait"),
            Variant("cpsat-preempt", "cpsat-preempt"),
        ),
        "a synthetic trace that keeps h100-256 busy (`loaded_trace`: 300 jobs, one every 20 s, 1-16 GPUs, 100-2,000 "
        "s): where queueing is a large share of the JCT (not part of the bar)",
    ),
    "acme": Workload(
        "acme",
        TRACES / "acme" / "cluster_summary.csv",
        ROOT / "examples" / "fat-tree-4096.yaml",
        2000,
        1.0,
        (
            Variant("kueue-tas", "kueue-tas"),
            Variant("cpsat-preempt", "cpsat-preempt"),
            Variant("cpsat tp-required", "cpsat", rule="tp_in_node=require"),
            Variant("cpsat-wait", "cpsat-wait"),
            Variant("cpsat", "cpsat"),
        ),
        "2,000 jobs sampled from the Acme Kalos summary (LLM-shaped: powers of two up to 1,024 GPUs, log-normal "
        "run times, Poisson arrivals at load 0.9) on fat-tree-4096.yaml",
    ),
    **{
        name: Workload(
            name,
            Path(str(LLM_TRACE).format(gpus=gpus, max_gpus=top)),
            ROOT / "examples" / cluster,
            LLM_WORKLOAD.jobs,
            1.0,
            tuple(
                Variant(p, p)
                for p in (
                    "first-fit",
                    "kueue-tas",
                    "slurm-tree",
                    "cpsat",
                    "cpsat-wait",
                    "cpsat-preempt",
                    "cpsat-cluster",
                )
            ),
            f"{LLM_WORKLOAD.jobs:,} multi-node LLM jobs (Acme Kalos sizes up to {top} GPUs, Megatron "
            f"shapes tp8 pp1-4, log-normal run times of median {LLM_WORKLOAD.median_hours:g} h and mean "
            f"{LLM_WORKLOAD.mean_hours:g} h, Poisson arrivals at offered load {LLM_WORKLOAD.load:g}) on {cluster}, "
            "contention on: running jobs share the fabric",
            contention=True,
            time_limit_s=0.1,  # cpsat's budget per job: 2,000 jobs and 7 policies in about 10 minutes
            bar=(0.85, 0.5),
            llm=(gpus, top),
        )
        # the largest job: 512 GPUs on the real tree (the workload), a quarter of h100-256 (a FIFO queue
        # behind a job as large as the cluster idles the rest of it)
        for name, cluster, gpus, top in (
            ("llm-tree", "real-tree-179.yaml", 1432, 512),
            ("llm-h100", "h100-256.yaml", 256, 64),
        )
    },
}


def _quantile(vals: list[float], q: float) -> float:
    s = sorted(vals)
    k = (len(s) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def run_workload(w: Workload, args: argparse.Namespace) -> dict[str, Any]:
    doc = load_document(w.cluster)
    topo, _ = cluster_from_dict(doc, str(w.cluster), w.cluster.parent)
    doc, kind_notes = resolve_kinds(doc, topo)
    tr = read_trace(w.trace, cluster_gpus=topo.num_devices, limit=w.jobs, load=0.9, seed=0)
    jobs = tuple(tr.jobs)
    tasks: list[ReplayTask] = []
    labels: dict[str, str] = {}
    for v in w.variants:
        if args.only and v.label not in args.only:
            continue
        rule: ShapeRule = parse_shape_rule(v.rule or None)
        cfg = SimConfig(
            v.policy,
            seed=0,
            time_limit_s=w.time_limit_s if w.time_limit_s is not None else args.time_limit,
            deterministic=True,
            arrival_scale=w.arrival_scale,
            max_slowdown=v.max_slowdown,
            contention=w.contention,
        )
        key = task_key(doc, jobs, cfg, rule)
        labels[key] = v.label
        tasks.append(ReplayTask(key, doc, str(w.cluster.parent), jobs, cfg, rule))
    t0 = time.monotonic()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= args.log_s or done == total:
            last[0] = now
            el = now - t0
            print(
                f"[{w.name}] {done}/{total} jobs ({100 * done / max(1, total):.1f}%), "
                f"{done / el if el > 0 else 0:.1f} jobs/s, {el:.0f} s",
                flush=True,
            )

    ex = InlineExecutor() if args.workers == 0 else LocalExecutor(args.workers)
    out = Path(args.out) / w.name
    run = run_replays(tasks, out, executor=ex, resume=True, progress=progress)
    rows = []
    for r in run.summary:
        rows.append({**r, "policy": labels.get(r["key"], r["policy"])})
    durations = [j.duration / 3600.0 for j in jobs]
    keys = {r["key"] for r in run.summary}
    job_rows = [r for r in read_csv(out / "jobs.csv") if r["key"] in keys]
    slow = [float(r["slowdown"]) for r in job_rows if r.get("slowdown")]
    gpu_time: dict[str, list[float]] = {}  # key -> [GPU-seconds run, GPU-seconds at the ideal step]
    for r in job_rows:
        if r.get("placed") == "True":
            g = gpu_time.setdefault(r["key"], [0.0, 0.0])
            g[0] += int(r["gpus"]) * (float(r["end_s"]) - float(r["start_s"]))
            g[1] += int(r["gpus"]) * float(r["trace_duration_s"])
    contended: dict[str, list[float]] = {}
    for r in job_rows:
        if r.get("placed") == "True" and r.get("contended_slowdown"):
            contended.setdefault(r["key"], []).append(float(r["contended_slowdown"]))
    for row in rows:
        g = gpu_time.get(row["key"])
        row["gpu_time_ratio"] = f"{g[0] / g[1]:.4f}" if g and g[1] > 0 else ""
    return {
        "min_slowdown": min(slow, default=math.nan),
        "workload": w,
        "trace": tr,
        "topo": topo,
        "kind_notes": kind_notes,
        "rows": rows,
        "contended": contended,
        "gpu_hours_run": {k: v[0] / 3600.0 for k, v in gpu_time.items()},
        "bound_mean": sum(durations) / len(durations),
        "bound_p95": _quantile(durations, 0.95),
    }


def contention_lines(res: dict[str, Any]) -> list[str]:
    """Per policy: the GPU-hours its jobs lost to other jobs' traffic, the mean and largest contended slowdown
    (wall time over the same work alone on the same devices), and how many jobs were slowed at all."""
    out = [
        "| policy | GPU-hours lost to contention | share of GPU-hours run | mean contended slowdown | largest | jobs slowed |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        key = r["key"]
        slow = res["contended"].get(key, [])
        run_h = res["gpu_hours_run"].get(key, 0.0)
        lost = float(r.get("contention_gpu_hours") or 0.0)
        out.append(
            f"| {r['policy']} | {lost:.2f} | {lost / run_h if run_h else 0:.5f} | "
            f"{sum(slow) / len(slow) if slow else 1:.5f} | {max(slow, default=1):.4f} | "
            f"{sum(1 for x in slow if x > 1 + 1e-9)} |"
        )
    return [*out, ""]


def bar_lines(res: dict[str, Any]) -> list[str]:
    """The workload's bar against kueue-tas for each cpsat-based policy, and the lower bound on any policy."""
    rows = {r["policy"]: r for r in res["rows"] if r.get("status") == "OK"}
    w: Workload = res["workload"]
    share, lost_share = w.bar
    kt = rows.get("kueue-tas")
    if kt is None:
        return ["kueue-tas did not finish: the bar cannot be checked."]
    k_mean, k_p95, k_util = float(kt["mean_jct_h"]), float(kt["p95_jct_h"]), float(kt["utilization"])
    k_lost = float(kt.get("contention_gpu_hours") or 0.0)
    third = "contention GPU-h / kueue-tas" if lost_share is not None else "util - kueue-tas"
    out = [
        f"| cpsat-based policy | mean JCT / kueue-tas | p95 / kueue-tas | {third} | bar met |",
        "|---|---:|---:|---:|---|",
    ]
    for name in CPSAT_BASED:
        r = rows.get(name)
        if r is None:
            continue
        m, p, u = float(r["mean_jct_h"]), float(r["p95_jct_h"]), float(r["utilization"])
        if lost_share is not None:
            lost = float(r.get("contention_gpu_hours") or 0.0)
            ok = m <= share * k_mean and p <= k_p95 and lost <= lost_share * k_lost
            col = f"{lost / k_lost:.4f}" if k_lost > 0 else f"{lost:.1f} h against 0"
        else:
            ok = m <= share * k_mean and p <= k_p95 and u >= k_util
            col = f"{u - k_util:+.4f}"
        out.append(f"| {name} | {m / k_mean:.4f} | {p / k_p95:.4f} | {col} | {'yes' if ok else 'no'} |")
    out += [
        "",
        f"Lower bound on any policy's mean JCT (every job starts at its arrival on an ideal placement, so its JCT is "
        f"its trace run time): {res['bound_mean']:.4f} h = {res['bound_mean'] / k_mean:.4f} x kueue-tas's "
        f"{k_mean:.4f} h (the bar asks for <= {share:.4f} x). p95 of the run times alone: {res['bound_p95']:.4f} h. "
        f"The bound holds as long as no placement runs faster than the ideal: the lowest slowdown of any job in "
        f"these replays is {res['min_slowdown']:.4f}.",
    ]
    return out


FINDINGS = "## Findings"
"""The heading of the hand-written part of the results file, which a rerun keeps."""


def section_lines(res: dict[str, Any], args: argparse.Namespace, when: str) -> list[str]:
    """One workload's section: its command (with its own cpsat budget), its tables and its bar."""
    w, tr, topo = res["workload"], res["trace"], res["topo"]
    limit = w.time_limit_s if w.time_limit_s is not None else args.time_limit
    return [
        f"## {w.name}: {w.describe}",
        "",
        f"Command: `nice -n 10 .venv/bin/python bench/replay.py --workload {w.name}` (cpsat: {limit:g} s "
        f"deterministic time per job, 1 thread; {args.workers} local worker processes) on "
        f"{platform.node() or 'this machine'} ({os.cpu_count()} cores), {when}.",
        "",
        f"{len(tr.jobs)} jobs replayed ({tr.format}); {len(tr.bad)} bad rows."
        + "".join(f" Note: {n}." for n in [*tr.notes(), *res["kind_notes"]])
        + f" Cluster {topo.name}, {topo.num_devices} GPUs.",
        "",
        markdown_table(res["rows"]),
        "",
        "| policy | GPU-hours run / at the ideal step | utilization to the last end | preemptions | replay wall s |",
        "|---|---:|---:|---:|---:|",
        *[
            f"| {r['policy']} | {r.get('gpu_time_ratio', '')} | {float(r.get('utilization_makespan') or 'nan'):.4f} "
            f"| {r.get('preemptions') or 0} | {float(r.get('wall_s') or 'nan'):.0f} |"
            for r in res["rows"]
        ],
        "",
        *(contention_lines(res) if w.contention else []),
        *bar_lines(res),
        "",
    ]


HEADER = [
    "# Replay benchmark and its bars (bench/replay.py)",
    "",
    "Each section names the command that wrote it; a rerun of some workloads replaces their sections and keeps the "
    "others and the findings. FIFO queue, no backfill, no failures. Policies: docs/replay.md. Wall times are "
    "noisy: the machine has 2 cores, shared with other work.",
    "",
]


def merged_results(old: str, sections: dict[str, list[str]]) -> str:
    """The results page: `sections` (workload name -> lines) in place of their old sections, the other old
    sections kept in their order, new ones after them, and the hand-written findings (FINDINGS and below) last."""
    findings = old[old.index(FINDINGS) :] if FINDINGS in old else ""
    body = old[: old.index(FINDINGS)] if FINDINGS in old else old
    parts = body.split("\n## ")
    # a page written before sections named their command: its one command line goes into each old section
    shared = [ln for ln in parts[0].splitlines() if ln.startswith("Command:")]
    kept: list[tuple[str, list[str]]] = []
    for chunk in parts[1:]:
        name = chunk.split(":", 1)[0].strip()
        head, _, rest = chunk.partition("\n")
        command = [] if "\nCommand:" in "\n" + rest else [*shared, ""]
        kept.append((name, ["## " + head, "", *command, rest.strip("\n"), ""]))
    order = [n for n, _ in kept] + [n for n in sections if n not in dict(kept)]
    lines = list(HEADER)
    for n in order:
        lines += sections[n] if n in sections else dict(kept)[n]
    text = "\n".join(lines).rstrip("\n") + "\n"
    return text + ("\n" + findings if findings else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workload", action="append", choices=sorted(WORKLOADS), help="default: all four")
    ap.add_argument("--only", action="append", help="run only these variants (labels)")
    ap.add_argument("--time-limit", type=float, default=0.5, help="cpsat deterministic-time budget per job")
    ap.add_argument("--workers", type=int, default=2, help="local worker processes (0: this process)")
    ap.add_argument("--log-s", type=float, default=30.0, help="seconds between progress lines")
    ap.add_argument("--out", default="/tmp/bench-replay")
    ap.add_argument("--results", default=str(ROOT / "bench" / "REPLAY_RESULTS.md"))
    args = ap.parse_args(argv)
    names = args.workload or ["openb", "acme", "openb-100x", "loaded"]
    results = []
    for n in names:
        w = WORKLOADS[n]
        if w.trace == LOADED_TRACE:
            loaded_trace()
        if w.llm is not None:
            llm_trace(*w.llm)
        if not w.trace.is_file():
            print(f"no trace at {w.trace} (the shared data is absent)")
            return 1
        results.append(run_workload(w, args))
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    sections = {res["workload"].name: section_lines(res, args, when) for res in results}
    out = Path(args.results)
    text = merged_results(out.read_text() if out.is_file() else "", sections)
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
