"""The registry knows the traffic on the fabric: a committed job's shape and mapping are kept (SQLite and
PostgreSQL, across a reopen), Place and Reserve by cluster_id price the contention it causes without the caller
sending it (checked against evaluate() on a state built by hand), an outside state's shapes count the same, and
GetState and WatchState carry the uplink loads (checked against bytes per step worked by hand)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from typer.testing import CliRunner

from placement.cli.app import app as cli_app
from placement.cost.evaluate import evaluate
from placement.cost.serving import model_serving
from placement.cost.shared import link_loads
from placement.io.native import cluster_from_dict, job_from_dict
from placement.io.native.serving import serving_job_from_dict
from placement.messages.serving_job import serving_to_proto
from placement.model.state import ClusterState, RunningJob
from placement.model.topology import Topology
from placement.registry import Registry, open_store
from placement.solve import SolveOptions
from placement.solve.serving import explicit_shape, serving_traffic_job
from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from placement.v1 import registry_pb2 as rpb
from placement.v1 import registry_pb2_grpc as rpb_grpc
from server.main import create_server
from server.settings import Settings
from tests.registry_util import Clock, store_url
from tests.support_serving import serving_job_doc


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


def _cluster_doc() -> dict[str, Any]:
    """4 hosts of 8 H100s, 2 per leaf, leaves 4:1 oversubscribed: a job spanning the two leaves loads the
    leaves' uplinks (100 GB/s at the spine's 200, over 4: 50 GB/s each way)."""
    return {
        "name": "oversub",
        "levels": [
            {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
            {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5, "oversubscription": 4},
            {"name": "spine", "bandwidth_gbps": 100, "latency_us": 10},
        ],
        "generate": [{"nodes": 4, "devices": 8, "kind": "H100", "fanout": {"leaf": 2}}],
    }


def _job_doc(name: str) -> dict[str, Any]:
    """TP 8 in a host, DP 2 across two hosts: a DP all-reduce of 7B parameters' gradients every step."""
    return {
        "name": name,
        "device_kind": "H100",
        "parallel": {"tp": 8, "dp": 2},
        "model": {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096, "micro_batches": 2},
        "constraints": {"require": {"tp": "node"}},
    }


def _edge_doc(name: str, nbytes: float) -> dict[str, Any]:
    """An explicit job: rank 0 sends `nbytes` to rank 1 once per step, nothing else."""
    return {"name": name, "ranks": 2, "edges": [{"src": 0, "dst": 1, "bytes": nbytes}]}


def _hosts(*hosts: str) -> list[str]:
    return [f"{h}/gpu{i}" for h in hosts for i in range(8)]


@contextlib.contextmanager
def _server(
    url: str,
) -> Iterator[tuple[rpb_grpc.ClusterRegistryStub, pb_grpc.PlacementServiceStub, str]]:
    settings = Settings(host="127.0.0.1", port=0, metrics_port=None, workers=2, registry=url)
    server, port = create_server(settings)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield (
            rpb_grpc.ClusterRegistryStub(channel),
            pb_grpc.PlacementServiceStub(channel),
            f"127.0.0.1:{port}",
        )
    finally:
        channel.close()
        server.stop(None).wait(10)


def _put(reg: rpb_grpc.ClusterRegistryStub) -> Topology:
    reg.PutCluster(
        rpb.PutClusterRequest(cluster_id="c", cluster=json_format.ParseDict(_cluster_doc(), pb.Cluster())),
        timeout=30,
    )
    return cluster_from_dict(_cluster_doc())[0]


def _occupy(reg: rpb_grpc.ClusterRegistryStub, generation: int, occupied: list[dict[str, Any]]) -> None:
    state = json_format.ParseDict({"occupied": occupied}, pb.State())
    reg.UpdateState(rpb.UpdateStateRequest(cluster_id="c", generation=generation, state=state), timeout=30)


def _reserve_committed(reg: rpb_grpc.ClusterRegistryStub, job: dict[str, Any]) -> rpb.ReserveResponse:
    out = reg.Reserve(
        rpb.ReserveRequest(
            cluster_id="c",
            job=json_format.ParseDict(job, pb.Job()),
            options=pb.Options(time_limit_s=5),
        ),
        timeout=60,
    )
    reg.Commit(rpb.ReservationRequest(reservation_id=out.reservation_id), timeout=30)
    return out


def _indices(topo: Topology, ids: Any) -> tuple[int, ...]:
    out = []
    for d in ids:
        i = topo.device_index(d)
        assert i is not None
        out.append(i)
    return tuple(out)


def test_place_by_cluster_id_prices_a_committed_jobs_traffic(url: str) -> None:
    """Job "a" (DP across the two leaves: the other hosts are occupied from outside) is committed; the outside
    occupancy goes; job "b" can then only span the leaves too. Place by cluster_id prices b against a's traffic,
    exactly as evaluate() does on a state built by hand with a as background, and names a's harm."""
    with _server(url) as (reg, place, _target):
        topo = _put(reg)
        _occupy(reg, 1, [{"job": "other", "devices": ["node02", "node04"]}])
        a = _reserve_committed(reg, _job_doc("a"))
        a_devices = tuple(a.reservation.devices)
        assert {d.split("/")[0] for d in a_devices} == {"node01", "node03"}  # across the leaves
        listed = reg.ListReservations(rpb.ListReservationsRequest(cluster_id="c"), timeout=30).reservations
        assert [json_format.MessageToDict(r.shape) for r in listed] == [
            json_format.MessageToDict(json_format.ParseDict(_job_doc("a"), pb.Job()))
        ]
        _occupy(reg, 2, [])  # the outside job ended; the committed reservation keeps its devices

        got = place.Place(
            pb.PlaceRequest(
                cluster_id="c",
                job=json_format.ParseDict(_job_doc("b"), pb.Job()),
                options=pb.Options(time_limit_s=5),
            ),
            timeout=60,
        ).result
        mapping = [topo.device_index(x.device) for x in got.mapping]
        assert {topo.devices[i].id.split("/")[0] for i in mapping if i is not None} == {"node02", "node04"}

        # independently: the same mapping on a state written by hand with a's shape and ranks
        a_idx = _indices(topo, a_devices)
        running = RunningJob("a", job_from_dict(_job_doc("a")), a_idx)
        by_hand = ClusterState(occupied=dict.fromkeys(a_idx, "a"), background=(running,))
        want = evaluate(topo, by_hand, job_from_dict(_job_doc("b")), [i for i in mapping if i is not None])
        alone = evaluate(
            topo,
            ClusterState(occupied=dict.fromkeys(a_idx, "a")),
            job_from_dict(_job_doc("b")),
            [i for i in mapping if i is not None],
        )
        assert want.contention is not None
        c = got.cost.contention
        assert c.contention_seconds > 0  # the shared uplinks cost b time
        assert c.contention_seconds == pytest.approx(want.contention.seconds, rel=1e-9)
        assert c.alone_step_seconds == pytest.approx(alone.step_seconds, rel=1e-9)
        assert got.cost.step_seconds == pytest.approx(want.step_seconds, rel=1e-9)
        assert got.cost.step_seconds > alone.step_seconds
        assert [(h.job, h.gpus) for h in c.harm] == [("a", 16)]
        assert c.harm[0].added_seconds == pytest.approx(want.contention.harm[0].added_seconds, rel=1e-9)
        assert c.harm[0].added_seconds > 0
        assert c.harm_gpu_s_per_s == pytest.approx(want.contention.harm_gpu_s_per_s, rel=1e-9)

        # Reserve prices it too; there the running job is named by its owner
        b = reg.Reserve(
            rpb.ReserveRequest(
                cluster_id="c",
                job=json_format.ParseDict(_job_doc("b"), pb.Job()),
                options=pb.Options(time_limit_s=5),
            ),
            timeout=60,
        )
        assert b.result.cost.contention.contention_seconds == pytest.approx(c.contention_seconds, rel=1e-9)
        assert [h.job for h in b.result.cost.contention.harm] == [f"reservation:{a.reservation_id}"]

        # released, a's traffic is gone: the same Place is priced alone
        reg.Release(rpb.ReservationRequest(reservation_id=b.reservation_id), timeout=30)
        reg.Release(rpb.ReservationRequest(reservation_id=a.reservation_id), timeout=30)
        again = place.Place(
            pb.PlaceRequest(
                cluster_id="c",
                job=json_format.ParseDict(_job_doc("b"), pb.Job()),
                options=pb.Options(time_limit_s=5),
            ),
            timeout=60,
        ).result
        assert not again.cost.HasField("contention")


def test_the_shape_survives_a_reopen_and_shows_in_the_state(url: str) -> None:
    """Stored with the reservation (schema 4): a new registry on the same database reads a's shape and ranks
    back, shows them in the state document, and prices a's traffic; a reservation without a shape prices none."""
    topo = cluster_from_dict(_cluster_doc())[0]
    reg = Registry(open_store(url))
    reg.put_cluster("c", _cluster_doc())
    reg.update_state("c", 1, snapshot={"occupied": [{"job": "other", "devices": ["node02", "node04"]}]})

    def render(_t: Topology, _r: Any) -> bytes:
        return b""

    a_job = job_from_dict(_job_doc("a"))
    out = reg.reserve(
        "c",
        a_job,
        SolveOptions(time_limit_s=5),
        ttl_s=60,
        key=None,
        fingerprint="a",
        render=render,
        shape=_job_doc("a"),
    )
    reg.commit(out.reservation.id)
    reg.update_state("c", 2, snapshot={})
    plain = reg.reserve(
        "c",
        job_from_dict(_edge_doc("p", 1e9)),
        SolveOptions(time_limit_s=5),
        ttl_s=60,
        key=None,
        fingerprint="p",
        render=render,
    )
    reg.commit(plain.reservation.id)
    reg.close()

    again = Registry(open_store(url))
    try:
        assert again.get(out.reservation.id).shape == _job_doc("a")
        assert again.get(plain.reservation.id).shape is None
        now = again.clock()
        view = again.view("c")
        doc = view.document(now)
        shaped = [o for o in doc["occupied"] if o["job"] == "a"]
        assert len(shaped) == 1 and shaped[0]["shape"] == _job_doc("a")
        assert shaped[0].get("ranks", shaped[0]["devices"]) == list(out.reservation.devices)
        state = view.state(now)
        assert [(r.job_id, r.devices) for r in state.running()] == [
            ("a", _indices(topo, out.reservation.devices))
        ]
    finally:
        again.close()


def test_an_outside_state_with_shapes_is_priced_through_the_registry(url: str) -> None:
    """UpdateState with occupied entries that give a shape (as a state file does): Place by cluster_id prices
    that job's traffic as evaluate() does on the same state document read by hand; GetState shows the shape."""
    with _server(url) as (reg, place, _target):
        topo = _put(reg)
        x = {"job": "x", "devices": ["node01", "node03"], "shape": _job_doc("x")}
        _occupy(reg, 1, [x])
        got = place.Place(
            pb.PlaceRequest(
                cluster_id="c",
                job=json_format.ParseDict(_job_doc("b"), pb.Job()),
                options=pb.Options(time_limit_s=5),
            ),
            timeout=60,
        ).result
        mapping = [topo.device_index(a.device) for a in got.mapping]
        x_idx = _indices(topo, _hosts("node01", "node03"))
        by_hand = ClusterState(
            occupied=dict.fromkeys(x_idx, "x"),
            background=(RunningJob("x", job_from_dict(_job_doc("x")), x_idx),),
        )
        want = evaluate(topo, by_hand, job_from_dict(_job_doc("b")), [i for i in mapping if i is not None])
        assert want.contention is not None and want.contention.seconds > 0
        assert got.cost.contention.contention_seconds == pytest.approx(want.contention.seconds, rel=1e-9)
        assert [h.job for h in got.cost.contention.harm] == ["x"]

        state = reg.GetState(rpb.GetStateRequest(cluster_id="c"), timeout=30).state
        (entry,) = [o for o in state.occupied if o.job == "x"]
        assert entry.HasField("shape") and entry.shape.name == "x"

        # a diff that frees one of x's devices: x no longer runs as its shape says, its traffic is not priced
        reg.UpdateState(
            rpb.UpdateStateRequest(cluster_id="c", generation=2, diff=rpb.StateDiff(free=["node03/gpu7"])),
            timeout=30,
        )
        loads = reg.GetState(rpb.GetStateRequest(cluster_id="c"), timeout=30).link_loads
        assert list(loads) == []


def test_watch_and_get_state_carry_the_uplink_loads(url: str) -> None:
    """A one-edge job across the leaves (every other device occupied from outside) sends B bytes per step: on each
    link it crosses, its average load is B over its step, in its direction only (the sender's host NICs and
    leaf uplink up, the receiver's down). WatchState carries that from the COMMITTED event on and
    nothing after the release."""
    nbytes = 4e9
    with _server(url) as (reg, _place, _target):
        topo = _put(reg)
        others = ["node02", "node04"] + [f"{h}/gpu{i}" for h in ("node01", "node03") for i in range(1, 8)]
        _occupy(reg, 1, [{"job": "other", "devices": others}])  # free: node01/gpu0 and node03/gpu0
        stream = reg.WatchState(rpb.WatchStateRequest(cluster_id="c"), timeout=60)
        seen: list[rpb.StateEvent] = []
        done = threading.Event()

        def read() -> None:
            with contextlib.suppress(grpc.RpcError):
                for ev in stream:
                    seen.append(ev)
                    if ev.kind == rpb.STATE_EVENT_KIND_RELEASED:
                        done.set()
                        return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        out = reg.Reserve(
            rpb.ReserveRequest(
                cluster_id="c",
                job=json_format.ParseDict(_edge_doc("e", nbytes), pb.Job()),
                options=pb.Options(time_limit_s=5),
            ),
            timeout=60,
        )
        src, dst = out.reservation.devices
        assert {src, dst} == {"node01/gpu0", "node03/gpu0"}
        reg.Commit(rpb.ReservationRequest(reservation_id=out.reservation_id), timeout=30)
        state = reg.GetState(rpb.GetStateRequest(cluster_id="c"), timeout=30)
        reg.Release(rpb.ReservationRequest(reservation_id=out.reservation_id), timeout=30)
        assert done.wait(30)
        stream.cancel()

        # by hand: B bytes per step over the step of the job alone
        idx = _indices(topo, [src, dst])
        step = evaluate(topo, ClusterState(), job_from_dict(_edge_doc("e", nbytes)), list(idx)).step_seconds
        rate = nbytes / step / 1e9
        hs, hd = src.split("/")[0], dst.split("/")[0]
        ls, ld = (f"leaf:{topo.domain_names[1][topo.domain_column(1)[i]]}" for i in idx)
        assert ls != ld
        want = {f"node:{hs}": (rate, 0.0), ls: (rate, 0.0), f"node:{hd}": (0.0, rate), ld: (0.0, rate)}

        def as_dict(loads: Any) -> dict[str, tuple[float, float]]:
            return {x.uplink: (x.up_gbps, x.down_gbps) for x in loads}

        got = as_dict(state.link_loads)
        assert got.keys() == want.keys()
        for k, (up, down) in want.items():
            assert got[k] == pytest.approx((up, down), rel=1e-9), k
        caps = {x.uplink: x.capacity_gbps for x in state.link_loads}
        assert caps[ls] == pytest.approx(16 * 100 / 4)  # a leaf's 16 GPUs at the spine's 100 GB/s, over 4
        assert caps[f"node:{hs}"] == pytest.approx(8 * 50)  # a host's 8 NICs at the leaf's 50 GB/s
        for x in state.link_loads:
            assert 0 < max(x.up_gbps, x.down_gbps) <= x.capacity_gbps * (1 + 1e-9)

        kinds = [(ev.kind, as_dict(ev.link_loads)) for ev in seen]
        assert kinds[0][0] == rpb.STATE_EVENT_KIND_SNAPSHOT and kinds[0][1] == {}
        by_kind = {k: v for k, v in kinds}
        (committed,) = [ev for ev in seen if ev.kind == rpb.STATE_EVENT_KIND_COMMITTED]
        assert committed.reservation.shape.name == "e" and len(committed.reservation.shape.edges) == 1
        assert by_kind[rpb.STATE_EVENT_KIND_RESERVED] == {}  # held: the job does not run yet
        assert by_kind[rpb.STATE_EVENT_KIND_COMMITTED].keys() == want.keys()
        assert by_kind[rpb.STATE_EVENT_KIND_RELEASED] == {}


def test_cli_state_table_shows_shapes_and_link_loads_in_80_columns(tmp_path: Path) -> None:
    """`placement registry state -o table`: the committed job with its shape in brief, and the uplinks its
    traffic loads with their capacity; every line within 80 columns."""
    with _server(f"sqlite://{tmp_path / 'registry.db'}") as (reg, _place, target):
        _put(reg)
        _occupy(reg, 1, [{"job": "other", "devices": ["node02", "node04"]}])
        a = _reserve_committed(reg, _job_doc("a"))
        state = reg.GetState(rpb.GetStateRequest(cluster_id="c"), timeout=30)
        res = CliRunner().invoke(
            cli_app, ["registry", "state", "--cluster", "c", "--server", target, "-o", "table"]
        )
        assert res.exit_code == 0, res.output
        lines = res.output.splitlines()
        assert max(len(line) for line in lines) <= 80
        (row,) = [line for line in lines if line.split()[:1] == ["a"]]
        assert row.split()[1] == str(len(a.reservation.devices)) and "tp8 dp2, 7B params" in row
        for x in state.link_loads:  # every loaded uplink, with its capacity
            (load,) = [line for line in lines if line.split()[:1] == [x.uplink]]
            assert load.split()[3] == f"{x.capacity_gbps:.0f}"
        assert {"leaf:leaf01", "leaf:leaf02"} <= {x.uplink for x in state.link_loads}  # a spans the leaves


def _render(_t: Topology, _r: Any) -> bytes:
    return b""


def _running(state: ClusterState) -> list[tuple[str, tuple[int, ...], str]]:
    return sorted((r.job_id, r.devices, r.job.name) for r in state.running())


def test_a_view_moved_along_by_events_knows_the_same_traffic_as_a_fresh_read(url: str) -> None:
    """The registry moves its cached view along by the events (COMMITTED carries the shape, an end drops it, a
    full state brings the outside shapes); at every step its state has the same running jobs and link loads as
    a registry that reads the cluster afresh. A heartbeat that runs out takes the job's traffic with it."""
    clock = Clock()
    reg = Registry(open_store(url), clock=clock)
    fresh = Registry(open_store(url), clock=clock)
    topo = cluster_from_dict(_cluster_doc())[0]

    def same() -> list[tuple[str, tuple[int, ...], str]]:
        now = clock()
        moved, read = reg.view("c"), fresh.view("c")
        fresh._views.clear()  # the next read is a snapshot again
        a, b = moved.state(now), read.state(now)
        assert _running(a) == _running(b)
        assert link_loads(topo, a) == link_loads(topo, b)
        assert moved.document(now) == read.document(now)
        return _running(a)

    try:
        reg.put_cluster("c", _cluster_doc())
        reg.view("c")  # cached from here on: later reads move it along by the events
        reads: list[str] = []
        snapshot = reg.store.snapshot
        reg.store.snapshot = lambda cid: reads.append(cid) or snapshot(cid)  # type: ignore[method-assign]
        x = {"job": "x", "devices": ["node02"], "shape": _job_doc("x") | {"parallel": {"tp": 8}}}
        reg.update_state("c", 1, snapshot={"occupied": [x, {"job": "other", "devices": ["node04"]}]})
        assert [j for j, _, _ in same()] == ["x"]
        out = reg.reserve(
            "c",
            job_from_dict(_job_doc("a")),
            SolveOptions(time_limit_s=5),
            ttl_s=60,
            key=None,
            fingerprint="a",
            render=_render,
            shape=_job_doc("a"),
        )
        assert [j for j, _, _ in same()] == ["x"]  # held: not running yet
        reg.commit(out.reservation.id, ttl_s=30)
        assert [j for j, _, _ in same()] == ["a", "x"]
        reg.renew(out.reservation.id)
        assert [j for j, _, _ in same()] == ["a", "x"]
        reg.update_state("c", 2, diff={"free": ["node02/gpu3"]})  # x no longer holds all its ranks
        assert [j for j, _, _ in same()] == ["a"]
        clock.advance(31)  # the heartbeat runs out: a's traffic goes before the sweeper writes EXPIRED
        assert same() == []
        reg.sweep()
        assert same() == []
        assert reads == []  # every view of `reg` was moved along by the events
    finally:
        reg.close()
        fresh.close()


def test_a_committed_serving_deployment_keeps_its_devices_and_its_traffic(url: str) -> None:
    """Reserve of a serving job (Job.serving): placed by the serving objective (its answer carries `serving`),
    its 12 devices held, and its shape kept as its per-token traffic (`explicit_shape` of its explicit job).
    Committed, its flows are the cluster's background: GetState's uplink loads are `link_loads` of a state
    written by hand with that shape on those devices (nonzero: its KV handoff crosses the leaves, where the
    outside occupancy leaves a host free in each), and Place by cluster_id prices a later job as evaluate()
    does on that state."""
    sdoc = serving_job_doc(name="moe")
    sj = serving_job_from_dict(sdoc)
    with _server(url) as (reg, place, _target):
        topo = _put(reg)
        _occupy(reg, 1, [{"job": "other", "devices": ["node02", "node04"]}])
        out = reg.Reserve(
            rpb.ReserveRequest(cluster_id="c", job=serving_to_proto(sj), options=pb.Options(time_limit_s=5)),
            timeout=60,
        )
        assert out.result.HasField("serving") and out.result.serving.cost.tpot_s > 0
        devices = tuple(out.reservation.devices)
        assert len(devices) == sj.ranks == 12
        idx = _indices(topo, devices)
        again = model_serving(topo, ClusterState(), sj, list(idx))
        assert out.result.serving.cost.tpot_s == pytest.approx(again.tpot_seconds)
        reg.Commit(rpb.ReservationRequest(reservation_id=out.reservation_id), timeout=30)
        explicit = serving_traffic_job(topo, ClusterState(), sj)
        listed = reg.ListReservations(rpb.ListReservationsRequest(cluster_id="c"), timeout=30).reservations
        (kept,) = [r for r in listed if r.id == out.reservation_id]
        assert kept.shape == json_format.ParseDict(explicit_shape(explicit, kept.shape.description), pb.Job())
        _occupy(reg, 2, [])  # the outside job ended

        by_hand = ClusterState(
            occupied=dict.fromkeys(idx, "moe"),
            background=(RunningJob("moe", job_from_dict({"name": "moe", **explicit_shape(explicit)}), idx),),
        )
        want_loads = link_loads(topo, by_hand)
        assert want_loads  # the handoff crosses the leaves
        loads = reg.GetState(rpb.GetStateRequest(cluster_id="c"), timeout=30).link_loads
        got_loads = {ld.uplink: (ld.up_gbps, ld.down_gbps) for ld in loads}
        for up, (load, _cap) in want_loads.items():
            name = f"{topo.level_names[up.level]}:{topo.domain_names[up.level][up.domain]}"
            assert got_loads[name] == pytest.approx((load.up, load.down), rel=1e-9)

        got = place.Place(
            pb.PlaceRequest(
                cluster_id="c",
                job=json_format.ParseDict(_job_doc("b"), pb.Job()),
                options=pb.Options(time_limit_s=5),
            ),
            timeout=60,
        ).result
        mapping = [i for i in (topo.device_index(x.device) for x in got.mapping) if i is not None]
        assert not set(mapping) & set(idx)
        want = evaluate(topo, by_hand, job_from_dict(_job_doc("b")), mapping)
        assert got.cost.step_seconds == pytest.approx(want.step_seconds, rel=1e-9)
