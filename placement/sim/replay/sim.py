"""The replay's event simulation: arrivals, a FIFO queue (optionally backfilled), placement by one policy on the
current state, runs stretched by the modeled step time, GPU failures that kill or repair a job. Owns `simulate`.
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
from placement.errors import InfeasibleError
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.sim.replay.shapes import ShapeRule, job_for
from placement.sim.replay.traces import TraceJob
from placement.solve import SolveOptions, Strategy
from placement.solve.baselines import BASELINES
from placement.solve.batch.clock import WallClock
from placement.solve.run import place

__all__ = ["POLICIES", "ReplayResult", "SimConfig", "simulate"]

POLICIES = ("first-fit", "kueue-tas", "slurm-tree", "cpsat")

_RESERVE_SHARE = 0.05  # of a job's wall-clock limit, kept for scoring its placement after the search
_END, _REPAIR, _FAIL, _ARRIVE = 0, 1, 2, 3  # order of events at the same time: free first, arrive last


@dataclass(frozen=True)
class SimConfig:
    """One replay: the policy, seeds, queue discipline, solver budget and failure model.

    - `backfill`: 0 is strict FIFO; N > 0 also starts any of the next N queued jobs that fit now (greedy
      backfill: a started job may delay the head);
    - `time_limit_s` / `deterministic`: the cpsat policy's budget per job: a deterministic budget by default
      (CP-SAT's deterministic time, so that a replay gives the same answer on any machine and under any load;
      not a bound on the wall time), a wall-clock limit per job with ``deterministic=False``;
    - `failure_rate`: GPU failures per GPU per day (0: none); `failure_mode` ``kill`` restarts the hit job from
      the start (it goes back to the head of the queue), ``repair`` moves the hit rank to the nearest free
      device (same node, then leaf, ...) and the job runs on with its new step time (killed if none is free);
      a failed GPU comes back after `repair_hours`;
    - `arrival_scale`: submit times are multiplied by it (< 1 packs a sparse trace into more contention);
    - `max_slowdown`: a placement whose step is more than this times the ideal is declined while other jobs run
      (the job waits for a better one, as a node-aligned scheduler does); 0: any placement is taken.
    """

    policy: str
    seed: int = 0
    backfill: int = 0
    time_limit_s: float = 0.5
    deterministic: bool = True
    failure_rate: float = 0.0
    failure_mode: str = "kill"
    repair_hours: float = 4.0
    arrival_scale: float = 1.0
    max_slowdown: float = 0.0
    keep_segments: bool = False


@dataclass
class ReplayResult:
    """What one replay produced: a record per job, the time series and the device segments (if kept)."""

    policy: str
    seed: int
    records: list[dict[str, Any]]
    series: list[tuple[float, int, int, float]]
    """(time s, busy devices, usable devices, fragmentation index) after each change."""
    wall_s: float
    segments: list[tuple[int, tuple[int, ...], float, float]] = field(default_factory=list)
    """(job index, devices, from, to) of every run segment (with `SimConfig.keep_segments`)."""


@dataclass
class _Run:
    idx: int
    tj: TraceJob
    job: Job
    traffic: Traffic
    ideal: float
    remaining: float  # ideal-placement seconds of work left
    mapping: list[int] = field(default_factory=list)
    seg_start: float = 0.0
    factor: float = 1.0
    comm_frac: float = 0.0
    version: int = 0
    first_start: float | None = None
    comm_s: float = 0.0
    restarts: int = 0
    repairs: int = 0
    step: float = 0.0


class _Cluster:
    """The live state: occupancy and failures kept incrementally, with per-node free counts."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.host = topo.domain_column(0)
        self.node_devs = topo.devices_in_domain[0]
        self.occ: dict[int, str] = {}
        self.failed: set[int] = set()
        self._failed_fs: frozenset[int] = frozenset()
        self.node_free = [len(d) for d in self.node_devs]
        self.free = topo.num_devices
        self.whole_free = topo.num_devices  # free devices in nodes with every device free

    def state(self) -> ClusterState:
        return ClusterState(occupied=self.occ, failed=self._failed_fs)

    def _adjust(self, d: int, delta: int) -> None:
        h = self.host[d]
        size = len(self.node_devs[h])
        if self.node_free[h] == size:
            self.whole_free -= size
        self.node_free[h] += delta
        self.free += delta
        if self.node_free[h] == size:
            self.whole_free += size

    def take(self, devs: Sequence[int], owner: str) -> None:
        for d in devs:
            if d in self.occ or d in self.failed:
                raise AssertionError(
                    f"device {d} is already {'taken by ' + self.occ[d] if d in self.occ else 'failed'}"
                )
            self.occ[d] = owner
            self._adjust(d, -1)

    def release(self, devs: Sequence[int]) -> None:
        for d in devs:
            del self.occ[d]
            if d not in self.failed:
                self._adjust(d, +1)

    def fail(self, d: int) -> None:
        """Mark `d` failed (its job, if any, is the caller's to handle first)."""
        if d not in self.occ:
            self._adjust(d, -1)
        self.failed.add(d)
        self._failed_fs = frozenset(self.failed)

    def repair(self, d: int) -> None:
        self.failed.discard(d)
        self._failed_fs = frozenset(self.failed)
        if d not in self.occ:
            self._adjust(d, +1)

    @property
    def usable(self) -> int:
        return self.topo.num_devices - len(self.failed)

    @property
    def frag(self) -> float:
        return 0.0 if self.free <= 0 else 1.0 - self.whole_free / self.free

    def nearest_free(self, d: int) -> int | None:
        for lvl in range(len(self.topo.levels)):
            dom = self.topo.domain_column(lvl)[d]
            for x in self.topo.devices_in_domain[lvl][dom]:
                if x not in self.occ and x not in self.failed:
                    return x
        return None


_IDEAL: dict[int, tuple[Topology, dict[tuple[Any, ...], float]]] = {}


def _ideal_step(topo: Topology, job: Job, traffic: Traffic, key: tuple[Any, ...]) -> float:
    """The job's modeled step on an empty cluster: the best of the scheduler baselines (cached by shape)."""

    hit = _IDEAL.get(id(topo))
    if hit is None or hit[0] is not topo:  # keeps the topology alive, so that its id is not reused meanwhile
        hit = _IDEAL[id(topo)] = (topo, {})
    cache = hit[1]
    if key not in cache:
        empty = ClusterState()
        steps = [
            evaluate(topo, empty, job, m, traffic=traffic, check=False).step_seconds
            for m in (f(topo, empty, job, traffic) for f in BASELINES.values())
            if m is not None
        ]
        cache[key] = min(steps)
    return cache[key]


def simulate(
    topo: Topology,
    jobs: Sequence[TraceJob],
    cfg: SimConfig,
    rule: ShapeRule | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayResult:
    """Replay `jobs` on `topo` under `cfg`. Every job ends: it runs to completion, or is recorded unplaced when
    it cannot be placed on an otherwise idle cluster."""

    if cfg.policy not in POLICIES:
        raise ValueError(f"policy {cfg.policy!r} is not one of {list(POLICIES)}")
    t_wall = time.perf_counter()
    rule = rule or ShapeRule()
    gpn = max(len(d) for d in topo.devices_in_domain[0])
    kind = topo.devices[0].kind if len(topo.kinds()) == 1 else None
    cl = _Cluster(topo)
    rng = random.Random(f"replay:{cfg.seed}")
    opts = SolveOptions(
        strategy=Strategy.CPSAT,
        time_limit_s=cfg.time_limit_s,
        workers=1,
        seed=cfg.seed,
        deterministic=cfg.deterministic,
    )
    ev: list[tuple[float, int, int, int, int]] = []
    seq = 0

    def push(t: float, kind_: int, a: int, b: int = 0) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(ev, (t, kind_, seq, a, b))

    runs: list[_Run] = []
    for i, tj in enumerate(jobs):
        job = job_for(f"j{i}", tj.gpus, rule, gpus_per_node=gpn, kind=kind, shape=tj.shape, model=tj.model)
        tr = job_traffic(job)
        par = job.parallel
        if par is None:
            raise ValueError(f"replay job {job.name}: job_for built no parallel sizes")
        key = (par.tp, par.cp, par.ep, par.dp, par.pp, job.model)
        runs.append(_Run(i, tj, job, tr, _ideal_step(topo, job, tr, key), tj.duration))
        push(tj.submit * cfg.arrival_scale, _ARRIVE, i)
    queue: list[int] = []
    running: dict[int, _Run] = {}
    owner: dict[str, int] = {}
    records: list[dict[str, Any]] = [{} for _ in runs]
    series: list[tuple[float, int, int, float]] = [(0.0, 0, cl.usable, cl.frag)]
    segments: list[tuple[int, tuple[int, ...], float, float]] = []
    finished = 0
    fail_rate = cfg.failure_rate / 86400.0 * topo.num_devices
    if fail_rate > 0 and runs:
        push(rng.expovariate(fail_rate), _FAIL, 0)

    def try_place(r: _Run) -> tuple[list[int], CostReport] | None:
        if r.job.ranks > cl.free:
            return None
        st = cl.state()
        if cfg.policy == "cpsat":
            clock = WallClock(opts, _RESERVE_SHARE * opts.time_limit_s)  # per job (none if deterministic)
            try:
                res = place(topo, st, r.job, clock.options)
            except InfeasibleError:
                return None
            finally:
                clock.cancel()
            if res.mapping is None or res.report is None:
                raise ValueError(f"replay job {r.job.name}: place returned no mapping and no error")
            m, rep = res.mapping, res.report
        else:
            got = BASELINES[cfg.policy](topo, st, r.job, r.traffic)
            if got is None:
                return None
            m, rep = got, evaluate(topo, st, r.job, got, traffic=r.traffic, check=False)
        if cfg.max_slowdown > 0 and running and rep.step_seconds > cfg.max_slowdown * r.ideal:
            return None  # wait for a better placement while others run
        return m, rep

    def start(r: _Run, m: list[int], rep: CostReport, now: float) -> None:
        cl.take(m, r.job.name)
        r.mapping, r.seg_start = list(m), now
        r.step = rep.step_seconds
        r.factor = rep.step_seconds / r.ideal if r.ideal > 0 else 1.0
        r.comm_frac = rep.comm_seconds / rep.step_seconds if rep.step_seconds > 0 else 0.0
        r.version += 1
        if r.first_start is None:
            r.first_start = now
        running[r.idx] = r
        owner[r.job.name] = r.idx
        push(now + r.remaining * r.factor, _END, r.idx, r.version)

    def stop_segment(r: _Run, now: float) -> None:
        seg = now - r.seg_start
        r.comm_s += seg * r.comm_frac
        r.remaining = max(0.0, r.remaining - seg / r.factor)
        if cfg.keep_segments:
            segments.append((r.idx, tuple(r.mapping), r.seg_start, now))

    def finish(r: _Run, now: float, placed: bool) -> None:
        nonlocal finished
        finished += 1
        tj = r.tj
        start_t = r.first_start if r.first_start is not None else now
        records[r.idx] = {
            "job": tj.name,
            "line": tj.line,
            "gpus": tj.gpus,
            "shape": _shape(r.job),
            "submit_s": tj.submit * cfg.arrival_scale,
            "start_s": start_t if placed else None,
            "end_s": now if placed else None,
            "wait_s": start_t - tj.submit * cfg.arrival_scale if placed else None,
            "jct_s": now - tj.submit * cfg.arrival_scale if placed else None,
            "trace_duration_s": tj.duration,
            "ideal_step_s": r.ideal,
            "step_s": r.step if placed else None,
            "slowdown": r.factor if placed else None,
            "comm_hours": r.comm_s / 3600.0,
            "nodes": len({cl.host[d] for d in r.mapping}) if placed else None,
            "restarts": r.restarts,
            "repairs": r.repairs,
            "placed": placed,
        }
        if progress is not None:
            progress(finished, len(runs))

    def schedule(now: float) -> None:
        i = 0
        while i < len(queue):
            if i > cfg.backfill:
                break
            r = runs[queue[i]]
            got = try_place(r)
            if got is not None:
                queue.pop(i)
                start(r, got[0], got[1], now)
                continue
            if i == 0 and not running and not cl.failed:
                queue.pop(0)  # not placeable on an idle, healthy cluster: it would wait forever
                finish(r, now, placed=False)
                continue
            i += 1

    def note(now: float) -> None:
        busy = len(cl.occ)
        point = (now, busy, cl.usable, cl.frag)
        if series[-1][1:] != point[1:]:
            series.append(point)

    while ev:
        now = ev[0][0]
        while ev and ev[0][0] == now:
            _, kind_, _, a, b = heapq.heappop(ev)
            if kind_ == _ARRIVE:
                queue.append(a)
            elif kind_ == _END:
                r = running.get(a)
                if r is None or r.version != b:
                    continue
                stop_segment(r, now)
                del running[a]
                cl.release(r.mapping)
                finish(r, now, placed=True)
            elif kind_ == _REPAIR:
                cl.repair(a)
            elif kind_ == _FAIL:
                if finished < len(runs):
                    push(now + rng.expovariate(fail_rate), _FAIL, 0)
                d = rng.randrange(topo.num_devices)
                if d in cl.failed:
                    continue
                hit = owner.get(cl.occ.get(d, ""))
                hit_run = running.get(hit) if hit is not None else None
                if hit_run is not None:
                    stop_segment(hit_run, now)
                    new = cl.nearest_free(d) if cfg.failure_mode == "repair" else None
                    cl.release(hit_run.mapping)
                    cl.fail(d)
                    del running[hit_run.idx]
                    hit_run.version += 1
                    if new is not None:
                        m = [new if x == d else x for x in hit_run.mapping]
                        rep = evaluate(topo, cl.state(), hit_run.job, m, traffic=hit_run.traffic, check=False)
                        hit_run.repairs += 1
                        start(hit_run, m, rep, now)
                    else:
                        hit_run.restarts += 1
                        hit_run.remaining = hit_run.tj.duration
                        queue.insert(0, hit_run.idx)
                else:
                    cl.fail(d)
                push(now + cfg.repair_hours * 3600.0, _REPAIR, d)
        if finished < len(runs):
            schedule(now)
        note(now)
        if finished >= len(runs):
            break
    return ReplayResult(cfg.policy, cfg.seed, records, series, time.perf_counter() - t_wall, segments)


def _shape(job: Job) -> str:
    p = job.parallel
    if p is None:
        return f"{job.ranks} ranks"
    return f"tp{p.tp}-pp{p.pp}-dp{p.dp}"
