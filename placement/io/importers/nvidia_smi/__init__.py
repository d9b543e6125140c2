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

__all__ = ["NvidiaSmiTopology", "nvlink_count", "parse_nvidia_smi", "read_nvidia_smi"]


from pathlib import Path

from placement.errors import InputError, Problem, Problems
from placement.io.importers.detect import refuse_other_format
from placement.io.importers.nvidia_smi.build import _build
from placement.io.importers.nvidia_smi.scan import _attach_legends, _scan, _split_lines
from placement.io.importers.nvidia_smi.table import NvidiaSmiTopology, nvlink_count
from placement.io.text import read_text

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
    refuse_other_format(
        text, source, "nvidia-smi"
    )  # rocm-smi, NCCL XML...: one line naming the right importer

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


def read_nvidia_smi(
    path: str | Path, *, table: int | None = None, allow_partial: bool = False
) -> NvidiaSmiTopology:
    """Read and parse a file holding `nvidia-smi topo -m` output; errors name the file as their source."""
    source = str(path)
    return parse_nvidia_smi(read_text(path, source), source, table=table, allow_partial=allow_partial)
