"""Where what-if points and replays run: in this process, on local worker processes, or as Ray tasks, behind one
interface. Results stream back as tasks finish (a failed task is retried once, then reported); progress within a
task streams back too.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queue_mod
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol

import placement

__all__ = [
    "EXECUTORS",
    "Executor",
    "InlineExecutor",
    "LocalExecutor",
    "OnProgress",
    "QueueSink",
    "RayExecutor",
    "default_workers",
    "make_executor",
]

EXECUTORS = ("local", "ray")

OnDone = Callable[[int, Any], None]
OnFail = Callable[[int, str], None]
OnProgress = Callable[[int, int, int], None]
"""(task index, units done, units in the task): what a task reports while it runs."""

_POLL_S = 0.5
"""How often a waiting parent drains the progress a worker sent."""
_REPORT_S = 1.0
"""A worker sends its progress at most this often (and at the end)."""


class QueueSink:
    """A task's progress reporter that pickles to a worker: ``sink(done, total)`` puts ``(index, done, total)``
    on `queue` (a multiprocessing manager's or a Ray queue), at most every `_REPORT_S` seconds and at the end."""

    def __init__(self, queue: Any, index: int) -> None:
        self.queue, self.index = queue, index
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < _REPORT_S:
            return
        self._last = now
        with contextlib.suppress(Exception):  # progress is best effort: a closed queue must not fail the task
            self.queue.put((self.index, done, total))

    def __getstate__(self) -> dict[str, Any]:
        return {"queue": self.queue, "index": self.index}

    def __setstate__(self, st: dict[str, Any]) -> None:
        self.queue, self.index, self._last = st["queue"], st["index"], 0.0


def _drain(q: Any, progress: OnProgress | None) -> None:
    if progress is None or q is None:
        return
    while True:
        try:
            i, done, total = q.get_nowait()
        except (queue_mod.Empty, Exception):
            return
        progress(i, done, total)


class Executor(Protocol):
    """Runs ``fn(task)`` for every task; calls ``on_done(i, result)`` as each finishes (in completion order) and
    ``on_fail(i, error)`` for a task that failed twice (the first failure is retried once). With `progress`,
    the task runs as ``fn(task, sink)`` and each ``sink(done, total)`` it calls reaches ``progress(i, done,
    total)`` in this process while the task runs (from a worker process or a Ray task too)."""

    name: str
    workers: int

    def run(
        self,
        fn: Callable[..., Any],
        tasks: Sequence[Any],
        on_done: OnDone,
        on_fail: OnFail,
        progress: OnProgress | None = None,
    ) -> None: ...


def _describe(e: BaseException) -> str:
    """The error's type and the first line of its message (Ray's run to pages), at most 300 characters."""
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}"[:300]


class InlineExecutor:
    """Every task in this process, in order (tests, debugging)."""

    name = "inline"
    workers = 0

    def run(
        self,
        fn: Callable[..., Any],
        tasks: Sequence[Any],
        on_done: OnDone,
        on_fail: OnFail,
        progress: OnProgress | None = None,
    ) -> None:
        for i, t in enumerate(tasks):
            for attempt in (1, 2):
                try:
                    if progress is None:
                        res = fn(t)
                    else:
                        res = fn(t, lambda done, total, i=i: progress(i, done, total))
                except Exception as e:
                    if attempt == 2:
                        on_fail(i, _describe(e))
                    continue
                on_done(i, res)
                break


def _worker_init() -> None:
    """Ctrl-C is the parent's to handle. Blocked rather than ignored: CP-SAT installs its own SIGINT handler for
    each solve and leaves the default action (end the process) behind; a blocked signal reaches neither."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    else:  # pragma: no cover - not POSIX
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalExecutor:
    """`workers` spawned local processes (this process never runs CP-SAT, so that Ctrl-C stays ours). A worker
    that dies takes the pool down; the tasks that were in flight are then retried on a fresh pool."""

    name = "local"

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers

    def run(
        self,
        fn: Callable[..., Any],
        tasks: Sequence[Any],
        on_done: OnDone,
        on_fail: OnFail,
        progress: OnProgress | None = None,
    ) -> None:
        attempts = [0] * len(tasks)
        todo = list(range(len(tasks)))
        manager = multiprocessing.get_context("spawn").Manager() if progress is not None else None
        q = manager.Queue() if manager is not None else None
        try:
            while todo:
                todo = self._round(fn, tasks, todo, attempts, on_done, on_fail, progress, q)
        finally:
            _drain(q, progress)
            if manager is not None:
                manager.shutdown()

    def _round(
        self,
        fn: Callable[..., Any],
        tasks: Sequence[Any],
        todo: list[int],
        attempts: list[int],
        on_done: OnDone,
        on_fail: OnFail,
        progress: OnProgress | None,
        q: Any,
    ) -> list[int]:
        ctx = multiprocessing.get_context("spawn")
        ex = ProcessPoolExecutor(
            max_workers=min(self.workers, len(todo)), mp_context=ctx, initializer=_worker_init
        )
        pending: dict[Future[Any], int] = {}
        again: list[int] = []
        clean = False

        def submit(i: int) -> None:
            attempts[i] += 1
            if q is None:
                pending[ex.submit(fn, tasks[i])] = i
            else:
                pending[ex.submit(fn, tasks[i], QueueSink(q, i))] = i

        try:
            for i in todo:
                submit(i)
            while pending:
                done, _ = wait(
                    list(pending), timeout=_POLL_S if q is not None else None, return_when=FIRST_COMPLETED
                )
                _drain(q, progress)
                for fut in done:
                    i = pending.pop(fut)
                    try:
                        res = fut.result()
                    except Exception as e:
                        broken = "BrokenProcessPool" in type(e).__name__
                        if attempts[i] < 2:
                            if broken:
                                again.append(i)
                            else:
                                submit(i)
                        else:
                            on_fail(i, _describe(e))
                        if broken:  # the pool is gone: everything in flight goes to the next round
                            again.extend(i2 for i2 in pending.values())
                            for i2 in pending.values():
                                attempts[i2] -= 1  # not their fault
                            pending.clear()
                            break
                        continue
                    on_done(i, res)
            clean = True
        finally:
            if clean:
                ex.shutdown(wait=True)
            else:
                _end_pool(ex, list(pending))
        return again


def _end_pool(ex: ProcessPoolExecutor, futures: list[Future[Any]]) -> None:
    """Ctrl-C or a broken worker: drop what is pending and end the workers this pool started."""
    procs = list(getattr(ex, "_processes", {}).values())
    for f in futures:
        f.cancel()
    ex.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=5)
    # the pool's manager thread sees its workers gone and ends; joined here, not at interpreter exit, where it
    # would write to the pipes of workers already ended ("Bad file descriptor" after Ctrl-C)
    manager = getattr(ex, "_executor_manager_thread", None)
    if manager is not None:
        manager.join(timeout=5)


class RayExecutor:
    """Ray tasks, one CPU each, on the cluster at `address` (None: the one ``ray.init`` finds or starts here, or
    the one already initialized in this process). The same code runs on a laptop and on a cluster: with an
    address, the ``placement`` package ships to the workers (``runtime_env.py_modules``)."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise RuntimeError("--executor ray needs Ray: pip install 'placement[ray]'") from None
        self._ray = ray
        if not ray.is_initialized():
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kw["runtime_env"] = {"py_modules": [placement.__path__[0]]}
            else:
                kw["num_cpus"] = workers
            ray.init(address=address, **kw)
        self.workers = workers or int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]

    def run(
        self,
        fn: Callable[..., Any],
        tasks: Sequence[Any],
        on_done: OnDone,
        on_fail: OnFail,
        progress: OnProgress | None = None,
    ) -> None:
        ray = self._ray
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)  # the one retry is ours, for any failure
        attempts = [0] * len(tasks)
        refs: dict[Any, int] = {}
        q: Any = None
        if progress is not None:
            # optional extra: ray is imported only when this executor is used
            from ray.util.queue import Queue

            q = Queue(actor_options={"num_cpus": 0})

        def submit(i: int) -> None:
            attempts[i] += 1
            if q is None:
                refs[remote.remote(tasks[i])] = i
            else:
                refs[remote.remote(tasks[i], QueueSink(q, i))] = i

        # at most workers x 2 in flight, so that a Ctrl-C leaves little queued on the cluster
        queue = list(range(len(tasks)))[::-1]
        try:
            while queue or refs:
                while queue and len(refs) < 2 * max(1, self.workers):
                    submit(queue.pop())
                done, _ = ray.wait(list(refs), num_returns=1, timeout=_POLL_S if q is not None else None)
                _drain(q, progress)
                for ref in done:
                    i = refs.pop(ref)
                    try:
                        res = ray.get(ref)
                    except Exception as e:
                        cause = getattr(e, "cause", None) or e
                        if attempts[i] < 2:
                            submit(i)
                        else:
                            on_fail(i, _describe(cause))
                        continue
                    on_done(i, res)
        finally:
            for ref in refs:
                ray.cancel(ref, force=True)
            _drain(q, progress)
            if q is not None:
                q.shutdown()


def make_executor(
    name: str, workers: int | None, address: str | None = None, tasks: int | None = None
) -> Executor:
    """The executor `name` with `workers`, one meaning for every caller: ``local`` runs in this process with 0
    workers, else on `workers` worker processes (None: the usable cores), never more than `tasks` when given;
    ``ray`` on the cluster at `address` (or a local head) with `workers` CPUs (None or 0: all). ValueError for a
    name or count outside these; RuntimeError when Ray is missing or unreachable."""
    if workers is not None and workers < 0:
        raise ValueError(f"workers must be >= 0 (0: in this process), got {workers}")
    if name == "local":
        if workers == 0:
            return InlineExecutor()
        n = workers if workers is not None else default_workers()
        return LocalExecutor(max(1, min(n, tasks) if tasks is not None else n))
    if name == "ray":
        return RayExecutor(address, workers or None)
    raise ValueError(f"executor {name!r} is not one of {list(EXECUTORS)}")


def default_workers() -> int:
    """Usable cores."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
