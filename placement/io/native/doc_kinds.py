"""The kind of a native document (cluster, state, job, serving job, result or mapping, request), told from its keys, so that a
reader handed the wrong file says so in one error; and the closest known key for a mistyped one (did you mean).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any

from placement.errors import Problem

__all__ = ["KIND_KEYS", "closest_key", "document_kind", "wrong_kind"]

KIND_KEYS: dict[str, frozenset[str]] = {
    "cluster": frozenset(
        {"levels", "intra_node_tiers", "rail_policy", "node_types", "generate", "hosts", "device_kinds"}
    ),
    "state": frozenset({"occupied", "failed", "degraded", "links"}),
    "job": frozenset(
        {
            "ranks",
            "device_kind",
            "parallel",
            "model",
            "exposure",
            "groups",
            "edges",
            "constraints",
            "launcher",
        }
    ),
    "serving": frozenset({"pools", "load", "serving"}),
    "result": frozenset(
        {"mapping", "result", "status", "strategy", "cost", "baseline_costs", "baselines", "seconds_per_step"}
    ),
    "request": frozenset(
        {
            "cluster_id",
            "cluster_file",
            "state_file",
            "job_file",
            "job_files",
            "mapping_file",
            "options",
            "jobs",
            "current",
            "drain",
            "spares",
            "spares_only",
            "budget",
        }
    ),
}
"""Keys only one kind of document has at its top level (`name`, `description` and `fault_domains` are shared)."""

_NAMES = {"result": "result or mapping", "mapping": "result or mapping", "serving": "serving job"}
_PARTS = (
    "cluster",
    "state",
    "job",
)  # a request holds these as mappings; a (legacy) result names them as strings


def _rank_key(k: Any) -> bool:
    if isinstance(k, bool):
        return False
    if isinstance(k, int):
        return True
    return isinstance(k, str) and k.strip().isdigit()


def _device_like(v: Any) -> bool:
    return (isinstance(v, str) and "/" in v) or (isinstance(v, dict) and "device" in v)


def document_kind(doc: Any) -> str | None:
    """ "cluster", "state", "job", "serving" (``kind: serving`` or a ``serving:`` key), "result" (a result or a
    mapping) or "request"; None when the keys do not tell.

    A request holds its cluster, state or job as mappings (or names `*_file`s); a result has `mapping` or
    `result`; a mapping is a list of devices or ``{rank: device}``. Otherwise the kind whose own keys
    (`KIND_KEYS`) the document has most of, if one has more than every other.
    """
    if isinstance(doc, list):
        head = doc[:8]
        return "result" if head and all(_device_like(v) for v in head) else None
    if not isinstance(doc, dict) or not doc:
        return None
    if doc.get("kind") == "serving" or isinstance(doc.get("serving"), dict):
        return "serving"  # `placement.io.native.serving`
    keys = {k for k in doc if isinstance(k, str)}
    if keys & KIND_KEYS["request"] or any(isinstance(doc.get(p), dict) for p in _PARTS):
        return "request"
    if keys & {"mapping", "result"}:
        return "result"
    if all(_rank_key(k) for k in doc):
        return "result"
    scores = {kind: len(keys & own) for kind, own in KIND_KEYS.items()}
    best = max(scores.values())
    winners = [kind for kind, s in scores.items() if s == best]
    return winners[0] if best > 0 and len(winners) == 1 else None


def wrong_kind(doc: Any, expected: str) -> Problem | None:
    """One problem saying the document is another kind than `expected`, or None.

    Only when the document has none of the expected kind's own keys (`KIND_KEYS`) and another kind's keys tell
    what it is: a cluster file with one stray key is a cluster file with an unknown field, not a job file.
    """
    kind = document_kind(doc)
    if kind is None or kind == expected or {kind, expected} <= {"result", "mapping"}:
        return None
    said = kind == "serving"  # a serving job says so (kind: serving or a serving: key), whatever else it has
    if not said and isinstance(doc, dict) and expected in KIND_KEYS and set(doc) & KIND_KEYS[expected]:
        return None
    if isinstance(doc, dict):
        own = sorted(k for k in doc if isinstance(k, str) and k in KIND_KEYS[kind])
        if kind == "request" and not own:
            own = [p for p in _PARTS if isinstance(doc.get(p), dict)]
        has = f" (it has {', '.join(own[:4])})" if own else ""
    else:
        has = " (a list of devices)"
    wanted = _NAMES.get(expected, expected)
    return Problem("", f"is a {_NAMES.get(kind, kind)} file{has}, expected a {wanted} file")


def closest_key(key: Any, allowed: Collection[str], present: Mapping[Any, Any] | None = None) -> list[str]:
    """The allowed keys closest to a mistyped `key` (difflib ratio >= 0.6), not those already in `present`: one
    key, or the few that tie (``dpp``: dp or pp); empty when none is close."""
    if not isinstance(key, str):
        return []
    typed = key.lower()
    scored: list[tuple[float, str]] = []
    for a in allowed:
        if present is not None and a in present:
            continue
        m = difflib.SequenceMatcher(None, typed, a)
        if m.real_quick_ratio() >= 0.6 and m.quick_ratio() >= 0.6 and m.ratio() >= 0.6:
            scored.append((m.ratio(), a))
    if not scored:
        return []
    best = max(s for s, _ in scored)
    return sorted(a for s, a in scored if s == best)[:3]
