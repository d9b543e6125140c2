"""Joint placement of a queue (`placement.decide.batch.joint`, PlaceBatch, `placement place-batch`): the best admitted set
against brute force on tiny clusters, joint validity, never worse than the baselines, the reasons for jobs left
out, bad input, the gRPC method and the command.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from typer.testing import CliRunner

from placement.cli.app import app
from placement.decide.batch.explain import validate_batch
from placement.decide.batch.joint import FIFO, PRIORITY, place_batch
from placement.decide.batch.types import BatchJob, BatchResult
from placement.errors import InputError
from placement.io.native import cluster_from_dict
from placement.model.job import Constraints, Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.sim.scenarios import megatron_job
from placement.solve import SolveOptions
from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from server.main import create_server
from server.settings import Settings

OPTS = SolveOptions(time_limit_s=2.0, deterministic=True)


def cluster(nodes: int, gpus: int = 4, per_leaf: int = 2) -> Topology:
    doc = {
        "name": f"c{nodes}",
        "levels": [
            {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
            {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
            {"name": "spine", "bandwidth_gbps": 25, "latency_us": 8},
        ],
        "generate": [{"nodes": nodes, "devices": gpus, "kind": "H100", "fanout": {"leaf": per_leaf}}],
    }
    topo, _ = cluster_from_dict(doc, "test")
    return topo


def job(name: str, tp: int, dp: int = 1, pp: int = 1, require: bool = True) -> Job:
    return megatron_job(
        name, tp=tp, dp=dp, pp=pp, hidden=1024, layers=4, micro_batches=2, require_tp_node=require
    )


def occupied(topo: Topology, busy: dict[int, int]) -> ClusterState:
    """`busy[h]` devices of host h occupied (its lowest ones)."""
    occ = {d: "running" for h, k in busy.items() for d in topo.devices_in_domain[0][h][:k]}
    return ClusterState(occupied=occ)


def check_answer(topo: Topology, state: ClusterState, jobs: Sequence[BatchJob], res: BatchResult) -> None:
    """Joint validity, one device per rank and job, and never worse than either baseline."""
    plan = res.plan
    maps = {o.index: o.mapping for o in plan.admitted}
    assert all(m is not None and len(m) == jobs[i].job.ranks for i, m in maps.items())
    assert validate_batch(topo, state, [bj.job for bj in jobs], maps) == []
    used = Counter(d for m in maps.values() if m for d in m)
    assert all(c == 1 for c in used.values())
    assert not set(used) & set(state.occupied)
    for name in (FIFO, PRIORITY):
        assert plan.key() <= res.baselines[name].key()
    for o in plan.outcomes:
        assert o.admitted == (o.report is not None)
        assert o.admitted or (o.reason in ("capacity", "rule", "conflict") and o.explanation)


# ---- brute force --------------------------------------------------------------------------------------------


def packable(units: list[int], free: list[int]) -> bool:
    """Exact: the units (sizes) go into hosts with these free counts, each unit on one host."""
    units = sorted(units, reverse=True)
    caps = list(free)

    def go(i: int) -> bool:
        if i == len(units):
            return True
        tried: set[int] = set()
        for h, c in enumerate(caps):
            if c >= units[i] and c not in tried:
                tried.add(c)
                caps[h] -= units[i]
                if go(i + 1):
                    return True
                caps[h] += units[i]
        return False

    return go(0)


def best_weight(jobs: Sequence[BatchJob], free: list[int]) -> float:
    """The most admitted weight over every subset that fits (TP groups whole on one host)."""
    best = 0.0
    for k in range(len(jobs) + 1):
        for subset in itertools.combinations(jobs, k):
            units = [
                bj.job.parallel.tp
                for bj in subset
                if bj.job.parallel
                for _ in range(bj.job.ranks // bj.job.parallel.tp)
            ]
            if sum(units) <= sum(free) and packable(units, free):
                best = max(best, sum(bj.weight for bj in subset))
    return best


@pytest.mark.parametrize("seed", range(20))
def test_admitted_weight_is_the_brute_force_optimum(seed: int) -> None:
    rng = random.Random(seed)
    nodes = rng.choice([2, 3, 4])
    topo = cluster(nodes)
    state = occupied(topo, {h: rng.choice([0, 0, 1, 2, 3]) for h in range(nodes)})
    free = [sum(1 for d in topo.devices_in_domain[0][h] if d not in state.occupied) for h in range(nodes)]
    jobs = []
    for i in range(rng.choice([3, 4, 5])):
        tp, dp = rng.choice([(1, 2), (2, 1), (2, 2), (4, 1), (4, 2), (1, 4), (2, 3)])
        jobs.append(BatchJob(job(f"j{i}", tp, dp), float(rng.randint(1, 5)), float(rng.randint(0, 2))))
    res = place_batch(topo, state, jobs, OPTS)
    check_answer(topo, state, jobs, res)
    assert res.plan.admitted_weight == pytest.approx(best_weight(jobs, free))
    assert res.admission_optimal and res.weight_bound == pytest.approx(best_weight(jobs, free))


def test_knapsack_beats_priority_order_when_one_heavy_job_blocks_two() -> None:
    # two hosts with 4 free each; the 8-rank job (weight 3, top priority) blocks two 4-rank jobs (2 + 2)
    topo = cluster(2)
    state = ClusterState()
    jobs = [BatchJob(job("big", 4, 2), 3.0, 5.0), BatchJob(job("a", 4), 2.0), BatchJob(job("b", 4), 2.0)]
    res = place_batch(topo, state, jobs, OPTS)
    check_answer(topo, state, jobs, res)
    assert [o.name for o in res.plan.admitted] == ["a", "b"] and res.plan.admitted_weight == 4.0
    assert res.baselines[FIFO].admitted_weight == 3.0 and res.baselines[PRIORITY].admitted_weight == 3.0
    big = res.plan.outcomes[0]
    assert big.reason == "conflict" and big.conflicts_with == ["a", "b"]
    assert "admitted job(s) a" in big.explanation[0] and "8 of their devices" in big.explanation[0]
    assert any("needs 8" in line and "0 are usable" in line for line in big.explanation)


def test_fifo_and_priority_baselines_follow_their_orders() -> None:
    # two empty 4-GPU hosts: "a" (tp2 dp2) arrives first and takes one host; the 8-rank "big" no longer fits
    topo = cluster(2)
    state = ClusterState()
    jobs = [BatchJob(job("a", 2, 2), 1.0, 1.0), BatchJob(job("big", 4, 2), 3.0, 0.0)]
    res = place_batch(topo, state, jobs, OPTS)
    check_answer(topo, state, jobs, res)
    assert [o.name for o in res.baselines[FIFO].admitted] == ["a"]
    assert [o.name for o in res.baselines[PRIORITY].admitted] == ["a"]
    assert [o.name for o in res.plan.admitted] == ["big"] and res.plan.strategy == "batch"
    a = res.plan.outcomes[0]
    assert (
        a.reason == "conflict" and a.conflicts_with == ["big"] and "admitted job(s) big" in a.explanation[0]
    )
    big = res.baselines[PRIORITY].outcomes[1]
    assert big.reason == "conflict" and "higher-priority job(s) a (priority 1" in big.explanation[0]


def test_reasons_capacity_rule_and_conflict_with_higher_priority() -> None:
    topo = cluster(2)
    state = ClusterState(failed=frozenset({0}))
    pinned = Job("pinned", 2, "H100", constraints=Constraints(pins={0: "node01/gpu0"}))
    jobs = [
        BatchJob(job("first", 4), 1.0, 2.0),
        BatchJob(job("huge", 4, 4), 5.0),
        BatchJob(pinned),
        BatchJob(job("second", 4), 1.0, 0.0),
    ]
    res = place_batch(topo, state, jobs, OPTS)
    check_answer(topo, state, jobs, res)
    by = {o.name: o for o in res.plan.outcomes}
    assert (
        by["huge"].reason == "capacity"
        and "needs 16" in by["huge"].explanation[0]
        and "7 are usable" in by["huge"].explanation[0]
    )
    assert by["pinned"].reason == "rule" and "failed" in by["pinned"].explanation[0]
    assert by["first"].admitted and not by["second"].admitted
    assert by["second"].reason == "conflict" and by["second"].conflicts_with == ["first"]
    assert "higher-priority job(s) first (priority 2" in by["second"].explanation[0]


def test_nothing_fits_is_an_answer_with_every_reason() -> None:
    topo = cluster(2)
    jobs = [BatchJob(job("a", 8)), BatchJob(job("b", 4, 4))]
    res = place_batch(topo, ClusterState(), jobs, OPTS)
    assert res.plan.admitted == [] and [o.reason for o in res.plan.outcomes] == ["capacity", "capacity"]


def test_validate_batch_finds_a_shared_device_and_an_occupied_one() -> None:
    topo = cluster(2)
    state = occupied(topo, {0: 1})
    jobs = [job("a", 2), job("b", 2)]
    bad = validate_batch(topo, state, jobs, {0: [1, 2], 1: [2, 3]})
    assert any("node01/gpu2" in b and "'a' and 'b'" in b for b in bad)
    assert any("occupied" in b for b in validate_batch(topo, state, jobs, {0: [0, 1]}))
    assert validate_batch(topo, state, jobs, {0: [1, 2], 1: [4, 5]}) == []


@pytest.mark.parametrize(
    ("weight", "priority", "path"),
    [
        (0.0, 0.0, "jobs[1].weight"),
        (-1.0, 0.0, "jobs[1].weight"),
        (float("nan"), 0.0, "jobs[1].weight"),
        (float("inf"), 0.0, "jobs[1].weight"),
        (2e6, 0.0, "jobs[1].weight"),
        (1.0, float("nan"), "jobs[1].priority"),
    ],
)
def test_bad_weights_name_the_field(weight: float, priority: float, path: str) -> None:
    topo = cluster(2)
    with pytest.raises(InputError) as info:
        place_batch(
            topo, ClusterState(), [BatchJob(job("a", 2)), BatchJob(job("b", 2), weight, priority)], OPTS
        )
    assert [p.path for p in info.value.problems] == [path]


def test_duplicate_running_and_unknown_names_are_input_errors() -> None:
    topo = cluster(2)
    state = occupied(topo, {0: 2})
    bad_level = Job("c", 2, groups=job("x", 2).groups, constraints=Constraints(require={"tp": "rack"}))
    jobs = [BatchJob(job("a", 2)), BatchJob(job("a", 2)), BatchJob(job("running", 2)), BatchJob(bad_level)]
    with pytest.raises(InputError) as info:
        place_batch(topo, state, jobs, OPTS)
    paths = {p.path: p.message for p in info.value.problems}
    assert "duplicate job name 'a' (also jobs[0])" in paths["jobs[1].job.name"]
    assert "running job" in paths["jobs[2].job.name"]
    assert "unknown level 'rack'" in paths["jobs[3].job.constraints.require.tp"]
    with pytest.raises(InputError, match="at least one job"):
        place_batch(topo, state, [], OPTS)


def test_bigger_batch_never_worse_than_baselines_and_jointly_valid() -> None:
    from placement.sim.scenarios import fat_tree, occupy

    topo = fat_tree(256)
    state = occupy(topo, 0.4, seed=3, mode="mixed-random")
    rng = random.Random(7)
    jobs = [
        BatchJob(
            megatron_job(f"j{i}", tp=tp, pp=pp, dp=dp, hidden=2048, layers=8, require_tp_node=True),
            float(rng.randint(1, 3)),
            float(rng.randint(0, 2)),
        )
        for i, (tp, pp, dp) in enumerate(
            rng.choice([(8, 1, 2), (4, 2, 2), (2, 2, 4), (1, 1, 8), (8, 2, 4)]) for _ in range(8)
        )
    ]
    res = place_batch(topo, state, jobs, SolveOptions(time_limit_s=4.0, deterministic=True))
    check_answer(topo, state, jobs, res)
    assert len(res.plan.admitted) >= len(res.baselines[FIFO].admitted)


# ---- gRPC ---------------------------------------------------------------------------------------------------


def _cluster_doc() -> dict[str, Any]:
    return {
        "name": "c2",
        "levels": [
            {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
            {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
        ],
        "generate": [{"nodes": 2, "devices": 4, "kind": "H100"}],
    }


def _job_doc(name: str, tp: int, dp: int) -> dict[str, Any]:
    return {
        "name": name,
        "parallel": {"tp": tp, "dp": dp},
        "model": {"parameters": 1e9, "hidden": 1024, "layers": 4, "seq_len": 2048},
        "constraints": {"require": {"tp": "node"}},
    }


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[pb_grpc.PlacementServiceStub, str]]:
    server, port = create_server(Settings(host="127.0.0.1", port=0, metrics_port=None, workers=2))
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.PlacementServiceStub(channel), f"127.0.0.1:{port}"
    finally:
        channel.close()
        server.stop(None).wait(10)


@pytest.fixture
def stub(served: tuple[pb_grpc.PlacementServiceStub, str]) -> pb_grpc.PlacementServiceStub:
    return served[0]


def test_place_batch_rpc(stub: pb_grpc.PlacementServiceStub) -> None:
    req = json_format.ParseDict(
        {
            "cluster": _cluster_doc(),
            "state": {"occupied": [{"job": "other", "devices": ["node02/gpu0", "node02/gpu1"]}]},
            "jobs": [
                {"job": _job_doc("small", 2, 1)},
                {"job": _job_doc("tp4", 4, 1), "weight": 2, "priority": 1},
                {"job": _job_doc("wide", 4, 2), "weight": 1},
            ],
            "options": {"time_limit_s": 3},
        },
        pb.PlaceBatchRequest(),
    )
    resp = stub.PlaceBatch(req, timeout=30)
    plan = resp.plan
    assert plan.strategy in ("batch", FIFO, PRIORITY)
    assert [j.job for j in plan.jobs] == ["small", "tp4", "wide"] and [j.job_index for j in plan.jobs] == [
        0,
        1,
        2,
    ]
    admitted = [j for j in plan.jobs if j.admitted]
    assert plan.admitted == len(admitted) == 2 and plan.admitted_weight == 3.0
    devices = [a.device for j in admitted for a in j.mapping]
    assert len(devices) == len(set(devices)) == 6 and not {"node02/gpu0", "node02/gpu1"} & set(devices)
    assert all(j.cost.step_seconds > 0 for j in admitted)
    wide = plan.jobs[2]
    assert not wide.admitted and wide.reason == "capacity" and "2 groups" in wide.explanation[-1]
    assert sorted(b.strategy for b in resp.baselines) == [FIFO, PRIORITY]
    assert all(not j.mapping for b in resp.baselines for j in b.jobs)
    assert resp.admission_optimal and resp.admitted_weight_bound == 3.0
    assert resp.stats.notes["chosen"] == plan.strategy


def test_place_batch_rpc_bad_input_names_the_fields(stub: pb_grpc.PlacementServiceStub) -> None:
    req = json_format.ParseDict(
        {
            "cluster": _cluster_doc(),
            "jobs": [{"job": _job_doc("a", 2, 1)}, {"job": _job_doc("a", 2, 1), "weight": -2}, {"weight": 1}],
        },
        pb.PlaceBatchRequest(),
    )
    with pytest.raises(grpc.RpcError) as info:
        stub.PlaceBatch(req, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(info.value)
    assert status is not None
    br = error_details_pb2.BadRequest()
    status.details[0].Unpack(br)
    fields = [v.field for v in br.field_violations]
    assert fields == ["jobs[2].job"]  # a batch with a missing job is rejected before the names are compared
    req.jobs.pop()
    with pytest.raises(grpc.RpcError) as info:
        stub.PlaceBatch(req, timeout=30)
    status = rpc_status.from_call(info.value)
    assert status is not None
    status.details[0].Unpack(br)
    assert sorted(v.field for v in br.field_violations) == ["jobs[1].job.name", "jobs[1].weight"]


# ---- CLI ----------------------------------------------------------------------------------------------------


def _write_inputs(tmp_path: Path, jobs: list[dict[str, Any]]) -> tuple[Path, Path]:
    c = tmp_path / "cluster.yaml"
    c.write_text(yaml.safe_dump(_cluster_doc()))
    (tmp_path / "tp4.yaml").write_text(yaml.safe_dump(_job_doc("tp4", 4, 1)))
    b = tmp_path / "batch.yaml"
    b.write_text(yaml.safe_dump({"jobs": jobs}))
    return c, b


def test_cli_place_batch_json(tmp_path: Path) -> None:
    c, b = _write_inputs(
        tmp_path,
        [
            {"job": _job_doc("a", 2, 2), "weight": 2},
            {"job_file": "tp4.yaml", "priority": 3},
            {"job": _job_doc("b", 4, 1)},
        ],
    )
    r = CliRunner().invoke(app, ["place-batch", str(c), str(b), "--time-limit", "2", "--output", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    plan = doc["plan"]
    assert plan["admitted"] == 2 and [j["job"] for j in plan["jobs"]] == ["a", "tp4", "b"]
    devs = [m["device"] for j in plan["jobs"] if j["admitted"] for m in j["mapping"]]
    assert len(devs) == len(set(devs)) == 8
    left = [j for j in plan["jobs"] if not j["admitted"]]
    assert len(left) == 1 and left[0]["reason"] == "conflict"
    assert {p["strategy"] for p in doc["baselines"]} == {FIFO, PRIORITY}
    table = CliRunner().invoke(app, ["place-batch", str(c), str(b), "--time-limit", "2"])
    assert table.exit_code == 0 and "weighted step s" in table.stdout


def test_cli_place_batch_bad_file(tmp_path: Path) -> None:
    c, b = _write_inputs(
        tmp_path,
        [
            {"job": _job_doc("a", 2, 1), "weight": "heavy"},
            {"job_file": "nope.yaml"},
            {"job": _job_doc("a", 2, 1), "job_file": "tp4.yaml"},
            {"job": {"name": "x", "ranks": -1}},
        ],
    )
    r = CliRunner().invoke(app, ["place-batch", str(c), str(b)])
    assert r.exit_code == 2
    text = r.output
    assert (
        "jobs[0].weight" in text
        and "jobs[1].job_file" in text
        and "jobs[2]" in text
        and "jobs[3].job" in text
    )
    assert "Traceback" not in text
    c2, b2 = _write_inputs(
        tmp_path, [{"job": _job_doc("a", 2, 1)}, {"job": _job_doc("a", 2, 1), "weight": 0}]
    )
    r2 = CliRunner().invoke(app, ["place-batch", str(c2), str(b2)])
    assert r2.exit_code == 2 and "jobs[1].job.name" in r2.output and "jobs[1].weight" in r2.output


def test_cli_place_batch_over_the_server(
    tmp_path: Path, served: tuple[pb_grpc.PlacementServiceStub, str]
) -> None:
    c, b = _write_inputs(
        tmp_path, [{"job": _job_doc("a", 2, 2), "weight": 2}, {"job_file": "tp4.yaml", "priority": 3}]
    )
    r = CliRunner().invoke(
        app, ["place-batch", str(c), str(b), "--time-limit", "2", "--output", "json", "--server", served[1]]
    )
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)["plan"]
    assert plan["admitted"] == 2 and [j["job"] for j in plan["jobs"]] == ["a", "tp4"]
    assert len({m["device"] for j in plan["jobs"] for m in j["mapping"]}) == 8
    table = CliRunner().invoke(
        app, ["place-batch", str(c), str(b), "--time-limit", "2", "--server", served[1]]
    )
    assert table.exit_code == 0 and "(chosen)" in table.stdout and served[1] in table.stdout
    c2, b2 = _write_inputs(tmp_path, [{"job": _job_doc("a", 2, 1)}, {"job": _job_doc("a", 2, 1)}])
    bad = CliRunner().invoke(app, ["place-batch", str(c2), str(b2), "--server", served[1]])
    assert bad.exit_code == 2 and "INVALID_ARGUMENT" in bad.output and "jobs[1].job.name" in bad.output


def test_place_batch_derives_each_job_traffic_once(job_traffic_calls: list[str]) -> None:
    # three jobs, each placed several times (baselines, knapsack order, improvement): one derivation per job
    topo = cluster(2)
    jobs = [BatchJob(job("big", 4, 2), 3.0, 5.0), BatchJob(job("a", 4), 2.0), BatchJob(job("b", 2, 2), 2.0)]
    res = place_batch(topo, ClusterState(), jobs, OPTS)
    assert res.plan.admitted
    assert sorted(job_traffic_calls) == ["a", "b", "big"]
