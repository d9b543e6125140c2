"""The bounded solve pool: `workers` solver threads and a queue of at most `queue_limit` waiting requests.

Requests beyond both are refused at once (RESOURCE_EXHAUSTED), so the gRPC threads never pile up on solves.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from server.errors import LimitExceeded, ShuttingDown
from server.telemetry import Metrics
from server.workers import WorkerProcesses

__all__ = ["SolvePool"]

T = TypeVar("T")


class SolvePool:
    """Runs solves on a fixed number of threads; admits at most `workers + queue_limit` at a time."""

    def __init__(
        self,
        workers: int,
        queue_limit: int,
        metrics: Metrics | None = None,
        max_bytes: int | None = None,
        processes: WorkerProcesses | None = None,
    ) -> None:
        self.workers = workers
        self.processes = (
            processes  # solve processes (--solve-mode process): each thread hands its solve to one
        )
        self.queue_limit = queue_limit
        self.max_bytes = max_bytes
        self._bytes = 0
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="placement-solve")
        self._metrics = metrics
        self._lock = threading.Lock()
        self._admitted = 0
        self._running = 0
        self._closed = False

    @property
    def admitted(self) -> int:
        """Requests running or waiting now."""
        with self._lock:
            return self._admitted

    def _gauges(self) -> None:
        if self._metrics is not None:
            self._metrics.running.set(self._running)
            self._metrics.queued.set(self._admitted - self._running)

    def submit(self, fn: Callable[[], T], cost_bytes: int = 0) -> Future[T]:
        """Queue `fn` (run in the caller's context vars); LimitExceeded when the queue is full, or when the
        requests admitted would hold more than `max_bytes` (their messages stay in memory while they wait)."""
        with self._lock:
            if self._closed:
                raise ShuttingDown("the server is shutting down")
            if self.max_bytes is not None and self._admitted and self._bytes + cost_bytes > self.max_bytes:
                if self._metrics is not None:
                    self._metrics.rejected.labels(limit="queued_bytes").inc()
                raise LimitExceeded(
                    "queued bytes",
                    f"the admitted requests hold {self._bytes} bytes and this one {cost_bytes}; the server keeps at "
                    f"most {self.max_bytes}; retry later",
                    retry_after_s=1.0,
                )
            self._bytes += cost_bytes
            if self._admitted >= self.workers + self.queue_limit:
                if self._metrics is not None:
                    self._metrics.rejected.labels(limit="queue").inc()
                raise LimitExceeded(
                    "solver queue",
                    f"{self.workers} solves are running and {self.queue_limit} are waiting; retry later",
                    retry_after_s=1.0,
                )
            self._admitted += 1
            self._gauges()
        ctx = contextvars.copy_context()

        def release() -> None:
            with self._lock:
                self._bytes -= cost_bytes

        def run() -> T:
            with self._lock:
                self._running += 1
                self._gauges()
            try:
                return ctx.run(fn)
            finally:
                with self._lock:
                    self._running -= 1
                    self._admitted -= 1
                    self._gauges()
                release()

        try:
            return self._executor.submit(run)
        except RuntimeError:  # shut down between the check and the submit
            with self._lock:
                self._admitted -= 1
                self._gauges()
            release()
            raise ShuttingDown("the server is shutting down") from None

    def shutdown(self, wait: bool = False) -> None:
        """Refuse new work and drop what has not started; running solves finish (their stop events end them)."""
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=wait, cancel_futures=True)
        if self.processes is not None:
            self.processes.close()
