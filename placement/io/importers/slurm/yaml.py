"""topology.yaml reading (Slurm 24.05+): the entry to use, and its tree, block or ring definitions as groups
with field paths and lines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from placement.errors import Problems
from placement.io.importers.slurm.common import _Group, _Value

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
            problems.add(
                "line 1", f"expected a list of topologies (- topology: NAME ...), got {_kind_of(data)}"
            )
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
            problems.add(
                doc.where((index,)), f"expected a mapping (topology: NAME, ...), got {_kind_of(entry)}"
            )
            continue
        label = entry.get("topology")
        if not isinstance(label, str) or not label.strip():
            problems.add(
                doc.where((index, "topology")) if "topology" in entry else doc.where((index,)),
                f"every entry needs topology: NAME (a non-empty string), got {_kind_of(label)}",
            )
            continue
        if label in names:
            first = doc.where((names[label], "topology"))
            problems.add(
                doc.where((index, "topology")), f'topology "{label}" is defined twice (first at {first})'
            )
            continue
        names[label] = index
        for key in entry:
            if key not in allowed:
                problems.add(
                    doc.where((index, str(key))),
                    f'unknown key "{key}"; a topology takes topology, '
                    "cluster_default and one of tree, block, flat",
                )
        default = entry.get("cluster_default", False)
        if not isinstance(default, bool):
            problems.add(
                doc.where((index, "cluster_default")), f"must be true or false, got {_kind_of(default)}"
            )
            default = False
        kinds = [k for k in ("tree", "block", "flat", "torus3d") if k in entry]
        if "flat" in kinds and entry["flat"] is not True:
            kinds.remove("flat")
        kind: str | None = None
        if len(kinds) == 1:
            kind = kinds[0]
        else:
            got = ", ".join(kinds) if kinds else "none"
            problems.add(
                doc.where((index,)),
                f'topology "{label}" must define exactly one of tree, block, flat: true (got {got})',
            )
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
                problems.add(
                    "topology", f"no entry has cluster_default: true; pass topology= one of {listing}"
                )
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
        problems.add(
            doc.where((*path, key)) if key in body else doc.where(path),
            f"{key} must be a non-empty list, got {_kind_of(items)}",
        )
        return None
    return items


def _yaml_group(
    doc: _YamlDoc,
    item: Any,
    path: tuple[str | int, ...],
    name_key: str,
    child_keys: tuple[str, ...],
    ignored: tuple[str, ...],
    problems: Problems,
) -> _Group | None:
    if not isinstance(item, dict):
        problems.add(doc.where(path), f"expected a mapping ({name_key}: NAME, ...), got {_kind_of(item)}")
        return None
    ok = True
    for key in item:
        if key not in (name_key, *child_keys, *ignored):
            problems.add(
                doc.where((*path, str(key))),
                f'unknown key "{key}"; expected {", ".join((name_key, *child_keys))}',
            )
    label = item.get(name_key)
    if isinstance(label, int) and not isinstance(label, bool):
        label = str(label)
    if not isinstance(label, str) or not label.strip():
        problems.add(
            doc.where((*path, name_key)) if name_key in item else doc.where(path),
            f"every entry needs {name_key}: NAME (a non-empty string), got {_kind_of(label)}",
        )
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
        group = _yaml_group(
            doc, item, (*path, "switches", i), "switch", ("children", "nodes"), ("link_speed",), problems
        )
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
        number = (
            value
            if isinstance(value, int) and not isinstance(value, bool)
            else (int(value) if isinstance(value, str) and value.isdigit() and value.isascii() else None)
        )
        if number is None or number <= 0:
            problems.add(where, f"block size {_kind_of(value)} is not a positive whole number of nodes")
            return blocks, None, False
        sizes.append((number, where))
    return blocks, sizes, True
