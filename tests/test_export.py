"""placement.io.export: rankfile, SLURM hostfile, per-rank env, Kueue assignment, the result document, and the
errors of `seats_from_document`."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from placement.cost import CostReport, evaluate
from placement.errors import InputError
from placement.io.export import FORMATS, baseline_costs, export, result_document, seats_from_document
from placement.io.native import cluster_from_dict, job_from_dict
from placement.state import ClusterState
from placement.topology import Topology

# ranks 0-2 on host b, 3-4 on host a, rank 5 back on b: LOCAL_RANK counts per host, in rank order
SEATS = [("b", 3), ("b", 1), ("b", 0), ("a", 2), ("a", 0), ("b", 2)]


def _topo() -> Topology:
    doc = {"levels": [{"name": "node", "bandwidth_gbps": 450}, {"name": "leaf", "bandwidth_gbps": 50},
                      {"name": "spine", "bandwidth_gbps": 25}],
           "hosts": [{"name": "a", "devices": 4, "domains": {"leaf": "l1"}}, {"name": "b", "devices": 4, "domains": {"leaf": "l2"}}]}
    return cluster_from_dict(doc)[0]


def test_rankfile() -> None:
    assert export("rankfile", SEATS) == (
        "rank 0=b slot=3\nrank 1=b slot=1\nrank 2=b slot=0\nrank 3=a slot=2\nrank 4=a slot=0\nrank 5=b slot=2\n")


def test_slurm_hostfile_has_one_line_per_rank() -> None:
    assert export("hostfile", SEATS) == "b\nb\nb\na\na\nb\n"


def test_env_local_rank_is_computed_per_host() -> None:
    lines = export("env", SEATS).splitlines()
    assert lines == [
        "# host b: 4 ranks",
        "b RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=4 WORLD_SIZE=6 CUDA_VISIBLE_DEVICES=3 MASTER_ADDR=b",
        "b RANK=1 LOCAL_RANK=1 LOCAL_WORLD_SIZE=4 WORLD_SIZE=6 CUDA_VISIBLE_DEVICES=1 MASTER_ADDR=b",
        "b RANK=2 LOCAL_RANK=2 LOCAL_WORLD_SIZE=4 WORLD_SIZE=6 CUDA_VISIBLE_DEVICES=0 MASTER_ADDR=b",
        "b RANK=5 LOCAL_RANK=3 LOCAL_WORLD_SIZE=4 WORLD_SIZE=6 CUDA_VISIBLE_DEVICES=2 MASTER_ADDR=b",
        "# host a: 2 ranks",
        "a RANK=3 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 WORLD_SIZE=6 CUDA_VISIBLE_DEVICES=2 MASTER_ADDR=b",
        "a RANK=4 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 WORLD_SIZE=6 CUDA_VISIBLE_DEVICES=0 MASTER_ADDR=b",
    ]


def test_kueue_assignment_levels_domains_and_counts() -> None:
    doc = yaml.safe_load(export("kueue", SEATS, topology=_topo()))
    assert doc == {"topologyAssignment": {
        "levels": ["spine", "leaf", "node"],
        "domains": [{"values": ["spine", "l2", "b"], "count": 4}, {"values": ["spine", "l1", "a"], "count": 2}],
    }}
    with pytest.raises(ValueError, match="the kueue format needs the cluster"):
        export("kueue", SEATS)


def test_json_and_yaml_without_and_with_a_document() -> None:
    assert json.loads(export("json", SEATS[:2])) == ["b/gpu3", "b/gpu1"]
    assert yaml.safe_load(export("yaml", SEATS[:2])) == ["b/gpu3", "b/gpu1"]
    assert json.loads(export("json", SEATS, document={"job": "x"})) == {"job": "x"}
    with pytest.raises(ValueError, match="unknown format 'mpi'"):
        export("mpi", SEATS)
    assert FORMATS == ("json", "yaml", "rankfile", "hostfile", "env", "kueue")


def test_result_document_round_trips_through_seats() -> None:
    topo = _topo()
    job = job_from_dict({"name": "job", "ranks": 3, "groups": [{"members": [0, 1, 2], "bytes": 1e6}]})
    mapping = [7, 1, 4]
    rep = evaluate(topo, ClusterState(), job, mapping)
    doc = result_document(topo, job.name, mapping, rep, status="OPTIMAL")
    assert doc["job"] == "job" and doc["cluster"] == topo.name and doc["status"] == "OPTIMAL"
    assert doc["cost"]["step_seconds"] == rep.step_seconds and doc["cost"]["comm_seconds"] == rep.comm_seconds
    assert doc["cost"]["comm_seconds_total"] == rep.comm_seconds_total
    assert doc["cost"]["seconds_per_step"] == rep.comm_seconds  # the deprecated v1 name
    assert "baseline_costs" not in doc
    assert doc["mapping"] == [
        {"rank": 0, "device": "b/gpu3", "host": "b", "local_index": 3},
        {"rank": 1, "device": "a/gpu1", "host": "a", "local_index": 1},
        {"rank": 2, "device": "b/gpu0", "host": "b", "local_index": 0},
    ]
    assert seats_from_document(json.loads(json.dumps(doc))) == [("b", 3), ("a", 1), ("b", 0)]
    assert "cost" not in result_document(topo, "j", mapping)


def test_baseline_costs_add_the_answers_compute_to_each_baselines_exposed_comm() -> None:
    rep = CostReport(step_seconds=2.0, comm_seconds=0.5, comm_seconds_total=0.9, compute_seconds=1.5)
    costs = baseline_costs(rep, {"first-fit": 0.8, "kueue-tas": None})
    assert costs == {"first-fit": {"step_seconds": pytest.approx(2.3), "comm_seconds": 0.8},
                     "kueue-tas": {"step_seconds": None, "comm_seconds": None}}
    doc = result_document(_topo(), "j", [0], rep, baselines={"first-fit": 0.8})
    assert doc["baselines"] == {"first-fit": 0.8} and doc["baseline_costs"]["first-fit"]["comm_seconds"] == 0.8
    # a baseline's own report, when the solver gives it, is taken as it is (and not written into the document)
    own = CostReport(step_seconds=2.6, comm_seconds=0.8)
    assert baseline_costs(rep, {"first-fit": 0.8}, {"first-fit": own}) == {
        "first-fit": {"step_seconds": 2.6, "comm_seconds": 0.8}}
    doc = result_document(_topo(), "j", [0], rep, baselines={"first-fit": 0.8}, baseline_reports={"first-fit": own})
    assert doc["baseline_costs"]["first-fit"]["step_seconds"] == 2.6 and "baseline_reports" not in doc


def test_seats_from_plain_mappings() -> None:
    assert seats_from_document(["x/gpu1", "y.example.com/gpu12"]) == [("x", 1), ("y.example.com", 12)]
    assert seats_from_document({"1": "x/gpu0", "0": "x/gpu1"}) == [("x", 1), ("x", 0)]
    assert seats_from_document({"mapping": [{"rank": 1, "device": "x/gpu0"}, {"rank": 0, "device": "x/gpu1"}]}) == [
        ("x", 1), ("x", 0)]


def _seat_errors(doc: Any) -> str:
    with pytest.raises(InputError) as info:
        seats_from_document(doc, "r.json")
    return str(info.value)


def test_seats_from_document_errors() -> None:
    assert _seat_errors("x/gpu0") == "r.json: mapping: expected a list of devices or a result document"
    assert _seat_errors(["x/gpu0", "x/cpu1", "gpu2", 7]) == (
        "r.json: 3 error(s)\n"
        "  - mapping[1]: 'x/cpu1' is not a device id of the form host/gpuK\n"
        "  - mapping[2]: 'gpu2' is not a device id of the form host/gpuK\n"
        "  - mapping[3]: '7' is not a device id of the form host/gpuK")
    assert _seat_errors({"0": "x/gpu0", "2": "x/gpu1"}) == "r.json: mapping: ranks [1] have no device"
    assert _seat_errors({"mapping": [{"rank": 0}]}) == "r.json: mapping[0].device: 'None' is not a device id of the form host/gpuK"


def test_seats_from_document_rejects_bad_ranks_and_shared_devices() -> None:
    # these used to escape as ValueError (a traceback in `placement export`) or pass silently
    assert _seat_errors({"mapping": [{"rank": "first", "device": "x/gpu0"}]}) == (
        "r.json: mapping[0].rank: must be a rank number, got 'first'")
    assert _seat_errors([{"rank": float("inf"), "device": "x/gpu0"}, {"rank": -1, "device": "x/gpu1"}]) == (
        "r.json: 2 error(s)\n  - mapping[0].rank: must be a rank number, got inf\n"
        "  - mapping[1].rank: must be a rank number, got -1")
    assert _seat_errors({"job": "j", "cluster": "c"}) == (
        "r.json: 2 error(s)\n  - mapping.job: keys are rank numbers\n  - mapping.cluster: keys are rank numbers")
    assert _seat_errors([{"rank": 0, "device": "x/gpu0"}, {"rank": 0, "device": "x/gpu1"}]) == (
        "r.json: mapping[1].device: rank 0 is mapped twice")
    assert _seat_errors(["x/gpu0", "x/gpu1", "x/gpu0"]) == (
        "r.json: mapping[2]: x/gpu0 holds ranks 0 and 2; one rank per device")
