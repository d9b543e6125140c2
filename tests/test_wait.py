"""Place or wait (placement.decide.wait): the slowdown is the answer's step over the best of (the same strategy on the
empty cluster, the answer), recomputed here; WAIT above max_slowdown with reasons and the earliest start found by
freeing the running claims in order of expected end (recomputed here); through the library, the CLI, gRPC Place
and the registry's Reserve (a WAIT reserves nothing)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from typer.testing import CliRunner

from placement.cli.app import app
from placement.cost.evaluate import evaluate
from placement.decide.wait import decide
from placement.errors import InputError
from placement.io.native import cluster_from_dict, job_from_dict, state_from_dict
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.registry import Registry, open_store
from placement.registry.registry import Waiting
from placement.solve import SolveOptions, SolveStatus, place
from placement.v1 import placement_pb2 as pb
from placement.v1 import registry_pb2 as rpb
from placement.v1 import registry_pb2_grpc as rpb_grpc
from tests.registry_util import Clock
from tests.support_server import cluster_doc, running

OPTS = SolveOptions(time_limit_s=2.0, workers=1, deterministic=True)


def _job_doc(ranks: int = 8, name: str = "j") -> dict[str, Any]:
    """TP over all ranks, no level required: it can be split across hosts, slowly."""
    return {
        "name": name,
        "device_kind": "H100",
        "parallel": {"tp": ranks},
        "model": {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096, "micro_batches": 8},
    }


def _half_busy() -> tuple[Topology, ClusterState, dict[str, Any], dict[str, Any]]:
    """3 hosts of 8: half of node01 and node02 busy, node03 busy: 8 free devices on two hosts."""
    cdoc = cluster_doc(3, gpus=8, per_leaf=4)
    topo, _ = cluster_from_dict(cdoc, "c")
    sdoc = {
        "occupied": [
            {"job": "a", "devices": [f"node01/gpu{i}" for i in range(4)]},
            {"job": "b", "devices": [f"node02/gpu{i}" for i in range(4)]},
            {"job": "c", "devices": [f"node03/gpu{i}" for i in range(8)]},
        ]
    }
    return topo, state_from_dict(sdoc, topo, "s"), cdoc, sdoc


def test_slowdown_is_the_answer_over_the_best_ideal() -> None:
    topo, state, _, _ = _half_busy()
    job = job_from_dict(_job_doc(), "j")
    res = decide(topo, state, job, OPTS)
    assert res.verdict is not None and res.mapping is not None and res.status is not SolveStatus.WAIT
    step = evaluate(topo, state, job, res.mapping).step_seconds
    empty = place(topo, dataclasses.replace(state, occupied={}), job, OPTS)
    assert empty.report is not None
    ideal = min(empty.report.step_seconds, step)
    assert res.verdict.ideal_step_s == pytest.approx(ideal)
    assert res.verdict.slowdown == pytest.approx(step / ideal)
    assert res.verdict.slowdown > 1.05  # split across two hosts: much slower than one host
    # on the empty cluster the answer is the ideal
    free = decide(topo, dataclasses.replace(state, occupied={}), job, OPTS, max_slowdown=1.0)
    assert free.verdict is not None and free.verdict.slowdown == 1.0 and free.status is not SolveStatus.WAIT


def test_wait_above_the_bound_with_reasons_and_the_earliest_start() -> None:
    topo, state, _, _ = _half_busy()
    job = job_from_dict(_job_doc(), "j")
    ends = [
        (500.0, [topo.device_index(f"node03/gpu{i}") for i in range(8)]),
        (100.0, [topo.device_index(f"node01/gpu{i}") for i in range(2)]),
    ]
    res = decide(topo, state, job, OPTS, max_slowdown=1.05, ends=ends)  # type: ignore[arg-type]
    v = res.verdict
    assert res.status is SolveStatus.WAIT and v is not None
    assert "1.05x asked" in v.reasons[0] and any("tp groups are split across nodes" in r for r in v.reasons)
    # recomputed: free the claims by expected end, place again, the first time within the bound
    bound = v.ideal_step_s * 1.05
    occupied = dict(state.occupied)
    expected = None
    for t, devs in sorted(ends):
        for d in devs:
            occupied.pop(d)
        rep = place(topo, dataclasses.replace(state, occupied=occupied), job, OPTS).report
        if rep is not None and rep.step_seconds <= bound:
            expected = t
            break
    assert expected == 500.0 and v.earliest_s == expected, v.earliest_how
    # within a loose bound it places
    ok = decide(topo, state, job, OPTS, max_slowdown=v.slowdown * 1.01)
    assert ok.status is SolveStatus.FEASIBLE


def test_max_slowdown_below_one_is_an_input_error() -> None:
    topo, state, _, _ = _half_busy()
    with pytest.raises(InputError) as e:
        decide(topo, state, job_from_dict(_job_doc(), "j"), OPTS, max_slowdown=0.5)
    assert "max_slowdown" in str(e.value) and "0.5" in str(e.value)


def test_grpc_place_answers_wait_and_rejects_a_bad_bound() -> None:
    _, _, cdoc, sdoc = _half_busy()
    from placement.messages.files import request_from_dict

    doc = {"cluster": cdoc, "state": sdoc, "job": _job_doc(), "options": {"time_limit_s": 2}}
    with running() as r:
        plain = r.stub.Place(request_from_dict(doc, pb.PlaceRequest), timeout=60).result
        assert plain.status == pb.SOLVE_STATUS_FEASIBLE and plain.slowdown > 1.05
        assert plain.ideal_source == "empty cluster"
        waiting = r.stub.Place(request_from_dict({**doc, "max_slowdown": 1.05}, pb.PlaceRequest), timeout=60)
        w = waiting.result
        assert w.status == pb.SOLVE_STATUS_WAIT and w.wait.max_slowdown == 1.05
        assert w.slowdown == pytest.approx(plain.slowdown)
        assert w.wait.reasons and not w.wait.HasField("earliest_start_unix_s")
        assert "no device in use has an expected end" in w.wait.earliest_how
        with pytest.raises(grpc.RpcError) as e:
            r.stub.Place(request_from_dict({**doc, "max_slowdown": 0.5}, pb.PlaceRequest), timeout=60)
        assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "max_slowdown" in str(e.value.details())


def _reg_with_claims(tmp_path: Path, clock: Clock) -> Registry:
    """3 hosts: node01/node02 half taken by outside jobs (never end), node03 held by a 60 s lease."""
    reg = Registry(open_store(f"sqlite://{tmp_path / 'r.db'}"), clock=clock)
    reg.put_cluster("c", cluster_doc(3, gpus=8, per_leaf=4))
    occupy = [{"job": "ext", "devices": [f"node0{h}/gpu{i}" for h in (1, 2) for i in range(4)]}]
    reg.update_state("c", 1, diff={"occupy": occupy})
    reg.reserve(
        "c",
        job_from_dict({**_job_doc(8, "held"), "constraints": {"require": {"tp": "node"}}}, "h"),
        OPTS,
        ttl_s=60,
        key=None,
        fingerprint="h",
        render=lambda _t, _r: b"",
    )
    return reg


def test_registry_reserve_waits_and_reserves_nothing(tmp_path: Path) -> None:
    clock = Clock()
    reg = _reg_with_claims(tmp_path, clock)
    before = reg.reservations("c")
    ends = reg.expected_ends("c")
    assert [t for t, _ in ends] == [clock.now + 60] and len(ends[0][1]) == 8
    seen: list[Any] = []

    def render(_topo: Topology, res: Any) -> bytes:
        seen.append(res)
        return b"x"

    job = job_from_dict(_job_doc(8, "new"), "j")
    with pytest.raises(Waiting) as e:
        reg.reserve("c", job, OPTS, ttl_s=60, key="k", fingerprint="n", render=render, max_slowdown=1.05)
    assert e.value.payload == b"x" and reg.reservations("c") == before
    v = seen[0].verdict
    assert seen[0].status is SolveStatus.WAIT and v.earliest_s == clock.now + 60
    out = reg.reserve("c", job, OPTS, ttl_s=60, key="k", fingerprint="n", render=render)
    assert out.reservation.devices and len(reg.reservations("c")) == len(before) + 1
    assert seen[-1].verdict.slowdown > 1.05  # placed now, split, and says so
    reg.close()


def test_grpc_reserve_wait_has_no_reservation(tmp_path: Path) -> None:
    from placement.messages.files import request_from_dict

    with running(registry=f"sqlite://{tmp_path / 'g.db'}") as r:
        reg = rpb_grpc.ClusterRegistryStub(r.channel)
        c = request_from_dict({"cluster": cluster_doc(3, gpus=8, per_leaf=4)}, pb.PlaceRequest).cluster
        reg.PutCluster(rpb.PutClusterRequest(cluster_id="c", cluster=c), timeout=30)
        ext = [{"job": "ext", "devices": [f"node0{h}/gpu{i}" for h in (1, 2) for i in range(4)]}]
        state = request_from_dict({"state": {"occupied": ext}}, pb.PlaceRequest).state
        reg.UpdateState(rpb.UpdateStateRequest(cluster_id="c", generation=1, state=state), timeout=30)
        held = request_from_dict({"job": _job_doc(8, "held")}, pb.PlaceRequest).job
        first = reg.Reserve(rpb.ReserveRequest(cluster_id="c", job=held, ttl_s=60), timeout=60)
        assert first.reservation_id  # node03, the one whole host
        job = request_from_dict({"job": _job_doc(8, "new")}, pb.PlaceRequest).job
        opts = pb.Options(time_limit_s=2)
        resp = reg.Reserve(
            rpb.ReserveRequest(cluster_id="c", job=job, options=opts, ttl_s=60, max_slowdown=1.05), timeout=60
        )
        assert resp.result.status == pb.SOLVE_STATUS_WAIT and not resp.reservation_id
        assert resp.result.wait.earliest_start_unix_s == pytest.approx(first.expires_unix_s)
        listed = reg.ListReservations(rpb.ListReservationsRequest(cluster_id="c", live_only=True), timeout=30)
        assert [x.id for x in listed.reservations] == [first.reservation_id]
        (tmp_path / "j.yaml").write_text(yaml.safe_dump(_job_doc(8, "new")))
        cli = ["registry", "reserve", str(tmp_path / "j.yaml"), "-c", "c", "-s", f"127.0.0.1:{r.port}"]
        res = CliRunner().invoke(app, [*cli, "--max-slowdown", "1.1", "--time-limit", "2"])
        assert (
            res.exit_code == 5 and "WAIT: nothing reserved" in res.output and "earliest start" in res.output
        )
        listed = reg.ListReservations(rpb.ListReservationsRequest(cluster_id="c", live_only=True), timeout=30)
        assert [x.id for x in listed.reservations] == [first.reservation_id]
        res = CliRunner().invoke(app, [*cli, "--time-limit", "2"])
        assert res.exit_code == 0 and "slowdown" in res.output, res.output


def test_cli_place_max_slowdown_exits_5_and_writes_no_launch_file(tmp_path: Path) -> None:
    _, _, cdoc, sdoc = _half_busy()
    for name, doc in (("c.yaml", cdoc), ("s.yaml", sdoc), ("j.yaml", _job_doc())):
        (tmp_path / name).write_text(yaml.safe_dump(doc))
    base = [str(tmp_path / "c.yaml"), str(tmp_path / "j.yaml"), "--state", str(tmp_path / "s.yaml")]
    base += ["--time-limit", "2"]
    runner = CliRunner()
    res = runner.invoke(app, ["place", *base, "--max-slowdown", "1.1"])
    assert res.exit_code == 5, res.output
    assert (
        "WAIT" in res.output and "slowdown" in res.output and "tp groups are split across nodes" in res.output
    )
    res = runner.invoke(app, ["place", *base, "--max-slowdown", "1.1", "--output", "rankfile"])
    assert res.exit_code == 5 and "rank 0=" not in res.stdout
    res = runner.invoke(app, ["place", *base, "--max-slowdown", "0.9"])
    assert res.exit_code == 2 and "--max-slowdown" in res.output
    res = runner.invoke(app, ["place", *base])
    assert res.exit_code == 0 and "slowdown" in res.output, res.output
    with running() as r:
        res = runner.invoke(app, ["place", *base, "--max-slowdown", "1.1", "--server", f"127.0.0.1:{r.port}"])
        assert res.exit_code == 5 and "WAIT" in res.output, res.output
