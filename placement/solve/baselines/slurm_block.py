"""The slurm-block baseline: Slurm's topology/block plugin choosing a block, base blocks and nodes.

Reproduces SchedMD/slurm ``src/plugins/topology/block/eval_nodes_block.c`` (``eval_nodes_block``) on the levels
`placement.io.importers.slurm` imports from topology.conf/topology.yaml block entries: ``block`` and ``block_x<k>``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.baselines.slurm_select import Allocation, choose_nodes, slurm_start

__all__ = ["BLOCK_LEVEL", "slurm_block"]

BLOCK_LEVEL = "block"
"""The level of base blocks (``BlockName=`` lines); aggregates are ``block_x2``, ``block_x4``... above it."""


def slurm_block(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
    """Slurm topology/block placement; None on a cluster without a ``block`` level or when Slurm would not start
    the job on this state.

    The request is the one of `placement.solve.baselines.slurm_tree`
    (`placement.solve.baselines.slurm_select.SlurmRequest`): ``--nodes=N --ntasks=<slices>
    --gpus-per-task=<slice size>``; Slurm allocates exactly N nodes or keeps the job pending. Usable nodes hold
    one slice and run whole slices. The base block size is Slurm's ``bblock_node_cnt`` (``block_record.c``): the
    first ``BlockSizes`` entry, else the first block's node count; the topology keeps no ``BlockSizes`` number,
    so we take the first block's node count, which is that entry whenever the first block has the base size
    (the importer refuses blocks smaller than it). The enabled block sizes are the base and each
    ``block_x<k>`` level present (Slurm's ``BlockSizes``). A required level that holds the whole job is honoured
    by refusing an answer that leaves one domain of it (Slurm's ``--segment``-free request cannot say more).

    Algorithm, after ``eval_nodes_block``:

    1. ``_get_block_level``: N nodes need ``ceil(N / base)`` base blocks; the block size is the smallest enabled
       power of two at least that (the whole cluster if none); the "lower-level block" (llblock) size is the
       largest enabled size below it, and at most ``ceil(N / llblock nodes)`` llblocks may be used;
    2. the block: among blocks of consecutive base blocks with enough tasks, and enough nodes in their
       ``max_llblock`` fullest llblocks, the one with the fewest usable nodes (the last one on ties);
    3. base blocks one at a time with ``_choose_best_bblock``: stay inside llblocks already used; else prefer an
       llblock that holds the rest of the request (the smallest such), else the largest; inside, prefer a base
       block that holds the rest (the smallest such, the last on ties), else the largest;
    4. the usable nodes of that base block in node order, never more than N nodes in all, each giving at most
       what leaves one task per node still wanted (``eval_nodes_cpus_to_use``); the pass ends when N nodes
       hold every task, or stalls (pending).

    Deviations: base blocks without a usable node are skipped (Slurm may pick one inside a used llblock and
    then stop as "stalled"); the retries of ``select/cons_tres`` (``choose_nodes``) apply as in `slurm_tree`,
    but not its weight groups of free GPUs (the block plugin came after 22.05, so no Slurm here ran it against
    this baseline).
    """
    try:
        b = topology.level_index(BLOCK_LEVEL)
    except KeyError:
        return None
    start = slurm_start(topology, state, job, traffic)
    if start.done or start.prep is None or start.request is None:
        return start.answer
    prep, rem_nodes, rem_tasks = start.prep, start.request.nodes, start.request.tasks
    levels_on = {0} | {int(math.log2(k)) for k in _aggregate_factors(topology, b)}
    n_hosts = len(topology.host_names)
    col = [_domain_of_host(topology, h, b) for h in range(n_hosts)]
    n_bb = len(topology.domain_names[b])
    hosts_in: list[list[int]] = [[] for _ in range(n_bb)]
    for h in range(n_hosts):
        hosts_in[col[h]].append(h)
    base = len(hosts_in[0])  # bblock_node_cnt: the first BlockSizes entry, else the first block's node count
    caps = {h: start.tasks_on(h) for h in range(n_hosts)}
    cap = {h: n for h, n in caps.items() if n > 0}
    free = {h: start.free(h) for h in cap}
    layout = _Blocks(hosts_in, base, levels_on)

    def evaluate(hosts: Sequence[int], caps_now: dict[int, int]) -> Allocation:
        return _eval_block(layout, hosts, caps_now, rem_nodes, rem_tasks)

    alloc = choose_nodes(sorted(cap), cap, free, rem_nodes, evaluate)
    if alloc is None or not prep.within_cap(topology, list(alloc.taken)):
        return None
    return prep.fill(sorted(alloc.taken.items()))


@dataclass(frozen=True)
class _Blocks:
    """Base blocks (hosts in node order), the base block size, and the enabled block levels (log2 sizes)."""

    hosts_in: list[list[int]]
    base: int
    levels_on: set[int]


def _eval_block(
    layout: _Blocks, hosts: Sequence[int], cap_of: dict[int, int], rem_nodes: int, rem_tasks: int
) -> Allocation:
    """One pass of ``eval_nodes_block`` on the usable `hosts`; steps in `slurm_block`."""
    usable = set(hosts)
    hosts_in, base, levels_on = layout.hosts_in, layout.base, layout.levels_on
    n_bb = len(hosts_in)
    cap = {h: (cap_of.get(h, 0) if h in usable else 0) for hs in hosts_in for h in hs}
    alloc = Allocation(rem_nodes, rem_tasks, cap)
    nodes_bb = [sum(1 for h in hs if cap[h] > 0) for hs in hosts_in]
    tasks_bb = [sum(cap[h] for h in hs) for hs in hosts_in]
    want = math.ceil(rem_nodes / base)
    lvl = math.ceil(math.log2(want)) if want > 1 else 0
    ll_level = max((x for x in levels_on if x <= lvl - 1), default=0) if lvl > 0 else 0
    block_level = min((x for x in levels_on if x >= lvl), default=-1)
    bb_per_block = n_bb if block_level < 0 else 1 << block_level
    n_blocks = 1 if block_level < 0 else math.ceil(n_bb / bb_per_block)
    bb_per_ll = 1 << ll_level
    max_ll = math.ceil(rem_nodes / (bb_per_ll * base))
    track_ll = bb_per_block != bb_per_ll * max_ll
    n_ll = math.ceil(n_bb / bb_per_ll)

    chosen: int | None = None
    chosen_nodes = 0
    for blk in range(n_blocks):
        members = range(blk * bb_per_block, min(n_bb, (blk + 1) * bb_per_block))
        bnc = sum(nodes_bb[i] for i in members)
        if track_ll:
            ll_counts = [0] * n_ll
            for i in members:
                ll_counts[i // bb_per_ll] += nodes_bb[i]
            per_block = bb_per_block // bb_per_ll
            offset = blk * per_block
            mine = sorted(ll_counts[offset : offset + min(per_block, n_ll - offset)], reverse=True)
            avail = sum(mine[:max_ll])
        else:
            avail = bnc
        if avail < rem_nodes or sum(tasks_bb[i] for i in members) < rem_tasks:
            continue
        if chosen is None or bnc <= chosen_nodes:
            chosen, chosen_nodes = blk, bnc
    if chosen is None:
        return alloc
    members = range(chosen * bb_per_block, min(n_bb, (chosen + 1) * bb_per_block))
    nodes_ll: list[int] | None = None
    if track_ll:
        nodes_ll = [0] * n_ll
        for i in members:
            nodes_ll[i // bb_per_ll] += nodes_bb[i]
    required: set[int] = set()
    prev = alloc.nodes + 1
    while prev != alloc.nodes and not alloc.done:
        prev = alloc.nodes
        pick = _Pick()
        for i in members:
            if i not in required and nodes_bb[i] > 0:
                pick.consider(i, alloc.nodes, nodes_bb, nodes_ll, ll_level, required, n_bb)
        if pick.best < 0 or (max_ll <= 0 and not pick.same_block):
            break
        required.add(pick.best)
        for h in hosts_in[pick.best]:  # node order, never more than --nodes
            if alloc.max_nodes <= 0 or alloc.done:
                break
            if cap[h] > 0:
                alloc.take(h)
        if not pick.same_block:
            max_ll -= 1
    alloc.ok = alloc.satisfied
    return alloc


class _Pick:
    """``_choose_best_bblock``'s running choice: best base block, whether it fits, whether its llblock is used."""

    def __init__(self) -> None:
        self.best = -1
        self.fit = False
        self.same_block = True

    def _set(self, i: int, fit: bool, same: bool | None = None) -> None:
        self.best, self.fit = i, fit
        if same is not None:
            self.same_block = same

    def consider(
        self,
        i: int,
        rem_nodes: int,
        nodes_bb: list[int],
        nodes_ll: list[int] | None,
        ll: int,
        required: set[int],
        n_bb: int,
    ) -> None:
        fit = nodes_bb[i] >= rem_nodes
        if nodes_ll is not None and (self.best >> ll) != (i >> ll):
            lo, hi = (i >> ll) << ll, min(n_bb, ((i >> ll) + 1) << ll)
            same = any(j in required for j in range(lo, hi))
            if self.best < 0 or (same and not self.same_block):
                self._set(i, fit, same)
                return
            if not same and self.same_block:
                return
            best_cnt, cnt = nodes_ll[self.best >> ll], nodes_ll[i >> ll]
            ll_fit, best_ll_fit = cnt >= rem_nodes, best_cnt >= rem_nodes
            if ll_fit != best_ll_fit:
                if ll_fit:
                    self._set(i, fit, same)
                return
            if cnt != best_cnt:  # both fit: fewer nodes; neither: more nodes
                if (cnt < best_cnt) == ll_fit:
                    self._set(i, fit, same)
                return
        best_nodes = nodes_bb[self.best] if self.best >= 0 else 0
        if (
            self.best < 0
            or (fit and not self.fit)
            or (not fit and not self.fit and nodes_bb[i] >= best_nodes)
            or (fit and nodes_bb[i] <= best_nodes)
        ):
            self._set(i, fit)


def _aggregate_factors(topology: Topology, b: int) -> list[int]:
    """The k of each ``block_x<k>`` level above the block level (powers of two, as Slurm requires)."""
    out = []
    for lv in topology.levels[b + 1 :]:
        if lv.name.startswith(f"{BLOCK_LEVEL}_x") and lv.name[len(BLOCK_LEVEL) + 2 :].isdigit():
            k = int(lv.name[len(BLOCK_LEVEL) + 2 :])
            if k > 1 and k & (k - 1) == 0:
                out.append(k)
    return out


def _domain_of_host(topology: Topology, h: int, level: int) -> int:
    k = h
    for lv in range(level):
        k = topology.parent[lv][k]
    return k
