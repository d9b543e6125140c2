"""CPU and NUMA affinity of each device of a node type (nvidia-smi's "CPU Affinity" / "NUMA Affinity" columns):
read from a cluster file's node type, parsed into CPU sets, and written back by the importers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the cluster reader imports this module: no import back at run time
    from placement.io.native.document import _Reader

__all__ = ["affinity_fields", "cpu_list", "node_type_affinity", "parse_cpu_list"]

_CPU_LIST_RE = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")
MAX_CPU = 65535
"""The largest CPU number a list may name (Linux NR_CPUS is at most 8192): a list from a request (the server reads
NodeType.cpu_affinity) cannot make the parser allocate without bound."""


def _intervals(text: str) -> list[tuple[int, int]]:
    """The CPU ranges of a Linux CPU list, sorted and merged (adjacent ones too); ValueError when it is not one.
    Linear in the text's length (up to the sort), whatever the ranges span."""
    t = text.replace(" ", "")
    if not _CPU_LIST_RE.fullmatch(t):
        raise ValueError(f"{text!r} is not a CPU list like 0-47,96-143")
    ranges: list[tuple[int, int]] = []
    for part in t.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"{text!r}: range {part} runs backwards")
        if b > MAX_CPU:
            raise ValueError(f"{text!r}: CPU {b} is above {MAX_CPU}")
        ranges.append((a, b))
    merged: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def parse_cpu_list(text: str) -> list[int]:
    """``"0-3,8"`` -> [0, 1, 2, 3, 8]; ValueError when `text` is not a Linux CPU list (or names a CPU above
    MAX_CPU)."""
    return [c for a, b in _intervals(text) for c in range(a, b + 1)]


def _canonical(text: str) -> str:
    """``cpu_list(parse_cpu_list(text))`` without listing the CPUs: what the reader keeps of a file's entry."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in _intervals(text))


def cpu_list(cpus: Sequence[int]) -> str:
    """[0, 1, 2, 3, 8] -> ``"0-3,8"`` (the form taskset, numactl and OpenMPI rankfiles read)."""
    parts: list[str] = []
    xs = sorted(set(cpus))
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(parts)


def node_type_affinity(
    r: _Reader,
    d: Mapping[str, Any],
    path: str,
    devices: int,
    from_smi: tuple[Sequence[str | None], Sequence[int | None]] | None,
) -> tuple[tuple[str | None, ...] | None, tuple[int | None, ...] | None]:
    """(`cpu_affinity`, `numa_affinity`) of a node type: the file's lists (one entry per device, null = unknown;
    also "" / -1, what the NodeType message carries for unknown), else what its nvidia_smi table says; None when
    nothing is known."""
    cpu: tuple[str | None, ...] | None = None
    numa: tuple[int | None, ...] | None = None
    if from_smi is not None:
        if any(c is not None for c in from_smi[0]):
            cpu = tuple(from_smi[0])
        if any(n is not None for n in from_smi[1]):
            numa = tuple(from_smi[1])
    if d.get("cpu_affinity") is not None:
        items = r.lst(d["cpu_affinity"], f"{path}.cpu_affinity")
        vals: list[str | None] = []
        for i, c in enumerate(items):
            if c is None or c == "":  # "": unknown in the message
                vals.append(None)
                continue
            try:
                vals.append(_canonical(str(c)))
            except ValueError as e:
                r.ps.add(f"{path}.cpu_affinity[{i}]", str(e))
                vals.append(None)
        cpu = tuple(vals)
    if d.get("numa_affinity") is not None:
        items = r.lst(d["numa_affinity"], f"{path}.numa_affinity")
        if all(x is None or (isinstance(x, int) and not isinstance(x, bool) and x >= -1) for x in items):
            numa = tuple(None if x == -1 else x for x in items)  # -1: unknown in the message
        else:
            r.ps.add(
                f"{path}.numa_affinity",
                f"must be NUMA node numbers (>= 0), or null / -1 for unknown, got {items!r}",
            )
    for key, val in (("cpu_affinity", cpu), ("numa_affinity", numa)):
        if val is not None and len(val) != devices:
            r.ps.add(
                f"{path}.{key}",
                f"has {len(val)} entries for {devices} devices (one per device, null = unknown)",
            )
    return cpu, numa


def affinity_fields(cpu: Sequence[str | None], numa: Sequence[int | None]) -> dict[str, list[Any]]:
    """The node-type keys an importer writes: ``cpu_affinity`` / ``numa_affinity`` when any entry is known."""
    out: dict[str, list[Any]] = {}
    if any(c is not None for c in cpu):
        out["cpu_affinity"] = list(cpu)
    if any(n is not None for n in numa):
        out["numa_affinity"] = list(numa)
    return out
