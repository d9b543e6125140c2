"""The exception tree of placement: input errors that name file, field and rule, and infeasibility.

Every user-facing error collects *all* problems of one input, not only the first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "KEEP_LIMIT",
    "RENDER_LIMIT",
    "InfeasibleError",
    "InputError",
    "InternalError",
    "PlacementError",
    "Problem",
    "Problems",
]

RENDER_LIMIT = 20
"""Problems an InputError prints (then ``... and N more``)."""
KEEP_LIMIT = 1000
"""Problems one `Problems` keeps; the rest are counted, not stored (a hostile input cannot grow the list)."""


class PlacementError(Exception):
    """Base of every error this package raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One violated rule in one input.

    `path` is a field path (``levels[2].tier.bandwidth_gbps``) or a location (``line 7, column 12``);
    `message` names the value and the rule.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InputError(PlacementError):
    """An input (file, request, flag) breaks one or more rules. Carries every problem found."""

    def __init__(self, source: str, problems: Iterable[Problem], omitted: int = 0) -> None:
        self.source = source
        self.problems = list(problems)
        self.omitted = omitted
        """Problems found beyond those kept (a reader keeps a bounded number)."""
        super().__init__(self.render())

    @property
    def total(self) -> int:
        """Every problem found, kept or not."""
        return len(self.problems) + self.omitted

    def render(self, limit: int = RENDER_LIMIT) -> str:
        """The source and the first `limit` problems, one a line, then ``... and N more``."""
        n = self.total
        if n == 1 and self.problems:
            return f"{self.source}: {self.problems[0]}"
        head = f"{self.source}: {n} error(s)"
        shown = self.problems[:limit]
        tail = f"\n  ... and {n - len(shown)} more" if n > len(shown) else ""
        return head + "".join(f"\n  - {p}" for p in shown) + tail


class InternalError(PlacementError):
    """An invariant of the library broke: a bug, not a fault of the input. The message starts with ``internal:``
    and names what broke (the gRPC server answers INTERNAL, never a precondition of the request).

    >>> str(InternalError("the solver returned no mapping"))
    'internal: the solver returned no mapping'
    """

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"internal: {what}")


class InfeasibleError(PlacementError):
    """No mapping satisfies the hard rules. `reasons` say which rule binds and by how much."""

    def __init__(self, reasons: Iterable[str]) -> None:
        self.reasons = list(reasons)
        super().__init__("no placement satisfies the hard rules: " + "; ".join(self.reasons))


@dataclass
class Problems:
    """Collects problems while reading one input, then raises them together.

    >>> ps = Problems("cluster.yaml")
    >>> ps.add("levels[0].fanout", "must be >= 1, got 0")
    >>> ps.raise_if_any()
    Traceback (most recent call last):
    ...
    placement.errors.InputError: cluster.yaml: levels[0].fanout: must be >= 1, got 0
    """

    source: str
    items: list[Problem] = field(default_factory=list)
    omitted: int = 0
    keep: int = KEEP_LIMIT

    def add(self, path: str, message: str) -> None:
        if len(self.items) < self.keep:
            self.items.append(Problem(path, message))
        else:
            self.omitted += 1

    def extend(self, problems: Iterable[Problem], omitted: int = 0) -> None:
        for p in problems:
            self.add(p.path, p.message)
        self.omitted += omitted

    def __bool__(self) -> bool:
        return bool(self.items) or self.omitted > 0

    def __len__(self) -> int:
        return len(self.items) + self.omitted

    def raise_if_any(self) -> None:
        if self:
            raise InputError(self.source, self.items, self.omitted)
