"""What the executor tests share: a task that reports its progress, picklable by reference for worker processes and
Ray tasks alike."""

from __future__ import annotations

from typing import Any


def reporting_task(n: int, sink: Any = None) -> int:
    """Counts to `n`, reporting each step ``(k, n)`` to `sink` when there is one; returns `n`."""
    for k in range(1, n + 1):
        if sink is not None:
            sink(k, n)
    return n
