"""Mapping files: a list of device ids, ``{rank: device}``, a result's ``mapping`` or a PlaceResponse, into device
indices of a topology."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from placement.errors import Problems
from placement.io.native.document import load_document, short
from placement.io.native.doc_kinds import wrong_kind
from placement.limits import current_limits, tick
from placement.model.topology import Topology


def mapping_from_obj(doc: Any, topo: Topology, source: str = "<mapping>") -> list[int]:
    """A mapping as a list of device ids (rank order), ``{rank: device}``, or ``[{rank, device}, ...]``
    (the ``mapping`` field of a result). A document with a top-level ``mapping`` key is unwrapped, and so is a
    PlaceResponse (``result.mapping``)."""
    ps = Problems(source)
    wrong = wrong_kind(doc, "result")
    if wrong is not None:  # a job or cluster file given as the mapping: one error, not one per key
        ps.add(wrong.path, wrong.message)
        ps.raise_if_any()
    if isinstance(doc, dict) and isinstance(doc.get("result"), dict) and "mapping" not in doc:
        doc = doc["result"]
    if isinstance(doc, dict) and "mapping" in doc:
        doc = doc["mapping"]
        base = "mapping"
    else:
        base = ""
    pairs: list[tuple[int, Any, str]] = []
    if isinstance(doc, list | dict):
        current_limits().check("max_mapping_entries", len(doc), base or "mapping")
    max_rank = current_limits().max_index
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            p = f"{base}[{i}]"
            if isinstance(item, dict):
                rk = item.get("rank", i)
                if not isinstance(rk, int) or isinstance(rk, bool):
                    ps.add(f"{p}.rank", f"must be an integer, got {short(rk)}")
                    continue
                if rk > max_rank:
                    ps.add(f"{p}.rank", f"rank {short(rk)} is above the limit max_index={max_rank}")
                    continue
                pairs.append((rk, item.get("device"), f"{p}.device"))
            else:
                pairs.append((i, item, p))
    elif isinstance(doc, dict):
        for k, dev in doc.items():
            where = f"{base}.{str(k)[:80]}" if base else str(k)[:80]
            try:
                rk = int(k)
            except (TypeError, ValueError, OverflowError):
                ps.add(where, "keys are rank numbers")
                continue
            if rk > max_rank:
                ps.add(where, f"rank {short(rk)} is above the limit max_index={max_rank}")
                continue
            pairs.append((rk, dev, where))
    else:
        ps.add(base, "a mapping is a list of device ids, {rank: device}, or [{rank, device}]")
    ps.raise_if_any()
    n = max((rk for rk, _, _ in pairs), default=-1) + 1
    got: dict[int, int] = {}  # rank -> device: nothing proportional to the largest rank is allocated
    seen: dict[int, str] = {}
    for i, (rk, dev, p) in enumerate(pairs):
        tick(i, "reading the mapping")
        if rk < 0:
            ps.add(p, f"rank {rk} is negative")
            continue
        if rk in seen:
            ps.add(p, f"rank {rk} is mapped twice (also at {seen[rk]})")
            continue
        seen[rk] = p
        di = topo.device_index(str(dev)) if isinstance(dev, str) else None
        if di is None:
            ps.add(p, f"unknown device {short(dev)}; devices are named host/gpuK, e.g. {topo.devices[0].id}")
            continue
        got[rk] = di
    missing: list[int] = []
    if len(seen) < n:  # some rank below the largest has no entry: name the first few
        missing = [i for i in range(min(n, len(pairs) + 8)) if i not in seen][:8]
    if missing:
        ps.add(
            base, f"ranks {missing[:8]} have no device; a mapping names a device for every rank 0..{n - 1}"
        )
    ps.raise_if_any()
    return [got[i] for i in range(n)]


def load_mapping(path: str | Path, topo: Topology) -> list[int]:
    return mapping_from_obj(load_document(path), topo, str(path))
