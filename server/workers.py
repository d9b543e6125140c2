"""Solve worker processes (``--solve-mode process``): one process per solve slot, so solves run past the GIL, and
the prepared clusters (conversions, fabrics, paths) live in the processes that solve.

The parent side: start the processes, hand one a request, relay stop and cancellation, replay its metrics.
The worker's loop is `server.worker_main.worker_main`.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.rpc import status_pb2
from grpc_status import rpc_status

from placement.errors import InternalError
from placement.solve import StopEvent
from placement.v1 import placement_pb2 as pb
from server.errors import RemoteStatus, ShuttingDown
from server.settings import Settings
from server.telemetry import Metrics, current_request_id

__all__ = [
    "REMOTE_WORK",
    "MetricsRecorder",
    "Reply",
    "WorkItem",
    "WorkerProcesses",
]

_log = logging.getLogger("placement.server")

REMOTE_WORK: dict[str, tuple[type[Any], type[Any]]] = {
    "Place": (pb.PlaceRequest, pb.PlaceResponse),
    "Evaluate": (pb.EvaluateRequest, pb.EvaluateResponse),
    "Compare": (pb.CompareRequest, pb.CompareResponse),
    "PlaceBatch": (pb.PlaceBatchRequest, pb.PlaceBatchResponse),
    "Repair": (pb.RepairRequest, pb.RepairResponse),
}
"""The RPCs a worker process answers (`PlacementServicer.serve_here`) -> their (request, response) message types."""

_POLL_S = 0.02  # how often a waiting dispatcher looks at the call's cancel flag


@dataclass(frozen=True)
class WorkItem:
    """One request for a worker: the RPC method, the request bytes, the call's deadline (a
    `time.monotonic` value: the clock is the machine's, shared by processes) and its request id."""

    method: str
    request: bytes
    deadline: float | None
    request_id: str


@dataclass(frozen=True)
class Reply:
    """A worker's answer: the response bytes, or the serialized google.rpc.Status of its error; the metric
    updates it made (`MetricsRecorder`)."""

    ok: bool
    payload: bytes
    metrics: list[tuple[str, tuple[tuple[str, str], ...], str, float]] = field(default_factory=list)


def status_bytes(status: grpc.Status) -> bytes:
    """The google.rpc.Status a grpc.Status carries in its trailing metadata (what `_status` put there)."""
    for key, value in status.trailing_metadata or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            return value
    code: int = status.code.value[0]
    out: bytes = status_pb2.Status(code=code, message=status.details or "").SerializeToString()
    return out


class _Child:
    """`labels(...)` of a recorded metric: `inc` and `observe` append to the recorder."""

    def __init__(self, out: list[Any], name: str, labels: tuple[tuple[str, str], ...]) -> None:
        self._out, self._name, self._labels = out, name, labels

    def labels(self, **labels: str) -> _Child:
        return _Child(self._out, self._name, tuple(sorted(labels.items())))

    def inc(self, amount: float = 1.0) -> None:
        self._out.append((self._name, self._labels, "inc", amount))

    def observe(self, value: float) -> None:
        self._out.append((self._name, self._labels, "observe", value))

    def set(self, value: float) -> None:
        self._out.append((self._name, self._labels, "set", value))


class MetricsRecorder:
    """Stands for `server.telemetry.Metrics` in a worker: the servicer's updates are recorded, sent back with
    the answer and replayed on the server's metrics (`replay`)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, tuple[tuple[str, str], ...], str, float]] = []

    def __getattr__(self, name: str) -> _Child:
        if name.startswith("_") or name == "records":
            raise AttributeError(name)
        return _Child(self.records, name, ())

    def drain(self) -> list[tuple[str, tuple[tuple[str, str], ...], str, float]]:
        out, self.records = self.records, []
        return out


def replay(metrics: Metrics, records: list[tuple[str, tuple[tuple[str, str], ...], str, float]]) -> None:
    """Apply a worker's recorded metric updates to the server's metrics."""
    for name, labels, op, value in records:
        m = getattr(metrics, name, None)
        if m is None:
            continue
        if labels:
            m = m.labels(**dict(labels))
        getattr(m, op)(value)


class _Worker:
    """One worker process (``python -m server.worker_main``: started afresh, nothing of this process is
    re-imported or forked), its work pipe and its control pipe (stop and cancel of the work item it runs)."""

    def __init__(self, settings: Settings, index: int) -> None:
        self.conn, child = multiprocessing.Pipe()
        ctl_read, self.ctl = multiprocessing.Pipe(duplex=False)
        fds = (child.fileno(), ctl_read.fileno())
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the modules this process imports
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.worker_main", *map(str, fds)], pass_fds=fds, env=env
        )
        child.close()
        ctl_read.close()
        self.conn.send(settings)
        self.index = index
        self.seq = 0
        self.ready = False  # the worker has imported everything and said so
        self._ctl_lock = threading.Lock()

    def wait_ready(self, timeout: float | None) -> bool:
        """Wait (at most `timeout` s; None: as long as it takes) for the worker's ``ready``; False on timeout."""
        if self.ready:
            return True
        if timeout is not None and not self.conn.poll(timeout):
            return False
        msg = self.conn.recv()
        if msg != "ready":
            raise EOFError(f"the solve process sent {msg!r} before it was ready")
        self.ready = True
        return True

    def control(self, seq: int, what: str) -> None:
        """Tell the worker to `stop` (return its best answer) or `cancel` work item `seq`; a later item ignores it."""
        with self._ctl_lock, contextlib.suppress(OSError, ValueError):  # the worker ended: `run` notices
            self.ctl.send((seq, what))

    def alive(self) -> bool:
        return self.proc.poll() is None


class WorkerProcesses:
    """`count` solve processes (fresh interpreters: nothing of the server's grpc threads is forked). `run` hands
    one a request and waits for its answer, relaying the call's stop event and cancellation; a worker that dies is
    replaced and its call answers INTERNAL."""

    def __init__(self, count: int, settings: Settings, metrics: Metrics) -> None:
        self._settings = settings
        self._metrics = metrics
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        for i in range(count):
            w = _Worker(settings, i)
            self._all.append(w)
            self._idle.put(w)

    @property
    def pids(self) -> list[int | None]:
        with self._lock:
            return [w.proc.pid for w in self._all]

    def run(
        self,
        method: str,
        request: Any,
        stop: StopEvent,
        deadline: float | None,
        cancelled: Callable[[], bool],
    ) -> Any:
        """The response of RPC `method` on `request`, computed in a worker process under the call's
        `deadline` (a `time.monotonic` value; the clock is the machine's); `cancelled()` says the caller left.
        Raises `RemoteStatus` with the status the worker computed when it failed there."""
        item = WorkItem(method, request.SerializeToString(), deadline, current_request_id())
        w = self._take()
        w.seq += 1
        seq, ctl = w.seq, w

        def listener() -> None:
            ctl.control(seq, "stop")

        sent_cancel = False
        try:
            stop.subscribe(listener)
            try:
                w.wait_ready(None)
                w.conn.send((seq, item))
                while not w.conn.poll(_POLL_S):
                    if not sent_cancel and cancelled():
                        w.control(seq, "cancel")
                        sent_cancel = True
                    if not w.alive():
                        raise EOFError
                reply: Reply = w.conn.recv()
            except (EOFError, OSError, BrokenPipeError):
                w = self._replace(w)
                raise InternalError(
                    "internal error: the solve process of this request ended; the server started another"
                ) from None
        finally:
            stop.unsubscribe(listener)
            self._release(w)
        replay(self._metrics, reply.metrics)
        if reply.ok:
            return REMOTE_WORK[method][1].FromString(reply.payload)
        raise RemoteStatus(rpc_status.to_status(status_pb2.Status.FromString(reply.payload)))

    def wait_ready(self, timeout: float) -> bool:
        """Wait until every worker has started (imported the solver), at most `timeout` s in all."""
        end = time.monotonic() + timeout
        with self._lock:
            workers = list(self._all)
        try:
            return all(w.wait_ready(max(0.0, end - time.monotonic())) for w in workers)
        except (EOFError, OSError):
            return False

    def _release(self, w: _Worker) -> None:
        with self._lock:
            closed = self._closed
        if not closed:
            self._idle.put(w)
            return
        with contextlib.suppress(OSError, ValueError):
            w.conn.send(None)  # closing: the worker exits

    def _take(self) -> _Worker:
        while True:
            with self._lock:
                if self._closed:
                    raise ShuttingDown("the server is shutting down")
            try:
                return self._idle.get(timeout=0.5)
            except queue.Empty:
                continue

    def _replace(self, dead: _Worker) -> _Worker:
        """A new worker in the place of `dead` (its pipe closed, its process reaped)."""
        with self._lock:
            if self._closed:
                raise ShuttingDown("the server is shutting down")
            dead.conn.close()
            dead.ctl.close()
            if dead.alive():
                dead.proc.kill()
            dead.proc.wait(timeout=5.0)
            w = _Worker(self._settings, dead.index)
            self._all[self._all.index(dead)] = w
        _log.warning("solve process replaced", extra={"fields": {"worker": dead.index}})
        return w

    def close(self, timeout: float = 5.0) -> None:
        """Stop every worker: its work item is asked for its best answer and the worker to exit; what still runs
        after `timeout` is killed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = list(self._all)
        for w in workers:
            w.control(w.seq, "stop")
        idle: list[_Worker] = []
        while True:
            try:
                idle.append(self._idle.get_nowait())
            except queue.Empty:
                break
        for w in idle:
            with contextlib.suppress(OSError, ValueError):
                w.conn.send(None)
        end = time.monotonic() + timeout
        for w in workers:
            try:
                w.proc.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait(5.0)
            w.conn.close()
            w.ctl.close()
