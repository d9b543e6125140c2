"""Laws of the cost model, checked with hypothesis:

1. the cost of a mapping does not change when interchangeable devices are renamed (devices permuted inside a
   uniform host; two identical hosts of one leaf swapped), with the state renamed alike;
2. moving a TP group from two nodes onto one node never raises its cost, whatever the tiers;
3. `evaluate` refuses exactly the mappings `validate` rejects (InvalidMappingError with the same violations).

Plus traffic and export invariants that every structured job and every mapping must satisfy. The readers'
robustness against malformed documents: tests/test_reader_errors.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.cost.evaluate import evaluate
from placement.cost.report import InvalidMappingError
from placement.cost.surrogate import surrogate_report
from placement.io.export import export, export_files, seats_from_document
from placement.messages.domain import assignments
from placement.messages.files import message_to_dict
from placement.model.job import (
    DIMENSIONS,
    CollectiveKind,
    Constraints,
    Edge,
    Group,
    Job,
    ModelShape,
    ParallelSpec,
    SpreadRule,
)
from placement.model.links import DEFAULT_INTRA_NODE_TIERS, RailPolicy, Tier, intra_node_tier
from placement.model.state import ClusterState, Uplink
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.model.validate import validate
from placement.v1 import placement_pb2 as pb
from tests.conftest import tree

FAST = settings(deadline=None, max_examples=60, database=None)
KINDS = list(CollectiveKind)


def tiers() -> st.SearchStrategy[Tier]:
    return st.builds(Tier, st.floats(1.0, 1000.0), st.floats(0.0, 20.0))


def uniform_matrix(n: int, code: str) -> list[str]:
    return [" ".join("X" if a == b else code for b in range(n)) for a in range(n)]


@dataclass(frozen=True)
class Case:
    topo: Topology
    state: ClusterState
    job: Job
    mapping: list[int]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A small tree (uniform hosts, optionally a uniform NV matrix), a degraded state, an explicit job, a mapping."""
    gpus = draw(st.sampled_from([2, 4]))
    hpl = draw(st.integers(2, 3))
    matrix = uniform_matrix(gpus, draw(st.sampled_from(["NV4", "NV18"]))) if draw(st.booleans()) else None
    topo = tree(
        hosts_per_leaf=hpl,
        leaves=2,
        gpus=gpus,
        matrix=matrix,
        node_tier=draw(tiers()),
        leaf_tier=draw(tiers()),
        spine_tier=draw(tiers()),
    )
    n_dev = topo.num_devices
    ranks = draw(st.integers(2, min(10, n_dev)))
    mapping = draw(st.permutations(range(n_dev)))[:ranks]
    member_sets = st.lists(st.integers(0, ranks - 1), min_size=2, max_size=ranks, unique=True).map(tuple)
    groups = draw(
        st.lists(
            st.builds(
                Group,
                st.sampled_from(["tp", "dp", "cp"]),
                st.sampled_from(KINDS),
                member_sets,
                st.floats(1e3, 1e9),
                st.integers(1, 8).map(float),
                st.sampled_from([1.0, 0.5]),
            ),
            min_size=1,
            max_size=4,
        )
    )
    pairs = st.tuples(st.integers(0, ranks - 1), st.integers(0, ranks - 1)).filter(lambda p: p[0] != p[1])
    edges = [
        Edge("pp", a, b, size)
        for (a, b), size in draw(st.lists(st.tuples(pairs, st.floats(1e3, 1e8)), max_size=3))
    ]
    devices = st.integers(0, n_dev - 1)
    slow = draw(st.dictionaries(devices, st.floats(1.0, 4.0), max_size=3))
    pair_slow: dict[tuple[int, int], float] = {}
    if draw(st.booleans()):
        a = draw(devices)
        b = topo.devices_in_domain[0][topo.devices[a].host_index][(topo.devices[a].local_index + 1) % gpus]
        pair_slow[(min(a, b), max(a, b))] = draw(st.floats(1.0, 4.0))
    up_slow = {
        Uplink(lv, draw(st.integers(0, len(topo.domain_names[lv]) - 1))): draw(st.floats(1.0, 4.0))
        for lv in draw(st.sets(st.sampled_from([0, 1]), max_size=2))
    }
    state = ClusterState(device_slowdown=slow, pair_slowdown=pair_slow, uplink_slowdown=up_slow)
    return Case(topo, state, Job("j", ranks, groups=tuple(groups), edges=tuple(edges)), list(mapping))


def renamed(case: Case, perm: dict[int, int], host_perm: dict[int, int]) -> Case:
    """The same case with device d called perm[d] (and host h called host_perm[h]) everywhere."""
    s = case.state
    state = ClusterState(
        device_slowdown={perm[d]: f for d, f in s.device_slowdown.items()},
        pair_slowdown={tuple(sorted((perm[a], perm[b]))): f for (a, b), f in s.pair_slowdown.items()},  # type: ignore[misc]
        uplink_slowdown={
            Uplink(u.level, host_perm.get(u.domain, u.domain) if u.level == 0 else u.domain): f
            for u, f in s.uplink_slowdown.items()
        },
    )
    return Case(case.topo, state, case.job, [perm[d] for d in case.mapping])


def assert_same_cost(a: Case, b: Case) -> None:
    ra = evaluate(a.topo, a.state, a.job, a.mapping)
    rb = evaluate(b.topo, b.state, b.job, b.mapping)
    assert rb.seconds == pytest.approx(ra.seconds, rel=1e-9)
    assert rb.by_label_tier.keys() == ra.by_label_tier.keys()
    for k, v in ra.by_label_tier.items():
        assert rb.by_label_tier[k] == pytest.approx(v, rel=1e-9)


# ---- law 1: renaming interchangeable devices ----------------------------------------------------------------------


@FAST
@given(cases(), st.data())
def test_cost_is_invariant_under_permuting_devices_inside_a_uniform_host(
    case: Case, data: st.DataObject
) -> None:
    topo = case.topo
    h = data.draw(st.integers(0, len(topo.host_names) - 1), label="host")
    assert topo.uniform_hosts[h]
    devs = topo.devices_in_domain[0][h]
    shuffled = data.draw(st.permutations(devs), label="order")
    perm = {d: d for d in range(topo.num_devices)} | dict(zip(devs, shuffled, strict=True))
    assert_same_cost(case, renamed(case, perm, {}))


@FAST
@given(cases(), st.data())
def test_cost_is_invariant_under_swapping_two_identical_hosts_of_one_leaf(
    case: Case, data: st.DataObject
) -> None:
    topo = case.topo
    leaf = data.draw(st.integers(0, len(topo.domain_names[1]) - 1), label="leaf")
    a, b = data.draw(
        st.lists(st.sampled_from(topo.children[1][leaf]), min_size=2, max_size=2, unique=True), label="hosts"
    )
    da, db = topo.devices_in_domain[0][a], topo.devices_in_domain[0][b]
    perm = (
        {d: d for d in range(topo.num_devices)}
        | dict(zip(da, db, strict=True))
        | dict(zip(db, da, strict=True))
    )
    assert_same_cost(case, renamed(case, perm, {a: b, b: a}))


def test_renaming_is_not_vacuous() -> None:
    # the same group on a *different* kind of position does change cost: the check above can fail
    topo = tree()
    job = Job("j", 2, groups=(Group("tp", CollectiveKind.ALL_REDUCE, (0, 1), 1e8, 1),))
    assert (
        evaluate(topo, ClusterState(), job, [0, 1]).seconds
        < evaluate(topo, ClusterState(), job, [0, 4]).seconds
    )


# ---- law 2: a TP group on one node is never dearer than split over two nodes ---------------------------------------


@FAST
@given(
    node=tiers(),
    nv=st.sampled_from([None, "NV2", "NV18", "PIX", "SYS"]),
    slower=st.tuples(st.floats(0.01, 1.0), st.floats(0.01, 1.0)),
    later=st.tuples(st.floats(0, 20), st.floats(0, 20)),
    gpus=st.sampled_from([2, 4, 8]),
    cross_leaf=st.booleans(),
    rails=st.booleans(),
    data=st.data(),
    hidden=st.sampled_from([1024, 4096, 8192]),
    layers=st.integers(1, 8),
    micro_batches=st.integers(1, 8),
)
def test_moving_a_tp_group_onto_one_node_never_raises_its_cost(
    node: Tier,
    nv: str | None,
    slower: tuple[float, float],
    later: tuple[float, float],
    gpus: int,
    cross_leaf: bool,
    rails: bool,
    data: st.DataObject,
    hidden: int,
    layers: int,
    micro_batches: int,
) -> None:
    # any hierarchy in which a host's own links (its tier, or its uniform matrix code) are at least as fast as
    # the network tiers above it, which may be in any order among themselves
    inside = intra_node_tier(nv, DEFAULT_INTRA_NODE_TIERS) if nv else node
    leaf, spine = (
        Tier(inside.bandwidth_gbps * f, inside.latency_us + d) for f, d in zip(slower, later, strict=True)
    )
    topo = tree(
        hosts_per_leaf=2,
        leaves=2,
        gpus=gpus,
        node_tier=node,
        leaf_tier=leaf,
        spine_tier=spine,
        matrix=uniform_matrix(gpus, nv) if nv else None,
        rails=list(range(gpus)) if rails else None,
        rail_policy=RailPolicy(3.0, 0.5) if rails else None,
    )
    tp = data.draw(st.integers(2, gpus), label="tp")
    on_a = data.draw(st.integers(1, tp - 1), label="members on the first node")
    host_a, host_b = 0, (2 if cross_leaf else 1)
    devs = topo.devices_in_domain[0]
    split = [*devs[host_a][:on_a], *devs[host_b][: tp - on_a]]
    one = list(devs[3][:tp])
    job = Job(
        "tp",
        tp,
        parallel=ParallelSpec(tp=tp),
        model=ModelShape(1e9, hidden, layers, 2048, micro_batches=micro_batches),
    )
    # a law of the slowest-path surrogate; the step model picks NCCL's tree across hosts where it is faster, and with
    # equal tiers a latency-bound tree over two hosts can beat a ring on one by a few microseconds
    cost_one = surrogate_report(topo, ClusterState(), job, one).by_label["tp"]
    cost_split = surrogate_report(topo, ClusterState(), job, split).by_label["tp"]
    assert cost_one <= cost_split * (1 + 1e-12)
    if leaf.bandwidth_gbps <= 0.5 * inside.bandwidth_gbps and leaf.latency_us >= 2 * inside.latency_us:
        # clearly slower network: the step model agrees
        v2_one = evaluate(topo, ClusterState(), job, one).by_label["tp"]
        assert v2_one <= evaluate(topo, ClusterState(), job, split).by_label["tp"] * (1 + 1e-12)


@FAST
@given(node=tiers(), leaf=tiers(), gpus=st.sampled_from([4, 8]), data=st.data())
def test_a_split_keeping_pairs_on_each_host_never_beats_one_host(
    node: Tier, leaf: Tier, gpus: int, data: st.DataObject
) -> None:
    # whatever the tiers (PCIe hosts under a faster NIC included): a group with >= 2 members on some host spans
    # the host tier as well, so it is never cheaper than the same group on one host
    topo = tree(hosts_per_leaf=2, leaves=1, gpus=gpus, node_tier=node, leaf_tier=leaf)
    tp = data.draw(st.integers(3, gpus), label="tp")
    on_a = data.draw(st.integers(2, tp - 1), label="members on the first node")
    devs = topo.devices_in_domain[0]
    job = Job("tp", tp, parallel=ParallelSpec(tp=tp), model=ModelShape(1e9, 4096, 4, 2048))
    # a law of the slowest-path surrogate; the step model's hierarchical all-reduce can beat a one-host ring by a
    # few microseconds of latency when the network tier's latency is below the host tier's
    one = surrogate_report(topo, ClusterState(), job, list(devs[0][:tp])).comm_seconds
    split = surrogate_report(topo, ClusterState(), job, [*devs[0][:on_a], *devs[1][: tp - on_a]]).comm_seconds
    assert one <= split * (1 + 1e-12)


# ---- law 3: evaluate refuses what validate rejects -----------------------------------------------------------------


@st.composite
def maybe_invalid(draw: st.DrawFn) -> Case:
    topo = tree(kind=draw(st.sampled_from(["H100", "A100"])))
    n_dev = topo.num_devices
    ranks = draw(st.integers(2, 6))
    devices = st.integers(0, n_dev - 1)
    state = ClusterState(
        occupied=draw(st.dictionaries(devices, st.sampled_from(["j", "other"]), max_size=4)),
        failed=frozenset(draw(st.sets(devices, max_size=2))),
        failed_pairs=frozenset({(0, 1)}) if draw(st.booleans()) else frozenset(),
        failed_uplinks=frozenset({Uplink(1, 0)}) if draw(st.booleans()) else frozenset(),
    )
    cons = Constraints(
        require={"tp": "node"} if draw(st.booleans()) else {},
        spread=(SpreadRule("leaf", max_ranks_per_domain=draw(st.integers(1, 4))),)
        if draw(st.booleans())
        else (),
        pins={0: "h0/gpu0"} if draw(st.booleans()) else {},
        exclude=("h3",) if draw(st.booleans()) else (),
    )
    groups = (
        Group("tp", CollectiveKind.ALL_REDUCE, (0, 1), 1e7, 2.0),
        Group("dp", CollectiveKind.ALL_GATHER, tuple(range(ranks)), 1e8, 1.0),
    )
    job = Job(
        "j",
        ranks,
        draw(st.sampled_from([None, "H100"])),
        groups=groups,
        edges=(Edge("pp", 0, ranks - 1, 1e6),),
        constraints=cons,
    )
    length = draw(st.sampled_from([ranks, ranks, ranks, ranks - 1, ranks + 1]))
    if draw(st.booleans()):
        mapping = draw(st.lists(devices, min_size=length, max_size=length))  # duplicates likely
    else:
        mapping = draw(st.permutations(range(n_dev)))[:length]
    return Case(topo, state, job, list(mapping))


@FAST
@given(maybe_invalid())
def test_evaluate_refuses_exactly_the_mappings_validate_rejects(case: Case) -> None:
    violations = validate(case.topo, case.state, case.job, case.mapping)
    if violations:
        with pytest.raises(InvalidMappingError) as info:
            evaluate(case.topo, case.state, case.job, case.mapping)
        assert info.value.violations == violations
        assert str(info.value).startswith(f"the mapping breaks {len(violations)} hard rule(s):")
    else:
        assert evaluate(case.topo, case.state, case.job, case.mapping).seconds > 0


# ---- traffic and export invariants ---------------------------------------------------------------------------------


@FAST
@given(
    sizes=st.fixed_dictionaries({d: st.sampled_from([1, 2, 3]) for d in DIMENSIONS}),
    order=st.permutations(DIMENSIONS),
)
def test_every_dimension_partitions_the_ranks(sizes: dict[str, int], order: list[str]) -> None:
    par = ParallelSpec(order="-".join(order), **sizes)
    mod = ModelShape(1e9, 512, 6 * sizes["pp"], 1024, experts=3 * sizes["ep"], top_k=1, expert_parameters=1e8)
    t = job_traffic(Job("j", par.world_size, parallel=par, model=mod))
    for r in range(par.world_size):
        assert par.rank_of(par.coords(r)) == r
    for label in ("tp", "cp", "ep"):
        gs = [g for g in t.groups if g.label == label]
        if sizes[label] == 1:
            assert gs == []
            continue
        assert sorted(m for g in gs for m in g.members) == list(range(par.world_size))
        for g in gs:  # members differ only in this dimension's coordinate
            coords = [par.coords(m) for m in g.members]
            assert len(g.members) == sizes[label]
            assert all(c[d] == coords[0][d] for c in coords for d in DIMENSIONS if d != label)
    assert len(t.edges) == (sizes["pp"] - 1) * par.world_size // sizes["pp"]
    for e in t.edges:
        a, b = par.coords(e.src), par.coords(e.dst)
        assert b["pp"] == a["pp"] + 1 and all(a[d] == b[d] for d in DIMENSIONS if d != "pp")


@FAST
@given(data=st.data())
def test_exported_seats_round_trip(data: st.DataObject) -> None:
    topo = tree(hosts_per_leaf=2, leaves=2, gpus=4)
    mapping = data.draw(st.permutations(range(topo.num_devices)))[: data.draw(st.integers(1, 16))]
    doc = message_to_dict(
        pb.PlaceResponse(result=pb.PlacementResult(job="j", mapping=assignments(topo, mapping)))
    )
    seats = seats_from_document(doc)
    assert [f"{h}/gpu{k}" for h, k in seats] == [topo.devices[d].id for d in mapping]
    assert export("hostfile", seats).splitlines() == [topo.devices[d].host for d in mapping]
    files = export_files("dotenv", seats)
    for r, d in enumerate(mapping):  # each rank sees only its GPU, as device 0
        fields = dict(
            line.split("=", 1) for line in files[f"rank-{r}.env"].splitlines() if not line.startswith("#")
        )
        assert (fields["RANK"], fields["LOCAL_RANK"], fields["CUDA_VISIBLE_DEVICES"]) == (
            str(r),
            "0",
            str(topo.devices[d].local_index),
        )


@FAST
@given(case=cases(), extra=st.floats(1.0, 8.0), data=st.data())
def test_degrading_a_used_device_never_makes_the_step_faster(
    case: Case, extra: float, data: st.DataObject
) -> None:
    d = data.draw(st.sampled_from(case.mapping), label="device")
    s = case.state
    worse = ClusterState(
        device_slowdown=dict(s.device_slowdown) | {d: max(extra, s.device_slowdown.get(d, 1.0))},
        pair_slowdown=s.pair_slowdown,
        uplink_slowdown=s.uplink_slowdown,
    )
    before = evaluate(case.topo, s, case.job, case.mapping).seconds
    after = evaluate(case.topo, worse, case.job, case.mapping).seconds
    assert after >= before * (1 - 1e-12)
