"""The slurm-tree baseline: Slurm's topology/tree plugin choosing a top switch, leaf switches and nodes.

Follows SchedMD/slurm 22.05 ``src/plugins/select/cons_tres/job_test.c`` (``_eval_nodes_topo``, with the switch
table of ``src/plugins/topology/tree/topology_tree.c``), the release the golden tests run; later releases moved
it to ``src/plugins/topology/tree/eval_nodes_tree.c`` (differences in `slurm_tree`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.baselines.slurm_select import Allocation, choose_nodes, slurm_start

__all__ = ["slurm_tree"]

_INF = 1 << 40  # Slurm's INFINITE switch distance (switches with no common ancestor)


def slurm_tree(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
    """Slurm topology/tree placement; None when Slurm would keep the job pending on this state.

    The request (`placement.solve.baselines.slurm_select.SlurmRequest`): ``--nodes=N --ntasks=<slices>
    --gpus-per-task=<slice size>``. Slurm allocates exactly N nodes or none. A node is usable when it holds one
    slice; it runs ``floor(free / slice)`` tasks. Switches are the domains above the host (level 1 = leaf
    switches), listed leaves first, then upward, as in topology.conf; nodes are in host order; every node has
    the same ``Weight``. A required level that holds the whole job is ``--switches=1`` at the leaf level: Slurm
    keeps such a job pending rather than spread it, so we return None (a required level above the leaves,
    which ``--switches`` cannot say, is applied the same way).

    Algorithm, after ``_eval_nodes_topo`` (22.05):

    1. node weights: ``can_job_run_on_node`` favours nodes with more free GPUs ("co-located GPUs"): a node's
       scheduling weight is ``(Weight << 8) | (0xff - near)``, near = its free GPUs up to the job's total
       (``--gpus-per-task`` x ``--ntasks`` becomes the job's ``gres_per_job``, which caps ``max_node_gres``),
       so nodes group by free devices, most first, and nodes that hold the whole job weigh the same;
    2. the top switch: in switch order, a switch with at least N usable nodes replaces the one found so far
       when its level is not lower and its lightest node is not heavier (so the last such switch at the
       highest level); only its nodes remain;
    3. "best nodes": weight groups, lightest first, until their tasks and nodes suffice; every node of the
       groups before the last one is required and taken first, in node order (it fails when they alone are
       more than N nodes), and the switches above them are required;
    4. the other nodes of required leaf switches, in node order (22.05 does not stop at N here; the node
       scheduler then refuses the pick, ``_pick_best_nodes``, and the job stays pending);
    5. leaf switches one at a time with ``_topo_choose_best_switch``: a leaf closer in switch hops (summed
       over the required switches and the leaves chosen so far) replaces the best when it is not a worse fit;
       at equal distance ``_topo_compare_switches`` decides by node count: a leaf holding the remaining node
       count beats one that does not, of two that do the smaller wins, of two that do not both climb to their
       parents (a top switch's parent is switch 0 in 22.05) while those differ, and at the end the larger
       wins. Then the chosen leaf's nodes in node order, never more than N in all, and its count drops to 0;
    6. each node gives at most what leaves one task per node still wanted (``_cpus_to_use``), so the tasks
       per node add up to the request; a pass ends when N nodes hold every task, or fails;
    7. on failure ``choose_nodes`` retries on fewer nodes, the fewest free devices dropped first
       (`placement.solve.baselines.slurm_select.choose_nodes`).

    Tasks then go to the chosen nodes, each node's count in node order (``_set_task_dist``: one per node, then
    round robin, which ends at the counts of step 6), whole slices each.

    Later releases (``eval_nodes_tree.c``) differ: the top switch and a fitting leaf also need enough tasks,
    a closer leaf must fit to win, taking a leaf's nodes decrements its ancestors' counts
    (``_decrement_node_cnt``), a top switch has no parent, and ``--switches`` retries with fewer nodes.
    """
    start = slurm_start(topology, state, job, traffic)
    if start.done or start.prep is None or start.request is None:
        return start.answer
    prep, req = start.prep, start.request
    caps = {h: start.tasks_on(h) for h in range(len(topology.host_names))}
    cap = {h: n for h, n in caps.items() if n > 0}
    free = {h: start.free(h) for h in cap}
    if len(cap) < req.nodes:
        return None
    table = _Switches.build(topology)

    def evaluate(hosts: Sequence[int], caps_now: dict[int, int]) -> Allocation:
        return _eval_topo(table, hosts, caps_now, free, req.nodes, req.tasks, req.gpus)

    alloc = choose_nodes(sorted(cap), cap, free, req.nodes, evaluate)
    if alloc is None or len(alloc.taken) > req.nodes:  # node_scheduler.c drops a pick above --nodes
        return None
    if not prep.within_cap(topology, list(alloc.taken)):
        return None
    return prep.fill(sorted(alloc.taken.items()))


@dataclass(frozen=True)
class _Switches:
    """Slurm's switch table for a topology: switches (domains above the host, leaves first), their levels
    (Slurm's: leaves 0), parents, hosts in node order, and each leaf's ancestors for hop distances."""

    level: tuple[int, ...]
    parent: tuple[int, ...]
    hosts: tuple[tuple[int, ...], ...]
    leaves: tuple[int, ...]
    index: dict[tuple[int, int], int]
    up: np.ndarray  # up[u, j]: the domain at level u + 1 above leaf j (u = 0: the leaf itself)
    chain: tuple[tuple[int, ...], ...]  # chain[s]: switch s's domain at its level and every level above

    @staticmethod
    def build(topology: Topology) -> _Switches:
        n_levels = len(topology.levels)
        if n_levels == 1:  # no switch above the hosts: one leaf switch of every host
            all_hosts = tuple(range(len(topology.host_names)))
            return _Switches((0,), (0,), (all_hosts,), (0,), {(1, 0): 0}, np.zeros((1, 1), np.int64), ((0,),))
        index: dict[tuple[int, int], int] = {}
        levels: list[int] = []
        for lv in range(1, n_levels):
            for k in range(len(topology.domain_names[lv])):
                index[(lv, k)] = len(levels)
                levels.append(lv - 1)
        host_lists: list[list[int]] = [[] for _ in levels]
        for h in range(len(topology.host_names)):
            k = h
            for lv in range(1, n_levels):
                k = topology.parent[lv - 1][k]
                host_lists[index[(lv, k)]].append(h)
        parents = [0] * len(levels)  # 22.05 leaves a top switch's parent at 0 (zeroed memory)
        chains: list[tuple[int, ...]] = []
        for (lv, k), s in index.items():
            if lv < n_levels - 1:
                parents[s] = index[(lv + 1, topology.parent[lv][k])]
            chain = [k]
            for up_lv in range(lv, n_levels - 1):
                chain.append(topology.parent[up_lv][chain[-1]])
            chains.append(tuple(chain))
        leaves = tuple(index[(1, k)] for k in range(len(topology.domain_names[1])))
        up = np.array([chains[s] for s in leaves], dtype=np.int64).T
        return _Switches(
            tuple(levels),
            tuple(parents),
            tuple(tuple(v) for v in host_lists),
            leaves,
            index,
            up,
            tuple(chains),
        )

    def dist_to_leaves(self, s: int) -> np.ndarray:
        """Switch hops from switch `s` to every leaf switch (``switches_dist``), `_INF` without a common
        ancestor."""
        ls = self.level[s]
        top = self.up.shape[0]
        out = np.full(len(self.leaves), _INF, dtype=np.int64)
        seen = np.zeros(len(self.leaves), dtype=bool)
        for u in range(ls, top):  # the first level, from s's own up, where a leaf's ancestor is s's
            hit = (self.up[u] == self.chain[s][u - ls]) & ~seen
            out[hit] = (u - 0) + (u - ls)
            seen |= hit
        return out


def _eval_topo(
    sw: _Switches,
    hosts: Sequence[int],
    cap: dict[int, int],
    free: dict[int, int],
    nodes: int,
    tasks: int,
    per_task: int,
) -> Allocation:
    """One pass of 22.05's ``_eval_nodes_topo`` on the usable `hosts` (node order); steps in `slurm_tree`."""
    alloc = Allocation(nodes, tasks, cap)
    usable = set(hosts)
    n_sw = len(sw.level)
    gpus = min(tasks * per_task, 255)  # the job's --gpus (gres_per_job): a node's count is capped there
    weight = {h: -min(free[h], gpus) for h in hosts}  # lower is lighter: more free devices
    under = [[h for h in sw.hosts[s] if h in usable] for s in range(n_sw)]
    top = _top_switch(sw, under, weight, alloc.nodes)
    if top < 0:
        return alloc
    in_top = set(under[top])
    picked = _lightest(hosts, weight, in_top, cap, alloc)
    if picked is None:
        return alloc
    best, req2 = picked
    required = [False] * n_sw
    taken: set[int] = set()
    if req2:
        for h in sorted(req2):
            if alloc.max_nodes <= 0:
                break
            alloc.take(h)
        taken.update(req2)
        marked = set(req2)
        for s in range(n_sw):
            if any(h in marked for h in under[s]):
                required[s] = True
        if alloc.done:
            alloc.ok = True
            return alloc
        if alloc.max_nodes <= 0:
            return alloc
    pool = set(best) | taken
    members = [[h for h in under[s] if h in pool and h in in_top] for s in range(n_sw)]
    count = [len(m) for m in members]
    for s in sw.leaves:  # the rest of required leaf switches (22.05 does not stop at --nodes here)
        if required[s] and _take(alloc, members[s], taken, stop_at_max=False):
            return alloc
    _leaf_rounds(sw, alloc, required, members, count, taken)
    return alloc


def _top_switch(sw: _Switches, under: list[list[int]], weight: dict[int, int], nodes: int) -> int:
    """The top switch: the highest level one with `nodes` usable nodes under it, the lightest among equals
    (-1: none)."""
    top, top_w = -1, 0
    for s in range(len(sw.level)):
        if len(under[s]) < nodes:
            continue
        w = min(weight[h] for h in under[s])
        if top < 0 or (sw.level[s] >= sw.level[top] and w <= top_w):
            top, top_w = s, w
    return top


def _lightest(
    hosts: Sequence[int], weight: dict[int, int], in_top: set[int], cap: dict[int, int], alloc: Allocation
) -> tuple[list[int], list[int]] | None:
    """The nodes under the top switch by weight group, lightest first, until they hold the tasks and nodes; and
    the groups before the last one (required). None: not enough."""
    best: list[int] = []
    req2: list[int] = []
    got = 0
    for w in sorted({weight[h] for h in hosts}):
        if best:
            req2 = list(best)
        for h in hosts:
            if weight[h] == w and h in in_top:
                best.append(h)
                got += cap[h]
        if got >= alloc.tasks and len(best) >= alloc.nodes:
            return best, req2
    return None


def _take(alloc: Allocation, hosts: Sequence[int], taken: set[int], *, stop_at_max: bool) -> bool:
    """Take `hosts` not taken yet (stopping when no node is left to take, with `stop_at_max`); True (and the
    allocation ok) once it is done."""
    for h in hosts:
        if stop_at_max and alloc.max_nodes <= 0:
            break
        if h in taken:
            continue
        alloc.take(h)
        taken.add(h)
        if alloc.done:
            alloc.ok = True
            return True
    return False


def _leaf_rounds(
    sw: _Switches,
    alloc: Allocation,
    required: list[bool],
    members: list[list[int]],
    count: list[int],
    taken: set[int],
) -> None:
    """The leaf switches closest to the required ones (best fit among equals) taken one by one while nodes are
    still added; the allocation is ok when it is satisfied."""
    dist = np.zeros(len(sw.leaves), dtype=np.int64)
    for s in range(len(sw.level)):
        if required[s]:
            dist = _add(dist, sw.dist_to_leaves(s))
    prev = alloc.nodes + 1
    leaf_pos = {s: j for j, s in enumerate(sw.leaves)}
    while prev != alloc.nodes:
        prev = alloc.nodes
        chosen = -1
        d = dist.tolist()
        for s in sw.leaves:
            if required[s]:
                continue
            i = leaf_pos[s]
            if chosen < 0 or d[i] >= _INF or count[s] == 0:
                if count[s] and d[i] < _INF and chosen < 0:
                    chosen = s
                continue
            tcs = _compare(sw, s, chosen, alloc.nodes, count)
            b = leaf_pos[chosen]
            if (d[i] < d[b] and tcs >= 0) or (d[i] == d[b] and tcs > 0):
                chosen = s
        if chosen < 0:
            break
        dist = _add(dist, sw.dist_to_leaves(chosen))
        if _take(alloc, members[chosen], taken, stop_at_max=True):
            return
        count[chosen] = 0
    alloc.ok = alloc.satisfied


def _add(dist: np.ndarray, row: np.ndarray) -> np.ndarray:
    """``_topo_add_dist``: sums that stay `_INF` once either side is."""
    out: np.ndarray = np.where((dist >= _INF) | (row >= _INF), _INF, dist + row)
    return out


def _compare(sw: _Switches, i: int, j: int, rem_nodes: int, count: list[int]) -> int:
    """22.05's ``_topo_compare_switches``: 1 if switch i is the better fit for `rem_nodes` nodes, -1 if j, 0
    if neither."""
    while True:
        i_fit, j_fit = count[i] >= rem_nodes, count[j] >= rem_nodes
        if i_fit and j_fit:
            if count[i] != count[j]:
                return 1 if count[i] < count[j] else -1
            break
        if i_fit or j_fit:
            return 1 if i_fit else -1
        pi, pj = sw.parent[i], sw.parent[j]
        if (pi != i or pj != j) and pi != pj:
            i, j = pi, pj
            continue
        break
    if count[i] != count[j]:
        return 1 if count[i] > count[j] else -1
    if sw.level[i] != sw.level[j]:
        return 1 if sw.level[i] < sw.level[j] else -1
    return 0
