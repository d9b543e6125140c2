"""What every native-format reader shares: loading a YAML/JSON document, the sanity limits, and `_Reader`, which
collects each problem of a file with its field path before one `InputError` is raised.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from placement.errors import InputError, Problem, Problems

__all__ = ["MAX_BYTES", "MAX_COUNT", "load_document"]

T = TypeVar("T")
# Physical sanity limits for link tiers: below 1 MB/s or above 1 PB/s, or a latency above 1000 s, is a typo.
MIN_BANDWIDTH_GBPS = 1e-3
MAX_BANDWIDTH_GBPS = 1e6
MAX_LATENCY_US = 1e9
# Traffic sanity limits: an exabyte per transfer or a billion transfers per step is a typo, and would overflow.
MAX_BYTES = 1e18
MAX_COUNT = 1e9


def load_document(path: str | Path) -> Any:
    """Parse a YAML or JSON file; syntax errors name line and column."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise InputError(str(path), [_problem("", f"cannot read the file: {e.strerror}")]) from None
    try:
        if p.suffix == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise InputError(str(path), [_problem(f"line {e.lineno}, column {e.colno}", f"invalid JSON: {e.msg}")]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise InputError(str(path), [_problem(where, f"invalid YAML: {getattr(e, 'problem', None) or e}")]) from None


def _problem(path: str, msg: str) -> Any:

    return Problem(path, msg)


class _Reader:
    """Typed getters over a parsed document that record problems instead of raising."""

    def __init__(self, ps: Problems) -> None:
        self.ps = ps

    def obj(self, v: Any, path: str) -> dict[str, Any]:
        if v is None:
            return {}
        if not isinstance(v, dict):
            self.ps.add(path, f"must be a mapping, got {type(v).__name__}")
            return {}
        return v

    def lst(self, v: Any, path: str) -> list[Any]:
        if v is None:
            return []
        if not isinstance(v, list):
            self.ps.add(path, f"must be a list, got {type(v).__name__}")
            return []
        return v

    def keys(self, d: Mapping[str, Any], allowed: Sequence[str], path: str) -> None:
        for k in d:
            if k not in allowed:
                self.ps.add(f"{path}.{k}" if path else str(k), f"unknown field; expected one of {sorted(allowed)}")

    def num(self, d: Mapping[str, Any], key: str, path: str, *, default: float | None = None,
            minimum: float | None = None, exclusive: bool = False, required: bool = False,
            maximum: float | None = None) -> float | None:
        v = d.get(key)
        where = f"{path}.{key}" if path else key
        if v is None:
            if required:
                self.ps.add(where, "is required")
            return default
        if isinstance(v, bool) or not isinstance(v, int | float):
            try:
                v = float(v)  # "70e9" in YAML is a string
            except (TypeError, ValueError):
                self.ps.add(where, f"must be a number, got {v!r}")
                return default
        if not math.isfinite(v):
            self.ps.add(where, f"must be finite, got {v!r}")
            return default
        if minimum is not None and (v <= minimum if exclusive else v < minimum):
            self.ps.add(where, f"must be {'>' if exclusive else '>='} {minimum:g}, got {v:g}")
            return default
        if maximum is not None and v > maximum:
            self.ps.add(where, f"must be <= {maximum:g}, got {v:g}")
            return default
        return float(v)

    def int_(self, d: Mapping[str, Any], key: str, path: str, *, default: int | None = None,
             minimum: int | None = None, required: bool = False) -> int | None:
        v = d.get(key)
        where = f"{path}.{key}" if path else key
        if v is None:
            if required:
                self.ps.add(where, "is required")
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            else:
                self.ps.add(where, f"must be an integer, got {v!r}")
                return default
        if minimum is not None and v < minimum:
            self.ps.add(where, f"must be >= {minimum}, got {v}")
            return default
        return int(v)

    def str_(self, d: Mapping[str, Any], key: str, path: str, *, default: str | None = None,
             required: bool = False) -> str | None:
        v = d.get(key)
        where = f"{path}.{key}" if path else key
        if v is None:
            if required:
                self.ps.add(where, "is required")
            return default
        if not isinstance(v, str | int) or isinstance(v, bool):
            self.ps.add(where, f"must be a string, got {v!r}")
            return default
        return str(v)


# ---- cluster ------------------------------------------------------------------------------------------------


