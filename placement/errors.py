"""The exception tree of placement: input errors that name file, field and rule, and infeasibility.

Every user-facing error collects *all* problems of one input, not only the first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["InfeasibleError", "InputError", "PlacementError", "Problem", "Problems"]


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

    def __init__(self, source: str, problems: Iterable[Problem]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        head = f"{self.source}: {len(self.problems)} error(s)" if len(self.problems) != 1 else f"{self.source}:"
        if len(self.problems) == 1:
            return f"{head} {self.problems[0]}"
        return head + "".join(f"\n  - {p}" for p in self.problems)


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

    def add(self, path: str, message: str) -> None:
        self.items.append(Problem(path, message))

    def extend(self, problems: Iterable[Problem]) -> None:
        self.items.extend(problems)

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_if_any(self) -> None:
        if self.items:
            raise InputError(self.source, self.items)
