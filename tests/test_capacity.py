"""Capacity (placement.decide.capacity): the greedy count is a lower bound and the upper bound an upper bound of the
true most disjoint copies, found here by an exhaustive search on small clusters (equal when the units have one
size), per domain too; placed copies are valid and disjoint; fragmentation follows its definition."""

from __future__ import annotations

import dataclasses
import functools
import random
from typing import Any

import pytest

from placement.decide.capacity import capacity
from placement.errors import InputError
from placement.io.native import cluster_from_dict, job_from_dict, state_from_dict
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.model.validate import validate
from placement.solve import SolveOptions, Strategy
from tests.support_server import cluster_doc, job_doc


def _state(topo: Topology, seed: int, load: float) -> ClusterState:
    rng = random.Random(seed)
    occupied = [{"job": f"o{d.index}", "devices": [d.id]} for d in topo.devices if rng.random() < load]
    failed = [d.id for d in topo.devices if rng.random() < 0.05]
    failed = [f for f in failed if all(f not in o["devices"] for o in occupied)]
    return state_from_dict({"occupied": occupied, "failed": failed}, topo, "s")


def _explicit(unit_sizes: list[int], level: str) -> Job:
    """An explicit job whose ranks form groups of the given sizes (label u, required inside one `level`), the
    groups chained by one edge each so that the job has traffic."""
    groups: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    r = 0
    for s in unit_sizes:
        if s > 1:
            groups.append({"label": "u", "members": list(range(r, r + s)), "bytes": 1e6})
        if r:
            edges.append({"label": "x", "src": r - 1, "dst": r, "bytes": 1e6})
        r += s
    doc = {
        "name": "mixed" + "-".join(map(str, unit_sizes)),
        "ranks": r,
        "groups": groups,
        "edges": edges,
        "constraints": {"require": {"u": level}},
    }
    return job_from_dict(doc, "j")


def _most_copies(free: list[int], sizes: list[int], ranks: int, required: bool) -> int:
    """The most disjoint copies, by exhaustive search: each unit of each copy into a domain with room (domains
    are interchangeable when they have equal free devices, so states are sorted tuples)."""
    if not required:
        return sum(free) // ranks

    @functools.cache
    def fits(state: tuple[int, ...], units: tuple[int, ...]) -> bool:
        if not units:
            return True
        s, rest = units[0], units[1:]
        for i, f in enumerate(state):
            if f >= s and (i == 0 or state[i - 1] != f):  # equal domains: try one
                nxt = list(state)
                nxt[i] -= s
                if fits(tuple(sorted(nxt, reverse=True)), rest):
                    return True
        return False

    k = 0
    while fits(tuple(sorted(free, reverse=True)), tuple(sorted(sizes * (k + 1), reverse=True))):
        k += 1
    return k


def _free_per_domain(
    topo: Topology, state: ClusterState, job: Job, level: int, within: set[int]
) -> list[int]:
    out: dict[int, int] = {}
    for d in topo.devices:
        if d.index in within and state.usable(d.index) and (job.device_kind in (None, d.kind)):
            k = topo.domain_of(d.index, level)
            out[k] = out.get(k, 0) + 1
    return list(out.values())


SHAPES: list[tuple[str, Any]] = [
    ("tp4x2", lambda: job_from_dict(job_doc(4, 2, name="tp4x2"), "j")),
    ("tp2x3", lambda: job_from_dict(job_doc(2, 3, name="tp2x3"), "j")),
    ("tp8", lambda: job_from_dict(job_doc(8, 1, name="tp8"), "j")),
    ("free3", lambda: job_from_dict({**job_doc(1, 3, name="free3"), "constraints": {}}, "j")),
    ("mixed-3-1-2", lambda: _explicit([3, 1, 2], "node")),
    ("mixed-5-3-leaf", lambda: _explicit([5, 3], "leaf")),
]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize(("name", "make"), SHAPES)
def test_counts_match_an_exhaustive_count(name: str, make: Any, seed: int) -> None:
    topo, _ = cluster_from_dict(cluster_doc(6, gpus=8, per_leaf=2), "c")
    state = _state(topo, seed, load=0.15 + 0.1 * seed)
    job = make()
    res = capacity(topo, state, [job])
    (shape,) = res.shapes
    req_level = (
        topo.level_index(next(iter(job.constraints.require.values()))) if job.constraints.require else 0
    )
    sizes = [len(u) for u in _units(job)] if job.constraints.require else [1] * job.ranks
    everything = set(range(topo.num_devices))
    best = _most_copies(
        _free_per_domain(topo, state, job, req_level, everything),
        sizes,
        job.ranks,
        bool(job.constraints.require),
    )
    assert shape.method == "count"
    assert shape.copies <= best <= shape.upper_bound
    if len(set(sizes)) == 1:
        assert shape.copies == best == shape.upper_bound
    # per domain: every domain of every level, alone
    listed = {(d.level, d.domain): d.copies for d in shape.domains}
    for li, lv in enumerate(topo.levels):
        for k, dname in enumerate(topo.domain_names[li]):
            inside = set(topo.devices_in_domain[li][k])
            if li <= req_level:
                alone = sum(_free_per_domain(topo, state, job, li, inside)) // job.ranks
            else:
                alone = _most_copies(
                    _free_per_domain(topo, state, job, req_level, inside),
                    sizes,
                    job.ranks,
                    bool(job.constraints.require),
                )
            got = listed.get((lv.name, dname), 0)
            assert got <= alone, (lv.name, dname)
            if len(set(sizes)) == 1:
                assert got == alone, (lv.name, dname)


def _units(job: Job) -> list[tuple[int, ...]]:
    """The rank sets that must share a domain, from the job's groups (independently of placement.solve.units)."""
    label = next(iter(job.constraints.require))
    parent = list(range(job.ranks))

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for g in job_traffic(job).groups:
        if g.label == label:
            for m in g.members[1:]:
                parent[find(m)] = find(g.members[0])
    comps: dict[int, list[int]] = {}
    for r in range(job.ranks):
        comps.setdefault(find(r), []).append(r)
    return [tuple(c) for c in comps.values()]


def test_placed_copies_are_valid_disjoint_and_as_many_as_asked() -> None:
    topo, _ = cluster_from_dict(cluster_doc(6, gpus=8, per_leaf=2), "c")
    state = _state(topo, 5, 0.3)
    job = job_from_dict(job_doc(2, 2, name="tp2x2"), "j")
    opts = SolveOptions(strategy=Strategy.KUEUE_TAS, time_limit_s=2.0)
    res = capacity(topo, state, [job], place_copies=3, options=opts)
    (shape,) = res.shapes
    assert len(shape.placed) == min(3, shape.copies)
    occupied = dict(state.occupied)
    for p in shape.placed:
        st = dataclasses.replace(state, occupied=dict(occupied))
        assert validate(topo, st, job, p.mapping) == []  # free on the state the earlier copies left
        assert p.report.step_seconds > 0
        occupied.update({d: f"copy{p.index}" for d in p.mapping})


def test_spread_rules_are_counted_by_placing_copies() -> None:
    topo, _ = cluster_from_dict(cluster_doc(4, gpus=4, per_leaf=2), "c")
    doc = job_doc(2, 2, name="spread")
    doc["constraints"]["spread"] = [{"kind": "leaf", "min_domains": 2}]
    job = job_from_dict(doc, "j")
    res = capacity(topo, ClusterState(), [job], options=SolveOptions(time_limit_s=1.0))
    (shape,) = res.shapes
    assert shape.method == "place"
    assert 1 <= shape.copies <= shape.upper_bound == 4  # 16 devices, 4 ranks each


def test_fragmentation_follows_its_definition() -> None:
    topo, _ = cluster_from_dict(cluster_doc(4, gpus=4, per_leaf=2), "c")
    # leaf01: node01 4 free, node02 2 free; leaf02: node03 1 free, node04 1 free
    occ = ["node02/gpu0", "node02/gpu1", "node03/gpu0", "node03/gpu1", "node03/gpu2"]
    occ += ["node04/gpu0", "node04/gpu1", "node04/gpu2"]
    state = state_from_dict({"occupied": [{"job": "o", "devices": occ}]}, topo, "s")
    by = {f.level: f for f in capacity(topo, state, [job_from_dict(job_doc(2, 1), "j")]).fragmentation}
    assert by["node"].fragmentation == 0 and by["node"].largest_free_block == 4
    assert by["leaf"].fragmentation == pytest.approx(((1 - 4 / 6) + (1 - 1 / 2)) / 2)
    assert by["leaf"].largest_free_block == 6 and by["leaf"].domains_with_free == 2
    assert by["spine"].fragmentation == pytest.approx(1 - 6 / 8)
    assert by["spine"].free == 8


def test_bad_input_names_the_field_the_value_and_the_rule() -> None:
    topo, _ = cluster_from_dict(cluster_doc(2, gpus=4, per_leaf=2), "c")
    bad = job_from_dict({**job_doc(2, 1, name="b"), "constraints": {"require": {"tp": "rack"}}}, "j")
    with pytest.raises(InputError) as info:
        capacity(topo, ClusterState(), [bad], place_copies=65)
    got = {p.path: p.message for p in info.value.problems}
    assert got["place_copies"] == "must be in 0..64, got 65"
    assert got["shapes[0].constraints.require.tp"].startswith("unknown level 'rack'")
    with pytest.raises(InputError, match="shapes: give at least one job shape"):
        capacity(topo, ClusterState(), [])


def _most_nested(leaves: list[list[int]], top: list[list[int]]) -> int:
    """The most disjoint copies of a copy made of top units (each a list of node-unit sizes, all in one leaf, each
    node unit in one node), by exhaustive search over leaves and nodes."""

    def fits(state: tuple[tuple[int, ...], ...], todo: tuple[tuple[int, ...], ...]) -> bool:
        if not todo:
            return True
        first, rest = todo[0], todo[1:]
        for li, nodes in enumerate(state):
            if li and state[li - 1] == nodes:
                continue  # equal leaves: try one
            for filled in _into_nodes(nodes, first):
                nxt = tuple(sorted((*state[:li], filled, *state[li + 1 :]), reverse=True))
                if fits(nxt, rest):
                    return True
        return False

    start = tuple(sorted((tuple(sorted(lf, reverse=True)) for lf in leaves), reverse=True))
    k = 0
    while fits(start, tuple(tuple(sorted(u, reverse=True)) for u in top * (k + 1))):
        k += 1
    return k


def _into_nodes(nodes: tuple[int, ...], units: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every way (as sorted free counts) to put the node units into the nodes of one leaf."""
    if not units:
        return [nodes]
    out: set[tuple[int, ...]] = set()
    for i, f in enumerate(nodes):
        if f >= units[0]:
            nxt = tuple(sorted((*nodes[:i], f - units[0], *nodes[i + 1 :]), reverse=True))
            out.update(_into_nodes(nxt, units[1:]))
    return sorted(out)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("tp", "pp", "dp"), [(2, 2, 2), (4, 2, 1), (2, 3, 1)])
def test_nested_levels_are_counted_and_bounded_by_an_exhaustive_count(
    tp: int, pp: int, dp: int, seed: int
) -> None:
    """TP inside a node and each pipeline (TP x PP ranks) inside a leaf."""
    topo, _ = cluster_from_dict(cluster_doc(6, gpus=8, per_leaf=2), "c")
    state = _state(topo, seed, load=0.2 + 0.15 * seed)
    doc = job_doc(tp, dp, pp, name=f"tp{tp}pp{pp}dp{dp}")
    doc["model"]["layers"] = 24
    doc["constraints"] = {"require": {"tp": "node", "pp": "leaf"}}
    job = job_from_dict(doc, "j")
    (shape,) = capacity(topo, state, [job]).shapes
    leaves: dict[int, list[int]] = {}
    for h in range(len(topo.host_names)):
        free = sum(1 for d in topo.devices_in_domain[0][h] if state.usable(d))
        leaves.setdefault(topo.parent[0][h], []).append(free)
    best = _most_nested(list(leaves.values()), [[tp] * pp] * dp)
    assert shape.method == "count"
    assert shape.copies <= best <= shape.upper_bound
    assert shape.copies == best  # one unit size per level: best fit finds the most here
    for d in shape.domains:
        if d.level == "leaf":
            k = topo.domain_names[1].index(d.domain)
            assert d.copies == _most_nested([leaves[k]], [[tp] * pp] * dp)
