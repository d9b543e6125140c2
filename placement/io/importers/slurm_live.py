"""Live cluster and state from a running Slurm: parse `scontrol show node` (JSON or text), `sinfo --json`,
`squeue --json` and `scontrol show topology` outputs into a native cluster dict plus a state dict.

Owns reading those command outputs only; the node tree comes from `placement.io.importers.slurm` (topology.conf/yaml or the
`scontrol show topology` lines rewritten as topology.conf), and `placement.io.importers.slurm_live_state` turns the parsed records into the cluster and state dicts.

Formats, as Slurm writes them (src/api/node_info.c, src/common/gres.c, src/slurmctld/gres_ctld.c, the
openapi/v0.0.38 plugin of 22.05 and the data_parser v0.0.39+ plugins of 23.02 and later):

* node text (``scontrol -d show node``): records starting ``NodeName=``, ``Key=Value`` tokens; ``Gres=gpu:h100:8``,
  ``GresUsed=gpu:h100:3(IDX:0-2)`` (indices only with ``-d`` and only when gres.conf gives ``Type=`` or ``Cores=``;
  else a bare count ``gpu:3``), ``State=MIXED+DRAIN``, ``Partitions=a,b``.
* node JSON (``scontrol --json show node`` from 23.02, ``sinfo --json``): ``{"nodes": [{"name", "gres",
  "gres_used", "state", "state_flags"?, "partitions"}]}``; ``state`` is a string (22.05, lower case, flags in
  ``state_flags``) or a list of upper-case words (23.02+).
* jobs (``squeue --json``): ``{"jobs": [{"job_id", "job_state", "nodes", "gres_detail", "job_resources"}]}``;
  ``gres_detail[i]`` (``gpu:h100:3(IDX:0-2)``) belongs to the i-th node of the job, named by
  ``job_resources.allocated_nodes[i].nodename`` (22.05) or ``job_resources.nodes.allocation[i].name`` (23.02+).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from placement.errors import InputError, Problem
from placement.io.hostlist import expand_hostlist
from placement.io.importers.detect import refuse_other_format, sniff
from placement.io.importers.slurm import parse_topology_conf

__all__ = [
    "FAILED_STATES",
    "HOLDING_STATES",
    "GresEntry",
    "LiveJob",
    "LiveNode",
    "parse_gres",
    "parse_index_list",
    "parse_jobs",
    "parse_nodes",
    "topology_conf_from_scontrol",
    "topology_from_scontrol",
]

FAILED_STATES = frozenset(
    {
        "DOWN",
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "FAIL",
        "FAILING",
        "INVAL",
        "INVALID",
        "INVALID_REG",
        "NOT_RESPONDING",
        "FUTURE",
        "NO_RESPOND",
    }
)
"""Node state words that make every GPU of the node failed (the node takes no new job)."""

HOLDING_STATES = frozenset(
    {"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED", "RESIZING", "SIGNALING", "STAGE_OUT"}
)
"""Job state words under which a job still holds its GPUs."""

_REST_OF_LINE = frozenset({"OS", "Reason", "Comment", "Extra", "AvailableFeatures", "ActiveFeatures"})
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")
_STATE_MARKS = "*~#!%$@^-"  # sinfo's one-character suffixes (not responding, powered down, ...)


@dataclass(frozen=True)
class GresEntry:
    """One comma-separated entry of a gres string: ``name[:type][:count][(IDX:list|CNT:n|S:sockets)]``."""

    name: str
    type: str | None
    count: int
    indices: frozenset[int] | None  # None: the entry names no indices


@dataclass(frozen=True)
class LiveNode:
    name: str
    states: tuple[str, ...]  # upper-case words: ("MIXED", "DRAIN")
    gres: tuple[GresEntry, ...]
    gres_used: tuple[GresEntry, ...]
    partitions: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class LiveJob:
    job_id: str
    states: tuple[str, ...]
    gres: Mapping[str, tuple[GresEntry, ...]] = field(default_factory=dict)  # node name -> its gres_detail


# ---- small syntax -------------------------------------------------------------------------------------------


def parse_index_list(text: str) -> frozenset[int]:
    """``0-2,5`` -> {0, 1, 2, 5}; ``N/A`` or empty -> {}. Raises ValueError on anything else."""
    text = text.strip()
    if text in ("", "N/A"):
        return frozenset()
    out: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        a = int(low)
        b = int(high) if dash else a
        if b < a or a < 0:
            raise ValueError(f"range {part!r} runs backwards")
        out.update(range(a, b + 1))
    return frozenset(out)


def _split_top(text: str) -> list[str]:
    """Split at commas outside parentheses (``gpu:4(IDX:0-1,4-5),nic:1`` has two entries)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_gres(text: str | None, *, source: str = "gres", path: str = "") -> tuple[GresEntry, ...]:
    """Parse a node's ``Gres``/``GresUsed`` or a job's ``gres_detail`` string; ``(null)``/``N/A`` is empty."""
    if text is None or text.strip() in ("", "(null)", "N/A"):
        return ()
    entries: list[GresEntry] = []
    for part in _split_top(text):
        # 22.05 writes an untyped gres with topology as gpu:(null):3(IDX:0-2)
        norm = part.replace(":(null)", ":")
        head, _, paren = norm.partition("(")
        fields = head.split(":")
        name = fields[0]
        gtype: str | None = None
        count = 1
        rest = fields[1:]
        if rest and rest[-1].isdigit():
            count = int(rest.pop())
        if rest:
            gtype = ":".join(rest)
            if gtype == "(null)" or gtype == "":
                gtype = None
        indices: frozenset[int] | None = None
        detail = paren.rstrip(")")
        try:
            if detail.startswith("IDX:"):
                indices = parse_index_list(detail[4:])
            elif detail.startswith("CNT:"):
                count = int(detail[4:])
        except ValueError:
            raise InputError(
                source,
                [
                    Problem(
                        path,
                        f'gres "{part}": "{detail}" is not a list of indices like '
                        "IDX:0-2,5 or a count like CNT:3",
                    )
                ],
            ) from None
        if paren and not detail.startswith(("IDX:", "CNT:", "S:")):
            raise InputError(
                source,
                [
                    Problem(
                        path,
                        f'gres "{part}": unknown detail "({detail})"; Slurm writes '
                        "(IDX:...), (CNT:n) or (S:sockets)",
                    )
                ],
            )
        if not name:
            raise InputError(source, [Problem(path, f'gres "{part}" has no name')])
        entries.append(GresEntry(name, gtype, count, indices))
    return tuple(entries)


def _state_words(*values: Any) -> tuple[str, ...]:
    words: list[str] = []
    for value in values:
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, str):
                continue
            for word in item.replace("+", " ").split():
                word = word.upper()
                if word and word[-1] in _STATE_MARKS:
                    if word.endswith("*"):
                        words.append("NOT_RESPONDING")
                    word = word.rstrip(_STATE_MARKS)
                if word:
                    words.append(word)
    return tuple(dict.fromkeys(words))


# ---- nodes --------------------------------------------------------------------------------------------------


def parse_nodes(text: str, source: str = "scontrol show node") -> list[LiveNode]:
    """Nodes from ``scontrol -d show node`` text, or the JSON of ``scontrol --json show node`` / ``sinfo --json``."""
    stripped = text.lstrip()
    if not stripped:
        raise InputError(source, [Problem("", "is empty: expected `scontrol -d show node` output")])
    if sniff(text) in (
        "slurm-conf",
        "slurm-yaml",
    ):  # `import slurm` would not read `scontrol show topology` lines
        raise InputError(
            source,
            [
                Problem(
                    "",
                    "this is a Slurm topology (topology.conf, topology.yaml or `scontrol "
                    "show topology` output), not `scontrol -d show node` output; give it "
                    "with --topology-file",
                )
            ],
        )
    refuse_other_format(
        text, source, "slurm-nodes"
    )  # e.g. an ibnetdiscover dump: one line, the right command
    if stripped.startswith("{"):
        return _nodes_json(_load_json(text, source), source)
    return _nodes_text(text, source)


def _load_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(
            source, [Problem(f"line {e.lineno}, column {e.colno}", f"is not JSON: {e.msg}")]
        ) from None


def _nodes_json(doc: Any, source: str) -> list[LiveNode]:
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise InputError(
            source,
            [
                Problem(
                    "nodes",
                    'is missing: expected {"nodes": [...]} from scontrol --json show node or sinfo --json',
                )
            ],
        )
    out: list[LiveNode] = []
    for i, node in enumerate(doc["nodes"]):
        path = f"nodes[{i}]"
        if not isinstance(node, dict) or not isinstance(node.get("name"), str) or not node["name"]:
            raise InputError(source, [Problem(f"{path}.name", "must be the node name (a non-empty string)")])
        parts = node.get("partitions") or []
        if isinstance(parts, str):
            parts = parts.split(",")
        out.append(
            LiveNode(
                name=node["name"],
                states=_state_words(node.get("state"), node.get("state_flags")),
                gres=parse_gres(node.get("gres"), source=source, path=f"{path}.gres"),
                gres_used=parse_gres(node.get("gres_used"), source=source, path=f"{path}.gres_used"),
                partitions=tuple(str(p) for p in parts if p),
                reason=str(node.get("reason") or ""),
            )
        )
    return out


def _record_fields(lines: Sequence[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in lines:
        matches = list(_KEY.finditer(line))
        for k, m in enumerate(matches):
            key = m.group(1)
            if key in _REST_OF_LINE:
                fields[key] = line[m.end() :].strip()
                break
            end = matches[k + 1].start() if k + 1 < len(matches) else len(line)
            fields[key] = line[m.end() : end].strip()
    return fields


def _nodes_text(text: str, source: str) -> list[LiveNode]:
    records: list[tuple[int, list[str]]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip().startswith("NodeName="):
            records.append((lineno, [line]))
        elif line.strip() and records:
            records[-1][1].append(line)
        elif line.strip():
            raise InputError(
                source,
                [
                    Problem(
                        f"line {lineno}",
                        f'"{line.strip()[:60]}" comes before the first '
                        "NodeName=: expected `scontrol -d show node` output",
                    )
                ],
            )
    out: list[LiveNode] = []
    for lineno, lines in records:
        f = _record_fields(lines)
        where = f"line {lineno} (NodeName={f.get('NodeName', '?')})"
        if "State" not in f:
            raise InputError(
                source, [Problem(where, "has no State=: expected `scontrol -d show node` output")]
            )
        used = f.get("GresUsed")
        out.append(
            LiveNode(
                name=f["NodeName"],
                states=_state_words(f["State"]),
                gres=parse_gres(f.get("Gres"), source=source, path=f"{where} Gres"),
                gres_used=parse_gres(used, source=source, path=f"{where} GresUsed"),
                partitions=tuple(p for p in f.get("Partitions", "").split(",") if p and p != "(null)"),
                reason=f.get("Reason", ""),
            )
        )
    return out


# ---- jobs ---------------------------------------------------------------------------------------------------


def parse_jobs(text: str, source: str = "squeue --json") -> list[LiveJob]:
    """Jobs from ``squeue --json`` (any openapi/data_parser version): id, state words, GPUs per node."""
    doc = _load_json(text, source)
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise InputError(source, [Problem("jobs", 'is missing: expected {"jobs": [...]} from squeue --json')])
    out: list[LiveJob] = []
    for i, job in enumerate(doc["jobs"]):
        path = f"jobs[{i}]"
        if not isinstance(job, dict):
            raise InputError(source, [Problem(path, "must be an object")])
        jid = _number(job.get("job_id"))
        if jid is None:
            raise InputError(
                source, [Problem(f"{path}.job_id", f"must be the job id, got {job.get('job_id')!r}")]
            )
        array_job, array_task = _number(job.get("array_job_id")), _number(job.get("array_task_id"))
        name = f"{array_job}_{array_task}" if array_job and array_task is not None else str(jid)
        details = job.get("gres_detail") or []
        if not isinstance(details, list):
            raise InputError(
                source, [Problem(f"{path}.gres_detail", "must be a list of strings, one per node")]
            )
        by_node: dict[str, tuple[GresEntry, ...]] = {}
        if details:
            nodes = _job_nodes(job, source, path)
            if len(nodes) != len(details):
                raise InputError(
                    source,
                    [
                        Problem(
                            f"{path}.gres_detail",
                            f"has {len(details)} entries but the job runs on {len(nodes)} node(s) {nodes}",
                        )
                    ],
                )
            for k, (node, detail) in enumerate(zip(nodes, details, strict=True)):
                by_node[node] = parse_gres(str(detail), source=source, path=f"{path}.gres_detail[{k}]")
        out.append(LiveJob(f"slurm-{name}", _state_words(job.get("job_state")), by_node))
    return out


def _number(value: Any) -> int | None:
    """A plain number, or data_parser's ``{"set": true, "number": N}`` (None when unset)."""
    if isinstance(value, dict):
        return _number(value.get("number")) if value.get("set", True) else None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _job_nodes(job: Mapping[str, Any], source: str, path: str) -> list[str]:
    res = job.get("job_resources")
    if isinstance(res, dict):
        alloc = res.get("allocated_nodes")  # 22.05 (openapi v0.0.38)
        if isinstance(alloc, list) and alloc and all(isinstance(a, dict) and "nodename" in a for a in alloc):
            return [str(a["nodename"]) for a in alloc]
        nodes = res.get("nodes")  # 23.02+ data_parser: {"count", "list", "allocation": [{"name"}]}
        if isinstance(nodes, dict) and isinstance(nodes.get("allocation"), list) and nodes["allocation"]:
            return [str(a.get("name")) for a in nodes["allocation"] if isinstance(a, dict)]
        if isinstance(nodes, dict) and isinstance(nodes.get("list"), str):
            return expand_hostlist(nodes["list"], source=source, path=f"{path}.job_resources.nodes.list")
        if isinstance(nodes, str) and nodes:
            return expand_hostlist(nodes, source=source, path=f"{path}.job_resources.nodes")
    nodes = job.get("nodes")
    if isinstance(nodes, str) and nodes:
        return expand_hostlist(nodes, source=source, path=f"{path}.nodes")
    raise InputError(source, [Problem(f"{path}.nodes", "names no nodes, but the job lists gres_detail")])


# ---- topology -----------------------------------------------------------------------------------------------


def topology_conf_from_scontrol(text: str) -> str | None:
    """Rewrite ``scontrol show topology`` lines as topology.conf lines; None when Slurm has no topology.

    tree: ``SwitchName=s Level=L LinkSpeed=1 Nodes=... Switches=...`` keeps Nodes= only on leaf switches (Slurm
    also lists every node below an upper switch). block: base ``BlockName=b BlockIndex=i Nodes=... BlockSize=n``
    lines are kept, ``AggregatedBlock=`` lines give the larger ``BlockSizes=``. ring: ``RingName= Nodes=``.
    """
    out: list[str] = []
    block_sizes: list[int] = []
    base_size: int | None = None
    for line in text.splitlines():
        f = _record_fields([line])
        if "SwitchName" in f:
            parts = [f"SwitchName={f['SwitchName']}"]
            if f.get("Switches"):
                parts.append(f"Switches={f['Switches']}")
            elif f.get("Nodes"):
                parts.append(f"Nodes={f['Nodes']}")
            out.append(" ".join(parts))
        elif "BlockName" in f:
            out.append(f"BlockName={f['BlockName']} Nodes={f.get('Nodes', '')}")
            if f.get("BlockSize", "").isdigit() and base_size is None:
                base_size = int(f["BlockSize"])
        elif "AggregatedBlock" in f:
            if f.get("BlockSize", "").isdigit():
                block_sizes.append(int(f["BlockSize"]))
        elif "RingName" in f:
            out.append(f"RingName={f['RingName']} Nodes={f.get('Nodes', '')}")
    if not out:
        return None
    if base_size is not None:
        sizes = sorted({base_size, *block_sizes})
        out.append("BlockSizes=" + ",".join(str(s) for s in sizes))
    return "\n".join(out) + "\n"


def topology_from_scontrol(
    text: str,
    source: str,
    *,
    level_names: Sequence[str] | None = None,
    topology: str | None = None,
    name: str = "slurm",
) -> tuple[dict[str, Any], list[str]] | None:
    conf = topology_conf_from_scontrol(text)
    if conf is None:
        return None
    return parse_topology_conf(conf, source, level_names=level_names, topology=topology, name=name)
