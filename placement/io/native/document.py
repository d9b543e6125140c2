"""What every native-format reader shares: loading a YAML/JSON document, the sanity limits, and `_Reader`, which
collects each problem of a file with its field path before one `InputError` is raised.
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from placement.errors import InputError, Problem, Problems
from placement.io.native.doc_kinds import closest_key, wrong_kind
from placement.io.text import read_text
from placement.limits import current_limits

__all__ = ["MAX_BYTES", "MAX_COUNT", "MAX_INT", "load_document", "parse_document", "read_text", "short"]

T = TypeVar("T")
# Physical sanity limits for link tiers: below 1 MB/s or above 1 PB/s, or a latency above 1000 s, is a typo.
MIN_BANDWIDTH_GBPS = 1e-3
MAX_BANDWIDTH_GBPS = 1e6
MAX_LATENCY_US = 1e9
MAX_SLOWDOWN = 1e6
"""Slowdown factors of degraded devices and links are in [1, MAX_SLOWDOWN]."""
MAX_PARAMETERS = 1e15
"""Model parameters (and expert parameters) are at most a quadrillion."""
# Traffic sanity limits: an exabyte per transfer or a billion transfers per step is a typo, and would overflow.
MAX_BYTES = 1e18
MAX_COUNT = 1e9
MAX_INT = 2**53
"""The largest integer any field takes unless it says otherwise (exact in a double; `int(1e29)` is refused)."""

_SHORT = reprlib.Repr()
_SHORT.maxlevel = 2
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 4
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlong = 40


def short(value: Any) -> str:
    """A bounded repr for error texts: never expands a document (YAML aliases, deep or long values)."""
    try:
        return _SHORT.repr(value)
    except Exception:  # a value whose repr fails is named by its type
        return f"<{type(value).__name__}>"


class _DocumentTooBig(Exception):
    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where


def _mark(node_or_event: Any) -> str:
    mark = getattr(node_or_event, "start_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader with a nesting depth limit, an alias limit, and a bound on the document's expanded size (a
    "billion laughs" of nested aliases is refused before anything walks it)."""

    max_depth = 64
    max_aliases = 1000
    max_nodes = 20_000_000

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0
        self._sizes: dict[int, int] = {}

    def _next_event(self) -> Any:
        return self.peek_event()  # type: ignore[no-untyped-call]

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > self.max_aliases:
                raise _DocumentTooBig(_mark(self._next_event()), f"more than {self.max_aliases} YAML aliases")
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > self.max_depth:
            raise _DocumentTooBig(_mark(self._next_event()), f"nested deeper than {self.max_depth} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node: Any) -> Any:
        n = self._expanded(node)
        if n > self.max_nodes:
            raise _DocumentTooBig(
                "", f"expands to {n} values with its aliases; the limit is {self.max_nodes}"
            )
        return super().construct_document(node)

    def _expanded(self, root: Any) -> int:
        """Values of the document with every alias expanded, computed on the node graph (each node once)."""
        sizes = self._sizes
        visiting: set[int] = set()
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            key = id(node)
            if isinstance(node, yaml.ScalarNode):
                sizes[key] = 1
                continue
            children = (
                [c for kv in node.value for c in kv] if isinstance(node, yaml.MappingNode) else node.value
            )
            if done:
                sizes[key] = min(1 + sum(sizes.get(id(c), 1) for c in children), 1 << 62)
            elif key not in sizes and key not in visiting:  # visiting: a recursive alias counts once
                visiting.add(key)
                stack.append((node, True))
                stack.extend((c, False) for c in children)
        return sizes[id(root)]


def _depth(doc: Any, limit: int) -> bool:
    """True when `doc` (parsed JSON) nests deeper than `limit`; iterative."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            if d > limit:
                return True
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return False


def parse_document(text: str, source: str, json_only: bool = False) -> Any:
    """Parse YAML (or JSON, when `json_only`) text within the limits of `placement.limits`; InputError naming
    line and column otherwise. Error texts never include the document."""
    lim = current_limits()
    try:
        if json_only:
            try:
                doc = json.loads(text)
            except RecursionError:
                raise _DocumentTooBig("", f"nested deeper than {lim.max_depth} levels") from None
            if _depth(doc, lim.max_depth):
                raise _DocumentTooBig("", f"nested deeper than {lim.max_depth} levels")
            return doc
        loader = _BoundedLoader(text)
        loader.max_depth, loader.max_aliases, loader.max_nodes = lim.max_depth, lim.max_aliases, lim.max_nodes
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except _DocumentTooBig as e:
        raise InputError(source, [Problem(e.where, f"{e}; such a document is refused")]) from None
    except RecursionError:
        raise InputError(
            source, [Problem("", f"nested too deeply (the limit is {lim.max_depth} levels)")]
        ) from None
    except json.JSONDecodeError as e:
        raise InputError(
            source, [Problem(f"line {e.lineno}, column {e.colno}", f"invalid JSON: {e.msg}")]
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0][:200]
        raise InputError(source, [Problem(where, f"invalid YAML: {what}")]) from None
    except (ValueError, OverflowError) as e:  # e.g. a YAML timestamp or number the constructor cannot build
        raise InputError(source, [Problem("", f"invalid value: {short(str(e))}")]) from None


def load_document(path: str | Path) -> Any:
    """Parse a YAML or JSON file (by suffix) with `read_text` and `parse_document`."""
    p = Path(path)
    return parse_document(read_text(p, str(path)), str(path), json_only=p.suffix == ".json")


def _problem(path: str, msg: str) -> Any:

    return Problem(path, msg)


class _Reader:
    """Typed getters over a parsed document that record problems instead of raising.

    `keys` suggests the closest known key for an unknown one and remembers it: a required key whose absence a
    typo explains is not reported again as missing (`typo`).
    """

    def __init__(self, ps: Problems) -> None:
        self.ps = ps
        self.typos: dict[tuple[str, str], str] = {}
        """(path, a known key suggested) -> the mistyped key found at that path."""

    def kind(self, doc: Any, expected: str) -> bool:
        """Record one problem and return False when `doc` is another kind of document than `expected` (a job file
        read as a cluster file); then its keys are not reported one by one."""
        wrong = wrong_kind(doc, expected)
        if wrong is not None:
            self.ps.add(wrong.path, wrong.message)
        return wrong is None

    def typo(self, path: str, key: str) -> bool:
        """True when a mistyped key at `path` was taken for `key` (its absence is reported by `keys`)."""
        return (path, key) in self.typos

    def typos_at(self, path: str) -> list[str]:
        """The mistyped keys found at `path` that `keys` matched to a known key."""
        return [typo for (p, _), typo in self.typos.items() if p == path]

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
                where = f"{path}.{k}" if path else str(k)
                guesses = [g for g in closest_key(k, allowed, d) if (path, g) not in self.typos]
                if guesses:
                    self.typos.update({(path, g): str(k) for g in guesses})
                    self.ps.add(where, f"unknown field; did you mean {' or '.join(guesses)}?")
                else:
                    self.ps.add(where, f"unknown field; expected one of {sorted(allowed)}")

    def _missing(self, where: str, path: str, key: str, required: bool) -> None:
        if required and not self.typo(path, key):
            self.ps.add(where, "is required")

    def num(
        self,
        d: Mapping[str, Any],
        key: str,
        path: str,
        *,
        default: float | None = None,
        minimum: float | None = None,
        exclusive: bool = False,
        required: bool = False,
        maximum: float | None = None,
    ) -> float | None:
        v = d.get(key)
        where = f"{path}.{key}" if path else key
        if v is None:
            self._missing(where, path, key, required)
            return default
        if isinstance(v, bool) or not isinstance(v, int | float):
            try:
                v = float(v)  # "70e9" in YAML is a string
            except (TypeError, ValueError):
                self.ps.add(where, f"must be a number, got {short(v)}")
                return default
        if not math.isfinite(v):
            self.ps.add(where, f"must be finite, got {short(v)}")
            return default
        if minimum is not None and (v <= minimum if exclusive else v < minimum):
            self.ps.add(where, f"must be {'>' if exclusive else '>='} {minimum:g}, got {v:g}")
            return default
        if maximum is not None and v > maximum:
            self.ps.add(where, f"must be <= {maximum:g}, got {v:g}")
            return default
        return float(v)

    def int_(
        self,
        d: Mapping[str, Any],
        key: str,
        path: str,
        *,
        default: int | None = None,
        minimum: int | None = None,
        required: bool = False,
        maximum: int = MAX_INT,
    ) -> int | None:
        v = d.get(key)
        where = f"{path}.{key}" if path else key
        if v is None:
            self._missing(where, path, key, required)
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            else:
                self.ps.add(where, f"must be an integer, got {short(v)}")
                return default
        if minimum is not None and v < minimum:
            self.ps.add(where, f"must be >= {minimum}, got {short(v)}")
            return default
        if v > maximum:
            self.ps.add(where, f"must be <= {maximum}, got {short(v)}")
            return default
        return int(v)

    def bool_(self, d: Mapping[str, Any], key: str, path: str, *, default: bool = False) -> bool:
        v = d.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            self.ps.add(f"{path}.{key}" if path else key, f"must be true or false, got {short(v)}")
            return default
        return v

    def str_(
        self, d: Mapping[str, Any], key: str, path: str, *, default: str | None = None, required: bool = False
    ) -> str | None:
        v = d.get(key)
        where = f"{path}.{key}" if path else key
        if v is None:
            self._missing(where, path, key, required)
            return default
        if not isinstance(v, str | int) or isinstance(v, bool):
            self.ps.add(where, f"must be a string, got {short(v)}")
            return default
        return str(v)


# ---- cluster ------------------------------------------------------------------------------------------------
