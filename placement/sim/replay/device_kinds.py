"""Device kinds a replay's cluster names that the cost model does not know (traces' G2, T4, P100, V100M16...):
known ones mapped to datasheet numbers, the rest priced as a stated fallback kind, each counted. Owns `resolve_kinds`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from placement.cost.compute import device_kind
from placement.model.devices import DEVICE_KINDS, DeviceKind
from placement.model.topology import Topology

__all__ = ["FALLBACK_KIND", "TRACE_KINDS", "resolve_kinds"]

TRACE_KINDS: Mapping[str, DeviceKind] = {
    k.name: k
    for k in (
        # NVIDIA datasheets: peak dense FP16 tensor TFLOP/s (P100: FP16, no tensor cores), memory GB
        DeviceKind("T4", 65.0, 16.0),
        DeviceKind("P100", 18.7, 16.0),
        DeviceKind("A10", 125.0, 24.0),
        DeviceKind("V100M16", 125.0, 16.0),  # Alibaba's names for the V100 16 GB and 32 GB
        DeviceKind("V100M32", 125.0, 32.0),
    )
}
"""Trace GPU names the built-in table lacks, with their datasheet numbers."""

FALLBACK_KIND = "V100"
"""Kinds with no datasheet (openb's anonymized G2, G3; a bare ``gpu``) are priced as this kind (the oldest of the
built-in table), so that no job has a modeled step of 0; every such device is counted in the notes."""


def resolve_kinds(
    doc: Mapping[str, Any], topology: Topology, fallback: str = FALLBACK_KIND
) -> tuple[dict[str, Any], list[str]]:
    """The cluster document with a ``device_kinds`` entry for every device kind of `topology` that the cost
    model cannot price, and one note per such kind (how many devices, what it is priced as). A document whose
    kinds are all known comes back unchanged, with no notes."""
    fb = DEVICE_KINDS.get(fallback)
    if fb is None:
        raise ValueError(f"fallback kind {fallback!r} is not one of {sorted(DEVICE_KINDS)}")
    counts = Counter(d.kind for d in topology.devices)
    added: list[dict[str, Any]] = []
    notes: list[str] = []
    for kind in sorted(counts):
        if device_kind(kind, topology) is not None:
            continue
        known = TRACE_KINDS.get(kind) or TRACE_KINDS.get(kind.strip().upper())
        if known is not None:
            added.append({"name": kind, "tflops": known.tflops, "memory_gb": known.memory_gb})
            notes.append(
                f"device kind {kind!r} ({counts[kind]} devices): priced from its datasheet, "
                f"{known.tflops:g} TFLOP/s, {known.memory_gb:g} GB"
            )
        else:
            added.append({"name": kind, "tflops": fb.tflops, "memory_gb": fb.memory_gb})
            notes.append(
                f"device kind {kind!r} ({counts[kind]} devices) is unknown: priced as the fallback "
                f"{fb.name} ({fb.tflops:g} TFLOP/s, {fb.memory_gb:g} GB)"
            )
    if not added:
        return dict(doc), []
    out = dict(doc)
    out["device_kinds"] = [*(doc.get("device_kinds") or []), *added]
    return out, notes
