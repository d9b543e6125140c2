"""The step-time model v2: a training step as phases in sequence, concurrent groups inside a phase, and compute.

Owns `model_step`, which `placement.cost.evaluate.evaluate` returns (a `placement.cost.report.CostReport`);
collectives and links: `placement.cost.collectives`; FLOPs, MFU and bubble: `placement.cost.compute`.

**Phases** (Megatron-LM's step: Shoeybi et al. 2019; Narayanan et al. 2021; Korthikanti et al. 2022). The traffic
of `placement.model.traffic` is grouped by label, in the order of a step: ``tp`` (2 all-reduces per layer forward and 2
backward, +2 with full recomputation), ``cp`` (ring exchange of K/V), ``ep`` (token all-to-all), ``pp`` (one send
per micro-batch each way between neighbouring stages), ``dp`` (gradient all-reduce once per step); other labels
(explicit jobs) follow in order of appearance. Phases run one after another.

- Inside a phase the groups (and edges) of the label run at the same time: they share host NICs and uplinks
  (`placement.cost.collectives.phase_seconds`), and the phase lasts as long as its slowest one:
  ``phase = max_g count_g * t_g`` (``t_g`` after contention). Groups that share a rank cannot run together:
  a group meeting a rank already used in its label starts a new round, and rounds add up.
- Exposed seconds: ``max_g count_g * t_g * exposed_g`` (``exposed`` from the job's `exposure`, 1 by default).
  The DP gradient reduce overlaps the backward of the last micro-batch (Megatron's ``overlap_grad_reduce``,
  PyTorch DDP bucketing: Li et al. 2020): unless the job sets ``exposure.dp``, its exposed part is
  ``max(0, dp - backward of one micro-batch)``.

**Step** (jobs with a model shape on devices of a known kind, `placement.cost.compute`):
``step = compute + bubble + exposed communication``, the 1F1B bubble idling ``(p-1)/m`` of the compute and the
exposed per-micro-batch communication (every phase but the DP reduce; Narayanan et al. 2021 sec. 2.2), ``tokens/s = tokens per step / step``,
``MFU = model FLOPs / (step * devices * peak)``. The slowest kind of the mapped devices paces the step (devices of
an unknown kind such as ``gpu``: the job's `device_kind`). Jobs with no model shape (explicit groups and edges), or
with no known kind at all, have no compute: ``step = exposed communication``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from placement.cost.collectives import Plan, fabric_for, phase_seconds
from placement.cost.compute import device_kind, job_device_kind, step_compute, tokens_per_step
from placement.cost.report import CostReport, PhaseCost
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic

__all__ = ["PHASE_ORDER", "model_step"]

PHASE_ORDER: tuple[str, ...] = ("tp", "cp", "ep", "pp", "dp")


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
    topology: Topology, state: ClusterState, job: Job, mapping: Sequence[int], traffic: Traffic
) -> CostReport:
    """The modeled step of `job` under `mapping` (see the module docstring); `evaluate` adds the surrogate."""
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
            times = phase_seconds(fabric, [op.plan for op in rnd])
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
        if label == "dp" and comp is not None and "dp" not in job.exposure:
            exposed = max(0.0, seconds - comp.backward_seconds_per_microbatch)
        name = _name(label, crit) if crit is not None else ""
        report.phases.append(PhaseCost(label, seconds, exposed, tier or topology.levels[0].name, name, algo))
        report.add(label, tier or topology.levels[0].name, exposed)
        report.comm_seconds_total += seconds
    report.step_seconds = report.comm_seconds
    if comp is not None and job.model is not None and job.parallel is not None:
        # the bubble idles (p-1)/m of everything a micro-batch does on the critical path: its compute and its
        # TP/CP/EP/PP communication (the DP reduce happens once, after the pipeline drains)
        per_mb = comp.compute_seconds + sum(report.by_label.get(lab, 0.0) for lab in labels if lab != "dp")
        report.compute_seconds = comp.compute_seconds
        report.bubble_seconds = (job.parallel.pp - 1) / max(1, job.model.micro_batches) * per_mb
        report.step_seconds = comp.compute_seconds + report.bubble_seconds + report.comm_seconds
        if report.step_seconds > 0:
            report.tokens_per_s = tokens_per_step(job.model, job.parallel) / report.step_seconds
            peak = job.parallel.world_size * comp.kind.tflops * 1e12
            report.mfu = comp.model_flops / (report.step_seconds * peak)
    return report
