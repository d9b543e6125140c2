"""Replay benchmark: 2,000 jobs of a public trace on the 4,096-GPU fat-tree (examples/fat-tree-4096.yaml) with
each policy; wall times in this process, on a local process pool and on a local Ray head with 2 workers.

Writes bench/REPLAY_RESULTS.md (and, with --plots, docs/img/replay-jct-cdf.png). The cpsat replay runs once,
as one of the Ray run's tasks (it is the long one); the three scheduler policies run three ways, to measure the
executors' speed-up. Run: `nice -n 10 python bench/replay.py [--jobs 2000] [--time-limit 0.5] [--plots]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "data" / "traces"


def main(argv: list[str] | None = None) -> int:
    # This machine is shared: Ray's memory monitor would kill our workers when another process fills the memory.
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    from placement.io.native import cluster_from_dict, load_document
    from placement.sim.executors import InlineExecutor, LocalExecutor, RayExecutor
    from placement.sim.replay import SimConfig, read_trace
    from placement.sim.replay.report import markdown_table, plot_replays
    from placement.sim.replay.run import ReplayTask, read_csv, run_replays, task_key
    from placement.sim.replay.shapes import ShapeRule

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default=str(TRACES / "acme" / "cluster_summary.csv"))
    ap.add_argument("--acme-cluster", default="Kalos")
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--cluster", default=str(ROOT / "examples" / "fat-tree-4096.yaml"))
    ap.add_argument("--time-limit", type=float, default=0.5, help="cpsat deterministic-time budget per job")
    ap.add_argument("--out", default="/tmp/bench-replay")
    ap.add_argument("--results", default=str(ROOT / "bench" / "REPLAY_RESULTS.md"))
    ap.add_argument("--plots", action="store_true", help="copy the JCT CDF to docs/img/replay-jct-cdf.png")
    ap.add_argument("--no-cpsat", action="store_true")
    args = ap.parse_args(argv)

    if not Path(args.trace).is_file():
        print(f"no trace at {args.trace} (the shared data is absent)")
        return 1
    cluster = Path(args.cluster)
    doc = load_document(cluster)
    topo, _ = cluster_from_dict(doc, str(cluster), cluster.parent)
    tr = read_trace(
        args.trace,
        cluster_gpus=topo.num_devices,
        limit=args.jobs,
        acme_cluster=args.acme_cluster,
        load=args.load,
        seed=0,
    )
    jobs = tuple(tr.jobs)
    rule = ShapeRule()

    def task(policy: str) -> ReplayTask:
        cfg = SimConfig(policy, seed=0, time_limit_s=args.time_limit, deterministic=True)
        return ReplayTask(task_key(doc, jobs, cfg, rule), doc, str(cluster.parent), jobs, cfg, rule)

    fast = [task(p) for p in ("first-fit", "kueue-tas", "slurm-tree")]
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    lines: list[str] = []

    def timed(name: str, tasks: list[ReplayTask], ex: Any) -> tuple[float, list[dict[str, str]]]:
        t0 = time.perf_counter()
        run = run_replays(tasks, out / name, executor=ex)
        wall = time.perf_counter() - t0
        print(f"{name}: {len(tasks)} replays in {wall:.1f} s", flush=True)
        return wall, run.summary

    serial_wall, serial = timed("serial", fast, InlineExecutor())
    pool_wall, _ = timed("pool", fast, LocalExecutor(2))
    ray = RayExecutor(None, 2)
    ray_wall, _ = timed("ray", fast, ray)
    all_tasks = [*fast, task("cpsat")] if not args.no_cpsat else fast
    all_wall, summary = timed("ray-all", all_tasks, ray)
    failed = [r for r in summary if r.get("status") != "OK"]
    summary = [r for r in summary if r.get("status") == "OK"]
    cpsat_row = next((r for r in summary if r["policy"] == "cpsat"), None)

    kt = next(r for r in summary if r["policy"] == "kueue-tas")
    lines += [
        "# Replay benchmark (bench/replay.py)",
        "",
        f"Command: `nice -n 10 .venv/bin/python bench/replay.py --jobs {args.jobs} --time-limit {args.time_limit:g}"
        f"{' --plots' if args.plots else ''}` on {platform.node() or 'this machine'} "
        f"({os.cpu_count()} cores, shared with other jobs: wall times are noisy), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"Trace: {len(jobs)} jobs, format `{tr.format}`"
        + (
            f" (sampled from the published {args.acme_cluster} row of `acme/cluster_summary.csv`: GPU counts, run times "
            f"and Poisson arrivals at load {args.load:g}; see docs/replay.md)"
            if tr.format == "acme-summary"
            else ""
        )
        + f"; {len(tr.bad)} bad rows skipped. Cluster: `{cluster.name}`, {topo.num_devices} GPUs. Shapes: {rule.describe()}. "
        f"FIFO queue, no backfill, no failures; cpsat: {args.time_limit:g} s deterministic time per job, 1 thread.",
        "",
        "## Results per policy (the Ray run; wall s of each replay as its worker measured it)",
        "",
        markdown_table(summary),
        "",
        *[f"Replay {r['policy']} failed twice and is not in the table: {r.get('error')}" for r in failed],
        "",
        "| policy | replay wall s |",
        "|---|---:|",
        *[f"| {r['policy']} | {float(r['wall_s']):.1f} |" for r in summary],
        "",
    ]
    if cpsat_row is not None:
        d = (float(cpsat_row["mean_jct_h"]) - float(kt["mean_jct_h"])) / float(kt["mean_jct_h"])
        lines += [
            f"cpsat vs kueue-tas, mean JCT: {float(cpsat_row['mean_jct_h']):.4f} h vs {float(kt['mean_jct_h']):.4f} h "
            f"({100 * d:+.2f}%); p95 JCT {float(cpsat_row['p95_jct_h']):.4f} h vs {float(kt['p95_jct_h']):.4f} h; "
            f"communication hours {float(cpsat_row['comm_hours']):.1f} vs {float(kt['comm_hours']):.1f}; mean slowdown "
            f"{float(cpsat_row['mean_slowdown']):.4f} vs {float(kt['mean_slowdown']):.4f}.",
            "",
        ]
    lines += [
        "## Wall time by executor (first-fit, kueue-tas and slurm-tree: three replays)",
        "",
        "| executor | workers | wall s | speed-up vs this process |",
        "|---|---:|---:|---:|",
        f"| this process (one after another) | 1 | {serial_wall:.1f} | 1.00 |",
        f"| local process pool | 2 | {pool_wall:.1f} | {serial_wall / pool_wall:.2f} |",
        f"| local Ray head | 2 | {ray_wall:.1f} | {serial_wall / ray_wall:.2f} |",
        "",
        "Per replay in this process: "
        + ", ".join(f"{r['policy']} {float(r['wall_s']):.1f} s" for r in serial)
        + ".",
        "",
        f"All four policies on the local Ray head (2 workers): {all_wall:.1f} s wall, against "
        f"{sum(float(r['wall_s']) for r in summary):.1f} s for the replays one after another (sum of their wall s): "
        f"speed-up {sum(float(r['wall_s']) for r in summary) / all_wall:.2f}.",
        "",
    ]
    text = "\n".join(lines)
    Path(args.results).write_text(text)
    print(text)
    if args.plots:
        keys = {r["key"] for r in summary}
        plot_replays(
            [r for r in read_csv(out / "ray-all" / "jobs.csv") if r["key"] in keys],
            [r for r in read_csv(out / "ray-all" / "series.csv") if r["key"] in keys],
            out / "ray-all",
            title=f"{len(jobs)} jobs on {topo.num_devices} GPUs",
        )
        img = ROOT / "docs" / "img"
        shutil.copy(out / "ray-all" / "jct_cdf.png", img / "replay-jct-cdf.png")
        shutil.copy(out / "ray-all" / "utilization.png", img / "replay-utilization.png")
        print(f"wrote {img / 'replay-jct-cdf.png'} and {img / 'replay-utilization.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
