"""The cost budget of one request: configurable limits on every count (ranks, devices, hosts, pins, ...) checked
before anything proportional is allocated, and the cooperative deadline/cancellation checkpoint of the current call.

Both the CLI and the gRPC server use them; the active limits and call live in context variables.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from placement.errors import InputError, PlacementError, Problem

__all__ = [
    "ENV_LIMITS",
    "Call",
    "Interrupted",
    "LimitError",
    "Limits",
    "checkpoint",
    "current_call",
    "current_limits",
    "parse_limit_overrides",
    "set_process_limits",
    "tick",
    "use_call",
    "use_limits",
]

ENV_LIMITS = "PLACEMENT_LIMITS"
"""Environment variable with limit overrides for the CLI, e.g. ``max_ranks=65536,max_devices=400000``."""


@dataclass(frozen=True)
class Limits:
    """Upper bounds of one request or input file. Each is checked before work proportional to it is done."""

    max_ranks: int = field(default=32_768, metadata={"help": "ranks of one job"})
    max_devices: int = field(default=200_000, metadata={"help": "devices of one cluster"})
    max_hosts: int = field(default=50_000, metadata={"help": "hosts of one cluster"})
    max_pins: int = field(default=32_768, metadata={"help": "pinned ranks of one job"})
    max_fault_domains: int = field(
        default=50_000, metadata={"help": "fault domains (and their members) of a state"}
    )
    max_matrix_cells: int = field(
        default=50_000_000, metadata={"help": "intra-node matrix cells over all hosts"}
    )
    max_matrix_side: int = field(default=256, metadata={"help": "rows of one intra-node matrix"})
    max_mapping_entries: int = field(default=32_768, metadata={"help": "entries of one mapping"})
    max_group_members: int = field(
        default=4_000_000, metadata={"help": "group members summed over a job's groups"}
    )
    max_groups: int = field(default=1_000_000, metadata={"help": "groups plus edges of one explicit job"})
    max_sweep_points: int = field(default=100_000, metadata={"help": "points of one what-if sweep"})
    max_index: int = field(default=1_000_000, metadata={"help": "largest rank or index anywhere"})
    max_state_entries: int = field(
        default=200_000, metadata={"help": "occupied/failed/degraded/link entries"}
    )
    max_depth: int = field(default=64, metadata={"help": "nesting depth of a document"})
    max_aliases: int = field(default=1_000, metadata={"help": "YAML aliases in one document"})
    max_nodes: int = field(default=20_000_000, metadata={"help": "values of one document, aliases expanded"})
    max_problems: int = field(default=1_000, metadata={"help": "problems collected from one input"})

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"limit {f.name} must be an integer >= 1, got {v!r}")

    def replace(self, **changes: int) -> Limits:
        return dataclasses.replace(self, **changes)

    def check(self, name: str, value: int, what: str) -> None:
        """LimitError unless `value` <= the limit `name`; `what` names the field (``job.constraints.pins``)."""
        limit = int(getattr(self, name))
        if value > limit:
            raise LimitError(what, value, name, limit)


class LimitError(InputError):
    """A count in an input is above a limit: the server answers RESOURCE_EXHAUSTED, the CLI exits 2. An input
    error (readers raise input errors only), raised at once: nothing proportional to the count is built."""

    def __init__(self, field_path: str, value: int | float, limit_name: str, limit: int) -> None:
        self.field = field_path
        self.value = value
        self.limit_name = limit_name
        self.limit = limit
        shown = f"{value:.3g}" if isinstance(value, float) or value >= 10**12 else str(value)
        super().__init__(field_path, [Problem("", f"{shown} is above the limit {limit_name}={limit}")])


def parse_limit_overrides(text: str, base: Limits | None = None) -> Limits:
    """Limits from ``name=value,name=value`` (names with or without ``max_``); ValueError naming the bad part."""
    base = base or Limits()
    known = {f.name for f in dataclasses.fields(Limits)}
    changes: dict[str, int] = {}
    for part in (p.strip() for p in text.replace(";", ",").split(",")):
        if not part:
            continue
        name, sep, raw = part.partition("=")
        name = name.strip().replace("-", "_")
        name = name if name.startswith("max_") else f"max_{name}"
        if not sep or name not in known:
            raise ValueError(f"{part!r}: give name=value with a name of {sorted(known)}")
        try:
            value = int(float(raw)) if math.isfinite(float(raw)) else -1
        except ValueError:
            value = -1
        if value < 1 or value > 10**12:
            raise ValueError(f"{part!r}: the value must be an integer in 1..1e12")
        changes[name] = value
    return base.replace(**changes)


def _env_limits() -> Limits:
    raw = os.environ.get(ENV_LIMITS, "")
    try:
        return parse_limit_overrides(raw) if raw else Limits()
    except ValueError:
        return Limits()


_limits: contextvars.ContextVar[Limits | None] = contextvars.ContextVar("placement_limits", default=None)
_process_limits: list[Limits] = []


def set_process_limits(limits: Limits | None) -> None:
    """The limits of this process (the CLI's ``--limits``) where no `use_limits` is active; None: the defaults."""
    _process_limits[:] = [] if limits is None else [limits]


def current_limits() -> Limits:
    """The limits in force: those of `use_limits`, else `set_process_limits`, else the defaults with
    PLACEMENT_LIMITS applied."""
    v = _limits.get()
    if v is not None:
        return v
    return _process_limits[0] if _process_limits else _env_limits()


@contextmanager
def use_limits(limits: Limits) -> Iterator[Limits]:
    token = _limits.set(limits)
    try:
        yield limits
    finally:
        _limits.reset(token)


# ---- the current call: deadline and cancellation --------------------------------------------------------------


class Interrupted(PlacementError):
    """The call ended (cancelled by the caller, or its deadline passed) while its work ran: stop now.

    `reason` is ``cancelled`` or ``deadline``.
    """

    def __init__(self, reason: str, where: str = "") -> None:
        self.reason = reason
        what = "the caller cancelled the call" if reason == "cancelled" else "the deadline passed"
        super().__init__(f"{what}{' during ' + where if where else ''}; the work was stopped")


_DEADLINE_SLACK_S = 0.25


class Call:
    """The deadline (a `time.monotonic` value or None) and the cancel flag of one call, shared with its worker."""

    def __init__(self, deadline: float | None = None) -> None:
        self.deadline = deadline
        self.cancelled = threading.Event()

    @staticmethod
    def after(seconds: float | None) -> Call:
        return Call(None if seconds is None else time.monotonic() + seconds)

    def cancel(self) -> None:
        self.cancelled.set()

    def state(self) -> str | None:
        """``cancelled``, ``deadline`` or None (still running)."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            return "deadline"  # first: grpc also ends (cancels) a call whose deadline passed
        if self.cancelled.is_set():
            # grpc's own timer may end the call a moment before this clock reaches the deadline
            return (
                "deadline"
                if self.deadline is not None and now >= self.deadline - _DEADLINE_SLACK_S
                else "cancelled"
            )
        return None

    def check(self, where: str = "") -> None:
        reason = self.state()
        if reason is not None:
            raise Interrupted(reason, where)


_call: contextvars.ContextVar[Call | None] = contextvars.ContextVar("placement_call", default=None)


def current_call() -> Call | None:
    return _call.get()


@contextmanager
def use_call(call: Call) -> Iterator[Call]:
    token = _call.set(call)
    try:
        yield call
    finally:
        _call.reset(token)


def checkpoint(where: str = "") -> None:
    """Raise `Interrupted` when the current call (if any) was cancelled or its deadline passed. Cheap: call it
    every few hundred items of any loop proportional to the input."""
    call = _call.get()
    if call is not None:
        call.check(where)


def tick(i: int, where: str = "") -> None:
    """`checkpoint` on every 256th item `i` of a loop (0 included)."""
    if not i & 255:
        checkpoint(where)
