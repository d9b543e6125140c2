"""The loop of a solve worker process (`server.workers.WorkerProcesses`, ``python -m server.worker_main WORK CTL``):
read a work item, answer its RPC (`PlacementServicer.serve_here`) under the call's deadline and stop/cancel.

Its caches (conversions by digest, fabrics, paths) stay warm from one request to the next.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection

from placement.limits import Call, use_call, use_limits
from placement.solve import StopEvent
from server.errors import status_for
from server.servicer import PlacementServicer
from server.settings import Settings
from server.telemetry import configure_logging, request_id_var
from server.workers import REMOTE_WORK, MetricsRecorder, Reply, WorkItem, status_bytes

__all__ = ["main", "run_item"]


class _Context:
    """What the RPC template asks of a grpc context, from the call's deadline and cancel flag."""

    def __init__(self, call: Call) -> None:
        self._call = call

    def time_remaining(self) -> float | None:
        return None if self._call.deadline is None else self._call.deadline - time.monotonic()

    def is_active(self) -> bool:
        return self._call.state() is None


class _Controls:
    """Stop and cancel messages of the parent, by work item number, applied to the item that runs (or, when they
    come first, to the item when it starts)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = -1
        self._got: set[str] = set()
        self._item: tuple[StopEvent, Call] | None = None

    def start(self, seq: int, stop: StopEvent, call: Call) -> None:
        with self._lock:
            if seq != self._seq:
                self._seq, self._got = seq, set()
            self._item = (stop, call)
            got = set(self._got)
        self._apply(got, stop, call)

    def end(self) -> None:
        with self._lock:
            self._item = None

    def receive(self, seq: int, what: str) -> None:
        with self._lock:
            if seq < self._seq:
                return  # for an item that has ended
            if seq > self._seq:
                self._seq, self._got = seq, set()
            self._got.add(what)
            item = self._item
        if item is not None:
            self._apply({what}, *item)

    @staticmethod
    def _apply(got: set[str], stop: StopEvent, call: Call) -> None:
        if "cancel" in got:
            call.cancel()
        if "stop" in got or "cancel" in got:
            stop.set()


def _listen(ctl: Connection, controls: _Controls) -> None:
    while True:
        try:
            seq, what = ctl.recv()
        except (EOFError, OSError):
            return
        controls.receive(seq, what)


def run_item(
    servicer: PlacementServicer, metrics: MetricsRecorder, seq: int, item: WorkItem, controls: _Controls
) -> Reply:
    """One work item: its RPC answered under the item's call; the answer or the status of its error."""
    request_type, _ = REMOTE_WORK[item.method]
    request_id_var.set(item.request_id)
    call = Call(item.deadline)
    stop = StopEvent()
    controls.start(seq, stop, call)
    try:
        request = request_type.FromString(item.request)
        with use_call(call), use_limits(servicer.settings.request_limits()):
            response = servicer.serve_here(item.method, request, _Context(call), stop)
        return Reply(True, response.SerializeToString(), metrics.drain())
    except Exception as exc:  # every error becomes the status the thread mode would answer
        return Reply(False, status_bytes(status_for(exc)), metrics.drain())
    finally:
        controls.end()


def main(argv: Sequence[str]) -> int:
    """Serve work items from the work pipe (file descriptor argv[0]) until it closes or sends None."""
    # the server drives shutdown (stop, then close the pipe): a Ctrl-C or SIGTERM sent to the whole process
    # group must not end a solve it still waits for
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = Connection(int(argv[0]))
    ctl = Connection(int(argv[1]), writable=False)
    settings: Settings = conn.recv()
    configure_logging(settings.log_level)
    metrics = MetricsRecorder()
    servicer = PlacementServicer(settings, None, metrics)  # type: ignore[arg-type]  # no pool: runs inline
    controls = _Controls()
    threading.Thread(target=_listen, args=(ctl, controls), name="placement-controls", daemon=True).start()
    conn.send("ready")
    while True:
        try:
            sent = conn.recv()
        except (EOFError, OSError):
            return 0
        if sent is None:
            return 0
        seq, item = sent
        reply = run_item(servicer, metrics, seq, item, controls)
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
