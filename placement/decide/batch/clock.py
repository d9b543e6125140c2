"""Wall-clock limits for searches made of many solves (a batch, a repair, a replay's job): `WallClock` sets the
search's stop event when the limit is spent, so every solve inside returns its best answer by then.

A deterministic search has no wall clock (its answer must not depend on the machine's load): its
`time_limit_s` is a deterministic budget, and `limit_kind` names it so in the result's stats.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from placement.solve import SolveOptions, StopEvent

__all__ = ["WallClock", "limit_kind"]

_POLL_S = 0.02  # how often a plain threading.Event of the caller is looked at


def limit_kind(options: SolveOptions) -> str:
    """What `options.time_limit_s` is: ``wall clock`` (seconds on the clock) or ``deterministic budget``
    (CP-SAT's deterministic time, the same answer under any load; not a bound on the wall time)."""
    return "deterministic budget" if options.deterministic else "wall clock"


class WallClock:
    """Options whose stop event is also set `time_limit_s - reserve_s` after `start` (not when deterministic).
    The caller's own stop event still stops the search. `cancel` when the search is done."""

    def __init__(self, options: SolveOptions, reserve_s: float = 0.0) -> None:
        self.t0 = time.perf_counter()
        self._outer = options.stop
        self._done = threading.Event()
        self._timer: threading.Timer | None = None
        self._poller: threading.Thread | None = None
        if options.deterministic:
            self.options = options
            return
        stop = StopEvent()
        self.options = dataclasses.replace(options, stop=stop)
        outer = self._outer
        if isinstance(outer, StopEvent):
            outer.subscribe(stop.set)
        elif outer is not None:
            self._poller = threading.Thread(target=self._poll, args=(outer, stop), daemon=True)
            self._poller.start()
        self._timer = threading.Timer(max(0.0, options.time_limit_s - reserve_s), stop.set)
        self._timer.daemon = True
        self._timer.start()

    def _poll(self, outer: threading.Event, stop: StopEvent) -> None:
        while not self._done.wait(_POLL_S):
            if outer.is_set():
                stop.set()
                return

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def cancel(self) -> None:
        self._done.set()
        if self._timer is not None:
            self._timer.cancel()
        stop = self.options.stop
        if isinstance(self._outer, StopEvent) and stop is not self._outer and stop is not None:
            self._outer.unsubscribe(stop.set)
