"""What every Slurm topology reader shares: the format-neutral definitions (values, groups, layouts), node
expansion and claiming, and the assembly of a layout into a native cluster dict."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placement.errors import InputError, InternalError, Problem, Problems
from placement.io.hostlist import compress_hostlist, expand_hostlist
from placement.io.importers.levels import check_level_names

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
        problems.add(
            group.nodes.where,
            f'{key} is empty for {kind} "{group.name}"; list its nodes as a '
            f"hostlist, e.g. {key}{'' if key.endswith('=') else ': '}node[01-08]",
        )
        return None
    return _expand(group.nodes, problems)


def _unique_groups(groups: list[_Group], kind: str, problems: Problems) -> list[_Group]:
    seen: dict[str, _Group] = {}
    out: list[_Group] = []
    for group in groups:
        if group.name in seen:
            first = seen[group.name].where
            problems.add(
                group.where,
                f'{kind} "{group.name}" is defined twice (first at {first}); each {kind} name must be unique',
            )
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
    group: _Group,
    nodes: list[str],
    kind: str,
    owner: dict[str, tuple[str, str]],
    order: list[str],
    problems: Problems,
    rule: str,
) -> None:
    """Record each node's owner; report nodes listed twice or owned by two groups (one problem per pair)."""
    if group.nodes is None:
        raise InternalError(f"the nodes of {kind} {group.name!r} are claimed before they were read")
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
        problems.add(
            group.nodes.where,
            f'{_nodes_phrase(clash)} under {kind} "{group.name}" but already '
            f'under {kind} "{other}" ({where}); {rule}',
        )


def _nodes_phrase(nodes: list[str]) -> str:
    if len(nodes) == 1:
        return f'node "{nodes[0]}" is'
    return f"{len(nodes)} nodes ({_group_name(nodes)}) are"


# ---------------------------------------------------------------------------------------------------------
# Assembly


def _finish(
    layout: _Layout | None,
    name: str,
    level_names: Sequence[str] | None,
    problems: Problems,
    warnings: list[str],
) -> Result:
    names = layout.levels if layout is not None else None
    if layout is not None and level_names is not None:
        names = _rename(layout.levels, level_names, problems)
    problems.raise_if_any()
    if layout is None or names is None:
        raise InternalError(f"{name}: the topology has no layout or level names, but no problem was recorded")
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
        problems.add(
            "level_names",
            f"has {len(given)} name(s) ({listed}) but the topology has "
            f"{len(defaults)} level(s) above the hosts ({', '.join(defaults)}), "
            "named bottom-up",
        )
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


def _group_name(names: list[str]) -> str:
    try:
        return compress_hostlist(names)
    except ValueError:
        return "+".join(names)
