"""Preempt and Capacity over gRPC (an in-process server) and on the command line: the same answers as the library,
INVALID_ARGUMENT with field violations for bad input, FAILED_PRECONDITION when no victim set fits, and the CLI's
tables, JSON and input errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from typer.testing import CliRunner

from placement.cli.app import app as cli_app
from placement.decide.capacity import capacity
from placement.decide.preempt import RunningJob, preempt
from placement.io.native import cluster_from_dict, job_from_dict, state_from_dict
from placement.messages.files import request_from_dict
from placement.solve import SolveOptions, Strategy
from placement.v1 import placement_pb2 as pb
from placement.v1 import registry_pb2 as rpb
from placement.v1 import registry_pb2_grpc as rpb_grpc
from tests.support_cli import run, write
from tests.support_server import Running, cluster_doc, field_violations, job_doc, rpc_error, running

OCCUPIED = [
    {"job": "low", "devices": ["node01"]},
    {"job": "cheap", "devices": ["node02/gpu0", "node02/gpu1"]},
    {"job": "high", "devices": ["node03"]},
    {"job": "mid", "devices": ["node04/gpu0"]},
]
RUNNING = [
    {"job": "low", "priority": 0, "checkpoint_age_s": 1800},
    {"job": "cheap", "priority": 0, "gpu_hours": 0.1},
    {"job": "high", "priority": 5, "gpu_hours": 0.0},
    {"job": "mid", "priority": 1, "checkpoint_age_s": 600},
]


def _cluster() -> dict[str, Any]:
    return cluster_doc(4, gpus=4, per_leaf=2)


def _preempt_doc(**over: Any) -> dict[str, Any]:
    return {
        "cluster": _cluster(),
        "state": {"occupied": OCCUPIED},
        "job": job_doc(4, 3, name="inc"),
        "priority": 2,
        "running": RUNNING,
        "options": {"time_limit_s": 8, "deterministic": True, "strategy": "kueue-tas"},
        **over,
    }


@pytest.fixture(scope="module")
def server() -> Any:
    with running() as r:
        yield r


def _library_preempt(objective: str) -> Any:
    topo, _ = cluster_from_dict(_cluster(), "c")
    state = state_from_dict({"occupied": OCCUPIED}, topo, "s")
    rj = [RunningJob(r["job"], r["priority"], r.get("checkpoint_age_s"), r.get("gpu_hours")) for r in RUNNING]
    job = job_from_dict(job_doc(4, 3, name="inc"), "j")
    opts = SolveOptions(strategy=Strategy.KUEUE_TAS, time_limit_s=8, deterministic=True, workers=2)
    return preempt(topo, state, job, rj, job_priority=2, objective=objective, options=opts)


@pytest.mark.parametrize("objective", ["fewest", "gpu-hours"])
def test_preempt_over_grpc_answers_as_the_library(server: Running, objective: str) -> None:
    req = request_from_dict(_preempt_doc(objective=objective), pb.PreemptRequest)
    resp = server.stub.Preempt(req, timeout=60)
    lib = _library_preempt(objective)
    got = resp.answers[resp.recommended]
    assert sorted(v.job for v in got.victims) == sorted(v.job for v in lib.chosen.victims)
    assert got.gpu_hours == pytest.approx(lib.chosen.gpu_hours)
    assert got.cost.step_seconds == pytest.approx(lib.chosen.report.step_seconds)
    assert "high" in resp.protected and all(v.job != "high" for a in resp.answers for v in a.victims)
    assert len(got.mapping) == 12 and got.within_bound
    for v in got.victims:
        assert v.devices and v.explanation.startswith(v.job)


def test_preempt_bad_input_is_invalid_argument_with_field_violations(server: Running) -> None:
    doc = _preempt_doc(max_slowdown=0.5, objective="cheapest")
    doc["running"] = [*RUNNING, {"job": "ghost", "gpu_hours": 1}, {"job": "", "gpu_hours": 1}]
    err = rpc_error(lambda: server.stub.Preempt(request_from_dict(doc, pb.PreemptRequest), timeout=60))
    got = field_violations(err)
    assert "running[5].job" in got and "is required" in got["running[5].job"]
    doc["running"] = [*RUNNING, {"job": "ghost", "gpu_hours": 1}]
    err = rpc_error(lambda: server.stub.Preempt(request_from_dict(doc, pb.PreemptRequest), timeout=60))
    got = field_violations(err)
    assert got["objective"].startswith("unknown objective 'cheapest'")
    doc["objective"] = "fewest"
    err = rpc_error(lambda: server.stub.Preempt(request_from_dict(doc, pb.PreemptRequest), timeout=60))
    got = field_violations(err)
    assert "no device of the state is occupied by job 'ghost'" in got["running[4].job"]
    assert "0.5" in got["max_slowdown"] and ">= 1" in got["max_slowdown"]


def test_preempt_with_no_victim_set_is_failed_precondition(server: Running) -> None:
    doc = _preempt_doc(priority=0)  # nothing has a lower priority
    err = rpc_error(lambda: server.stub.Preempt(request_from_dict(doc, pb.PreemptRequest), timeout=60))
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "may not be preempted" in (err.details() or "")


def test_capacity_over_grpc_answers_as_the_library(server: Running) -> None:
    doc = {
        "cluster": _cluster(),
        "state": {"occupied": OCCUPIED},
        "shapes": [job_doc(2, 2, name="a"), job_doc(4, 1, name="b")],
        "place_copies": 1,
        "options": {"strategy": "kueue-tas"},
    }
    resp = server.stub.Capacity(request_from_dict(doc, pb.CapacityRequest), timeout=60)
    topo, _ = cluster_from_dict(_cluster(), "c")
    state = state_from_dict({"occupied": OCCUPIED}, topo, "s")
    lib = capacity(
        topo,
        state,
        [job_from_dict(job_doc(2, 2, name="a"), "j"), job_from_dict(job_doc(4, 1, name="b"), "j")],
    )
    assert [s.copies for s in resp.shapes] == [s.copies for s in lib.shapes]
    assert [s.upper_bound for s in resp.shapes] == [s.upper_bound for s in lib.shapes]
    assert [len(s.placed) for s in resp.shapes] == [min(1, s.copies) for s in lib.shapes] == [1, 0]
    assert {(d.level, d.domain, d.copies) for d in resp.shapes[0].domains} == {
        (d.level, d.domain, d.copies) for d in lib.shapes[0].domains
    }
    assert [f.level for f in resp.fragmentation] == ["node", "leaf", "spine"]
    doc["place_copies"] = 99
    doc["shapes"] = [{**job_doc(2, 2), "constraints": {"require": {"tp": "rack"}}}]
    err = rpc_error(lambda: server.stub.Capacity(request_from_dict(doc, pb.CapacityRequest), timeout=60))
    got = field_violations(err)
    assert got["place_copies"] == "must be in 0..64, got 99"
    assert got["shapes[0].constraints.require.tp"].startswith("unknown level 'rack'")


# ---- the command line --------------------------------------------------------------------------------------


def _files(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(_cluster()))
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"occupied": OCCUPIED}))
    job = tmp_path / "job.json"
    job.write_text(json.dumps(job_doc(4, 3, name="inc")))
    rn = tmp_path / "running.json"
    rn.write_text(json.dumps(RUNNING))
    return cluster, state, job, rn


def test_cli_preempt_table_and_json(tmp_path: Path) -> None:
    cluster, state, job, rn = _files(tmp_path)
    base = [
        "preempt",
        cluster,
        job,
        "--state",
        state,
        "--running",
        rn,
        "--priority",
        "2",
        "--deterministic",
        "--strategy",
        "kueue-tas",
    ]
    res = run(*base)
    assert res.exit_code == 0, res.output
    lib = _library_preempt("fewest")
    for v in lib.chosen.victims:
        assert v.job in res.stdout
    assert "never preempted" in res.stdout and "high" in res.stdout
    res = run(*base, "--output", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    chosen = doc["answers"][doc.get("recommended", 0)]
    assert len(chosen["victims"]) == lib.chosen.count


def test_cli_preempt_bad_running_file(tmp_path: Path) -> None:
    cluster, state, job, _ = _files(tmp_path)
    rn = write(
        tmp_path, "bad.yaml", "- {job: low, priority: high, gpu_hours: 1, colour: red}\n- {priority: 1}\n"
    )
    res = run("preempt", cluster, job, "--state", state, "--running", rn)
    assert res.exit_code == 2
    err = res.stderr
    assert "[0].priority: must be a number, got 'high'" in err
    assert "[0].colour: unknown field" in err
    assert "[1].job: is required" in err


def test_cli_capacity_shapes_and_json(tmp_path: Path) -> None:
    cluster, state, _, _ = _files(tmp_path)
    res = run("capacity", cluster, "--state", state, "--shape", "tp2x2", "--shape", "tp4", "--output", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    topo, _ = cluster_from_dict(_cluster(), "c")
    st = state_from_dict({"occupied": OCCUPIED}, topo, "s")
    jobs = [
        job_from_dict(
            {
                "name": n,
                "parallel": p,
                "model": job_doc(1, 1)["model"],
                "constraints": {"require": {"tp": "node"}},
            },
            "j",
        )
        for n, p in (("tp2x2", {"tp": 2, "dp": 2}), ("tp4", {"tp": 4}))
    ]
    lib = capacity(topo, st, jobs)
    assert [s.get("copies", 0) for s in doc["shapes"]] == [s.copies for s in lib.shapes]
    res = run("capacity", cluster, "--state", state, "--shape", "tp8x4", "--place", "1")
    assert res.exit_code == 0, res.output
    assert "fragmentation" in res.stdout
    res = run("capacity", cluster, "--shape", "tp8y4")
    assert res.exit_code == 2 and "'tp8y4' is not a size" in res.stderr
    res = run("capacity", cluster, "--shape", "tp2", "--tp-level", "rack")
    assert res.exit_code == 2 and "--tp-level: unknown level 'rack'" in res.stderr


def test_capacity_and_preempt_by_cluster_id_run_on_the_registry_state(tmp_path: Path) -> None:
    with running(registry=f"sqlite://{tmp_path / 'registry.db'}") as r:
        reg = rpb_grpc.ClusterRegistryStub(r.channel)
        reg.PutCluster(
            rpb.PutClusterRequest(cluster_id="c", cluster=json_format.ParseDict(_cluster(), pb.Cluster())),
            timeout=30,
        )
        reg.UpdateState(
            rpb.UpdateStateRequest(
                cluster_id="c", generation=1, state=json_format.ParseDict({"occupied": OCCUPIED}, pb.State())
            ),
            timeout=30,
        )
        shape = json_format.ParseDict(job_doc(4, 1, name="tp4"), pb.Job())
        got = r.stub.Capacity(pb.CapacityRequest(cluster_id="c", shapes=[shape]), timeout=60)
        inline = request_from_dict(
            {"cluster": _cluster(), "state": {"occupied": OCCUPIED}, "shapes": [job_doc(4, 1, name="tp4")]},
            pb.CapacityRequest,
        )
        assert got.shapes[0].copies == r.stub.Capacity(inline, timeout=60).shapes[0].copies
        req = request_from_dict(_preempt_doc(), pb.PreemptRequest)
        req.ClearField("cluster")
        req.ClearField("state")
        req.cluster_id = "c"
        resp = r.stub.Preempt(req, timeout=60)
        lib = _library_preempt("fewest")
        assert sorted(v.job for v in resp.answers[resp.recommended].victims) == sorted(
            v.job for v in lib.chosen.victims
        )


def test_cli_preempt_and_capacity_with_server_answer_as_here(tmp_path: Path, server: Running) -> None:
    """--server (and PLACEMENT_SERVER): the same request solved by the in-process server, the same answer as the
    command solved here (deterministic, kueue-tas), in JSON and as tables."""
    cluster, state, job, rn = _files(tmp_path)
    base = ["preempt", cluster, job, "--state", state, "--running", rn, "--priority", "2"]
    base += ["--deterministic", "--strategy", "kueue-tas", "--output", "json"]
    here = json.loads(run(*base).stdout)
    res = run(*base, "--server", f"127.0.0.1:{server.port}")
    assert res.exit_code == 0, res.output
    there = json.loads(res.stdout)
    assert [sorted(v["job"] for v in a.get("victims", [])) for a in there["answers"]] == [
        sorted(v["job"] for v in a.get("victims", [])) for a in here["answers"]
    ]
    assert there.get("recommended", 0) == here.get("recommended", 0) and there["answers"]
    lib = _library_preempt("fewest")
    table = CliRunner(env={"PLACEMENT_SERVER": f"127.0.0.1:{server.port}"}).invoke(
        cli_app, [str(a) for a in base[:-2]]
    )
    assert table.exit_code == 0, table.output
    for v in lib.chosen.victims:
        assert v.job in table.stdout
    assert "never preempted" in table.stdout and "high" in table.stdout

    cap = ["capacity", cluster, "--state", state, "--shape", "tp2x2", "--shape", "tp4", "--output", "json"]
    here = json.loads(run(*cap).stdout)
    res = run(*cap, "-s", f"127.0.0.1:{server.port}")
    assert res.exit_code == 0, res.output
    there = json.loads(res.stdout)
    keys = ("job", "copies", "upper_bound", "usable_devices", "method")
    assert [{k: s.get(k) for k in keys} for s in there["shapes"]] == [
        {k: s.get(k) for k in keys} for s in here["shapes"]
    ]
    assert there["fragmentation"] == here["fragmentation"]
    res = run(*cap[:-2], "--server", f"127.0.0.1:{server.port}")
    assert res.exit_code == 0 and "fragmentation" in res.stdout and "tp2x2" in res.stdout, res.output
    bad = run(
        "capacity", cluster, "--shape", "tp2", "--tp-level", "rack", "--server", f"127.0.0.1:{server.port}"
    )
    assert bad.exit_code == 2 and "rack" in bad.stderr, bad.output
