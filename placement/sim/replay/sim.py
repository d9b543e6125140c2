"""The replay's event simulation: arrivals, a FIFO queue (optionally backfilled), placement by one policy on the
current state (place, wait or preempt), runs stretched by the modeled step, GPU failures. Owns `simulate`.
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
from placement.decide.batch.clock import WallClock
from placement.decide.preempt import RunningJob, preempt
from placement.decide.repair.input import RepairBudget
from placement.decide.repair.run import repair
from placement.errors import InfeasibleError, InputError
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.sim.replay.shapes import ShapeRule, job_for
from placement.sim.replay.traces import TraceJob
from placement.solve import SolveOptions, Strategy
from placement.solve.baselines import BASELINES
from placement.solve.run import place

__all__ = ["POLICIES", "ReplayResult", "SimConfig", "simulate"]

POLICIES = ("first-fit", "kueue-tas", "slurm-tree", "cpsat", "cpsat-wait", "cpsat-preempt")
"""Scheduler baselines; cpsat (place now, always); cpsat-wait (place now or wait, from the model); cpsat-preempt
(cpsat-wait, and preempt lower-priority jobs when their restart cost is below the gain)."""

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
    preemptions: int = 0
    step: float = 0.0
    end_at: float = 0.0  # the expected end of the current run segment
    waits: int = 0  # times cpsat-wait chose to wait
    preempt_tries: int = 0
    preempt_seen: int = -1  # the running set's version at the last preempt search


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
        push(tj.submit * cfg.arrival_scale, _ARRIVE, i)
    queue: list[int] = []
    running: dict[int, _Run] = {}
    owner: dict[str, int] = {}
    records: list[dict[str, Any]] = [{} for _ in runs]
    series: list[tuple[float, int, int, float]] = [(0.0, 0, cl.usable, cl.frag)]
    segments: list[tuple[int, tuple[int, ...], float, float]] = []
    finished = 0
    running_version = 0  # changes whenever a job starts or stops
    fail_rate = cfg.failure_rate / 86400.0 * topo.num_devices
    if fail_rate > 0 and runs:
        push(rng.expovariate(fail_rate), _FAIL, 0)

    def baseline(name: str, r: _Run, st: ClusterState) -> tuple[list[int], CostReport] | None:
        got = BASELINES[name](topo, st, r.job, r.traffic)
        if got is None:
            return None
        return got, evaluate(topo, st, r.job, got, traffic=r.traffic, check=False)

    def solve(r: _Run, st: ClusterState) -> tuple[list[int], CostReport] | None:
        clock = WallClock(opts, _RESERVE_SHARE * opts.time_limit_s)  # per job (none if deterministic)
        try:
            res = place(topo, st, r.job, clock.options)
        except InfeasibleError:
            return None
        finally:
            clock.cancel()
        if res.mapping is None or res.report is None:
            raise ValueError(f"replay job {r.job.name}: place returned no mapping and no error")
        return res.mapping, res.report

    def expected_wait(r: _Run, now: float, step_now: float) -> float:
        """cpsat-wait's estimate: the earliest expected time at which a baseline placement (node-aligned) on the
        devices that running jobs free by their expected ends would make the job end sooner than placing it now
        at `step_now`; inf when none of the next `_WAIT_CHECKS` ends would."""
        run_now = r.remaining * step_now / r.ideal
        freed: set[str] = set()
        free = cl.free
        checks = 0
        for o in sorted(running.values(), key=lambda x: (x.end_at, x.idx)):
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
            got = baseline("kueue-tas", r, st) or baseline("slurm-tree", r, st)
            if got is not None and w + r.remaining * got[1].step_seconds / r.ideal < run_now:
                return w
        return math.inf

    def try_place(r: _Run, now: float) -> tuple[list[int], CostReport] | str:
        """A placement, or why there is none: ``room`` (the job does not fit now) or ``choice`` (it fits but
        waits for a better placement: the max-slowdown bound or cpsat-wait's rule)."""
        if r.job.ranks > cl.free:
            return "room"
        st = cl.state()
        got: tuple[list[int], CostReport] | None
        if cfg.policy in _BASELINE_POLICIES:
            got = baseline(cfg.policy, r, st)
            if got is not None and cfg.max_slowdown > 0 and got[1].step_seconds > cfg.max_slowdown * r.ideal:
                # the policy's own placement is too slow: the other baselines' placements are alternatives
                alts = [baseline(b, r, st) for b in _BASELINE_POLICIES if b != cfg.policy]
                got = min((a for a in [got, *alts] if a is not None), key=lambda a: a[1].step_seconds)
        else:
            got = solve(r, st)
        if got is None:
            return "room"
        step = got[1].step_seconds
        if cfg.max_slowdown > 0 and running and step > cfg.max_slowdown * r.ideal:
            return "choice"  # wait for a better placement while others run
        if (
            cfg.policy in ("cpsat-wait", "cpsat-preempt")
            and running
            and step > _NEAR_IDEAL * r.ideal
            and expected_wait(r, now, step) < math.inf
        ):
            r.waits += 1
            return "choice"
        return got

    def start(r: _Run, m: list[int], rep: CostReport, now: float) -> None:
        nonlocal running_version
        cl.take(m, r.job.name)
        r.mapping, r.seg_start = list(m), now
        r.step = rep.step_seconds
        r.factor = rep.step_seconds / r.ideal
        r.comm_frac = rep.comm_seconds / rep.step_seconds if rep.step_seconds > 0 else 0.0
        r.version += 1
        if r.first_start is None:
            r.first_start = now
        running[r.idx] = r
        owner[r.job.name] = r.idx
        running_version += 1
        r.end_at = now + r.remaining * r.factor
        push(r.end_at, _END, r.idx, r.version)

    def stop_segment(r: _Run, now: float) -> None:
        seg = now - r.seg_start
        r.comm_s += seg * r.comm_frac
        r.remaining = max(0.0, r.remaining - seg / r.factor)
        if cfg.keep_segments:
            segments.append((r.idx, tuple(r.mapping), r.seg_start, now))

    def stop(r: _Run) -> None:
        nonlocal running_version
        del running[r.idx]
        cl.release(r.mapping)
        r.version += 1
        running_version += 1

    def lost_s(r: _Run, now: float) -> float:
        """Wall seconds of `r`'s current segment since its last checkpoint (lost if it is stopped now)."""
        seg = now - r.seg_start
        return seg % cfg.checkpoint_s if cfg.checkpoint_s > 0 else seg

    def try_preempt(r: _Run, now: float, why: str) -> list[int] | None:
        """cpsat-preempt: stop lower-priority running jobs (priority: less remaining GPU-time is higher) so that
        `r` starts now, when their cost is below the gain, both in GPU-hours. A victim's cost: its devices x (the
        time since its last checkpoint, lost, + the restart + `r`'s run, which it waits out behind `r`). The
        gain: `r`'s devices x the time it would otherwise lose (its expected wait, or its slowdown's cost).
        Returns the victims' indices (they go back to the queue), or None."""
        if r.preempt_tries >= _PREEMPT_TRIES or r.preempt_seen == running_version or not running:
            return None
        r.preempt_tries += 1
        r.preempt_seen = running_version
        if why == "choice":
            # it would wait about expected_wait; placing it now at the slow step costs its slowdown
            got = solve(r, cl.state())
            slow = r.remaining * (got[1].step_seconds / r.ideal - 1.0) if got is not None else math.inf
            w = expected_wait(r, now, got[1].step_seconds) if got is not None else math.inf
            gain_s = min(slow, w)
        else:
            # the expected wait for room: until the running jobs that end first have freed enough devices
            gain_s, free = math.inf, cl.free
            for o in sorted(running.values(), key=lambda x: (x.end_at, x.idx)):
                free += len(o.mapping)
                if free >= r.job.ranks:
                    gain_s = o.end_at - now
                    break
        if not 0 < gain_s < math.inf:
            return None
        mine = r.job.ranks * r.remaining
        gain_h = r.job.ranks * gain_s / 3600.0
        cands = [
            RunningJob(
                o.job.name,
                priority=-(len(o.mapping) * o.remaining),
                gpu_hours=len(o.mapping) * (lost_s(o, now) + cfg.restart_s + r.remaining) / 3600.0,
            )
            for o in running.values()
            if len(o.mapping) * o.remaining > mine  # only lower priority: more GPU-time left than the job
        ]
        # a bound before the search: the cheapest GPU-hours per device among them, over the devices missing
        need = r.job.ranks - cl.free
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
                cands = cands[: k + 1]
                break
        try:
            res = preempt(
                topo,
                cl.state(),
                r.job,
                cands,
                job_priority=-mine,
                max_slowdown=_NEAR_IDEAL,
                objective="gpu-hours",
                options=SolveOptions(
                    strategy=Strategy.CPSAT,
                    time_limit_s=cfg.time_limit_s,
                    workers=1,
                    seed=cfg.seed,
                    deterministic=cfg.deterministic,
                ),
                max_checks=_PREEMPT_CHECKS,
            )
        except (InfeasibleError, InputError):
            return None
        ans = res.chosen
        if not ans.victims or ans.gpu_hours >= gain_h:
            return None
        for v in ans.victims:
            o = running[owner[v.job]]
            lost = lost_s(o, now)
            stop_segment(o, now)
            o.remaining += lost / o.factor + cfg.restart_s  # the work since the checkpoint, and the restart
            o.preemptions += 1
            stop(o)
        start(r, ans.mapping, ans.report, now)
        return [owner[v.job] for v in ans.victims]

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
            "preemptions": r.preemptions,
            "waits": r.waits,
            "shared": tj.shared,
            "placed": placed,
        }
        if progress is not None:
            progress(finished, len(runs))

    def schedule(now: float) -> None:
        i = 0
        room = 0  # queued jobs passed because they do not fit now (the backfill window counts these)
        by_choice = 0  # queued jobs passed because they chose to wait (they do not block the queue)
        while i < len(queue):
            if room > cfg.backfill or by_choice > _PASS_WINDOW:
                break
            r = runs[queue[i]]
            got = try_place(r, now)
            if not isinstance(got, str):
                queue.pop(i)
                start(r, got[0], got[1], now)
                continue
            if i == 0 and not running and not cl.failed:
                queue.pop(0)  # not placeable on an idle, healthy cluster: it would wait forever
                finish(r, now, placed=False)
                continue
            victims = try_preempt(r, now, got) if cfg.policy == "cpsat-preempt" else None
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

    def note(now: float) -> None:
        busy = len(cl.occ)
        point = (now, busy, cl.usable, cl.frag)
        if series[-1][1:] != point[1:]:
            series.append(point)

    def on_failure(now: float, d: int) -> None:
        hit = owner.get(cl.occ.get(d, ""))
        hit_run = running.get(hit) if hit is not None else None
        if hit_run is None:
            cl.fail(d)
            return
        stop_segment(hit_run, now)
        cl.fail(d)  # still held by the job: the repair moves its rank off it
        m: list[int] | None = None
        if cfg.failure_mode == "repair":
            m = repaired(hit_run)
        stop(hit_run)
        if m is not None:
            rep = evaluate(topo, cl.state(), hit_run.job, m, traffic=hit_run.traffic, check=False)
            hit_run.repairs += 1
            start(hit_run, m, rep, now)
        else:
            hit_run.restarts += 1
            hit_run.remaining = hit_run.tj.duration
            queue.insert(0, hit_run.idx)

    def repaired(r: _Run) -> list[int] | None:
        """The Repair solver's recommended mapping for `r` after its device failed (few moves against the
        step over the run left); None when no repair fits (the job is killed)."""
        horizon = r.remaining * r.factor / max(r.step, 1e-9)
        try:
            res = repair(
                topo,
                cl.state(),
                r.job,
                r.mapping,
                budget=RepairBudget(move_cost_s=cfg.restart_s, horizon_steps=max(1.0, horizon)),
                options=opts,
                points=1,
            )
        except (InfeasibleError, InputError):
            return None
        return list(res.answers[res.recommended].mapping)

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
                stop(r)
                finish(r, now, placed=True)
            elif kind_ == _REPAIR:
                cl.repair(a)
            elif kind_ == _FAIL:
                if finished < len(runs):
                    push(now + rng.expovariate(fail_rate), _FAIL, 0)
                d = rng.randrange(topo.num_devices)
                if d in cl.failed:
                    continue
                on_failure(now, d)
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
