"""placement.io.export's Kubernetes objects: Pods and Service against the Kubernetes OpenAPI schema, the Topology
against Kueue's Topology CRD schema and its CEL rules, and what a cluster would refuse."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from placement.errors import InputError
from placement.io.export import ExportOptions, Seat, export, launch_seats
from tests.support_export import affinity_topology

# ---- Kubernetes ---------------------------------------------------------------------------------------------------

# Kueue's Topology CRD (config/components/crd/bases/kueue.x-k8s.io_topologies.yaml in kubernetes-sigs/kueue): the
# OpenAPI schema of `spec`, transcribed; its CEL rules (unique levels, hostname only last) are checked below.
_TOPOLOGY_SPEC = {
    "type": "object",
    "required": ["levels"],
    "additionalProperties": False,
    "properties": {
        "levels": {
            "type": "array",
            "minItems": 1,
            "maxItems": 8,
            "items": {
                "type": "object",
                "required": ["nodeLabel"],
                "additionalProperties": False,
                "properties": {
                    "nodeLabel": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 316,
                        "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                    }
                },
            },
        }
    },
}
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def test_k8s_objects_validate_against_the_kubernetes_and_kueue_schemas() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    kv = pytest.importorskip("kubernetes_validate")
    topo = affinity_topology()
    seats = launch_seats([("b", 3), ("a", 1), ("b", 2)], None, topo)
    opts = ExportOptions(
        job="Llama 13B/tp8",
        image="nvcr.io/nvidia/pytorch:24.05-py3",
        command=("python", "train.py"),
        level_labels={"leaf": "network.example.com/leaf", "spine": "network.example.com/spine"},
    )
    docs = list(yaml.safe_load_all(export("k8s", seats, topology=topo, options=opts)))
    assert [d["kind"] for d in docs] == ["Topology", "Service", "Pod", "Pod", "Pod"]
    top = docs[0]
    assert top["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    jsonschema.validate(top["spec"], _TOPOLOGY_SPEC)
    labels = [lv["nodeLabel"] for lv in top["spec"]["levels"]]
    assert labels == ["network.example.com/spine", "network.example.com/leaf", "kubernetes.io/hostname"]
    assert len(set(labels)) == len(labels) and labels[-1] == "kubernetes.io/hostname"
    version = kv.latest_version()
    for d in docs[1:]:
        kv.validate(d, version, strict=True)  # raises on a field Kubernetes does not know or a wrong type
    for s, pod in zip(seats, docs[2:], strict=True):
        spec = pod["spec"]
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": s.host}
        assert _DNS_LABEL.fullmatch(pod["metadata"]["name"]) and _DNS_LABEL.fullmatch(spec["hostname"])
        env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
        assert env == {
            "MASTER_ADDR": "llama-13b-tp8-rank-0.llama-13b-tp8",
            "MASTER_PORT": "29500",
            "WORLD_SIZE": "3",
            "RANK": str(s.rank),
            "LOCAL_RANK": "0",
            "PLACEMENT_DEVICE": s.device,
        }
        assert spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    # the schema check has teeth: a misspelled field fails
    bad = json.loads(json.dumps(docs[2]))
    bad["spec"]["nodeSelectr"] = bad["spec"].pop("nodeSelector")
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, version, strict=True)


def test_k8s_refuses_what_a_cluster_would_not_accept() -> None:
    topo = affinity_topology()
    seats = launch_seats([("a", 0)], None, topo)
    with pytest.raises(InputError, match="levels \\['leaf', 'spine'\\] need the node-label key"):
        export("k8s", seats, topology=topo, options=ExportOptions(image="img"))
    with pytest.raises(InputError, match="--image is required"):
        export("k8s", seats, topology=topo)
    with pytest.raises(InputError, match="'Leaf Switch' is not a node-label key"):
        export(
            "k8s",
            seats,
            topology=topo,
            options=ExportOptions(image="img", level_labels={"leaf": "Leaf Switch", "spine": "s"}),
        )
    amd = yaml.safe_load_all(export("k8s", [Seat(0, "mi", 1, "MI300X")], options=ExportOptions(image="img")))
    pod = next(d for d in amd if d["kind"] == "Pod")
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"amd.com/gpu": 1}}
