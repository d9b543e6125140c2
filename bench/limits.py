"""Time-limit benchmark: is every limit >= 0.2 s met within +10% plus 50 ms, at every size of the solver benchmark,
and for a whole batch and a whole repair?

For one scenario of each size in `bench/solver.py` (the largest job on each cluster, structured) it runs `place`
with limits 0.2, 0.5, 1 and 2 s and prints wall time against the allowance; then `place_batch` (queues of 10
jobs on 1,024 GPUs and 25 on 2,048, 45% busy, `bench/batch.py`'s queues) with limits 1 to 4 s and `repair` (a 64-rank job on
4,096 GPUs with 2 failed devices, `bench/repair.py`'s) with 0.5, 1 and 2 s: wall-clock limits. A deterministic
batch is shown too: its limit is a deterministic budget, not a bound on the wall time (not judged).
With ``first`` (issue 23): 1,024 ranks on 4,096 GPUs, the first answer on a fresh cluster against the best
scheduler baseline, within 1 s.
Run: `python bench/limits.py [--limits 0.2,0.5,1,2] [--what place,batch,repair,first] [--write bench/LIMITS.md]`.
Wall time is the whole call, as a caller sees it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dataclasses
import random

from batch import queue
from repair import running_job
from solver_scenarios import scenarios

from placement.decide.batch.joint import place_batch
from placement.decide.repair.run import repair
from placement.sim.scenarios import fat_tree, occupy
from placement.solve import SolveOptions, place
from placement.solve.baselines import BASELINES
from placement.solve.types import report_key

SIZES = (
    "fat-tree 1024, 0%, tp8 pp4 dp16",
    "fat-tree 4096, 60% mixed-random, tp8 pp4 dp32, structured",
    "fat-tree 4096, 30% mixed-random, tp2 pp8 dp64, structured",
    "NVL72 x8, 30% partial, tp8 pp4 dp8",
    "fat-tree 32768, 30% partial, tp8 pp4 dp256",
    "fat-tree 32768, 0%, tp8 pp8 dp256",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--limits", default="0.2,0.5,1,2")
    ap.add_argument("--what", default="place,batch,repair,first")
    ap.add_argument("--write", type=Path)
    args = ap.parse_args(argv)
    limits = [float(x) for x in args.limits.split(",")]
    what = set(args.what.split(","))
    header = "| call | scenario | ranks | limit s | wall s | allowed s | met |"
    rows = [header, "|---|---|---:|---:|---:|---:|---|"]
    print("\n".join(rows), flush=True)
    misses = total = 0

    def judge(call: str, name: str, ranks: int, limit: float, wall: float, judged: bool = True) -> None:
        nonlocal misses, total
        allowed = 1.1 * limit + 0.05
        ok = wall <= allowed
        if judged:
            misses += not ok
            total += 1
        met = ("yes" if ok else "**no**") if judged else "(deterministic budget: not a wall-clock limit)"
        row = f"| {call} | {name} | {ranks} | {limit:g} | {wall:.2f} | {allowed:.2f} | {met} |"
        rows.append(row)
        print(row, flush=True)

    by_name = {sc.name: sc for sc in scenarios()}
    if "place" in what:
        for name in SIZES:
            topo, state, job = by_name[name].build()
            for limit in limits:
                t0 = time.perf_counter()
                place(topo, state, job, SolveOptions(time_limit_s=limit, seed=0, workers=2))
                judge("place", name, job.ranks, limit, time.perf_counter() - t0)
    if "batch" in what:
        for gpus, n_jobs, runs in (
            (1024, 10, ((1.0, False), (2.0, False), (4.0, False), (2.0, True))),
            (2048, 25, ((1.0, False), (3.0, False), (3.0, True))),
        ):
            topo = fat_tree(gpus)
            state = occupy(topo, 0.45, seed=1, mode="mixed-random")
            jobs = queue(n_jobs, 1)
            ranks = sum(bj.job.ranks for bj in jobs)
            for limit, det in runs:
                t0 = time.perf_counter()
                res = place_batch(
                    topo, state, jobs, SolveOptions(time_limit_s=limit, seed=0, workers=2, deterministic=det)
                )
                name = f"{gpus} GPUs 45%, {n_jobs} jobs ({res.stats['time_limit']})"
                judge("place_batch", name, ranks, limit, time.perf_counter() - t0, not det)
    if "repair" in what:
        topo, st, job, cur = running_job(0.3, 64)
        failed = set(random.Random(7).sample(cur, 2))
        state = dataclasses.replace(st, failed=frozenset(st.failed | failed))
        for limit in (0.5, 1.0, 2.0):
            t0 = time.perf_counter()
            res = repair(topo, state, job, cur, options=SolveOptions(time_limit_s=limit, seed=0, workers=2))
            name = f"4096 GPUs 30%, 2 failed ({res.stats['time_limit']})"
            judge("repair", name, job.ranks, limit, time.perf_counter() - t0)
    summary = f"{total - misses} of {total} limits met within +10% + 50 ms."
    print("\n" + summary)
    first = first_answers(by_name) if "first" in what else []
    if args.write:
        args.write.write_text(
            "\n".join(
                [
                    "# Time-limit benchmark",
                    "",
                    f"Command: `python bench/limits.py --write {args.write}`  ",
                    f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
                    f"{time.strftime('%Y-%m-%d')}. Solver: 2 CP-SAT workers, seed 0. Load average at the end: "
                    f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} (a shared machine: other engineers' jobs run "
                    "on the same cores).",
                    "",
                    *rows,
                    "",
                    summary,
                    "",
                    *first,
                ]
            )
        )
    return 0


FIRST_ANSWER = (
    "fat-tree 4096, 60% mixed-random, tp8 pp4 dp32, structured",
    "fat-tree 4096, 30% mixed-random, tp2 pp8 dp64, structured",
)


def first_answers(by_name: dict[str, Any]) -> list[str]:
    """Issue 23: 1,024 ranks on 4,096 GPUs, a first answer no worse than the best scheduler baseline in <= 1 s.
    Each scenario's cluster is built afresh (nothing of it cached), then placed with limits 0.5 and 1 s."""
    out = [
        "## First answer: 1,024 ranks on 4,096 GPUs (issue 23)",
        "",
        "Target: an answer no worse than the best scheduler baseline (by step, then exposed comm) in <= 1 s. The "
        "first row of each scenario is the first call on a freshly built cluster (cold caches).",
        "",
        "| scenario | ranks | limit s | call | wall s | answer (step s, exposed s) | best baseline | met |",
        "|---|---:|---:|---|---:|---|---|---|",
    ]
    print("\n".join(out), flush=True)
    for name in FIRST_ANSWER:
        topo, state, job = by_name[name].build()
        for i, limit in enumerate((0.5, 1.0)):
            t0 = time.perf_counter()
            res = place(topo, state, job, SolveOptions(time_limit_s=limit, seed=0, workers=2))
            wall = time.perf_counter() - t0
            mine = report_key(res.report)[:2]
            keys = [(report_key(r)[:2], n) for n, r in res.baseline_reports.items() if n in BASELINES]
            best = min(keys, default=None)
            ok = wall <= 1.0 and (best is None or mine <= best[0])
            shown = f"{best[1]} ({best[0][0]:.4f}, {best[0][1]:.4f})" if best else "none valid"
            row = (
                f"| {name} | {job.ranks} | {limit:g} | {'first (cold)' if i == 0 else 'second'} | {wall:.2f} | "
                f"({mine[0]:.4f}, {mine[1]:.4f}) | {shown} | {'yes' if ok else '**no**'} |"
            )
            out.append(row)
            print(row, flush=True)
    out.append("")
    return out


if __name__ == "__main__":
    sys.exit(main())
