"""The tree plugin's layout: switch heights as levels, every host's switch on each, gaps and cycles
reported."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from placement.errors import Problems
from placement.io.importers.slurm.common import (
    _claim_nodes,
    _expand,
    _expand_nodes,
    _Group,
    _Layout,
    _Style,
    _unique_groups,
)


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
        _read_switch(sw, switches, style, owner, hosts, parent, children, problems)
    height, order = _heights(switches, parent, children)
    if len(order) < len(switches):  # the switches left sit on a cycle or above one
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
            '"cluster" above them (Slurm never spans one job across unconnected switches)'
        )
    return layout


def _read_switch(
    sw: _Group,
    switches: dict[str, _Group],
    style: _Style,
    owner: dict[str, tuple[str, str]],
    hosts: list[str],
    parent: dict[str, tuple[str, str]],
    children: dict[str, list[str]],
    problems: Problems,
) -> None:
    """One switch: its nodes (claimed for it: a node hangs off one leaf) or its child switches (defined, each
    listed once, each with one parent)."""
    if sw.nodes is not None and sw.switches is not None:
        problems.add(
            sw.where,
            f'switch "{sw.name}" has both {style.nodes} and {style.switches}; '
            "a switch holds either nodes or switches",
        )
    elif sw.nodes is None and sw.switches is None:
        problems.add(sw.where, f'switch "{sw.name}" has no children; give {style.nodes} or {style.switches}')
    if sw.nodes is not None:
        nodes = _expand_nodes(sw, style.nodes, "switch", problems)
        if nodes is not None:
            _claim_nodes(
                sw, nodes, "switch", owner, hosts, problems, "a node hangs off exactly one leaf switch"
            )
        return
    if sw.switches is None:
        return
    if not sw.switches.text.strip():
        problems.add(
            sw.switches.where,
            f'{style.switches} is empty for switch "{sw.name}"; list its child switches as a hostlist',
        )
        return
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
            problems.add(
                where,
                f'switch "{child}" is listed in {style.switches} of "{sw.name}" but never defined; add {hint}',
            )
            continue
        if child in parent:
            problems.add(
                where,
                f'switch "{child}" is under switch "{sw.name}" but already under switch '
                f'"{parent[child][0]}" ({parent[child][1]}); a switch has one parent',
            )
            continue
        parent[child] = (sw.name, where)
        children[sw.name].append(child)


def _heights(
    switches: dict[str, _Group], parent: dict[str, tuple[str, str]], children: dict[str, list[str]]
) -> tuple[dict[str, int], list[str]]:
    """Each switch's height bottom-up (leaves 1) and the order they resolved in (Kahn's algorithm); a switch
    on a cycle or above one is in neither."""
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
    return height, order


def _gap_note(sw: str, low: int, above: str | None, high: int) -> Callable[[list[str]], str]:
    def note(names: list[str]) -> str:
        skipped = ", ".join(names[low : high - (0 if above is None else 1)])
        if above is None:
            return (
                f'top switch "{sw}" is at level {names[low - 1]}, below the top level {names[high - 1]}; '
                f'its hosts use "{sw}" as their domain at {skipped}'
            )
        return (
            f'switch "{sw}" (level {names[low - 1]}) hangs directly off "{above}" '
            f'(level {names[high - 1]}); its hosts use "{sw}" as their domain at {skipped}'
        )

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
        cycle = path[seen_at[current] :]
        reported.update(path)
        loop = " -> ".join(f'"{s}"' for s in [*cycle, cycle[0]])
        problems.add(
            switches[cycle[0]].where, f"switches form a cycle: {loop}; each lists the next as a child"
        )
