"""ClusterRegistry over gRPC: every RPC with its error codes, WatchState, Place/Compare by cluster_id, ABORTED,
the `placement registry` CLI, and kill -9 of a server process during a reservation storm (SQLite): nothing
acknowledged is lost, nothing is half-written or doubled, and a restart serves the same state."""

from __future__ import annotations

import contextlib
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
from typer.testing import CliRunner

from placement.cli.app import app as cli_app
from placement.registry import Registry, open_store
from placement.registry.audit import audit
from placement.solve import place
from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from placement.v1 import registry_pb2 as rpb
from placement.v1 import registry_pb2_grpc as rpb_grpc
from server.main import create_server
from server.settings import Settings
from tests.registry_util import cluster_doc, job_dict

ROOT = Path(__file__).resolve().parent.parent


def _cluster(nodes: int = 8) -> pb.Cluster:
    return json_format.ParseDict(cluster_doc(nodes), pb.Cluster())


def _job(ranks: int, name: str | None = None) -> pb.Job:
    return json_format.ParseDict(job_dict(ranks, name), pb.Job())


@contextlib.contextmanager
def _server(tmp_path: Path, **overrides: Any) -> Iterator[tuple[Any, rpb_grpc.ClusterRegistryStub, Any, int]]:
    settings = Settings(
        **{
            "host": "127.0.0.1",
            "port": 0,
            "metrics_port": None,
            "workers": 2,
            "registry": f"sqlite://{tmp_path / 'registry.db'}",
            **overrides,
        }
    )
    server, port = create_server(settings)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield server, rpb_grpc.ClusterRegistryStub(channel), pb_grpc.PlacementServiceStub(channel), port
    finally:
        channel.close()
        server.stop(None).wait(10)


def _error(call: Any, *args: Any) -> tuple[grpc.StatusCode, str, list[Any]]:
    with pytest.raises(grpc.RpcError) as e:
        call(*args, timeout=30)
    status = rpc_status.from_call(e.value)
    details: list[Any] = []
    for d in status.details if status else []:
        for t in (error_details_pb2.BadRequest, error_details_pb2.PreconditionFailure):
            if d.Is(t.DESCRIPTOR):
                msg = t()
                d.Unpack(msg)
                details.append(msg)
    return e.value.code(), e.value.details() or "", details


def test_registry_rpcs_and_their_errors(tmp_path: Path) -> None:
    with _server(tmp_path) as (_, reg, placement, _port):
        put = reg.PutCluster(rpb.PutClusterRequest(cluster_id="c", cluster=_cluster(8)), timeout=30)
        assert (put.version, put.changed, put.devices) == (1, True, 64)
        code, msg, _ = _error(
            reg.PutCluster, rpb.PutClusterRequest(cluster_id="bad", cluster=pb.Cluster(name="x"))
        )
        assert code is grpc.StatusCode.INVALID_ARGUMENT and "cluster.levels" in msg
        reg.UpdateState(
            rpb.UpdateStateRequest(
                cluster_id="c",
                generation=4,
                state=pb.State(occupied=[pb.Occupancy(job="x", devices=["node01"])]),
            ),
            timeout=30,
        )
        code, msg, details = _error(
            reg.UpdateState,
            rpb.UpdateStateRequest(cluster_id="c", generation=3, diff=rpb.StateDiff(free=["node01"])),
        )
        assert code is grpc.StatusCode.FAILED_PRECONDITION and "stale" in msg
        assert details[0].violations[0].type == "stale-generation"
        code, _, details = _error(
            reg.UpdateState,
            rpb.UpdateStateRequest(cluster_id="c", generation=5, diff=rpb.StateDiff(fail=["node77"])),
        )
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        assert details[0].field_violations[0].field == "diff.fail[0]"
        code, _, _ = _error(reg.GetState, rpb.GetStateRequest(cluster_id="nope"))
        assert code is grpc.StatusCode.NOT_FOUND

        first = reg.Reserve(
            rpb.ReserveRequest(cluster_id="c", job=_job(16), ttl_s=30, idempotency_key="a"), timeout=60
        )
        assert len(first.result.mapping) == 16 and first.reservation.status == rpb.RESERVATION_STATUS_HELD
        assert first.expires_unix_s == first.reservation.expires_unix_s
        again = reg.Reserve(
            rpb.ReserveRequest(cluster_id="c", job=_job(16), ttl_s=30, idempotency_key="a"), timeout=60
        )
        assert (
            again.replayed and again.reservation_id == first.reservation_id and again.result == first.result
        )
        code, _, details = _error(
            reg.Reserve, rpb.ReserveRequest(cluster_id="c", job=_job(8), idempotency_key="a")
        )
        assert (
            code is grpc.StatusCode.FAILED_PRECONDITION and details[0].violations[0].type == "idempotency-key"
        )
        code, _, _ = _error(reg.Reserve, rpb.ReserveRequest(cluster_id="c", job=_job(64)))
        assert code is grpc.StatusCode.FAILED_PRECONDITION  # 64 - 8 occupied - 16 held devices left

        # Place and Compare by cluster_id run on the registry's state, holds occupied
        held = {a.device for a in first.result.mapping}
        placed = placement.Place(pb.PlaceRequest(cluster_id="c", job=_job(32)), timeout=60)
        taken = {a.device for a in placed.result.mapping}
        assert not taken & held and not any(d.startswith("node01/") for d in taken)
        ranked = placement.Compare(pb.CompareRequest(cluster_id="c", jobs=[_job(8), _job(48)]), timeout=60)
        assert {e.result.status for e in ranked.ranking} == {
            pb.SOLVE_STATUS_OPTIMAL,
            pb.SOLVE_STATUS_INFEASIBLE,
        }
        code, msg, _ = _error(
            placement.Place, pb.PlaceRequest(cluster_id="c", cluster=_cluster(2), job=_job(8))
        )
        assert code is grpc.StatusCode.INVALID_ARGUMENT and "cluster_id" in msg
        code, _, _ = _error(placement.Place, pb.PlaceRequest(cluster_id="nope", job=_job(8)))
        assert code is grpc.StatusCode.NOT_FOUND

        rid = first.reservation_id
        renewed = reg.Renew(rpb.ReservationRequest(reservation_id=rid, ttl_s=100), timeout=30).reservation
        assert renewed.expires_unix_s > first.expires_unix_s
        assert (
            reg.Commit(rpb.ReservationRequest(reservation_id=rid), timeout=30).reservation.status
            == rpb.RESERVATION_STATUS_COMMITTED
        )
        state = reg.GetState(rpb.GetStateRequest(cluster_id="c", include_cluster=True), timeout=30)
        assert {o.job: len(o.devices) for o in state.state.occupied} == {"x": 8, "job16": 16}
        assert state.generation == 4 and not state.holds and state.cluster.name == "c8"
        live = reg.ListReservations(rpb.ListReservationsRequest(cluster_id="c", live_only=True), timeout=30)
        assert [r.id for r in live.reservations] == [rid]
        assert (
            reg.Release(rpb.ReservationRequest(reservation_id=rid), timeout=30).reservation.status
            == rpb.RESERVATION_STATUS_RELEASED
        )
        code, _, details = _error(reg.Renew, rpb.ReservationRequest(reservation_id=rid))
        assert code is grpc.StatusCode.FAILED_PRECONDITION and details[0].violations[0].type == "wrong-status"
        code, _, _ = _error(reg.Commit, rpb.ReservationRequest(reservation_id="nope"))
        assert code is grpc.StatusCode.NOT_FOUND


def test_watch_state_streams_a_snapshot_then_every_change_in_order(tmp_path: Path) -> None:
    with _server(tmp_path) as (_, reg, _p, _port):
        reg.PutCluster(rpb.PutClusterRequest(cluster_id="c", cluster=_cluster(4)), timeout=30)
        events: list[rpb.StateEvent] = []
        stream = reg.WatchState(rpb.WatchStateRequest(cluster_id="c"), timeout=30)

        def consume() -> None:
            with contextlib.suppress(grpc.RpcError):
                for ev in stream:
                    events.append(ev)
                    if len(events) == 4:
                        stream.cancel()

        t = threading.Thread(target=consume)
        t.start()
        deadline = time.monotonic() + 10
        while not events and time.monotonic() < deadline:
            time.sleep(0.02)
        reg.UpdateState(
            rpb.UpdateStateRequest(cluster_id="c", generation=1, diff=rpb.StateDiff(fail=["node01/gpu0"])),
            timeout=30,
        )
        out = reg.Reserve(rpb.ReserveRequest(cluster_id="c", job=_job(8)), timeout=60)
        reg.Release(rpb.ReservationRequest(reservation_id=out.reservation_id), timeout=30)
        t.join(20)
        kinds = [rpb.StateEventKind.Name(e.kind).removeprefix("STATE_EVENT_KIND_") for e in events]
        assert kinds == ["SNAPSHOT", "STATE_DIFF", "RESERVED", "RELEASED"]
        assert [e.seq for e in events[1:]] == [events[0].seq + i for i in (1, 2, 3)]
        assert list(events[1].diff.fail) == ["node01/gpu0"] and events[1].generation == 1
        assert events[2].reservation.id == out.reservation_id and len(events[2].reservation.devices) == 8
        resumed = reg.WatchState(rpb.WatchStateRequest(cluster_id="c", after_seq=events[1].seq), timeout=5)
        first = next(iter(resumed))
        resumed.cancel()
        assert first.seq == events[2].seq and first.kind == rpb.STATE_EVENT_KIND_RESERVED


def test_reserve_answers_aborted_when_the_state_moves_under_every_solve(tmp_path: Path) -> None:
    with _server(tmp_path) as (server, reg, _p, _port):
        reg.PutCluster(rpb.PutClusterRequest(cluster_id="c", cluster=_cluster(4)), timeout=30)
        registry: Registry | None = server.registry.open()
        assert registry is not None
        gens = iter(range(1, 100))

        def moving(*args: Any) -> Any:
            res = place(*args)
            assert registry is not None
            registry.update_state(
                "c", next(gens), diff={"degrade": [{"device": "node04/gpu7", "slowdown": 1.2}]}
            )
            return res

        registry._solve = moving
        code, msg, _ = _error(reg.Reserve, rpb.ReserveRequest(cluster_id="c", job=_job(8)))
        assert code is grpc.StatusCode.ABORTED and "retry" in msg


def test_cli_registry_commands(tmp_path: Path) -> None:
    cluster_file = tmp_path / "cluster.yaml"
    job_file = tmp_path / "job.yaml"
    diff_file = tmp_path / "diff.yaml"
    import yaml

    cluster_file.write_text(yaml.safe_dump(cluster_doc(4)))
    job_file.write_text(yaml.safe_dump(job_dict(16, "train")))
    diff_file.write_text(yaml.safe_dump({"occupy": [{"job": "other", "devices": ["node01"]}]}))
    runner = CliRunner()
    with _server(tmp_path) as (_, _reg, _p, port):
        s = f"127.0.0.1:{port}"

        def run(*args: str) -> str:
            res = runner.invoke(cli_app, ["registry", *args, "--server", s])
            assert res.exit_code == 0, res.output
            return str(res.output)

        assert "version 1 (changed), 32 devices" in run("put-cluster", str(cluster_file), "--cluster", "c")
        assert "generation 1" in run(
            "update-state", "--cluster", "c", "--generation", "1", "--diff", str(diff_file)
        )
        out = run("reserve", str(job_file), "--cluster", "c", "--key", "k", "--ttl", "120")
        rid = out.split("reservation ")[1].split(":")[0]
        assert "HELD" in out and len(rid) == 32
        assert out.startswith(f"reservation {rid}: HELD until ")  # the id commit needs comes first
        assert "replayed" in run("reserve", str(job_file), "--cluster", "c", "--key", "k", "--ttl", "120")
        assert "COMMITTED" in run("commit", rid)
        assert rid in run("list", "--cluster", "c", "--live", "--output", "json")
        assert rid in run("list", "--cluster", "c")  # the 80-column table keeps the id whole
        state = run("state", "--cluster", "c")
        assert "job: train" in state and "job: other" in state
        bad = runner.invoke(
            cli_app,
            [
                "registry",
                "update-state",
                "--cluster",
                "c",
                "--generation",
                "1",
                "--diff",
                str(diff_file),
                "--server",
                s,
            ],
        )
        assert bad.exit_code == 6 and "stale" in bad.output


def test_cli_registry_update_meets_claims_revoke_dry_run_and_heartbeat(tmp_path: Path) -> None:
    """update-state onto a committed reservation's devices is refused (exit 6, a conflict, naming the reservation); --dry-run
    --revoke says what it would revoke and writes nothing; --revoke revokes it with the reason; commit --ttl gives a
    heartbeat that renew extends."""
    import yaml

    cluster_file, job_file, diff_file = tmp_path / "c.yaml", tmp_path / "j.yaml", tmp_path / "d.yaml"
    cluster_file.write_text(yaml.safe_dump(cluster_doc(2)))
    job_file.write_text(yaml.safe_dump(job_dict(8, "train")))
    runner = CliRunner()
    with _server(tmp_path) as (_, reg, _p, port):
        s = f"127.0.0.1:{port}"

        def run(*args: str, code: int = 0) -> str:
            res = runner.invoke(cli_app, ["registry", *args, "--server", s])
            assert res.exit_code == code, res.output
            return str(res.output)

        run("put-cluster", str(cluster_file), "--cluster", "c")
        rid = run("reserve", str(job_file), "--cluster", "c").split("reservation ")[1].split(":")[0]
        committed = run("commit", rid, "--ttl", "300")
        assert "COMMITTED until" in committed and "heartbeat 300 s" in committed
        assert "heartbeat 300 s" in run("renew", rid)
        device = reg.ListReservations(rpb.ListReservationsRequest(cluster_id="c"), timeout=30).reservations[0]
        diff_file.write_text(yaml.safe_dump({"occupy": [{"job": "ext", "devices": [device.devices[0]]}]}))
        update = ["update-state", "--cluster", "c", "--generation", "1", "--diff", str(diff_file)]
        refused = run(*update, code=6)
        assert rid in refused and device.devices[0] in refused
        dry = run(*update, "--revoke", "--dry-run")
        assert "dry run, nothing written" in dry and f"would revoke reservation {rid}" in dry
        assert "COMMITTED" in run("list", "--cluster", "c")  # the dry run wrote nothing
        done = run(*update, "--revoke", "--reason", "node repair")
        assert f"revoked reservation {rid} (train, 8 devices): node repair" in done
        listed = run("list", "--cluster", "c", "--wide")
        assert "REVOKED" in listed and "node repair" in listed


# ---- kill -9 ------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(db: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("ab") as f:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "server.main",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--metrics-port",
                "-1",
                "--workers",
                "2",
                "--log-level",
                "WARNING",
                "--registry",
                f"sqlite://{db}",
            ],
            cwd=ROOT,
            env=env,
            stdout=f,
            stderr=f,
        )


def _wait_ready(channel: Any, proc: subprocess.Popen[bytes], log: Path) -> None:
    stub = rpb_grpc.ClusterRegistryStub(channel)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            stub.ListReservations(rpb.ListReservationsRequest(), timeout=2)
            return
        except grpc.RpcError:
            time.sleep(0.1)
    raise AssertionError("the server did not come up: " + log.read_text())


def test_kill_9_during_a_reservation_storm_loses_nothing_and_doubles_nothing(tmp_path: Path) -> None:
    db, log = tmp_path / "registry.db", tmp_path / "server.log"
    rng = random.Random(13)
    acked: dict[str, tuple[str, tuple[str, ...]]] = {}  # key -> (reservation id, devices) answered OK
    lock = threading.Lock()
    rounds = 3
    for rnd in range(rounds):
        port = _free_port()
        proc = _spawn(db, port, log)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                _wait_ready(ch, proc, log)
                stub = rpb_grpc.ClusterRegistryStub(ch)
                if rnd == 0:
                    stub.PutCluster(rpb.PutClusterRequest(cluster_id="c", cluster=_cluster(64)), timeout=30)
                before = stub.GetState(rpb.GetStateRequest(cluster_id="c"), timeout=30)
                for key, (rid, devices) in acked.items():  # everything answered before the kill is there
                    again = stub.Reserve(
                        rpb.ReserveRequest(cluster_id="c", job=_job(8, key), ttl_s=3600, idempotency_key=key),
                        timeout=60,
                    )
                    assert (
                        again.replayed
                        and again.reservation_id == rid
                        and tuple(again.reservation.devices) == devices
                    )

                def storm(worker: int, stub: Any = stub, rnd: int = rnd) -> None:
                    for i in range(100):
                        key = f"r{rnd}-w{worker}-{i}"
                        try:
                            out = stub.Reserve(
                                rpb.ReserveRequest(
                                    cluster_id="c", job=_job(8, key), ttl_s=3600, idempotency_key=key
                                ),
                                timeout=60,
                            )
                        except grpc.RpcError:
                            return  # the server died (or the cluster is full)
                        with lock:
                            acked[key] = (out.reservation_id, tuple(out.reservation.devices))
                        if i % 2:  # churn: the cluster never fills up
                            try:
                                stub.Release(
                                    rpb.ReservationRequest(reservation_id=out.reservation_id), timeout=30
                                )
                            except grpc.RpcError:
                                return

                threads = [threading.Thread(target=storm, args=(w,)) for w in range(4)]
                for t in threads:
                    t.start()
                time.sleep(rng.uniform(0.3, 2.5))
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(30)
                for t in threads:
                    t.join(60)
                assert before.seq >= 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reg = Registry(open_store(f"sqlite://{db}"))
        assert audit(reg, "c") == [], f"round {rnd}"
        stored = {r.idempotency_key: (r.id, r.devices) for r in reg.reservations("c")}
        assert all(stored.get(k) == v for k, v in acked.items()), (
            f"round {rnd}: an acknowledged reservation is lost"
        )
        reg.close()
    print(f"{len(acked)} reservations acknowledged over {rounds} kills")
    assert len(acked) >= rounds  # the storm got through before the kills


def test_the_sweeper_expires_leases_and_tells_watchers(tmp_path: Path) -> None:
    with _server(tmp_path, lease_sweep_s=0.05) as (_, reg, _p, _port):
        reg.PutCluster(rpb.PutClusterRequest(cluster_id="c", cluster=_cluster(2)), timeout=30)
        out = reg.Reserve(rpb.ReserveRequest(cluster_id="c", job=_job(16), ttl_s=0.2), timeout=60)
        assert out.expires_unix_s - out.reservation.created_unix_s == pytest.approx(0.2)
        # events: CLUSTER_PUT (seq 1), RESERVED (2); resume after them and wait for the sweeper's EXPIRED
        stream = reg.WatchState(rpb.WatchStateRequest(cluster_id="c", after_seq=2), timeout=30)
        kinds = []
        for ev in stream:
            kinds.append(ev.kind)
            if ev.kind == rpb.STATE_EVENT_KIND_EXPIRED:
                stream.cancel()
                break
        assert kinds[-1] == rpb.STATE_EVENT_KIND_EXPIRED
        listed = reg.ListReservations(rpb.ListReservationsRequest(cluster_id="c"), timeout=30).reservations
        assert [r.status for r in listed] == [rpb.RESERVATION_STATUS_EXPIRED]
        again = reg.Reserve(
            rpb.ReserveRequest(cluster_id="c", job=_job(16)), timeout=60
        )  # the devices are free
        assert len(again.reservation.devices) == 16


def test_settings_check_the_registry_url() -> None:
    with pytest.raises(ValueError, match="registry must be"):
        Settings(registry="mysql://db")
    assert Settings(registry="off").registry == "off"


def test_place_batch_and_repair_take_a_registry_cluster_by_id(tmp_path: Path) -> None:
    with _server(tmp_path) as (_, reg, placement, _port):
        reg.PutCluster(rpb.PutClusterRequest(cluster_id="c", cluster=_cluster(8)), timeout=30)
        reg.UpdateState(
            rpb.UpdateStateRequest(
                cluster_id="c",
                generation=1,
                state=pb.State(occupied=[pb.Occupancy(job="x", devices=["node01"])]),
            ),
            timeout=30,
        )
        first = reg.Reserve(rpb.ReserveRequest(cluster_id="c", job=_job(16), ttl_s=60), timeout=60)
        held = {a.device for a in first.result.mapping}

        # PlaceBatch on the registry's state: node01 (8) and the hold (16) are occupied, so of 64 GPUs 40 are free:
        # jobs of 24 and 8 ranks fit together, one of 40 more does not
        batch = placement.PlaceBatch(
            pb.PlaceBatchRequest(
                cluster_id="c",
                jobs=[pb.BatchJob(job=_job(24)), pb.BatchJob(job=_job(8)), pb.BatchJob(job=_job(40))],
            ),
            timeout=120,
        )
        used = [a.device for j in batch.plan.jobs if j.admitted for a in j.mapping]
        assert batch.plan.admitted == 2 and len(used) == len(set(used)) == 32
        assert not set(used) & held and not any(d.startswith("node01/") for d in used)
        code, msg, _ = _error(
            placement.PlaceBatch,
            pb.PlaceBatchRequest(cluster_id="c", cluster=_cluster(2), jobs=[pb.BatchJob(job=_job(8))]),
        )
        assert code is grpc.StatusCode.INVALID_ARGUMENT and "cluster_id" in msg

        # Repair of the committed job after one of its devices fails: the registry's state says which. Failing a
        # committed device is refused unless the update revokes the reservation; the scheduler reports the job
        # still running on the rest (outside occupancy of its name), as a repair needs
        reg.Commit(rpb.ReservationRequest(reservation_id=first.reservation_id), timeout=30)
        broken = first.result.mapping[3].device
        rest = [a.device for a in first.result.mapping if a.device != broken]
        diff = rpb.StateDiff(fail=[broken], occupy=[pb.Occupancy(job="job16", devices=rest)])
        code, msg, details = _error(
            reg.UpdateState, rpb.UpdateStateRequest(cluster_id="c", generation=2, diff=diff)
        )
        assert code is grpc.StatusCode.FAILED_PRECONDITION and first.reservation_id in msg and broken in msg
        assert [v.type for v in details[0].violations] == ["claimed-device"]
        done = reg.UpdateState(
            rpb.UpdateStateRequest(cluster_id="c", generation=2, diff=diff, revoke=True), timeout=30
        )
        assert [r.id for r in done.revoked] == [first.reservation_id]
        assert done.revoked[0].status == rpb.RESERVATION_STATUS_REVOKED and broken in done.revoked[0].reason
        assert list(done.changes.fail) == [broken] and sorted(done.changes.occupy[0].devices) == sorted(rest)
        fixed = placement.Repair(
            pb.RepairRequest(cluster_id="c", job=_job(16), current=first.result.mapping), timeout=120
        )
        assert 3 in fixed.forced_ranks and fixed.answers
        for answer in fixed.answers:
            devices = [a.device for a in answer.mapping]
            assert broken not in devices and len(set(devices)) == 16
            assert not any(d.startswith("node01/") for d in devices)
        code, _, _ = _error(
            placement.Repair, pb.RepairRequest(cluster_id="nope", job=_job(16), current=first.result.mapping)
        )
        assert code is grpc.StatusCode.NOT_FOUND
