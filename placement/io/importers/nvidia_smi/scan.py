"""Scanning a paste into tables: headers, rows, split and glued cells, NIC legends; no validation of
what the cells mean."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from placement.errors import Problems
from placement.io.importers.nvidia_smi.table import (
    _AFF_LIKE_RE,
    _CODE_ALT,
    _CODE_PART_RE,
    _CODE_RE,
    _DEVICE_RE,
    _GLUED_AFF_RE,
    _GLUED_CODES_RE,
    _GLUED_NAMES_RE,
    _GPU_RE,
    _LABEL_RE,
    _LABELS,
    _LEGEND_ENTRY_RE,
    _LEGEND_HEAD_RE,
    _NAME_PART_RE,
    _SEPARATOR_RE,
    _TOKEN_RE,
)

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
