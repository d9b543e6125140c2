"""The ClusterRegistry servicer, and `RegistryHolder`: the store opened on first use, the lease sweeper (which
also compacts), and the health probe of the store.

It only translates: placement.registry holds the rules; Reserve's solve runs on the server's solve pool with the
same deadline and limits as Place.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from placement.errors import InputError, Problem
from placement.messages import domain as convert
from placement.messages import serving as convert_serving
from placement.messages.registry import (
    event_to_proto,
    job_shape,
    prefixed,
    reservation_to_proto,
    reserve_request,
    resolve_cluster,
    state_message,
    update_response,
    uplink_loads,
)
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.registry import ClaimConflict, Registry, default_url, open_store, request_hash
from placement.registry.registry import ReserveOutcome, StateView, Waiting
from placement.solve import SolveOptions
from placement.solve.serving import explicit_shape, serving_traffic_job
from placement.v1 import placement_pb2 as pb
from placement.v1 import registry_pb2 as rpb
from placement.v1 import registry_pb2_grpc as rpb_grpc
from server import budget as request_budget
from server import rpc
from server.errors import LimitExceeded, ShuttingDown, precondition_failed, status_for
from server.servicer import PlacementServicer
from server.settings import Settings

__all__ = ["REGISTRY_SERVICE_NAME", "RegistryHolder", "RegistryServicer"]

_log = logging.getLogger("placement.server")

REGISTRY_SERVICE_NAME: str = rpb.DESCRIPTOR.services_by_name["ClusterRegistry"].full_name
_WATCH_POLL_S = 0.5  # other replicas' writes reach a watcher within this

R = TypeVar("R")


class RegistryHolder:
    """The registry of a server: opened on first use (or by `open()` at startup), swept while open, and probed
    every `registry_probe_s` once `start_probe` ran: `healthy` follows the store (it answers a trivial query
    within the probe's period, and writes when it was full), and `on_health(healthy, why)` hears each change."""

    def __init__(self, settings: Settings) -> None:
        self.url = settings.registry or default_url()
        self.enabled = settings.registry != "off"
        self._settings = settings
        self._sweep_s = settings.lease_sweep_s
        self._probe_s = settings.registry_probe_s
        self._lock = threading.Lock()
        self._registry: Registry | None = None
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self._prober: threading.Thread | None = None
        self._prober_lock = threading.Lock()
        self._probe_wanted = False
        self.healthy = True
        self.on_health: Callable[[bool, str], None] | None = None

    def open(self) -> Registry | None:
        """The registry (None when disabled); the store is opened and migrated on the first call."""
        if not self.enabled:
            return None
        with self._lock:
            if self._registry is None:
                if self._stop.is_set():
                    raise RuntimeError("the registry is closed")
                s = self._settings
                try:
                    store = open_store(self.url)
                except Exception as e:  # a started server's health says so, and its probe opens it later
                    if self._probe_wanted:
                        self._health(False, str(e))
                        self._launch_prober()
                    raise
                self._registry = Registry(
                    store,
                    keep_ended_s=s.registry_keep_ended_s,
                    event_max_age_s=s.registry_event_max_age_s,
                    event_max_count=s.registry_event_max_count,
                    compact_every_s=s.registry_compact_s,
                )
                try:
                    self._registry.sweep()  # leases that ran out while no server was up
                except Exception as e:  # a database hiccup: the sweeper retries
                    _log.warning("lease sweep failed", extra={"fields": {"error": str(e)}})
                if self._probe_wanted:
                    self._launch_prober()
                self._sweeper = threading.Thread(
                    target=self._sweep_loop, name="placement-lease-sweeper", daemon=True
                )
                self._sweeper.start()
                _log.info(
                    "registry open",
                    extra={
                        "fields": {
                            "store": _redacted(self.url),
                            "schema": self._registry.store.schema_version(),
                        }
                    },
                )
            return self._registry

    def _sweep_loop(self) -> None:
        while not self._stop.wait(self._sweep_s):
            reg = self._registry
            if reg is None:
                return
            try:
                expired = reg.sweep()
            except (
                Exception
            ) as e:  # a database hiccup: the next sweep retries; reads never trust a stale lease
                _log.warning("lease sweep failed", extra={"fields": {"error": str(e)}})
                continue
            for res in expired:
                _log.info("lease expired", extra={"fields": {"reservation": res.id, "job": res.job}})

    def start_probe(self) -> None:
        """Probe the store every `registry_probe_s` (a thread) once it is open (at once if it is): a started
        server's health follows it from then on. Opening stays where it was (`serve` at startup, else the
        first call), so a server that never uses its registry never opens it."""
        if not self.enabled:
            return
        self._probe_wanted = True
        if self._registry is not None:
            self._launch_prober()

    def _launch_prober(self) -> None:
        with self._prober_lock:
            if self._prober is None:
                self._prober = threading.Thread(
                    target=self._probe_loop, name="placement-registry-probe", daemon=True
                )
                self._prober.start()

    def _probe_loop(self) -> None:
        while not self._stop.is_set():
            self.probe()
            self._stop.wait(self._probe_s)

    def probe(self) -> bool:
        """One probe: the store answers (and writes, if it was full) within `registry_probe_s` (opened first if
        an earlier open failed). A probe that hangs (a stopped database) counts as failed when its time is up; it
        ends in the background."""
        wait = max(self._probe_s, 0.2)
        outcome: list[str] = []

        def run() -> None:
            try:
                reg = self.open()
                if reg is not None:
                    reg.store.ping(self._probe_s)
                    if reg.store.full is not None:
                        raise RuntimeError(f"the store's disk is full ({reg.store.full})")
                outcome.append("")
            except Exception as e:
                outcome.append(str(e) or type(e).__name__)

        worker = threading.Thread(target=run, name="placement-registry-ping", daemon=True)
        worker.start()
        worker.join(wait)
        why = outcome[0] if outcome else f"the store did not answer within {wait:g} s"
        self._health(not why, why)
        return not why

    def _health(self, healthy: bool, why: str) -> None:
        if healthy == self.healthy or self._stop.is_set():
            return
        self.healthy = healthy
        _log.log(
            logging.INFO if healthy else logging.WARNING,
            "registry store serving" if healthy else "registry store lost",
            extra={"fields": {"store": _redacted(self.url), **({"error": why} if why else {})}},
        )
        if self.on_health is not None:
            self.on_health(healthy, why)

    def resolve(self, request: Any) -> tuple[Topology, ClusterState] | None:
        """placement.messages.registry.resolve_cluster with this server's registry (opened only if needed)."""
        if not getattr(request, "cluster_id", ""):
            return None
        return resolve_cluster(request, self.open())

    def ends(self, cluster_id: str) -> list[tuple[float, list[int]]]:
        """The expected ends of a registry cluster's live claims (`Registry.expected_ends`)."""
        reg = self.open()
        return [] if reg is None else reg.expected_ends(cluster_id)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            reg, self._registry = self._registry, None
        if self._sweeper is not None:
            self._sweeper.join(timeout=5)
        if self._prober is not None:
            self._prober.join(timeout=5)
        if reg is not None:
            reg.close()


def _gone(context: grpc.ServicerContext, margin_s: float = 0.0) -> bool:
    """The caller cancelled, or its deadline passes within `margin_s` (the time to send the answer): a
    reservation now would never reach it."""
    remaining = context.time_remaining()
    return not context.is_active() or (remaining is not None and remaining <= margin_s)


_TRAFFIC_EVENTS = frozenset(
    {"COMMITTED", "RELEASED", "EXPIRED", "REVOKED", "STATE_REPLACED", "STATE_DIFF", "CLUSTER_PUT"}
)
"""Events that may change the traffic on the fabric (a hold or a renewal does not)."""


def _loads(view: StateView, now: float) -> list[rpb.UplinkLoad]:
    """The link loads of the running jobs a view knows the shape of (empty, and logged, if they cannot be
    computed: a watch or GetState never fails for them)."""
    try:
        return uplink_loads(view.topology, view.state(now))
    except Exception:
        _log.exception("link loads not computed", extra={"fields": {"cluster": view.record.cluster_id}})
        return []


def _redacted(url: str) -> str:
    """A store URL without its password."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        cred, host = rest.rsplit("@", 1)
        return f"{scheme}://{cred.split(':', 1)[0]}@{host}"
    return url


class RegistryServicer(rpb_grpc.ClusterRegistryServicer):
    """Each RPC translates a message into a Registry call; Reserve solves on the PlacementServicer's pool."""

    def __init__(self, settings: Settings, holder: RegistryHolder, placement: PlacementServicer) -> None:
        self._settings = settings
        self._holder = holder
        self._placement = placement

    def _registry(self) -> Registry:
        reg = self._holder.open()
        if reg is None:
            raise InputError(
                "request", [Problem("cluster_id", "this server runs without a registry (--registry off)")]
            )
        return reg

    def _run(self, context: grpc.ServicerContext, fn: Callable[[], R]) -> R:
        try:
            return fn()
        except ClaimConflict as exc:  # one violation per reservation, each naming its devices
            head = "refused: the update occupies or fails devices of live reservations (send it with revoke)"
            context.abort_with_status(precondition_failed(exc.kind, exc.subject, exc.lines, head))
            raise AssertionError("abort_with_status returns by raising") from exc
        except Exception as exc:
            context.abort_with_status(status_for(exc))
            raise AssertionError("abort_with_status returns by raising") from exc

    # ---- clusters and state --------------------------------------------------------------------------------

    def PutCluster(
        self, request: rpb.PutClusterRequest, context: grpc.ServicerContext
    ) -> rpb.PutClusterResponse:
        def work() -> rpb.PutClusterResponse:
            if not request.HasField("cluster"):
                raise InputError("request", [Problem("cluster", "is required")])
            n = request_budget.estimate_devices(request.cluster)
            if n > self._settings.max_devices:
                raise LimitExceeded(
                    "devices",
                    f"the cluster has {n} devices; this server accepts at most {self._settings.max_devices}",
                )
            ps = convert._Problems()
            doc = convert._cluster_dict(request.cluster, ps)
            ps.raise_if_any()
            try:
                version, changed = self._registry().put_cluster(request.cluster_id, doc)
            except InputError as e:
                raise (prefixed(e, "cluster") if e.source == "cluster" else e) from None
            topo = self._registry().view(request.cluster_id).topology
            return rpb.PutClusterResponse(
                cluster_id=request.cluster_id, version=version, changed=changed, devices=topo.num_devices
            )

        return self._run(context, work)

    def UpdateState(
        self, request: rpb.UpdateStateRequest, context: grpc.ServicerContext
    ) -> rpb.UpdateStateResponse:
        def work() -> rpb.UpdateStateResponse:
            which = request.WhichOneof("change")
            if which is None:
                raise InputError("request", [Problem("change", "give a full `state` or a `diff`")])
            doc = convert.message_dict(getattr(request, which))
            snapshot, diff = (doc, None) if which == "state" else (None, doc)
            try:
                out = self._registry().update_state(
                    request.cluster_id,
                    request.generation,
                    revoke=request.revoke,
                    dry_run=request.dry_run,
                    reason=request.reason,
                    snapshot=snapshot,
                    diff=diff,
                )
            except InputError as e:
                raise (prefixed(e, which) if e.source in ("state", "diff") else e) from None
            return update_response(request.cluster_id, out)

        return self._run(context, work)

    def GetState(self, request: rpb.GetStateRequest, context: grpc.ServicerContext) -> rpb.GetStateResponse:
        return self._run(context, lambda: self._state(request)[0])

    def _state(self, request: rpb.GetStateRequest) -> tuple[rpb.GetStateResponse, StateView]:
        """GetState's answer and the view it was read from (WatchState's SNAPSHOT goes on from it)."""
        reg = self._registry()
        now = reg.clock()  # before the data: a hold left out had ended before it was read
        view = reg.view(request.cluster_id)
        out = rpb.GetStateResponse(
            cluster_id=request.cluster_id,
            cluster_version=view.record.version,
            generation=view.generation,
            seq=view.record.last_seq,
            state=state_message(view.document(now)),
            link_loads=_loads(view, now),
        )
        holders = {rid for rid, _ in view.holds(now).values()}
        for rid in sorted(holders):
            out.holds.append(reservation_to_proto(reg.get(rid)))
        if request.include_cluster:
            json_doc = dict(view.record.doc)
            for nt in json_doc.get("node_types", []):
                if "rails" in nt:
                    nt["rails"] = [-1 if x is None else x for x in nt["rails"]]
                if "cpu_affinity" in nt:  # unknown entries: "" and -1 in the message, as rails
                    nt["cpu_affinity"] = ["" if x is None else x for x in nt["cpu_affinity"]]
                if "numa_affinity" in nt:
                    nt["numa_affinity"] = [-1 if x is None else x for x in nt["numa_affinity"]]
            from google.protobuf import json_format

            json_format.ParseDict(json_doc, out.cluster)
        return out, view

    def WatchState(
        self, request: rpb.WatchStateRequest, context: grpc.ServicerContext
    ) -> Iterator[rpb.StateEvent]:
        try:
            reg = self._registry()
            seq = request.after_seq
            record = reg.store.cluster(request.cluster_id)
            if record is None:
                reg.view(request.cluster_id)  # NotFound
            elif seq <= 0 or seq < record.pruned_seq:  # a new watch, or the events after seq were pruned
                seq = -1
            view: StateView | None = None
            loads: list[rpb.UplinkLoad] = []
            while context.is_active() and not self._holder._stop.is_set():
                if seq < 0:
                    first, view = self._state(rpb.GetStateRequest(cluster_id=request.cluster_id))
                    seq, loads = first.seq, list(first.link_loads)
                    yield rpb.StateEvent(
                        cluster_id=request.cluster_id,
                        seq=seq,
                        kind=rpb.STATE_EVENT_KIND_SNAPSHOT,
                        generation=first.generation,
                        at_unix_s=reg.clock(),
                        state=first.state,
                        holds=first.holds,
                        cluster_version=first.cluster_version,
                        link_loads=loads,
                    )
                events = reg.events(request.cluster_id, seq, wait_s=_WATCH_POLL_S)
                now = reg.clock() if events else 0.0
                for ev in events:
                    if ev.seq != seq + 1:  # pruned under a slow watcher: start over with a snapshot
                        seq = -1
                        break
                    seq = ev.seq
                    # the loads once this event applied: the view moved along by it (a watch resumed behind,
                    # or past a new cluster version: the state read now)
                    moved = (
                        view.advance([ev])
                        if view is not None and view.record.last_seq == ev.seq - 1
                        else None
                    )
                    if moved is None:
                        view = reg.view(request.cluster_id)
                        loads = _loads(view, now)
                    else:
                        view = moved
                        if ev.kind in _TRAFFIC_EVENTS:
                            loads = _loads(view, now)
                    out = event_to_proto(ev)
                    out.link_loads.extend(loads)
                    yield out
        except Exception as exc:
            stopping = self._holder._stop.is_set()  # the registry closed under the watch: the server stops
            context.abort_with_status(status_for(ShuttingDown() if stopping else exc))

    # ---- reservations --------------------------------------------------------------------------------------

    def Reserve(self, request: rpb.ReserveRequest, context: grpc.ServicerContext) -> rpb.ReserveResponse:
        return self._placement.runner.run(request, context, self._reserve)

    def _reserve(
        self, request: rpb.ReserveRequest, context: grpc.ServicerContext, stop: threading.Event
    ) -> rpb.ReserveResponse:
        rpc.started(context, stop)
        reg = self._registry()
        place_req, ttl = reserve_request(request)
        ranks = request_budget.estimate_ranks(request.job)
        if ranks > self._settings.max_ranks:
            raise LimitExceeded(
                "ranks", f"job has {ranks} ranks; this server accepts at most {self._settings.max_ranks}"
            )
        if convert_serving.carries_serving(place_req):
            return self._reserve_serving(request, context, stop, place_req, ttl)
        inputs = (
            convert.place_inputs(  # the job's names checked on the cluster; Reserve reads the state itself
                place_req, self._settings.default_time_limit_s, reg.references(request.cluster_id)
            )
        )
        job = inputs.job
        try:
            return self._hold(
                reg,
                request,
                context,
                stop,
                ttl,
                job,
                inputs.options,
                lambda topo, res, budget: convert.result_to_proto(
                    topo, job, res, time_limit_s=budget.limit_s, deadline_limited=budget.deadline_limited
                ),
                max_slowdown=inputs.max_slowdown,
                shape=job_shape(request.job),
            )
        except Waiting as w:  # place or wait: WAIT reserves nothing
            waiting = pb.PlacementResult()
            waiting.ParseFromString(w.payload)
            return rpb.ReserveResponse(result=waiting, attempts=1)

    def _reserve_serving(
        self,
        request: rpb.ReserveRequest,
        context: grpc.ServicerContext,
        stop: threading.Event,
        place_req: pb.PlaceRequest,
        ttl: float,
    ) -> rpb.ReserveResponse:
        """Reserve of a serving deployment: placed by the serving objective on the current state, its answer kept
        as Place gives it (`PlacementResult.serving`), and its per-token traffic kept as its shape
        (`explicit_shape` of its `serving_traffic_job`: groups and edges), so that once committed later Places
        and Reserves of the cluster price its flows as any running job's."""
        reg = self._registry()
        inputs = convert_serving.serving_place_inputs(  # max_slowdown refused at its field: no ideal step
            place_req, self._settings.default_time_limit_s, reg.references(request.cluster_id)
        )
        sjob = inputs.job
        explicit = serving_traffic_job(inputs.topology, inputs.state, sjob)
        return self._hold(
            reg,
            request,
            context,
            stop,
            ttl,
            explicit,
            inputs.options,
            lambda topo, res, budget: convert_serving.serving_result(
                topo, sjob, res, time_limit_s=budget.limit_s, deadline_limited=budget.deadline_limited
            ),
            shape=explicit_shape(explicit, f"serving deployment {sjob.name}: its traffic per output token"),
            serving=sjob,
        )

    def _hold(
        self,
        reg: Registry,
        request: rpb.ReserveRequest,
        context: grpc.ServicerContext,
        stop: threading.Event,
        ttl: float,
        job: Job,
        options: SolveOptions,
        answer: Callable[[Topology, Any, rpc.TimeBudget], pb.PlacementResult],
        **how: Any,
    ) -> rpb.ReserveResponse:
        """`job` placed and its devices held by `reg.reserve` within the call's time budget, its answer kept as
        `answer` gives it (a Place's PlacementResult); `how`: the rest of `Registry.reserve`'s keywords."""
        budget = rpc.time_budget(options.time_limit_s, context, 1, self._settings)
        opts = rpc.fit_options(options, budget, stop, self._settings)

        def render(topo: Topology, res: Any) -> bytes:
            return bytes(answer(topo, res, budget).SerializeToString())

        fingerprint = request_hash(
            request.job.SerializeToString(deterministic=True),
            request.options.SerializeToString(deterministic=True),
        )
        t0 = time.perf_counter()
        with rpc.watchdog(budget, stop):
            out = reg.reserve(
                request.cluster_id,
                job,
                opts,
                ttl_s=ttl,
                key=request.idempotency_key or None,
                fingerprint=fingerprint,
                render=render,
                gone=lambda: _gone(context, self._settings.registry_reply_margin_s),
                **how,
            )
        return self._reserved(reg, out, context, t0)

    def _reserved(
        self, reg: Registry, out: ReserveOutcome, context: grpc.ServicerContext, t0: float
    ) -> rpb.ReserveResponse:
        """The answer of a Reserve that holds devices (a claim whose caller left is given back first)."""
        res = out.reservation
        if not out.replayed and _gone(context):
            # the claim committed, then the caller's deadline passed (or it cancelled) before the answer left: the
            # server's deadline is at or after the caller's, so nobody holds this id; give the devices back
            reg.release(res.id)
            _log.warning(
                "reservation released: its caller left before the answer",
                extra={"fields": {"reservation": res.id, "job": res.job}},
            )
        _log.info(
            "reserved",
            extra={
                "fields": {
                    "reservation": res.id,
                    "job": res.job,
                    "ranks": len(res.devices),
                    "replayed": out.replayed,
                    "attempts": out.attempts,
                    "status": res.status.value,
                    "solve_s": round(time.perf_counter() - t0, 4),
                }
            },
        )
        result = pb.PlacementResult()
        result.ParseFromString(res.payload)
        return rpb.ReserveResponse(
            result=result,
            reservation_id=res.id,
            expires_unix_s=res.expires_at,
            reservation=reservation_to_proto(res),
            replayed=out.replayed,
            attempts=out.attempts,
        )

    def Commit(
        self, request: rpb.ReservationRequest, context: grpc.ServicerContext
    ) -> rpb.ReservationResponse:
        ttl = request.ttl_s if request.HasField("ttl_s") else None
        return self._run(
            context,
            lambda: rpb.ReservationResponse(
                reservation=reservation_to_proto(self._registry().commit(request.reservation_id, ttl))
            ),
        )

    def Release(
        self, request: rpb.ReservationRequest, context: grpc.ServicerContext
    ) -> rpb.ReservationResponse:
        return self._run(
            context,
            lambda: rpb.ReservationResponse(
                reservation=reservation_to_proto(self._registry().release(request.reservation_id))
            ),
        )

    def Renew(
        self, request: rpb.ReservationRequest, context: grpc.ServicerContext
    ) -> rpb.ReservationResponse:
        ttl = request.ttl_s if request.HasField("ttl_s") else None  # the lease default, or the heartbeat
        return self._run(
            context,
            lambda: rpb.ReservationResponse(
                reservation=reservation_to_proto(self._registry().renew(request.reservation_id, ttl))
            ),
        )

    def ListReservations(
        self, request: rpb.ListReservationsRequest, context: grpc.ServicerContext
    ) -> rpb.ListReservationsResponse:
        return self._run(
            context,
            lambda: rpb.ListReservationsResponse(
                reservations=[
                    reservation_to_proto(r)
                    for r in self._registry().reservations(
                        request.cluster_id or None, live_only=request.live_only
                    )
                ]
            ),
        )
