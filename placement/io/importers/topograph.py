"""Import NVIDIA topograph cluster models (``switches`` / ``blocks`` YAML) and request payloads as native clusters.

Returns an `ImportedFabric` (`placement.io.importers.fabric`), as `ibnetdiscover` does.

A topograph model (github.com/NVIDIA/topograph ``pkg/models/model.go``, read to learn the format) has
``switches: {NAME: {switches: [child, ...], labels, annotations}}`` and ``blocks: [{switch, nodes:
[hostlist, ...], annotations}]``. A block's nodes hang off its switch; the annotation
``accelerator.topology.test/domain`` names the NVLink domain (NVL72 rack) of the block's nodes, and
``.../sub-domain`` a part of it. As in topograph, leaf switches need no entry of their own, a switch has one
parent, a node is in one block. Levels, bottom up: ``nvl_sub`` and ``nvl`` (when annotated; ``nvlink: true``,
so that NVLS runs across their trays), then the switch
heights ``leaf``, ``spine``, ``core`` (``switch4``... above). A level whose domains do not nest in the level
below (an NVLink domain spanning several leaf switches) is dropped with a warning; a level that repeats the
partition below it (an NVL72 rack on its own leaf switch) is dropped silently, the lower (faster) one kept. A request payload (``{"provider": {"params": {"modelFileName": ...}},
"engine": ...}``) imports the model it names (a bare name is looked up in ``tests/models`` next to the payload,
as topograph's simulator does); a payload that names no model holds no topology and is refused. A NetQ topology
graph (the JSON topograph's ``netq`` provider fetches) is read too: switch tiers become the levels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from placement.errors import InputError, Problem, Problems
from placement.io.hostlist import expand_hostlist
from placement.io.importers.detect import refuse_other_format
from placement.io.importers.fabric import ImportedFabric, fabric_from_levels
from placement.io.text import read_text

__all__ = ["parse_topograph", "read_topograph"]

_ACCEL = "accelerator.topology.test/domain"
_ACCEL_SUB = "accelerator.topology.test/sub-domain"
_SWITCH_NAMES = ("leaf", "spine", "core")


# ------------------------------------------------------------------------------------------------ model


def _str_list(v: Any, path: str, ps: Problems) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str | int) for x in v):
        ps.add(path, f"must be a list of names, got {v!r}")
        return []
    return [str(x) for x in v]


def _model(data: Any, source: str, name: str, level_names: Sequence[str] | None) -> ImportedFabric:
    ps = Problems(source)
    if not isinstance(data, dict) or "blocks" not in data:
        got = type(data).__name__ if not isinstance(data, dict) else f"keys {sorted(data)}"
        raise InputError(
            source, [Problem("", f"a topograph model is a mapping with `switches` and `blocks`, got {got}")]
        )
    children, parent = _switch_tree(data, source, ps)
    blocks = _blocks(data, children, source, ps)
    ps.raise_if_any()
    if not blocks.hosts:
        raise InputError(source, [Problem("blocks", "the model declares no nodes")])
    height = _switch_heights(children, source)
    top = max(height.values(), default=0)
    candidates: list[tuple[str, str, Mapping[str, str]]] = []
    if blocks.accel_sub:
        candidates.append(("nvl_sub", "accel", blocks.accel_sub))
    if blocks.accel:
        candidates.append(("nvl", "accel", blocks.accel))
    for lv in range(1, top + 1):
        col: dict[str, str] = {}
        for host in blocks.hosts:
            s = blocks.host_switch[host]
            if s not in height:
                col[host] = s  # a block without a switch stands for itself
                continue
            while height[s] < lv and s in parent:
                s = parent[s]
            col[host] = s
        label = _SWITCH_NAMES[lv - 1] if top <= len(_SWITCH_NAMES) else f"switch{lv}"
        candidates.append((label, "switch", col))
    warnings: list[str] = []
    return fabric_from_levels(name, blocks.hosts, candidates, warnings, level_names, source)


def _switch_tree(
    data: dict[str, Any], source: str, ps: Problems
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The model's switches: children per switch (undeclared leaf switches included) and each one's parent."""
    raw_sw = data.get("switches") or {}
    if not isinstance(raw_sw, dict):
        raise InputError(source, [Problem("switches", f"must be a mapping of switch names, got {raw_sw!r}")])
    children: dict[str, list[str]] = {}
    for sname, body in raw_sw.items():
        if not isinstance(body, dict):
            ps.add(
                f"switches.{sname}",
                "has an empty definition" if body is None else f"must be a mapping, got {body!r}",
            )
            continue
        children[str(sname)] = _str_list(body.get("switches"), f"switches.{sname}.switches", ps)
    parent: dict[str, str] = {}
    for sname, kids in children.items():
        for i, kid in enumerate(kids):
            if kid in parent:
                ps.add(
                    f"switches.{sname}.switches[{i}]",
                    f"switch {kid!r} has two parents, {parent[kid]!r} and {sname!r}; a switch has one parent",
                )
            parent[kid] = sname
    for kid in list(parent):
        children.setdefault(kid, [])  # leaf switches may be left undeclared, as in topograph
    return children, parent


@dataclass
class _Blocks:
    """The model's hosts in block order, each one's switch (``block<i>`` for a block without one), and its
    NVLink domain and sub-domain from the block's annotations."""

    hosts: list[str] = field(default_factory=list)
    host_switch: dict[str, str] = field(default_factory=dict)
    accel: dict[str, str] = field(default_factory=dict)
    accel_sub: dict[str, str] = field(default_factory=dict)


def _blocks(data: dict[str, Any], children: dict[str, list[str]], source: str, ps: Problems) -> _Blocks:
    """Each block's nodes (hostlists expanded), on a known switch, each node in one block."""
    out = _Blocks()
    blocks = data.get("blocks") or []
    if not isinstance(blocks, list):
        raise InputError(source, [Problem("blocks", f"must be a list, got {blocks!r}")])
    owner: dict[str, int] = {}
    for bi, block in enumerate(blocks):
        bp = f"blocks[{bi}]"
        if not isinstance(block, dict):
            ps.add(bp, f"must be a mapping, got {block!r}")
            continue
        nodes: list[str] = []
        for j, expr in enumerate(_str_list(block.get("nodes"), f"{bp}.nodes", ps)):
            try:
                nodes.extend(expand_hostlist(expr, source=source, path=f"{bp}.nodes[{j}]"))
            except InputError as e:
                ps.extend(e.problems)
        if not nodes:
            ps.add(f"{bp}.nodes", "must declare at least one node")
        sw = block.get("switch")
        if sw is not None and str(sw) not in children:
            ps.add(f"{bp}.switch", f"unknown switch {sw!r}; switches: {', '.join(sorted(children)[:6])}")
            sw = None
        ann = block.get("annotations") or {}
        for node in nodes:
            if node in owner:
                ps.add(
                    f"{bp}.nodes", f"node {node!r} is also in blocks[{owner[node]}]; a node is in one block"
                )
                continue
            owner[node] = bi
            out.hosts.append(node)
            out.host_switch[node] = str(sw) if sw is not None else f"block{bi}"
            if isinstance(ann, dict) and ann.get(_ACCEL):
                out.accel[node] = str(ann[_ACCEL])
            if isinstance(ann, dict) and ann.get(_ACCEL_SUB):
                out.accel_sub[node] = str(ann[_ACCEL_SUB])
    return out


def _switch_heights(children: dict[str, list[str]], source: str) -> dict[str, int]:
    """Each switch's height (leaf switches 1); InputError naming a cycle."""
    height: dict[str, int] = {}

    def h_of(s: str, stack: tuple[str, ...] = ()) -> int:
        if s in stack:
            raise InputError(
                source, [Problem(f"switches.{s}", "switches form a cycle: " + " -> ".join([*stack, s]))]
            )
        if s not in height:
            height[s] = 1 + max((h_of(c, (*stack, s)) for c in children.get(s, [])), default=0)
        return height[s]

    for s in children:
        h_of(s)
    return height


def parse_topograph(
    text: str,
    source: str = "<topograph>",
    *,
    level_names: Sequence[str] | None = None,
    name: str | None = None,
    base_dir: Path | None = None,
) -> ImportedFabric:
    """Read a topograph model (YAML) or request payload (JSON) into an `ImportedFabric`."""
    if not text.strip():
        raise InputError(source, [Problem("", "the file is empty; expected a topograph model or payload")])
    refuse_other_format(text, source, ("topograph-model", "topograph-payload", "netq"))
    stem = name or Path(source).stem
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(
            source, [Problem(where, f"is not valid YAML/JSON: {getattr(e, 'problem', e)}")]
        ) from None
    if isinstance(data, dict) and "provider" in data:
        return _payload(data, source, stem, level_names, base_dir)
    if (
        isinstance(data, list)
        and data
        and isinstance(data[0], dict)
        and "nodes" in data[0]
        and "links" in data[0]
    ):
        return _netq(data, source, stem, level_names)
    if isinstance(data, list) and data and isinstance(data[0], dict) and "DomainUUID" in data[0]:
        raise InputError(
            source,
            [
                Problem(
                    "",
                    "this is NetQ's compute-node list (NVLink domain per GPU tray); it holds no "
                    "switches: import the NetQ topology graph (topologyGraph.json) instead",
                )
            ],
        )
    return _model(data, source, stem, level_names)


def _find(parent: dict[str, str], x: str) -> str:
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def _netq(data: list[Any], source: str, name: str, level_names: Sequence[str] | None) -> ImportedFabric:
    """A NetQ topology graph (``[{nodes: [{compounded_nodes: [{id, name, tier}]}], links: [{id: "a-*-b"}]}]``, as
    topograph's ``pkg/providers/netq/netq.go`` reads it): switches have tier >= 1, hosts tier < 1; a host's domain
    at tier L is what it reaches over switches of tier <= L."""
    if len(data) != 1:
        raise InputError(source, [Problem("", f"a NetQ topology graph has one entry, got {len(data)}")])
    tier: dict[str, int] = {}
    label: dict[str, str] = {}
    for group in _dict(data[0]).get("nodes") or []:
        for n in _dict(group).get("compounded_nodes") or []:
            n = _dict(n)
            if "id" in n and isinstance(n.get("tier"), int):
                tier[str(n["id"])] = n["tier"]
                label[str(n["id"])] = str(n.get("name") or n["id"])
    edges: list[tuple[str, str]] = []
    for link in _dict(data[0]).get("links") or []:
        a, sep, b = str(_dict(link).get("id", "")).partition("-*-")
        if sep and a in tier and b in tier:
            edges.append((a, b))
    hosts = sorted((i for i, t in tier.items() if t < 1), key=lambda i: label[i])
    top = max((t for t in tier.values() if t >= 1), default=0)
    if not hosts or not top:
        raise InputError(
            source,
            [
                Problem(
                    "nodes",
                    f"the graph has {len(hosts)} host(s) (tier < 1) and no switch "
                    "tier >= 1 above them; nothing to import",
                )
            ],
        )
    candidates: list[tuple[str, str, Mapping[str, str]]] = []
    for lv in range(1, top + 1):
        parent = {i: i for i in tier}
        find = partial(_find, parent)
        for a, b in edges:
            if (
                (tier[a] < 1 or tier[a] <= lv)
                and (tier[b] < 1 or tier[b] <= lv)
                and not (tier[a] < 1 and tier[b] < 1)
            ):
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
        names: dict[str, list[str]] = {}
        for i, t in tier.items():
            if 1 <= t <= lv:
                names.setdefault(find(i), []).append(i)
        col: dict[str, str] = {}
        for h in hosts:
            sws = names.get(find(h), [])
            best = max((tier[s] for s in sws), default=0)
            tops = sorted(label[s] for s in sws if tier[s] == best)
            col[label[h]] = (
                (tops[0] if len(tops) == 1 else f"{tops[0]}+{len(tops) - 1}") if tops else label[h]
            )
        candidates.append(
            (_SWITCH_NAMES[lv - 1] if top <= len(_SWITCH_NAMES) else f"switch{lv}", "switch", col)
        )
    return fabric_from_levels(name, [label[h] for h in hosts], candidates, [], level_names, source)


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _payload(
    data: dict[str, Any], source: str, name: str, level_names: Sequence[str] | None, base_dir: Path | None
) -> ImportedFabric:
    prov = _dict(data.get("provider"))
    params = _dict(prov.get("params"))
    model = params.get("modelFileName")
    pname = prov.get("name", "?")
    if not model:
        raise InputError(
            source,
            [
                Problem(
                    "provider.params.modelFileName",
                    (
                        f"this topograph payload (provider {pname!r}) names no model file: it asks the provider for the "
                        "topology at run time and holds none itself; import the model or the provider's output instead"
                    ),
                )
            ],
        )
    base = base_dir or Path(source).parent
    rel = Path(str(model))
    tries = (
        [rel]
        if rel.is_absolute()
        else (
            [base.parent / "models" / rel, base / rel]
            if len(rel.parts) == 1
            else [base / rel, base.parent.parent / rel]
        )
    )
    found = next((p for p in tries if p.is_file()), None)
    if found is None:
        raise InputError(
            source,
            [
                Problem(
                    "provider.params.modelFileName",
                    f"model file {str(model)!r} not found (looked at {', '.join(str(p) for p in tries)})",
                )
            ],
        )
    fab = read_topograph(found, level_names=level_names, name=name)
    ep = _dict(_dict(data.get("engine")).get("params"))
    if ep.get("plugin") or ep.get("blockSizes"):
        fab.warnings.append(
            f"engine parameters ({', '.join(sorted(k for k in ep if k in ('plugin', 'blockSizes')))}) "
            "shape topograph's Slurm output, not the fabric; they are not used"
        )
    fab.warnings.insert(0, f"payload for provider {pname!r}: imported its model {found}")
    return fab


def read_topograph(
    path: str | Path, *, level_names: Sequence[str] | None = None, name: str | None = None
) -> ImportedFabric:
    """Read a topograph model or payload file."""
    p = Path(path)
    return parse_topograph(read_text(p), str(path), level_names=level_names, name=name, base_dir=p.parent)
