"""Read the text `rocm-smi --showtopo` prints (AMD) into one node's link matrix, with stated defaults per GPU model.

Owns the rocm-smi tables (weight, hops, link type, NUMA) and their mapping onto the nvidia-smi codes.

The output has sections headed ``=== Weight between two GPUs ===``, ``Hops between two GPUs``, ``Link Type
between two GPUs`` (``XGMI`` / ``PCIE``) and ``Numa Nodes`` (``GPU[0] : (Topology) Numa Node: 0``), each table
a header ``GPU0 GPU1 ...`` and one row per GPU (ROCm's rocm_smi_lib documents them; the weight is 15 per xGMI
hop and 20 per PCIe segment). It does not say how many xGMI links a pair has, so a model's defaults fill it in:

* ``XGMI`` at 1 hop -> ``NV<links>``; at more hops (routed through another GPU) -> ``NV1`` with a warning;
* ``PCIE`` -> ``SYS`` when the two GPUs are on different NUMA nodes, else ``PIX`` (<= 2 hops), ``PXB`` (3),
  ``PHB`` (more);
* every pair ``XGMI`` at 1 hop (MI300X's full mesh) -> no matrix and ``mesh_link_gbps = links x per-link``.

Defaults (`MODELS`; per link and direction, AMD Instinct datasheets): MI300X 64 GB/s x 1 link per pair (7
links per GPU), MI250 50 GB/s x 1, MI100 46 GB/s x 1, MI355X 76.8 GB/s x 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from placement.errors import InputError, Problem, Problems
from placement.io.importers.detect import refuse_other_format
from placement.io.importers.nccl_xml import NodeTopology
from placement.io.text import read_text

__all__ = ["MODELS", "RocmModel", "parse_rocm_smi", "read_rocm_smi"]


@dataclass(frozen=True)
class RocmModel:
    """Stated defaults of one AMD GPU model: xGMI GB/s per link and direction, links per directly linked pair."""

    kind: str
    link_gbps: float
    links: int


MODELS: dict[str, RocmModel] = {
    "MI300X": RocmModel("MI300X", 64.0, 1),
    "MI250": RocmModel("MI250", 50.0, 1),
    "MI100": RocmModel("MI100", 46.0, 1),
    "MI355X": RocmModel("MI355X", 76.8, 1),
}

_SECTION_RE = re.compile(r"^\s*=+\s*(.*?)\s*=+\s*$")
_NUMA_RE = re.compile(r"^\s*GPU\[(\d+)\]\s*:\s*\(Topology\)\s*Numa Node\s*:\s*(-?\d+)", re.I)
_GPU_RE = re.compile(r"GPU(\d+)")
_TABLES = {"weight": "Weight", "hops": "Hops", "link type": "Link Type", "access": "Access"}


@dataclass
class _Table:
    title: str
    line: int
    gpus: list[str]
    rows: dict[str, tuple[int, list[str]]]


def _scan(lines: list[str], ps: Problems) -> tuple[dict[str, _Table], dict[int, int]]:
    tables: dict[str, _Table] = {}
    numa: dict[int, int] = {}
    current: _Table | None = None
    for no, line in enumerate(lines, 1):
        m = _SECTION_RE.match(line)
        if m:
            title = m.group(1).lower()
            key = next((k for k in _TABLES if title.startswith(k) and "between two gpus" in title), None)
            current = None
            if key is not None:
                current = _Table(_TABLES[key], no, [], {})
                tables[key] = current
            continue
        nm = _NUMA_RE.match(line)
        if nm:
            numa[int(nm.group(1))] = int(nm.group(2))
            continue
        cells = line.split()
        if current is None or not cells:
            continue
        if not current.gpus and all(_GPU_RE.fullmatch(c) for c in cells):
            current.gpus = cells
        elif current.gpus and _GPU_RE.fullmatch(cells[0]):
            if cells[0] in current.rows:
                ps.add(f"line {no}", f"row {cells[0]} of the {current.title} table appears twice")
            current.rows[cells[0]] = (no, cells[1:])
    return tables, numa


def parse_rocm_smi(text: str, source: str = "<rocm-smi>", *, model: str = "MI300X") -> NodeTopology:
    """Parse `rocm-smi --showtopo` output. `model` picks the defaults (`MODELS`) for link counts and speeds."""
    ps = Problems(source)
    if not text.strip():
        raise InputError(
            source, [Problem("", "the input is empty; expected the text `rocm-smi --showtopo` prints")]
        )
    refuse_other_format(text, source, "rocm-smi")
    if model not in MODELS:
        raise InputError(
            source, [Problem("model", f"unknown GPU model {model!r}; known: {', '.join(MODELS)}")]
        )
    spec = MODELS[model]
    lines = re.split(r"\r\n|\r|\n", text.removeprefix("\ufeff"))
    tables, numa = _scan(lines, ps)
    link = tables.get("link type")
    if link is None or not link.gpus:
        raise InputError(
            source,
            [
                Problem(
                    "",
                    "no `Link Type between two GPUs` table: expected the output of "
                    "`rocm-smi --showtopo` (or --showtopotype)",
                )
            ],
        )
    gpus = link.gpus
    n = len(gpus)
    grids = _grids(tables, gpus, ps)
    ps.raise_if_any()
    types = grids["link type"]
    hops = grids.get("hops")
    warnings: list[str] = []
    if hops is None:
        warnings.append("no `Hops between two GPUs` table: XGMI pairs are taken as 1 hop, PCIe pairs as PXB")
    _check_links(link, types, hops, ps)
    ps.raise_if_any()
    numa_of = [numa.get(int(m.group(1))) if (m := _GPU_RE.fullmatch(g)) else None for g in gpus]
    matrix = _matrix(types, hops, numa_of, spec, warnings)
    full = n > 1 and all(matrix[i][j] == f"NV{spec.links}" for i in range(n) for j in range(n) if i != j)
    if not numa:
        warnings.append("no `Numa Nodes` section: PCIe pairs are not split by NUMA node")
    return NodeTopology(
        gpus=tuple(gpus),
        kind=spec.kind,
        matrix=None if full else tuple(tuple(r) for r in matrix),
        rails=tuple(None for _ in gpus),
        mesh_link_gbps=spec.link_gbps * spec.links if full else None,
        nv_link_gbps=None if full else spec.link_gbps,
        numa=tuple(numa_of),
        cpu_affinity=tuple(None for _ in gpus),
        warnings=tuple(warnings),
    )


def _grids(tables: dict[str, _Table], gpus: list[str], ps: Problems) -> dict[str, list[list[str]]]:
    """Each GPU-by-GPU table (all but Access) as rows of cells, in the Link Type table's GPU order; a table that
    names other GPUs, lacks a row or has a short row is a problem."""
    n = len(gpus)
    grids: dict[str, list[list[str]]] = {}
    for key, t in tables.items():
        if key == "access" or not t.gpus:
            continue
        if t.gpus != gpus:
            ps.add(
                f"line {t.line}",
                f"the {t.title} table lists {', '.join(t.gpus)} but the Link Type table lists "
                f"{', '.join(gpus)}; the tables must name the same GPUs",
            )
            continue
        grid: list[list[str]] = []
        for g in gpus:
            if g not in t.rows:
                ps.add(f"line {t.line}", f"the {t.title} table has no row {g}")
                continue
            no, cells = t.rows[g]
            if len(cells) != n:
                ps.add(f"line {no}", f"row {g} of the {t.title} table has {len(cells)} cells for {n} GPUs")
                continue
            grid.append(cells)
        grids[key] = grid
    return grids


def _check_links(link: _Table, types: list[list[str]], hops: list[list[str]] | None, ps: Problems) -> None:
    """Every pair is XGMI or PCIE, the same both ways, and its hops a whole number."""
    gpus = link.gpus
    n = len(gpus)
    for i in range(n):
        for j in range(n):
            c = types[i][j].upper()
            if i != j and c not in ("XGMI", "PCIE"):
                ps.add(
                    f"line {link.rows[gpus[i]][0]}",
                    f"{gpus[i]} -> {gpus[j]} link type {types[i][j]!r}; expected XGMI or PCIE",
                )
            elif i != j and c != types[j][i].upper():
                ps.add(
                    f"line {link.rows[gpus[i]][0]}",
                    f"{gpus[i]} -> {gpus[j]} is {types[i][j]} but {gpus[j]} -> "
                    f"{gpus[i]} is {types[j][i]}; the table must be symmetric",
                )
            if hops is not None and i != j and not hops[i][j].isdigit():
                ps.add(f"hops {gpus[i]} -> {gpus[j]}", f"{hops[i][j]!r} is not a whole number of hops")


def _matrix(
    types: list[list[str]],
    hops: list[list[str]] | None,
    numa_of: list[int | None],
    spec: RocmModel,
    warnings: list[str],
) -> list[list[str]]:
    """The nvidia-smi codes per GPU pair: XGMI is ``NV<links>`` (``NV1`` when routed through another GPU);
    PCIe is SYS across NUMA nodes, else PIX/PXB/PHB by hops."""
    n = len(types)
    matrix = [["X"] * n for _ in range(n)]
    routed = 0
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            h = int(hops[i][j]) if hops is not None else None
            if types[i][j].upper() == "XGMI":
                if h is not None and h > 1:
                    routed += 1
                    matrix[i][j] = "NV1"
                else:
                    matrix[i][j] = f"NV{spec.links}"
            elif numa_of[i] is not None and numa_of[j] is not None and numa_of[i] != numa_of[j]:
                matrix[i][j] = "SYS"
            else:
                matrix[i][j] = "PXB" if h is None else "PIX" if h <= 2 else "PXB" if h == 3 else "PHB"
    if routed:
        warnings.append(
            f"{routed // 2} XGMI pair(s) are more than 1 hop apart (routed through another GPU); "
            "taken as one xGMI link"
        )
    return matrix


def read_rocm_smi(path: str | Path, *, model: str = "MI300X") -> NodeTopology:
    """Read and parse a file holding `rocm-smi --showtopo` output."""
    return parse_rocm_smi(read_text(path), str(path), model=model)
