"""The ring plugin's layout: each ring a domain of the level ``ring``."""

from __future__ import annotations

from placement.errors import Problems
from placement.io.importers.slurm.common import (
    _RING_MAX,
    _claim_nodes,
    _Group,
    _group_nodes,
    _Layout,
    _unique_groups,
)


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
                f'ring "{ring.name}" has {len(nodes)} nodes; Slurm accepts at most {_RING_MAX} per ring'
            )
        _claim_nodes(ring, nodes, "ring", owner, hosts, problems, "a node belongs to one ring")
    if not hosts:
        if not problems:
            problems.add("", "defines no rings")
        return None
    return _Layout(["ring"], [(h, [owner[h][0]]) for h in hosts])
