"""The one schema of the input files (placement/schema/): the checked-in JSON Schemas and docs/formats.md are the
generated ones, every example and native fixture passes both the schema (jsonschema) and its real reader, bad
documents fail both, and the schema names the same keys as the readers."""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import pytest
from jsonschema import Draft202012Validator

from placement.cli.commands.batch import load_batch
from placement.cli.commands.preempt import load_running
from placement.cost.shared import OBJECTIVES
from placement.errors import InputError
from placement.io.native import (
    cluster_from_dict,
    job_from_dict,
    load_cluster,
    load_document,
    load_job,
    load_state,
    mapping_from_obj,
    state_from_dict,
)
from placement.io.native.doc_kinds import KIND_KEYS, document_kind
from placement.io.native.serving import load_serving_job, serving_job_from_dict
from placement.messages.files import read_request
from placement.messages.serving_job import serving_from_proto
from placement.model.job import LAUNCHERS, CollectiveKind
from placement.model.serving import DTYPE_BYTES, POOL_ROLES
from placement.schema import DIALECT, DOCUMENTS, json_schema
from placement.schema.documents import (
    Axes,
    CollectiveName,
    DtypeName,
    LauncherName,
    ModeName,
    ObjectiveName,
    RoleName,
    ServingAxes,
    ShapeFilters,
    StrategyName,
)
from placement.sim.whatif.axes import AXES, MODES, SERVING_AXES, known_strategies
from placement.sim.whatif.shapes import SHAPE_FILTERS
from placement.sim.whatif.spec import load_serving_sweep, load_sweep
from placement.v1 import placement_pb2 as pb
from tests.conftest import EXAMPLES, FIXTURES, ROOT
from tests.support_cli import run
from tests.support_serving import serving_cluster_doc, serving_job_doc

sys.path.insert(0, str(ROOT))
from scripts.gen_schemas import generated

HEADER = re.compile(r"^# yaml-language-server: \$schema=\.\./schemas/([\w-]+)\.schema\.json$")
FOREIGN = ("k8s", "slurm_live")
"""Fixture folders of other programs' formats (Kubernetes node lists, Slurm JSON), read by the importers."""


def _validator(kind: str) -> Draft202012Validator:
    return Draft202012Validator(json_schema(kind))


def _as_json(doc: Any) -> Any:
    """The document as an editor's YAML language server sees it: JSON data (integer keys become strings)."""
    return json.loads(json.dumps(doc))


def _errors(kind: str, doc: Any) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in _validator(kind).iter_errors(_as_json(doc))
    ]


def _cluster() -> Any:
    return load_cluster(EXAMPLES / "h100-256.yaml")[0]


READERS: dict[str, Callable[[Path], object]] = {
    "cluster": load_cluster,
    "state": lambda p: load_state(p, _cluster()),
    "job": load_job,
    "request": lambda p: read_request(p, pb.PlaceRequest),
    "batch": load_batch,
    "running": load_running,
    "sweep": load_sweep,
    "serving": load_serving_job,
    "serving-sweep": load_serving_sweep,
    "mapping": lambda p: mapping_from_obj(
        load_document(p), load_cluster(EXAMPLES / "dgx-h100-4node.yaml")[0], str(p)
    ),
}


def test_every_kind_has_a_reader_and_a_draft_2020_12_schema() -> None:
    assert set(READERS) == set(DOCUMENTS)
    for kind in DOCUMENTS:
        schema = json_schema(kind)
        assert schema["$schema"] == DIALECT
        Draft202012Validator.check_schema(schema)


def test_the_checked_in_schemas_and_formats_page_are_the_generated_ones() -> None:
    for path, text in generated().items():
        rel = path.relative_to(ROOT)
        assert path.exists(), f"{rel} is missing: run python scripts/gen_schemas.py"
        assert path.read_text() == text, f"{rel} is stale: run python scripts/gen_schemas.py"


def _examples() -> list[tuple[Path, str]]:
    out = []
    for p in sorted(EXAMPLES.glob("*.yaml")):
        m = HEADER.match(p.read_text().splitlines()[0])
        assert m, (
            f"{p.name}: the first line must be `# yaml-language-server: $schema=../schemas/KIND.schema.json`"
        )
        out.append((p, m.group(1)))
    out += [(p, "mapping") for p in sorted(EXAMPLES.glob("*.json"))]
    return out


@pytest.mark.parametrize(("path", "kind"), _examples(), ids=lambda x: x.name if isinstance(x, Path) else x)
def test_every_example_passes_its_schema_and_its_reader(path: Path, kind: str) -> None:
    assert (ROOT / "schemas" / f"{kind}.schema.json").exists()
    assert _errors(kind, load_document(path)) == []
    READERS[kind](path)  # raises InputError on any problem


def _fixtures() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_native_fixture_passes_its_schema_and_its_reader(path: Path) -> None:
    rel = path.relative_to(FIXTURES)
    if rel.parts[0] in FOREIGN:
        return  # another program's format; the importers' tests read it
    kind = document_kind(load_document(path))
    assert kind in ("cluster", "state", "job", "serving"), (
        f"{rel}: not a native file of a known kind ({kind})"
    )
    assert _errors(kind, load_document(path)) == []
    READERS[kind](path)


# ---- the schema and the reader refuse the same mistakes ---------------------------------------------------

CLUSTER = {
    "name": "c",
    "levels": [
        {"name": "node", "bandwidth_gbps": 400},
        {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
    ],
    "node_types": [{"name": "t", "devices": 4, "kind": "H100"}],
    "generate": {"nodes": 4, "node_type": "t", "fanout": {"leaf": 4}},
}
JOB = {
    "name": "j",
    "parallel": {"tp": 4, "dp": 2},
    "model": {"parameters": 7.0e9, "hidden": 4096, "layers": 32, "seq_len": 4096},
    "constraints": {"prefer": {"tp": "node"}, "pins": {0: "node01/gpu0"}},
}
STATE = {
    "occupied": [
        {"job": "x", "devices": ["node01"]},
        {
            "job": "y",
            "devices": ["node03/gpu2", "node03/gpu3"],
            "shape": {"groups": [{"members": "0-1", "bytes": 1.0e6}]},
            "ranks": ["node03/gpu3", "node03/gpu2"],
        },
    ],
    "failed": ["node02/gpu1"],
    "degraded": [{"device": "node03/gpu0", "slowdown": 1.5}],
    "links": [
        {"uplink": "node04", "slowdown": 2},
        {"between": ["node03/gpu0", "node03/gpu1"], "failed": True},
        {"uplink": "node02", "load_gbps": 10, "direction": "up"},
    ],
}
SERVING = {
    "kind": "serving",
    "name": "s",
    "model": {"parameters": 7.0e9, "hidden": 4096, "layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128},
    "pools": [{"role": "prefill", "tp": 2}, {"role": "decode", "tp": 4, "replicas": 2}],
    "load": {"batch": 16, "prompt_tokens": 1000, "output_tokens": 200},
    "placement": {"spread": True},
}


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `doc` with the value at a dotted path replaced (None: the key removed)."""
    out = copy.deepcopy(doc)
    *head, last = path.split(".")
    node: Any = out
    for k in head:
        node = node[int(k)] if isinstance(node, list) else node[k]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return out


def _read(kind: str, doc: Any) -> None:
    if kind == "serving":
        serving_job_from_dict(doc)
    elif kind == "cluster":
        cluster_from_dict(doc)
    elif kind == "job":
        job_from_dict(doc)
    else:
        topo, _ = cluster_from_dict(CLUSTER)
        state_from_dict(doc, topo)


BAD = [
    ("cluster", _set(CLUSTER, "levls", [])),  # a mistyped key
    ("cluster", _set(CLUSTER, "levels", None)),  # levels missing
    ("cluster", _set(CLUSTER, "generate.nodes", None)),
    ("cluster", _set(CLUSTER, "generate.nodes", 0)),
    ("cluster", _set(CLUSTER, "levels.1.bandwidth_gbps", 0)),
    ("cluster", _set(CLUSTER, "levels.1.latency_us", -1)),
    ("cluster", _set(CLUSTER, "levels.1.oversubscription", 0)),
    ("cluster", _set(CLUSTER, "node_types.0.matrix", ["X NV18 QQ", "NV18 X", "X X"])),
    ("cluster", _set(CLUSTER, "node_types.0.rails", [0, -2, 1, 1])),
    ("cluster", _set(CLUSTER, "generate.fanout", {"leaf": 0})),
    ("cluster", _set(CLUSTER, "intra_node_tiers", {"NVX": {"bandwidth_gbps": 1}})),
    ("cluster", _set(CLUSTER, "rail_policy", {"bandwidth_factor": 2})),
    ("cluster", _set(CLUSTER, "device_kinds", [{"name": "k", "tflops": 0, "memory_gb": 80}])),
    ("job", _set(JOB, "parallel.tpp", 8)),
    ("job", _set(JOB, "parallel.tp", 0)),
    ("job", _set(JOB, "parallel.order", "tp-dp")),
    ("job", _set(JOB, "model.hidden", None)),
    ("job", _set(JOB, "model.mfu", 1.5)),
    ("job", _set(JOB, "model.kv_fraction", 0)),
    ("job", _set(JOB, "launcher", "srun")),
    ("job", _set(JOB, "exposure", {"dp": 1.5})),
    ("job", _set(JOB, "constraints.pins", {"zero": "node01/gpu0"})),
    ("job", _set(JOB, "constraints.balance", {"slice": 2})),
    ("job", {"name": "e", "ranks": 2, "groups": [{"members": "0-1", "bytes": 1e6, "kind": "broadcast"}]}),
    ("job", {"name": "e", "ranks": 2, "groups": [{"members": "0-1"}]}),
    ("job", {"name": "e", "ranks": 2, "groups": [{"members": "0..1", "bytes": 1}]}),
    ("job", {"name": "e", "ranks": 2, "edges": [{"src": 0, "dst": 1, "bytes": 1, "exposed": 2}]}),
    ("state", _set(STATE, "degraded.0.slowdown", 0.5)),
    ("state", _set(STATE, "occupied.0.job", None)),
    ("state", _set(STATE, "occupied.0.jobs", "x")),
    ("state", _set(STATE, "links.0.uplink", ["node04"])),
    ("state", _set(STATE, "failled", [])),
    ("state", _set(STATE, "occupied.1.shape", "tp8")),
    ("state", _set(STATE, "occupied.1.job_fil", "tp8-dp4.yaml")),
    ("state", _set(STATE, "links.2.direction", "sideways")),
    ("state", _set(STATE, "links.2.load_gbps", -1)),
    ("serving", _set(SERVING, "kind", "servin")),
    ("serving", _set(SERVING, "model.heads", None)),
    ("serving", _set(SERVING, "model.attention", "xla")),
    ("serving", _set(SERVING, "model.weight_dtype", "fp9")),
    ("serving", _set(SERVING, "pools", [])),
    ("serving", _set(SERVING, "pools.1.role", "both")),
    ("serving", _set(SERVING, "pools.1.tp", 0)),
    ("serving", _set(SERVING, "load.prompt_tokens", None)),
    ("serving", _set(SERVING, "load.output_tokens", 0)),
    ("serving", _set(SERVING, "load.concurrency", 32)),  # with batch
    ("serving", _set(SERVING, "load.batch", None)),  # neither batch nor concurrency
    ("serving", _set(SERVING, "placement.spread", "yes")),
    ("serving", {"serving": _set(SERVING, "pool", [])}),
]


def test_the_good_documents_pass_both() -> None:
    for kind, doc in (
        ("cluster", CLUSTER),
        ("job", JOB),
        ("state", STATE),
        ("serving", SERVING),
        ("serving", {"serving": {k: v for k, v in SERVING.items() if k != "kind"}, "name": "w"}),
    ):
        assert _errors(kind, doc) == []
        _read(kind, doc)


@pytest.mark.parametrize(("kind", "doc"), BAD, ids=[f"{k}-{i}" for i, (k, _) in enumerate(BAD)])
def test_a_mistake_fails_both_the_schema_and_the_reader(kind: str, doc: Any) -> None:
    assert _errors(kind, doc), "the schema accepts it"
    with pytest.raises(InputError):
        _read(kind, doc)


def _fields(kind: str) -> set[str]:
    return set(json_schema(kind)["properties"])


def test_the_schema_names_the_readers_keys() -> None:
    shared = {"name", "description", "fault_domains"}
    assert _fields("cluster") == KIND_KEYS["cluster"] | shared
    assert _fields("state") == KIND_KEYS["state"] | {"description", "fault_domains"}
    assert _fields("job") == KIND_KEYS["job"] | {"name", "description"}
    assert tuple(Axes.model_fields) == AXES
    assert set(ShapeFilters.model_fields) == set(SHAPE_FILTERS)
    assert tuple(ServingAxes.model_fields) == SERVING_AXES
    modes = json_schema("sweep")["$defs"]["Axes"]["properties"]["modes"]["anyOf"][0]["enum"]
    assert tuple(modes) == MODES
    # the request's own keys are PlaceRequest's fields and the file keys of placement.messages.files
    place = {f.name for f in pb.PlaceRequest.DESCRIPTOR.fields}
    assert _fields("request") == place | {"cluster_file", "state_file", "job_file"}
    options = {f.name for f in pb.Options.DESCRIPTOR.fields}
    assert set(json_schema("request")["$defs"]["Options"]["properties"]) == options


def test_placement_schema_prints_the_schema() -> None:
    for kind in DOCUMENTS:
        result = run("schema", kind)
        assert result.exit_code == 0, result.output
        assert json.loads(result.output) == json_schema(kind)
    bad = run("schema", "clustr")
    assert bad.exit_code == 2
    assert "unknown kind" in bad.output


def test_the_schemas_names_are_the_programs() -> None:
    assert get_args(StrategyName) == (*known_strategies(), "topology-greedy")
    assert get_args(CollectiveName) == tuple(k.value for k in CollectiveKind)
    assert get_args(LauncherName) == LAUNCHERS
    assert get_args(ModeName) == MODES
    assert get_args(ObjectiveName) == OBJECTIVES
    assert get_args(DtypeName) == tuple(DTYPE_BYTES)
    assert get_args(RoleName) == POOL_ROLES


# ---- every object: the reader's allowed keys are the schema's fields ----------------------------------------

PROBE = "zzqqxx"
"""A key close to no field: the reader answers "unknown field; expected one of [...]", its full list of keys."""


def _def(kind: str, name: str | None) -> set[str]:
    schema = json_schema(kind)
    node = schema if name is None else schema["$defs"][name]
    return set(node["properties"])


def _reader_keys(read: Callable[[Any], object], doc: Any, where: str) -> set[str]:
    with pytest.raises(InputError) as e:
        read(doc)
    for p in e.value.problems:
        if p.path == f"{where}.{PROBE}".lstrip("."):
            m = re.search(r"expected one of \[(.*)\]", p.message)
            assert m, p.message
            return {k.strip(" '") for k in m.group(1).split(",")}
    raise AssertionError(f"no unknown-field problem at {where}: {e.value.problems}")


def _with_probe(doc: dict[str, Any], path: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node: Any = out
    for k in [x for x in path.split(".") if x]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    node[PROBE] = 1
    return out


FULL_CLUSTER = {
    **CLUSTER,
    "rail_policy": {"extra_latency_us": 2},
    "hosts": [{"name": "h1", "domains": {"leaf": "leaf"}, "devices": 2}],
    "fault_domains": [{"kind": "power", "name": "a", "members": ["node01"]}],
    "device_kinds": [{"name": "k", "tflops": 100, "memory_gb": 80}],
}
FULL_JOB = {
    **JOB,
    "constraints": {
        "spread": [{"kind": "power", "min_domains": 1}],
        "balance": {"level": "leaf"},
        "segment": {"nodes": 1, "level": "leaf"},
    },
}
EXPLICIT = {
    "name": "e",
    "ranks": 2,
    "groups": [{"members": [0, 1], "bytes": 1}],
    "edges": [{"src": 0, "dst": 1, "bytes": 1}],
}


def _state(doc: Any) -> object:
    return state_from_dict(doc, cluster_from_dict(CLUSTER)[0])


KEYS = [
    ("cluster", None, cluster_from_dict, FULL_CLUSTER, ""),
    ("cluster", "Level", cluster_from_dict, FULL_CLUSTER, "levels.0"),
    ("cluster", "NodeType", cluster_from_dict, FULL_CLUSTER, "node_types.0"),
    ("cluster", "Generate", cluster_from_dict, FULL_CLUSTER, "generate"),
    ("cluster", "Host", cluster_from_dict, FULL_CLUSTER, "hosts.0"),
    ("cluster", "RailPolicy", cluster_from_dict, FULL_CLUSTER, "rail_policy"),
    ("cluster", "DeviceKind", cluster_from_dict, FULL_CLUSTER, "device_kinds.0"),
    ("cluster", "FaultDomain", cluster_from_dict, FULL_CLUSTER, "fault_domains.0"),
    ("state", None, _state, STATE, ""),
    ("state", "Occupied", _state, STATE, "occupied.0"),
    ("state", "Degraded", _state, STATE, "degraded.0"),
    ("state", "Link", _state, STATE, "links.0"),
    ("job", None, job_from_dict, FULL_JOB, ""),
    ("job", "Parallel", job_from_dict, FULL_JOB, "parallel"),
    ("job", "Model", job_from_dict, FULL_JOB, "model"),
    ("job", "Constraints", job_from_dict, FULL_JOB, "constraints"),
    ("job", "Spread", job_from_dict, FULL_JOB, "constraints.spread.0"),
    ("job", "Balance", job_from_dict, FULL_JOB, "constraints.balance"),
    ("job", "Segment", job_from_dict, FULL_JOB, "constraints.segment"),
    ("job", "Group", job_from_dict, EXPLICIT, "groups.0"),
    ("job", "Edge", job_from_dict, EXPLICIT, "edges.0"),
    ("serving", "ServingJobDoc", serving_job_from_dict, SERVING, ""),
    ("serving", "ServingModel", serving_job_from_dict, SERVING, "model"),
    ("serving", "ServingPool", serving_job_from_dict, SERVING, "pools.1"),
    ("serving", "ServingLoad", serving_job_from_dict, SERVING, "load"),
    ("serving", "ServingRules", serving_job_from_dict, SERVING, "placement"),
    ("serving", "ServingWrapped", serving_job_from_dict, {"serving": SERVING}, ""),
    ("serving", "ServingBody", serving_job_from_dict, {"serving": SERVING}, "serving"),
]


@pytest.mark.parametrize(
    ("kind", "name", "read", "doc", "where"), KEYS, ids=[f"{k}-{n or 'document'}" for k, n, *_ in KEYS]
)
def test_the_reader_takes_exactly_the_schemas_fields(
    kind: str, name: str | None, read: Callable[[Any], object], doc: dict[str, Any], where: str
) -> None:
    path = re.sub(r"\.(\d+)", r"[\1]", where)
    assert _reader_keys(read, _with_probe(doc, where), path) == _def(kind, name)


def test_the_other_readers_take_exactly_the_schemas_fields(tmp_path: Path) -> None:
    sweep = {"cluster": CLUSTER, "job": JOB, "solver": {PROBE: 1}}
    (tmp_path / "s.yaml").write_text(json.dumps({**sweep, PROBE: 1}))
    assert _reader_keys(lambda p: load_sweep(p), tmp_path / "s.yaml", "") == _def("sweep", None)
    (tmp_path / "s.yaml").write_text(json.dumps(sweep))
    assert _reader_keys(lambda p: load_sweep(p), tmp_path / "s.yaml", "solver") == _def(
        "sweep", "SweepSolver"
    )
    (tmp_path / "b.yaml").write_text(json.dumps({"jobs": [{"job": JOB, PROBE: 1}], PROBE: 1}))
    assert _reader_keys(lambda p: load_batch(p), tmp_path / "b.yaml", "") == _def("batch", None)
    assert _reader_keys(lambda p: load_batch(p), tmp_path / "b.yaml", "jobs[0]") == _def(
        "batch", "BatchEntry"
    )
    (tmp_path / "r.yaml").write_text(json.dumps({"running": [{"job": "x", PROBE: 1}]}))
    assert _reader_keys(lambda p: load_running(p), tmp_path / "r.yaml", "running[0]") == _def(
        "running", "RunningJob"
    )
    serving = {"cluster": CLUSTER, "job": SERVING, "solver": {PROBE: 1}}
    (tmp_path / "v.yaml").write_text(json.dumps({**serving, PROBE: 1}))
    assert _reader_keys(load_serving_sweep, tmp_path / "v.yaml", "") == _def("serving-sweep", None)
    (tmp_path / "v.yaml").write_text(json.dumps(serving))
    assert _reader_keys(load_serving_sweep, tmp_path / "v.yaml", "solver") == _def(
        "serving-sweep", "ServingSweepSolver"
    )


def test_a_request_takes_a_serving_job_as_its_message_does(tmp_path: Path) -> None:
    body = {k: v for k, v in SERVING.items() if k not in ("kind", "name", "placement")}
    good = {"cluster": CLUSTER, "job": {"name": "s", "serving": {**body, "rules": {"spread": False}}}}
    bad = {"cluster": CLUSTER, "job": {"name": "s", "serving": {**body, "placement": {"spread": False}}}}
    for doc, ok in ((good, True), (bad, False)):
        (tmp_path / "r.yaml").write_text(json.dumps(doc))
        assert (_errors("request", doc) == []) is ok
        if ok:
            assert read_request(tmp_path / "r.yaml", pb.PlaceRequest).job.HasField("serving")
        else:
            with pytest.raises(InputError):
                read_request(tmp_path / "r.yaml", pb.PlaceRequest)


def test_a_serving_job_behind_job_file_or_inline_passes_the_schema_and_the_readers(tmp_path: Path) -> None:
    """A request whose job_file is a `kind: serving` file, a request with the serving job inline in either form,
    and a batch file whose entries hold serving jobs: each passes its schema, and the readers make the same
    serving job of it (the message's `serving`, equal to the serving reader's own)."""
    doc = serving_job_doc(name="moe")
    (tmp_path / "moe.yaml").write_text(json.dumps(doc))
    want = load_serving_job(tmp_path / "moe.yaml")
    cluster = {"name": "c", "levels": [{"name": "node", "bandwidth_gbps": 400, "latency_us": 1}]}
    for request in ({"cluster": cluster, "job_file": "moe.yaml"}, {"cluster": cluster, "job": doc}):
        assert _errors("request", request) == []
        (tmp_path / "req.yaml").write_text(json.dumps(request))
        got = read_request(tmp_path / "req.yaml", pb.PlaceRequest).job
        assert got.HasField("serving") and got.name == want.name
        assert serving_from_proto(got) == want
    batch = {"jobs": [{"job_file": "moe.yaml", "weight": 2}, {"job": doc}]}
    assert _errors("batch", batch) == []
    (tmp_path / "batch.yaml").write_text(json.dumps(batch))
    topo = cluster_from_dict(serving_cluster_doc())[0]
    read = load_batch(tmp_path / "batch.yaml", topo)
    assert [bj.serving for bj in read] == [want, want] and [bj.weight for bj in read] == [2.0, 1.0]
    assert all(bj.job.ranks == want.ranks for bj in read)
