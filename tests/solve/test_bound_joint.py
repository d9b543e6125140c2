"""The joint arguments of the lower bound (placement.solve.bound): TP, PP and DP groups competing for the same
hosts. Each counting argument is checked against an enumeration of every rank-to-host assignment, and the whole
bound against every mapping of tiny clusters, against mappings built to meet it on fragmented ones (a stage per
spine, whole TP groups on full hosts, the rest split in halves), every heuristic and random mappings."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.cost.evaluate import evaluate
from placement.model.devices import HostSpec, NodeType
from placement.model.job import Job
from placement.model.links import Level, Tier
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.model.validate import validate
from placement.sim.scenarios import A100_PCIE_PAIRS, dgx1_node, fat_tree, megatron_job
from placement.solve import SolveOptions, place
from placement.solve.bound import _classes_fit, _split_room, comm_bound
from placement.solve.units import candidate_devices
from tests.support_solve import fragmented, host_assignments, peers, valid_reports, with_order


@pytest.mark.parametrize(
    "free,tp,dp",
    [
        ([2, 2, 2, 2, 1, 1], 2, 4),
        ([2, 2, 2, 2, 2, 1], 2, 4),
        ([4, 4, 2, 2], 4, 2),
        ([4, 3, 3, 2], 4, 2),
        ([4, 4, 4, 2], 4, 2),
    ],
)
def test_split_room_bounds_the_fewest_members_of_split_tp_groups(free: list[int], tp: int, dp: int) -> None:
    """Every assignment of a tp x dp job (TP groups of consecutive ranks, DP groups across them) to hosts: when
    every DP group has G members or more on each of its hosts and tp * G exceeds every host, every TP group is
    split and the fewest members some TP group has on a host is at most `_split_room`'s count."""
    tp_groups = [tuple(range(i * tp, (i + 1) * tp)) for i in range(dp)]
    dp_groups = [tuple(j + i * tp for i in range(dp)) for j in range(tp)]
    max_free = max(free)
    host_free = Counter(dict(enumerate(free)))
    seen_cases = 0
    for a in host_assignments(free, tp * dp):
        g_min = min(min(Counter(a[r] for r in m).values()) for m in dp_groups)
        if tp * g_min <= max_free:
            continue
        seen_cases += 1
        assert all(len({a[r] for r in m}) > 1 for m in tp_groups)  # every TP group split
        fewest = min(min(Counter(a[r] for r in m).values()) for m in tp_groups)
        assert fewest <= _split_room(host_free, tp, len(tp_groups), g_min, max_free // g_min)
    assert seen_cases > 0


def _levels_of(hosts: list[tuple[int, int]], members: list[int]) -> int:
    """The lowest common level of hosts (host index, leaf index): 0 one host, 1 one leaf, 2 across leaves."""
    if len({hosts[m][0] for m in members}) == 1:
        return 0
    return 1 if len({hosts[m][1] for m in members}) == 1 else 2


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rooms=st.lists(st.integers(1, 3), min_size=2, max_size=5),
    leaves=st.lists(st.integers(0, 1), min_size=5, max_size=5),
    classes=st.integers(2, 3),
    size=st.integers(1, 3),
)
def test_class_packing_admits_every_placement_of_whole_groups(
    rooms: list[int], leaves: list[int], classes: int, size: int
) -> None:
    """Every placement of `classes` classes of `size` whole A-groups on hosts with `rooms` each (hosts in leaves):
    the (level, fewest per host) each class gets is a choice `_classes_fit` admits, with its capacities computed
    as `_class_packing` computes them."""
    hosts = [(h, leaves[h]) for h in range(len(rooms))]
    per = max(rooms)
    cap: list[list[int]] = []
    room_doms: list[list[list[int]]] = []
    for li in range(3):
        dom = [(h,) if li == 0 else (lf,) if li == 1 else (0,) for h, lf in hosts]
        row = []
        for g in range(1, per + 1):
            w: dict[tuple[int, ...], int] = defaultdict(int)
            for h, r in enumerate(rooms):
                if r >= g:
                    w[dom[h]] += r
            row.append(sum(v // size for v in w.values()))
        cap.append(row)
        by: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for h, r in enumerate(rooms):
            by[dom[h]].append(r)
        room_doms.append(list(by.values()))
    n_groups = classes * size
    if sum(rooms) < n_groups:
        return
    every = host_assignments(rooms, n_groups)
    for a in random.Random(len(every)).sample(every, min(300, len(every))):
        got = []
        for c in range(classes):
            members = list(a[c * size : (c + 1) * size])
            got.append((_levels_of(hosts, members), min(Counter(members).values())))
        # as `_class_packing` offers them: the choices no other one dominates (higher level, fewer per host)
        kept = [o for o in set(got) if not any(q != o and q[0] >= o[0] and q[1] <= o[1] for q in set(got))]
        assert _classes_fit(sorted(kept), classes, cap, room_doms, size) is not False, (a, got)


def _three_level(
    free_per_host: list[int], per_host: int, hosts_per_leaf: int
) -> tuple[Topology, ClusterState]:
    nt = NodeType("t", per_host, "H100")
    hs = [
        HostSpec(f"h{i}", {"leaf": f"l{i // hosts_per_leaf}", "spine": "s"}, nt)
        for i in range(len(free_per_host))
    ]
    levels = [Level("node", Tier(400, 1)), Level("leaf", Tier(50, 5)), Level("spine", Tier(12.5, 10))]
    topo = Topology.build("joint", levels, hs)
    busy = {
        d: "other"
        for h, f in enumerate(free_per_host)
        for d in list(topo.devices_in_domain[0][h])[: per_host - f]
    }
    return topo, ClusterState(occupied=busy)


def _least_by_hosts(topo: Topology, state: ClusterState, job: Job) -> tuple[float, float]:
    """The least exposed comm and the least step over every mapping: hosts without an intra-node matrix or rails
    are alike inside, so every rank-to-host assignment with one device order stands for all its mappings."""
    traffic = job_traffic(job)
    free = candidate_devices(topo, state, job)
    by_host: dict[int, list[int]] = defaultdict(list)
    for d in free:
        by_host[topo.devices[d].host_index].append(d)
    hosts = sorted(by_host)
    best = (float("inf"), float("inf"))
    for a in host_assignments([len(by_host[h]) for h in hosts], job.ranks):
        used: dict[int, int] = defaultdict(int)
        m = []
        for h in a:
            m.append(by_host[hosts[h]][used[h]])
            used[h] += 1
        if validate(topo, state, job, m, traffic=traffic):
            continue
        rep = evaluate(topo, state, job, m, traffic=traffic, check=False)
        best = (min(best[0], rep.comm_seconds), min(best[1], rep.step_seconds))
    return best


@pytest.mark.parametrize(
    "free,per_host,shape",
    [
        ([2, 2, 1, 1, 1, 1], 2, (2, 1, 3)),  # TP2 on 2-GPU hosts: 2 whole hosts for 3 TP groups
        ([2, 1, 1, 2, 1, 1], 2, (2, 2, 1)),  # a pipeline of two TP2 stages across a fragmented leaf pair
        ([4, 2, 2, 4], 4, (2, 2, 2)),  # two stages of two TP2 groups: rooms for whole groups shared
        ([4, 3, 1, 2, 2], 4, (2, 1, 3)),
    ],
)
def test_joint_bound_is_below_the_least_of_every_mapping(
    free: list[int], per_host: int, shape: tuple[int, int, int]
) -> None:
    """Tiny clusters where TP groups must split or share hosts with the DP groups across them: the least exposed
    communication and the least step of every mapping are at least the bound's."""
    topo, state = _three_level(free, per_host, 2)
    tp, pp, dp = shape
    job = megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=1024, layers=4, micro_batches=2)
    least_comm, least_step = _least_by_hosts(topo, state, job)
    bound = comm_bound(topo, state, job, job_traffic(job), candidate_devices(topo, state, job))
    assert bound.value <= least_comm * (1 + 1e-12), bound.source
    assert bound.step <= least_step * (1 + 1e-12), bound.source


def stage_per_domain(topo: Topology, state: ClusterState, job: Job, level: int) -> list[int] | None:
    """A mapping built to be cheap where TP groups are scarce: each pipeline stage inside one domain of `level`
    (fullest first), its TP groups whole on hosts with room, the rest split in two halves on two hosts of one
    leaf (None: it does not fit)."""
    par = job.parallel
    assert par is not None
    t = par.tp
    free = candidate_devices(topo, state, job)
    hosts: dict[int, list[int]] = defaultdict(list)
    for d in free:
        hosts[topo.devices[d].host_index].append(d)
    col, leaf = topo.domain_column(level), topo.domain_column(min(1, level))
    doms: dict[int, list[int]] = defaultdict(list)
    for h, ds in hosts.items():
        doms[col[ds[0]]].append(h)
    order = sorted(doms, key=lambda k: -sum(len(hosts[h]) for h in doms[k]))
    stage_ranks = job.ranks // par.pp
    out: list[int | None] = [None] * job.ranks
    stage = 0
    for k in order:
        while stage < par.pp and sum(len(hosts[h]) for h in doms[k]) >= stage_ranks:
            for g in range(stage * stage_ranks // t, (stage + 1) * stage_ranks // t):
                whole = [h for h in doms[k] if len(hosts[h]) >= t]
                if whole:
                    h = min(whole, key=lambda x: len(hosts[x]))
                    for i in range(t):
                        out[g * t + i] = hosts[h].pop()
                    continue
                half = max(1, t // 2)
                by_leaf: dict[int, list[int]] = defaultdict(list)
                for h in doms[k]:
                    if len(hosts[h]) >= half:
                        by_leaf[leaf[hosts[h][0]]].append(h)
                pair = next((v[:2] for v in by_leaf.values() if len(v) >= 2), None)
                if pair is None:
                    return None
                for i in range(t):
                    out[g * t + i] = hosts[pair[0] if i < half else pair[1]].pop()
            stage += 1
    if any(x is None for x in out):
        return None
    return [x for x in out if x is not None]


@settings(max_examples=20, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    busy=st.floats(0.25, 0.65),
    seed=st.integers(0, 100_000),
    shape=st.sampled_from([(8, 4, 4), (8, 2, 8), (4, 4, 8), (4, 2, 16), (2, 4, 8), (8, 8, 2)]),
    level=st.sampled_from([1, 2]),
)
def test_joint_bound_is_below_mappings_built_to_meet_it(
    busy: float, seed: int, shape: tuple[int, int, int], level: int
) -> None:
    """Fragmented fat trees of 8-GPU hosts (4 per leaf, 4 leaves per spine) where full hosts are too few for the
    TP groups: the stage-per-domain mappings (as cheap as the joint bound allows), every heuristic's and 10
    random mappings cost at least the bound, in exposed communication and in step."""
    topo = fat_tree(512, nodes_per_leaf=4, leaves_per_spine=4)
    state = fragmented(topo, busy, seed)
    tp, pp, dp = shape
    job = megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=2048, layers=8)
    traffic = job_traffic(job)
    free = candidate_devices(topo, state, job)
    if len(free) < job.ranks:
        return
    bound = comm_bound(topo, state, job, traffic, free)
    rng = random.Random(seed)
    mappings = [rng.sample(free, job.ranks) for _ in range(10)] + list(peers(topo, state, job).values())
    built = stage_per_domain(topo, state, job, level)
    if built is not None:
        mappings.append(built)
    for m in mappings:
        if validate(topo, state, job, m, traffic=traffic):
            continue
        rep = evaluate(topo, state, job, m, traffic=traffic)
        assert bound.value <= rep.comm_seconds * (1 + 1e-12), bound.source
        assert bound.step <= rep.step_seconds * (1 + 1e-12), bound.source


def _two_spines_scarce_full_hosts() -> tuple[Topology, ClusterState]:
    """A fat tree where only two spines have free devices, each three full hosts and two halves in another leaf:
    six full hosts for eight TP8 groups, and the job takes every free device."""
    topo = fat_tree(512, nodes_per_leaf=4, leaves_per_spine=4)
    busy: dict[int, str] = {}
    for h in range(64):
        keep = 0 if h >= 32 else 8 if h % 16 in (0, 1, 2) else 4 if h % 16 in (4, 5) else 0
        for d in list(topo.devices_in_domain[0][h])[keep:]:
            busy[d] = "other"
    return topo, ClusterState(occupied=busy)


def _tp_groups_by_spine(topo: Topology, groups_of_spine: list[list[int]]) -> list[int]:
    """TP8 group g of `groups_of_spine[s]` on spine s: the first three whole on its full hosts, the fourth split
    in halves on its two half-free hosts."""
    m = [0] * 64
    for s, groups in enumerate(groups_of_spine):
        base = 16 * s
        halves = list(topo.devices_in_domain[0][base + 4])[:4] + list(topo.devices_in_domain[0][base + 5])[:4]
        for k, g in enumerate(groups):
            devs = list(topo.devices_in_domain[0][base + k]) if k < 3 else halves
            for i in range(8):
                m[g * 8 + i] = devs[i]
    return m


def test_joint_bound_is_below_both_ways_to_split_scarce_full_hosts() -> None:
    """Six full hosts for eight TP8 groups (two stages of four): a stage per spine (PP sends cross spines, DP
    groups stay in one) and half of each stage per spine (PP sends stay, DP groups cross) each split two TP
    groups; both, and `place`'s answer, cost at least the bound, in exposed communication and in step."""
    topo, state = _two_spines_scarce_full_hosts()
    job = megatron_job("j", tp=8, pp=2, dp=4, hidden=2048, layers=8)
    traffic = job_traffic(job)
    bound = comm_bound(topo, state, job, traffic, candidate_devices(topo, state, job))
    for m in (
        _tp_groups_by_spine(topo, [[0, 1, 2, 3], [4, 5, 6, 7]]),
        _tp_groups_by_spine(topo, [[0, 1, 4, 5], [2, 3, 6, 7]]),
    ):
        assert not validate(topo, state, job, m, traffic=traffic)
        rep = evaluate(topo, state, job, m, traffic=traffic)
        assert bound.value <= rep.comm_seconds * (1 + 1e-12), bound.source
        assert bound.step <= rep.step_seconds * (1 + 1e-12), bound.source
    res = place(topo, state, job, SolveOptions(time_limit_s=2, seed=0, workers=1))
    assert res.comm_seconds is not None and res.comm_seconds >= bound.value * (1 - 1e-12)


@pytest.mark.parametrize("matrix", ["dgx1", "a100-pcie-pairs"])
@pytest.mark.parametrize("busy", [(), (1, 2, 5), (0, 3, 4, 7), "degraded"])
@pytest.mark.parametrize("shape", [(2, 1, 2), (4, 1, 1), (1, 1, 4)])
def test_bound_inside_a_matrix_host_is_below_every_mapping(
    matrix: str, busy: tuple[int, ...] | str, shape: tuple[int, int, int]
) -> None:
    """One host with an intra-node matrix (DGX-1's cube mesh, A100 PCIe pairs), some devices busy, or a slow
    GPU, a slow link and a failed one: every mapping of 4 ranks, scored by the evaluator, costs at least the
    bound, which prices a group inside a host by the model's own plan over every set of free devices."""
    topo = dgx1_node(1) if matrix == "dgx1" else dgx1_node(1, matrix=A100_PCIE_PAIRS, kind="A100")
    state = (
        ClusterState(device_slowdown={2: 1.5}, pair_slowdown={(0, 1): 3.0}, failed_pairs=frozenset({(4, 5)}))
        if busy == "degraded"
        else ClusterState(occupied={d: "other" for d in busy})
    )
    tp, pp, dp = shape
    job = megatron_job(
        "j", tp=tp, pp=pp, dp=dp, hidden=1024, layers=4, micro_batches=2, kind=topo.devices[0].kind
    )
    traffic = job_traffic(job)
    free = candidate_devices(topo, state, job)
    reports = valid_reports(topo, state, job, traffic, free)
    bound = comm_bound(topo, state, job, traffic, free)
    assert bound.value <= min(r.comm_seconds for r in reports) * (1 + 1e-12), bound.source
    assert bound.step <= min(r.step_seconds for r in reports) * (1 + 1e-12), bound.source
    if shape == (4, 1, 1) and busy != "degraded":  # one TP group alone: the least over the free devices
        assert bound.value == pytest.approx(min(r.comm_seconds for r in reports), rel=1e-9)


def _racks(racks: int, trays: int, gpus: int, *, sharp: bool) -> Topology:
    """NVLink domains across hosts: `racks` racks of `trays` trays of `gpus` GPUs, each tray with one NIC per GPU
    (48 GB/s), the racks on one leaf (SHARP or not)."""
    tray = NodeType("tray", gpus, "GB200", nics=gpus, nic_gbps=48.0)
    hosts = [
        HostSpec(f"r{r}t{t}", {"rack": f"r{r}", "leaf": "l0"}, tray)
        for r in range(racks)
        for t in range(trays)
    ]
    levels = [
        Level("node", Tier(721.8, 1.0)),
        Level("rack", Tier(721.8, 2.0), nvlink=True),
        Level("leaf", Tier(48.0, 5.0), sharp=sharp),
    ]
    return Topology.build("racks", levels, hosts)


@pytest.mark.parametrize("sharp", [False, True])
@pytest.mark.parametrize("busy", [(), (0, 1, 2), (1, 5, 6, 10)])
@pytest.mark.parametrize("shape", [(4, 1, 1), (2, 1, 2), (1, 2, 2)])
def test_bound_across_nvlink_domains_is_below_every_mapping(
    sharp: bool, busy: tuple[int, ...], shape: tuple[int, int, int]
) -> None:
    """Racks of trays (NCCL's nodes are the racks): every mapping of 4 ranks onto 3 racks of 2 trays of 2 GPUs
    with some busy, scored by the evaluator, costs at least the bound, whose price for a group across racks
    counts the NICs of the rack with the fewest members."""
    topo = _racks(3, 2, 2, sharp=sharp)
    state = ClusterState(occupied={d: "other" for d in busy})
    tp, pp, dp = shape
    job = megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=1024, layers=4, micro_batches=2, kind="GB200")
    traffic = job_traffic(job)
    free = candidate_devices(topo, state, job)
    reports = valid_reports(topo, state, job, traffic, free)
    bound = comm_bound(topo, state, job, traffic, free)
    assert bound.value <= min(r.comm_seconds for r in reports) * (1 + 1e-12), bound.source
    assert bound.step <= min(r.step_seconds for r in reports) * (1 + 1e-12), bound.source


def _contiguous_mappings(topo: Topology, free: list[int], ranks: int) -> list[list[int]]:
    """Every mapping torchrun can launch, up to the order of devices inside a host (hosts without a matrix are
    alike inside): an ordered sequence of distinct hosts, each taking the next block of ranks."""
    by_host: dict[int, list[int]] = defaultdict(list)
    for d in free:
        by_host[topo.devices[d].host_index].append(d)
    out: list[list[int]] = []

    def extend(prefix: list[int], used: set[int]) -> None:
        if len(prefix) == ranks:
            out.append(list(prefix))
            return
        for h, ds in by_host.items():
            if h in used:
                continue
            for k in range(1, min(len(ds), ranks - len(prefix)) + 1):
                extend(prefix + ds[:k], used | {h})

    extend([], set())
    return out


@pytest.mark.parametrize("free", [[2, 2, 2, 2], [4, 2, 1, 1], [3, 3, 2]])
@pytest.mark.parametrize(
    "shape,order",
    [((2, 2, 2), "tp-pp-dp-cp-ep"), ((2, 1, 4), "tp-cp-ep-dp-pp"), ((1, 2, 4), "dp-tp-pp-cp-ep")],
)
def test_bound_with_torchrun_is_below_every_contiguous_mapping(
    free: list[int], shape: tuple[int, int, int], order: str
) -> None:
    """``launcher: torchrun`` (every host's ranks one contiguous block): every mapping torchrun can launch on a
    fragmented three-level cluster costs at least the bound, which counts how many members of a group any block
    of consecutive ranks holds; and the bound is at least the one without the launcher."""
    topo, state = _three_level(free, 4, 2)
    tp, pp, dp = shape
    base = with_order(megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=1024, layers=4, micro_batches=2), order)
    job = dataclasses.replace(base, launcher="torchrun")
    traffic = job_traffic(job)
    cands = candidate_devices(topo, state, job)
    reports = [
        evaluate(topo, state, job, m, traffic=traffic, check=False)
        for m in _contiguous_mappings(topo, cands, job.ranks)
        if not validate(topo, state, job, m, traffic=traffic)
    ]
    bound = comm_bound(topo, state, job, traffic, cands)
    assert bound.value <= min(r.comm_seconds for r in reports) * (1 + 1e-12), bound.source
    assert bound.step <= min(r.step_seconds for r in reports) * (1 + 1e-12), bound.source
    free_bound = comm_bound(topo, state, base, job_traffic(base), candidate_devices(topo, state, base))
    assert bound.value >= free_bound.value * (1 - 1e-12)


@pytest.mark.parametrize("free", [[2, 2, 2, 2], [2, 2, 1, 1]])
@pytest.mark.parametrize("shape,order", [((2, 1, 2), "dp-tp-pp-cp-ep"), ((2, 2, 1), "pp-tp-dp-cp-ep")])
def test_bound_with_torchrun_meets_the_least_contiguous_mapping(
    free: list[int], shape: tuple[int, int, int], order: str
) -> None:
    """TP pairs of ranks two apart on 2-GPU hosts: without the launcher a TP pair can share a host, with it a
    host holds two consecutive ranks, never a TP pair. The bound with torchrun is above the free one and meets
    the least of every contiguous mapping (enumerated)."""
    topo, state = _three_level(free, 4, 2)
    tp, pp, dp = shape
    base = with_order(megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=1024, layers=4, micro_batches=2), order)
    job = dataclasses.replace(base, launcher="torchrun")
    cands = candidate_devices(topo, state, job)
    least = min(
        evaluate(topo, state, job, m, check=False).comm_seconds
        for m in _contiguous_mappings(topo, cands, job.ranks)
        if not validate(topo, state, job, m)
    )
    bound = comm_bound(topo, state, job, job_traffic(job), cands)
    free_bound = comm_bound(topo, state, base, job_traffic(base), cands)
    assert bound.value > free_bound.value * 1.5
    assert bound.value == pytest.approx(least, rel=1e-9), bound.argument
