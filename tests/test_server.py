"""The gRPC server in process on port 0, its three methods: Place (a valid mapping, its cost recomputed, the
request id), Evaluate (of a placed and of a rule-breaking mapping) and Compare (the ranking); every method of the
service described once for the one RPC template."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2

from placement.cost.evaluate import evaluate
from placement.io.native import load_cluster, load_job
from placement.messages.files import request_from_dict
from placement.v1 import placement_pb2 as pb
from server.servicer import PlacementServicer
from server.settings import Settings
from server.workers import REMOTE_WORK, MetricsRecorder
from tests.conftest import EXAMPLES
from tests.support_server import (
    Running,
    cluster_doc,
    details_of,
    example_request,
    job_doc,
    place_request,
    rpc_error,
    warm_server,
)


@pytest.fixture(scope="module")
def srv() -> Iterator[Running]:
    """This module's own warm server (metrics on, a 10 s solve limit)."""
    with warm_server() as r:
        yield r


# ---- the three methods --------------------------------------------------------------------------------------


def test_place_returns_a_valid_mapping_its_cost_and_the_request_id(srv: Running) -> None:
    req = example_request()
    resp, call = srv.stub.Place.with_call(req, timeout=30, metadata=[("x-request-id", "rid-place-1")])
    res = resp.result
    assert res.status in (pb.SOLVE_STATUS_OPTIMAL, pb.SOLVE_STATUS_FEASIBLE)
    assert res.job == "tp8-dp4" and res.strategy == "cpsat"
    assert [a.rank for a in res.mapping] == list(range(32))
    assert len({a.device for a in res.mapping}) == 32
    # the cost is the cost model's, recomputed independently from the returned mapping
    topo, _ = load_cluster(EXAMPLES / "dgx-h100-4node.yaml")
    job = load_job(EXAMPLES / "tp8-dp4.yaml")
    from placement.model.state import ClusterState

    report = evaluate(topo, ClusterState(), job, [topo.device_index(a.device) or 0 for a in res.mapping])
    assert res.cost.step_seconds == pytest.approx(report.step_seconds)
    assert res.cost.comm_seconds == pytest.approx(report.comm_seconds)
    assert res.cost.comm_seconds_total == pytest.approx(report.comm_seconds_total)
    assert [p.name for p in res.cost.phases] == [p.name for p in report.phases]
    assert res.seconds_per_step == pytest.approx(
        report.comm_seconds
    )  # the deprecated field keeps its meaning
    assert sum(res.breakdown.by_label_s.values()) == pytest.approx(report.comm_seconds)
    assert "first-fit" in {b.strategy for b in res.baselines}
    rest = report.step_seconds - report.comm_seconds  # compute and bubble do not depend on the mapping
    for b in res.baselines:
        assert b.HasField("comm_seconds") == b.HasField("step_seconds") == b.HasField("seconds_per_step")
        if b.HasField("comm_seconds"):
            assert b.comm_seconds >= res.cost.comm_seconds - 1e-12
            assert b.seconds_per_step == b.comm_seconds
            assert b.step_seconds == pytest.approx(b.comm_seconds + rest)
    assert res.stats.time_limit_s > 0 and res.stats.wall_s > 0
    assert ("x-request-id", "rid-place-1") in tuple(call.trailing_metadata())


def test_a_request_id_is_generated_when_none_is_sent(srv: Running) -> None:
    _, call = srv.stub.Place.with_call(place_request(), timeout=30)
    ids = [v for k, v in call.trailing_metadata() if k == "x-request-id"]
    assert len(ids) == 1 and len(ids[0]) == 32


def test_evaluate_scores_the_placed_mapping_and_a_running_job(srv: Running) -> None:
    req = place_request(nodes=4, tp=8, dp=2)
    placed = srv.stub.Place(req, timeout=30).result
    ev = srv.stub.Evaluate(
        pb.EvaluateRequest(cluster=req.cluster, job=req.job, mapping=placed.mapping), timeout=30
    )
    assert ev.seconds_per_step == pytest.approx(placed.seconds_per_step)
    assert ev.cost.step_seconds == pytest.approx(placed.cost.step_seconds)
    assert (
        ev.cost.comm_seconds == pytest.approx(placed.cost.comm_seconds) == pytest.approx(ev.seconds_per_step)
    )
    assert [(p.name, p.tier) for p in ev.cost.phases] == [(p.name, p.tier) for p in placed.cost.phases]
    assert ev.job == req.job.name and len(ev.mapping) == 16
    # the same job running on its own (occupied) devices is valid
    state = pb.State(occupied=[pb.Occupancy(job=req.job.name, devices=[a.device for a in placed.mapping])])
    ev2 = srv.stub.Evaluate(
        pb.EvaluateRequest(cluster=req.cluster, state=state, job=req.job, mapping=placed.mapping)
    )
    assert ev2.seconds_per_step == pytest.approx(placed.seconds_per_step)


def test_evaluate_of_a_rule_breaking_mapping_is_failed_precondition_with_every_violation(
    srv: Running,
) -> None:
    req = place_request(nodes=4, tp=8, dp=2)
    mapping = [pb.Assignment(rank=r, device=f"node01/gpu{r % 8}") for r in range(16)]  # every device twice
    state = pb.State(occupied=[pb.Occupancy(job="other", devices=["node01/gpu0"])])
    err = rpc_error(
        lambda: srv.stub.Evaluate(
            pb.EvaluateRequest(cluster=req.cluster, state=state, job=req.job, mapping=mapping), timeout=30
        )
    )
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION
    violations = [v for d in details_of(err, error_details_pb2.PreconditionFailure) for v in d.violations]
    kinds = {v.type for v in violations}
    assert {"one-rank-per-device", "occupied"} <= kinds
    assert len([v for v in violations if v.type == "one-rank-per-device"]) == 8
    assert all(v.subject == "mapping" for v in violations)


def test_compare_ranks_jobs_by_step_seconds_with_infeasible_last(srv: Running) -> None:
    jobs = [
        job_doc(8, 4, name="tp8-dp4"),
        job_doc(8, 8, name="too-big"),
        job_doc(4, 4, 2, name="tp4-dp4-pp2"),
        job_doc(8, 2, name="tp8-dp2"),
    ]
    req = request_from_dict(
        {"cluster": cluster_doc(4), "jobs": jobs, "options": {"time_limit_s": 5}}, pb.CompareRequest
    )
    ranking = srv.stub.Compare(req, timeout=30).ranking
    assert sorted(e.job_index for e in ranking) == [0, 1, 2, 3]
    assert [req.jobs[e.job_index].name for e in ranking] == [e.result.job for e in ranking]
    feasible = [e.result for e in ranking if e.result.status != pb.SOLVE_STATUS_INFEASIBLE]
    assert len(feasible) == 3
    keys = [(r.cost.step_seconds, r.cost.comm_seconds) for r in feasible]
    assert keys == sorted(keys)
    assert all(r.cost.step_seconds >= r.cost.comm_seconds > 0 for r in feasible)
    last = ranking[-1].result
    assert last.job == "too-big" and last.status == pb.SOLVE_STATUS_INFEASIBLE
    assert "64" in last.explanation[0] and not last.mapping


# ---- one template --------------------------------------------------------------------------------------------


def test_every_method_of_the_service_is_described_once_for_the_template() -> None:
    service = pb.DESCRIPTOR.services_by_name["PlacementService"]
    servicer = PlacementServicer(Settings(), None, MetricsRecorder())  # type: ignore[arg-type]
    assert sorted(servicer.rpcs) == sorted(m.name for m in service.methods)
    assert all(rpc.method == name for name, rpc in servicer.rpcs.items())
    # what a solve process answers is a method of the service, with the service's message types
    for name, (request_type, response_type) in REMOTE_WORK.items():
        method = service.methods_by_name[name]
        declared = (method.input_type.full_name, method.output_type.full_name)
        assert declared == (request_type.DESCRIPTOR.full_name, response_type.DESCRIPTOR.full_name), name
