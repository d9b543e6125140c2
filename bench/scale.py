"""Internet-scale check: 65,536 ranks (tp8 pp8 dp1024) on 131,072 GPUs at 30% partial occupancy, 30 s limit.

Prints the wall time, the peak memory of the process, the answer's exposed communication and surrogate against
every baseline and candidate, and what the search itself improved. Run: `python bench/scale.py [--limit 30]`.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from placement.sim.scenarios import fat_tree, megatron_job, occupy
from placement.solve import SolveOptions, place


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, default=131072)
    ap.add_argument("--limit", type=float, default=30.0)
    ap.add_argument("--occupancy", type=float, default=0.3)
    args = ap.parse_args(argv)
    dp = args.gpus // 2 // 64
    t0 = time.perf_counter()
    topo = fat_tree(args.gpus)
    state = occupy(topo, args.occupancy, seed=1, mode="partial")
    job = megatron_job("scale", tp=8, pp=8, dp=dp)
    print(
        f"{job.ranks} ranks (tp8 pp8 dp{dp}) on {args.gpus} GPUs at {100 * args.occupancy:g}% partial occupancy; "
        f"cluster built in {time.perf_counter() - t0:.1f} s"
    )
    t0 = time.perf_counter()
    res = place(topo, state, job, SolveOptions(time_limit_s=args.limit, seed=0, workers=2))
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert res.report is not None
    print(
        f"wall {wall:.2f} s for a {args.limit:g} s limit (allowed {1.1 * args.limit + 0.05:.2f}); peak RSS {rss:.0f} MiB"
    )
    print(
        f"answer: exposed comm {res.report.comm_seconds:.4f} s, step {res.report.step_seconds:.4f} s, "
        f"surrogate {res.report.surrogate_seconds:.1f}, chosen from {res.stats.get('fallback', 'cpsat')}"
    )
    print("| baseline or candidate | exposed comm s | answer / it |")
    print("|---|---:|---:|")
    for name, v in res.baselines.items():
        ratio = "-" if not v else f"{res.report.comm_seconds / v:.3f}"
        print(f"| {name} | {'no placement' if v is None else f'{v:.4f}'} | {ratio} |")
    print(
        f"search: {res.stats.get('lns_rounds', 0)} neighbourhoods, {res.stats.get('lns_improved', 0)} improved the "
        f"surrogate; best surrogate {float(res.stats.get('surrogate_best', 0.0)):.1f}, bound "
        f"{res.lower_bound if res.lower_bound is None else f'{res.lower_bound:.1f}'} ({res.stats.get('bound_source')})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
