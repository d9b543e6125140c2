"""A small MoE serving job and the two-leaf cluster the serving tests share: their documents, with the knobs
the tests vary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from placement.io.native import load_cluster
from placement.model.topology import Topology

SERVING_CLUSTER = """\
name: two-leaves
levels:
  - {name: node, bandwidth_gbps: 400, latency_us: 1}
  - {name: leaf, bandwidth_gbps: 50, latency_us: 5}
  - {name: spine, bandwidth_gbps: 12.5, latency_us: 8}
generate: {nodes: 4, devices: 4, kind: H100, fanout: {leaf: 2}}
"""
"""4 hosts of 4 H100s, 2 per leaf, under a 4:1 spine."""


def serving_cluster_doc() -> dict[str, Any]:
    """`SERVING_CLUSTER` as a document (a sweep's inline cluster)."""
    doc: dict[str, Any] = yaml.safe_load(SERVING_CLUSTER)
    return doc


def write_serving_cluster(folder: Path) -> tuple[Path, Topology]:
    """`SERVING_CLUSTER` written to `folder`/c.yaml, and its topology."""
    path = folder / "c.yaml"
    path.write_text(SERVING_CLUSTER)
    return path, load_cluster(path)[0]


def serving_job_doc(
    decode_replicas: int = 1, name: str = "moe", spread: bool | None = None
) -> dict[str, Any]:
    """A 20B MoE (16 experts, top-2) served by a prefill pool of EP 4 and `decode_replicas` decode replicas that
    share EP 8; `spread` sets `placement.spread` (None: the reader's default)."""
    doc: dict[str, Any] = {
        "kind": "serving",
        "name": name,
        "device_kind": "H100",
        "model": {
            "parameters": 20e9,
            "expert_parameters": 16e9,
            "experts": 16,
            "top_k": 2,
            "hidden": 2048,
            "layers": 8,
            "heads": 16,
            "kv_heads": 4,
            "head_dim": 128,
            "weight_dtype": "fp8",
        },
        "pools": [
            {"role": "prefill", "ep": 4, "attention_dp": 4},
            {
                "role": "decode",
                "ep": 8 // decode_replicas,
                "attention_dp": 8 // decode_replicas,
                "replicas": decode_replicas,
            },
        ],
        "load": {"batch": 256, "prompt_tokens": 1000, "output_tokens": 100, "prefill_batch": 2},
    }
    if spread is not None:
        doc["placement"] = {"spread": spread}
    return doc
