"""The one template of the solving RPCs: an `Rpc` describes a method once (convert in, work, convert out, log fields)
and `RpcRunner` runs it on the solve pool, with the deadline helpers every solving RPC shares (Reserve too).

The template, in order: started -> convert in -> checkpoint -> time budget -> solve options -> memo -> work under the
watchdog -> metrics -> convert out -> log line. The deadline helpers are public: `started`, `time_budget`,
`fit_options`, `watchdog`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import grpc

from placement.errors import InfeasibleError
from placement.limits import checkpoint, current_call
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.solve import SolveOptions, StopEvent
from server.errors import Cancelled, DeadlineError, status_for
from server.pool import SolvePool
from server.settings import Settings
from server.telemetry import Metrics

__all__ = [
    "NO_DEADLINE_S",
    "NO_SEARCH",
    "Memo",
    "Outcome",
    "Resolved",
    "Rpc",
    "RpcRunner",
    "TimeBudget",
    "fit_options",
    "on_topology",
    "started",
    "time_budget",
    "watchdog",
]

_log = logging.getLogger("placement.server")

NO_DEADLINE_S = 1e7
"""`context.time_remaining()` beyond this: the call has no deadline."""
_DEADLINE_SHARE = 0.9  # of the remaining time the solver may use (before the fixed margin)

Req = TypeVar("Req")
In = TypeVar("In")
Out = TypeVar("Out")
Resp = TypeVar("Resp")
R = TypeVar("R")
InC = TypeVar("InC", contravariant=True)
OutC = TypeVar("OutC", contravariant=True)
RespC = TypeVar("RespC", covariant=True)

Resolved = tuple[Topology, ClusterState] | None
"""A request's registry cluster and state (its `cluster_id`), or None when the request carries its own."""
Outcome = tuple[str, float | None]
"""One answered solve: its status (the label of the solves metric) and its gap (None: not known)."""


# ---- the deadline helpers ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeBudget:
    """The solver's time limit per job, whether the call's deadline set it (rather than the request or the server's
    maximum), and when the watchdog stops the search (a `time.monotonic` value; None: the call has no deadline)."""

    limit_s: float
    deadline_limited: bool
    stop_at: float | None


NO_SEARCH = TimeBudget(math.inf, False, None)
"""The budget of an RPC that does not search (Evaluate): no limit, no watchdog."""


def started(context: Any, stop: threading.Event) -> None:
    """At the start of the work: refuse it if the caller left (CANCELLED) or the deadline passed
    (DEADLINE_EXCEEDED) while it waited for a solver."""
    checkpoint("waiting for a solver")
    if stop.is_set() or not context.is_active():
        raise Cancelled("the call ended while it waited for a solver")
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0.001:
        raise DeadlineError("the deadline passed while the request waited for a solver")


def time_budget(requested_s: float, context: Any, jobs: int, settings: Settings) -> TimeBudget:
    """The request's time limit per job (`requested_s` for each of `jobs` searches), capped by the server's maximum
    and by the deadline's share: 90 % of the remaining time less the server's margin, at least half of it."""
    limit = min(requested_s, settings.max_time_limit_s)
    remaining = context.time_remaining()
    if remaining is None or remaining > NO_DEADLINE_S:
        return TimeBudget(limit, False, None)
    usable = max(remaining * _DEADLINE_SHARE - settings.deadline_margin_s, remaining * 0.5)
    per_job = usable / jobs
    return TimeBudget(min(limit, per_job), per_job < limit, time.monotonic() + usable)


def fit_options(
    opts: SolveOptions, budget: TimeBudget, stop: threading.Event, settings: Settings
) -> SolveOptions:
    """`opts` (changed in place, and returned) with the budget's time limit, the call's stop event and the server's
    CP-SAT threads per solve."""
    opts.time_limit_s = budget.limit_s
    opts.stop = stop
    opts.workers = settings.threads_per_solve
    return opts


@contextmanager
def watchdog(budget: TimeBudget, stop: threading.Event) -> Iterator[None]:
    """Set `stop` when the deadline's share is used up, whatever the solver's own timer does."""
    if budget.stop_at is None:
        yield
        return
    timer = threading.Timer(max(0.0, budget.stop_at - time.monotonic()), stop.set)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


# ---- an RPC, described once -------------------------------------------------------------------------------------


class Memo(Protocol[InC, Resp]):
    """Answers kept by request: `key` (None: this call is neither answered from nor kept in the memo), `recall` (the
    kept answer, counted and logged as such, or None), `keep` (a complete answer)."""

    def key(self, inputs: InC, budget: TimeBudget) -> bytes | None: ...

    def recall(self, key: bytes, inputs: InC) -> Resp | None: ...

    def keep(self, key: bytes, inputs: InC, response: Resp) -> None: ...


def _no_outcomes(_inputs: Any, _out: Any) -> Iterable[Outcome]:
    return ()


def _no_fields(_inputs: Any, _out: Any) -> dict[str, Any]:
    return {}


def _one_job(_inputs: Any) -> int:
    return 1


def _options_field(inputs: Any) -> SolveOptions:
    opts: SolveOptions = inputs.options
    return opts


@dataclass(frozen=True)
class Rpc(Generic[Req, In, Out, Resp]):
    """One RPC of the PlacementService: what is particular to it. `RpcRunner.serve` does the rest."""

    method: str
    """The gRPC method name: the label of its metrics."""
    parse: Callable[[Req, float, Resolved], In]
    """Convert in: the request, the server's default time limit and the registry's cluster -> the domain inputs."""
    work: Callable[[In], Out]
    """The domain call (its options already fitted to the budget)."""
    render: Callable[[In, Out, TimeBudget], Resp]
    """Convert out: the response message."""
    options: Callable[[In], SolveOptions] | None = _options_field
    """The request's solve options in its inputs (by default their ``options`` field; None: the RPC does not
    search and has no time budget)."""
    jobs: Callable[[In], int] = _one_job
    """How many searches share the time limit (the budget is per search)."""
    outcomes: Callable[[In, Out], Iterable[Outcome]] = _no_outcomes
    """The answered solves, counted in the solves metric (and the gap histogram)."""
    log: str = ""
    """The message of the log line of an answered call ("": no line)."""
    log_fields: Callable[[In, Out], dict[str, Any]] = _no_fields
    """The fields of that line, before ``solve_s`` and the budget's fields named in `log_budget`."""
    log_budget: tuple[str, ...] = ()
    """Which of ``time_limit_s`` and ``deadline_limited`` the log line carries."""
    memo: Memo[In, Resp] | None = None
    """Answers kept by request (a call cut short by a stop is never kept)."""
    nothing_by_deadline: bool = False
    """An InfeasibleError from a search the deadline cut short answers DEADLINE_EXCEEDED (the search had no time),
    not the error's own status."""


class Renderer(Protocol[OutC, RespC]):
    """A converter out of `placement.messages`: the cluster, the work's result and the time limit granted."""

    def __call__(
        self, topo: Topology, res: OutC, /, *, time_limit_s: float, deadline_limited: bool
    ) -> RespC: ...


def on_topology(render: Renderer[Out, Resp]) -> Callable[[Any, Out, TimeBudget], Resp]:
    """`Rpc.render` from a converter out that takes the inputs' ``topology``, the result and the budget."""

    def rendered(inputs: Any, res: Out, budget: TimeBudget) -> Resp:
        return render(
            inputs.topology, res, time_limit_s=budget.limit_s, deadline_limited=budget.deadline_limited
        )

    return rendered


# ---- running it ------------------------------------------------------------------------------------------------


class RpcRunner:
    """Runs RPC work: `serve` is the template of an `Rpc` in this thread; `run` puts work on the solve pool (or a solve
    process) and turns its error into the call's status; `stop_all` asks every running search for its answer now."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        pool: SolvePool | None = None,
        resolve: Callable[[Any], Resolved] | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool  # None in a solve process: `serve` only
        self.metrics = metrics
        self.resolve = resolve or (lambda _request: None)  # cluster_id -> the registry's cluster and state
        self._lock = threading.Lock()
        self._active: set[threading.Event] = set()

    def serve(self, rpc: Rpc[Req, In, Out, Resp], request: Req, context: Any, stop: threading.Event) -> Resp:
        """The template: `rpc` answered in this thread under the call's `context` (deadline, cancellation) and
        `stop` event."""
        started(context, stop)
        inputs = rpc.parse(request, self.settings.default_time_limit_s, self.resolve(request))
        checkpoint("converting the request")
        budget = NO_SEARCH
        if rpc.options is not None:
            opts = rpc.options(inputs)
            budget = time_budget(opts.time_limit_s, context, rpc.jobs(inputs), self.settings)
            fit_options(opts, budget, stop, self.settings)
        memo = rpc.memo
        key = memo.key(inputs, budget) if memo is not None else None
        if memo is not None and key is not None:
            kept = memo.recall(key, inputs)
            if kept is not None:
                return kept
        out, elapsed = self._work(rpc, inputs, budget, stop)
        self.metrics.solve_seconds.labels(method=rpc.method).observe(elapsed)
        for status, gap in rpc.outcomes(inputs, out):
            self.metrics.solves.labels(method=rpc.method, status=status).inc()
            if gap is not None and math.isfinite(gap):
                self.metrics.gap.observe(gap)
        response = rpc.render(inputs, out, budget)
        if rpc.log:
            fields = {**rpc.log_fields(inputs, out), "solve_s": round(elapsed, 4)}
            given = {"time_limit_s": budget.limit_s, "deadline_limited": budget.deadline_limited}
            fields.update((name, given[name]) for name in rpc.log_budget)
            _log.info(rpc.log, extra={"fields": fields})
        # a search cut short by a stop (deadline, cancellation, shutdown) did not answer the request itself
        if memo is not None and key is not None and not stop.is_set():
            memo.keep(key, inputs, response)
        return response

    @staticmethod
    def _work(
        rpc: Rpc[Any, In, Out, Any], inputs: In, budget: TimeBudget, stop: threading.Event
    ) -> tuple[Out, float]:
        """`rpc.work` under the watchdog, and its seconds."""
        t0 = time.perf_counter()
        try:
            with watchdog(budget, stop):
                out = rpc.work(inputs)
        except InfeasibleError:
            elapsed = time.perf_counter() - t0
            cut_short = stop.is_set() or elapsed >= 0.9 * budget.limit_s
            if rpc.nothing_by_deadline and budget.deadline_limited and cut_short:
                raise DeadlineError(
                    f"no valid placement found within the deadline ({elapsed:.3f} s of search); "
                    "give a longer deadline"
                ) from None
            raise
        return out, time.perf_counter() - t0

    def run(
        self,
        request: Req,
        context: grpc.ServicerContext,
        work: Callable[[Req, Any, threading.Event], R],
        remote: str | None = None,
        admit: Callable[[Req], None] | None = None,
    ) -> R:
        """`work(request, context, stop)` on the solve pool; the gRPC thread waits for it. `admit` checks the request
        first; `remote` names the work for a solve process (``--solve-mode process``; a request that names a
        registry cluster is solved here, next to the registry). The interceptor has checked the request against the
        limits and set the call's deadline and cancellation (`placement.limits.current_call`), which the pool's
        thread inherits; an answer that comes after the call ended is not sent as OK."""
        stop = StopEvent()  # sets stop CP-SAT at once (no polling delay)
        context.add_callback(stop.set)  # the call ended (cancelled, deadline, done): stop the search
        with self._lock:
            self._active.add(stop)
        try:
            if admit is not None:
                admit(request)
            result = self._submit(request, context, work, remote, stop).result()
            checkpoint("sending the answer")
            return result
        except Exception as exc:
            context.abort_with_status(status_for(exc))
            raise AssertionError("abort_with_status returns by raising") from exc
        finally:
            with self._lock:
                self._active.discard(stop)

    def _submit(
        self,
        request: Req,
        context: grpc.ServicerContext,
        work: Callable[[Req, Any, threading.Event], R],
        remote: str | None,
        stop: StopEvent,
    ) -> Future[R]:
        if self.pool is None:
            raise RuntimeError("this runner has no solve pool: it only serves in its own thread")
        size = request.ByteSize() if hasattr(request, "ByteSize") else 0
        processes = self.pool.processes
        cluster_id: str = getattr(request, "cluster_id", "")
        if processes is None or remote is None or cluster_id:
            return self.pool.submit(lambda: work(request, context, stop), size)
        remaining = context.time_remaining()
        deadline = (
            time.monotonic() + remaining if remaining is not None and remaining < NO_DEADLINE_S else None
        )
        call = current_call()

        def left() -> bool:
            return (call is not None and call.cancelled.is_set()) or not context.is_active()

        return self.pool.submit(lambda: processes.run(remote, request, stop, deadline, left), size)

    def stop_all(self) -> None:
        """Ask every running solve to return its best answer now (shutdown)."""
        with self._lock:
            active = list(self._active)
        for ev in active:
            ev.set()
