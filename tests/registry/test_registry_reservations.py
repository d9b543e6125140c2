"""The five reproductions of issue 22, on both backends; each failed on the registry before it (ece7bcc):
an update onto held devices, a full snapshot erasing committed occupancy, Release by job name, a second job of the
same name, and the PostgreSQL pool deadlock of concurrent Reserves. They use only calls that both versions have
(reserve, commit, release, update_state, resolve), and judge by the state a Place by cluster_id sees."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.registry import Refused, Registry, open_store
from placement.registry.audit import audit
from placement.solve import PlacementResult, SolveOptions, place
from tests.registry_util import cluster_doc, fresh_postgres_db, job, store_url

OPTS = SolveOptions(time_limit_s=2.0, workers=1)


def _render(_topo: Topology, res: PlacementResult) -> bytes:
    return repr(res.mapping).encode()


@pytest.fixture(params=["sqlite", "postgres"])
def reg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    for url in store_url(request.param, tmp_path):
        r = Registry(open_store(url))
        try:
            yield r
        finally:
            r.close()


def _reserve(reg: Registry, cluster: str, ranks: int, name: str, key: str | None = None) -> Any:
    out = reg.reserve(cluster, job(ranks, name), OPTS, ttl_s=600, key=key, fingerprint=name, render=_render)
    return out.reservation


def _occupants(reg: Registry, cluster: str) -> tuple[Topology, ClusterState, dict[str, str]]:
    """What a Place by cluster_id sees: device id -> occupant (job name, or reservation:<id> for a hold)."""
    topo, state = reg.resolve(cluster)
    return topo, state, {topo.devices[i].id: who for i, who in state.occupied.items()}


def test_1_an_update_onto_held_devices_is_refused_and_commit_keeps_every_device(reg: Registry) -> None:
    reg.put_cluster("c", cluster_doc(2))
    res = _reserve(reg, "c", 8, "jobA")
    a0, a1 = res.devices[0], res.devices[1]
    with pytest.raises(Refused, match=res.id):
        reg.update_state("c", 1, diff={"occupy": [{"job": "ext", "devices": [a0]}]})
    with pytest.raises(Refused, match=a1):
        reg.update_state("c", 2, diff={"fail": [a1]})
    reg.commit(res.id)
    topo, state, occ = _occupants(reg, "c")
    assert {d: occ.get(d) for d in res.devices} == dict.fromkeys(res.devices, "jobA")
    assert not {topo.device_index(d) for d in res.devices} & state.failed
    assert audit(reg, "c") == []


def _first_free(reg: Registry, cluster: str, taken: set[str]) -> str:
    topo, _, occ = _occupants(reg, cluster)
    return next(d.id for d in topo.devices if d.id not in taken and d.id not in occ)


def test_2_a_full_snapshot_keeps_committed_occupancy(reg: Registry) -> None:
    reg.put_cluster("c", cluster_doc(5))  # 40 devices: after 16 and a failed one, 16 more fit
    b1 = _reserve(reg, "c", 16, "jobB1")
    reg.commit(b1.id)
    broken = _first_free(reg, "c", set(b1.devices))
    reg.update_state("c", 1, snapshot={"failed": [broken]})
    _, _, occ = _occupants(reg, "c")
    assert {d: occ.get(d) for d in b1.devices} == dict.fromkeys(b1.devices, "jobB1")
    b2 = _reserve(reg, "c", 16, "jobB2")
    assert not set(b2.devices) & set(b1.devices) and broken not in b2.devices
    assert audit(reg, "c") == []


def test_3_release_frees_that_reservation_only_whatever_its_job_name(reg: Registry) -> None:
    reg.put_cluster("c", cluster_doc(5))
    r1 = _reserve(reg, "c", 16, "dup", key="r1")
    reg.commit(r1.id)
    broken = _first_free(reg, "c", set(r1.devices))
    reg.update_state("c", 1, snapshot={"failed": [broken]})  # erased r1's occupancy before issue 22
    r2 = _reserve(reg, "c", 16, "dup", key="r2")
    reg.commit(r2.id)
    reg.release(r1.id)
    _, _, occ = _occupants(reg, "c")
    assert {d: occ.get(d) for d in r2.devices} == dict.fromkeys(r2.devices, "dup")
    assert not set(r1.devices) & set(occ)
    assert [r.id for r in reg.reservations("c", live_only=True)] == [r2.id]


def test_4_a_second_job_of_the_same_name_gets_other_devices(reg: Registry) -> None:
    reg.put_cluster("c", cluster_doc(2))
    first = _reserve(reg, "c", 8, "train", key="t1")
    reg.commit(first.id)
    second = _reserve(reg, "c", 8, "train", key="t2")
    assert second.id != first.id and not set(second.devices) & set(first.devices)
    assert len(set(second.devices)) == 8
    assert audit(reg, "c") == []


def test_5_concurrent_reserves_on_four_times_the_pool_of_clusters_never_wedge_postgres() -> None:
    """24 Reserves on 24 clusters wedged a replica of 16 connections: each connection held a solve lock while its
    thread waited for a second one. Here 4 connections and 16 Reserves whose solves overlap (each sleeps)."""
    dbs = fresh_postgres_db()
    url = next(dbs)
    pool, n = 4, 16
    from placement.registry.backends.postgres import PostgresStore

    def slow(topo: Topology, state: ClusterState, jb: Any, opts: SolveOptions) -> PlacementResult:
        time.sleep(0.5)  # every solve overlaps every other one
        return place(topo, state, jb, opts)

    reg = Registry(PostgresStore(url, pool_size=pool), solve=slow)
    try:
        for i in range(n):
            reg.put_cluster(f"c{i}", cluster_doc(4))
        done: dict[int, Any] = {}
        errors: list[BaseException] = []

        def one(i: int) -> None:
            try:
                done[i] = _reserve(reg, f"c{i}", 16, f"j{i}")
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60  # a liveness bound, not a timing: the fixed code needs ~2 s
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = sum(t.is_alive() for t in threads)
        assert stuck == 0, f"{stuck} of {n} Reserves never returned: the replica is wedged"
        assert errors == [] and len(done) == n
        assert all(len(reg.reservations(f"c{i}", live_only=True)) == 1 for i in range(n))
    finally:
        reg.close()
        for _ in dbs:  # drop the database (its connections are forced out)
            pass
