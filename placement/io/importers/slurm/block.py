"""The block plugin's layout: base blocks and their power-of-two aggregates (BlockSizes) as levels."""

from __future__ import annotations

from placement.errors import Problems
from placement.io.importers.slurm.common import (
    _DEFAULT_FACTORS,
    _MAX_BLOCK_LEVEL,
    _claim_nodes,
    _Group,
    _group_name,
    _group_nodes,
    _Layout,
    _unique_groups,
)


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
                problems.add(
                    where,
                    f"BlockSizes entry {size} is not a multiple of the base block size "
                    f"{base} (the first entry)",
                )
                return None
            factor = size // base
            if factor & (factor - 1) or factor == 1:
                problems.add(
                    where,
                    f"BlockSizes entry {size} is {factor} x the base block size {base}; each "
                    f"later size must be the base size times 2, 4, 8, ... "
                    f"(e.g. {base * 2}, {base * 4})",
                )
                return None
            if size <= previous:
                problems.add(
                    where,
                    f"BlockSizes entry {size} does not grow; the sizes must increase "
                    f"({previous} comes before it)",
                )
                return None
            if factor.bit_length() - 1 > _MAX_BLOCK_LEVEL:
                problems.add(
                    where,
                    f"BlockSizes entry {size} is {factor} x the base size; Slurm allows at "
                    f"most {2**_MAX_BLOCK_LEVEL} x",
                )
                return None
            previous = size
            candidates.append(factor)
    for factor in candidates:
        factors.append(factor)
        if factor >= count:
            break
    dropped = candidates[len(factors) :]
    if dropped and sizes is not None:
        listed = ", ".join(str(f * base) for f in dropped)
        warnings.append(
            f"BlockSizes {listed} ignored: {factors[-1] * base} nodes ({factors[-1]} x the base "
            f"block) already span all {count} blocks"
        )
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
            problems.add(
                block.where,
                f'block "{block.name}" has {len(nodes)} nodes, fewer than the base '
                f"block size {base} ({origin}); every block needs at least that many",
            )
        elif len(nodes) > base:
            bigger.append(f"{block.name}: {len(nodes)}")
    if bigger:
        shown = ", ".join(bigger[:4]) + (", ..." if len(bigger) > 4 else "")
        warnings.append(
            f"{len(bigger)} block(s) have more nodes than the base block size {base} ({shown}); "
            "all their nodes are imported, Slurm plans with the base size"
        )

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
                    f'the last block_x{factor} domain "{label}" has only {len(group)} of {factor} blocks'
                )
            for b in group:
                domain_of[b].append(label)
    layout = _Layout(["block" if f == 1 else f"block_x{f}" for f in factors], [])
    for host in hosts:
        layout.hosts.append((host, domain_of[owner[host][0]]))
    return layout
