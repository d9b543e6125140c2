"""The slurm-tree baseline: Slurm's topology/tree plugin choosing switches, leaf switches and nodes.

Reproduces SchedMD/slurm ``src/plugins/topology/tree/eval_nodes_tree.c`` (``_eval_nodes_topo``) with the levels
above the host as switches (level 1 = leaf switches) and equal node weights.
"""

from __future__ import annotations

import numpy as np

from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.baselines.common import slurm_start, take_nodes

__all__ = ["slurm_tree"]


def slurm_tree(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
    """Slurm topology/tree placement; None when Slurm would not start the job on this state.

    The request modelled (`placement.solve.baselines.common.slurm_request`): ``--nodes=N --ntasks=<ranks>
    --gpus-per-task=1 --distribution=plane=<slice>``, N the fewest whole hosts that hold the job. A node is
    usable when it holds one slice and offers ``floor(free / slice) * slice`` tasks; slices never split. A
    required level that holds the whole job is ``--switches=1`` at the leaf level: Slurm keeps such a job
    pending rather than spread it, so we return None (a required level above the leaves, which ``--switches``
    cannot say, is applied the same way).

    Algorithm, after ``_eval_nodes_topo``:

    1. the top switch: the highest-level switch with enough usable nodes and tasks (the last one found on
       ties); nodes outside it are dropped;
    2. leaf switches one at a time with ``_topo_choose_best_switch``: a leaf closer (in switch hops, summed over
       the leaves already chosen) replaces the best only when it fits the rest of the request; at equal
       distance ``_topo_compare_switches`` decides: a leaf that fits beats one that does not, between two that
       fit the one with fewer nodes (best fit), and when neither fits both climb to their parents and compare
       there; at the end the one with more nodes wins. The net effect: the first leaf lies under the lowest,
       tightest switch that satisfies the request (the largest leaf there unless one leaf fits), and later
       leaves stay close to it, best fit first;
    3. all usable nodes of the chosen leaf in node order (Slurm's bitmap order, not by free capacity), then
       ``_decrement_node_cnt`` on the leaf and its ancestors; the task counts of switches stay as they were at
       the start, as in Slurm.

    Tasks then go to the chosen nodes in node order (``--distribution=block``/``plane``), whole slices each.
    """
    start = slurm_start(topology, state, job, traffic)
    if start.done or start.prep is None:
        return start.answer
    prep, rem_nodes, rem_tasks = start.prep, start.nodes, start.tasks
    n_hosts = len(topology.host_names)
    cap = [prep.capacity(h) for h in range(n_hosts)]
    n_levels = len(topology.levels)
    if n_levels == 1:  # one host, no switch
        return prep.fill([(0, rem_tasks)]) if cap[0] >= rem_tasks else None
    anc = _ancestors(topology)  # anc[h][lv]: the host's domain at level lv
    tasks = [[0] * len(topology.domain_names[lv]) for lv in range(n_levels)]
    nodes = [[0] * len(topology.domain_names[lv]) for lv in range(n_levels)]
    for h in range(n_hosts):
        if cap[h] > 0:
            for lv in range(1, n_levels):
                tasks[lv][anc[h][lv]] += cap[h]
                nodes[lv][anc[h][lv]] += 1
    top: tuple[int, int] | None = None  # (level, switch)
    for lv in range(1, n_levels):
        for k in range(len(topology.domain_names[lv])):
            if nodes[lv][k] >= rem_nodes and tasks[lv][k] >= rem_tasks and (top is None or lv >= top[0]):
                top = (lv, k)
    if top is None:
        return None
    # node counts of every switch, restricted to the nodes under the top switch
    node_cnt = [[0] * len(topology.domain_names[lv]) for lv in range(n_levels)]
    for h in range(n_hosts):
        if cap[h] > 0 and anc[h][top[0]] == top[1]:
            for lv in range(1, n_levels):
                node_cnt[lv][anc[h][lv]] += 1
    # leaf switches by index; chain[leaf][u] = its switch at level u + 1 (u = 0: the leaf itself)
    chain = _leaf_ancestors(topology)
    depth = n_levels - 1
    up = np.array(chain, dtype=np.int64).reshape(len(chain), depth).T
    dist = np.zeros(len(chain), dtype=np.int64)  # switch hops to the leaves chosen so far, summed
    live = [leaf for leaf in range(len(chain)) if node_cnt[1][leaf] > 0]
    plan: list[tuple[int, int]] = []
    hosts_of_leaf = topology.children[1]
    while rem_tasks > 0 and live:
        fit = [
            [
                node_cnt[u + 1][k] >= rem_nodes and tasks[u + 1][k] >= rem_tasks
                for k in range(len(node_cnt[u + 1]))
            ]
            for u in range(depth)
        ]
        d = dist.tolist()
        best = live[0]
        for leaf in live[1:]:  # _topo_choose_best_switch over the leaf switches in switch order
            tcs, i_fit = _compare(chain[leaf], chain[best], fit, node_cnt)
            if (d[leaf] < d[best] and i_fit) or (d[leaf] == d[best] and tcs > 0):
                best = leaf
        dist += 2 * (up != up[:, best : best + 1]).sum(axis=0)
        rem_tasks, rem_nodes, taken = take_nodes(sorted(hosts_of_leaf[best]), cap, plan, rem_tasks, rem_nodes)
        drop = node_cnt[1][best]
        for u in range(depth):  # _decrement_node_cnt on the leaf and its ancestors
            k = chain[best][u]
            node_cnt[u + 1][k] = max(0, node_cnt[u + 1][k] - drop)
        node_cnt[1][best] = 0
        live.remove(best)
        if taken == 0:
            break  # stalled
    if rem_tasks > 0 or not prep.within_cap(topology, [h for h, _ in plan]):
        return None
    return prep.fill(sorted(plan))


def _compare(
    i: list[int], j: list[int], fit: list[list[bool]], node_cnt: list[list[int]]
) -> tuple[int, bool]:
    """``_topo_compare_switches`` for two leaf switches given by their ancestor chains: (1 if i is the better
    fit, -1 if j, 0 if neither; whether i, or the ancestor where the comparison ended, fits)."""
    u = 0
    top = len(i) - 1
    while True:
        a, b = i[u], j[u]
        i_fit, j_fit = fit[u][a], fit[u][b]
        if i_fit and j_fit:
            na, nb = node_cnt[u + 1][a], node_cnt[u + 1][b]
            if na != nb:
                return (1 if na < nb else -1), i_fit
            break
        if i_fit or j_fit:
            return (1 if i_fit else -1), i_fit
        if u == top or i[u + 1] == j[u + 1]:
            break
        u += 1
    na, nb = node_cnt[u + 1][i[u]], node_cnt[u + 1][j[u]]
    if na != nb:
        return (1 if na > nb else -1), i_fit
    return 0, i_fit  # both at the same level in a strict tree


def _ancestors(topology: Topology) -> list[list[int]]:
    out = []
    for h in range(len(topology.host_names)):
        chain = [h]
        for lv in range(len(topology.levels) - 1):
            chain.append(topology.parent[lv][chain[-1]])
        out.append(chain)
    return out


def _leaf_ancestors(topology: Topology) -> list[list[int]]:
    """For each leaf switch (level 1): its domain at every level from 1 up (index 0 = itself)."""
    out = []
    for k in range(len(topology.domain_names[1])):
        chain = [k]
        for lv in range(1, len(topology.levels) - 1):
            chain.append(topology.parent[lv][chain[-1]])
        out.append(chain)
    return out
