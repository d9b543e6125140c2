"""Defragmentation hint: the least moves to free whole hosts in one domain, checked against brute force, and
its reasons when no domain can be cleared."""

from __future__ import annotations

import itertools

import pytest

from placement.errors import InputError
from placement.model.state import ClusterState
from placement.sim.whatif.defrag import defrag
from tests.conftest import tree


def _state(topo: object, occ: dict[str, str], failed: tuple[str, ...] = ()) -> ClusterState:
    idx = topo.device_index  # type: ignore[attr-defined]
    return ClusterState(
        occupied={idx(d): j for d, j in occ.items()}, failed=frozenset(idx(f) for f in failed)
    )


OCC = {
    "h0/gpu0": "a",
    "h0/gpu1": "a",
    "h1/gpu0": "b",
    "h2/gpu0": "c",
    "h2/gpu1": "c",
    "h2/gpu2": "c",
    "h3/gpu1": "d",
    "h4/gpu0": "e",
    "h5/gpu2": "f",
    "h5/gpu3": "f",
    "h6/gpu0": "g",
    "h7/gpu3": "a",
}


def test_least_moves_match_brute_force() -> None:
    topo = tree(4, 2, 4)  # leaves l0 (h0..h3) and l1 (h4..h7), 4 GPUs per host
    st = _state(topo, OCC, failed=("h6/gpu1",))
    for need in (1, 2, 3):
        res = defrag(topo, st, "leaf", need)
        best = None
        for leaf in range(2):
            hosts = [h for h in range(8) if h // 4 == leaf]
            for pick in itertools.combinations(hosts, need):
                devs = [d for h in pick for d in topo.devices_in_domain[0][h]]
                if any(d in st.failed for d in devs):
                    continue
                moved = sum(1 for d in devs if d in st.occupied)
                best = moved if best is None else min(best, moved)
        assert res.answers and res.answers[0].moved_ranks == best
        jobs = res.answers[0].jobs
        assert sum(jobs.values()) == res.answers[0].moved_ranks
        touched = [a.jobs_touched for a in res.answers]
        assert touched == sorted(touched, reverse=True)  # a Pareto front: more moves only for fewer jobs


def test_fits_today_keep_and_reasons() -> None:
    topo = tree(4, 2, 4)
    st = _state(topo, OCC, failed=("h6/gpu1",))
    assert defrag(topo, ClusterState(), "leaf", 4).fits_today
    kept = defrag(topo, st, "leaf", 3, keep=("c",))
    assert all("c" not in a.jobs for a in kept.answers)
    none = defrag(topo, st, "leaf", 4, keep=("a",))
    assert not none.answers and "the best has 3" in none.reasons[0]
    with pytest.raises(InputError) as e:
        defrag(topo, st, "rack", 0)
    assert "level" in str(e.value) and "hosts" in str(e.value)
