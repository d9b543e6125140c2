"""placement.messages.domain, the design rule: native files are messages, and messages convert to the same
domain objects (topology, job, step model fields) and back (a step cost through JSON and bytes)."""

from __future__ import annotations

import copy

import pytest
from google.protobuf import json_format

from placement.io.native import load_cluster, load_job
from placement.messages import domain as convert
from placement.messages.files import request_from_dict
from placement.v1 import placement_pb2 as pb
from tests.conftest import EXAMPLES
from tests.support_server import cluster_doc, example_request, job_doc

# ---- conversion (the design rule) ---------------------------------------------------------------------------


def test_native_files_are_messages_and_convert_to_the_same_domain_objects() -> None:
    req = example_request()
    inputs = convert.place_inputs(req)
    topo, _ = load_cluster(EXAMPLES / "dgx-h100-4node.yaml")
    assert [d.id for d in inputs.topology.devices] == [d.id for d in topo.devices]
    assert [d.rail for d in inputs.topology.devices] == [d.rail for d in topo.devices]
    assert inputs.topology.levels == topo.levels
    assert inputs.job == load_job(EXAMPLES / "tp8-dp4.yaml")
    # unset optional fields take the native defaults, explicit zeros are errors
    assert inputs.job.parallel is not None and inputs.job.parallel.cp == 1
    zero = copy.deepcopy(req)
    zero.job.parallel.cp = 0
    with pytest.raises(Exception, match=r"job\.parallel\.cp: must be >= 1"):
        convert.place_inputs(zero)


def test_the_step_models_cluster_and_model_fields_are_messages_too() -> None:
    from placement.io.native import cluster_from_dict, job_from_dict

    cluster = cluster_doc(4)
    cluster["levels"][1]["oversubscription"] = 2.0
    cluster["device_kinds"] = [{"name": "X1", "tflops": 500.0, "memory_gb": 96.0}]
    cluster["node_types"] = [
        {"name": "box", "devices": 8, "kind": "X1", "nics": 4, "nic_gbps": 50.0, "mesh_link_gbps": 64.0}
    ]
    cluster["generate"] = [{"nodes": 4, "node_type": "box", "fanout": {"leaf": 4}}]
    job = job_doc(8, 4)
    job["model"].update(recompute=True, mfu=0.45, heads=32)
    job.pop("device_kind", None)
    req = request_from_dict({"cluster": cluster, "job": job}, pb.PlaceRequest)
    inputs = convert.place_inputs(req)
    topo, _ = cluster_from_dict(cluster)
    assert inputs.topology.levels == topo.levels and inputs.topology.levels[1].oversubscription == 2.0
    assert inputs.topology.host_types == topo.host_types and inputs.topology.host_types[0].nics == 4
    assert dict(inputs.topology.device_kinds) == dict(topo.device_kinds) and "X1" in topo.device_kinds
    assert inputs.job == job_from_dict(job)
    assert inputs.job.model is not None and (
        inputs.job.model.recompute,
        inputs.job.model.mfu,
        inputs.job.model.heads,
    ) == (True, 0.45, 32)


def test_step_cost_carries_every_field_and_phase_through_json_and_bytes() -> None:
    from placement.cost.report import CostReport, PhaseCost

    report = CostReport(
        step_seconds=1.5,
        comm_seconds=0.25,
        comm_seconds_total=0.75,
        compute_seconds=1.0,
        bubble_seconds=0.25,
        tokens_per_s=1234.5,
        mfu=0.38,
        surrogate_seconds=2.0,
        phases=[
            PhaseCost("tp", 0.5, 0.2, "node:NV18", "tp[3]", "ring"),
            PhaseCost("dp", 0.25, 0.05, "leaf", "dp[0]", "hierarchical"),
        ],
    )
    msg = convert.step_cost(report)
    again = pb.StepCost.FromString(msg.SerializeToString())
    parsed = json_format.Parse(json_format.MessageToJson(again), pb.StepCost())
    for m in (again, parsed):
        assert (m.step_seconds, m.comm_seconds, m.comm_seconds_total) == (1.5, 0.25, 0.75)
        assert (m.compute_seconds, m.bubble_seconds, m.tokens_per_s, m.mfu) == (1.0, 0.25, 1234.5, 0.38)
        assert m.surrogate_seconds == 2.0
        assert [
            (p.name, p.seconds, p.exposed_seconds, p.tier, p.critical, p.algorithm) for p in m.phases
        ] == [
            ("tp", 0.5, 0.2, "node:NV18", "tp[3]", "ring"),
            ("dp", 0.25, 0.05, "leaf", "dp[0]", "hierarchical"),
        ]
    # a job without a model shape has no compute: the optional fields stay unset, not 0
    bare = convert.step_cost(CostReport(step_seconds=0.1, comm_seconds=0.1, comm_seconds_total=0.1))
    assert not any(bare.HasField(f) for f in ("compute_seconds", "bubble_seconds", "tokens_per_s", "mfu"))


def test_rails_minus_one_is_a_device_without_a_rail() -> None:
    doc = cluster_doc(2)
    doc["generate"][0] = {"nodes": 2, "node_type": "t"}
    doc["node_types"] = [{"name": "t", "devices": 2, "rails": [0, None]}]
    doc["levels"] = doc["levels"][:2]
    req = request_from_dict(
        {"cluster": doc, "job": {"ranks": 2, "edges": [{"src": 0, "dst": 1, "bytes": 1}]}}, pb.PlaceRequest
    )
    assert list(req.cluster.node_types[0].rails) == [0, -1]
    assert [d.rail for d in convert.place_inputs(req).topology.devices] == [0, None, 0, None]
