"""Synthetic multi-node LLM training workloads from published shapes, written as plain replay traces.

Owns `LlmWorkload` (the knobs, each with its source) and `llm_workload`, which draws the jobs: sizes from a
power-of-two distribution with a published mean, Megatron shapes (TP in a node, PP by model size, DP the rest),
log-normal run times and Poisson arrivals at an offered load. `write_trace` writes the CSV `read_trace` reads.

Sources of the defaults:
- sizes: Acme's Kalos cluster (Hu et al., "Characterization of Large Language Model Development in the
  Datacenter", NSDI 2024; its published cluster summary): GPU jobs average 26.77 GPUs, the median is 1, the
  largest 1,024. The draw is half single-GPU jobs and the rest geometric over powers of two, fitted to the mean.
- shapes: Megatron-LM's usual layouts: TP = 8 (one HGX node) once a job fills a node, PP grows with the model
  (Narayanan et al., SC 2021, Table 1: 1 stage up to ~10B parameters, 2-4 up to ~40B, more beyond), DP the rest.
- run times: log-normal with a median and a mean (hours for pre-training runs; Kalos' own GPU jobs are shorter,
  124 s median, because most are debugging and evaluation runs, which `median_hours`/`mean_hours` can reproduce).
- arrivals: Poisson, rate = load x cluster GPUs / mean(GPUs x run time), so `load` = 1 offers exactly the
  cluster's GPU-seconds.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from placement.errors import InputError, Problem

__all__ = ["LlmJob", "LlmWorkload", "llm_workload", "size_weights", "write_trace"]


@dataclass(frozen=True)
class LlmWorkload:
    """The knobs of a multi-node LLM workload (module doc for the sources of the defaults)."""

    jobs: int = 2000
    mean_gpus: float = 26.77
    """Mean GPUs per job (Acme Kalos)."""
    max_gpus: int = 1024
    """The largest job; capped at the cluster's GPUs."""
    single_gpu_share: float = 0.5
    """Share of single-GPU jobs (Kalos' median job has 1 GPU)."""
    median_hours: float = 1.0
    mean_hours: float = 3.0
    load: float = 1.1
    """Offered load: GPU-seconds asked per GPU-second of the cluster."""
    tp: int = 8
    """TP of a job that fills a node (smaller jobs: TP = their GPUs)."""
    seed: int = 0

    def check(self) -> None:
        """Raise `InputError` naming every knob out of range."""
        probs: list[Problem] = []
        if self.jobs < 1:
            probs.append(Problem("jobs", f"must be >= 1, got {self.jobs}"))
        if self.max_gpus < 1 or self.max_gpus & (self.max_gpus - 1):
            probs.append(Problem("max_gpus", f"must be a power of two >= 1, got {self.max_gpus}"))
        if not 1 <= self.mean_gpus <= max(1, self.max_gpus):
            probs.append(
                Problem("mean_gpus", f"must be in [1, max_gpus={self.max_gpus}], got {self.mean_gpus}")
            )
        if not 0 <= self.single_gpu_share < 1:
            probs.append(Problem("single_gpu_share", f"must be in [0, 1), got {self.single_gpu_share}"))
        if not 0 < self.median_hours <= self.mean_hours:
            probs.append(
                Problem(
                    "median_hours",
                    f"must be > 0 and <= mean_hours ({self.mean_hours}), got {self.median_hours}",
                )
            )
        if self.load <= 0:
            probs.append(Problem("load", f"must be > 0, got {self.load}"))
        if self.tp < 1 or self.tp & (self.tp - 1):
            probs.append(Problem("tp", f"must be a power of two >= 1, got {self.tp}"))
        if probs:
            raise InputError("workload", probs)


@dataclass(frozen=True)
class LlmJob:
    """One drawn job: its name, submit time (s), GPUs, run time on an ideal placement (s), shape and model."""

    name: str
    submit: float
    gpus: int
    duration: float
    tp: int
    pp: int
    dp: int
    model: str


MODEL_BY_SIZE: tuple[tuple[int, str, int], ...] = (
    (8, "7b", 1),
    (64, "13b", 1),
    (256, "30b", 2),
    (1 << 30, "70b", 4),
)
"""(largest job, model preset, pipeline stages): bigger jobs train bigger models with more stages."""


def size_weights(sizes: Sequence[int], mean: float, single_share: float) -> list[float]:
    """Weights over `sizes` (powers of two, the first 1) with `single_share` on 1 and the rest geometric in the
    size's exponent, the ratio fitted by bisection so that the mean is `mean` (as near as the sizes allow)."""
    if len(sizes) == 1:
        return [1.0]
    rest = sizes[1:]
    p1 = single_share
    target = (mean - p1) / (1 - p1)

    def mean_of(ratio: float) -> float:
        w = [ratio**k for k in range(1, len(rest) + 1)]
        return sum(wk * s for wk, s in zip(w, rest, strict=True)) / sum(w)

    lo, hi = 1e-3, 4.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_of(mid) < target else (lo, mid)
    ratio = (lo + hi) / 2
    w = [ratio**k for k in range(1, len(rest) + 1)]
    return [p1] + [(1 - p1) * wk / sum(w) for wk in w]


def _shape(gpus: int, tp_max: int) -> tuple[int, int, int, str]:
    tp = min(tp_max, gpus)
    rest = gpus // tp
    for limit, model, pp in MODEL_BY_SIZE:
        if gpus <= limit:
            stages = pp if rest % pp == 0 else 1
            return tp, stages, rest // stages, model
    raise AssertionError("MODEL_BY_SIZE ends with an unbounded class")


def llm_workload(spec: LlmWorkload, cluster_gpus: int) -> list[LlmJob]:
    """Draw `spec.jobs` jobs for a cluster of `cluster_gpus` GPUs (module doc); the same list for the same spec."""
    spec.check()
    if cluster_gpus < 1:
        raise InputError("workload", [Problem("cluster_gpus", f"must be >= 1, got {cluster_gpus}")])
    top = min(spec.max_gpus, 1 << int(math.log2(cluster_gpus)))
    sizes = [1 << k for k in range(int(math.log2(top)) + 1)]
    weights = size_weights(sizes, min(spec.mean_gpus, top), spec.single_gpu_share)
    sigma = math.sqrt(2 * math.log(spec.mean_hours / spec.median_hours))
    rng = random.Random(f"llm-workload:{spec.seed}")
    drawn = [
        (rng.choices(sizes, weights)[0], 3600 * spec.median_hours * math.exp(rng.gauss(0.0, sigma)))
        for _ in range(spec.jobs)
    ]
    work = sum(g * d for g, d in drawn) / len(drawn)
    rate = spec.load * cluster_gpus / work
    out: list[LlmJob] = []
    t = 0.0
    for i, (g, d) in enumerate(drawn):
        tp, pp, dp, model = _shape(g, spec.tp)
        out.append(LlmJob(f"llm-{i:05d}", round(t, 1), g, max(60.0, round(d, 1)), tp, pp, dp, model))
        t += rng.expovariate(rate)
    return out


def write_trace(jobs: Sequence[LlmJob], path: str | Path) -> Path:
    """Write `jobs` as a plain CSV trace (name, submit_time, gpus, duration, tp, pp, dp, model)."""
    p = Path(path)
    with p.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "submit_time", "gpus", "duration", "tp", "pp", "dp", "model"])
        for j in jobs:
            w.writerow([j.name, j.submit, j.gpus, j.duration, j.tp, j.pp, j.dp, j.model])
    return p
