"""Shared by the tests of placement.sim.whatif: a tiny cluster (16 GPUs) and job (8 ranks), a sweep document over
them, its problems by field path, and the rows of a results CSV."""

from __future__ import annotations

import copy
import csv
from pathlib import Path
from typing import Any

import pytest

from placement.errors import InputError
from placement.sim.whatif import canonical_strategy, sweep_from_dict

GREEDY = canonical_strategy("topology-greedy")  # the solver's name for it (kueue-tas)


CLUSTER: dict[str, Any] = {
    "name": "tiny",
    "levels": [
        {"name": "node", "bandwidth_gbps": 400, "latency_us": 1},
        {"name": "leaf", "bandwidth_gbps": 40, "latency_us": 4},
        {"name": "spine", "bandwidth_gbps": 10, "latency_us": 10},
    ],
    "generate": {"nodes": 4, "devices": 4, "kind": "H100", "fanout": {"leaf": 2}},
}


JOB: dict[str, Any] = {
    "name": "small",
    "device_kind": "H100",
    "parallel": {"tp": 4, "dp": 2},
    "model": {"parameters": 1.0e9, "hidden": 1024, "layers": 4, "seq_len": 2048, "micro_batches": 2},
}


def sweep_doc(**axes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "shapes": [{"tp": 4, "dp": 2}, {"tp": 2, "pp": 2, "dp": 2}],
        "occupancy": [0, 0.9],
        "strategies": ["first-fit", "topology-greedy", "cpsat"],
        "time_limits": [0.5],
    }
    base.update(axes)
    return {
        "name": "tiny-sweep",
        "cluster": copy.deepcopy(CLUSTER),
        "job": copy.deepcopy(JOB),
        "gpus": 8,
        "axes": base,
    }


def problems(doc: Any) -> dict[str, str]:
    with pytest.raises(InputError) as ei:
        sweep_from_dict(doc, "sweep.yaml")
    return {p.path: p.message for p in ei.value.problems}


def rows_of(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)
