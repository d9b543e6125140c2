"""Serving jobs over gRPC: Place, Evaluate and Compare of a Job carrying `serving` on a real server (port 0), their
numbers against the serving model run here on the same mappings, `placement place --server` against the offline
command, PlaceBatch admitting serving jobs, and the fields a serving job refuses (max_slowdown, place_copies)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from placement.cost.serving import model_serving
from placement.io.native.serving import serving_job_from_dict
from placement.messages.files import request_from_dict
from placement.messages.serving import (
    serving_from_proto,
    serving_report_from_proto,
    serving_result,
    serving_result_from_proto,
    serving_to_proto,
)
from placement.model.serving import ServingJob
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.solve.baselines import BASELINES
from placement.solve.serving import place_serving, serving_traffic_job
from placement.solve.types import SolveOptions
from placement.v1 import placement_pb2 as pb
from tests.support_cli import run, write
from tests.support_server import field_violations, job_doc, rpc_error, running
from tests.support_serving import serving_job_doc, write_serving_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Topology]:
    return write_serving_cluster(tmp_path_factory.mktemp("serving-wire"))


def _request(path: Path, job: ServingJob, message: Any = pb.PlaceRequest) -> Any:
    doc: dict[str, Any] = {"cluster_file": str(path)}
    if message is not pb.EvaluateRequest:
        doc["options"] = {"time_limit_s": 3, "deterministic": True}
    req = request_from_dict(doc, message)
    req.job.CopyFrom(serving_to_proto(job))
    return req


def _indices(topo: Topology, mapping: Any) -> list[int]:
    found = [topo.device_index(a.device) for a in mapping]
    assert None not in found, "a device the cluster does not have"
    return [d for d in found if d is not None]


def test_place_serves_a_serving_job_priced_as_the_model_prices_its_mapping(
    cluster: tuple[Path, Topology],
) -> None:
    path, topo = cluster
    job = serving_job_from_dict(serving_job_doc())
    with running() as r:
        result = r.stub.Place(_request(path, job), timeout=60).result
    mapping = _indices(topo, result.mapping)
    assert len(mapping) == job.ranks == len(set(mapping))
    again = model_serving(topo, ClusterState(), job, mapping)
    cost = result.serving.cost
    assert cost.tpot_s == pytest.approx(again.tpot_seconds)
    assert cost.ttft_s == pytest.approx(again.ttft_seconds)
    assert cost.tokens_per_s_per_gpu == pytest.approx(again.tokens_per_s_per_gpu)
    assert cost.bound_by == again.bound_by and cost.bottleneck_tier == again.bottleneck_tier
    assert [p.phase for p in cost.phases] == [p.phase for p in again.phases]
    assert not result.HasField("cost")  # no training step for a serving job
    # every scheduler baseline, run here on the explicit job and priced here, is no better than the answer
    explicit = serving_traffic_job(topo, ClusterState(), job)
    traffic = job_traffic(explicit)
    served = {c.strategy: c for c in result.serving.candidates}
    for name, fn in BASELINES.items():
        got = fn(topo, ClusterState(), explicit, traffic)
        if got is None:
            continue
        rep = model_serving(topo, ClusterState(), job, list(got))
        assert served[name].cost.tpot_s == pytest.approx(rep.tpot_seconds), name
        if not served[name].breaks:
            assert cost.tpot_s <= rep.tpot_seconds * (1 + 1e-9), name


def test_evaluate_serves_a_serving_job_and_refuses_a_broken_mapping(cluster: tuple[Path, Topology]) -> None:
    path, topo = cluster
    job = serving_job_from_dict(serving_job_doc())
    answer = place_serving(
        topo, ClusterState(), job, SolveOptions(time_limit_s=3, workers=1, deterministic=True)
    )
    req = _request(path, job, pb.EvaluateRequest)
    req.mapping.extend(pb.Assignment(rank=k, device=topo.devices[d].id) for k, d in enumerate(answer.mapping))
    with running() as r:
        got = r.stub.Evaluate(req, timeout=60)
        short = _request(path, job, pb.EvaluateRequest)
        short.mapping.extend(req.mapping[:-1])
        err = rpc_error(lambda: r.stub.Evaluate(short, timeout=60))
    again = model_serving(topo, ClusterState(), job, answer.mapping)
    assert got.serving.tpot_s == pytest.approx(again.tpot_seconds)
    assert got.serving.ttft_s == pytest.approx(again.ttft_seconds)
    assert _indices(topo, got.mapping) == answer.mapping
    assert "mapping" in field_violations(err)


def test_compare_ranks_serving_jobs_by_tpot_and_refuses_a_mixed_request(
    cluster: tuple[Path, Topology],
) -> None:
    path, topo = cluster
    jobs = [
        serving_job_from_dict(serving_job_doc(1, "one-decode")),
        serving_job_from_dict(serving_job_doc(2, "two-decodes")),
    ]
    req = request_from_dict({"cluster_file": str(path), "options": {"time_limit_s": 3}}, pb.CompareRequest)
    req.jobs.extend(serving_to_proto(j) for j in jobs)
    mixed = pb.CompareRequest()
    mixed.CopyFrom(req)
    mixed.jobs.add().CopyFrom(
        request_from_dict(
            {"cluster_file": str(path), "job_file": str(Path("examples") / "tp8-dp4.yaml")}, pb.PlaceRequest
        ).job
    )
    with running() as r:
        got = r.stub.Compare(req, timeout=120)
        err = rpc_error(lambda: r.stub.Compare(mixed, timeout=60))
    tpots = []
    for entry in got.ranking:
        job = jobs[entry.job_index]
        again = model_serving(topo, ClusterState(), job, _indices(topo, entry.result.mapping))
        assert entry.result.serving.cost.tpot_s == pytest.approx(again.tpot_seconds)
        tpots.append(again.tpot_seconds)
    assert sorted(e.job_index for e in got.ranking) == [0, 1]
    assert tpots == sorted(tpots)
    assert "jobs[2]" in field_violations(err)


def _small(name: str, spread: bool) -> Any:
    """8 ranks: an EP 4 prefill replica and an EP 4 decode replica."""
    doc = serving_job_doc(1, name)
    doc["pools"][1] = {"role": "decode", "ep": 4, "attention_dp": 4}
    doc["placement"] = {"spread": spread}
    return serving_to_proto(serving_job_from_dict(doc))


def test_capacity_counts_serving_copies_and_place_batch_admits_a_serving_job(
    cluster: tuple[Path, Topology],
) -> None:
    path, topo = cluster
    capacity = request_from_dict(
        {
            "cluster_file": str(path),
            "state": {"occupied": [{"job": "other", "devices": [topo.devices[0].id]}]},
        },
        pb.CapacityRequest,
    )
    capacity.shapes.add().CopyFrom(_small("packed", False))
    capacity.shapes.add().CopyFrom(_small("spread", True))
    capacity.shapes.add().CopyFrom(serving_to_proto(serving_job_from_dict(serving_job_doc(1, "twelve"))))
    placed = pb.CapacityRequest()
    placed.CopyFrom(capacity)
    placed.place_copies = 1
    empty = request_from_dict({"cluster_file": str(path)}, pb.CapacityRequest)
    empty.shapes.add().CopyFrom(_small("packed", False))
    batch = request_from_dict(
        {"cluster_file": str(path), "options": {"time_limit_s": 2, "deterministic": True}},
        pb.PlaceBatchRequest,
    )
    batch.jobs.add().job.CopyFrom(_small("spread", True))
    batch.jobs.add().job.CopyFrom(_small("packed", False))
    with running() as r:
        got = r.stub.Capacity(capacity, timeout=60)
        all_free = r.stub.Capacity(empty, timeout=60)
        placed_err = rpc_error(lambda: r.stub.Capacity(placed, timeout=60))
        batched = r.stub.PlaceBatch(batch, timeout=60)
    # by hand: 15 free devices (4 hosts of 4, one device taken): one 8-rank copy fits, not two (16 > 15); one
    # 12-rank copy; the ranks are the serving job's (prefill 4 + decode 4, or + 8)
    counted = {s.job: (s.ranks, s.copies, s.upper_bound) for s in got.shapes}
    assert counted["packed"] == (8, 15 // 8, 15 // 8)
    assert counted["spread"][:2] == (8, 15 // 8)
    assert counted["twelve"][:2] == (12, 15 // 12)
    assert (all_free.shapes[0].copies, all_free.shapes[0].upper_bound) == (16 // 8, 16 // 8)
    assert "place_copies" in field_violations(placed_err)
    # two 8-rank serving jobs fill the 16 GPUs; each one's step is its TPOT, as the serving model prices its
    # mapping, and its answer carries its serving report
    assert [j.admitted for j in batched.plan.jobs] == [True, True]
    for j, spread in zip(batched.plan.jobs, (True, False), strict=True):
        sj = serving_from_proto(_small(j.job, spread))
        again = model_serving(topo, ClusterState(), sj, _indices(topo, j.mapping))
        assert j.serving.tpot_s == pytest.approx(again.tpot_seconds)
        assert j.cost.step_seconds == pytest.approx(again.tpot_seconds)
        assert j.serving.ttft_s == pytest.approx(again.ttft_seconds)


def test_the_serving_answer_converts_both_ways(cluster: tuple[Path, Topology]) -> None:
    _, topo = cluster
    job = serving_job_from_dict(serving_job_doc(2))
    res = place_serving(
        topo, ClusterState(), job, SolveOptions(time_limit_s=3, workers=1, deterministic=True)
    )
    msg = serving_result(topo, job, res, time_limit_s=3, deadline_limited=False)
    back = serving_result_from_proto(pb.PlacementResult.FromString(msg.SerializeToString()), topo)
    assert back.mapping == res.mapping and back.chosen == res.chosen and back.status == res.status
    assert back.report == res.report
    assert back.candidates == res.candidates and back.broken == res.broken and back.notes == res.notes
    assert serving_report_from_proto(msg.serving.cost).to_dict() == res.report.to_dict()


def test_cli_place_over_the_server_prints_what_it_prints_offline(
    tmp_path: Path, cluster: tuple[Path, Topology]
) -> None:
    path, _ = cluster
    job_file = write(tmp_path, "s.yaml", json.dumps(serving_job_doc(2)))
    flags = ("--time-limit", "3", "--workers", "2", "--deterministic")
    offline = run("place", path, job_file, "--output", "json", *flags)
    offline_table = run("place", path, job_file, *flags)
    assert offline.exit_code == 0 and offline_table.exit_code == 0, offline.output
    with running(solver_threads=2) as r:
        served = run("place", path, job_file, "--server", f"127.0.0.1:{r.port}", "--output", "json", *flags)
        served_table = run("place", path, job_file, "--server", f"127.0.0.1:{r.port}", *flags)
    assert served.exit_code == 0 and served_table.exit_code == 0, served.output
    assert json.loads(served.output) == json.loads(offline.output)  # a serving answer carries no wall time
    assert served_table.output == offline_table.output
    # a server that is not there: the call's failure, not a refusal of serving jobs
    gone = run("place", path, job_file, "--server", "127.0.0.1:1", "--time-limit", "3")
    assert gone.exit_code == 4


def test_a_serving_job_with_max_slowdown_is_refused_at_that_field(cluster: tuple[Path, Topology]) -> None:
    path, _ = cluster
    req = _request(path, serving_job_from_dict(serving_job_doc()))
    req.max_slowdown = 1.5
    with running() as r:
        err = rpc_error(lambda: r.stub.Place(req, timeout=60))
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "max_slowdown" in field_violations(err)


def test_a_solve_process_serves_a_serving_job_too(cluster: tuple[Path, Topology]) -> None:
    path, topo = cluster
    job = serving_job_from_dict(serving_job_doc())
    with running(solve_mode="process") as r:
        result = r.stub.Place(_request(path, job), timeout=120).result
    again = model_serving(topo, ClusterState(), job, _indices(topo, result.mapping))
    assert result.serving.cost.tpot_s == pytest.approx(again.tpot_seconds)
    assert result.serving.chosen in {c.strategy for c in result.serving.candidates}


def test_cli_capacity_counts_a_serving_job_file_here_and_over_the_server(
    tmp_path: Path, cluster: tuple[Path, Topology]
) -> None:
    path, _ = cluster
    small = serving_job_doc(1, "small")
    small["pools"][1] = {"role": "decode", "ep": 4, "attention_dp": 4}
    small["placement"] = {"spread": False}
    serving_file = write(tmp_path, "s.yaml", json.dumps(small))
    training_file = write(
        tmp_path,
        "t.yaml",
        json.dumps(job_doc(4, 1, name="train")),
    )
    args = ("capacity", path, "--shape", "tp4x2", "--job", training_file, "--job", serving_file)
    offline = run(*args, "--output", "json")
    assert offline.exit_code == 0, offline.output
    with running() as r:
        served = run(*args, "--output", "json", "--server", f"127.0.0.1:{r.port}")
    assert served.exit_code == 0, served.output
    here, there = json.loads(offline.output), json.loads(served.output)
    rows = [(s["job"], s["ranks"], s["copies"]) for s in here["shapes"]]
    assert rows == [(s["job"], s["ranks"], s["copies"]) for s in there["shapes"]]
    # by hand: 16 free devices; 8 ranks per copy of tp4x2 and of the serving job, 4 of the training job
    assert [(r[1], r[2]) for r in rows] == [(8, 16 // 8), (4, 16 // 4), (8, 16 // 8)]
    assert rows[2][0] == "small"
    refused = run("capacity", path, "--job", serving_file, "--place", "1")
    assert refused.exit_code == 2 and "--place" in refused.output
