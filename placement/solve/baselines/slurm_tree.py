"""The slurm-tree baseline: Slurm's topology/tree plugin choosing switches, leaf switches and nodes.

Reproduces SchedMD/slurm ``src/plugins/topology/tree/eval_nodes_tree.c`` (``_eval_nodes_topo``) with the levels
above the host as switches (level 1 = leaf switches) and equal node weights.
"""

from __future__ import annotations

from placement.job import Job
from placement.solve.baselines.common import prepare, slurm_request
from placement.state import ClusterState
from placement.topology import Topology
from placement.traffic import Traffic

__all__ = ["slurm_tree"]

Switch = tuple[int, int]  # (level, domain index), level >= 1


def slurm_tree(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
    """Slurm topology/tree placement; None when Slurm would not start the job on this state.

    The request modelled (`placement.solve.baselines.common.slurm_request`): ``--nodes=N --ntasks=<ranks>
    --gpus-per-task=1 --distribution=plane=<slice>``, N the fewest whole hosts that hold the job. A node is
    usable when it holds one slice and offers ``floor(free / slice) * slice`` tasks; slices never split. A
    required level that holds the whole job is ``--switches=1`` at the leaf level (and the same rule one level
    up): Slurm keeps such a job pending rather than spread it, so we return None.

    Algorithm, after ``_eval_nodes_topo``:

    1. the top switch: the highest-level switch with enough usable nodes and tasks (the last one found on
       ties); nodes outside it are dropped;
    2. leaf switches one at a time with ``_topo_choose_best_switch``: a leaf closer (in switch hops, summed over
       the leaves already chosen) replaces the best only when it fits the rest of the request; at equal
       distance ``_topo_compare_switches`` decides: a leaf that fits beats one that does not, between two that
       fit the one with fewer nodes (best fit), and when neither fits both climb to their parents and compare
       there; at the end the one with more nodes wins;
    3. all usable nodes of the chosen leaf in node order (Slurm's bitmap order, not by free capacity), then
       ``_decrement_node_cnt`` on the leaf and its ancestors; the task counts of switches stay as they were at
       the start, as in Slurm.

    Tasks then go to the chosen nodes in node order (``--distribution=block``/``plane``), whole slices each.
    """
    prep = prepare(topology, state, job, traffic)
    if prep is None:
        return None
    if not prep.slices:
        return prep.fill([])
    req = slurm_request(topology, job, prep)
    if req is None:
        return None
    rem_nodes, rem_tasks = req
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
    top: Switch | None = None
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
    leaf_anc = _leaf_ancestors(topology)
    n_leaves = len(topology.domain_names[1])
    dist = [0] * n_leaves

    def parent(s: Switch) -> Switch | None:
        lv, k = s
        return (lv + 1, topology.parent[lv][k]) if lv + 1 < n_levels else None

    def fits(s: Switch) -> bool:
        return node_cnt[s[0]][s[1]] >= rem_nodes and tasks[s[0]][s[1]] >= rem_tasks

    def compare(i: Switch, j: Switch) -> tuple[int, bool]:
        """``_topo_compare_switches``: (1 if i is the better fit, -1 if j, 0 if neither; whether i fits)."""
        while True:
            i_fit, j_fit = fits(i), fits(j)
            if i_fit and j_fit:
                ni, nj = node_cnt[i[0]][i[1]], node_cnt[j[0]][j[1]]
                if ni != nj:
                    return (1 if ni < nj else -1), i_fit
                break
            if i_fit or j_fit:
                return (1 if i_fit else -1), i_fit
            pi, pj = parent(i), parent(j)
            if pi is None or pj is None or pi == pj:
                break
            i, j = pi, pj
        ni, nj = node_cnt[i[0]][i[1]], node_cnt[j[0]][j[1]]
        if ni != nj:
            return (1 if ni > nj else -1), i_fit
        return (1 if i[0] < j[0] else -1 if i[0] > j[0] else 0), i_fit

    plan: list[tuple[int, int]] = []
    hosts_of_leaf = topology.children[1]
    while rem_tasks > 0:
        best: int | None = None
        for leaf in range(n_leaves):  # _topo_choose_best_switch over the leaf switches in switch order
            if node_cnt[1][leaf] == 0:
                continue
            if best is None:
                best = leaf
                continue
            tcs, i_fit = compare((1, leaf), (1, best))
            if (dist[leaf] < dist[best] and i_fit) or (dist[leaf] == dist[best] and tcs > 0):
                best = leaf
        if best is None:
            break
        for leaf in range(n_leaves):
            dist[leaf] += _hops(leaf_anc[best], leaf_anc[leaf])
        taken = 0
        for h in sorted(hosts_of_leaf[best]):
            if cap[h] == 0 or rem_tasks <= 0:
                continue
            t = min(cap[h], rem_tasks)
            plan.append((h, t))
            rem_tasks -= t
            rem_nodes -= 1
            taken += 1
        drop = node_cnt[1][best]
        s: Switch | None = (1, best)
        while s is not None:  # _decrement_node_cnt
            node_cnt[s[0]][s[1]] = max(0, node_cnt[s[0]][s[1]] - drop)
            s = parent(s)
        node_cnt[1][best] = 0
        if taken == 0:
            break  # stalled
    if rem_tasks > 0 or not prep.within_cap(topology, [h for h, _ in plan]):
        return None
    return prep.fill(sorted(plan))


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


def _hops(a: list[int], b: list[int]) -> int:
    """Switch hops between two leaf switches: up to their lowest common switch and down again."""
    for up, (x, y) in enumerate(zip(a, b, strict=True)):
        if x == y:
            return 2 * up
    return 2 * len(a)
