"""The hostile fuzz of the gRPC server: huge ranks, counts and indices, non-finite and absurd values,
long lists, many pins and fault domains, long strings never give INTERNAL or UNKNOWN, never a trailer a default
client refuses, and never an answer long after the deadline. The server runs in a process of its own."""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from placement.v1 import placement_pb2 as pb
from tests.support_server import (
    TRAILER_LIMIT,
    ServerProcess,
    metrics_at,
    place_request,
    server_process,
    trailer_bytes,
)

_BASE = json_format.MessageToDict(
    place_request(nodes=4, tp=4, dp=2, time_limit_s=1.0), preserving_proto_field_name=True
)


def _slots(doc: Any, seen: set[int] | None = None) -> Iterator[tuple[Any, Any]]:
    """Every (container, key) of a document, each container once (a repeated list shares its elements)."""
    seen = set() if seen is None else seen
    if id(doc) in seen:
        return
    seen.add(id(doc))
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        yield doc, k
        yield from _slots(v, seen)


@st.composite
def hostile_requests(draw: st.DrawFn) -> pb.PlaceRequest:
    """The issue's classes: huge ranks/counts/indices, non-finite and absurd values, long lists (violations),
    many pins and fault domains, long strings. One list per request is repeated: repeating a list inside a
    repeated list would build millions of entries, which only the message-size check sees (test_server_errors)."""
    doc = copy.deepcopy(_BASE)
    repeated = False
    for _ in range(draw(st.integers(1, 3))):
        slots = list(_slots(doc))
        container, key = draw(st.sampled_from(slots))
        value = container[key]
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            container[key] = draw(st.sampled_from([2**31 - 1, 30_000_000, 1_000_000_000, 65_536, -1]))
        elif isinstance(value, float):
            container[key] = draw(st.sampled_from([float("nan"), float("inf"), 1e308, 1e-300, -1e308, 2e15]))
        elif isinstance(value, list) and value and not repeated:
            container[key] = value * draw(st.sampled_from([50, 400, 3000]))
            repeated = True
        elif isinstance(value, str):
            container[key] = draw(st.sampled_from(["x" * 5000, "0-100000000000", "\u00b5" * 100]))
    extra = draw(st.sampled_from(["none", "pins", "fault_domains", "mapping_rank"]))
    job = doc.setdefault("job", {})
    if extra == "pins":
        job.setdefault("constraints", {})["pins"] = {
            str(r): f"node{r % 4 + 1:02d}/gpu{r % 8}" for r in range(5000)
        }
    elif extra == "fault_domains":
        doc.setdefault("state", {})["fault_domains"] = [
            {"kind": "power", "name": f"p{i}", "members": ["node01/gpu0"]} for i in range(3000)
        ]
    elif extra == "mapping_rank":
        job["ranks"] = 2**31 - 1
    msg = pb.PlaceRequest()
    with contextlib.suppress(json_format.ParseError):
        json_format.ParseDict(doc, msg)
    return msg


_FUZZ = hsettings(
    max_examples=60,
    deadline=None,
    database=None,
    derandomize=True,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)


@pytest.fixture(scope="module")
def srv_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The fuzz's server runs in a process of its own, as in production: the time of a call is the server's, never
    a pause of this test process (a full garbage collection after the generator's large documents once stalled
    an in-process server for 9 s, and with it the call's deadline)."""
    with server_process(tmp_path_factory.mktemp("fuzz") / "server.log", "--workers", "2") as p:
        yield p


@_FUZZ
@given(req=hostile_requests())
def test_fuzzed_hostile_requests_fail_cleanly(srv_process: ServerProcess, req: pb.PlaceRequest) -> None:
    t0 = time.monotonic()
    try:
        srv_process.stub.Place(req, timeout=5)
    except grpc.RpcError as err:
        assert err.code() in {
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            grpc.StatusCode.DEADLINE_EXCEEDED,
        }, (err.code(), err.details())
        assert "Traceback" not in (err.details() or "")
        assert trailer_bytes(err) < TRAILER_LIMIT
    took = time.monotonic() - t0
    assert took < 5 + 1 + 2, (
        f"{took:.2f} s for a 5 s deadline"
    )  # at most 1 s late, and 2 s for a shared machine


def test_the_server_still_answers_correctly_after_the_hostile_fuzz(srv_process: ServerProcess) -> None:
    res = srv_process.stub.Place(place_request(), timeout=30).result
    assert len(res.mapping) == 16 and len({a.device for a in res.mapping}) == 16
    text = metrics_at(srv_process.metrics_port)
    assert 'code="OK",method="Place"' in text
    assert 'code="INTERNAL"' not in text and 'code="UNKNOWN"' not in text
    assert "Traceback" not in srv_process.log.read_text(errors="replace")
