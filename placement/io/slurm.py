"""Import Slurm topology descriptions (topology.conf tree/block/ring, topology.yaml) as native cluster dicts.

Owns reading Slurm's files only; `placement.io.native` validates and loads the dict these functions return.

Every parser returns ``(cluster, warnings)``: ``cluster`` is the explicit-hosts native dict (``name``,
``levels`` bottom-up starting with ``{"name": "node"}``, ``hosts`` with a ``domains`` map covering every
level above ``node``); ``warnings`` are plain sentences about things that were imported but deserve a
look. Tier bandwidths are never invented: the levels carry names only. Hosts keep the order in which
the file first names them. Bad input raises `InputError` listing every problem with its
``line L, column C`` (topology.conf) or field path and line (topology.yaml).

topology.conf syntax follows Slurm's config parser: keys are case-insensitive, ``#`` starts a comment
(``\\#`` is a literal ``#``), a trailing ``\\`` joins the next line (directly, so a hostlist may be split),
spaces around ``=`` and ``"quoted"`` values are accepted, CRLF and a BOM are tolerated. Unknown keys and
``Include`` lines are errors.

How Slurm's plugins map onto levels:

* **tree** (``SwitchName= Switches= Nodes= [LinkSpeed=]``): a switch's level is its height. Switches with
  ``Nodes=`` are height 1 (``switch1``), a switch is one above its highest child (``switch2``, ...), like
  Slurm's own ``level``. ``level_names`` renames ``switch1``, ``switch2``, ... bottom-up. A switch whose
  parent sits more than one level higher (or a top switch lower than the tallest one) stands in for itself
  at the skipped levels, so its hosts share nothing more there; a warning says so. ``LinkSpeed=`` is
  read and ignored (Slurm does not use it either). Stricter than Slurm, which only warns or keeps the
  last parent: a node under two leaf switches, a switch under two parents, a switch with both or neither
  of ``Nodes=``/``Switches=`` are errors, since the native model is a strict tree.
* **block** (``BlockName= Nodes=`` plus ``BlockSizes=``), following ``topology.conf(5)`` and Slurm's
  ``block_record.c``: the first BlockSizes entry is the *planning base block size*; every block must
  have *at least* that many nodes (fewer is an error; more is imported whole, with a warning, since
  Slurm plans with the base size). Each later entry must be the base size times a power of two, and
  strictly increasing (``8,16,32``; the man page's ``30,120`` is 30 x 4). Defined blocks are the level
  ``block``; an entry that is ``k`` times the base size is the level ``block_xk``, whose domains are
  runs of ``k`` consecutive blocks in file order (Slurm pairs contiguous blocks the same way), named
  like Slurm names aggregated blocks: the compressed hostlist of the member block names, e.g.
  ``rack[11-12]``. As in Slurm, levels stop at the first size that spans all blocks (larger entries
  are dropped with a warning), and without ``BlockSizes=`` the base size is the first block's node
  count and the aggregate levels are Slurm's default x2, x4, x8, x16. A trailing group with fewer
  than ``k`` blocks is still a domain (warning), so every host has a domain on every level.
* **ring** (``RingName= Nodes=``): each ring is a domain of the level ``ring``; the position of a node
  in its ring is kept only as host order. Rings longer than Slurm's 16 nodes are imported with a warning.

A file mixing kinds (e.g. SwitchName= and BlockName= lines, as some generators write) needs
``topology="tree"``/``"block"``/``"ring"`` to pick one; the other lines are ignored. For topology.yaml,
``topology=`` names an entry, else the first ``cluster_default: true`` one is used (or the only one); only
the chosen entry is checked in depth, and a ``flat`` entry is an error since it lists no nodes.

If the top level has several domains (several top switches, several blocks or rings without a common
aggregate), a level ``cluster`` with the single domain ``cluster`` is added on top. ``level_names``
covers the levels read from the file, not that added one.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from placement.errors import InputError, Problem, Problems
from placement.io.detect import refuse_other_format
from placement.io.hostlist import compress_hostlist, expand_hostlist
from placement.io.levels import check_level_names

__all__ = ["parse_topology_conf", "parse_topology_yaml", "read_slurm"]

Result = tuple[dict[str, Any], list[str]]

_KINDS = ("tree", "block", "ring")
_RING_MAX = 16
_MAX_BLOCK_LEVEL = 15  # Slurm: log2(size / base) <= 15
_DEFAULT_FACTORS = (1, 2, 4, 8, 16)  # Slurm without BlockSizes=: bit_nset(block_levels, 0, 4)
_SUFFIXES = (".conf", ".yaml", ".yml", ".json", ".txt")


# ---------------------------------------------------------------------------------------------------------
# Format-neutral definitions: what a topology.conf line or a topology.yaml entry says.


@dataclass(frozen=True)
class _Value:
    text: str
    where: str


@dataclass
class _Group:
    """One switch, block or ring definition."""

    name: str
    where: str
    nodes: _Value | None = None
    switches: _Value | None = None


@dataclass(frozen=True)
class _Style:
    """How messages name keys, per input format."""

    nodes: str
    switches: str
    define_switch: str  # format with name=

    @staticmethod
    def conf() -> _Style:
        return _Style("Nodes=", "Switches=", 'a "SwitchName={name} ..." line')

    @staticmethod
    def yaml() -> _Style:
        return _Style("nodes", "children", 'a "- switch: {name}" entry')


@dataclass
class _Layout:
    """Levels above "node" (default names, bottom-up) and every host's domain on each of them."""

    levels: list[str]
    hosts: list[tuple[str, list[str]]]
    notes: list[Callable[[list[str]], str]] = field(default_factory=list)
    roots_note: Callable[[list[str]], str] | None = None


# ---------------------------------------------------------------------------------------------------------
# Public API


def parse_topology_conf(
    text: str,
    source: str,
    *,
    level_names: Sequence[str] | None = None,
    topology: str | None = None,
    name: str | None = None,
) -> Result:
    """Read a Slurm ``topology.conf`` (tree, block or ring plugin) into ``(cluster, warnings)``.

    `source` names the input in errors; `name` is the cluster name (default: the file name without its
    suffix). `topology` picks the plugin (``"tree"``, ``"block"``, ``"ring"``) when a file holds several.
    """
    refuse_other_format(text, source, ("slurm-conf", "slurm-yaml"))  # e.g. an ibnetdiscover dump: one line
    problems = Problems(source)
    warnings: list[str] = []
    statements = _conf_statements(text, problems)

    groups: dict[str, list[_Group]] = {kind: [] for kind in _KINDS}
    first_line: dict[str, int] = {}
    sizes: list[_Value] = []
    for line, stated, group, size in statements:
        first_line.setdefault(stated, line)
        if group is not None:
            groups[stated].append(group)
        if size is not None:
            sizes.append(size)

    kind = _pick_kind(topology, first_line, problems, warnings)
    layout: _Layout | None = None
    if kind == "tree":
        layout = _build_tree(groups["tree"], _Style.conf(), problems)
    elif kind == "block":
        if len(sizes) > 1:
            for extra in sizes[1:]:
                problems.add(extra.where, f'BlockSizes= is given again (first at {sizes[0].where}); '
                                          "give it once")
        size_entries = _conf_block_sizes(sizes[0], problems) if sizes else None
        layout = _build_blocks(groups["block"], size_entries, "Nodes=", problems, warnings,
                               sizes_ok=not sizes or size_entries is not None)
    elif kind == "ring":
        layout = _build_rings(groups["ring"], "Nodes=", problems, warnings)
    return _finish(layout, name or _stem(source), level_names, problems, warnings)


def parse_topology_yaml(
    text: str,
    source: str,
    *,
    topology: str | None = None,
    level_names: Sequence[str] | None = None,
    name: str | None = None,
) -> Result:
    """Read a Slurm ``topology.yaml`` into ``(cluster, warnings)``.

    Picks the entry named `topology`, else the first with ``cluster_default: true`` (or the only entry).
    `name` is the cluster name (default: the chosen topology's name).
    """
    refuse_other_format(text, source, ("slurm-yaml", "slurm-conf"))
    problems = Problems(source)
    warnings: list[str] = []
    doc = _YamlDoc.load(text, problems)
    if doc is None:
        problems.raise_if_any()
        raise AssertionError("unreachable")  # pragma: no cover
    entry = _yaml_pick(doc, topology, problems)
    layout: _Layout | None = None
    chosen = ""
    if entry is not None:
        index, chosen, kind = entry
        body = doc.data[index][kind]
        path: tuple[str | int, ...] = (index, kind)
        if kind == "tree":
            switches = _yaml_tree(doc, body, path, problems)
            layout = _build_tree(switches, _Style.yaml(), problems)
        elif kind == "block":
            blocks, size_entries, sizes_ok = _yaml_block(doc, body, path, problems)
            layout = _build_blocks(blocks, size_entries, "nodes", problems, warnings, sizes_ok=sizes_ok)
        elif kind == "flat":
            problems.add(doc.where((index, "flat")), f'topology "{chosen}" is flat: it lists no switches, '
                                                     "blocks or nodes, so there is nothing to import; "
                                                     "pick a tree or block topology with topology=")
        else:
            problems.add(doc.where((index, kind)), f'topology "{chosen}" uses the {kind} plugin, which this '
                                                   "importer does not read; pick a tree or block topology")
    return _finish(layout, name or chosen or _stem(source), level_names, problems, warnings)


def read_slurm(
    path: str | os.PathLike[str],
    *,
    topology: str | None = None,
    level_names: Sequence[str] | None = None,
    name: str | None = None,
) -> Result:
    """Read a topology.conf or topology.yaml file, chosen by suffix (.yaml, .yml, .conf) or by content."""
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise InputError(source, [Problem("", f"cannot read the file: {err.strerror or err}")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise InputError(source, [Problem(f"line {line}", "is not UTF-8 text")]) from None
    suffix = Path(path).suffix.lower()
    if suffix in (".yaml", ".yml") or (suffix != ".conf" and _looks_like_yaml(text)):
        return parse_topology_yaml(text, source, topology=topology, level_names=level_names, name=name)
    return parse_topology_conf(text, source, topology=topology, level_names=level_names, name=name)


# ---------------------------------------------------------------------------------------------------------
# topology.conf: lines, tokens, statements


@dataclass(frozen=True)
class _Token:
    line: int
    key: str
    value: str
    key_where: str
    value_where: str


_KEY_CHARS = re.compile(r"[A-Za-z0-9_]")
_LOOKS_LIKE_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*=")
_FIRST_KEYS = {"switchname": "tree", "blockname": "block", "ringname": "ring", "blocksizes": "block"}
_FOLLOW_KEYS = {
    "switchname": ("Switches", "Nodes", "LinkSpeed"),
    "blockname": ("Nodes",),
    "ringname": ("Nodes",),
    "blocksizes": (),
}
_CANONICAL = {"switchname": "SwitchName", "blockname": "BlockName", "ringname": "RingName",
              "blocksizes": "BlockSizes", "switches": "Switches", "nodes": "Nodes",
              "linkspeed": "LinkSpeed"}


def _logical_lines(text: str) -> list[list[tuple[str, int, int]]]:
    """Split into logical lines of (char, line, column): comments cut, ``\\`` continuations joined."""
    if text.startswith("\ufeff"):
        text = text[1:]
    out: list[list[tuple[str, int, int]]] = []
    pending: list[tuple[str, int, int]] = []
    for number, physical in enumerate(text.split("\n"), start=1):
        physical = physical.removesuffix("\r")
        chars: list[tuple[str, int, int]] = []
        i = 0
        while i < len(physical):
            char = physical[i]
            if char == "\\" and physical[i + 1 : i + 2] == "#":
                chars.append(("#", number, i + 1))
                i += 2
                continue
            if char == "#":
                break
            chars.append((char, number, i + 1))
            i += 1
        while chars and chars[-1][0].isspace():
            chars.pop()
        if chars and chars[-1][0] == "\\":
            pending.extend(chars[:-1])
            continue
        pending.extend(chars)
        if pending:
            out.append(pending)
        pending = []
    if pending:
        out.append(pending)
    return out


def _tokenize(chars: list[tuple[str, int, int]], problems: Problems) -> list[_Token] | None:
    """``Key=Value`` tokens of one logical line (Slurm also allows spaces around ``=`` and quoted values)."""

    def at(i: int) -> str:
        _, line, col = chars[min(i, len(chars) - 1)]
        return f"line {line}, column {col + (1 if i >= len(chars) else 0)}"

    tokens: list[_Token] = []
    n = len(chars)
    i = 0
    while True:
        while i < n and chars[i][0].isspace():
            i += 1
        if i >= n:
            return tokens
        start = i
        while i < n and _KEY_CHARS.match(chars[i][0]):
            i += 1
        key = "".join(c for c, _, _ in chars[start:i])
        if not key:
            problems.add(at(start), f'unexpected "{chars[start][0]}"; expected Key=Value')
            return None
        while i < n and chars[i][0] in " \t":
            i += 1
        if i >= n or chars[i][0] != "=":
            if key.lower() == "include":
                problems.add(at(start), "Include lines are not supported; paste the included lines here")
            else:
                problems.add(at(start), f'expected "=" after "{key}"; write {key}=Value')
            return None
        i += 1
        value_start = i
        while i < n and chars[i][0] in " \t":
            i += 1
        spaced = i > value_start
        if i < n and chars[i][0] == '"':
            close = next((j for j in range(i + 1, n) if chars[j][0] == '"'), None)
            if close is None:
                problems.add(at(i), f'the quote opened after "{key}=" is never closed')
                return None
            value = "".join(c for c, _, _ in chars[i + 1 : close])
            where = at(i + 1) if i + 1 < close else at(i)
            i = close + 1
        else:
            run_start = i
            while i < n and not chars[i][0].isspace():
                i += 1
            value = "".join(c for c, _, _ in chars[run_start:i])
            if spaced and _LOOKS_LIKE_KEY.match(value):
                # "Nodes= LinkSpeed=1": an empty value, the next token is a key of its own.
                value, i = "", run_start
                where = at(value_start)
            else:
                where = at(run_start) if value else at(value_start)
        tokens.append(_Token(chars[start][1], key, value, at(start), where))


def _conf_statements(
    text: str, problems: Problems
) -> list[tuple[int, str, _Group | None, _Value | None]]:
    """(first line, kind, group, BlockSizes value) per meaningful line."""
    out: list[tuple[int, str, _Group | None, _Value | None]] = []
    for chars in _logical_lines(text):
        tokens = _tokenize(chars, problems)
        if not tokens:
            continue
        head = tokens[0]
        lead = head.key.lower()
        if lead not in _FIRST_KEYS:
            if lead in ("nodes", "switches", "linkspeed"):
                problems.add(head.key_where, f'"{head.key}=" must follow SwitchName=, BlockName= or '
                                             "RingName= on the same line")
            else:
                problems.add(head.key_where, f'unknown key "{head.key}"; a line starts with SwitchName=, '
                                             "BlockName=, RingName= or BlockSizes=")
            continue
        allowed = {k.lower(): k for k in _FOLLOW_KEYS[lead]}
        seen: dict[str, _Token] = {}
        ok = True
        for token in tokens[1:]:
            low = token.key.lower()
            if low not in allowed:
                ok = False
                takes = ", ".join(f"{k}=" for k in _FOLLOW_KEYS[lead])
                rule = f"a {_CANONICAL[lead]}= line takes {takes}" if takes else (
                    f"{_CANONICAL[lead]}= stands alone on its line")
                problems.add(token.key_where, f'unknown key "{token.key}"; {rule}')
            elif low in seen:
                ok = False
                problems.add(token.key_where, f'"{allowed[low]}=" is given twice on this line '
                                              f"(first at {seen[low].key_where})")
            else:
                seen[low] = token
        line = head.line
        kind = _FIRST_KEYS[lead]
        if lead == "blocksizes":
            out.append((line, kind, None, _Value(head.value, head.value_where)))
            continue
        if not head.value:
            problems.add(head.value_where, f"{_CANONICAL[lead]}= is empty; every {kind} needs a name")
            ok = False
        if not ok:
            out.append((line, kind, None, None))
            continue
        nodes = seen.get("nodes")
        switches = seen.get("switches")
        out.append((line, kind, _Group(
            head.value,
            head.value_where,
            _Value(nodes.value, nodes.value_where) if nodes else None,
            _Value(switches.value, switches.value_where) if switches else None,
        ), None))
    return out


def _pick_kind(
    topology: str | None, first_line: dict[str, int], problems: Problems, warnings: list[str]
) -> str | None:
    found = [k for k in _KINDS if k in first_line]
    if topology is not None:
        wanted = topology.strip().lower().removeprefix("topology/")
        if wanted not in _KINDS:
            problems.add("topology", f'"{topology}" is not one of "tree", "block", "ring"')
            return None
        if wanted not in first_line:
            has = ", ".join(found) if found else "no definitions at all"
            problems.add("topology", f'"{topology}" was asked for but the file has no {wanted} '
                                     f"definitions (it has: {has})")
            return None
        ignored = [k for k in found if k != wanted]
        if ignored:
            warnings.append(f"ignored the {' and '.join(ignored)} definitions; imported the {wanted} ones")
        return wanted
    if not found:
        if not problems:
            problems.add("", "no SwitchName=, BlockName= or RingName= lines: nothing to import")
        return None
    if len(found) > 1:
        parts = " and ".join(f"{k} (line {first_line[k]})" for k in found)
        choices = " or ".join(f'topology="{k}"' for k in found)
        problems.add("", f"the file mixes {parts} definitions; pass {choices}")
        return None
    return found[0]


def _conf_block_sizes(value: _Value, problems: Problems) -> list[tuple[int, str]] | None:
    if not value.text:
        problems.add(value.where, "BlockSizes= is empty; give sizes in nodes, e.g. BlockSizes=8,16,32")
        return None
    entries: list[tuple[int, str]] = []
    for part in value.text.split(","):
        text = part.strip()
        if not text.isdigit() or not text.isascii() or int(text) <= 0:
            problems.add(value.where, f'BlockSizes entry "{text}" is not a positive whole number of nodes')
            return None
        entries.append((int(text), value.where))
    return entries


# ---------------------------------------------------------------------------------------------------------
# topology.yaml


@dataclass
class _YamlDoc:
    data: list[Any]
    root: yaml.Node

    @staticmethod
    def load(text: str, problems: Problems) -> _YamlDoc | None:
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
            data = yaml.safe_load(text)
        except yaml.MarkedYAMLError as err:
            mark = err.problem_mark or err.context_mark
            where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problems.add(where, f"is not valid YAML: {err.problem or err.context}")
            return None
        except yaml.YAMLError as err:
            problems.add("", f"is not valid YAML: {err}")
            return None
        except (ValueError, OverflowError) as err:  # e.g. the timestamp 2024-02-30
            problems.add("", f"is not valid YAML: {err}")
            return None
        except RecursionError:
            problems.add("", "is not valid YAML: nested too deeply")
            return None
        if root is None or data is None:
            problems.add("", "is empty; expected a list of topologies (- topology: NAME ...)")
            return None
        if not isinstance(data, list) or not isinstance(root, yaml.SequenceNode):
            problems.add("line 1", f"expected a list of topologies (- topology: NAME ...), got "
                                   f"{_kind_of(data)}")
            return None
        return _YamlDoc(data, root)

    def where(self, path: tuple[str | int, ...]) -> str:
        """``[1].block.blocks[2].nodes (line 14)``: the path, plus the line of the deepest node found."""
        node: yaml.Node | None = self.root
        line = None
        for step in path:
            found: yaml.Node | None = None
            if isinstance(step, int) and isinstance(node, yaml.SequenceNode) and step < len(node.value):
                found = node.value[step]
            elif isinstance(step, str) and isinstance(node, yaml.MappingNode):
                for key, val in node.value:
                    if isinstance(key, yaml.ScalarNode) and key.value == step:
                        found = val
                        line = key.start_mark.line + 1
                        break
            if found is None:
                break
            node = found
            line = found.start_mark.line + 1
        text = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in path).lstrip(".")
        return f"{text} (line {line})" if line is not None else text


def _kind_of(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f'the string "{value}"'
    return f"{type(value).__name__} {value!r}"


def _yaml_pick(doc: _YamlDoc, topology: str | None, problems: Problems) -> tuple[int, str, str] | None:
    """Check every entry's head; return (index, name, kind) of the chosen one."""
    entries: list[tuple[int, str, str | None, bool]] = []
    names: dict[str, int] = {}
    allowed = {"topology", "cluster_default", "tree", "block", "flat", "torus3d"}
    for index, entry in enumerate(doc.data):
        if not isinstance(entry, dict):
            problems.add(doc.where((index,)),
                         f"expected a mapping (topology: NAME, ...), got {_kind_of(entry)}")
            continue
        label = entry.get("topology")
        if not isinstance(label, str) or not label.strip():
            problems.add(doc.where((index, "topology")) if "topology" in entry else doc.where((index,)),
                         f"every entry needs topology: NAME (a non-empty string), got {_kind_of(label)}")
            continue
        if label in names:
            first = doc.where((names[label], "topology"))
            problems.add(doc.where((index, "topology")),
                         f'topology "{label}" is defined twice (first at {first})')
            continue
        names[label] = index
        for key in entry:
            if key not in allowed:
                problems.add(doc.where((index, str(key))), f'unknown key "{key}"; a topology takes topology, '
                                                           "cluster_default and one of tree, block, flat")
        default = entry.get("cluster_default", False)
        if not isinstance(default, bool):
            problems.add(doc.where((index, "cluster_default")),
                         f"must be true or false, got {_kind_of(default)}")
            default = False
        kinds = [k for k in ("tree", "block", "flat", "torus3d") if k in entry]
        if "flat" in kinds and entry["flat"] is not True:
            kinds.remove("flat")
        kind: str | None = None
        if len(kinds) == 1:
            kind = kinds[0]
        else:
            got = ", ".join(kinds) if kinds else "none"
            problems.add(doc.where((index,)), f'topology "{label}" must define exactly one of tree, block, '
                                              f"flat: true (got {got})")
        entries.append((index, label, kind, default))

    if not entries:
        if not problems:
            problems.add("", "defines no topology")
        return None
    listing = ", ".join(f'"{label}"' for _, label, _, _ in entries)
    chosen: tuple[int, str, str | None, bool] | None
    if topology is not None:
        chosen = next((e for e in entries if e[1] == topology), None)
        if chosen is None:
            problems.add("topology", f'"{topology}" is not defined here; the topologies are {listing}')
            return None
    else:
        chosen = next((e for e in entries if e[3]), None)
        if chosen is None:
            if len(entries) > 1:
                problems.add("topology",
                             f"no entry has cluster_default: true; pass topology= one of {listing}")
                return None
            chosen = entries[0]
    if chosen[2] is None:
        return None
    return chosen[0], chosen[1], chosen[2]


def _yaml_hostlist(
    doc: _YamlDoc, value: Any, path: tuple[str | int, ...], problems: Problems
) -> _Value | None:
    where = doc.where(path)
    if isinstance(value, bool) or value is None:
        problems.add(where, f"expected a hostlist string such as node[01-08], got {_kind_of(value)}")
        return None
    if isinstance(value, str | int):
        return _Value(str(value), where)
    if isinstance(value, list) and all(isinstance(v, str | int) and not isinstance(v, bool) for v in value):
        return _Value(",".join(str(v) for v in value), where)
    problems.add(where, f"expected a hostlist string such as node[01-08], got {_kind_of(value)}")
    return None


def _yaml_list(
    doc: _YamlDoc, body: Any, path: tuple[str | int, ...], key: str, keys: tuple[str, ...], problems: Problems
) -> list[Any] | None:
    if not isinstance(body, dict):
        problems.add(doc.where(path), f"expected a mapping with {', '.join(keys)}, got {_kind_of(body)}")
        return None
    for extra in body:
        if extra not in keys:
            problems.add(doc.where((*path, str(extra))), f'unknown key "{extra}"; expected {", ".join(keys)}')
    items = body.get(key)
    if not isinstance(items, list) or not items:
        problems.add(doc.where((*path, key)) if key in body else doc.where(path),
                     f"{key} must be a non-empty list, got {_kind_of(items)}")
        return None
    return items


def _yaml_group(
    doc: _YamlDoc, item: Any, path: tuple[str | int, ...], name_key: str, child_keys: tuple[str, ...],
    ignored: tuple[str, ...], problems: Problems,
) -> _Group | None:
    if not isinstance(item, dict):
        problems.add(doc.where(path), f"expected a mapping ({name_key}: NAME, ...), got {_kind_of(item)}")
        return None
    ok = True
    for key in item:
        if key not in (name_key, *child_keys, *ignored):
            problems.add(doc.where((*path, str(key))),
                         f'unknown key "{key}"; expected {", ".join((name_key, *child_keys))}')
    label = item.get(name_key)
    if isinstance(label, int) and not isinstance(label, bool):
        label = str(label)
    if not isinstance(label, str) or not label.strip():
        problems.add(doc.where((*path, name_key)) if name_key in item else doc.where(path),
                     f"every entry needs {name_key}: NAME (a non-empty string), got {_kind_of(label)}")
        return None
    values: dict[str, _Value | None] = {}
    for key in child_keys:
        if key in item:
            value = _yaml_hostlist(doc, item[key], (*path, key), problems)
            if value is None:
                ok = False
            values[key] = value
    if not ok:
        return None
    group = _Group(label, doc.where((*path, name_key)), values.get("nodes"), values.get("children"))
    return group


def _yaml_tree(doc: _YamlDoc, body: Any, path: tuple[str | int, ...], problems: Problems) -> list[_Group]:
    items = _yaml_list(doc, body, path, "switches", ("switches",), problems)
    out: list[_Group] = []
    for i, item in enumerate(items or []):
        group = _yaml_group(doc, item, (*path, "switches", i), "switch", ("children", "nodes"),
                            ("link_speed",), problems)
        if group is not None:
            out.append(group)
    return out


def _yaml_block(
    doc: _YamlDoc, body: Any, path: tuple[str | int, ...], problems: Problems
) -> tuple[list[_Group], list[tuple[int, str]] | None, bool]:
    """Blocks, block sizes (None when not given) and whether the sizes were readable."""
    items = _yaml_list(doc, body, path, "blocks", ("block_sizes", "blocks"), problems)
    blocks: list[_Group] = []
    for i, item in enumerate(items or []):
        group = _yaml_group(doc, item, (*path, "blocks", i), "block", ("nodes",), (), problems)
        if group is not None:
            blocks.append(group)
    if not isinstance(body, dict) or "block_sizes" not in body:
        return blocks, None, True
    raw = body["block_sizes"]
    sizes_path = (*path, "block_sizes")
    if isinstance(raw, str):
        entries = [s.strip() for s in raw.split(",")]
        listed: list[tuple[Any, str]] = [(s, doc.where(sizes_path)) for s in entries]
    elif isinstance(raw, list) and raw:
        listed = [(v, doc.where((*sizes_path, i))) for i, v in enumerate(raw)]
    elif isinstance(raw, int) and not isinstance(raw, bool):
        listed = [(raw, doc.where(sizes_path))]
    else:
        problems.add(doc.where(sizes_path), f"expected a list of sizes in nodes, got {_kind_of(raw)}")
        return blocks, None, False
    sizes: list[tuple[int, str]] = []
    for value, where in listed:
        number = value if isinstance(value, int) and not isinstance(value, bool) else (
            int(value) if isinstance(value, str) and value.isdigit() and value.isascii() else None)
        if number is None or number <= 0:
            problems.add(where, f"block size {_kind_of(value)} is not a positive whole number of nodes")
            return blocks, None, False
        sizes.append((number, where))
    return blocks, sizes, True


# ---------------------------------------------------------------------------------------------------------
# Builders: definitions -> layout


def _expand(value: _Value, problems: Problems) -> list[str] | None:
    try:
        return expand_hostlist(value.text, source=problems.source, path=value.where)
    except InputError as err:
        problems.extend(err.problems)
        return None


def _expand_nodes(group: _Group, key: str, kind: str, problems: Problems) -> list[str] | None:
    """The nodes of a block/ring/leaf switch, or None after reporting why there are none."""
    if group.nodes is None:
        return None
    if not group.nodes.text.strip():
        problems.add(group.nodes.where, f'{key} is empty for {kind} "{group.name}"; list its nodes as a '
                                        f"hostlist, e.g. {key}{'' if key.endswith('=') else ': '}node[01-08]")
        return None
    return _expand(group.nodes, problems)


def _unique_groups(groups: list[_Group], kind: str, problems: Problems) -> list[_Group]:
    seen: dict[str, _Group] = {}
    out: list[_Group] = []
    for group in groups:
        if group.name in seen:
            first = seen[group.name].where
            problems.add(group.where, f'{kind} "{group.name}" is defined twice (first at {first}); '
                                      f"each {kind} name must be unique")
            continue
        seen[group.name] = group
        out.append(group)
    return out


def _group_nodes(group: _Group, key: str, kind: str, problems: Problems) -> list[str] | None:
    """The expanded node list of a block or ring; None (with a problem) when it has none or it is malformed."""
    if group.nodes is None:
        problems.add(group.where, f'{kind} "{group.name}" has no nodes; give {key}')
        return None
    return _expand_nodes(group, key, kind, problems)


def _claim_nodes(
    group: _Group, nodes: list[str], kind: str, owner: dict[str, tuple[str, str]], order: list[str],
    problems: Problems, rule: str,
) -> None:
    """Record each node's owner; report nodes listed twice or owned by two groups (one problem per pair)."""
    assert group.nodes is not None
    twice: list[str] = []
    taken: dict[tuple[str, str], list[str]] = {}
    for node in nodes:
        previous = owner.get(node)
        if previous is None:
            owner[node] = (group.name, group.nodes.where)
            order.append(node)
        elif previous[0] == group.name:
            twice.append(node)
        else:
            taken.setdefault(previous, []).append(node)
    if twice:
        problems.add(group.nodes.where, f'{_nodes_phrase(twice)} listed twice in {kind} "{group.name}"')
    for (other, where), clash in taken.items():
        problems.add(group.nodes.where, f'{_nodes_phrase(clash)} under {kind} "{group.name}" but already '
                                        f'under {kind} "{other}" ({where}); {rule}')


def _nodes_phrase(nodes: list[str]) -> str:
    if len(nodes) == 1:
        return f'node "{nodes[0]}" is'
    return f"{len(nodes)} nodes ({_group_name(nodes)}) are"


def _build_tree(defs: list[_Group], style: _Style, problems: Problems) -> _Layout | None:
    switches = {g.name: g for g in _unique_groups(defs, "switch", problems)}
    if not switches:
        if not problems:
            problems.add("", "defines no switches")
        return None
    owner: dict[str, tuple[str, str]] = {}
    hosts: list[str] = []
    parent: dict[str, tuple[str, str]] = {}
    children: dict[str, list[str]] = {s: [] for s in switches}
    for sw in switches.values():
        if sw.nodes is not None and sw.switches is not None:
            problems.add(sw.where, f'switch "{sw.name}" has both {style.nodes} and {style.switches}; '
                                   "a switch holds either nodes or switches")
        elif sw.nodes is None and sw.switches is None:
            problems.add(sw.where,
                         f'switch "{sw.name}" has no children; give {style.nodes} or {style.switches}')
        if sw.nodes is not None:
            nodes = _expand_nodes(sw, style.nodes, "switch", problems)
            if nodes is not None:
                _claim_nodes(sw, nodes, "switch", owner, hosts, problems,
                             "a node hangs off exactly one leaf switch")
            continue
        if sw.switches is None:
            continue
        if not sw.switches.text.strip():
            problems.add(sw.switches.where, f'{style.switches} is empty for switch "{sw.name}"; '
                                            "list its child switches as a hostlist")
            continue
        names = _expand(sw.switches, problems)
        listed: set[str] = set()
        for child in names or []:
            where = sw.switches.where
            if child in listed:
                problems.add(where, f'switch "{child}" is listed twice in {style.switches} of "{sw.name}"')
                continue
            listed.add(child)
            if child not in switches:
                hint = style.define_switch.format(name=child)
                problems.add(where, f'switch "{child}" is listed in {style.switches} of "{sw.name}" but '
                                    f"never defined; add {hint}")
                continue
            if child in parent:
                problems.add(where, f'switch "{child}" is under switch "{sw.name}" but already under switch '
                                    f'"{parent[child][0]}" ({parent[child][1]}); a switch has one parent')
                continue
            parent[child] = (sw.name, where)
            children[sw.name].append(child)

    # Heights bottom-up (Kahn's algorithm); what stays unresolved sits on a cycle or above one.
    height: dict[str, int] = {}
    waiting = {s: len(children[s]) for s in switches}
    ready = deque(s for s in switches if waiting[s] == 0)
    order: list[str] = []
    while ready:
        current = ready.popleft()
        order.append(current)
        height[current] = 1 + max((height[c] for c in children[current]), default=0)
        up = parent.get(current)
        if up is not None:
            waiting[up[0]] -= 1
            if waiting[up[0]] == 0:
                ready.append(up[0])
    if len(order) < len(switches):
        _report_cycles(switches, children, height, problems)
        return None

    top = max(height.values())
    chain: dict[str, list[str]] = {}
    gaps: list[tuple[str, int, str | None, int]] = []
    for current in reversed(order):  # parents before children
        up = parent.get(current)
        if up is None:
            chain[current] = [current] * (top - height[current] + 1)
            if height[current] < top:
                gaps.append((current, height[current], None, top))
        else:
            above = up[0]
            chain[current] = [current] * (height[above] - height[current]) + chain[above]
            if height[above] - height[current] > 1:
                gaps.append((current, height[current], above, height[above]))

    layout = _Layout([f"switch{h}" for h in range(1, top + 1)], [])
    for host in hosts:
        leaf = owner[host][0]
        if height[leaf] == 1:
            layout.hosts.append((host, chain[leaf]))
    for gap in gaps:
        layout.notes.append(_gap_note(*gap))
    roots = [s for s in switches if s not in parent]
    if len(roots) > 1:
        shown = ", ".join(f'"{r}"' for r in roots[:5]) + (", ..." if len(roots) > 5 else "")
        layout.roots_note = lambda names: (
            f"{len(roots)} top switches ({shown}) are not connected to each other; added the level "
            '"cluster" above them (Slurm never spans one job across unconnected switches)')
    return layout


def _gap_note(sw: str, low: int, above: str | None, high: int) -> Callable[[list[str]], str]:
    def note(names: list[str]) -> str:
        skipped = ", ".join(names[low:high - (0 if above is None else 1)])
        if above is None:
            return (f'top switch "{sw}" is at level {names[low - 1]}, below the top level {names[high - 1]}; '
                    f'its hosts use "{sw}" as their domain at {skipped}')
        return (f'switch "{sw}" (level {names[low - 1]}) hangs directly off "{above}" '
                f'(level {names[high - 1]}); its hosts use "{sw}" as their domain at {skipped}')

    return note


def _report_cycles(
    switches: dict[str, _Group], children: dict[str, list[str]], height: dict[str, int], problems: Problems
) -> None:
    unresolved = [s for s in switches if s not in height]
    reported: set[str] = set()
    for start in unresolved:
        if start in reported:
            continue
        path: list[str] = []
        seen_at: dict[str, int] = {}
        current: str | None = start
        while current is not None and current not in seen_at and current not in reported:
            seen_at[current] = len(path)
            path.append(current)
            current = next((c for c in children[current] if c not in height), None)
        if current is None or current in reported:
            reported.update(path)
            continue
        cycle = path[seen_at[current]:]
        reported.update(path)
        loop = " -> ".join(f'"{s}"' for s in [*cycle, cycle[0]])
        problems.add(switches[cycle[0]].where,
                     f"switches form a cycle: {loop}; each lists the next as a child")


def _block_factors(
    sizes: list[tuple[int, str]] | None, base: int, count: int, problems: Problems, warnings: list[str]
) -> list[int] | None:
    factors: list[int] = []
    if sizes is None:
        candidates = list(_DEFAULT_FACTORS)
    else:
        candidates = [1]
        previous = base
        for size, where in sizes[1:]:
            if size % base:
                problems.add(where, f"BlockSizes entry {size} is not a multiple of the base block size "
                                    f"{base} (the first entry)")
                return None
            factor = size // base
            if factor & (factor - 1) or factor == 1:
                problems.add(where, f"BlockSizes entry {size} is {factor} x the base block size {base}; each "
                                    f"later size must be the base size times 2, 4, 8, ... "
                                    f"(e.g. {base * 2}, {base * 4})")
                return None
            if size <= previous:
                problems.add(where, f"BlockSizes entry {size} does not grow; the sizes must increase "
                                    f"({previous} comes before it)")
                return None
            if factor.bit_length() - 1 > _MAX_BLOCK_LEVEL:
                problems.add(where, f"BlockSizes entry {size} is {factor} x the base size; Slurm allows at "
                                    f"most {2 ** _MAX_BLOCK_LEVEL} x")
                return None
            previous = size
            candidates.append(factor)
    for factor in candidates:
        factors.append(factor)
        if factor >= count:
            break
    dropped = candidates[len(factors):]
    if dropped and sizes is not None:
        listed = ", ".join(str(f * base) for f in dropped)
        warnings.append(f"BlockSizes {listed} ignored: {factors[-1] * base} nodes ({factors[-1]} x the base "
                        f"block) already span all {count} blocks")
    return factors


def _build_blocks(
    defs: list[_Group],
    sizes: list[tuple[int, str]] | None,
    key: str,
    problems: Problems,
    warnings: list[str],
    *,
    sizes_ok: bool = True,
) -> _Layout | None:
    blocks = _unique_groups(defs, "block", problems)
    owner: dict[str, tuple[str, str]] = {}
    hosts: list[str] = []
    members: list[tuple[_Group, list[str]]] = []
    for block in blocks:
        nodes = _group_nodes(block, key, "block", problems)
        if nodes is None:
            continue
        _claim_nodes(block, nodes, "block", owner, hosts, problems, "a node belongs to one block")
        members.append((block, nodes))
    if not members:
        if not problems:
            problems.add("", "defines no blocks")
        return None
    if not sizes_ok:
        return None

    base = sizes[0][0] if sizes else len(members[0][1])
    origin = "the first BlockSizes entry" if sizes else "the size of the first block; there is no BlockSizes"
    bigger: list[str] = []
    for block, nodes in members:
        if len(nodes) < base:
            problems.add(block.where, f'block "{block.name}" has {len(nodes)} nodes, fewer than the base '
                                      f"block size {base} ({origin}); every block needs at least that many")
        elif len(nodes) > base:
            bigger.append(f"{block.name}: {len(nodes)}")
    if bigger:
        shown = ", ".join(bigger[:4]) + (", ..." if len(bigger) > 4 else "")
        warnings.append(f"{len(bigger)} block(s) have more nodes than the base block size {base} ({shown}); "
                        "all their nodes are imported, Slurm plans with the base size")

    factors = _block_factors(sizes, base, len(blocks), problems, warnings)
    if factors is None:
        return None
    names = [b.name for b in blocks]
    domain_of: dict[str, list[str]] = {b: [] for b in names}
    for factor in factors:
        for start in range(0, len(names), factor):
            group = names[start : start + factor]
            label = group[0] if factor == 1 else _group_name(group)
            if len(group) < factor:
                warnings.append(
                    f'the last block_x{factor} domain "{label}" has only {len(group)} of {factor} blocks')
            for b in group:
                domain_of[b].append(label)
    layout = _Layout(["block" if f == 1 else f"block_x{f}" for f in factors], [])
    for host in hosts:
        layout.hosts.append((host, domain_of[owner[host][0]]))
    return layout


def _group_name(names: list[str]) -> str:
    try:
        return compress_hostlist(names)
    except ValueError:
        return "+".join(names)


def _build_rings(defs: list[_Group], key: str, problems: Problems, warnings: list[str]) -> _Layout | None:
    rings = _unique_groups(defs, "ring", problems)
    owner: dict[str, tuple[str, str]] = {}
    hosts: list[str] = []
    for ring in rings:
        nodes = _group_nodes(ring, key, "ring", problems)
        if nodes is None:
            continue
        if len(nodes) > _RING_MAX:
            warnings.append(
                f'ring "{ring.name}" has {len(nodes)} nodes; Slurm accepts at most {_RING_MAX} per ring')
        _claim_nodes(ring, nodes, "ring", owner, hosts, problems, "a node belongs to one ring")
    if not hosts:
        if not problems:
            problems.add("", "defines no rings")
        return None
    return _Layout(["ring"], [(h, [owner[h][0]]) for h in hosts])


# ---------------------------------------------------------------------------------------------------------
# Assembly


def _finish(
    layout: _Layout | None, name: str, level_names: Sequence[str] | None, problems: Problems,
    warnings: list[str],
) -> Result:
    names = layout.levels if layout is not None else None
    if layout is not None and level_names is not None:
        names = _rename(layout.levels, level_names, problems)
    problems.raise_if_any()
    assert layout is not None and names is not None
    domain_maps = [dict(zip(names, domains, strict=True)) for _, domains in layout.hosts]
    levels: list[dict[str, Any]] = [{"name": "node"}, *({"name": n} for n in names)]
    tops = {domains[-1] for _, domains in layout.hosts}
    if len(tops) > 1:
        if "cluster" in names:
            message = 'the name "cluster" is taken by the level added above several tops; pick another'
            raise InputError(problems.source, [Problem("level_names", message)])
        levels.append({"name": "cluster"})
        for domains in domain_maps:
            domains["cluster"] = "cluster"
        if layout.roots_note is not None:
            warnings.append(layout.roots_note(names))
    warnings.extend(note(names) for note in layout.notes)
    hosts = [
        {"name": host, "domains": domains}
        for (host, _), domains in zip(layout.hosts, domain_maps, strict=True)
    ]
    return {"name": name, "levels": levels, "hosts": hosts}, warnings


def _rename(defaults: list[str], level_names: Sequence[str], problems: Problems) -> list[str] | None:
    given = [level_names] if isinstance(level_names, str) else list(level_names)
    if len(given) != len(defaults):
        listed = ", ".join(map(str, given))
        problems.add("level_names", f"has {len(given)} name(s) ({listed}) but the topology has "
                                    f"{len(defaults)} level(s) above the hosts ({', '.join(defaults)}), "
                                    "named bottom-up")
        return None
    return check_level_names(given, problems)


def _stem(source: str) -> str:
    base = Path(source).name
    for suffix in _SUFFIXES:
        if base.lower().endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)]
    return base or "cluster"


def _looks_like_yaml(text: str) -> bool:
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        return stripped.startswith(("-", "topology:", "---"))
    return False
