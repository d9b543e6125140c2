"""Time-limit benchmark: is every limit >= 0.2 s met within +10% plus 50 ms, at every size of the solver benchmark?

For one scenario of each size in `bench/solver.py` (the largest job on each cluster, structured) it runs `place`
with limits 0.2, 0.5, 1 and 2 s and prints wall time against the allowance. Run: `python bench/limits.py
[--limits 0.2,0.5,1,2] [--write bench/LIMITS.md]`. Wall time is the whole `place` call, as a caller sees it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from solver_scenarios import scenarios

from placement.solve import SolveOptions, place

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
    ap.add_argument("--write", type=Path)
    args = ap.parse_args(argv)
    limits = [float(x) for x in args.limits.split(",")]
    by_name = {sc.name: sc for sc in scenarios()}
    header = "| scenario | ranks | limit s | wall s | allowed s | met |"
    rows = [header, "|---|---:|---:|---:|---:|---|"]
    print("\n".join(rows), flush=True)
    misses = total = 0
    for name in SIZES:
        topo, state, job = by_name[name].build()
        for limit in limits:
            t0 = time.perf_counter()
            place(topo, state, job, SolveOptions(time_limit_s=limit, seed=0, workers=2))
            wall = time.perf_counter() - t0
            allowed = 1.1 * limit + 0.05
            ok = wall <= allowed
            misses += not ok
            total += 1
            row = f"| {name} | {job.ranks} | {limit:g} | {wall:.2f} | {allowed:.2f} | {'yes' if ok else '**no**'} |"
            rows.append(row)
            print(row, flush=True)
    summary = f"{total - misses} of {total} limits met within +10% + 50 ms."
    print("\n" + summary)
    if args.write:
        args.write.write_text(
            "\n".join(
                [
                    "# Time-limit benchmark",
                    "",
                    f"Command: `python bench/limits.py --write {args.write}`  ",
                    f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
                    f"{time.strftime('%Y-%m-%d')}. Solver: 2 CP-SAT workers, seed 0.",
                    "",
                    *rows,
                    "",
                    summary,
                    "",
                ]
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
