"""Capacity of shapes with a balance or segment rule (placement.decide.capacity): on clusters of 12 devices the count
is never above the most disjoint copies a brute force over the devices finds (each copy a device set that passes
the independent validator in some rank order), the upper bound never below it, per domain too; copies that only
fit unbalanced are not counted; placed copies are balanced."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from placement.decide.capacity import balanced_copies, capacity
from placement.io.native import cluster_from_dict, job_from_dict, state_from_dict
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.validate import validate
from placement.solve import SolveOptions
from tests.support_server import cluster_doc, job_doc

OPTS = SolveOptions(time_limit_s=1.0, workers=1, deterministic=True)


def _topo() -> Topology:
    """3 leaves of 2 hosts of 2 devices."""
    topo, _ = cluster_from_dict(cluster_doc(6, gpus=2, per_leaf=2), "c")
    return topo


def _job(tp: int, dp: int, **constraints: Any) -> Job:
    doc = job_doc(tp, dp, name="shape")
    doc["constraints"] = {**doc["constraints"], **constraints}
    return job_from_dict(doc, "j")


def _state(topo: Topology, busy: Sequence[int]) -> ClusterState:
    occ = [{"job": f"o{d}", "devices": [topo.devices[d].id]} for d in busy]
    return state_from_dict({"occupied": occ}, topo, "s")


def _valid_sets(
    topo: Topology, state: ClusterState, job: Job, devices: Sequence[int]
) -> list[frozenset[int]]:
    """Every set of the job's size among `devices` that some rank order makes valid (the validator judges)."""
    out = []
    for combo in itertools.combinations(devices, job.ranks):
        if any(not validate(topo, state, job, list(p)) for p in itertools.permutations(combo)):
            out.append(frozenset(combo))
    return out


def _most_disjoint(sets: list[frozenset[int]]) -> int:
    """The most pairwise disjoint sets: the lowest device some set holds is either left out or in one of them."""

    @functools.cache
    def best(avail: frozenset[int]) -> int:
        fit = [s for s in sets if s <= avail]
        if not fit:
            return 0
        low = min(min(s) for s in fit)
        return max(best(avail - {low}), *(1 + best(avail - s) for s in fit if low in s))

    return best(frozenset().union(*sets)) if sets else 0


SHAPES: list[tuple[str, int, int, dict[str, Any]]] = [
    # name, tp, dp, constraints (tp is required inside a node)
    ("4 over leaves", 1, 4, {"balance": {"level": "leaf", "slice": 1}}),
    ("3 over leaves", 1, 3, {"balance": {"level": "leaf", "slice": 1}}),
    ("4 in slices of 2 over leaves", 1, 4, {"balance": {"level": "leaf", "slice": 2}}),
    ("tp2 x2 in slices of 2 over leaves", 2, 2, {"balance": {"level": "leaf", "slice": 2}}),
    ("4 over nodes", 1, 4, {"balance": {"level": "node", "slice": 1}}),
    (
        "segments of a node in a leaf, balanced",
        1,
        4,
        {
            "segment": {"nodes": 1, "level": "leaf"},
            "balance": {"level": "leaf", "slice": 2},
        },
    ),
    ("segments of 2 nodes in a leaf", 1, 4, {"segment": {"nodes": 2, "level": "leaf"}}),
    (
        "tp2 x2 over nodes in slices of 1 (placed one by one)",
        2,
        2,
        {"balance": {"level": "node", "slice": 1}},
    ),
]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("name", "tp", "dp", "rules"), SHAPES)
def test_counts_are_bounded_by_a_brute_force_over_the_devices(
    name: str, tp: int, dp: int, rules: dict[str, Any], seed: int
) -> None:
    rng = random.Random(seed)
    topo = _topo()
    state = _state(topo, rng.sample(range(topo.num_devices), rng.choice((2, 3, 4, 5))))
    job = _job(tp, dp, **rules)
    (shape,) = capacity(topo, state, [job], options=OPTS).shapes
    free = [d for d in range(topo.num_devices) if d not in state.occupied]
    sets = _valid_sets(topo, state, job, free)
    best = _most_disjoint(sets)
    assert shape.copies <= best <= shape.upper_bound, (name, sorted(state.occupied), shape.notes)
    if "balance" in rules:
        assert any("balance" in n for n in shape.notes)  # the answer says how the rule was counted
    listed = {(d.level, d.domain): d.copies for d in shape.domains}
    for li, lv in enumerate(topo.levels):
        for k, dname in enumerate(topo.domain_names[li]):
            inside = set(topo.devices_in_domain[li][k])
            alone = _most_disjoint([s for s in sets if s <= inside])
            assert listed.get((lv.name, dname), 0) <= alone, (name, lv.name, dname)


def test_copies_that_only_fit_unbalanced_are_not_counted() -> None:
    """leaf01 has 4 free devices, leaf02 3, leaf03 1: two copies of 4 ranks fit on the 8 free devices, but in
    slices of 2 balanced over leaves a copy takes 4 in one leaf or 2 + 2: after either, no second one fits."""
    topo = _topo()
    state = _state(topo, [4, 8, 9, 10])
    job = _job(1, 4, balance={"level": "leaf", "slice": 2})
    free = [d for d in range(topo.num_devices) if d not in state.occupied]
    unbalanced = len(free) // job.ranks
    best = _most_disjoint(_valid_sets(topo, state, job, free))
    (shape,) = capacity(topo, state, [job], options=OPTS).shapes
    assert best < unbalanced
    assert shape.copies <= best <= shape.upper_bound
    assert shape.copies >= 1  # the one balanced copy is found


def test_placed_copies_are_balanced_and_disjoint() -> None:
    topo = _topo()
    state = _state(topo, [0, 5])
    job = _job(1, 4, balance={"level": "leaf", "slice": 2})
    (shape,) = capacity(topo, state, [job], place_copies=2, options=OPTS).shapes
    assert len(shape.placed) == min(2, shape.copies) and shape.placed
    occupied = dict(state.occupied)
    col = topo.domain_column(1)
    for p in shape.placed:
        st = dataclasses.replace(state, occupied=dict(occupied))
        assert validate(topo, st, job, p.mapping) == []
        per_leaf = Counter(col[d] for d in p.mapping).values()
        assert all(c % 2 == 0 for c in per_leaf) and max(per_leaf) - min(per_leaf) <= 2
        occupied.update({d: f"copy{p.index}" for d in p.mapping})


def _most_balanced(rooms: tuple[int, ...], slices: int) -> int:
    """The most disjoint balanced copies over domain rooms, by trying every split of every copy."""

    @functools.cache
    def best(rs: tuple[int, ...]) -> int:
        out = 0
        for d in range(1, min(slices, len(rs)) + 1):
            q, r = divmod(slices, d)
            for combo in itertools.combinations(range(len(rs)), d):
                for hi in itertools.combinations(combo, r):
                    take = {i: q + (i in hi) for i in combo}
                    if all(rs[i] >= t for i, t in take.items()):
                        left = tuple(sorted(rs[i] - take.get(i, 0) for i in range(len(rs))))
                        out = max(out, 1 + best(left))
        return out

    return best(tuple(sorted(rooms)))


@pytest.mark.parametrize("seed", range(30))
def test_balanced_copies_are_a_lower_bound_of_an_exhaustive_split(seed: int) -> None:
    rng = random.Random(seed)
    rooms = [rng.randrange(0, 6) for _ in range(rng.randrange(1, 6))]
    slices = rng.randrange(1, 7)
    got = balanced_copies(rooms, slices)
    assert got <= _most_balanced(tuple(rooms), slices) <= sum(rooms) // slices
