"""Mapping files: a list of device ids, ``{rank: device}``, a result's ``mapping`` or a PlaceResponse. One parser
(`parse_mapping`: shape, ranks, limits) behind both readers: device indices of a topology, and launch seats."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from placement.errors import Problems
from placement.io.native.doc_kinds import wrong_kind
from placement.io.native.document import load_document, short
from placement.limits import current_limits, tick
from placement.model.topology import Topology

__all__ = ["load_mapping", "mapping_from_obj", "parse_mapping"]

T = TypeVar("T")

Resolve = Callable[[int, Any, str, Problems], T | None]
"""(rank, device as written, field path, problems) -> the device as the caller needs it, or None after adding a
problem."""


def _unwrap(doc: Any) -> tuple[Any, str]:
    """The mapping part of a document and its field path: a PlaceResponse's ``result.mapping``, a result's
    ``mapping``, or the document itself (a plain mapping)."""
    if isinstance(doc, dict) and isinstance(doc.get("result"), dict) and "mapping" not in doc:
        doc = doc["result"]
    if isinstance(doc, dict) and "mapping" in doc:
        return doc["mapping"], "mapping"
    return doc, ""


def _entries(doc: Any, base: str, ps: Problems) -> list[tuple[int, Any, str]]:
    """(rank, device as written, field path) per entry of a list, ``{rank: device}`` or ``[{rank, device}]``."""
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
    return pairs


def parse_mapping(doc: Any, source: str, resolve: Resolve[T]) -> list[T]:
    """Each rank's device in rank order, as `resolve` turns what the document names into what the caller needs.

    The document is a list of device ids (rank order), ``{rank: device}``, or ``[{rank, device}, ...]`` (the
    ``mapping`` field of a result); a document with a top-level ``mapping`` key is unwrapped, and so is a
    PlaceResponse (``result.mapping``). Every problem (shape, ranks above ``max_index``, more entries than
    ``max_mapping_entries``, negative or repeated ranks, devices `resolve` rejects, ranks with no device) is
    collected with its field path and raised together as one InputError naming `source`.
    """
    ps = Problems(source)
    wrong = wrong_kind(doc, "result")
    if wrong is not None:  # a job or cluster file given as the mapping: one error, not one per key
        ps.add(wrong.path, wrong.message)
        ps.raise_if_any()
    doc, base = _unwrap(doc)
    pairs = _entries(doc, base, ps)
    ps.raise_if_any()
    n = max((rk for rk, _, _ in pairs), default=-1) + 1
    got: dict[int, T] = {}  # rank -> device: nothing proportional to the largest rank is allocated
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
        resolved = resolve(rk, dev, p, ps)
        if resolved is not None:
            got[rk] = resolved
    missing: list[int] = []
    if len(seen) < n:  # some rank below the largest has no entry: name the first few
        missing = [i for i in range(min(n, len(pairs) + 8)) if i not in seen][:8]
    if missing:
        ps.add(
            base, f"ranks {missing[:8]} have no device; a mapping names a device for every rank 0..{n - 1}"
        )
    ps.raise_if_any()
    return [got[i] for i in range(n)]


def mapping_from_obj(doc: Any, topo: Topology, source: str = "<mapping>") -> list[int]:
    """A mapping document (`parse_mapping`) as device indices of `topo`, in rank order."""

    def index(rank: int, dev: Any, path: str, ps: Problems) -> int | None:
        di = topo.device_index(str(dev)) if isinstance(dev, str) else None
        if di is None:
            ps.add(
                path, f"unknown device {short(dev)}; devices are named host/gpuK, e.g. {topo.devices[0].id}"
            )
        return di

    return parse_mapping(doc, source, index)


def load_mapping(path: str | Path, topo: Topology) -> list[int]:
    return mapping_from_obj(load_document(path), topo, str(path))
