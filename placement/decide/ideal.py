"""A job's ideal: the same job placed by `placement.decide.balance.place_job` on its cluster with no occupancy
(failures and degradations kept), with a short limit, cached per (cluster digest, job shape, strategy) for the process.

Place or wait (`placement.decide.wait`) and preempt (`placement.decide.preempt`) both judge against it, so one job's
ideal is solved once per process whichever path asks first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict

from placement.cost.report import CostReport
from placement.decide.balance import Solve, place_job
from placement.errors import InfeasibleError
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.run import place
from placement.solve.types import SolveOptions, Strategy

__all__ = [
    "CACHE_SIZE",
    "IDEAL_LIMIT_S",
    "IDEAL_SHARE",
    "cluster_digest",
    "ideal_limit",
    "ideal_placement",
    "ideal_result",
    "ideal_step",
]

IDEAL_SHARE = 0.25
"""The ideal's solve gets this share of the request's time limit ..."""
IDEAL_LIMIT_S = 2.0
"""... and at most this many seconds."""
CACHE_SIZE = 256
"""Ideals kept (least recently used dropped first)."""

_cache: OrderedDict[tuple[str, str, str], tuple[CostReport, tuple[int, ...]] | None] = OrderedDict()
_digests: OrderedDict[int, tuple[Topology, str]] = OrderedDict()
_lock = threading.Lock()


def cluster_digest(topology: Topology, state: ClusterState) -> str:
    """A key of what the ideal depends on: the topology (levels, tiers, devices and their domains, pair
    matrices) and the state's failures and degradations (never its occupancy)."""
    with _lock:
        hit = _digests.get(id(topology))
        if hit is not None and hit[0] is topology:
            base = hit[1]
        else:
            h = hashlib.sha256()
            h.update(repr(topology.levels).encode())
            h.update(repr([(d.id, d.kind) for d in topology.devices]).encode())
            h.update(repr(topology.domain_names).encode())
            h.update(repr(topology.parent).encode())
            h.update(repr(getattr(topology, "pair_paths", None)).encode())
            base = h.hexdigest()
            _digests[id(topology)] = (topology, base)  # the topology is kept: its id is not reused meanwhile
            while len(_digests) > 16:
                _digests.popitem(last=False)
    faults = (
        sorted(state.failed),
        sorted(state.device_slowdown.items()),
        sorted(state.failed_pairs),
        sorted(state.pair_slowdown.items()),
        sorted(map(repr, state.failed_uplinks)),
        sorted((repr(k), v) for k, v in state.uplink_slowdown.items()),
        sorted((k, sorted((n, sorted(ds)) for n, ds in v.items())) for k, v in state.fault_domains.items()),
    )
    return hashlib.sha256((base + repr(faults)).encode()).hexdigest()


def _shape(job: Job) -> str:
    """The job without its name (a digest of it): what its ideal depends on."""
    return hashlib.sha256(repr(dataclasses.replace(job, name="")).encode()).hexdigest()


def ideal_limit(options: SolveOptions) -> float:
    """The ideal's time limit: `IDEAL_SHARE` of the request's, at most `IDEAL_LIMIT_S` (at least 0.05 s)."""
    return max(0.05, min(IDEAL_LIMIT_S, IDEAL_SHARE * options.time_limit_s))


def ideal_result(
    topology: Topology,
    state: ClusterState,
    job: Job,
    options: SolveOptions,
    traffic: Traffic | None = None,
    solve: Solve = place,
) -> tuple[CostReport, tuple[int, ...]] | None:
    """The job's report and mapping placed by `place_job` (balance rule honoured) on the cluster with no
    occupancy with `options.strategy`, within `ideal_limit(options)`, cached per (cluster digest, job shape,
    strategy); None when it does not fit even there. A short solve may miss the best placement: callers take the
    better of this and their answer. An answer cut short by `options.stop` is returned but not cached."""
    key = (cluster_digest(topology, state), _shape(job), Strategy(options.strategy).canonical.value)
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    opts = dataclasses.replace(options, time_limit_s=ideal_limit(options))
    out: tuple[CostReport, tuple[int, ...]] | None = None
    try:
        empty = dataclasses.replace(state, occupied={}, background=(), link_load={})
        res = place_job(topology, empty, job, opts, traffic=traffic, solve=solve)
        if res.report is not None and res.mapping is not None:
            out = (res.report, tuple(res.mapping))
    except InfeasibleError:
        out = None
    if options.stop is not None and options.stop.is_set():
        return out  # cut short: not the solver's best, not cached
    with _lock:
        _cache[key] = out
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return out


def ideal_placement(
    topology: Topology,
    state: ClusterState,
    job: Job,
    options: SolveOptions,
    traffic: Traffic | None = None,
    solve: Solve = place,
) -> tuple[float, tuple[int, ...]] | None:
    """The step and mapping of `ideal_result` (None: the job does not fit on the empty cluster)."""
    hit = ideal_result(topology, state, job, options, traffic, solve)
    return None if hit is None else (hit[0].step_seconds, hit[1])


def ideal_step(
    topology: Topology,
    state: ClusterState,
    job: Job,
    options: SolveOptions,
    traffic: Traffic | None = None,
    solve: Solve = place,
) -> float | None:
    """The step of `ideal_result` (None: the job does not fit on the empty cluster)."""
    hit = ideal_result(topology, state, job, options, traffic, solve)
    return None if hit is None else hit[0].step_seconds
