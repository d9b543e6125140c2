"""Request files (YAML/JSON in the protobuf JSON mapping) into PlaceRequest/EvaluateRequest/CompareRequest,
and results out as JSON or YAML. Protobuf only, no grpc: the CLI uses it offline and with ``--server``.

A request file holds ``{cluster, state, job (Compare: jobs), options (Evaluate: mapping)}``. Instead of a part it
may name a native file, relative to the request file: ``cluster_file``, ``state_file``, ``job_file``,
``job_files`` (Compare, a list), ``mapping_file`` (Evaluate; a mapping or a result file). Native shorthands are
normalized first so every native file is a valid message: a single ``generate`` block, matrix rows as lists,
``null`` rails (-1) and ``null`` CPU/NUMA affinity entries ("" / -1), an ``nvidia_smi`` file (inlined as matrix,
rails and affinity), rank ranges ``"0-7,16-23"``, and mappings as a list of devices or ``{rank: device}``. A
``job_file`` (or an entry of ``job_files``) may name a serving job file (``kind: serving``, docs/serving.md), and
``job`` may be one inline: it is read by the serving reader (its name defaults to the file's) and becomes the
``Job`` message carrying ``serving``.

>>> from placement.v1 import placement_pb2 as pb
>>> req = request_from_dict({"job": {"ranks": 2, "groups": [{"members": "0-1", "bytes": 1e6}]}}, pb.PlaceRequest)
>>> list(req.job.groups[0].members)
[0, 1]
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml
from google.protobuf import json_format

from placement.errors import InputError, Problem, Problems
from placement.io.affinity import affinity_fields
from placement.io.importers.nvidia_smi import read_nvidia_smi
from placement.io.native import load_document
from placement.io.native.doc_kinds import closest_key
from placement.io.native.serving import is_serving_document, serving_job_from_dict
from placement.messages.serving_job import serving_to_proto
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.v1 import placement_pb2 as pb

__all__ = [
    "ConversionCache",
    "dump_message",
    "message_to_dict",
    "normalize_cluster",
    "normalize_job",
    "normalize_mapping",
    "read_request",
    "request_from_dict",
    "write_message",
]

R = TypeVar(
    "R", pb.PlaceRequest, pb.EvaluateRequest, pb.CompareRequest, pb.PreemptRequest, pb.CapacityRequest
)

_FILE_KEYS = {"cluster_file": "cluster", "state_file": "state", "job_file": "job", "mapping_file": "mapping"}
_AT = re.compile(r" at (?:[A-Za-z_]\w*\.)?([\w.\[\]]+?)\.*$")
_FIELD = re.compile(r"Failed to parse (\w+) field: ")
_RANGE = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")
_UNKNOWN = re.compile(r'Message type "([\w.]+)" has no field named "([^"]+)" at "([^"]*)"')


# ---- native shorthands -----------------------------------------------------------------------------------


def normalize_cluster(
    doc: Any, base_dir: Path | None = None, ps: Problems | None = None, path: str = "cluster"
) -> Any:
    """A native cluster document in the message's shape (see the module docstring); other values unchanged."""
    if not isinstance(doc, dict):
        return doc
    d = dict(doc)
    if isinstance(d.get("generate"), dict):
        d["generate"] = [d["generate"]]
    if isinstance(d.get("node_types"), list):
        d["node_types"] = [
            _normalize_node_type(nt, base_dir, ps, f"{path}.node_types[{i}]")
            for i, nt in enumerate(d["node_types"])
        ]
    return d


def _normalize_node_type(nt: Any, base_dir: Path | None, ps: Problems | None, path: str) -> Any:
    if not isinstance(nt, dict):
        return nt
    nt = dict(nt)
    smi = nt.pop("nvidia_smi", None)
    table = nt.pop("nvidia_smi_table", None)
    if smi is not None:
        f = Path(str(smi))
        if base_dir is not None and not f.is_absolute():
            f = base_dir / f
        try:
            topo = read_nvidia_smi(f, table=table if isinstance(table, int) else None)
        except InputError as e:
            if ps is None:
                raise
            for p in e.problems:
                ps.add(f"{path}.nvidia_smi", f"{e.source}: {p}")
        else:
            nt.setdefault("matrix", [list(row) for row in topo.matrix])
            nt.setdefault("rails", list(topo.rails))
            for key, val in affinity_fields(topo.cpu_affinity, topo.numa_affinity).items():
                nt.setdefault(key, val)
    rows = nt.get("matrix")
    if isinstance(rows, list):
        nt["matrix"] = [" ".join(str(c) for c in row) if isinstance(row, list) else row for row in rows]
    rails = nt.get("rails")
    if isinstance(rails, list):
        nt["rails"] = [-1 if x is None else x for x in rails]
    for key, unknown in (("cpu_affinity", ""), ("numa_affinity", -1)):  # one entry per device, null = unknown
        vals = nt.get(key)
        if isinstance(vals, list):
            nt[key] = [unknown if x is None else x for x in vals]
    return nt


def _ranks(text: str) -> list[int] | None:
    out: list[int] = []
    for part in text.split(","):
        m = _RANGE.fullmatch(part)
        if not m or int(m.group(2) or m.group(1)) < int(m.group(1)):
            return None
        out.extend(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return out


def serving_message_dict(doc: Any, source: str, ps: Problems, path: str = "job") -> Any:
    """A native serving job document (``kind: serving``, or the job under a native ``serving:`` key) as the `Job`
    message carrying ``serving``, in the protobuf JSON mapping: read by the serving reader (its problems added
    to `ps` at `path`, None then), so a request and a serving job file share one set of rules."""
    try:
        job = serving_job_from_dict(doc, source)
    except InputError as e:
        for prob in e.problems:
            ps.add(f"{path} ({e.source})" + (f" {prob.path}" if prob.path else ""), prob.message)
        return None
    return message_to_dict(serving_to_proto(job))


def normalize_job(doc: Any, ps: Problems | None = None, path: str = "job") -> Any:
    """A native job document in the message's shape: rank range strings expanded; a native serving job
    (``kind: serving``) as the message carrying ``serving`` (`serving_message_dict`)."""
    if isinstance(doc, dict) and doc.get("kind") == "serving":
        return serving_message_dict(doc, path, ps if ps is not None else Problems(path), path)
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
        return doc
    d = dict(doc)
    groups = []
    for i, g in enumerate(d["groups"]):
        if isinstance(g, dict) and isinstance(g.get("members"), str):
            members = _ranks(g["members"])
            if members is None:
                if ps is not None:
                    ps.add(
                        f"{path}.groups[{i}].members",
                        f'bad rank range {g["members"]!r}; write e.g. "0-7,16-23"',
                    )
            else:
                g = {**g, "members": members}
        groups.append(g)
    d["groups"] = groups
    return d


def normalize_state(doc: Any, base_dir: Path | None, ps: Problems, path: str = "state") -> Any:
    """A native state document in the message's shape: a running job's ``job_file`` (relative to `base_dir`, the
    state file's folder) read into its ``shape``, and every shape's rank ranges expanded (`normalize_job`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("occupied"), list):
        return doc
    out = []
    for i, o in enumerate(doc["occupied"]):
        where = f"{path}.occupied[{i}]"
        if isinstance(o, dict) and "job_file" in o:
            o = dict(o)
            ref = o.pop("job_file")
            if "shape" in o:
                ps.add(
                    where,
                    "give one of shape: (the job's parallel/model or groups/edges) or job_file: path, not both",
                )
            else:
                o["shape"] = _load_ref(ref, f"{where}.job_file", base_dir, ps)
        if isinstance(o, dict) and isinstance(o.get("shape"), dict):
            o = {**o, "shape": normalize_job(o["shape"], ps, f"{where}.shape")}
        out.append(o)
    return {**doc, "occupied": out}


def normalize_mapping(doc: Any) -> Any:
    """A mapping as a list of {rank, device}: from a list of devices, {rank: device} or a result document."""
    if isinstance(doc, dict) and isinstance(doc.get("result"), dict):
        doc = doc["result"]
    if isinstance(doc, dict) and "mapping" in doc:
        doc = doc["mapping"]
    if isinstance(doc, dict):
        return [{"rank": k, "device": v} for k, v in doc.items()]
    if isinstance(doc, list):
        return [{"device": x} if isinstance(x, str) else x for x in doc]
    return doc


# ---- reading ------------------------------------------------------------------------------------------------


def _parse_error(e: json_format.ParseError) -> Problem:
    """A ParseError's innermost message, at the field path it names (or the chain of fields it went through)."""
    text = str(e)
    unknown = _UNKNOWN.search(text)
    if unknown:
        type_name, name, at = unknown.groups()
        at = at.partition(".")[2]  # drop the request type: "PlaceRequest.cluster.levels[1]"
        try:
            known = sorted(f.name for f in pb.DESCRIPTOR.pool.FindMessageTypeByName(type_name).fields)
        except KeyError:
            known = []
        if not at:
            known += sorted(set(_FILE_KEYS) | {"job_files"})
        where = f"{at}.{name}" if at else name
        guesses = closest_key(name, known)
        if guesses:
            return Problem(where, f"unknown field; did you mean {' or '.join(guesses)}?")
        return Problem(where, f"unknown field; expected one of {known}")
    m = _AT.search(text)
    if m:
        path = m.group(1)
        text = text[: m.start()]
    else:
        path = ".".join(_FIELD.findall(text))
        text = text.rstrip(".")
    message = text.rsplit(" field: ", 1)[-1].strip()
    message = re.sub(r"\s*Available Fields\(except extensions\):.*", "", message, flags=re.DOTALL)
    return Problem(path, message)


def request_from_dict(
    doc: Any, message_type: type[R], source: str = "<request>", base_dir: Path | None = None
) -> R:
    """A request message from a parsed document: file references resolved, native shorthands normalized."""
    ps = Problems(source)
    if not isinstance(doc, dict):
        ps.add("", f"a request is a mapping of cluster, state, job, options; got {type(doc).__name__}")
        ps.raise_if_any()
    d = dict(doc)
    state_dir = base_dir
    if isinstance(d.get("state_file"), str):  # a running job's job_file is relative to the state file
        ref = Path(d["state_file"])
        state_dir = (ref if base_dir is None or ref.is_absolute() else base_dir / ref).parent
    for key, part in _FILE_KEYS.items():
        if key not in d:
            continue
        ref = d.pop(key)
        if part in d:
            ps.add(key, f"give {part} or {key}, not both")
            continue
        d[part] = _load_ref(ref, key, base_dir, ps)
    if "job_files" in d:
        refs = d.pop("job_files")
        if not isinstance(refs, list):
            ps.add("job_files", "must be a list of job files")
        else:
            jobs = list(d.get("jobs") or [])
            for i, ref in enumerate(refs):
                jobs.append(_load_ref(ref, f"job_files[{i}]", base_dir, ps))
            d["jobs"] = jobs
    if "cluster" in d:
        d["cluster"] = normalize_cluster(d["cluster"], base_dir, ps)
    if "state" in d:
        d["state"] = normalize_state(d["state"], state_dir, ps)
    if "job" in d:
        d["job"] = normalize_job(d["job"], ps)
    if isinstance(d.get("jobs"), list):
        d["jobs"] = [normalize_job(j, ps, f"jobs[{i}]") for i, j in enumerate(d["jobs"])]
    if isinstance(d.get("shapes"), list):  # CapacityRequest
        d["shapes"] = [normalize_job(j, ps, f"shapes[{i}]") for i, j in enumerate(d["shapes"])]
    if "mapping" in d:
        d["mapping"] = normalize_mapping(d["mapping"])
    ps.raise_if_any()
    msg = message_type()
    try:
        json_format.ParseDict(d, msg)
    except json_format.ParseError as e:
        raise InputError(source, [_parse_error(e)]) from None
    return msg


def _load_ref(ref: Any, key: str, base_dir: Path | None, ps: Problems) -> Any:
    if not isinstance(ref, str):
        ps.add(key, f"must be a file path, got {ref!r}")
        return None
    p = Path(ref)
    if base_dir is not None and not p.is_absolute():
        p = base_dir / p
    try:
        doc = load_document(p)
    except InputError as e:
        for prob in e.problems:
            ps.add(f"{key} ({e.source})" + (f" {prob.path}" if prob.path else ""), prob.message)
        return None
    if key == "cluster_file":  # an nvidia_smi file inside resolves against the cluster file's folder
        doc = normalize_cluster(doc, p.parent, ps)
    if key.startswith("job_file") and _native_serving(doc):  # a serving job file: its message
        doc = serving_message_dict(doc, str(p), ps, key)
    return doc


def _native_serving(doc: Any) -> bool:
    """A serving job in the native file form (``kind: serving``, or a ``serving:`` key whose job names its rules
    `placement`), not already the message's form (``serving.rules``, ``device_kind`` beside ``serving``)."""
    if not is_serving_document(doc):
        return False
    inner = doc.get("serving")
    if not isinstance(inner, dict):
        return True
    return "rules" not in inner and set(doc) <= {"serving", "name", "description", "kind"}


def read_request(path: str | Path, message_type: type[R]) -> R:
    """Read a request file (YAML, or JSON by suffix) into `message_type`; InputError names the file and field."""
    p = Path(path)
    return request_from_dict(load_document(p), message_type, str(path), p.parent)


# ---- writing ------------------------------------------------------------------------------------------------


def message_to_dict(msg: Any) -> dict[str, Any]:
    """A message as plain data in the protobuf JSON mapping, with the proto field names."""
    out: dict[str, Any] = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    return out


def dump_message(msg: Any, fmt: str = "json") -> str:
    """A message as JSON (indented) or YAML text: the protobuf JSON mapping with proto field names, every field
    without presence printed even at its default (``0``, ``[]``), so that a reader finds each key; unset optional
    fields stay absent (no number)."""
    data: dict[str, Any] = json_format.MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    if fmt == "yaml":
        return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=None))
    raise ValueError(f"unknown format {fmt!r}; use json or yaml")


def write_message(msg: Any, dest: str | Path | IO[str] = "-", fmt: str | None = None) -> None:
    """Write a message to a file (format from its suffix: .json, else YAML) or a stream ("-": stdout, JSON)."""
    if isinstance(dest, str | Path) and str(dest) != "-":
        p = Path(dest)
        p.write_text(dump_message(msg, fmt or ("json" if p.suffix == ".json" else "yaml")))
        return
    stream = sys.stdout if isinstance(dest, str | Path) else dest
    stream.write(dump_message(msg, fmt or "json"))


class ConversionCache:
    """Clusters and states converted before, by the digest of their message bytes (a scheduler sends the same
    cluster, and often the same state, again and again). Only clean conversions are kept; least recently used
    first out. The same message gives the same Topology object, so the caches keyed by it (the cost model's
    fabric and plans, `placement.cost.collectives.fabric_for`) carry over from one request to the next."""

    def __init__(self, clusters: int, states: int) -> None:
        self._lock = threading.Lock()
        self._clusters: OrderedDict[bytes, tuple[Topology, ClusterState]] = OrderedDict()
        self._states: OrderedDict[tuple[bytes, bytes], ClusterState] = OrderedDict()
        self._limits = (clusters, states)

    @staticmethod
    def digest(msg: Any) -> bytes:
        return hashlib.blake2b(msg.SerializeToString(deterministic=True), digest_size=20).digest()

    def cluster(self, key: bytes) -> tuple[Topology, ClusterState] | None:
        with self._lock:
            hit = self._clusters.get(key)
            if hit is not None:
                self._clusters.move_to_end(key)
            return hit

    def state(self, key: tuple[bytes, bytes]) -> ClusterState | None:
        with self._lock:
            hit = self._states.get(key)
            if hit is not None:
                self._states.move_to_end(key)
            return hit

    def keep_cluster(self, key: bytes, value: tuple[Topology, ClusterState]) -> None:
        with self._lock:
            self._clusters[key] = value
            while len(self._clusters) > self._limits[0]:
                self._clusters.popitem(last=False)

    def keep_state(self, key: tuple[bytes, bytes], value: ClusterState) -> None:
        with self._lock:
            self._states[key] = value
            while len(self._states) > self._limits[1]:
                self._states.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._clusters.clear()
            self._states.clear()
