"""Job -> communication groups and point-to-point edges with bytes and counts per training step.

Structured jobs follow the formulas below; explicit jobs pass their groups and edges through unchanged.

Notation: b micro-batch size, s sequence length, h hidden size, L layers, B bytes per element, m micro-batches
per step, P parameters, tp/cp/ep/dp/pp the parallel sizes. Each stage holds L/pp layers. A buffer of S bytes
over n members moves per member (ring algorithms; Patarasuk & Yuan 2009, NCCL's PERFORMANCE.md "bus
bandwidth"): all-reduce 2(n-1)/n*S in 2(n-1) steps; all-gather, reduce-scatter and all-to-all (n-1)/n*S in
n-1 steps. `placement.cost.evaluate` applies these.

- **TP** (Megatron-LM, Shoeybi et al. 2019, sec. 3): 2 all-reduces per layer forward (attention and MLP
  outputs) and 2 backward, each of the activation S = b*(s/cp)*h*B. With sequence parallelism these become an
  all-gather and a reduce-scatter of the same total volume (Korthikanti et al. 2022), so the cost is equal.
  Count = 4*(L/pp)*m; with full activation recomputation (`ModelShape.recompute`) the forward runs again in the
  backward: 6*(L/pp)*m. Groups: ranks that differ only in the tp coordinate.
- **CP** (ring attention; Liu et al. 2023; Megatron-Core context parallel): each layer passes the K and V
  chunks around the ring: forward once, backward twice (K/V and their gradients), modelled as an all-gather of
  S = cp * 2*b*(s/cp)*(h/tp)*kv_fraction*B. Count = 3*(L/pp)*m (4*(L/pp)*m with recomputation).
- **EP** (GShard, Lepikhin et al. 2020; Megatron-Core MoE): token dispatch and combine all-to-all per MoE
  layer forward, and the same backward: S = b*(s/cp)*top_k*h*B per member. Count = 4*(L/pp)*m (6*(L/pp)*m
  with recomputation).
- **PP** (Narayanan et al. 2021, 1F1B with scatter/gather): per micro-batch a stage sends its activation to
  the next stage forward and receives a gradient of the same size backward: edges between consecutive stages,
  S = b*(s/cp)*h*B/tp per rank, count = 2*m (one transfer each way per micro-batch).
- **DP** (ZeRO-0/DDP gradient all-reduce, once per step): dense gradients P_dense/(tp*pp) * G bytes over the
  ranks that share tp, pp (cp, ep and dp vary: Megatron's data-parallel group with context parallelism); when
  ep > 1, expert gradients P_expert/(tp*pp*ep) * G over the ranks that share tp, ep, pp. G = grad bytes per
  element (default B). Count = 1.

Exposure: every group's time is multiplied by its exposed fraction (1.0 unless the job's `exposure` says
otherwise, e.g. ``dp: 0.3`` when gradient reduction overlaps with backward compute).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from placement.model.job import DIMENSIONS, CollectiveKind, Edge, Group, Job, ParallelSpec

__all__ = ["Traffic", "dimension_groups", "job_traffic", "rank_components"]


@dataclass(frozen=True)
class Traffic:
    """Everything a job sends per step: collective groups and point-to-point edges."""

    groups: tuple[Group, ...]
    edges: tuple[Edge, ...]

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(sorted({g.label for g in self.groups} | {e.label for e in self.edges}))


def dimension_groups(par: ParallelSpec, vary: tuple[str, ...]) -> list[tuple[int, ...]]:
    """Rank sets that vary along `vary` and share every other coordinate, in deterministic order.

    >>> dimension_groups(ParallelSpec(tp=2, dp=2), ("tp",))
    [(0, 1), (2, 3)]
    """
    stride: dict[str, int] = {}
    step = 1
    for d in par.dims:
        stride[d] = step
        step *= par.size(d)

    def offsets(dims: list[str]) -> list[int]:
        out = [0]
        for d in dims:
            out = [o + c * stride[d] for o in out for c in range(par.size(d))]
        return sorted(out)

    var = offsets([d for d in DIMENSIONS if d in vary])
    groups = [tuple(base + o for o in var) for base in offsets([d for d in DIMENSIONS if d not in vary])]
    groups.sort()
    return groups


def job_traffic(job: Job) -> Traffic:
    """The traffic of a job per step (structured: from the formulas in the module docstring)."""
    if job.parallel is None or job.model is None:
        return Traffic(
            tuple(
                Group(g.label, g.kind, g.members, g.bytes, g.count, job.exposure.get(g.label, g.exposed))
                for g in job.groups
            ),
            tuple(
                Edge(e.label, e.src, e.dst, e.bytes, e.count, job.exposure.get(e.label, e.exposed))
                for e in job.edges
            ),
        )
    par, mod = job.parallel, job.model
    ex = job.exposure
    B = mod.bytes_per_element
    G = mod.grad_bytes_per_element or B
    layers_per_stage = mod.layers / par.pp
    tokens = mod.micro_batch * mod.seq_len / par.cp  # tokens a rank holds per micro-batch
    fwd = (
        2 if mod.recompute else 1
    )  # forward passes per micro-batch (recomputation repeats it in the backward)
    groups: list[Group] = []
    edges: list[Edge] = []

    if par.tp > 1:
        s_tp = tokens * mod.hidden * B
        for members in dimension_groups(par, ("tp",)):
            groups.append(
                Group(
                    "tp",
                    CollectiveKind.ALL_REDUCE,
                    members,
                    s_tp,
                    (2 * fwd + 2) * layers_per_stage * mod.micro_batches,
                    ex.get("tp", 1.0),
                )
            )
    if par.cp > 1:
        s_cp = par.cp * 2 * tokens * (mod.hidden / par.tp) * mod.kv_fraction * B
        for members in dimension_groups(par, ("cp",)):
            groups.append(
                Group(
                    "cp",
                    CollectiveKind.ALL_GATHER,
                    members,
                    s_cp,
                    (fwd + 2) * layers_per_stage * mod.micro_batches,
                    ex.get("cp", 1.0),
                )
            )
    if par.ep > 1:
        s_ep = tokens * max(mod.top_k, 1) * mod.hidden * B
        for members in dimension_groups(par, ("ep",)):
            groups.append(
                Group(
                    "ep",
                    CollectiveKind.ALL_TO_ALL,
                    members,
                    s_ep,
                    (2 * fwd + 2) * layers_per_stage * mod.micro_batches,
                    ex.get("ep", 1.0),
                )
            )
    if par.pp > 1:
        s_pp = tokens * mod.hidden * B / par.tp
        for members in dimension_groups(par, ("pp",)):
            for a, b in pairwise(members):
                edges.append(Edge("pp", a, b, s_pp, 2 * mod.micro_batches, ex.get("pp", 1.0)))
    dense = mod.parameters - mod.expert_parameters
    if par.dp * par.cp * par.ep > 1 and dense > 0:
        s_dp = dense / (par.tp * par.pp) * G
        for members in dimension_groups(par, ("cp", "ep", "dp")):
            groups.append(Group("dp", CollectiveKind.ALL_REDUCE, members, s_dp, 1.0, ex.get("dp", 1.0)))
    if par.ep > 1 and mod.expert_parameters > 0 and par.dp * par.cp > 1:
        s_edp = mod.expert_parameters / (par.tp * par.pp * par.ep) * G
        for members in dimension_groups(par, ("cp", "dp")):
            groups.append(Group("dp", CollectiveKind.ALL_REDUCE, members, s_edp, 1.0, ex.get("dp", 1.0)))
    return Traffic(tuple(groups), tuple(edges))


def rank_components(ranks: int, sets: Iterable[Sequence[int]]) -> list[int]:
    """Each rank's component when the ranks of every set (a group's members, an edge's ends) are joined, named by
    its least rank (union-find)."""
    parent = list(range(ranks))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for m in sets:
        a = find(m[0])
        for r in m[1:]:
            b = find(r)
            if a != b:
                parent[max(a, b)] = min(a, b)
                a = min(a, b)
    return [find(r) for r in range(ranks)]
