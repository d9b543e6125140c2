"""Batch benchmark: queues of 10 to 50 jobs (8 to 512 ranks) on 1,024-4,096-GPU fat trees at 30-60% occupancy,
placed jointly (`placement.decide.batch.joint.place_batch`) next to its two baselines; prints a Markdown table.

Run: `python bench/batch.py [--quick] [--only TEXT] [--write bench/BATCH_RESULTS.md]`. Every scenario comes from
`placement.sim.scenarios` and a fixed seed. Weighted seconds are compared on the jobs both answers admit (a job
admitted by one answer only has no counterpart), as the geometric mean over scenarios of batch / baseline.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from placement.decide.batch.explain import validate_batch
from placement.decide.batch.joint import FIFO, PRIORITY, place_batch
from placement.decide.batch.types import BatchJob, BatchPlan
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.sim.scenarios import fat_tree, megatron_job, occupy
from placement.solve import SolveOptions, place

SHAPES = (
    (8, 1, 1),
    (4, 1, 2),
    (2, 2, 2),
    (2, 2, 4),
    (8, 2, 2),
    (4, 2, 4),
    (8, 4, 2),
    (2, 4, 8),
    (8, 2, 8),
    (4, 4, 8),
    (2, 8, 8),
    (8, 4, 8),
    (4, 8, 8),
    (8, 8, 8),
    (4, 8, 16),
)
"""(tp, pp, dp): 8 to 512 ranks."""


@dataclass
class Scenario:
    gpus: int
    occupancy: float
    jobs: int
    seed: int
    time_limit: float

    @property
    def name(self) -> str:
        return f"fat-tree {self.gpus}, {round(100 * self.occupancy)}% mixed-random, {self.jobs} jobs"


def queue(n: int, seed: int) -> list[BatchJob]:
    """`n` Megatron jobs of random shapes (TP required within a node), weights 1-4, priorities 0-3. Jobs up to
    64 ranks have a 13B shape (h 5120, 40 layers), larger ones a 70B shape (h 8192, 80 layers)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tp, pp, dp = rng.choice(SHAPES)
        ranks = tp * pp * dp
        hidden, layers = (5120, 40) if ranks <= 64 else (8192, 80)
        job = megatron_job(
            f"q{i:02d}-tp{tp}pp{pp}dp{dp}",
            tp=tp,
            pp=pp,
            dp=dp,
            hidden=hidden,
            layers=layers,
            micro_batches=8,
            require_tp_node=True,
        )
        out.append(BatchJob(job, float(rng.randint(1, 4)), float(rng.randint(0, 3))))
    return out


def scenarios(quick: bool) -> list[Scenario]:
    out = []
    for gpus, occ, jobs in (
        (1024, 0.3, 10),
        (1024, 0.6, 10),
        (1024, 0.45, 25),
        (2048, 0.3, 25),
        (2048, 0.6, 25),
        (2048, 0.45, 50),
        (4096, 0.3, 50),
        (4096, 0.45, 50),
        (4096, 0.6, 50),
    ):
        limit = {10: 8.0, 25: 14.0, 50: 20.0}[jobs]
        out.append(Scenario(gpus, occ, jobs, 1, limit))
    return out[:3] if quick else out


def common(a: BatchPlan, b: BatchPlan, what: str = "step_seconds") -> tuple[float, float, int]:
    """Weighted step (or comm) seconds of `a` and `b` over the jobs both admit, and how many those are."""
    both = {o.index for o in a.admitted} & {o.index for o in b.admitted}
    wa = sum(a.weights[o.index] * getattr(o.report, what) for o in a.admitted if o.index in both and o.report)
    wb = sum(b.weights[o.index] * getattr(o.report, what) for o in b.admitted if o.index in both and o.report)
    return wa, wb, len(both)


def alone(topo: Topology, state: ClusterState, jobs: list[BatchJob], a: BatchPlan, b: BatchPlan) -> float:
    """Weighted step seconds of the jobs `a` and `b` both admit, each placed alone on `state` by cpsat (1 s), over
    `b`'s: what the jobs would cost with the cluster to themselves."""
    both = {o.index for o in a.admitted} & {o.index for o in b.admitted}
    solo = sum(
        jobs[i].weight * place(topo, state, jobs[i].job, SolveOptions(time_limit_s=1.0)).report.step_seconds  # type: ignore[union-attr]
        for i in both
    )
    base = sum(b.weights[o.index] * o.report.step_seconds for o in b.admitted if o.index in both and o.report)
    return solo / base if base > 0 else math.nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="the first three scenarios only")
    ap.add_argument("--only", help="scenarios whose name contains this text")
    ap.add_argument("--write", type=Path, help="also write the results file here")
    args = ap.parse_args(argv)
    load_start = os.getloadavg()[0]
    rows: list[str] = []
    ratios: dict[str, list[float]] = {
        FIFO: [],
        PRIORITY: [],
        "comm " + FIFO: [],
        "comm " + PRIORITY: [],
        "alone": [],
    }
    never_fewer = True
    worst_wall = 0.0
    head = (
        "| scenario | free GPUs | queued ranks | admitted batch / fifo / prio | weight batch / fifo / prio "
        "| bound | chosen | w. step s batch | w. step s fifo | w. step s prio | common jobs vs fifo | batch / fifo "
        "| comm batch / fifo | alone / fifo | common jobs vs prio | batch / prio | comm batch / prio | wall s | limit s |"
    )
    sep = "|---|---:|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    print(head)
    print(sep)
    for sc in scenarios(args.quick):
        if args.only and args.only not in sc.name:
            continue
        topo = fat_tree(sc.gpus)
        state = occupy(topo, sc.occupancy, seed=sc.seed, mode="mixed-random")
        jobs = queue(sc.jobs, sc.seed)
        t0 = time.perf_counter()
        res = place_batch(topo, state, jobs, SolveOptions(time_limit_s=sc.time_limit, workers=2, seed=0))
        wall = time.perf_counter() - t0
        worst_wall = max(worst_wall, wall) if sc.jobs == 50 else worst_wall
        plan, fifo, prio = res.plan, res.baselines[FIFO], res.baselines[PRIORITY]
        assert not validate_batch(
            topo, state, [bj.job for bj in jobs], {o.index: o.mapping for o in plan.admitted}
        )
        never_fewer &= len(plan.admitted) >= len(fifo.admitted)
        cells = []
        for name, base in ((FIFO, fifo), (PRIORITY, prio)):
            wa, wb, n = common(plan, base)
            r = wa / wb if wb > 0 else math.nan
            if n and math.isfinite(r):
                ratios[name].append(r)
            ca, cb, _ = common(plan, base, "comm_seconds")
            rc = ca / cb if cb > 0 else math.nan
            if n and math.isfinite(rc) and rc > 0:
                ratios["comm " + name].append(rc)
            cells += [str(n), f"{r:.3f}" if n else "-", f"{rc:.3f}" if n and math.isfinite(rc) else "-"]
            if name == FIFO:
                ra = alone(topo, state, jobs, plan, fifo)
                cells.append(f"{ra:.3f}" if math.isfinite(ra) else "-")
                if math.isfinite(ra):
                    ratios["alone"].append(ra)
        free = sum(1 for d in range(topo.num_devices) if d not in state.occupied)
        bound = "-" if res.weight_bound is None else f"{res.weight_bound:g}"
        row = (
            f"| {sc.name} | {free} | {sum(bj.job.ranks for bj in jobs)} | {len(plan.admitted)} / {len(fifo.admitted)} / "
            f"{len(prio.admitted)} | {plan.admitted_weight:g} / {fifo.admitted_weight:g} / {prio.admitted_weight:g} | "
            f"{bound} | {plan.strategy} | {plan.weighted_step_seconds:.2f} | {fifo.weighted_step_seconds:.2f} | "
            f"{prio.weighted_step_seconds:.2f} | {' | '.join(cells)} | {wall:.1f} | {sc.time_limit:g} |"
        )
        rows.append(row)
        print(row, flush=True)

    def gm(xs: list[float]) -> str:
        return f"{math.exp(sum(math.log(x) for x in xs) / len(xs)):.3f}" if xs else "-"

    summary = [
        f"- geometric mean of batch / fifo-kueue-tas weighted step seconds (common jobs): {gm(ratios[FIFO])}",
        f"- geometric mean of batch / priority-cpsat weighted step seconds (common jobs): {gm(ratios[PRIORITY])}",
        f"- geometric mean of batch / fifo-kueue-tas weighted exposed communication seconds (common jobs): "
        f"{gm(ratios['comm ' + FIFO])}",
        f"- geometric mean of batch / priority-cpsat weighted exposed communication seconds (common jobs): "
        f"{gm(ratios['comm ' + PRIORITY])}",
        f"- geometric mean of alone / fifo-kueue-tas (each common job placed alone on the state by cpsat, 1 s: "
        f"about the most any joint answer can gain on them): {gm(ratios['alone'])}",
        f"- never fewer jobs admitted than FIFO: {'yes' if never_fewer else 'NO'}",
        f"- slowest 50-job batch: {worst_wall:.1f} s",
    ]
    print("\n".join(summary))
    if args.write:
        cmd = (
            "python bench/batch.py"
            + (" --quick" if args.quick else "")
            + (f" --only '{args.only}'" if args.only else "")
        )
        text = "\n".join(
            [
                "# Batch benchmark (PlaceBatch)",
                "",
                f"Command: `nice -n 10 {cmd} --write {args.write}`  ",
                f"Machine: {os.cpu_count()} cores (shared with other jobs: wall times are noisy), {platform.machine()}, "
                f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}. 2 CP-SAT workers, seed 0, wall-clock limits. "
                f"Load average (1 min) {load_start:.1f} at the start and {os.getloadavg()[0]:.1f} at the end: other work "
                "shared the cores, and a loaded machine shows in `wall s` (the limit is checked on the wall clock; a single "
                "placement's floor is not).",
                "",
                "Each queue: Megatron jobs of random shapes from 8 to 512 ranks (TP required within a node; 13B shape up to "
                "64 ranks, 70B above), weights 1-4, priorities 0-3 (`bench/batch.py queue`, seed 1), on `fat_tree(gpus)` "
                "with `occupy(..., mode='mixed-random', seed=1)`. The queues ask for more GPUs than are free, so admission "
                "matters. `batch` is `place_batch`'s joint answer; `fifo` is the queue in arrival order placed by kueue-tas "
                "(a job that does not fit is skipped); `prio` is the queue by priority placed by cpsat. `chosen` is the answer "
                "returned (never worse than a baseline: more admitted weight, then fewer weighted step seconds). `bound` is "
                "the admission knapsack's proven bound on the admitted weight. Weighted step seconds (sum of weight x "
                "modeled step seconds) are compared on the jobs both answers admit; `batch / fifo` is their ratio, `comm batch / "
                "fifo` the same for exposed communication seconds (the part of a step a placement changes), and `alone / fifo` "
                "the ratio had each of those jobs the state to itself (each placed alone by cpsat, 1 s): the most a joint "
                "answer could gain on them. Modeled steps are mostly compute and pipeline bubble, which no placement changes.",
                "",
                head,
                sep,
                *rows,
                "",
                *summary,
                "",
            ]
        )
        args.write.write_text(text)
        print(f"wrote {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
