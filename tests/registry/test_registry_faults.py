"""The registry under injected faults, for real: PostgreSQL stopped, started and restarted with `-m immediate`
under load (health follows it), a replica stopped with SIGSTOP inside a Commit transaction (the others write
again within seconds; a lease reported EXPIRED is never read COMMITTED), the SQLite file's filesystem full (a
2 MiB tmpfs: RESOURCE_EXHAUSTED naming the store, then service again), and Reserves with 3-50 ms deadlines (no
orphan holds devices). tests/registry_history.py judges every run from the registry's event log."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from typer.testing import CliRunner

from placement.cli.app import app as cli_app
from placement.registry import Busy, InDoubt, Registry, StoreFull, open_store
from placement.registry.audit import audit
from placement.registry.backends import PostgresStore
from placement.registry.model import ClaimKind, Fenced, Refused, ReservationStatus
from placement.solve import SolveOptions
from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from placement.v1 import registry_pb2 as rpb
from placement.v1 import registry_pb2_grpc as rpb_grpc
from server.errors import status_for
from server.main import SERVICE_NAME, create_server
from server.registry_service import REGISTRY_SERVICE_NAME
from server.settings import Settings
from tests.registry.test_registry_history import Replica, _job, recorded
from tests.registry_history import Checker, Op
from tests.registry_util import (
    cluster_doc,
    fill,
    fresh_postgres_db,
    job,
    own_postgres,
    small_tmpfs,
    store_url,
)

NODES, GPUS = 4, 4
DEVICES = [f"node{n:02d}/gpu{g}" for n in range(1, NODES + 1) for g in range(GPUS)]
_STATUS = {1: "HELD", 2: "COMMITTED", 3: "RELEASED", 4: "EXPIRED", 5: "REVOKED"}


class Recorder:
    """Calls recorded as `Op`s for the history checker (thread-safe)."""

    def __init__(self) -> None:
        self.history: list[Op] = []
        self.lock = threading.Lock()

    def call(self, kind: str, fn: Callable[..., Any], req: Any, timeout: float = 10, **args: Any) -> Op:
        op = recorded(Op(0, kind, {"replica": 0, **args}, time.time()), fn, req, timeout)
        with self.lock:
            self.history.append(op)
        return op

    def codes(self) -> set[str]:
        return {op.code for op in self.history if op.outcome != "ok"}


def judge(url: str, history: list[Op]) -> list[str]:
    """The history checker over the store's event log and `history`, the final state, and the audit."""
    reg = Registry(open_store(url))
    try:
        events, seq = [], 0
        while batch := reg.store.events("h", seq, 1000):
            events += batch
            seq = batch[-1].seq
        checker = Checker(DEVICES)
        for ev in events:
            checker.apply(ev)
        checker.check_ops(history)
        snap = reg.store.snapshot("h")
        assert snap is not None
        owners = {
            d: ("res", str(c.reservation_id))
            if c.registry_owned
            else ("ext", str(c.job))
            if c.kind is ClaimKind.EXTERNAL
            else ("failed", "")
            for d, c in snap.claims.items()
        }
        checker.check_final(owners, {r.id: r.status.value for r in reg.store.reservations("h", None)}, 0)
        stamps = [e.at for e in events]
        backwards = [(a, b) for a, b in itertools.pairwise(stamps) if b < a]
        return (
            checker.problems
            + audit(reg, "h")
            + [f"event stamps run backwards: {backwards[:3]}"] * bool(backwards)
        )
    finally:
        reg.close()


def _server(url: str, **overrides: Any) -> tuple[Any, grpc.Channel]:
    settings = Settings(
        host="127.0.0.1",
        port=0,
        metrics_port=None,
        workers=2,
        solve_mode="thread",
        registry=url,
        registry_probe_s=0.3,
        lease_sweep_s=0.2,
        **overrides,
    )
    server, port = create_server(settings)
    server.start()
    return server, grpc.insecure_channel(f"127.0.0.1:{port}")


def _health(channel: grpc.Channel, service: str) -> str:
    stub = health_pb2_grpc.HealthStub(channel)
    got = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(got))


def _wait_health(channel: grpc.Channel, service: str, want: str, within_s: float) -> float:
    """Seconds until `service` reports `want`; AssertionError after `within_s`."""
    t0 = time.monotonic()
    seen = ""
    while time.monotonic() - t0 < within_s:
        seen = _health(channel, service)
        if seen == want:
            return time.monotonic() - t0
        time.sleep(0.1)
    raise AssertionError(f"health of {service!r} stayed {seen} for {within_s} s, expected {want}")


def _put_cluster(stub: Any) -> None:
    cluster = json_format.ParseDict(cluster_doc(NODES, GPUS, per_leaf=2), pb.Cluster())
    stub.PutCluster(rpb.PutClusterRequest(cluster_id="h", cluster=cluster), timeout=30)


def _place_inline(channel: grpc.Channel) -> None:
    """A stateless Place (cluster and state in the request): it needs no registry."""
    req = pb.PlaceRequest(
        cluster=json_format.ParseDict(cluster_doc(2, 4, per_leaf=2), pb.Cluster()),
        job=_job(2, "stateless"),
        options=pb.Options(time_limit_s=2),
    )
    assert len(pb_grpc.PlacementServiceStub(channel).Place(req, timeout=30).result.mapping) == 2


class Load:
    """Threads that Reserve (a key each) and Release until stopped, every call recorded."""

    def __init__(self, stub: Any, rec: Recorder, threads: int = 2) -> None:
        self.stub, self.rec, self.stop = stub, rec, threading.Event()
        self.n = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self, i: int) -> None:
        while not self.stop.is_set():
            with self.lock:
                self.n += 1
                key = f"load{i}-{self.n}"
            req = rpb.ReserveRequest(
                cluster_id="h",
                job=_job(2, "a"),
                ttl_s=5,
                idempotency_key=key,
                options=pb.Options(time_limit_s=1),
            )
            op = self.rec.call("reserve", self.stub.Reserve, req, timeout=5, key=key)
            if op.outcome != "ok":
                time.sleep(0.05)
                continue
            release = rpb.ReservationRequest(reservation_id=op.resp.reservation_id)
            for _ in range(200):  # given back, retried through the outage
                rid = op.resp.reservation_id
                if self.rec.call("release", self.stub.Release, release, timeout=5, rid=rid).outcome == "ok":
                    break
                time.sleep(0.05)

    def ok_since(self, t: float) -> int:
        with self.rec.lock:
            return sum(1 for op in self.rec.history if op.outcome == "ok" and op.invoke >= t)

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


def _wait_ok(load: Load, since: float, within_s: float) -> None:
    t0 = time.monotonic()
    while load.ok_since(since) < 2:
        assert time.monotonic() - t0 < within_s, f"no call succeeded within {within_s} s"
        time.sleep(0.1)


# ---- a database outage: health follows the store -------------------------------------------------------------


def test_health_follows_postgres_through_stop_start_and_an_immediate_restart() -> None:
    with own_postgres() as pg:
        server, channel = _server(pg.url)
        rec = Recorder()
        try:
            stub = rpb_grpc.ClusterRegistryStub(channel)
            _put_cluster(stub)
            assert _health(channel, REGISTRY_SERVICE_NAME) == "SERVING" == _health(channel, "")
            load = Load(stub, rec)
            try:
                _wait_ok(load, time.time(), 20)
                pg.stop()
                lost = _wait_health(channel, REGISTRY_SERVICE_NAME, "NOT_SERVING", 5)
                assert _health(channel, "") == "NOT_SERVING"  # the server's entry follows its registry
                assert _health(channel, SERVICE_NAME) == "SERVING"  # stateless calls still answer
                _place_inline(channel)
                time.sleep(1.0)  # calls fail meanwhile: ABORTED or UNAVAILABLE with retry advice
                pg.start()
                back = _wait_health(channel, REGISTRY_SERVICE_NAME, "SERVING", 5)
                _wait_ok(load, time.time(), 10)
                pg.restart_immediate()
                _wait_health(channel, REGISTRY_SERVICE_NAME, "SERVING", 5)
                _wait_ok(load, time.time(), 10)
            finally:
                load.join()
        finally:
            channel.close()
            server.stop(None).wait(10)
        failed = [op for op in rec.history if op.code in ("ABORTED", "UNAVAILABLE")]
        assert failed, f"the outage failed no call with ABORTED or UNAVAILABLE: {rec.codes()}"
        assert not rec.codes() & {"INTERNAL", "UNKNOWN"}, rec.codes()
        assert all("retry" in op.detail for op in failed), [op.detail for op in failed][:3]
        problems = judge(pg.url, rec.history)
        print(
            f"{len(rec.history)} calls, {len(failed)} failed; NOT_SERVING after {lost:.1f} s, back {back:.1f} s"
        )
        assert problems == [], "\n".join(problems[:20])


# ---- a replica paused inside a transaction --------------------------------------------------------------------


def _pg_backend_waiting(admin: Any, dbname: str) -> bool:
    rows = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock' "
        "AND query LIKE 'UPDATE reservations%%'",
        (dbname,),
    ).fetchall()
    return int(rows[0][0]) > 0


class Paused:
    """Replica `b`'s Commit of `rid` stopped (SIGSTOP) inside its transaction, after it locked the cluster: the
    test holds the reservation's row so that b's UPDATE waits there, stops b, then lets the row go."""

    def __init__(self, url: str, b: Replica, b_stub: Any, rec: Recorder, rid: str) -> None:
        import psycopg

        dbname = url.rsplit("/", 1)[1]
        self.b = b
        self.commit: list[Op] = []
        with psycopg.connect(url, autocommit=True) as admin, psycopg.connect(url) as holder:
            holder.execute("SELECT 1 FROM reservations WHERE id = %s FOR UPDATE", (rid,))
            req = rpb.ReservationRequest(reservation_id=rid)
            self.thread = threading.Thread(
                target=lambda: self.commit.append(rec.call("commit", b_stub.Commit, req, timeout=60, rid=rid))
            )
            self.thread.start()
            t0 = time.monotonic()
            while not _pg_backend_waiting(admin, dbname):
                assert time.monotonic() - t0 < 1.5, "replica b's Commit never waited on the row"
                time.sleep(0.01)
            assert b.proc is not None
            os.kill(b.proc.pid, signal.SIGSTOP)
            self.at = time.monotonic()
            holder.rollback()  # b's UPDATE goes through; b, stopped, stays inside its transaction

    def resume(self) -> Op:
        assert self.b.proc is not None
        os.kill(self.b.proc.pid, signal.SIGCONT)
        self.thread.join(60)
        return self.commit[0]


def _reserve(stub: Any, rec: Recorder, key: str, ttl: float, ranks: int = 4) -> str:
    req = rpb.ReserveRequest(
        cluster_id="h",
        job=_job(ranks, "p"),
        ttl_s=ttl,
        idempotency_key=key,
        options=pb.Options(time_limit_s=1),
    )
    op = rec.call("reserve", stub.Reserve, req, timeout=30, key=key)
    assert op.outcome == "ok", op.detail
    return str(op.resp.reservation_id)


def _listed(stub: Any, rec: Recorder, rid: str) -> str:
    """The status ListReservations reports for `rid` (recorded: the checker holds an EXPIRED one to it)."""
    op = rec.call("list", stub.ListReservations, rpb.ListReservationsRequest(cluster_id="h"))
    assert op.outcome == "ok", op.detail
    for r in op.resp.reservations:
        if r.id == rid:
            return _STATUS.get(r.status, "?")
    raise AssertionError(f"reservation {rid} is not listed")


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from fresh_postgres_db()


def test_a_replica_paused_inside_a_commit_neither_blocks_others_nor_commits_an_expired_lease(
    tmp_path: Path, pg_url: str
) -> None:
    url = pg_url
    replicas = [Replica(url, tmp_path / f"replica{i}.log", "--solve-mode", "thread") for i in range(2)]
    channels = [grpc.insecure_channel(f"127.0.0.1:{r.port}") for r in replicas]
    rec = Recorder()
    try:
        for r in replicas:
            r.wait_ready()
        a, b = (rpb_grpc.ClusterRegistryStub(ch) for ch in channels)
        _put_cluster(a)

        # 1. b pauses (1.8 s, shorter than the idle-in-transaction timeout) past the lease's end: a reports the
        #    reservation EXPIRED meanwhile, and b's Commit, resumed, must not turn it COMMITTED
        rid = _reserve(a, rec, "short", ttl=1.5)
        ends = time.time() + 1.5
        paused = Paused(url, replicas[1], b, rec, rid)
        while time.time() < ends + 0.2:
            time.sleep(0.05)
        assert _listed(a, rec, rid) == "EXPIRED"
        commit = paused.resume()
        assert not (commit.outcome == "ok" and _STATUS.get(commit.resp.reservation.status) == "COMMITTED"), (
            "a Commit answered OK for a lease that had ended (by the database's clock) before its COMMIT"
        )
        assert _listed(a, rec, rid) == "EXPIRED" and _listed(b, rec, rid) == "EXPIRED"

        # 2. b pauses inside a Commit for long: a writes again within a few seconds (b's session is ended)
        rid2 = _reserve(a, rec, "long", ttl=60)
        paused = Paused(url, replicas[1], b, rec, rid2)
        gen, waited = 0, 0.0
        while True:
            gen += 1
            req = rpb.UpdateStateRequest(cluster_id="h", generation=gen)
            json_format.ParseDict({"recover": [DEVICES[-1]]}, req.diff)
            op = rec.call("diff", a.UpdateState, req, timeout=10, generation=gen, revoke=False, dry_run=False)
            waited = time.monotonic() - paused.at
            if op.outcome == "ok":
                break
            assert op.code == "ABORTED" and "retry" in op.detail, (op.code, op.detail)
            assert waited < 8.0, f"replica a could not write for {waited:.1f} s while b was paused"
        commit = paused.resume()
        assert commit.outcome != "ok" or _listed(a, rec, rid2) == "COMMITTED"
    finally:
        for ch in channels:
            ch.close()
        for r in replicas:
            if r.proc is not None and r.proc.poll() is None:
                os.kill(r.proc.pid, signal.SIGCONT)
            r.stop()
    problems = judge(url, rec.history)
    assert problems == [], "\n".join(problems[:20])
    print(f"a wrote again {waited:.1f} s after b stopped; b's commits: {commit.code or 'OK'}")


# ---- a full disk ------------------------------------------------------------------------------------------------


def test_a_full_sqlite_volume_is_resource_exhausted_naming_the_store_then_service_resumes(
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "vol") as vol:
        db = vol / "registry.db"
        url = f"sqlite://{db}"
        server, channel = _server(url)
        rec = Recorder()
        try:
            stub = rpb_grpc.ClusterRegistryStub(channel)
            _put_cluster(stub)
            filler = fill(vol)
            full: Op | None = None
            for i in range(200):  # the log's free pages run out within a few writes
                req = rpb.ReserveRequest(
                    cluster_id="h",
                    job=_job(1, "f"),
                    ttl_s=30,
                    idempotency_key=f"full{i}",
                    options=pb.Options(time_limit_s=1),
                )
                op = rec.call("reserve", stub.Reserve, req, timeout=10, key=f"full{i}")
                if op.outcome == "ok":
                    rid = op.resp.reservation_id
                    op = rec.call(
                        "release", stub.Release, rpb.ReservationRequest(reservation_id=rid), rid=rid
                    )
                if op.outcome != "ok":
                    full = op
                    break
            assert full is not None, "200 writes on a full filesystem all succeeded"
            assert full.code == "RESOURCE_EXHAUSTED", (full.code, full.detail)
            assert str(db) in full.detail and "disk" in full.detail, full.detail
            _wait_health(channel, REGISTRY_SERVICE_NAME, "NOT_SERVING", 3)
            assert _health(channel, SERVICE_NAME) == "SERVING"
            filler.unlink()
            _wait_health(channel, REGISTRY_SERVICE_NAME, "SERVING", 3)
            _reserve(stub, rec, "after", ttl=30, ranks=2)
        finally:
            channel.close()
            server.stop(None).wait(10)
        assert "INTERNAL" not in rec.codes(), rec.codes()
        problems = judge(url, rec.history)
        assert problems == [], "\n".join(problems[:20])


# ---- callers who give up ----------------------------------------------------------------------------------------


def test_reserves_with_3_to_50_ms_deadlines_leave_no_orphan_holding_devices(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'registry.db'}"
    server, channel = _server(url)
    rec = Recorder()
    try:
        stub = rpb_grpc.ClusterRegistryStub(channel)
        _put_cluster(stub)
        stub.Reserve(  # warm up: the first solve imports and builds what later ones reuse
            rpb.ReserveRequest(
                cluster_id="h", job=_job(1, "warm"), ttl_s=1, options=pb.Options(time_limit_s=1)
            ),
            timeout=30,
        )
        deadlines = [0.003 + 0.047 * i / 39 for i in range(40)]
        for i, d in enumerate(deadlines):
            req = rpb.ReserveRequest(
                cluster_id="h",
                job=_job(1, "d"),
                ttl_s=60,
                idempotency_key=f"d{i}",
                options=pb.Options(time_limit_s=1),
            )
            op = rec.call("reserve", stub.Reserve, req, timeout=d, key=f"d{i}")
            if op.outcome == "ok":  # an answered one is given back: the devices stay enough for the rest
                rid = op.resp.reservation_id
                rec.call("release", stub.Release, rpb.ReservationRequest(reservation_id=rid), rid=rid)
        answered = {op.args["key"] for op in rec.history if op.kind == "reserve" and op.outcome == "ok"}
        gave_up = [op for op in rec.history if op.kind == "reserve" and op.outcome != "ok"]
        live = stub.ListReservations(rpb.ListReservationsRequest(cluster_id="h", live_only=True), timeout=10)
        orphans = [r for r in live.reservations if r.idempotency_key not in answered and r.job != "warm"]
        print(f"{len(answered)} answered, {len(gave_up)} gave up, {len(live.reservations)} live after")
        assert gave_up, "no call ran out of time: the deadlines did not bite"
        assert orphans == [], (
            f"{len(orphans)} reservation(s) of calls that failed ({len(gave_up)}) hold devices: "
            f"{[(r.idempotency_key, len(r.devices)) for r in orphans][:5]}"
        )
        # a retry with the key of a call that gave up gets what was written (here: nothing, so a new one)
        key = gave_up[0].args["key"]
        req = rpb.ReserveRequest(
            cluster_id="h",
            job=_job(1, "d"),
            ttl_s=60,
            idempotency_key=key,
            options=pb.Options(time_limit_s=1),
        )
        again = rec.call("reserve", stub.Reserve, req, timeout=30, key=key)
        assert again.outcome == "ok" and not again.resp.replayed
        assert rec.call("reserve", stub.Reserve, req, timeout=30, key=key).resp.replayed
    finally:
        channel.close()
        server.stop(None).wait(10)
    problems = judge(url, rec.history)
    assert problems == [], "\n".join(problems[:20])


# ---- retention: a store under steady load stays bounded ---------------------------------------------------------


def test_steady_load_on_a_2_mib_volume_stays_bounded_by_compaction(tmp_path: Path) -> None:
    """Reserve and Release in a loop on a 2 MiB tmpfs: with ended reservations kept 0 s and 50 events per cluster,
    compaction keeps the file and its log within the volume, and `placement registry store` reports its size."""
    with small_tmpfs(tmp_path / "vol") as vol:
        url = f"sqlite://{vol / 'registry.db'}"
        reg = Registry(open_store(url), keep_ended_s=0, event_max_count=50, compact_every_s=0)
        sizes = []
        try:
            reg.put_cluster("h", cluster_doc(2))
            answer = bytes(range(256)) * 8  # about what a rendered PlacementResult weighs
            for i in range(400):
                out = reg.reserve(
                    "h",
                    job(8, "steady"),
                    SolveOptions(time_limit_s=1),
                    ttl_s=30,
                    key=f"k{i}",
                    fingerprint="steady",
                    render=lambda topo, res: answer,
                )
                reg.release(out.reservation.id)
                if i % 25 == 24:
                    reg.sweep()  # the server's sweeper: expiry, then compaction
                    sizes.append(reg.store.size_bytes())
            stats = reg.store.stats()
        finally:
            reg.close()
        assert stats["reservations_released"] <= 25 and stats["events"] <= 50 + 50, stats
        assert max(sizes) < 2 * 2**20, sizes
        assert max(sizes[len(sizes) // 2 :]) <= max(sizes[: len(sizes) // 2]) * 1.25, sizes  # no growth
        shown = CliRunner().invoke(cli_app, ["registry", "store", "--registry", url])
        assert shown.exit_code == 0, shown.output
        shown_bytes = int(shown.output.split(": ", 1)[1].split(" bytes", 1)[0].replace(",", ""))
        assert 0 < shown_bytes < 2 * 2**20 and "reservations_released" in shown.output, shown.output
        print(f"sizes (KiB) every 25 cycles: {[s // 1024 for s in sizes]}")


# ---- the fence itself, on both backends --------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


def test_a_commit_decided_while_the_lease_lived_is_refused_if_the_lease_ends_before_its_commit(
    any_url: str,
) -> None:
    """Below the code that decides: a Commit transaction that found the lease alive, then paused past its end
    before COMMIT, writes nothing (SQLite: the store's check under the write lock; PostgreSQL: the deferred
    trigger, which also refuses the same UPDATE sent by hand); the public Commit then answers `expired`."""
    reg = Registry(open_store(any_url))
    try:
        reg.put_cluster("h", cluster_doc(2))
        rids = [
            reg.reserve(
                "h",
                job(8, f"f{i}"),
                SolveOptions(time_limit_s=1),
                ttl_s=0.4,
                key=f"f{i}",
                fingerprint="f",
                render=lambda topo, res: b"",
            ).reservation.id
            for i in range(2)
        ]
        store: Any = reg.store
        with pytest.raises(Fenced), store._tx(write=True, lock="h") as tx:  # a writer inside its transaction
            held = store._reservation_in(tx, rids[0])
            assert (
                held.status is ReservationStatus.HELD and held.expires_at > tx.now
            )  # decided: the lease lives
            store._commit(tx, held, tx.now, None)
            time.sleep(held.expires_at - time.time() + 0.05)  # paused past the lease's end, before COMMIT
        assert reg.store.reservation(rids[0]).status is ReservationStatus.HELD  # nothing was written
        if store.postgres:
            import psycopg

            with psycopg.connect(any_url) as conn, pytest.raises(psycopg.Error, match="lease-fence"):
                conn.execute("UPDATE reservations SET status = 'COMMITTED' WHERE id = %s", (rids[1],))
                conn.commit()
        with pytest.raises(Refused) as refused:
            reg.commit(rids[0])
        assert refused.value.kind == "expired"
        assert {r.status for r in reg.reservations("h")} == {ReservationStatus.EXPIRED}  # as every read says
        assert audit(reg, "h") == []
    finally:
        reg.close()


# ---- store errors as status codes ------------------------------------------------------------------------------


def test_store_errors_become_retryable_codes_or_resource_exhausted_never_internal(pg_url: str) -> None:
    """Each store error as the PostgreSQL backend raises it from psycopg's, and the status a client then gets:
    a full disk RESOURCE_EXHAUSTED naming the store, a lock or a lost session ABORTED, a commit in doubt
    UNAVAILABLE, each with a RetryInfo."""
    import psycopg

    store = PostgresStore(pg_url)
    try:
        full = store._failed(psycopg.errors.DiskFull("could not extend file: No space left on device"))
        busy = store._failed(psycopg.errors.LockNotAvailable("canceling statement due to lock timeout"))
        gone = store._failed(
            psycopg.errors.AdminShutdown("terminating connection due to administrator command")
        )
        assert store.full is not None  # the probe now wants a write before it calls the store healthy
    finally:
        store.close()
    assert isinstance(full, StoreFull) and isinstance(busy, Busy) and isinstance(gone, Busy)
    cases = [
        (full, grpc.StatusCode.RESOURCE_EXHAUSTED, pg_url.split("@", 1)[1]),
        (busy, grpc.StatusCode.ABORTED, "retry"),
        (gone, grpc.StatusCode.ABORTED, "retry"),
        (InDoubt("the connection broke during COMMIT; retry"), grpc.StatusCode.UNAVAILABLE, "retry"),
    ]
    for exc, code, words in cases:
        st = status_for(exc)
        assert st.code is code, (exc, st.code)
        assert words in st.details, st.details
        proto = status_pb2.Status.FromString(dict(st.trailing_metadata)["grpc-status-details-bin"])
        assert any(d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in proto.details), proto
