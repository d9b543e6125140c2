"""Issue 21 item 5: each way the baselines were weaker than the schedulers they name, one test each.

The node count a Slurm job holds to, TP groups as slices in any rank order and for explicit jobs, first-fit
keeping slices, Kueue's search from the required level, and Slurm's base block size. Expected values come
from the job's own groups and hand-built states, not from the baselines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from placement.model.job import CollectiveKind, Constraints, Group, Job
from placement.model.state import ClusterState
from placement.model.topology import HostSpec, Level, NodeType, Tier, Topology
from placement.model.traffic import dimension_groups, job_traffic
from placement.model.validate import validate
from placement.sim.scenarios import explicit_twin, fat_tree, megatron_job, occupy
from placement.solve.baselines import BASELINES, first_fit, kueue_tas, slurm_block, slurm_request, slurm_tree
from placement.solve.baselines.common import prepare

GPUS = 8


def build(
    hosts: Sequence[tuple[dict[str, str], int]], levels: Sequence[str]
) -> tuple[Topology, ClusterState]:
    """Hosts of 8 devices given as (domains, free devices); the last devices of each host are busy."""
    lv = [Level(n, Tier(400.0 / (i + 1), 1.0 + i)) for i, n in enumerate(levels)]
    specs = [HostSpec(f"h{i:02d}", doms, NodeType("H100", GPUS, "H100")) for i, (doms, _) in enumerate(hosts)]
    topo = Topology.build("t", lv, specs)
    busy = {d: "other" for h, (_, free) in enumerate(hosts) for d in topo.devices_in_domain[0][h][free:]}
    return topo, ClusterState(occupied=busy)


def job(tp: int, dp: int, *, order: str | None = None, cons: Constraints | None = None) -> Job:
    j = megatron_job("j", tp=tp, pp=1, dp=dp, hidden=1024, layers=4)
    par = j.parallel
    assert par is not None
    if order is not None:
        par = replace(par, order=order)
    return Job(j.name, j.ranks, j.device_kind, par, j.model, constraints=cons or Constraints())


def hosts_used(topo: Topology, mapping: Sequence[int]) -> set[int]:
    return {topo.devices[d].host_index for d in mapping}


def tp_groups_whole(topo: Topology, j: Job, mapping: Sequence[int]) -> bool:
    assert j.parallel is not None
    return all(
        len({topo.devices[mapping[r]].host_index for r in g}) == 1
        for g in dimension_groups(j.parallel, ("tp",))
    )


# ---- the node count -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("tp", [1, 4])
def test_slurm_tree_uses_exactly_the_nodes_the_job_asks_for(tp: int) -> None:
    """fat-tree 256 at 45% (mixed fragments), a 16-rank job: ``--nodes=2`` (16 ranks / 8 GPUs per host), so two
    hosts or pending, in each of 20 states; never the 3-5 hosts a fill of fragments takes."""
    topo = fat_tree(256)
    j = job(tp, 16 // tp)
    tr = job_traffic(j)
    placed = 0
    for seed in range(20):
        state = occupy(topo, 0.45, seed=seed, mode="mixed")
        m = slurm_tree(topo, state, j, tr)
        if m is not None:
            placed += 1
            assert len(hosts_used(topo, m)) == 16 // GPUS, seed
            assert not validate(topo, state, j, m, traffic=tr)
    assert placed >= 10


def test_slurm_keeps_the_job_pending_when_n_nodes_cannot_hold_it() -> None:
    """Two 8-GPU hosts are asked for; only 6+6+4 free: three hosts would hold it, Slurm waits."""
    topo, state = build([({"leaf": "l0", "top": "t"}, f) for f in (6, 6, 4)], ["node", "leaf", "top"])
    j = job(2, 8)  # 16 ranks in TP pairs: 8 slices, 4 per host, --nodes=2
    tr = job_traffic(j)
    prep = prepare(topo, state, j, tr)
    assert prep is not None
    req = slurm_request(topo, j, prep)
    assert req is not None and req.options == ("--nodes=2", "--ntasks=8", "--gpus-per-task=2")
    assert slurm_tree(topo, state, j, tr) is None
    assert kueue_tas(topo, state, j, tr) is not None  # Kueue has no node count: it spreads over three hosts


def test_slurm_block_uses_exactly_the_nodes_the_job_asks_for() -> None:
    blocks = [
        ({"block": f"b{h // 4}", "block_x2": f"x{h // 8}", "block_x4": "all"}, f)
        for h, f in enumerate([6, 6, 4, 0, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8])
    ]
    topo, state = build(blocks, ["node", "block", "block_x2", "block_x4"])
    j = job(2, 8)  # --nodes=2
    tr = job_traffic(j)
    m = slurm_block(topo, state, j, tr)
    assert m is not None and len(hosts_used(topo, m)) == 2
    squeezed = ClusterState(
        occupied={d: "o" for h in range(4, 16) for d in topo.devices_in_domain[0][h]} | dict(state.occupied)
    )
    assert slurm_block(topo, squeezed, j, tr) is None  # b0 alone: 6+6+4 free, two nodes cannot hold 16 ranks


# ---- slices ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["first-fit", "kueue-tas", "slurm-tree"])
@pytest.mark.parametrize("order", ["dp-tp-cp-ep-pp", "pp-dp-tp-cp-ep", "tp-cp-ep-dp-pp"])
def test_a_slice_is_the_tp_group_whatever_the_rank_order(name: str, order: str) -> None:
    topo = fat_tree(64, nodes_per_leaf=4, leaves_per_spine=2)
    state = ClusterState()
    j = job(4, 4, order=order)
    tr = job_traffic(j)
    m = BASELINES[name](topo, state, j, tr)
    assert m is not None and not validate(topo, state, j, m, traffic=tr)
    assert tp_groups_whole(topo, j, m)


@pytest.mark.parametrize(("name", "frees"), [("kueue-tas", (8, 6, 6, 4)), ("slurm-tree", (6, 8, 4, 8))])
def test_explicit_jobs_keep_their_declared_tp_groups(name: str, frees: tuple[int, ...]) -> None:
    """Single ranks would split a TP group over the fragments (rank by rank: 8, then 6, then the rest)."""
    topo, state = build([({"leaf": "l0", "top": "t"}, f) for f in frees], ["node", "leaf", "top"])
    structured = job(4, 4)
    explicit = explicit_twin(structured)
    assert explicit.parallel is None
    tr = job_traffic(explicit)
    m = BASELINES[name](topo, state, explicit, tr)
    assert m is not None and not validate(topo, state, explicit, m, traffic=tr)
    groups = [g.members for g in tr.groups if g.label == "tp"]
    assert len(groups) == 4
    assert all(len({topo.devices[m[r]].host_index for r in g}) == 1 for g in groups)


def test_first_fit_keeps_slices() -> None:
    """Hosts with 3, 8 and 8 free: rank-by-rank first fit would put ranks 0-2 on the first host."""
    topo, state = build([({"leaf": "l0", "top": "t"}, f) for f in (3, 8, 8)], ["node", "leaf", "top"])
    j = job(4, 2)
    m = first_fit(topo, state, j, job_traffic(j))
    assert m is not None and tp_groups_whole(topo, j, m)
    assert hosts_used(topo, m) == {1}  # the first host that holds a slice, and it holds both


# ---- Kueue's required level -------------------------------------------------------------------------------------


def test_kueue_searches_at_the_required_level_only() -> None:
    """spine s0: leaves of 8+8 and 2+0 free hosts (18 free); s1: leaves of 8+4 and 4+0 (16 free). A 8-rank job
    that requires a spine goes to the tightest spine, s1, though s0's first leaf is not tighter than s1's."""
    frees = [8, 8, 2, 0, 8, 4, 4, 0]
    hosts = [({"leaf": f"l{h // 2}", "spine": f"s{h // 4}", "top": "t"}, f) for h, f in enumerate(frees)]
    topo, state = build(hosts, ["node", "leaf", "spine", "top"])
    whole = Constraints(require={"all": "spine"})
    j = Job(
        "e",
        8,
        "H100",
        groups=(Group("all", CollectiveKind.ALL_REDUCE, tuple(range(8)), 1e6, 1.0),),
        constraints=whole,
    )
    tr = job_traffic(j)
    m = kueue_tas(topo, state, j, tr)
    assert m is not None and not validate(topo, state, j, m, traffic=tr)
    spine = topo.level_index("spine")
    free_per_spine = [
        sum(1 for d in topo.devices_in_domain[spine][k] if state.usable(d))
        for k in range(len(topo.domain_names[spine]))
    ]
    tightest = min((f, k) for k, f in enumerate(free_per_spine) if f >= 8)[1]
    assert {topo.domain_of(d, spine) for d in m} == {tightest}


# ---- Slurm's base block size ------------------------------------------------------------------------------------


def test_slurm_block_plans_with_the_first_block_size() -> None:
    """Blocks of 6, 4, 4, 4 nodes: Slurm's base block size is the first one's (6), so 5 nodes fit one base block
    (b0); with the smallest size (4) the job would need two base blocks and go to the tighter pair b2-b3."""
    sizes = [6, 4, 4, 4]
    hosts = []
    for b, n in enumerate(sizes):
        for _ in range(n):
            hosts.append(({"block": f"b{b}", "block_x2": f"x{b // 2}", "block_x4": "all"}, GPUS))
    topo, state = build(hosts, ["node", "block", "block_x2", "block_x4"])
    j = job(8, 5)  # --nodes=5
    m = slurm_block(topo, state, j, job_traffic(j))
    assert m is not None
    block = topo.level_index("block")
    assert {topo.domain_names[block][topo.domain_of(d, block)] for d in m} == {"b0"}
