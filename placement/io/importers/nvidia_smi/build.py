"""Building an `NvidiaSmiTopology` from a scanned table: codes, symmetry, CPU/NUMA affinity, NIC names and
rails, with every problem collected."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from placement.errors import Problems
from placement.io.importers.nvidia_smi.scan import _normalize, _Row, _Table, _Tok
from placement.io.importers.nvidia_smi.table import (
    _CPU_LIST_RE,
    _EXPECTED_CODES,
    _GPU_RE,
    _NIC_RANK,
    _NV_GLUED_HINT,
    _SWITCH_RANK,
    _SYS_RANK,
    NvidiaSmiTopology,
    nvlink_count,
)

# ------------------------------------------------------------------------------------------- building


def _ranges(names: Sequence[str]) -> str:
    """`GPU0..GPU3, GPU6` for runs of consecutive GPU numbers (runs of 3 or more use `..`)."""
    nums = [int(m.group(1)) if (m := _GPU_RE.fullmatch(n)) else -2 - k for k, n in enumerate(names)]
    out: list[str] = []
    i = 0
    while i < len(names):
        j = i
        while j + 1 < len(names) and nums[j] >= 0 and nums[j + 1] == nums[j] + 1:
            j += 1
        out.extend([f"{names[i]}..{names[j]}"] if j - i >= 2 else list(names[i : j + 1]))
        i = j + 1
    return ", ".join(out)


def _natural_key(name: str) -> tuple[tuple[int, str], ...]:
    return tuple((int(p), "") if p.isdigit() else (-1, p.lower()) for p in re.split(r"(\d+)", name) if p)


def _assign_affinity(row: _Row, labels: list[_Tok]) -> dict[str, _Tok]:
    """Map affinity cells to header labels: in order when all are present, else by nearest column."""
    if len(row.aff) == len(labels):
        return {lab.text: cell for lab, cell in zip(labels, row.aff, strict=True)}
    best: tuple[int, ...] = ()
    best_cost = -1
    for combo in itertools.combinations(range(len(labels)), len(row.aff)):
        cost = sum(abs(labels[k].ecol - c.ecol) for k, c in zip(combo, row.aff, strict=True))
        if best_cost < 0 or cost < best_cost:
            best, best_cost = combo, cost
    return {labels[k].text: c for k, c in zip(best, row.aff, strict=True)}


@dataclass
class _Grid:
    """Validated cells of one table, keyed by (row device, column device) header index."""

    codes: dict[tuple[int, int], tuple[str, int, _Tok]] = field(default_factory=dict)
    soc: list[str] = field(default_factory=list)
    cpu: dict[int, str | None] = field(default_factory=dict)
    numa: dict[int, int | None] = field(default_factory=dict)


def _read_row(row: _Row, i: int, names: list[str], t: _Table, grid: _Grid, ps: Problems) -> None:
    n = len(names)
    label = row.label.text
    if len(row.cells) != n:
        gpus = sum(1 for x in names if _GPU_RE.fullmatch(x))
        ps.add(
            row.label.at(row.line),
            f"row {label} has {len(row.cells)} link cells but the header (line {t.header.line}) has {n} "
            f"device columns ({gpus} GPUs + {n - gpus} NICs); each row needs one link cell per column",
        )
    else:
        for j, cell in enumerate(row.cells):
            code = _normalize(cell.text)
            where = cell.at(row.line)
            if code is None:
                hint = ""
                if re.fullmatch(r"NV\d+[\d,\-]*[,\-][\d,\-]*", cell.text):
                    hint = _NV_GLUED_HINT
                msg = f"unknown link code '{cell.text}' ({label} -> {names[j]}); {_EXPECTED_CODES}{hint}"
                ps.add(where, msg)
                continue
            if i == j and code != "X":
                ps.add(where, f"diagonal cell {label} -> {label} is '{cell.text}'; the diagonal must be X")
                continue
            if i != j and code == "X":
                ps.add(where, f"cell {label} -> {names[j]} is 'X'; X (self) is only valid on the diagonal")
                continue
            if cell.text == "SOC":
                grid.soc.append(where)
            grid.codes[i, j] = (code, row.line, cell)
    _read_affinity(row, i, t.header.labels, grid, ps)
    for cell in row.stray:
        ps.add(cell.at(row.line), f"unexpected cell '{cell.text}' after the affinity cells of row {label}")


def _read_affinity(row: _Row, i: int, labels: list[_Tok], grid: _Grid, ps: Problems) -> None:
    label = row.label.text
    if len(row.aff) > len(labels):
        heads = ", ".join(lab.text for lab in labels) or "none"
        ps.add(
            row.aff[0].at(row.line),
            f"row {label} has {len(row.aff)} cells after the link codes but the header lists "
            f"{len(labels)} affinity columns ({heads})",
        )
        return
    if not _GPU_RE.fullmatch(label):
        return  # NIC rows: affinity cells, when present, are not used
    cells = _assign_affinity(row, labels)
    grid.cpu[i] = grid.numa[i] = None
    cpu = cells.get("CPU Affinity")
    if cpu is not None and cpu.text.upper() != "N/A":
        if _CPU_LIST_RE.fullmatch(cpu.text):
            grid.cpu[i] = cpu.text
        else:
            ps.add(cpu.at(row.line), f"CPU Affinity '{cpu.text}' must be a CPU list like 0-31,64-95 or N/A")
    numa = cells.get("NUMA Affinity")
    if numa is not None and numa.text.upper() != "N/A":
        if numa.text.isdigit():
            grid.numa[i] = int(numa.text)
        else:
            ps.add(numa.at(row.line), f"NUMA Affinity '{numa.text}' must be a non-negative integer or N/A")


def _check_symmetry(names: list[str], grid: _Grid, ps: Problems) -> None:
    for (i, j), (code, line, cell) in sorted(grid.codes.items(), key=lambda kv: (kv[1][1], kv[1][2].col)):
        other = grid.codes.get((j, i))
        if i == j or other is None or other[0] == code:
            continue
        if (other[1], other[2].col) < (line, cell.col):
            continue  # reported from the other cell
        ps.add(
            cell.at(line),
            f"{names[i]} -> {names[j]} is '{cell.text}' but {names[j]} -> {names[i]} is '{other[2].text}' "
            f"({other[2].at(other[1])}); the matrix must be symmetric",
        )


def _rails(
    gpus: list[str], nics: list[str], gpu_nic: list[list[str]], warnings: list[str]
) -> list[int | None]:
    order = sorted(range(len(nics)), key=lambda k: _natural_key(nics[k]))
    rail_of = {k: r for r, k in enumerate(order)}
    rails: list[int | None] = [None] * len(gpus)
    ties: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for g, row in enumerate(gpu_nic):
        if not row:
            continue
        ranks = [-1 if nvlink_count(c) else _NIC_RANK.get(c, _SYS_RANK) for c in row]
        best = min(ranks)
        if best >= _SYS_RANK:
            continue
        closest = tuple(sorted((k for k, r in enumerate(ranks) if r == best), key=lambda k: rail_of[k]))
        if len(closest) == 1:
            rails[g] = rail_of[closest[0]]
        else:
            ties.setdefault((best, closest), []).append(g)
    for (best, closest), group in ties.items():
        nic_names = ", ".join(nics[k] for k in closest)
        gpu_names = ", ".join(gpus[g] for g in group)
        code = gpu_nic[group[0]][closest[0]]
        if best <= _SWITCH_RANK and len(group) == len(closest):
            for g, k in zip(group, closest, strict=True):
                rails[g] = rail_of[k]
            pairs = ", ".join(f"{gpus[g]}->{nics[k]}" for g, k in zip(group, closest, strict=True))
            warnings.append(
                f"rails: {gpu_names} tie at {code} over {nic_names}; paired one to one in order ({pairs})"
            )
        else:
            warnings.append(
                f"rails: {gpu_names} tie at {code} over {nic_names}; rail left as None "
                "(a tie-break by name would be arbitrary)"
            )
    return rails


def _build(t: _Table, ps: Problems, allow_partial: bool, warnings: list[str]) -> NvidiaSmiTopology:
    h = t.header
    names, index = _columns(t, ps)
    gpu_cols = [j for j, x in enumerate(names) if _GPU_RE.fullmatch(x) and index[x] == j]
    nic_cols = [j for j, x in enumerate(names) if not _GPU_RE.fullmatch(x) and index[x] == j]
    warnings.extend(h.glued)
    grid, seen = _read_rows(t, names, index, ps, warnings)
    _check_symmetry(names, grid, ps)
    gpus = [names[j] for j in gpu_cols]
    truncated = _check_gpu_rows(t, gpus, gpu_cols, seen, allow_partial, ps)
    ps.raise_if_any()

    if grid.soc:
        warnings.append(
            f"legacy code SOC (nvidia-smi before 2017) normalized to SYS in {len(grid.soc)} cell(s), "
            f"first at {grid.soc[0]}"
        )
    matrix, gpu_nic, note = _fill(grid, gpu_cols, nic_cols)
    if truncated:
        warnings.append(f"{truncated}; {note}")
    nics = _resolve_nics([names[k] for k in nic_cols], t.legend, ps, warnings)
    ps.raise_if_any()
    return NvidiaSmiTopology(
        gpus=tuple(gpus),
        matrix=tuple(tuple(r) for r in matrix),
        nics=tuple(nics),
        gpu_nic=tuple(tuple(r) for r in gpu_nic),
        rails=tuple(_rails(gpus, nics, gpu_nic, warnings)),
        cpu_affinity=tuple(grid.cpu.get(i) for i in gpu_cols),
        numa_affinity=tuple(grid.numa.get(i) for i in gpu_cols),
        warnings=tuple(warnings),
    )


def _columns(t: _Table, ps: Problems) -> tuple[list[str], dict[str, int]]:
    """The header's device names and each name's first column (a repeated name is a problem)."""
    h = t.header
    names = [d.text for d in h.devices]
    index: dict[str, int] = {}
    for j, d in enumerate(h.devices):
        if d.text in index:
            first = h.devices[index[d.text]]
            ps.add(
                d.at(h.line), f"device '{d.text}' appears twice in the header (also column {first.col + 1})"
            )
        else:
            index[d.text] = j
    return names, index


def _read_rows(
    t: _Table, names: list[str], index: dict[str, int], ps: Problems, warnings: list[str]
) -> tuple[_Grid, dict[str, _Row]]:
    """The cells of every row into a grid; each row must be a header column, once."""
    h = t.header
    grid = _Grid()
    seen: dict[str, _Row] = {}
    for row in t.rows:
        label = row.label.text
        warnings.extend(row.glued)
        if label not in index:
            ps.add(
                row.label.at(row.line),
                f"row '{label}' is not a column of the header at line {h.line} ({_ranges(names)})",
            )
        elif label in seen:
            ps.add(
                row.label.at(row.line),
                f"row {label} appears twice (lines {seen[label].line} and {row.line}); "
                "each device has one row",
            )
        else:
            seen[label] = row
            _read_row(row, index[label], names, t, grid, ps)
    return grid, seen


def _check_gpu_rows(
    t: _Table, gpus: list[str], gpu_cols: list[int], seen: dict[str, _Row], allow_partial: bool, ps: Problems
) -> str:
    """The GPU columns are GPU0..GPUn-1 and each has a row; a truncated table is a problem unless
    `allow_partial` (and some row is there). Returns the truncation note ("" for a whole table)."""
    h = t.header
    if gpus and gpus != [f"GPU{i}" for i in range(len(gpus))]:
        # a device's index is its position: GPU1 alone would become gpu0 and bind ranks to the wrong GPU
        ps.add(
            h.devices[gpu_cols[0]].at(h.line),
            f"the GPU columns are {_ranges(gpus)}; nvidia-smi numbers the GPUs it sees GPU0..GPU{len(gpus) - 1} "
            "in order, and a placement binds ranks by that number: paste the whole table",
        )
    present = [g for g in gpus if g in seen]
    missing = [g for g in gpus if g not in seen]
    if not missing:
        return ""
    have = f"rows are present only for {_ranges(present)}" if present else "no GPU rows are present"
    truncated = (
        f"table truncated: the header lists {len(gpus)} GPUs ({_ranges(gpus)}) but {have}; "
        f"missing rows {_ranges(missing)}"
    )
    if t.end is not None:
        shown = t.end[1] if len(t.end[1]) <= 40 else t.end[1][:37] + "..."
        truncated += f"; the rows stop at line {t.end[0]} ('{shown}')"
    if not allow_partial:
        ps.add(h.devices[0].at(h.line), truncated + " (allow_partial=True fills them)")
    elif not present:
        ps.add(h.devices[0].at(h.line), truncated + "; nothing to fill them from (allow_partial=True)")
    return truncated


def _fill(
    grid: _Grid, gpu_cols: list[int], nic_cols: list[int]
) -> tuple[list[list[str]], list[list[str]], str]:
    """The GPU-GPU matrix and the GPU-NIC codes from the grid: a missing cell from its mirror, else (both rows
    missing) the most common GPU-GPU code seen, and SYS for GPU-NIC; with a note of what was filled."""
    common = Counter(
        grid.codes[i, j][0] for i in gpu_cols for j in gpu_cols if i != j and (i, j) in grid.codes
    ).most_common(1)
    fill = common[0][0] if common else "SYS"
    by_symmetry = by_common = nic_filled = 0
    matrix: list[list[str]] = []
    for i in gpu_cols:
        out: list[str] = []
        for j in gpu_cols:
            if i == j:
                out.append("X")
            elif (i, j) in grid.codes:
                out.append(grid.codes[i, j][0])
            elif (j, i) in grid.codes:
                out.append(grid.codes[j, i][0])
                by_symmetry += 1
            else:
                out.append(fill)
                by_common += 1
        matrix.append(out)
    gpu_nic: list[list[str]] = []
    for i in gpu_cols:
        cells: list[str] = []
        for k in nic_cols:
            got = grid.codes.get((i, k)) or grid.codes.get((k, i))
            cells.append(got[0] if got else "SYS")
            nic_filled += got is None
        gpu_nic.append(cells)
    # each unordered pair was counted twice above (once per direction)
    note = (
        f"allow_partial=True filled {by_common // 2} GPU pair(s) whose rows are both "
        f"missing with {fill} (the most common GPU-GPU code seen) and {by_symmetry} pair(s) from the "
        "present row by symmetry"
    )
    if nic_filled:
        note += f"; {nic_filled} GPU-NIC cell(s) with no row on either side set to SYS (rail None)"
    return matrix, gpu_nic, note


def _resolve_nics(
    header: list[str], legend: dict[str, tuple[str, str]], ps: Problems, warnings: list[str]
) -> list[str]:
    nics = [legend[n][0] if n in legend else n for n in header]
    unresolved = [n for n in header if re.fullmatch(r"NIC\d+", n) and n not in legend]
    if legend and unresolved:
        warnings.append(f"NIC Legend has no entry for {', '.join(unresolved)}; keeping the header name")
    seen: dict[str, str] = {}
    for name, dev in zip(header, nics, strict=True):
        if dev in seen:
            at = legend[name][1] if name in legend else legend[seen[dev]][1]
            ps.add(at, f"NIC Legend gives {seen[dev]} and {name} the same device name '{dev}'")
        seen[dev] = name
    return nics
