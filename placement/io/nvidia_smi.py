"""Parse the text `nvidia-smi topo -m` prints (and messy pastes of it) into a validated GPU link matrix.

Owns link-code validation and normalization, NIC-legend resolution, rails and CPU/NUMA affinity per GPU.

Accepted mess: markdown fences, shell prompts and prose around the table, Legend / NIC Legend sections,
tabs or spaces, padded cells (``\\t X \\t``), glued cells (``NV1NV2``, ``SYS0-19``, ``GPU7mlx5_0``),
multi-word trailing headers (``CPU Affinity``, ``NUMA Affinity``, ``GPU NUMA ID``) with empty or ``N/A``
cells, NIC rows without affinity, ``|`` table borders and ``>`` quote markers, several tables in one file.

Rails rule (per GPU; the rail index is the position of a NIC in the natural sort of NIC names):

* no NIC columns, or the closest NIC is only reachable through ``SYS`` -> ``None``;
* exactly one NIC has the best code (NV# < PIX < PXB < PHB < NODE < SYS) -> that NIC's rail;
* several NICs tie for closest: GPUs that tie over the *same* NIC set at ``PIX`` or ``PXB`` (i.e. behind the
  same PCIe switch), and are exactly as many as the NICs in that set, are paired one to one in order
  (k-th such GPU in table order -> k-th NIC by name), the DGX-A100 layout; any other tie -> ``None``
  and a warning, because picking a NIC by name would be arbitrary.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from placement.errors import InputError, Problem, Problems
from placement.io.detect import refuse_other_format

__all__ = ["NvidiaSmiTopology", "nvlink_count", "parse_nvidia_smi", "read_nvidia_smi"]

_CODE_ALT = r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC"
_CODE_RE = re.compile(rf"(?:{_CODE_ALT})")
_CODE_PART_RE = re.compile(_CODE_ALT)
_GLUED_CODES_RE = re.compile(rf"(?:{_CODE_ALT})+")
# codes glued to a following affinity cell; only when the last code is not NV# (NV12 + 0-23 is ambiguous)
_GLUED_AFF_RE = re.compile(rf"((?:{_CODE_ALT})*(?:X|PIX|PXB|PHB|NODE|SYS|SOC))(\d[\d,\-]*)")
_AFF_LIKE_RE = re.compile(r"[Nn]/?[Aa]|\d\S*")
_LABEL_RE = re.compile(r"CPU\s*Affinity|NUMA\s*Affinity|GPU\s*NUMA\s*ID", re.IGNORECASE)
_LABELS = {"cpuaffinity": "CPU Affinity", "numaaffinity": "NUMA Affinity", "gpunumaid": "GPU NUMA ID"}
_NAME_PART_RE = re.compile(r"GPU\d+|NIC\d+|mlx\d+_\d+")
_GLUED_NAMES_RE = re.compile(r"(?:GPU\d+|NIC\d+|mlx\d+_\d+)+")
_DEVICE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.:\-]*\d")
_GPU_RE = re.compile(r"GPU(\d+)")
_LEGEND_HEAD_RE = re.compile(r"\s*NIC\s*Legend\s*:?\s*", re.IGNORECASE)
_LEGEND_ENTRY_RE = re.compile(r"\s*(NIC\d+)\s*[:=]\s*(\S+)\s*")
_SEPARATOR_RE = re.compile(r"[\s|:+=\-]*-[\s|:+=\-]*")
_CPU_LIST_RE = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")
_TOKEN_RE = re.compile(r"\S+")
_EXPECTED_CODES = "expected X, NV<n> (n >= 1), PIX, PXB, PHB, NODE or SYS (legacy SOC)"
_NV_GLUED_HINT = "; it looks like NV<n> glued to the CPU Affinity (ambiguous: put a space between them)"
# closeness of a GPU to a NIC, best first; NV# (a NIC behind NVLink, rare) counts as closest
_NIC_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}
_SYS_RANK = _NIC_RANK["SYS"]
_SWITCH_RANK = _NIC_RANK["PXB"]


@dataclass(frozen=True)
class NvidiaSmiTopology:
    """One `nvidia-smi topo -m` table, validated and normalized.

    `matrix[i][j]` is the GPU i -> GPU j code ("X" on the diagonal, "NV12", "PIX", "PXB", "PHB", "NODE",
    "SYS"); `gpu_nic[i][k]` is GPU i -> `nics[k]`; `rails[i]` is the rail of GPU i (see the module doc).
    """

    gpus: tuple[str, ...]
    matrix: tuple[tuple[str, ...], ...]
    nics: tuple[str, ...]
    gpu_nic: tuple[tuple[str, ...], ...]
    rails: tuple[int | None, ...]
    cpu_affinity: tuple[str | None, ...]
    numa_affinity: tuple[int | None, ...]
    warnings: tuple[str, ...]


def nvlink_count(code: str) -> int:
    """Number of bonded NVLinks a link code stands for: ``"NV12"`` -> 12, anything else -> 0."""
    m = re.fullmatch(r"NV(\d+)", code.strip())
    return int(m.group(1)) if m else 0


# --------------------------------------------------------------------------------------------- scanning


@dataclass
class _Tok:
    text: str
    col: int  # 0-based character offset in the raw line
    ecol: int  # 0-based column with tabs expanded to 8 (for aligning affinity cells)

    def at(self, line: int) -> str:
        return f"line {line}, column {self.col + 1}"


@dataclass
class _Header:
    line: int
    devices: list[_Tok]
    labels: list[_Tok]  # canonical trailing labels ("CPU Affinity", ...) with their columns
    glued: list[str]


@dataclass
class _Row:
    line: int
    label: _Tok
    cells: list[_Tok]  # link-code cells (letters first)
    aff: list[_Tok]  # affinity cells (digits or N/A)
    stray: list[_Tok]  # code-like cells after the affinity cells
    glued: list[str]


@dataclass
class _Table:
    header: _Header
    rows: list[_Row] = field(default_factory=list)
    legend: dict[str, tuple[str, str]] = field(default_factory=dict)  # NICn -> (device, "line L, column C")
    end: tuple[int, str] | None = None  # the line that ended the rows, when not the end of the input


def _tok(raw: str, text: str, col: int) -> _Tok:
    return _Tok(text, col, len(raw[:col].expandtabs(8)))


def _clean(raw: str) -> str:
    """Blank out quote markers, table borders and zero-width characters, keeping every column in place."""
    line = re.sub(r"[\u200b\ufeff|]", " ", raw)
    m = re.match(r"\s*(?:>\s*)+", line)
    return " " * m.end() + line[m.end() :] if m else line


def _valid_code(text: str) -> bool:
    return _normalize(text) is not None


def _normalize(text: str) -> str | None:
    """The normalized code (SOC -> SYS, NV012 -> NV12), or None when `text` is not a link code."""
    if text in ("X", "PIX", "PXB", "PHB", "NODE", "SYS"):
        return text
    if text == "SOC":
        return "SYS"
    m = re.fullmatch(r"NV(\d+)", text)
    if m and int(m.group(1)) >= 1:
        return f"NV{int(m.group(1))}"
    return None


def _try_header(no: int, raw: str, line: str) -> _Header | _Tok | None:
    """The header on this line; or, when the line starts like one (GPU0 ...), the cell that spoils it."""
    labels: list[_Tok] = []
    chars = list(line)
    for m in _LABEL_RE.finditer(line):
        key = re.sub(r"\s+", "", m.group()).lower()
        labels.append(_tok(raw, _LABELS[key], m.start()))
        chars[m.start() : m.end()] = " " * (m.end() - m.start())
    devices: list[_Tok] = []
    glued: list[str] = []
    for m in _TOKEN_RE.finditer("".join(chars)):
        text = m.group()
        spoiler = _tok(raw, text, m.start()) if devices and _GPU_RE.fullmatch(devices[0].text) else None
        if labels and m.start() > labels[0].col:
            return spoiler
        if _GLUED_NAMES_RE.fullmatch(text):
            parts = [_tok(raw, p.group(), m.start() + p.start()) for p in _NAME_PART_RE.finditer(text)]
            if len(parts) > 1:
                split = " | ".join(p.text for p in parts)
                glued.append(f"line {no}, column {m.start() + 1}: glued header '{text}' split into {split}")
            devices.extend(parts)
        elif _DEVICE_RE.fullmatch(text) and not _GLUED_CODES_RE.fullmatch(text):
            devices.append(_tok(raw, text, m.start()))
        else:
            spoiled = spoiler is not None and (len(devices) > 1 or not _valid_code(text))
            return spoiler if spoiled else None  # "GPU0  X  NV1 ..." is a row, not a spoiled header
    if not devices or not _GPU_RE.fullmatch(devices[0].text):
        return None
    return _Header(no, devices, labels, glued)


def _split_cell(raw: str, text: str, col: int) -> list[_Tok]:
    if _CODE_RE.fullmatch(text) or _AFF_LIKE_RE.fullmatch(text):
        return [_tok(raw, text, col)]
    if _GLUED_CODES_RE.fullmatch(text):
        return [_tok(raw, p.group(), col + p.start()) for p in _CODE_PART_RE.finditer(text)]
    m = _GLUED_AFF_RE.fullmatch(text)
    if m:
        codes = [_tok(raw, p.group(), col + p.start()) for p in _CODE_PART_RE.finditer(m.group(1))]
        return [*codes, _tok(raw, m.group(2), col + m.start(2))]
    return [_tok(raw, text, col)]


def _label_re(names: Iterable[str]) -> re.Pattern[str]:
    escaped = (re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    alts = "|".join([*escaped, _NAME_PART_RE.pattern])
    return re.compile(rf"(?:{alts})(?=\s|$|{_CODE_ALT})")


_GENERIC_LABEL_RE = _label_re([])


def _try_row(no: int, raw: str, line: str, label_re: re.Pattern[str]) -> _Row | None:
    start = len(line) - len(line.lstrip())
    m = label_re.match(line, start)
    if not m:
        return None
    parts: list[_Tok] = []
    glued: list[str] = []
    if m.end() < len(line) and not line[m.end()].isspace():
        at = f"line {no}, column {start + 1}"
        glued.append(f"{at}: row label glued to its first cell; split after {m.group()}")
    for t in _TOKEN_RE.finditer(line, m.end()):
        split = _split_cell(raw, t.group(), t.start())
        if len(split) > 1:
            names = " | ".join(p.text for p in split)
            glued.append(f"line {no}, column {t.start() + 1}: glued cells '{t.group()}' split into {names}")
        parts.extend(split)
    cells: list[_Tok] = []
    aff: list[_Tok] = []
    stray: list[_Tok] = []
    for p in parts:
        if _AFF_LIKE_RE.fullmatch(p.text):
            aff.append(p)
        elif aff:
            stray.append(p)
        else:
            cells.append(p)
    if not any(_valid_code(c.text) for c in cells):
        return None  # prose that happens to start with "GPU0"
    return _Row(no, _tok(raw, m.group(), start), cells, aff, stray, glued)


def _split_lines(text: str) -> list[str]:
    return re.split(r"\r\n|\r|\n", text.removeprefix("\ufeff"))


def _scan(lines: Sequence[str]) -> tuple[list[_Table], list[str]]:
    """All tables in `lines`, plus hints for the "no table" message (headerless rows, spoiled headers)."""
    tables: list[_Table] = []
    current: _Table | None = None
    hints: list[str] = []
    orphan = False
    for no, raw in enumerate(lines, 1):
        line = _clean(raw)
        if current is not None:
            if not line.strip() or _SEPARATOR_RE.fullmatch(line):
                continue
            if not isinstance(_try_header(no, raw, line), _Header):
                names = (d.text for d in current.header.devices)
                row = _try_row(no, raw, line, _label_re(names))
                if row is not None:
                    current.rows.append(row)
                    continue
            current.end = (no, line.strip())
            current = None
        header = _try_header(no, raw, line)
        if isinstance(header, _Header):
            current = _Table(header)
            tables.append(current)
        elif isinstance(header, _Tok) and len(hints) < 3:
            hints.append(
                f"line {no} starts like a header but '{header.text}' ({header.at(no)}) "
                "is not a GPU or NIC name"
            )
        elif not orphan and _try_row(no, raw, line, _GENERIC_LABEL_RE) is not None:
            orphan = True
            hints.append(f"line {no} looks like a table row but has no header line above it")
    if any(t.rows for t in tables):
        tables = [t for t in tables if t.rows]  # a lone header-like line next to real tables is prose
    return tables, hints


def _attach_legends(lines: Sequence[str], tables: list[_Table], ps: Problems) -> None:
    """Give each `NIC Legend:` block to the table printed just before it (or the first table)."""
    block: dict[str, tuple[str, str]] | None = None
    for no, raw in enumerate(lines, 1):
        line = _clean(raw)
        if _LEGEND_HEAD_RE.fullmatch(line):
            before = [t for t in tables if t.header.line < no]
            block = (before[-1] if before else tables[0]).legend
            continue
        if block is None or not line.strip():
            continue
        m = _LEGEND_ENTRY_RE.fullmatch(line)
        if m is None:
            block = None
            continue
        nic, dev, at = m.group(1), m.group(2), f"line {no}, column {m.start(2) + 1}"
        if nic in block and block[nic][0] != dev:
            ps.add(
                at,
                f"NIC Legend maps {nic} to '{dev}' but {block[nic][1]} maps it to '{block[nic][0]}'; "
                "each NIC has one device name",
            )
        else:
            block[nic] = (dev, at)


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
    gpu_cols = [j for j, x in enumerate(names) if _GPU_RE.fullmatch(x) and index[x] == j]
    nic_cols = [j for j, x in enumerate(names) if not _GPU_RE.fullmatch(x) and index[x] == j]
    warnings.extend(h.glued)

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
    _check_symmetry(names, grid, ps)

    gpus = [names[j] for j in gpu_cols]
    present = [names[j] for j in gpu_cols if names[j] in seen]
    missing = [names[j] for j in gpu_cols if names[j] not in seen]
    truncated = ""
    if missing:
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
    ps.raise_if_any()

    if grid.soc:
        warnings.append(
            f"legacy code SOC (nvidia-smi before 2017) normalized to SYS in {len(grid.soc)} cell(s), "
            f"first at {grid.soc[0]}"
        )
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
    if missing:
        # each unordered pair was counted twice above (once per direction)
        msg = (
            f"{truncated}; allow_partial=True filled {by_common // 2} GPU pair(s) whose rows are both "
            f"missing with {fill} (the most common GPU-GPU code seen) and {by_symmetry} pair(s) from the "
            "present row by symmetry"
        )
        if nic_filled:
            msg += f"; {nic_filled} GPU-NIC cell(s) with no row on either side set to SYS (rail None)"
        warnings.append(msg)

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


# ------------------------------------------------------------------------------------------ public API


def parse_nvidia_smi(
    text: str, source: str = "<nvidia-smi>", *, table: int | None = None, allow_partial: bool = False
) -> NvidiaSmiTopology:
    """Parse the text `nvidia-smi topo -m` prints, or a paste that contains it.

    `table` picks one of several tables (0-based; default: the first, with a warning when there are more).
    `allow_partial` accepts a table with missing GPU rows: pairs with one row present are taken by symmetry,
    pairs with both rows missing get the most common GPU-GPU code seen; a warning gives the counts.
    Raises `InputError` naming every problem with its line and column.
    """
    ps = Problems(source)
    if table is not None and (isinstance(table, bool) or not isinstance(table, int) or table < 0):
        ps.add("table", f"must be a table index >= 0 (0-based) or None, got {table!r}")
    lines = _split_lines(text)
    if not text.strip():
        ps.add("line 1, column 1", "the input is empty; expected the text printed by `nvidia-smi topo -m`")
    ps.raise_if_any()
    refuse_other_format(text, source, "nvidia-smi")  # rocm-smi, NCCL XML...: one line naming the right importer

    tables, hints = _scan(lines)
    if not tables:
        msg = (
            "no `nvidia-smi topo -m` table found: expected a header line listing GPU0, GPU1, ... "
            "(then NICs and CPU Affinity, optionally) followed by one row per GPU"
        )
        msg += "".join(f"; {h}" for h in hints)
        last = len(lines) - (lines[-1] == "")
        raise InputError(source, [Problem(f"lines 1-{max(last, 1)}", msg)])
    warnings: list[str] = []
    if table is None:
        table = 0
        if len(tables) > 1:
            at = ", ".join(str(t.header.line) for t in tables)
            warnings.append(
                f"the input holds {len(tables)} nvidia-smi tables (headers at lines {at}); using the first "
                f"(table=0); pass table=<index> (0-based, 0..{len(tables) - 1}) to choose another"
            )
    elif table >= len(tables):
        raise InputError(
            source,
            [
                Problem(
                    "table",
                    f"table={table} is out of range: the input holds {len(tables)} table(s) "
                    f"(valid: 0..{len(tables) - 1}, 0-based)",
                )
            ],
        )
    _attach_legends(lines, tables, ps)
    return _build(tables[table], ps, allow_partial, warnings)


def _decode(data: bytes, source: str) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # PowerShell `>` writes UTF-16
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            problem = Problem(f"byte {exc.start}", f"not valid UTF-16: {exc.reason}")
            raise InputError(source, [problem]) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        head = data[: exc.start]
        line = head.count(b"\n") + 1
        col = exc.start - (head.rfind(b"\n") + 1) + 1
        raise InputError(
            source,
            [Problem(f"line {line}, column {col}", f"byte 0x{data[exc.start]:02x} is not valid UTF-8")],
        ) from None


def read_nvidia_smi(
    path: str | Path, *, table: int | None = None, allow_partial: bool = False
) -> NvidiaSmiTopology:
    """Read and parse a file holding `nvidia-smi topo -m` output; errors name the file as their source."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(source, [Problem("file", f"cannot be read: {exc.strerror or exc}")]) from None
    return parse_nvidia_smi(_decode(data, source), source, table=table, allow_partial=allow_partial)
