"""Robustness of the readers, checked with hypothesis: a malformed cluster, job, state or mapping document raises
InputError, never another exception (a traceback in the CLI); any bytes read as a document, and hostile numbers
in a job's fields, give InputError, LimitError or a value within its range."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.errors import InputError
from placement.io.export import seats_from_document
from placement.io.native import cluster_from_dict, job_from_dict, mapping_from_obj, state_from_dict
from placement.io.native.document import load_document
from placement.limits import LimitError, Limits
from tests.support_native import job_doc

_CLUSTER = {
    "levels": [
        {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
        {"name": "leaf", "bandwidth_gbps": 50},
    ],
    "node_types": [{"name": "t", "devices": 2, "matrix": ["X NV2", "NV2 X"], "rails": [0, 1]}],
    "rail_policy": {"extra_latency_us": 1},
    "intra_node_tiers": {"SYS": {"bandwidth_gbps": 5}},
    "generate": {"nodes": 2, "node_type": "t", "fanout": {"leaf": 2}, "prefix": "p"},
    "hosts": [{"name": "x", "devices": 2, "domains": {"leaf": "leaf"}}],
    "fault_domains": [{"kind": "power", "name": "a", "members": ["x"]}],
}
_JOB = {
    "parallel": {"tp": 2, "ep": 2, "order": "tp-cp-ep-dp-pp"},
    "model": {"parameters": 1e9, "hidden": 64, "layers": 2, "seq_len": 16, "experts": 2, "top_k": 1},
    "exposure": {"ep": 0.5},
    "constraints": {
        "require": {"tp": "node"},
        "spread": [{"kind": "leaf", "min_domains": 1}],
        "pins": {"0": "x/gpu0"},
        "exclude": ["x"],
    },
}
_EXPLICIT = {
    "ranks": 4,
    "groups": [{"label": "tp", "kind": "all_reduce", "members": "0-1", "bytes": 10, "exposed": 0.5}],
    "edges": [{"src": 0, "dst": 3, "bytes": 5, "count": 2}],
}
_STATE = {
    "occupied": [{"job": "a", "devices": ["x"]}],
    "failed": ["pnode01/gpu0"],
    "degraded": [{"device": "pnode02", "slowdown": 2}],
    "links": [
        {"between": ["pnode01/gpu0", "pnode01/gpu1"], "failed": True},
        {"uplink": "pnode02", "slowdown": 2},
    ],
    "fault_domains": [{"kind": "p", "name": "a", "members": ["pnode01"]}],
}
_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.lists(st.integers(-1, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from(["0-1", "3-1", "X", "node", "leaf:leaf", "x/gpu0", "{}", "{x}", "-5", "1e400"]),
)


@st.composite
def mutated(draw: st.DrawFn, base: Any) -> Any:
    """`base` with 1-3 values somewhere inside replaced by junk of another type or range."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        node: Any = doc
        slot: tuple[Any, Any] | None = None
        while isinstance(node, dict | list) and node:
            key = draw(
                st.sampled_from(sorted(node, key=str))
                if isinstance(node, dict)
                else st.integers(0, len(node) - 1)
            )
            slot = (node, key)
            node = node[key]
            if draw(st.booleans()):
                break
        if slot is not None:
            slot[0][slot[1]] = draw(_JUNK)
    return doc


READERS = settings(deadline=None, max_examples=150, database=None)


def _only_input_errors(fn: object, *args: object) -> None:
    try:
        fn(*args)  # type: ignore[operator]
    except InputError as e:  # anything else propagates and fails the test
        assert e.problems and all(p.message for p in e.problems)
        assert str(e).startswith(e.source)


@READERS
@given(mutated(_CLUSTER))
def test_cluster_reader_reports_input_errors_only(doc: object) -> None:
    _only_input_errors(cluster_from_dict, doc)


@READERS
@given(st.one_of(mutated(_JOB), mutated(_EXPLICIT)))
def test_job_reader_reports_input_errors_only(doc: object) -> None:
    _only_input_errors(job_from_dict, doc)


@READERS
@given(mutated(_STATE))
def test_state_reader_reports_input_errors_only(doc: object) -> None:
    _only_input_errors(state_from_dict, doc, cluster_from_dict(_CLUSTER)[0])


@READERS
@given(
    st.one_of(
        _JUNK,
        st.lists(_JUNK, max_size=3),
        st.dictionaries(st.text(max_size=3), _JUNK, max_size=3),
        st.lists(st.fixed_dictionaries({"rank": _JUNK, "device": _JUNK}), max_size=3),
    )
)
def test_mapping_readers_report_input_errors_only(doc: object) -> None:
    _only_input_errors(mapping_from_obj, doc, cluster_from_dict(_CLUSTER)[0])
    _only_input_errors(seats_from_document, doc)


# ---- any bytes, any document, any hostile value: InputError or a value, nothing else --------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=400) | st.text(alphabet="[]{}:,-&*! \n\"'abc0189e.", max_size=400))
def test_fuzzed_documents_give_input_errors_only(
    tmp_path_factory: pytest.TempPathFactory, data: bytes | str
) -> None:
    raw = data if isinstance(data, bytes) else data.encode()
    for suffix in (".yaml", ".json"):
        p = tmp_path_factory.mktemp("fz") / f"f{suffix}"
        p.write_bytes(raw)
        try:
            doc = load_document(p)
        except InputError as e:
            assert len(e.render()) < 5000
            continue
        for reader in (lambda d: cluster_from_dict(d, "c"), lambda d: job_from_dict(d, "j")):
            with contextlib.suppress(InputError, LimitError):
                reader(doc)


_HOSTILE_NUMBERS = st.sampled_from(
    [
        0,
        -1,
        1,
        2**31 - 1,
        2**63,
        10**20,
        1e29,
        1e308,
        -1e308,
        float("nan"),
        float("inf"),
        1e-300,
        "1e9",
        "0-100000000000",
        None,
        [],
        {},
        True,
    ]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    where=st.sampled_from(
        [
            "ranks",
            "parallel.tp",
            "parallel.dp",
            "model.parameters",
            "model.kv_fraction",
            "model.layers",
            "model.hidden",
            "model.mfu",
            "constraints.pins.0",
            "groups",
            "exposure.dp",
        ]
    ),
    value=_HOSTILE_NUMBERS,
)
def test_fuzzed_job_values_give_clear_errors(where: str, value: Any) -> None:
    doc = job_doc()
    node = doc
    keys = where.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    try:
        j = job_from_dict(
            yaml.safe_load(yaml.safe_dump(doc)) if isinstance(value, float) and value != value else doc, "j"
        )
    except (InputError, LimitError) as e:
        assert len(str(e)) < 5000
    else:
        assert 1 <= j.ranks <= Limits().max_ranks
        assert j.model is None or (0 < j.model.parameters <= 1e15 and 0 < j.model.kv_fraction <= 1)
