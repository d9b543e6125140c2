"""Scheduler baselines: slices kept whole, Kueue's BestFit domain choice, Slurm's tree and block choices, and
every returned mapping valid for occupancy, kind, exclusions and pins on random fragmented states."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.io.importers.slurm import parse_topology_conf
from placement.io.native import cluster_from_dict
from placement.model.devices import HostSpec, NodeType
from placement.model.job import CollectiveKind, Constraints, Group, Job
from placement.model.links import Level, Tier
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import dimension_groups, job_traffic
from placement.model.validate import validate
from placement.sim.scenarios import fat_tree, megatron_job, occupy
from placement.solve.baselines import (
    BASELINES,
    first_fit,
    kueue_tas,
    slice_size,
    slurm_block,
    slurm_tree,
    topology_greedy,
)
from placement.solve.baselines.common import _rank_best_fit

SCHEDULERS = ("kueue-tas", "slurm-tree", "slurm-block")


def cluster(
    hosts: Sequence[tuple[Mapping[str, str], int]],
    levels: Sequence[str],
    gpus: int = 4,
    kinds: Sequence[str] | None = None,
) -> tuple[Topology, ClusterState]:
    """Hosts given as (domains, free devices); the last devices of each host are busy."""
    lv = [Level(n, Tier(400.0 / (i + 1), 1.0 + i)) for i, n in enumerate(levels)]
    specs = [
        HostSpec(f"h{i:02d}", doms, NodeType(k, gpus, k))
        for i, ((doms, _), k) in enumerate(zip(hosts, kinds or ["H100"] * len(hosts), strict=True))
    ]
    topo = Topology.build("t", lv, specs)
    busy = {d: "other" for h, (_, free) in enumerate(hosts) for d in topo.devices_in_domain[0][h][free:]}
    return topo, ClusterState(occupied=busy)


def one_leaf(free: Sequence[int], gpus: int = 8) -> tuple[Topology, ClusterState]:
    return cluster([({"leaf": "l0", "top": "top"}, f) for f in free], ["node", "leaf", "top"], gpus)


def job_of(ranks: int, *, tp: int = 1, kind: str | None = "H100", cons: Constraints | None = None) -> Job:
    j = megatron_job("j", tp=tp, pp=1, dp=ranks // tp, kind=kind, hidden=1024, layers=4)
    return Job(j.name, j.ranks, j.device_kind, j.parallel, j.model, constraints=cons or Constraints())


def hosts_of(topo: Topology, mapping: Sequence[int]) -> list[int]:
    return [topo.devices[d].host_index for d in mapping]


def tp_groups_whole(topo: Topology, job: Job, mapping: Sequence[int]) -> bool:
    assert job.parallel is not None
    return all(
        len({topo.devices[mapping[r]].host_index for r in g}) == 1
        for g in dimension_groups(job.parallel, ("tp",))
    )


def domain_names(topo: Topology, mapping: Sequence[int], level: str) -> set[str]:
    li = topo.level_index(level)
    return {topo.domain_names[li][topo.domain_of(d, li)] for d in mapping}


# ---- slices ------------------------------------------------------------------------------------------------


def test_registry_names_order_and_alias() -> None:
    assert list(BASELINES) == ["first-fit", "kueue-tas", "slurm-tree", "slurm-block"]
    topo, state = one_leaf([8, 6, 6, 4])
    job = job_of(16, tp=4)
    tr = job_traffic(job)
    assert topology_greedy(topo, state, job, tr) == kueue_tas(topo, state, job, tr)
    assert first_fit(topo, state, job) == first_fit(topo, state, job, tr)


def test_slice_size_rules() -> None:
    topo, _ = one_leaf([8, 8])
    for tp in (2, 4, 8):
        j = job_of(16, tp=tp)
        assert slice_size(topo, j, job_traffic(j)) == tp
    big = job_of(16, tp=16)  # TP wider than a host: one rank per task
    assert slice_size(topo, big, job_traffic(big)) == 1
    req = job_of(16, tp=16, cons=Constraints(require={"tp": "leaf"}))  # required above the host: not a slice
    assert slice_size(topo, req, job_traffic(req)) == 1
    explicit = Job(
        "e",
        4,
        "H100",
        groups=(
            Group("x", CollectiveKind.ALL_REDUCE, (0, 1), 1e6, 1.0),
            Group("x", CollectiveKind.ALL_REDUCE, (2, 3), 1e6, 1.0),
        ),
    )
    assert slice_size(topo, explicit, job_traffic(explicit)) == 1
    pinned_host = Job("e", 4, "H100", groups=explicit.groups, constraints=Constraints(require={"x": "node"}))
    assert slice_size(topo, pinned_host, job_traffic(pinned_host)) == 2


def test_kueue_keeps_tp_groups_whole_where_rank_best_fit_splits_them() -> None:
    topo, state = one_leaf([8, 6, 6, 4])
    job = job_of(16, tp=4)
    tr = job_traffic(job)
    old = _rank_best_fit(topo, state, job, tr)
    new = kueue_tas(topo, state, job, tr)
    assert old is not None and new is not None
    assert not validate(topo, state, job, old, traffic=tr) and not validate(topo, state, job, new, traffic=tr)
    assert not tp_groups_whole(topo, job, old)
    assert tp_groups_whole(topo, job, new)


@pytest.mark.parametrize("seed", range(6))
def test_fragmented_fat_tree_every_tp_group_stays_on_one_host(seed: int) -> None:
    topo = fat_tree(512, nodes_per_leaf=4, leaves_per_spine=4)
    state = occupy(topo, 0.45, seed=seed, mode="mixed")
    job = megatron_job("j", tp=4, pp=2, dp=4)
    tr = job_traffic(job)
    for name in SCHEDULERS:
        m = BASELINES[name](topo, state, job, tr)
        if m is not None:
            assert not validate(topo, state, job, m, traffic=tr), name
            assert tp_groups_whole(topo, job, m), name


def test_none_when_a_required_slice_cannot_fit() -> None:
    topo, state = one_leaf([6, 6, 6, 6])
    job = job_of(8, tp=8, cons=Constraints(require={"tp": "node"}))
    tr = job_traffic(job)
    assert kueue_tas(topo, state, job, tr) is None
    assert slurm_tree(topo, state, job, tr) is None
    btopo, bstate = block_cluster([4, 4, 4, 4], free=6)
    assert slurm_block(btopo, bstate, job, tr) is None
    wide = job_of(16, tp=16, cons=Constraints(require={"tp": "node"}))  # wider than any host
    free_topo, free_state = one_leaf([8, 8, 8])
    for name in SCHEDULERS:
        assert BASELINES[name](free_topo, free_state, wide, job_traffic(wide)) is None
    # the same TP-8 job fits once a host has 8 free devices
    topo2, state2 = one_leaf([6, 8, 6])
    m = kueue_tas(topo2, state2, job, tr)
    assert m is not None and set(hosts_of(topo2, m)) == {1}


# ---- Kueue TAS -----------------------------------------------------------------------------------------------


def two_spines(free: Sequence[int]) -> tuple[Topology, ClusterState]:
    """8 hosts of 4 devices: 2 per leaf, 2 leaves per spine, 2 spines."""
    hosts = [({"leaf": f"l{h // 2}", "spine": f"s{h // 4}", "core": "core"}, f) for h, f in enumerate(free)]
    return cluster(hosts, ["node", "leaf", "spine", "core"], gpus=4)


def lowest_tightest(topo: Topology, state: ClusterState, need: int) -> tuple[int, int]:
    """(level, free devices of the tightest domain that holds `need` single ranks at the lowest such level)."""
    for li in range(len(topo.levels)):
        frees = [sum(1 for d in devs if state.usable(d)) for devs in topo.devices_in_domain[li]]
        fitting = [f for f in frees if f >= need]
        if fitting:
            return li, min(fitting)
    raise AssertionError("nothing fits")


@pytest.mark.parametrize("need", [1, 3, 4, 5, 7, 9, 12])
def test_kueue_takes_the_tightest_domain_at_the_lowest_level(need: int) -> None:
    topo, state = two_spines([4, 4, 3, 3, 2, 3, 1, 0])
    job = job_of(need)
    m = kueue_tas(topo, state, job, job_traffic(job))
    assert m is not None and not validate(topo, state, job, m)
    level, free = lowest_tightest(topo, state, need)
    assert topo.group_lca_level(m) == level
    dom = topo.domain_of(m[0], level)
    assert sum(1 for d in topo.devices_in_domain[level][dom] if state.usable(d)) == free


def test_kueue_inside_the_domain_takes_the_fullest_child_first_and_best_fits_the_rest() -> None:
    topo, state = one_leaf([8, 6, 6, 4])
    job = job_of(16, tp=4)  # 4 slices of 4: the 8-free host gives 2, then the 4-free host (fewer pods) 1, ...
    m = kueue_tas(topo, state, job, job_traffic(job))
    assert m is not None
    per_host = {h: hosts_of(topo, m).count(h) for h in set(hosts_of(topo, m))}
    assert per_host[0] == 8 and sum(per_host.values()) == 16 and len(per_host) == 3


def test_kueue_required_level_for_the_whole_job_caps_the_search() -> None:
    topo, state = two_spines([4, 4, 3, 3, 2, 3, 1, 0])
    whole = Group("all", CollectiveKind.ALL_REDUCE, tuple(range(9)), 1e6, 1.0)
    for level, expect in (("spine", {"s0"}), ("leaf", None)):
        job = Job("e", 9, "H100", groups=(whole,), constraints=Constraints(require={"all": level}))
        m = kueue_tas(topo, state, job, job_traffic(job))
        if expect is None:
            assert m is None  # no leaf holds 9 ranks; Kueue does not go above the required level
        else:
            assert m is not None and domain_names(topo, m, "spine") == expect
            assert not validate(topo, state, job, m)


# ---- Slurm tree ----------------------------------------------------------------------------------------------


def three_leaves(usable: Sequence[int], per_leaf: int = 4) -> tuple[Topology, ClusterState]:
    """3 leaf switches of `per_leaf` 4-device hosts under one root; `usable[i]` hosts of leaf i are free."""
    hosts = [
        ({"leaf": f"leaf{i}", "root": "root"}, 4 if h < n else 0)
        for i, n in enumerate(usable)
        for h in range(per_leaf)
    ]
    return cluster(hosts, ["node", "leaf", "root"], gpus=4)


def test_slurm_tree_best_fit_leaf() -> None:
    topo, state = three_leaves([4, 2, 3])
    job = job_of(12, tp=4)  # 3 nodes: leaf0 (4) and leaf2 (3) fit; the tightest is leaf2
    m = slurm_tree(topo, state, job, job_traffic(job))
    assert m is not None and not validate(topo, state, job, m)
    assert domain_names(topo, m, "leaf") == {"leaf2"}


def test_slurm_tree_spreads_from_the_largest_leaf_then_best_fits_the_rest() -> None:
    topo, state = three_leaves([4, 2, 3])
    job = job_of(20, tp=4)  # 5 nodes: no leaf fits; the largest (leaf0) first, then 1 node: leaf1 is tightest
    m = slurm_tree(topo, state, job, job_traffic(job))
    assert m is not None and not validate(topo, state, job, m)
    li = topo.level_index("leaf")
    used = [topo.domain_names[li][topo.domain_of(m[r * 4], li)] for r in range(5)]
    assert sorted(used) == ["leaf0"] * 4 + ["leaf1"]


def test_slurm_tree_switches_one_refuses_to_span_leaves() -> None:
    topo, state = three_leaves([4, 2, 3])
    whole = Group("all", CollectiveKind.ALL_REDUCE, tuple(range(20)), 1e6, 1.0)
    job = Job("e", 20, "H100", groups=(whole,), constraints=Constraints(require={"all": "leaf"}))
    assert slurm_tree(topo, state, job, job_traffic(job)) is None
    small = Job(
        "e",
        8,
        "H100",
        groups=(Group("all", CollectiveKind.ALL_REDUCE, tuple(range(8)), 1e6, 1.0),),
        constraints=Constraints(require={"all": "leaf"}),
    )
    m = slurm_tree(topo, state, small, job_traffic(small))
    assert m is not None and not validate(topo, state, small, m)


# ---- Slurm block ---------------------------------------------------------------------------------------------


def block_cluster(
    usable: Sequence[int], free: int = 4, sizes: str = "4,8,16"
) -> tuple[Topology, ClusterState]:
    """Blocks of 4 hosts from a topology.conf read by the Slurm importer; `usable[i]` hosts of block i have
    `free` of 4 devices free, the others none."""
    n = len(usable)
    text = (
        "".join(f"BlockName=b{i + 1} Nodes=n[{4 * i + 1}-{4 * i + 4}]\n" for i in range(n))
        + f"BlockSizes={sizes}\n"
    )
    doc: dict[str, Any] = parse_topology_conf(text, "blocks.conf")[0]
    for i, lv in enumerate(doc["levels"]):
        lv["bandwidth_gbps"] = 400.0 / (i + 1)
    for h in doc["hosts"]:
        h["devices"] = 4
        h["kind"] = "H100"
    topo, _ = cluster_from_dict(doc)
    busy: dict[int, str] = {}
    for b, k in enumerate(usable):
        for j in range(4):
            devs = topo.devices_in_domain[0][4 * b + j]
            for d in devs[(free if j < k else 0) :]:
                busy[d] = "other"
    return topo, ClusterState(occupied=busy)


def test_slurm_block_importer_levels_are_the_ones_it_reads() -> None:
    topo, _ = block_cluster([4, 4, 4, 4])
    assert topo.level_names[:4] == ("node", "block", "block_x2", "block_x4")


def test_slurm_block_picks_the_tightest_base_block() -> None:
    topo, state = block_cluster([4, 2, 3, 4])
    job = job_of(12, tp=4)  # 3 nodes fit one base block: b1, b3 and b4 hold 3; the tightest is b3
    m = slurm_block(topo, state, job, job_traffic(job))
    assert m is not None and not validate(topo, state, job, m)
    assert domain_names(topo, m, "block") == {"b3"}


def test_slurm_block_spans_the_tightest_aggregate_block() -> None:
    topo, state = block_cluster([4, 2, 3, 4])
    job = job_of(
        24, tp=4
    )  # 6 nodes: 2 base blocks; b[1-2] has 6 usable nodes, b[3-4] 7: the tightest is b[1-2]
    m = slurm_block(topo, state, job, job_traffic(job))
    assert m is not None and not validate(topo, state, job, m)
    assert domain_names(topo, m, "block") == {"b1", "b2"}


def test_slurm_block_needs_a_block_level() -> None:
    topo, state = one_leaf([8, 8])
    job = job_of(8, tp=4)
    assert slurm_block(topo, state, job, job_traffic(job)) is None


# ---- hard rules ----------------------------------------------------------------------------------------------


def test_pins_exclusions_and_kind_are_honoured() -> None:
    kinds = ["H100", "A100"] * 4
    hosts = [({"leaf": f"l{h // 4}", "top": "top"}, 4) for h in range(8)]
    topo, state = cluster(hosts, ["node", "leaf", "top"], gpus=4, kinds=kinds)
    cons = Constraints(pins={0: "h02/gpu3", 5: "h04/gpu0"}, exclude=("h00",))
    job = job_of(8, tp=2, cons=cons)
    tr = job_traffic(job)
    for name, fn in BASELINES.items():
        m = fn(topo, state, job, tr)
        if name == "slurm-block":
            assert m is None
            continue
        assert m is not None, name
        assert not validate(topo, state, job, m, traffic=tr), name
        assert m[0] == topo.device_index("h02/gpu3") and m[5] == topo.device_index("h04/gpu0")
        assert all(topo.devices[d].kind == "H100" and topo.devices[d].host != "h00" for d in m)
    bad = job_of(8, tp=2, cons=Constraints(pins={0: "h01/gpu0"}))  # an A100 for an H100 job
    for fn in BASELINES.values():
        assert fn(topo, state, bad, job_traffic(bad)) is None


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    occ=st.floats(0.0, 0.7),
    mode=st.sampled_from(["whole", "partial", "mixed", "mixed-random"]),
    seed=st.integers(0, 10_000),
    shape=st.sampled_from([(1, 1, 6), (2, 2, 2), (4, 1, 3), (8, 1, 2), (2, 3, 1), (4, 2, 1)]),
    blocks=st.booleans(),
    require=st.booleans(),
    pin=st.booleans(),
    exclude=st.integers(-1, 15),
)
def test_every_baseline_mapping_is_valid_on_fragmented_states(
    occ: float,
    mode: str,
    seed: int,
    shape: tuple[int, int, int],
    blocks: bool,
    require: bool,
    pin: bool,
    exclude: int,
) -> None:
    topo = (
        block_cluster([4] * 8, free=4)[0] if blocks else fat_tree(128, nodes_per_leaf=4, leaves_per_spine=2)
    )
    state = occupy(topo, occ, seed=seed, mode=mode)
    tp, pp, dp = shape
    usable = [d.index for d in topo.devices if state.usable(d.index)]
    excl = (topo.host_names[exclude],) if exclude >= 0 else ()
    usable = [d for d in usable if topo.devices[d].host not in excl]
    pins = {tp * pp * dp - 1: topo.devices[usable[seed % len(usable)]].id} if pin and usable else {}
    cons = Constraints(require={"tp": "node"} if require and tp > 1 else {}, pins=pins, exclude=excl)
    base = megatron_job("j", tp=tp, pp=pp, dp=dp, kind="H100", hidden=1024, layers=4)
    job = Job(base.name, base.ranks, base.device_kind, base.parallel, base.model, constraints=cons)
    tr = job_traffic(job)
    for name, fn in BASELINES.items():
        m = fn(topo, state, job, tr)
        if m is None:
            continue
        v = validate(topo, state, job, m, traffic=tr)
        if name == "first-fit":  # topology-blind: only the device rules
            v = [x for x in v if x.rule != "required-level"]
        assert not v, (name, v[:3])
        if name != "first-fit" and not pins and slice_size(topo, job, tr) == tp:
            assert tp_groups_whole(topo, job, m), name
