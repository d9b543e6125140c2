"""The gRPC server in process on port 0: each method, each error code with its details, deadline, cancellation,
concurrency, health on shutdown, token auth, metrics, logs, SIGTERM, and a hypothesis fuzz of requests.

Tests that need a solve of a given duration replace `server.servicer.place` with a fake: the server's
plumbing is under test there, not the optimizer.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from placement.cost import evaluate
from placement.errors import InfeasibleError
from placement.io.native import load_cluster, load_job
from placement.requests import request_from_dict
from placement.solve import PlacementResult, SolveOptions, SolveStatus, Strategy
from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from server import convert
from server.main import SERVICE_NAME, PlacementServer, create_server
from server.settings import Settings, parse_settings
from server.telemetry import JsonFormatter

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


# ---- inputs -------------------------------------------------------------------------------------------------


def cluster_doc(nodes: int, gpus: int = 8, per_leaf: int = 4, kind: str = "H100") -> dict[str, Any]:
    """`nodes` hosts of `gpus` devices, `per_leaf` hosts per leaf, one spine (names node01, node02...)."""
    return {
        "name": f"c{nodes}",
        "levels": [
            {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
            {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
            {"name": "spine", "bandwidth_gbps": 25, "latency_us": 10},
        ],
        "generate": [{"nodes": nodes, "devices": gpus, "kind": kind, "fanout": {"leaf": per_leaf}}],
    }


def job_doc(tp: int, dp: int, pp: int = 1, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or f"tp{tp}-dp{dp}-pp{pp}",
        "device_kind": "H100",
        "parallel": {"tp": tp, "dp": dp, "pp": pp},
        "model": {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096, "micro_batches": 8},
        "constraints": {"require": {"tp": "node"}},
    }


def place_request(nodes: int = 4, tp: int = 8, dp: int = 2, pp: int = 1, occupied: tuple[str, ...] = (),
                  time_limit_s: float = 5.0, **extra: Any) -> pb.PlaceRequest:
    doc: dict[str, Any] = {"cluster": cluster_doc(nodes), "job": job_doc(tp, dp, pp),
                           "options": {"time_limit_s": time_limit_s}, **extra}
    if occupied:
        doc["state"] = {"occupied": [{"job": "other", "devices": list(occupied)}]}
    return request_from_dict(doc, pb.PlaceRequest)


def example_request() -> pb.PlaceRequest:
    return request_from_dict({"cluster_file": "dgx-h100-4node.yaml", "job_file": "tp8-dp4.yaml"},
                             pb.PlaceRequest, base_dir=EXAMPLES)


# ---- servers ------------------------------------------------------------------------------------------------


@dataclass
class Running:
    server: PlacementServer
    port: int
    channel: Any
    stub: pb_grpc.PlacementServiceStub
    health: Any


@contextlib_contextmanager := None  # placeholder removed below
