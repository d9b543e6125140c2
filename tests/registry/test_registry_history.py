"""A history test of the registry, on SQLite and on PostgreSQL: 4 clients send random interleavings of Reserve,
Commit (with and without a heartbeat), Renew, Release, UpdateState (diffs and snapshots, revoking or not, some
dry runs) and GetState to two server replicas (two `python -m server.main` processes on one database), and one
replica is killed with SIGKILL mid-run and restarted. tests/registry_history.py then replays the registry's
event log through an independent model, checks the invariant after every event (a device in at most one live
claim, no claim on a failed device), and checks every call against it. Bounded: ~15 s of traffic per backend.

SQLite runs as two processes on one file (WAL): the embedded store's documented way to share a registry, and
the path where a reservation of one process must see the other's commits through the file lock alone.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from placement.registry import Registry, open_store
from placement.registry.audit import audit
from placement.registry.model import ClaimKind
from placement.v1 import placement_pb2 as pb
from placement.v1 import registry_pb2 as rpb
from placement.v1 import registry_pb2_grpc as rpb_grpc
from tests.conftest import ROOT
from tests.registry_history import Checker, Op
from tests.registry_util import cluster_doc, fresh_postgres_db

DURATION_S = 15.0
CLIENTS = 4
NODES, GPUS = 4, 4
DEVICES = [f"node{n:02d}/gpu{g}" for n in range(1, NODES + 1) for g in range(GPUS)]
_UNKNOWN = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED")  # the call may or may not have happened


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Replica:
    """A `python -m server.main` process on a fixed port (a restart reuses it, so clients reconnect)."""

    def __init__(self, url: str, log: Path, *extra: str) -> None:
        self.url, self.log, self.port = url, log, _free_port()
        self.extra = extra  # more flags of server.main
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with self.log.open("ab") as f:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "server.main",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--metrics-port",
                    "-1",
                    "--workers",
                    "2",
                    "--log-level",
                    "WARNING",
                    "--lease-sweep-s",
                    "0.2",
                    "--registry",
                    self.url,
                    *self.extra,
                ],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=f,
                stderr=f,
            )

    def wait_ready(self) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as ch:
            stub = rpb_grpc.ClusterRegistryStub(ch)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]
                try:
                    stub.ListReservations(rpb.ListReservationsRequest(), timeout=2)
                    return
                except grpc.RpcError:
                    time.sleep(0.1)
        raise AssertionError("the replica did not come up: " + self.log.read_text()[-3000:])

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _job(ranks: int, name: str) -> pb.Job:
    return json_format.ParseDict(
        {
            "name": name,
            "device_kind": "H100",
            "parallel": {"tp": 1, "dp": ranks},
            "model": {"parameters": 1e9, "hidden": 1024, "layers": 4, "seq_len": 1024, "micro_batches": 2},
        },
        pb.Job(),
    )


def recorded(op: Op, fn: Any, req: Any, timeout: float = 10) -> Op:
    """`op` after calling `fn(req)`: its response (ok), or its code, detail and precondition violations (fail,
    or info when the call may or may not have happened), and its completion time."""
    try:
        op.resp = fn(req, timeout=timeout)
        op.outcome = "ok"
    except grpc.RpcError as e:
        op.code, op.detail = e.code().name, e.details() or ""
        op.outcome = "info" if op.code in _UNKNOWN else "fail"
        status = rpc_status.from_call(e)
        for d in status.details if status else []:
            if d.Is(error_details_pb2.PreconditionFailure.DESCRIPTOR):
                pf = error_details_pb2.PreconditionFailure()
                d.Unpack(pf)
                op.types += [v.type for v in pf.violations]
                op.subjects += [v.description for v in pf.violations]
    op.complete = time.time()
    return op


class Client:
    """One client: random calls to a random replica, each recorded as an Op."""

    def __init__(self, i: int, stubs: list[Any], history: list[Op], lock: threading.Lock, gens: Any) -> None:
        self.i, self.stubs, self.history, self.lock, self.gens = i, stubs, history, lock, gens
        self.rng = random.Random(1000 + i)
        self.mine: list[str] = []  # reservation ids this client got
        self.n = 0

    def call(self, kind: str, method: str, req: Any, replica: int, **args: Any) -> Op:
        op = recorded(
            Op(self.i, kind, {**args, "replica": replica}, time.time()),
            getattr(self.stubs[replica], method),
            req,
        )
        with self.lock:
            self.history.append(op)
        return op

    def devices(self, k: int) -> list[str]:
        """Random devices, half the time from one of this client's reservations (to meet its claims)."""
        pool = list(DEVICES)
        if self.mine and self.rng.random() < 0.5:
            pool = []
            for op in reversed(self.history[-200:]):
                if op.kind == "reserve" and op.outcome == "ok" and op.resp.reservation_id in self.mine[-6:]:
                    pool = list(op.resp.reservation.devices)
                    break
            pool = pool or list(DEVICES)
        return self.rng.sample(pool, min(k, len(pool)))

    def step(self) -> None:
        rng, r = self.rng, self.rng.randrange(len(self.stubs))
        kind = rng.choices(
            ["reserve", "commit", "renew", "release", "diff", "snapshot", "read"], [30, 14, 10, 14, 16, 6, 10]
        )[0]
        if kind in ("commit", "renew", "release") and not self.mine:
            kind = "reserve"
        if kind == "reserve":
            self.n += 1
            key = f"c{self.i}-{self.n}"
            ttl = rng.choice([0.6, 1.5, 30.0])
            req = rpb.ReserveRequest(
                cluster_id="h",
                job=_job(rng.randint(1, 5), rng.choice(["a", "b", "c"])),
                ttl_s=ttl,
                idempotency_key=key,
                options=pb.Options(time_limit_s=0.5),
            )
            op = self.call("reserve", "Reserve", req, r, key=key)
            if op.outcome == "info":  # retry with the same key on the other replica
                time.sleep(0.3)
                op = self.call("reserve", "Reserve", req, 1 - r, key=key)
            if op.outcome == "ok":
                self.mine.append(op.resp.reservation_id)
        elif kind in ("commit", "renew", "release"):
            rid = rng.choice(self.mine[-6:])
            ttl = rng.choice([None, 1.0, 3.0])
            req = rpb.ReservationRequest(reservation_id=rid)
            if ttl is not None:
                req.ttl_s = ttl
            self.call(kind, kind.capitalize(), req, r, rid=rid, ttl=ttl)
        elif kind in ("diff", "snapshot"):
            gen = next(self.gens)
            revoke, dry = rng.random() < 0.5, rng.random() < 0.1
            req = rpb.UpdateStateRequest(cluster_id="h", generation=gen, revoke=revoke, dry_run=dry)
            if kind == "diff":
                doc: dict[str, Any] = {}
                for d in self.devices(rng.randint(1, 3)):
                    which = rng.choices(
                        ["occupy", "free", "fail", "recover", "degrade"], [30, 25, 15, 20, 10]
                    )[0]
                    if which == "occupy":
                        doc.setdefault("occupy", []).append(
                            {"job": f"ext{rng.randint(0, 2)}", "devices": [d]}
                        )
                    elif which == "degrade":
                        doc.setdefault("degrade", []).append(
                            {"device": d, "slowdown": rng.choice([1.5, 2.0])}
                        )
                    else:
                        doc.setdefault(which, []).append(d)
                json_format.ParseDict(doc, req.diff)
            else:
                picked = self.devices(rng.randint(0, 4))
                cut = rng.randint(0, len(picked))
                doc = {
                    "occupied": [{"job": "ext9", "devices": picked[:cut]}] if cut else [],
                    "failed": picked[cut:],
                }
                json_format.ParseDict(doc, req.state)
            self.call(kind, "UpdateState", req, r, generation=gen, revoke=revoke, dry_run=dry)
        else:
            self.call("read", "GetState", rpb.GetStateRequest(cluster_id="h"), r)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite://{tmp_path / 'registry.db'}"
    else:
        yield from fresh_postgres_db()


def test_random_histories_with_a_replica_killed_keep_every_claim_single(url: str, tmp_path: Path) -> None:
    replicas = [Replica(url, tmp_path / f"replica{i}.log") for i in range(2)]
    channels = [grpc.insecure_channel(f"127.0.0.1:{r.port}") for r in replicas]
    history: list[Op] = []
    try:
        for r in replicas:
            r.wait_ready()
        stubs = [rpb_grpc.ClusterRegistryStub(ch) for ch in channels]
        cluster = json_format.ParseDict(cluster_doc(NODES, GPUS, per_leaf=2), pb.Cluster())
        stubs[0].PutCluster(rpb.PutClusterRequest(cluster_id="h", cluster=cluster), timeout=30)
        lock, gens = threading.Lock(), itertools.count(1)
        until = time.monotonic() + DURATION_S
        clients = [Client(i, stubs, history, lock, gens) for i in range(CLIENTS)]

        def run(c: Client) -> None:
            while time.monotonic() < until:
                c.step()

        threads = [threading.Thread(target=run, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        time.sleep(DURATION_S / 3)
        killed_at = time.time()
        replicas[1].kill9()  # mid-run, whatever it was doing
        time.sleep(0.5)
        replicas[1].start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
    finally:
        for ch in channels:
            ch.close()
        for r in replicas:
            r.stop()

    reg = Registry(open_store(url))
    try:
        events, seq = [], 0
        while batch := reg.store.events("h", seq, 1000):
            events += batch
            seq = batch[-1].seq
        checker = Checker(DEVICES)
        for ev in events:
            checker.apply(ev)
        seen = checker.check_ops(history)
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
        checker.check_final(
            owners, {r.id: r.status.value for r in reg.store.reservations("h", None)}, time.time()
        )
        problems = checker.problems + audit(reg, "h")
    finally:
        reg.close()
    summary = ", ".join(f"{k}={v}" for k, v in sorted(seen.items()))
    print(f"{len(history)} calls, {len(events)} events: {summary}; events {dict(checker.kinds)}")
    assert problems == [], "\n".join(problems[:30])
    # the run exercised what it claims to check
    for kind in (
        "RESERVED",
        "COMMITTED",
        "RENEWED",
        "RELEASED",
        "EXPIRED",
        "REVOKED",
        "STATE_DIFF",
        "STATE_REPLACED",
    ):
        assert checker.kinds[kind] > 0, f"no {kind} event in {dict(checker.kinds)}"
    assert any(op.kind in ("diff", "snapshot") and "claimed-device" in op.types for op in history)
    assert any(
        op.outcome == "ok" and op.args["replica"] == 1 and op.invoke > killed_at + 0.5 for op in history
    )


# ---- the checker itself: it must see what it claims to check -------------------------------------------------


def _ev(seq: int, kind: str, payload: dict[str, Any], at: float = 100.0, gen: int = 0) -> Any:
    from placement.registry.model import Event

    return Event("h", seq, kind, gen, payload, at)


def _res(rid: str, devices: list[str], expires: float = 1e9) -> dict[str, Any]:
    return {"id": rid, "job": "a", "devices": devices, "expires_at": expires, "generation": 0}


def _problems(events: list[Any], ops: list[Op] = ()) -> list[str]:  # type: ignore[assignment]
    c = Checker(DEVICES)
    for ev in events:
        c.apply(ev)
    c.check_ops(list(ops))
    return c.problems


def test_the_checker_catches_broken_histories() -> None:
    a, b = "a" * 32, "b" * 32
    d0, d1 = DEVICES[0], DEVICES[1]
    ok = [_ev(1, "RESERVED", _res(a, [d0, d1]))]
    assert _problems(ok) == []
    assert any("reserved while" in p for p in _problems([*ok, _ev(2, "RESERVED", _res(b, [d1]))]))
    fail_held = _ev(2, "STATE_DIFF", {"diff": {"fail": [d0]}}, gen=1)
    assert any("which reservation" in p for p in _problems([*ok, fail_held]))
    committed = _ev(2, "COMMITTED", {**_res(a, [d0, d1]), "status": "COMMITTED", "heartbeat_s": None})
    lost = _ev(3, "STATE_REPLACED", {"state": {"failed": [DEVICES[5]]}}, gen=1)
    assert any("lost committed" in p for p in _problems([*ok, committed, lost]))
    early = _ev(2, "EXPIRED", {**_res(a, [d0, d1], expires=500.0), "status": "EXPIRED"}, at=100.0)
    assert any(
        "before its end" in p for p in _problems([_ev(1, "RESERVED", _res(a, [d0, d1], 500.0)), early])
    )
    assert any("gap" in p for p in _problems([_ev(2, "RESERVED", _res(a, [d0]))]))
    revoked = _ev(2, "REVOKED", {**_res(a, [d0, d1]), "status": "REVOKED"})
    assert any("not followed" in p for p in _problems([*ok, revoked, _ev(3, "RESERVED", _res(b, [d0]))]))
    # acknowledged calls: a reservation the log lost, a release the log did not see, a read of another state
    got = rpb.ReserveResponse(reservation_id=b, reservation=rpb.Reservation(id=b, devices=[d1]))
    acked = Op(0, "reserve", {"replica": 0}, 99.0, 101.0, "ok", resp=got)
    assert any("lost" in p for p in _problems(ok, [acked]))
    rel = rpb.ReservationResponse(reservation=rpb.Reservation(id=a, status=rpb.RESERVATION_STATUS_RELEASED))
    assert any(
        "release of" in p for p in _problems(ok, [Op(0, "release", {"rid": a}, 99.0, 101.0, "ok", resp=rel)])
    )
    read = rpb.GetStateResponse(seq=1, state=pb.State(failed=[d0]))
    assert any("differs" in p for p in _problems(ok, [Op(0, "read", {}, 99.0, 101.0, "ok", resp=read)]))
    upd = Op(
        0, "diff", {"generation": 7, "replica": 0}, 99.0, 101.0, "ok", resp=rpb.UpdateStateResponse(seq=2)
    )
    assert any("generation 7 is not in the log" in p for p in _problems(ok, [upd]))
    # a reservation listed EXPIRED that the log then commits (a paused replica's late commit)
    late = _ev(
        2, "COMMITTED", {**_res(a, [d0, d1], 50.0), "status": "COMMITTED", "heartbeat_s": None}, at=40.0
    )
    listed = rpb.ListReservationsResponse(
        reservations=[rpb.Reservation(id=a, status=rpb.RESERVATION_STATUS_EXPIRED)]
    )
    reserved = _ev(1, "RESERVED", _res(a, [d0, d1], 50.0), at=10.0)
    assert any(
        "ends it COMMITTED" in p
        for p in _problems([reserved, late], [Op(0, "list", {}, 60.0, 61.0, "ok", resp=listed)])
    )
