"""Registry v2 on both backends: the database refuses a second claim of a device whatever the caller does; updates
meet live reservations (refused, or revoked with a reason and an event; a dry run writes nothing; a snapshot keeps
reservation devices and says so; a failure frees outside occupancy); Commit re-checks every device; heartbeats
of committed reservations; event pruning; bounded waits for connections and locks; the v1 -> v2 migration."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from placement.errors import InfeasibleError
from placement.registry import Busy, ClaimConflict, Refused, Registry, ReservationStatus, open_store
from placement.registry.audit import audit
from placement.registry.backends.postgres import PostgresStore, split_options
from placement.registry.backends.sqlite import SqliteStore
from placement.registry.sql.schema import migration_files
from placement.solve import PlacementResult, SolveOptions
from tests.registry_util import Clock, cluster_doc, job, store_url

OPTS = SolveOptions(time_limit_s=2.0, workers=1)
_INTEGRITY = (sqlite3.IntegrityError, psycopg.IntegrityError)


def _render(_topo: Any, res: PlacementResult) -> bytes:
    return repr(res.mapping).encode()


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def reg(url: str, clock: Clock) -> Iterator[Registry]:
    r = Registry(open_store(url), clock=clock)
    r.put_cluster("c", cluster_doc(4))  # node01..node04, 8 GPUs each
    yield r
    r.close()


def _reserve(reg: Registry, ranks: int, name: str, ttl: float = 600.0) -> Any:
    return reg.reserve(
        "c", job(ranks, name), OPTS, ttl_s=ttl, key=None, fingerprint=name, render=_render
    ).reservation


def _raw(reg: Registry, sql: str, params: tuple[Any, ...] = ()) -> None:
    """A statement straight to the database, as a buggy or hostile caller would send it."""
    store = reg.store
    with store._tx(write=True) as tx:  # type: ignore[attr-defined]
        tx.x(sql, params)


def test_the_database_refuses_a_second_claim_of_a_device(reg: Registry) -> None:
    res = _reserve(reg, 8, "a")
    dev = res.devices[0]
    for kind, rid, jb in (("external", None, "x"), ("failed", None, None), ("held", res.id, "a")):
        with pytest.raises(_INTEGRITY) as e:
            _raw(
                reg,
                "INSERT INTO claims (cluster_id, device, kind, reservation_id, job) VALUES (?, ?, ?, ?, ?)",
                ("c", dev, kind, rid, jb),
            )
        assert reg.store._unique_violation(e.value)  # type: ignore[attr-defined]
    with pytest.raises(_INTEGRITY):  # a held claim names its reservation; an outside one does not
        _raw(
            reg, "INSERT INTO claims (cluster_id, device, kind, job) VALUES ('c', 'node04/gpu7', 'held', 'a')"
        )
    assert audit(reg, "c") == []


def test_updates_onto_live_reservations_are_refused_naming_devices_and_reservations(reg: Registry) -> None:
    held = _reserve(reg, 8, "held-job")
    done = _reserve(reg, 8, "running")
    reg.commit(done.id)
    before = reg.events("c", 0)
    diff = {"occupy": [{"job": "ext", "devices": [held.devices[0]]}], "fail": [done.devices[2]]}
    with pytest.raises(ClaimConflict) as e:
        reg.update_state("c", 1, diff=diff)
    assert set(e.value.conflicts) == {held.id, done.id}
    assert e.value.conflicts[held.id][2] == [(held.devices[0], "occupied by 'ext'")]
    assert e.value.conflicts[done.id][2] == [(done.devices[2], "failed")]
    assert held.devices[0] in str(e.value) and done.devices[2] in str(e.value)
    with pytest.raises(ClaimConflict):
        reg.update_state("c", 1, snapshot={"failed": [held.devices[3]]})
    assert reg.events("c", 0) == before and reg.view("c").generation == 0  # nothing written
    # the same job name on its own devices is no conflict; `free` leaves a reservation its devices (kept)
    out = reg.update_state(
        "c",
        2,
        diff={"occupy": [{"job": "running", "devices": list(done.devices)}], "free": [held.devices[1]]},
    )
    assert out.changes == {} and [r.id for r in out.kept] == [held.id]
    assert {r.id for r in reg.reservations("c", live_only=True)} == {held.id, done.id}
    assert audit(reg, "c") == []


def test_revoke_ends_the_reservations_with_a_reason_and_an_event_each(reg: Registry) -> None:
    held = _reserve(reg, 8, "h")
    done = _reserve(reg, 8, "d")
    reg.commit(done.id)
    last = reg.events("c", 0)[-1].seq
    out = reg.update_state(
        "c",
        1,
        diff={"fail": [held.devices[0]], "occupy": [{"job": "ext", "devices": [done.devices[1]]}]},
        revoke=True,
        reason="node drained by the operator",
    )
    assert {r.id for r in out.revoked} == {held.id, done.id}
    assert all(r.status is ReservationStatus.REVOKED for r in out.revoked)
    for rid in (held.id, done.id):
        stored = reg.get(rid)
        assert stored.status is ReservationStatus.REVOKED and stored.reason == "node drained by the operator"
    events = reg.events("c", last)
    assert [e.kind for e in events] == ["REVOKED", "REVOKED", "STATE_DIFF"]
    assert {e.payload["id"] for e in events[:2]} == {held.id, done.id} and out.seq == events[-1].seq
    # the change as stored: the committed devices are no one's now, except the one the update gave to ext
    assert out.changes == {
        "occupy": [{"job": "ext", "devices": [done.devices[1]]}],
        "fail": [held.devices[0]],
    }
    topo, state = reg.resolve("c")
    occupied = {topo.devices[i].id: j for i, j in state.occupied.items()}
    assert occupied == {done.devices[1]: "ext"}
    with pytest.raises(Refused, match="REVOKED"):
        reg.commit(held.id)
    assert reg.release(done.id).status is ReservationStatus.REVOKED  # idempotent: it ended already
    assert audit(reg, "c") == []


def test_a_dry_run_answers_the_same_and_writes_nothing(reg: Registry) -> None:
    held = _reserve(reg, 8, "h")
    snap = {"failed": [held.devices[0]], "occupied": [{"job": "x", "devices": ["node04"]}]}
    with pytest.raises(ClaimConflict):
        reg.update_state("c", 1, snapshot=snap, dry_run=True)
    events = reg.events("c", 0)
    dry = reg.update_state("c", 1, snapshot=snap, revoke=True, dry_run=True)
    assert dry.dry_run and dry.seq == 0 and [r.id for r in dry.revoked] == [held.id]
    assert dry.revoked[0].status is ReservationStatus.HELD  # not revoked: a dry run
    assert reg.events("c", 0) == events and reg.get(held.id).status is ReservationStatus.HELD
    real = reg.update_state("c", 1, snapshot=snap, revoke=True)
    assert real.changes == dry.changes and [r.id for r in real.revoked] == [held.id]
    assert sorted(real.changes) == ["fail", "occupy"]


def test_a_snapshot_keeps_committed_devices_and_a_failure_frees_outside_occupancy(reg: Registry) -> None:
    done = _reserve(reg, 8, "train")
    reg.commit(done.id)
    reg.update_state("c", 1, diff={"occupy": [{"job": "ext", "devices": ["node04"]}]})
    out = reg.update_state("c", 2, snapshot={"failed": ["node04/gpu0"]})
    assert [r.id for r in out.kept] == [done.id]  # the snapshot did not name it: it keeps its devices
    assert out.changes["free"] == [f"node04/gpu{g}" for g in range(8)]
    assert out.changes["fail"] == ["node04/gpu0"]
    doc = reg.view("c").document(reg.clock())
    assert doc["occupied"] == [{"job": "train", "devices": sorted(done.devices)}]
    assert doc["failed"] == ["node04/gpu0"]
    # a diff that fails an outside device frees it too: a failed device holds no claim
    reg.update_state("c", 3, diff={"occupy": [{"job": "ext", "devices": ["node04/gpu1"]}]})
    step = reg.update_state(
        "c", 4, diff={"fail": ["node04/gpu1"], "occupy": [{"job": "y", "devices": ["node04/gpu0"]}]}
    )
    assert step.changes == {"free": ["node04/gpu1"], "fail": ["node04/gpu1"]}  # gpu0 stays failed, no job
    events = reg.events("c", 0)
    assert events[-1].kind == "STATE_DIFF" and events[-1].payload["diff"] == step.changes
    assert audit(reg, "c") == []


def test_commit_checks_every_device_again(reg: Registry) -> None:
    res = _reserve(reg, 8, "a")
    _raw(reg, "DELETE FROM claims WHERE device = ?", (res.devices[5],))  # a claim lost behind its back
    with pytest.raises(Refused, match=res.devices[5]) as e:
        reg.commit(res.id)
    assert e.value.kind == "claims-lost" and reg.get(res.id).status is ReservationStatus.HELD


def test_committed_reservations_with_a_heartbeat_expire_unless_renewed(reg: Registry, clock: Clock) -> None:
    a = _reserve(reg, 16, "beating")
    forever = _reserve(reg, 16, "forever")
    assert reg.commit(a.id, ttl_s=30).heartbeat_s == 30
    reg.commit(forever.id)
    clock.advance(20)
    assert reg.renew(a.id).expires_at == clock.now + 30  # Renew moves it by its heartbeat
    clock.advance(29)
    assert reg.sweep() == [] and len(reg.reservations("c", live_only=True)) == 2
    clock.advance(2)
    assert reg.reservations("c", live_only=True)[0].id == forever.id  # reads see it expired at once
    expired = reg.sweep()
    assert [r.id for r in expired] == [a.id] and expired[0].reason == "the heartbeat ran out"
    assert reg.get(a.id).status is ReservationStatus.EXPIRED
    clock.advance(10**6)
    assert reg.get(forever.id).status is ReservationStatus.COMMITTED and reg.sweep() == []
    again = _reserve(reg, 16, "next")  # the expired one's devices are free again
    assert set(again.devices) == set(a.devices)
    assert audit(reg, "c") == []


def test_events_are_pruned_by_count_and_age(url: str, clock: Clock) -> None:
    reg = Registry(open_store(url), clock=clock, event_max_age_s=100, event_max_count=5)
    reg.put_cluster("c", cluster_doc(2))
    for g in range(1, 10):
        reg.update_state("c", g, diff={"degrade": [{"device": "node01/gpu0", "slowdown": 1 + g}]})
    reg.sweep()
    record = reg.store.cluster("c")
    assert record is not None and record.pruned_seq == 5
    assert [e.seq for e in reg.events("c", 0)] == [6, 7, 8, 9, 10]
    clock.advance(30)
    reg.update_state("c", 10, diff={"degrade": [{"device": "node01/gpu1", "slowdown": 2}]})
    reg.sweep()  # within PRUNE_EVERY_S of the last prune: nothing goes
    assert [e.seq for e in reg.events("c", 0)] == [6, 7, 8, 9, 10, 11]
    clock.advance(1000)
    reg.sweep()  # every event is older than 100 s now
    assert [e.seq for e in reg.events("c", 0)] == [11]  # the last event always stays
    reg.close()


def test_waits_for_locks_are_bounded(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = SqliteStore(db, lock_timeout_s=0.3)
    reg = Registry(store)
    reg.put_cluster("c", cluster_doc(2))
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writing for ever
    t0 = time.monotonic()
    with pytest.raises(Busy, match="retry"):
        reg.update_state("c", 1, diff={"fail": ["node01/gpu0"]})
    assert time.monotonic() - t0 < 20  # bounded (0.3 s asked; generous for a loaded machine)
    other.execute("ROLLBACK")
    other.close()
    reg.update_state("c", 1, diff={"fail": ["node01/gpu0"]})
    reg.close()


def test_postgres_pool_and_lock_waits_are_bounded() -> None:
    from tests.registry_util import fresh_postgres_db

    dbs = fresh_postgres_db()
    url = next(dbs)
    assert split_options(url + "?pool_size=1&lock_timeout_s=0.3&application_name=x") == (
        url + "?application_name=x",
        {"pool_size": 1.0, "lock_timeout_s": 0.3},
    )
    with pytest.raises(ValueError, match="pool_size"):
        split_options(url + "?pool_size=0")
    store = PostgresStore(url + "?pool_size=1&pool_timeout_s=0.3&lock_timeout_s=0.3")
    reg = Registry(store)
    try:
        reg.put_cluster("c", cluster_doc(2))
        with psycopg.connect(url) as other:  # another replica holding the cluster's lock
            other.execute("SELECT 1 FROM clusters WHERE id = 'c' FOR UPDATE")
            with pytest.raises(Busy, match="lock"):
                reg.update_state("c", 1, diff={"fail": ["node01/gpu0"]})
            other.rollback()
        taken = threading.Event()
        release = threading.Event()

        def hold() -> None:  # the pool's only connection busy in a long transaction
            with store._tx(write=False):
                taken.set()
                release.wait(10)

        t = threading.Thread(target=hold)
        t.start()
        taken.wait(10)
        with pytest.raises(Busy, match="connections"):
            reg.view("c")
        release.set()
        t.join()
        assert reg.update_state("c", 1, diff={"fail": ["node01/gpu0"]}).generation == 1
    finally:
        reg.close()
        for _ in dbs:
            pass


def test_a_v1_database_migrates_to_claims(url: str) -> None:
    """Schema 1 rows, including what its bugs left behind (a failed device held, two committed reservations on
    the same devices), become claims; reservations left without all their devices are revoked."""
    dialect = "sqlite" if url.startswith("sqlite") else "postgres"
    v1 = migration_files(dialect)[0][1].read_text()
    conn: Any
    if dialect == "sqlite":
        conn = sqlite3.connect(url.removeprefix("sqlite://"), isolation_level=None)
    else:
        import psycopg

        conn = psycopg.connect(url, autocommit=True)
    q = "?" if dialect == "sqlite" else "%s"
    for stmt in [s for s in v1.split(";") if s.strip()]:
        conn.execute(stmt)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (1, 0)")
    doc = json.dumps(cluster_doc(2), sort_keys=True, separators=(",", ":"))
    conn.execute(
        f"INSERT INTO clusters (id, version, doc, generation, extras, last_seq, updated_at) VALUES ('c', 1, {q}, 0, '{{}}', 0, 0)",
        (doc,),
    )

    def res(rid: str, status: str, devices: list[str], created: float, jb: str) -> None:
        conn.execute(
            "INSERT INTO reservations (id, cluster_id, job, status, devices, idem_key, request_hash, created_at, "
            "expires_at, ended_at, generation, cluster_version, payload) VALUES "
            f"({q}, 'c', {q}, {q}, {q}, NULL, 'h', {q}, 1e12, NULL, 0, 1, {q})",
            (rid, jb, status, json.dumps(devices), created, b""),
        )

    n1 = [f"node01/gpu{g}" for g in range(8)]
    n2 = [f"node02/gpu{g}" for g in range(4)]
    res("old", "COMMITTED", n1, 1.0, "dup")
    res("new", "COMMITTED", n1, 2.0, "dup")  # shares old's devices: schema 1's bug
    res("held", "HELD", n2, 3.0, "h")
    for d in n1:
        conn.execute(f"INSERT INTO device_state VALUES ('c', {q}, 'dup', 0, NULL)", (d,))
    for d in n2:
        conn.execute(f"INSERT INTO holds VALUES ('c', {q}, 'held', 1e12)", (d,))
    conn.execute(
        "INSERT INTO device_state VALUES ('c', 'node02/gpu0', NULL, 1, 2.0)"
    )  # the hold's device failed
    conn.execute("INSERT INTO device_state VALUES ('c', 'node02/gpu7', 'ext', 0, 1.5)")
    conn.close()

    reg = Registry(open_store(url))
    try:
        assert reg.store.schema_version() == 4  # and on to schema 3 (the lease fence) and 4 (shapes)
        assert reg.get("new").status is ReservationStatus.COMMITTED  # its commit wrote the rows last
        for rid in ("old", "held"):
            r = reg.get(rid)
            assert r.status is ReservationStatus.REVOKED and r.reason.startswith("schema 2")
        view = reg.view("c")
        doc = view.document(time.time())
        assert doc["occupied"] == [{"job": "dup", "devices": n1}, {"job": "ext", "devices": ["node02/gpu7"]}]
        assert doc["failed"] == ["node02/gpu0"]
        assert doc["degraded"] == [
            {"device": "node02/gpu0", "slowdown": 2.0},
            {"device": "node02/gpu7", "slowdown": 1.5},
        ]
        assert view.holds(time.time()) == {} and audit(reg, "c") == []
    finally:
        reg.close()


def test_a_view_moved_along_by_events_equals_a_fresh_read(url: str, clock: Clock) -> None:
    """Views advance by the events since their seq; after every random step the advanced view, and the state a
    Reserve solves on, equal a view read whole from the database."""
    import random

    from placement.registry.view import StateView

    rng = random.Random(7)
    reg = Registry(open_store(url), clock=clock)
    reg.put_cluster("c", cluster_doc(4, 4, per_leaf=2))
    devices = [f"node{n:02d}/gpu{g}" for n in range(1, 5) for g in range(4)]
    live: list[str] = []
    gen = 0
    for step in range(60):
        before = reg.view("c")  # cached: the next call advances it
        roll = rng.random()
        try:
            if roll < 0.3:
                out = reg.reserve(
                    "c",
                    job_from_doc(rng.randint(1, 3), rng.choice(["a", "b"])),
                    OPTS,
                    ttl_s=rng.choice([5.0, 100.0]),
                    key=None,
                    fingerprint="x",
                    render=_render,
                )
                live.append(out.reservation.id)
            elif roll < 0.45 and live:
                reg.commit(rng.choice(live), ttl_s=rng.choice([None, 3.0]))
            elif roll < 0.55 and live:
                reg.release(live.pop(rng.randrange(len(live))))
            elif roll < 0.85:
                gen += 1
                picked = rng.sample(devices, 3)
                diff = {
                    "occupy": [{"job": "x", "devices": [picked[0]]}],
                    "fail": [picked[1]],
                    "recover": [picked[2]],
                    "degrade": [{"device": rng.choice(devices), "slowdown": 2}],
                }
                reg.update_state("c", gen, diff=diff, revoke=rng.random() < 0.7)
            else:
                gen += 1
                picked = rng.sample(devices, 2)
                snap = {"occupied": [{"job": "y", "devices": [picked[0]]}], "failed": [picked[1]]}
                reg.update_state("c", gen, snapshot=snap, revoke=True)
        except (Refused, InfeasibleError):
            pass
        clock.advance(rng.choice([0.0, 2.0]))
        reg.sweep()
        moved = reg.view("c")
        snap_now = reg.store.snapshot("c")
        assert snap_now is not None
        fresh = StateView(
            snap_now.cluster, moved.topology, moved.base, snap_now.claims, snap_now.slowdowns, snap_now.extras
        )
        assert moved is not before or moved.record.last_seq == before.record.last_seq
        assert (moved.record, moved.claims, moved.slowdowns, moved.extras) == (
            fresh.record,
            fresh.claims,
            fresh.slowdowns,
            fresh.extras,
        ), f"step {step}"
        a, b = moved.solve_state(clock.now, "a", {}), fresh.solve_state(clock.now, "a", {})
        assert (dict(a.occupied), a.failed, dict(a.device_slowdown)) == (
            dict(b.occupied),
            b.failed,
            dict(b.device_slowdown),
        ), f"step {step}"
    assert audit(reg, "c") == []
    reg.close()


def job_from_doc(ranks: int, name: str) -> Any:
    from placement.io.native import job_from_dict

    return job_from_dict(
        {
            "name": name,
            "device_kind": "H100",
            "parallel": {"tp": 1, "dp": ranks},
            "model": {"parameters": 1e9, "hidden": 1024, "layers": 4, "seq_len": 1024, "micro_batches": 2},
        }
    )
