"""Writes examples/trace-small.csv: a small synthetic GPU-cluster trace for `placement replay` (60 jobs on the
256 GPUs of examples/h100-256.yaml), from a fixed seed, so that anyone can regenerate it byte for byte.

    python scripts/make_sample_trace.py [OUT]

The columns are the plain CSV form `placement replay` reads (docs/replay.md): name, submit_time and duration in
seconds, gpus. Sizes follow the mix of production traces (many 1-8 GPU jobs, a few multi-node ones); arrivals are
Poisson, about one every 2 minutes; durations are log-uniform between 5 minutes and 3 hours.
"""

from __future__ import annotations

import csv
import math
import random
import sys
from pathlib import Path

JOBS = 60
SEED = 2026
SIZES = (1, 2, 4, 8, 8, 16, 16, 32, 32, 64, 128)
MEAN_GAP_S = 120.0
DURATION_S = (300.0, 3 * 3600.0)


def rows(n: int = JOBS, seed: int = SEED) -> list[dict[str, object]]:
    """`n` jobs: name, submit time (s from the first), GPUs and duration (s), in submit order."""
    rng = random.Random(seed)
    t = 0.0
    out = []
    lo, hi = (math.log(x) for x in DURATION_S)
    for i in range(n):
        out.append(
            {
                "name": f"job-{i:02d}",
                "submit_time": round(t),
                "gpus": rng.choice(SIZES),
                "duration": round(math.exp(rng.uniform(lo, hi))),
            }
        )
        t += rng.expovariate(1.0 / MEAN_GAP_S)
    return out


def main(argv: list[str]) -> int:
    out = (
        Path(argv[1])
        if len(argv) > 1
        else Path(__file__).resolve().parents[1] / "examples" / "trace-small.csv"
    )
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["name", "submit_time", "gpus", "duration"], lineterminator="\n")
        w.writeheader()
        w.writerows(rows())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
