"""Stable keys of JSON-able documents: what a what-if row or a replay was computed from, so that a run can
resume and a cache can tell two inputs apart."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["digest"]


def digest(obj: Any) -> str:
    """A stable key of a JSON-able document: SHA-256 of its canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(
        json.dumps(obj, sort_keys=True, default=str, separators=(",", ":")).encode()
    ).hexdigest()
