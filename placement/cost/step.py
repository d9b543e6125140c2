"""The step-time model v3: a training step as phases in sequence, concurrent groups inside a phase, and compute.

Owns `model_step`, which `placement.cost.evaluate.evaluate` returns (a `placement.cost.report.CostReport`);
collectives and links: `placement.cost.collectives`; FLOPs, MFU and bubble: `placement.cost.compute`.

**Phases** (Megatron-LM's step: Shoeybi et al. 2019; Narayanan et al. 2021; Korthikanti et al. 2022). The traffic
of `placement.model.traffic` is grouped by label, in the order of a step: ``tp`` (2 all-reduces per layer forward and 2
backward, +2 with full recomputation), ``cp`` (ring exchange of K/V), ``ep`` (token all-to-all), ``pp`` (one send
per micro-batch each way between neighbouring stages), ``dp`` (gradient all-reduce once per step); other labels
(explicit jobs) follow in order of appearance. Phases run one after another.

- Inside a phase the groups (and edges) of the label run at the same time: they share host NICs and uplinks
  max-min fairly (`placement.cost.collectives.max_min_phase_seconds`), and the phase lasts as long as its slowest:
  ``phase = max_g count_g * t_g`` (``t_g`` after contention). Groups that share a rank cannot run together:
  a group meeting a rank already used in its label starts a new round, and rounds add up.
- Exposed seconds: ``max_g count_g * t_g * exposed_g`` (``exposed`` from the job's `exposure`, 1 by default).
- The DP gradient reduce (unless the job sets ``exposure.dp``) is computed, not assumed (`dp_exposed`): PyTorch
  DDP reduces the gradients in buckets of 25 MiB (``bucket_cap_mb``; Li et al. 2020) while the backward of the
  last micro-batch runs; a bucket can start once the backward has produced it. Beside the backward's kernels
  NCCL progresses at `OVERLAP_RATE` of its speed alone, and the backward slows by `COMPUTE_INTERFERENCE` of the
  time they share (SMs and memory bandwidth). With R the reduce alone, B the backward, k buckets:
  ``hidden = min(R, OVERLAP_RATE * B) * (k-1)/k`` (the last bucket is never hidden) and
  ``exposed = R - hidden + COMPUTE_INTERFERENCE * hidden / OVERLAP_RATE``. The optimizer step follows the reduce
  (`placement.cost.compute`). Megatron's distributed optimizer (reduce-scatter in buckets beside the backward,
  all-gather of the parameters after the optimizer) is `dp_exposed(..., distributed=True)`.
- Stragglers: a synchronous step waits for its slowest rank. Each rank's compute varies by `STRAGGLER_CV` of
  its mean; the step pays the expected maximum of n draws (`straggler_seconds`, n the job's ranks).

**Step** (jobs with a model shape on devices of a known kind, `placement.cost.compute`):
``step = compute + bubble + exposed communication + straggler wait`` (`assemble_step`; compute includes the optimizer step), the 1F1B bubble idling ``(p-1)/m`` of the compute and the
exposed per-micro-batch communication (every phase but the DP reduce; Narayanan et al. 2021 sec. 2.2), ``tokens/s = tokens per step / step``,
``MFU = model FLOPs / (step * devices * peak)``. The slowest kind of the mapped devices paces the step (devices of
an unknown kind such as ``gpu``: the job's `device_kind`). Jobs with no model shape (explicit groups and edges), or
with no known kind at all, have no compute: ``step = exposed communication``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import NamedTuple

from placement.cost.collectives import Background, Plan, fabric_for, max_min_phase_seconds
from placement.cost.compute import ComputeModel, device_kind, job_device_kind, step_compute, tokens_per_step
from placement.cost.report import CostReport, PhaseCost
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic

__all__ = [
    "COMPUTE_INTERFERENCE",
    "DDP_BUCKET_BYTES",
    "OVERLAP_RATE",
    "PHASE_ORDER",
    "STRAGGLER_CV",
    "StepTotals",
    "assemble_step",
    "dp_exposed",
    "model_step",
    "phase_exposed",
    "straggler_seconds",
]

PHASE_ORDER: tuple[str, ...] = ("tp", "cp", "ep", "pp", "dp")

DDP_BUCKET_BYTES = 25.0 * 2**20
"""PyTorch DDP's default bucket (``bucket_cap_mb=25``, torch/nn/parallel/distributed.py)."""
MEGATRON_BUCKET_ELEMENTS = 40_000_000
"""Megatron-Core's DDP bucket (``DistributedDataParallelConfig.bucket_size`` default: max(40M, 1M * dp))."""
OVERLAP_RATE = 0.5
"""NCCL's speed beside the backward's kernels, as a share of its speed alone (its kernels wait for SMs and share
memory bandwidth: overlapped collectives run 1.5-2x slower, Rashidi et al. ISCA 2021, Jangda et al. ASPLOS 2022)."""
COMPUTE_INTERFERENCE = 0.3
"""Seconds the backward loses per second NCCL runs beside it (the same papers: 10-30% compute slowdown)."""
STRAGGLER_CV = 0.015
"""Rank-to-rank spread of one step's compute: its standard deviation over its mean (module doc)."""


def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals], by Blom's approximation of normal order statistics
    (Blom 1958: ``Phi^-1((n - 0.375) / (n + 0.25))``; 0.589 for 2 against the exact 0.564, 1.43 for 8 against 1.42)."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def straggler_seconds(compute_seconds: float, ranks: int) -> float:
    """Seconds a synchronous step of `ranks` ranks waits for its slowest one: each rank's compute varies by
    `STRAGGLER_CV` of `compute_seconds`, and every collective waits for the last member (module doc).
    Non-decreasing in both arguments."""
    if ranks <= 1 or compute_seconds <= 0.0:
        return 0.0
    return STRAGGLER_CV * compute_seconds * expected_max_normal(ranks)


def dp_exposed(
    seconds: float, backward_seconds: float, gradient_bytes: float, *, distributed: bool = False, dp: int = 1
) -> float:
    """Exposed seconds of a gradient reduce taking `seconds` alone behind a backward of `backward_seconds`
    producing `gradient_bytes` (module doc). `distributed`: Megatron's distributed optimizer, the reduce-scatter
    half in buckets of `MEGATRON_BUCKET_ELEMENTS` (fp32) beside the backward, the all-gather half exposed.

    Non-decreasing in `seconds` and non-increasing in `backward_seconds`, so a lower bound of the reduce and an
    upper bound of the backward give a lower bound of the exposure (`placement.solve.bound` can rely on it)."""
    if seconds <= 0.0:
        return 0.0
    if distributed:
        bucket = max(MEGATRON_BUCKET_ELEMENTS, 1_000_000 * dp) * 4.0
        return seconds / 2 + dp_exposed(
            seconds / 2, backward_seconds, gradient_bytes * DDP_BUCKET_BYTES / bucket
        )
    k = max(1, math.ceil(gradient_bytes / DDP_BUCKET_BYTES))
    hidden = min(seconds, OVERLAP_RATE * max(0.0, backward_seconds)) * (k - 1) / k
    return seconds - hidden + COMPUTE_INTERFERENCE * hidden / OVERLAP_RATE


def phase_exposed(label: str, seconds: float, exposed: float, comp: ComputeModel | None, job: Job) -> float:
    """Exposed seconds of phase `label` taking `seconds` (`exposed` by the job's exposure): the DP reduce's is
    computed (`dp_exposed`) unless the job states ``exposure.dp``."""
    if label == "dp" and comp is not None and "dp" not in job.exposure:
        distributed = job.model is not None and job.model.distributed_optimizer
        dp = job.parallel.dp if job.parallel is not None else 1
        return dp_exposed(
            seconds, comp.backward_seconds_per_microbatch, comp.gradient_bytes, distributed=distributed, dp=dp
        )
    return exposed


class StepTotals(NamedTuple):
    """A step assembled from its phases: step, exposed communication and bubble seconds."""

    step: float
    comm: float
    bubble: float
    straggler: float = 0.0


def assemble_step(
    labels: Sequence[str], phases: Mapping[str, tuple[float, float]], comp: ComputeModel | None, job: Job
) -> StepTotals:
    """The step from each phase's (seconds, exposed seconds) (module doc); `model_step` and the incremental
    step model (`placement.solve.incremental`) both assemble it here."""
    comm = 0.0
    for lab in labels:
        comm += phases[lab][1]
    if comp is None or job.model is None or job.parallel is None:
        return StepTotals(comm, comm, 0.0)
    # the bubble idles (p-1)/m of everything a micro-batch does on the critical path: its compute and its
    # TP/CP/EP/PP communication (the DP reduce happens once, after the pipeline drains)
    per_mb = comp.compute_seconds + sum(phases[lab][1] for lab in labels if lab != "dp")
    bubble = (job.parallel.pp - 1) / max(1, job.model.micro_batches) * per_mb
    wait = straggler_seconds(comp.compute_seconds, job.parallel.world_size)
    return StepTotals(comp.compute_seconds + bubble + comm + wait, comm, bubble, wait)


class _Op(NamedTuple):
    """One group or edge of a phase: its position in the label, ranks, count per step, exposed fraction, plan."""

    pos: int
    members: tuple[int, ...]
    per_step: float
    exposed: float
    plan: Plan
    edge: bool


def _rounds(ops: Sequence[_Op], edges: Sequence[_Op]) -> list[list[_Op]]:
    """Groups in rounds of rank-disjoint groups (first fit); edges join the first round."""
    rounds: list[list[_Op]] = []
    used: list[set[int]] = []
    for op in ops:
        for i, u in enumerate(used):
            if u.isdisjoint(op.members):
                rounds[i].append(op)
                u.update(op.members)
                break
        else:
            rounds.append([op])
            used.append(set(op.members))
    if edges:
        if rounds:
            rounds[0].extend(edges)
        else:
            rounds.append(list(edges))
    return rounds


def _name(label: str, op: _Op) -> str:
    index, members = op.pos, op.members
    if op.edge:
        return f"{label} edge {index} ranks {members[0]}->{members[1]}"
    if len(members) <= 4:
        ranks = ",".join(str(m) for m in members)
    else:
        ranks = f"{members[0]},{members[1]},...,{members[-1]}"
    return f"{label}[{index}] ranks {ranks} ({len(members)})"


def model_step(
    topology: Topology,
    state: ClusterState,
    job: Job,
    mapping: Sequence[int],
    traffic: Traffic,
    *,
    background: Background | None = None,
) -> CostReport:
    """The modeled step of `job` under `mapping` (see the module docstring); `evaluate` adds the surrogate.
    `background`: other jobs' flows every phase shares its links with (`placement.cost.shared`); None: alone."""
    fabric = fabric_for(topology, state)
    groups: dict[str, list[_Op]] = {}
    edges: dict[str, list[_Op]] = {}
    for g in traffic.groups:
        devs = [mapping[r] for r in g.members]
        plan = fabric.plan_group(g.kind, devs, g.bytes)
        ops = groups.setdefault(g.label, [])
        ops.append(_Op(len(ops), g.members, g.count, g.exposed, plan, False))
    for e in traffic.edges:
        plan = fabric.plan_edge(mapping[e.src], mapping[e.dst], e.bytes)
        eops = edges.setdefault(e.label, [])
        eops.append(_Op(len(eops), (e.src, e.dst), e.count, e.exposed, plan, True))
    seen = list(dict.fromkeys([*groups, *edges]))
    labels = [lab for lab in PHASE_ORDER if lab in seen] + [lab for lab in seen if lab not in PHASE_ORDER]

    comp = None
    if job.model is not None and job.parallel is not None:
        kind = job_device_kind(topology, mapping) or device_kind(job.device_kind, topology)
        if kind is not None:
            comp = step_compute(job.model, job.parallel, kind)

    report = CostReport()
    for label in labels:
        seconds = exposed = 0.0
        crit: _Op | None = None
        crit_time, tier, algo = -1.0, "", ""
        for rnd in _rounds(groups.get(label, []), edges.get(label, [])):
            times = max_min_phase_seconds(fabric, [op.plan for op in rnd], background)
            r_secs = r_exp = 0.0
            for op, (t, tr) in zip(rnd, times, strict=True):
                total = op.per_step * t
                r_exp = max(r_exp, total * op.exposed)
                if total > r_secs:
                    r_secs = total
                if total > crit_time:
                    crit, crit_time, tier, algo = op, total, tr, op.plan.algorithm
            seconds += r_secs
            exposed += r_exp
        exposed = phase_exposed(label, seconds, exposed, comp, job)
        name = _name(label, crit) if crit is not None else ""
        report.phases.append(PhaseCost(label, seconds, exposed, tier or topology.levels[0].name, name, algo))
        report.add(label, tier or topology.levels[0].name, exposed)
        report.comm_seconds_total += seconds
    totals = assemble_step(labels, {p.name: (p.seconds, p.exposed_seconds) for p in report.phases}, comp, job)
    report.step_seconds = totals.step
    if comp is not None and job.model is not None and job.parallel is not None:
        report.compute_seconds = comp.compute_seconds
        report.bubble_seconds = totals.bubble
        report.straggler_seconds = totals.straggler
        if report.step_seconds > 0:
            report.tokens_per_s = tokens_per_step(job.model, job.parallel) / report.step_seconds
            peak = job.parallel.world_size * comp.kind.tflops * 1e12
            report.mfu = comp.model_flops / (report.step_seconds * peak)
    return report
