"""Capacity benchmark: the wall time of one `capacity` call (counts only, one shape) on the 4,096-GPU fat tree at
several loads, against the 100 ms target of issue 26; prints a Markdown table. The counts come from the fast path
(free devices per domain), so no `place` call is timed.

Cluster: `placement.sim.scenarios.fat_tree(4096)` (512 nodes of 8 H100, 16 nodes per leaf, 8 leaves per spine),
occupied with `occupy(mode="mixed-random")` at 30%, 60% and 90% (seed 1). Shapes: Megatron jobs with TP required
inside a node, two of them also with each pipeline inside a leaf (units required at two levels), and three with
balanced slices (counted over whole slices per domain). Run: `python bench/capacity.py [--repeat 5]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from placement.decide.capacity import capacity
from placement.model.job import BalanceRule, Constraints
from placement.sim.scenarios import fat_tree, megatron_job, occupy

SHAPES = {  # name -> tp, pp, dp, each pipeline (TP x PP ranks) inside a leaf
    "tp8x4": (8, 1, 4, False),
    "tp8xpp4x16": (8, 4, 16, False),
    "tp4x2": (4, 1, 2, False),
    "tp2x32": (2, 1, 32, False),
    "1x64 (no TP)": (1, 1, 64, False),
    "tp8xpp2x8, pp in a leaf": (8, 2, 8, True),
    "tp4xpp4x8, pp in a leaf": (4, 4, 8, True),
}
BALANCED = {  # name -> tp, dp, the balance rule (level, slice)
    "tp8x16, slices of 16 over leaves": (8, 16, ("leaf", 16)),
    "tp8x64, slices of 64 over spines": (8, 64, ("spine", 64)),
    "1x64 (no TP), slices of 8 over nodes": (1, 64, ("node", 8)),
}
TARGET_MS = 100.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="calls per row; the median is shown")
    args = ap.parse_args()
    topo = fat_tree(4096)
    print(
        f"| load | shape | ranks | copies (greedy) | upper bound | method | median ms | max ms | <= {TARGET_MS:g} ms |"
    )
    print("|---:|---|---:|---:|---:|---|---:|---:|---|")
    for load in (0.3, 0.6, 0.9):
        state = occupy(topo, load, seed=1, mode="mixed-random")
        jobs = []
        for name, (tp, pp, dp, pp_leaf) in SHAPES.items():
            job = megatron_job(name, tp=tp, pp=pp, dp=dp, layers=80)
            require = ({"tp": "node"} if tp > 1 else {}) | ({"pp": "leaf"} if pp_leaf else {})
            jobs.append((name, dataclasses.replace(job, constraints=Constraints(require=require))))
        for name, (tp, dp, (level, size)) in BALANCED.items():
            job = megatron_job(name, tp=tp, pp=1, dp=dp, layers=80)
            cons = Constraints(require={"tp": "node"} if tp > 1 else {}, balance=BalanceRule(level, size))
            jobs.append((name, dataclasses.replace(job, constraints=cons)))
        for name, job in jobs:
            times = []
            res = None
            for _ in range(args.repeat):
                t = time.perf_counter()
                res = capacity(topo, state, [job])
                times.append((time.perf_counter() - t) * 1000)
            assert res is not None
            s = res.shapes[0]
            med = statistics.median(times)
            print(
                f"| {load:.0%} | {name} | {job.ranks} | {s.copies} | {s.upper_bound} | {s.method} | {med:.1f} | "
                f"{max(times):.1f} | {'yes' if med <= TARGET_MS else 'no'} |"
            )


if __name__ == "__main__":
    main()
