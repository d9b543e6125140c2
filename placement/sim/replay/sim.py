"""The replay's event simulation: arrivals, a FIFO queue (optionally backfilled), placement by one policy on the
current state (place, wait or preempt), runs stretched by the modeled step, GPU failures, and (with
`SimConfig.contention`) the running jobs' traffic on shared links. Owns `simulate` and its event loop `Simulation`.

**Contention.** With `contention`, the running jobs share the fabric (`placement.cost.shared.SharedFabric`): a
job's progress rate follows its contended step, which is recomputed when a job it shares a link with starts or
ends (only the jobs of that sharing component, never the whole cluster). The placement policies see the running
jobs' traffic in the state they place on (the cpsat-based ones price it; the scheduler baselines, like the
schedulers they copy, choose without it and then run at the contended step). Each job records the GPU-hours it
lost to contention (its GPUs x the wall time beyond its step alone on the same devices) and its contended slowdown.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
from placement.cost.shared import SharedFabric
from placement.decide.batch.clock import WallClock
from placement.decide.preempt import RunningJob, preempt
from placement.decide.repair.input import RepairBudget
from placement.decide.repair.run import repair
from placement.errors import InfeasibleError, InputError
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.state import RunningJob as FabricJob
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.sim.replay.shapes import ShapeRule, job_for
from placement.sim.replay.traces import TraceJob
from placement.solve import SolveOptions, Strategy
from placement.solve.baselines import BASELINES
from placement.solve.run import place

__all__ = ["POLICIES", "ReplayResult", "SimConfig", "Simulation", "simulate"]

POLICIES = ("first-fit", "kueue-tas", "slurm-tree", "cpsat", "cpsat-wait", "cpsat-preempt", "cpsat-cluster")
"""Scheduler baselines; cpsat (place now, always); cpsat-wait (place now or wait, from the model); cpsat-preempt
(cpsat-wait, and preempt lower-priority jobs when their restart cost is below the gain); cpsat-cluster (cpsat-wait
with the objective ``cluster``: its own step plus the harm it does to the running jobs on shared links)."""
_WAITING_POLICIES = ("cpsat-wait", "cpsat-preempt", "cpsat-cluster")

_BASELINE_POLICIES = ("first-fit", "kueue-tas", "slurm-tree")
_NEAR_IDEAL = 1.01  # a placement within 1% of the ideal step is taken at once by cpsat-wait
_WAIT_CHECKS = 16  # running jobs' ends looked at when estimating the wait for a better placement
_PASS_WINDOW = 8  # queued jobs waiting by choice that later jobs may pass in one scheduling round
_PREEMPT_TRIES = 3  # preempt searches per queued job (each after the running set changed)
_PREEMPT_CHECKS = 8  # feasibility checks per preempt search
_PREEMPT_CANDIDATES = 8  # running jobs offered to one preempt search (the cheapest per device)

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
      (the job waits for a better one, as a node-aligned scheduler does); 0: any placement is taken. A baseline
      policy whose own placement is above the bound tries the other baselines' placements first; a job that
      waits by this rule (or by cpsat-wait's) does not block the queue: up to 8 such jobs may be passed by
      later ones in each scheduling round;
    - `checkpoint_s`: a job checkpoints every this many seconds of its run; a preempted job loses the work since
      its last checkpoint (cpsat-preempt) and restarts from it after `restart_s` more.
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
    checkpoint_s: float = 1800.0
    restart_s: float = 60.0
    contention: bool = False
    """Running jobs share the fabric: their steps follow each other's traffic (module doc)."""


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
    seg_start: float = 0.0  # the start of the current run segment (on these devices)
    rate_since: float = 0.0  # progress is accounted up to here (the segment's start, or its last rate change)
    factor: float = 1.0
    comm_frac: float = 0.0
    version: int = 0
    first_start: float | None = None
    comm_s: float = 0.0
    restarts: int = 0
    repairs: int = 0
    preemptions: int = 0
    step: float = 0.0
    end_at: float = 0.0  # the expected end of the current run segment
    waits: int = 0  # times cpsat-wait chose to wait
    preempt_tries: int = 0
    preempt_seen: int = -1  # the running set's version at the last preempt search
    alone_step: float = 0.0  # the step on its current devices with no other traffic (contention only)
    alone_comm: float = 0.0  # the communication it exposes per step there alone
    contention_gpu_s: float = 0.0  # GPU-seconds lost to other jobs' traffic
    alone_wall_s: float = 0.0  # wall seconds its runs would have taken alone on the same devices
    run_wall_s: float = 0.0  # wall seconds it ran


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

    def state(self, background: Sequence[FabricJob] = ()) -> ClusterState:
        return ClusterState(occupied=self.occ, failed=self._failed_fs, background=tuple(background))

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

    return Simulation(topo, jobs, cfg, rule, progress=progress).run()


class Simulation:
    """One replay's event loop: the event heap, the queue, the running jobs and the cluster as attributes; one
    method per event (`arrive`, `end`, `fail`, `repair_device`) and per scheduling step (`schedule`, `try_place`,
    `try_preempt`, `start`, `stop`, `finish`).

    A running job's progress is kept as work: `_Run.remaining` ideal-placement seconds left as of
    `_Run.rate_since`, consumed at 1 / `_Run.factor` per wall second. `reprice` changes a running job's rate
    (its step) mid-run and reschedules its end; the loop ignores an end event whose version is stale.
    """

    def __init__(
        self,
        topo: Topology,
        jobs: Sequence[TraceJob],
        cfg: SimConfig,
        rule: ShapeRule | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        if cfg.policy not in POLICIES:
            raise ValueError(f"policy {cfg.policy!r} is not one of {list(POLICIES)}")
        self.t_wall = time.perf_counter()
        self.topo = topo
        self.cfg = cfg
        self.progress = progress
        self.cl = _Cluster(topo)
        self.rng = random.Random(f"replay:{cfg.seed}")
        self.opts = SolveOptions(
            strategy=Strategy.CPSAT,
            time_limit_s=cfg.time_limit_s,
            workers=1,
            seed=cfg.seed,
            deterministic=cfg.deterministic,
            objective="cluster" if cfg.policy == "cpsat-cluster" else "own",
        )
        self.shared = SharedFabric(topo, ClusterState()) if cfg.contention else None
        self.fabric_jobs: dict[str, FabricJob] = {}  # the running jobs as the shared fabric sees them
        self.ev: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.runs = _runs(topo, jobs, rule or ShapeRule())
        for r in self.runs:
            self.push(r.tj.submit * cfg.arrival_scale, _ARRIVE, r.idx)
        self.queue: list[int] = []
        self.running: dict[int, _Run] = {}
        self.owner: dict[str, int] = {}
        self.records: list[dict[str, Any]] = [{} for _ in self.runs]
        self.series: list[tuple[float, int, int, float]] = [(0.0, 0, self.cl.usable, self.cl.frag)]
        self.segments: list[tuple[int, tuple[int, ...], float, float]] = []
        self.finished = 0
        self.running_version = 0  # changes whenever a job starts or stops
        self.fail_rate = cfg.failure_rate / 86400.0 * topo.num_devices
        if self.fail_rate > 0 and self.runs:
            self.push(self.rng.expovariate(self.fail_rate), _FAIL, 0)

    # ---- the loop ---------------------------------------------------------------------------------------------

    def push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.ev, (t, kind, self.seq, a, b))

    def run(self) -> ReplayResult:
        """Pop events in time order (at one time: ends, repairs, failures, arrivals), then schedule the queue."""
        ev = self.ev
        while ev:
            now = ev[0][0]
            while ev and ev[0][0] == now:
                _, kind, _, a, b = heapq.heappop(ev)
                if kind == _ARRIVE:
                    self.arrive(a)
                elif kind == _END:
                    self.end(a, b, now)
                elif kind == _REPAIR:
                    self.repair_device(a)
                elif kind == _FAIL:
                    self.fail(now)
            if self.finished < len(self.runs):
                self.schedule(now)
            self.note(now)
            if self.finished >= len(self.runs):
                break
        wall = time.perf_counter() - self.t_wall
        return ReplayResult(self.cfg.policy, self.cfg.seed, self.records, self.series, wall, self.segments)

    # ---- events -----------------------------------------------------------------------------------------------

    def arrive(self, idx: int) -> None:
        self.queue.append(idx)

    def end(self, idx: int, version: int, now: float) -> None:
        """A run's expected end; stale (the job stopped or was repriced since) unless `version` is current."""
        r = self.running.get(idx)
        if r is None or r.version != version:
            return
        self.stop_segment(r, now)
        self.stop(r, now)
        self.finish(r, now, placed=True)

    def repair_device(self, d: int) -> None:
        self.cl.repair(d)

    def fail(self, now: float) -> None:
        """A GPU failure: the next one is drawn first, then the device hit (skipped if already failed)."""
        if self.finished < len(self.runs):
            self.push(now + self.rng.expovariate(self.fail_rate), _FAIL, 0)
        d = self.rng.randrange(self.topo.num_devices)
        if d in self.cl.failed:
            return
        self.on_failure(now, d)
        self.push(now + self.cfg.repair_hours * 3600.0, _REPAIR, d)

    def on_failure(self, now: float, d: int) -> None:
        """Device `d` fails: its job, if any, is repaired (``repair`` mode, when a repair fits) or killed (back
        to the head of the queue, from the start)."""
        cl = self.cl
        hit = self.owner.get(cl.occ.get(d, ""))
        hit_run = self.running.get(hit) if hit is not None else None
        if hit_run is None:
            cl.fail(d)
            return
        self.stop_segment(hit_run, now)
        cl.fail(d)  # still held by the job: the repair moves its rank off it
        m: list[int] | None = None
        if self.cfg.failure_mode == "repair":
            m = self.repaired(hit_run)
        self.stop(hit_run, now)
        if m is not None:
            rep = evaluate(self.topo, self.state(), hit_run.job, m, traffic=hit_run.traffic, check=False)
            hit_run.repairs += 1
            self.start(hit_run, m, rep, now)
        else:
            hit_run.restarts += 1
            hit_run.remaining = hit_run.tj.duration
            self.queue.insert(0, hit_run.idx)

    def repaired(self, r: _Run) -> list[int] | None:
        """The Repair solver's recommended mapping for `r` after its device failed (few moves against the
        step over the run left); None when no repair fits (the job is killed)."""
        horizon = r.remaining * r.factor / max(r.step, 1e-9)
        try:
            res = repair(
                self.topo,
                self.cl.state(),
                r.job,
                r.mapping,
                budget=RepairBudget(move_cost_s=self.cfg.restart_s, horizon_steps=max(1.0, horizon)),
                options=self.opts,
                points=1,
            )
        except (InfeasibleError, InputError):
            return None
        return list(res.answers[res.recommended].mapping)

    # ---- scheduling -------------------------------------------------------------------------------------------

    def schedule(self, now: float) -> None:
        """One scheduling round over the queue in order: place what fits (backfill window, passing jobs that
        wait by choice), drop a head that no idle cluster could hold, preempt for a job (cpsat-preempt)."""
        queue, cfg = self.queue, self.cfg
        i = 0
        room = 0  # queued jobs passed because they do not fit now (the backfill window counts these)
        by_choice = 0  # queued jobs passed because they chose to wait (they do not block the queue)
        while i < len(queue):
            if room > cfg.backfill or by_choice > _PASS_WINDOW:
                break
            r = self.runs[queue[i]]
            got = self.try_place(r, now)
            if not isinstance(got, str):
                queue.pop(i)
                self.start(r, got[0], got[1], now)
                continue
            if i == 0 and not self.running and not self.cl.failed:
                queue.pop(0)  # not placeable on an idle, healthy cluster: it would wait forever
                self.finish(r, now, placed=False)
                continue
            victims = self.try_preempt(r, now, got) if cfg.policy == "cpsat-preempt" else None
            if victims is not None:
                queue[i : i + 1] = sorted(
                    victims
                )  # the victims take its place in the queue, in arrival order
                continue
            if got == "room":
                room += 1
            else:
                by_choice += 1
            i += 1

    def baseline(self, name: str, r: _Run, st: ClusterState) -> tuple[list[int], CostReport] | None:
        got = BASELINES[name](self.topo, st, r.job, r.traffic)
        if got is None:
            return None
        return got, evaluate(self.topo, st, r.job, got, traffic=r.traffic, check=False)

    def solve(self, r: _Run, st: ClusterState) -> tuple[list[int], CostReport] | None:
        clock = WallClock(
            self.opts, _RESERVE_SHARE * self.opts.time_limit_s
        )  # per job (none if deterministic)
        try:
            res = place(self.topo, st, r.job, clock.options)
        except InfeasibleError:
            return None
        finally:
            clock.cancel()
        if res.mapping is None or res.report is None:
            raise ValueError(f"replay job {r.job.name}: place returned no mapping and no error")
        return res.mapping, res.report

    def by_expected_end(self) -> list[_Run]:
        return sorted(self.running.values(), key=lambda x: (x.end_at, x.idx))

    def expected_wait(self, r: _Run, now: float, step_now: float) -> float:
        """cpsat-wait's estimate: the earliest expected time at which a baseline placement (node-aligned) on the
        devices that running jobs free by their expected ends would make the job end sooner than placing it now
        at `step_now`; inf when none of the next `_WAIT_CHECKS` ends would."""
        cl = self.cl
        run_now = r.remaining * step_now / r.ideal
        freed: set[str] = set()
        free = cl.free
        checks = 0
        for o in self.by_expected_end():
            w = o.end_at - now
            if w >= run_now - r.remaining:  # even an ideal placement then ends later than placing now
                return math.inf
            freed.add(o.job.name)
            free += len(o.mapping)
            if free < r.job.ranks:
                continue
            checks += 1
            if checks > _WAIT_CHECKS:
                return math.inf
            st = ClusterState(
                occupied={d: j for d, j in cl.occ.items() if j not in freed}, failed=cl.state().failed
            )
            got = self.baseline("kueue-tas", r, st) or self.baseline("slurm-tree", r, st)
            if got is not None and w + r.remaining * got[1].step_seconds / r.ideal < run_now:
                return w
        return math.inf

    def try_place(self, r: _Run, now: float) -> tuple[list[int], CostReport] | str:
        """A placement, or why there is none: ``room`` (the job does not fit now) or ``choice`` (it fits but
        waits for a better placement: the max-slowdown bound or cpsat-wait's rule)."""
        cfg = self.cfg
        if r.job.ranks > self.cl.free:
            return "room"
        st = self.state()
        got: tuple[list[int], CostReport] | None
        if cfg.policy in _BASELINE_POLICIES:
            got = self.baseline(cfg.policy, r, st)
            if got is not None and cfg.max_slowdown > 0 and got[1].step_seconds > cfg.max_slowdown * r.ideal:
                # the policy's own placement is too slow: the other baselines' placements are alternatives
                alts = [self.baseline(b, r, st) for b in _BASELINE_POLICIES if b != cfg.policy]
                got = min((a for a in [got, *alts] if a is not None), key=lambda a: a[1].step_seconds)
        else:
            got = self.solve(r, st)
        if got is None:
            return "room"
        step = got[1].step_seconds
        if cfg.max_slowdown > 0 and self.running and step > cfg.max_slowdown * r.ideal:
            return "choice"  # wait for a better placement while others run
        if (
            cfg.policy in _WAITING_POLICIES
            and self.running
            and step > _NEAR_IDEAL * r.ideal
            and self.expected_wait(r, now, step) < math.inf
        ):
            r.waits += 1
            return "choice"
        return got

    # ---- preemption (cpsat-preempt) ---------------------------------------------------------------------------

    def lost_s(self, r: _Run, now: float) -> float:
        """Wall seconds of `r`'s current segment since its last checkpoint (lost if it is stopped now)."""
        seg = now - r.seg_start
        return seg % self.cfg.checkpoint_s if self.cfg.checkpoint_s > 0 else seg

    def try_preempt(self, r: _Run, now: float, why: str) -> list[int] | None:
        """cpsat-preempt: stop lower-priority running jobs (priority: less remaining GPU-time is higher) so that
        `r` starts now, when their cost is below the gain, both in GPU-hours. A victim's cost: its devices x (the
        time since its last checkpoint, lost, + the restart + `r`'s run, which it waits out behind `r`). The
        gain: `r`'s devices x the time it would otherwise lose (its expected wait, or its slowdown's cost).
        Returns the victims' indices (they go back to the queue), or None."""
        if r.preempt_tries >= _PREEMPT_TRIES or r.preempt_seen == self.running_version or not self.running:
            return None
        r.preempt_tries += 1
        r.preempt_seen = self.running_version
        gain_s = self.preempt_gain_s(r, now, why)
        if not 0 < gain_s < math.inf:
            return None
        gain_h = r.job.ranks * gain_s / 3600.0
        cands = self.preempt_candidates(r, now, gain_h)
        if cands is None:
            return None
        try:
            res = preempt(
                self.topo,
                self.cl.state(),
                r.job,
                cands,
                job_priority=-(r.job.ranks * r.remaining),
                max_slowdown=_NEAR_IDEAL,
                objective="gpu-hours",
                options=SolveOptions(
                    strategy=Strategy.CPSAT,
                    time_limit_s=self.cfg.time_limit_s,
                    workers=1,
                    seed=self.cfg.seed,
                    deterministic=self.cfg.deterministic,
                ),
                max_checks=_PREEMPT_CHECKS,
            )
        except (InfeasibleError, InputError):
            return None
        ans = res.chosen
        if not ans.victims or ans.gpu_hours >= gain_h:
            return None
        for v in ans.victims:
            self.evict(self.running[self.owner[v.job]], now)
        self.start(r, ans.mapping, ans.report, now)
        return [self.owner[v.job] for v in ans.victims]

    def preempt_gain_s(self, r: _Run, now: float, why: str) -> float:
        """The wall seconds `r` would lose without preemption: for ``choice``, the least of its slowdown's cost
        placed now and its expected wait; for ``room``, until the running jobs that end first free enough devices."""
        if why == "choice":
            # it would wait about expected_wait; placing it now at the slow step costs its slowdown
            got = self.solve(r, self.state())
            slow = r.remaining * (got[1].step_seconds / r.ideal - 1.0) if got is not None else math.inf
            w = self.expected_wait(r, now, got[1].step_seconds) if got is not None else math.inf
            return min(slow, w)
        gain_s, free = math.inf, self.cl.free
        for o in self.by_expected_end():
            free += len(o.mapping)
            if free >= r.job.ranks:
                gain_s = o.end_at - now
                break
        return gain_s

    def preempt_candidates(self, r: _Run, now: float, gain_h: float) -> list[RunningJob] | None:
        """The running jobs offered to the preempt search (lower priority, the cheapest per device first), or
        None when even the cheapest could not pay off."""
        running, owner = self.running, self.owner
        mine = r.job.ranks * r.remaining
        cands = [
            RunningJob(
                o.job.name,
                priority=-(len(o.mapping) * o.remaining),
                gpu_hours=len(o.mapping) * (self.lost_s(o, now) + self.cfg.restart_s + r.remaining) / 3600.0,
            )
            for o in running.values()
            if len(o.mapping) * o.remaining > mine  # only lower priority: more GPU-time left than the job
        ]
        # a bound before the search: the cheapest GPU-hours per device among them, over the devices missing
        need = r.job.ranks - self.cl.free
        per_dev = sorted(c.gpu_hours / len(running[owner[c.job]].mapping) for c in cands if c.gpu_hours)
        if (
            not cands
            or sum(len(running[owner[c.job]].mapping) for c in cands) < need
            or min(c.gpu_hours or 0.0 for c in cands) >= gain_h
            or (need > 0 and per_dev and per_dev[0] * need >= gain_h)
        ):
            return None
        # the cheapest per device first, enough of them to hold the job twice over (and at least 8 jobs): the
        # search's cover model grows with the candidates, and dearer ones would rarely win
        cands.sort(key=lambda c: ((c.gpu_hours or 0.0) / len(running[owner[c.job]].mapping), c.job))
        held = 0
        for k, c in enumerate(cands):
            held += len(running[owner[c.job]].mapping)
            if held >= 2 * r.job.ranks and k + 1 >= _PREEMPT_CANDIDATES:
                return cands[: k + 1]
        return cands

    def evict(self, o: _Run, now: float) -> None:
        """Preempt running job `o`: it loses the work since its checkpoint and pays the restart."""
        lost = self.lost_s(o, now)
        self.stop_segment(o, now)
        o.remaining += lost / o.factor + self.cfg.restart_s  # the work since the checkpoint, and the restart
        o.preemptions += 1
        self.stop(o, now)

    # ---- a job's runs -----------------------------------------------------------------------------------------

    def state(self) -> ClusterState:
        """The live state; with contention, the running jobs' traffic on the fabric too."""
        return self.cl.state(tuple(self.fabric_jobs.values()))

    def start(self, r: _Run, m: list[int], rep: CostReport, now: float) -> None:
        self.cl.take(m, r.job.name)
        r.mapping, r.seg_start = list(m), now
        if r.first_start is None:
            r.first_start = now
        self.running[r.idx] = r
        self.owner[r.job.name] = r.idx
        self.running_version += 1
        if self.shared is None:
            self.set_rate(r, rep.step_seconds, rep.comm_seconds, now)
            return
        fj = FabricJob(r.job.name, r.job, tuple(m))
        self.fabric_jobs[r.job.name] = fj
        repriced = self.shared.add(fj)
        r.alone_step = self.shared.jobs[r.job.name].alone_step
        # the communication it would expose alone; contention adds to it what it adds to the step
        r.alone_comm = max(0.0, rep.comm_seconds - max(0.0, rep.step_seconds - r.alone_step))
        r.rate_since, r.step = now, 0.0  # nothing to account before now: retime sets its first rate
        self.retime(repriced, now)

    def retime(self, job_ids: set[str], now: float) -> None:
        """The running jobs `job_ids` go on at their contended steps from `now` (those that started now begin)."""
        assert self.shared is not None
        for name in sorted(job_ids):
            o = self.runs[self.owner[name]]
            step = self.shared.step(name)
            comm = o.alone_comm + max(0.0, step - o.alone_step)
            if o.step == step:
                continue  # unchanged: its end event stands
            self.reprice(o, step, comm, now)

    def set_rate(self, r: _Run, step: float, comm: float, now: float) -> None:
        """Run `r` from `now` at `step` seconds per step with `comm` of them communication (its progress so far
        already accounted), and schedule its end."""
        r.rate_since = now
        r.step = step
        r.factor = step / r.ideal
        r.comm_frac = comm / step if step > 0 else 0.0
        r.version += 1
        r.end_at = now + r.remaining * r.factor
        self.push(r.end_at, _END, r.idx, r.version)

    def advance(self, r: _Run, now: float) -> None:
        """Account `r`'s progress and communication from `r.rate_since` to `now` at its current rate, and what
        other jobs' traffic cost it meanwhile."""
        seg = now - r.rate_since
        r.comm_s += seg * r.comm_frac
        r.remaining = max(0.0, r.remaining - seg / r.factor)
        r.rate_since = now
        if r.alone_step > 0 and r.step > 0:
            alone = seg * min(1.0, r.alone_step / r.step)
            r.run_wall_s += seg
            r.alone_wall_s += alone
            r.contention_gpu_s += len(r.mapping) * (seg - alone)

    def reprice(self, r: _Run, step: float, comm: float, now: float) -> None:
        """Running job `r` goes on from `now` at `step` (e.g. a job sharing its links started or ended): its
        progress so far is kept, its end is rescheduled (the old end event goes stale)."""
        self.advance(r, now)
        self.set_rate(r, step, comm, now)

    def stop_segment(self, r: _Run, now: float) -> None:
        self.advance(r, now)
        if self.cfg.keep_segments:
            self.segments.append((r.idx, tuple(r.mapping), r.seg_start, now))

    def stop(self, r: _Run, now: float) -> None:
        del self.running[r.idx]
        self.cl.release(r.mapping)
        r.version += 1
        self.running_version += 1
        if self.shared is not None and r.job.name in self.fabric_jobs:
            del self.fabric_jobs[r.job.name]
            self.retime(self.shared.remove(r.job.name), now)

    def finish(self, r: _Run, now: float, placed: bool) -> None:
        self.finished += 1
        self.records[r.idx] = _record(r, now, placed, self.cfg.arrival_scale, self.cl.host)
        if self.progress is not None:
            self.progress(self.finished, len(self.runs))

    def note(self, now: float) -> None:
        cl = self.cl
        point = (now, len(cl.occ), cl.usable, cl.frag)
        if self.series[-1][1:] != point[1:]:
            self.series.append(point)


def _runs(topo: Topology, jobs: Sequence[TraceJob], rule: ShapeRule) -> list[_Run]:
    """Each trace job as a job of the cost model (its shape by `rule`) with its ideal step."""
    gpn = max(len(d) for d in topo.devices_in_domain[0])
    kind = topo.devices[0].kind if len(topo.kinds()) == 1 else None
    runs: list[_Run] = []
    for i, tj in enumerate(jobs):
        job = job_for(
            f"j{i}",
            tj.gpus,
            rule,
            gpus_per_node=gpn,
            kind=kind,
            shape=tj.shape,
            model=tj.model,
            node_level=topo.levels[0].name,
        )
        tr = job_traffic(job)
        par = job.parallel
        if par is None:
            raise ValueError(f"replay job {job.name}: job_for built no parallel sizes")
        key = (
            par.tp,
            par.cp,
            par.ep,
            par.dp,
            par.pp,
            job.model,
            tuple(sorted(job.constraints.require.items())),
        )
        ideal = _ideal_step(topo, job, tr, key)
        if not ideal > 0:
            raise ValueError(
                f"replay job {tj.name} (line {tj.line}): its ideal step is {ideal:g} s; the cost model cannot "
                f"price the cluster's device kinds {list(topo.kinds())} (resolve them first: "
                "placement.sim.replay.device_kinds.resolve_kinds)"
            )
        runs.append(_Run(i, tj, job, tr, ideal, tj.duration))
    return runs


def _record(r: _Run, now: float, placed: bool, arrival_scale: float, host: Sequence[int]) -> dict[str, Any]:
    """The replay's record of job `r`, ended at `now` (run to completion, or never placed)."""
    tj = r.tj
    start_t = r.first_start if r.first_start is not None else now
    return {
        "job": tj.name,
        "line": tj.line,
        "gpus": tj.gpus,
        "shape": _shape(r.job),
        "submit_s": tj.submit * arrival_scale,
        "start_s": start_t if placed else None,
        "end_s": now if placed else None,
        "wait_s": start_t - tj.submit * arrival_scale if placed else None,
        "jct_s": now - tj.submit * arrival_scale if placed else None,
        "trace_duration_s": tj.duration,
        "ideal_step_s": r.ideal,
        "step_s": r.step if placed else None,
        "slowdown": r.factor if placed else None,
        "comm_hours": r.comm_s / 3600.0,
        "nodes": len({host[d] for d in r.mapping}) if placed else None,
        "restarts": r.restarts,
        "repairs": r.repairs,
        "preemptions": r.preemptions,
        "waits": r.waits,
        "contention_gpu_hours": r.contention_gpu_s / 3600.0,
        "contended_slowdown": r.run_wall_s / r.alone_wall_s if placed and r.alone_wall_s > 0 else None,
        "shared": tj.shared,
        "placed": placed,
    }


def _shape(job: Job) -> str:
    p = job.parallel
    if p is None:
        return f"{job.ranks} ranks"
    return f"tp{p.tp}-pp{p.pp}-dp{p.dp}"
