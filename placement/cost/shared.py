"""The shared fabric: other jobs' traffic as background flows on host NICs and uplinks, a job's step among them,
and the harm a new job does to the jobs already running (docs/model.md, "Shared fabric").

**Rule.** A running job is not in lockstep with a new one: its phases start whenever its own step brings them. Each
running job is therefore seen as its *average* traffic: on every NIC and uplink direction it loads, the bytes its
step moves there divided by its step (modeled alone, `placement.cost.step.model_step`), i.e. its flow at full rate
times its duty cycle. A measured load (`ClusterState.link_load`, switch counters) is such a flow as it stands. A
phase of the new job shares each link max-min fairly with those flows (`placement.cost.collectives.share_phase`
with a `Background`): a flow takes at most its average rate, and what it leaves is shared by the same progressive
filling as the job's own operations. Crux (Cao et al., SIGCOMM 2024) and Cassini (Rajasekaran et al., NSDI 2024)
measure exactly this interleaving of bursty all-reduces on shared uplinks; pricing against the average rate is the
expectation of Cassini's time-shifted overlap when phases are not aligned.

**Harm.** A running job j that shares a link with the new job is priced again with the new job's average flows
added to its background: ``added_j = step_j(with the new job) - step_j(without)``, both against the other running
jobs and the measured loads. ``harm = sum_j gpus_j * added_j / step_j(with)``: GPU-seconds per second the running
jobs lose (each job's GPUs times the share of its time it now waits). The cluster objective is
``step * (1 + harm / gpus)``: the new job's step plus the GPU-seconds the others lose per step of it, spread over
its own GPUs (`cluster_seconds`).

**API for the replay and the registry** (`SharedFabric`): the running jobs of one topology and health, each one's
contended step and the components of the link-sharing graph (jobs that load a common NIC or uplink direction,
directly or through others). `add` and `remove` reprice only the component the job joins or leaves and return the
ids repriced; each job's plans and average flows are computed once (`running_flows`, kept per `RunningJob`).
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from placement.cost.collectives import (
    BACKGROUND_SECONDS,
    Background,
    Fabric,
    Plan,
    background_flow,
    fabric_for,
)
from placement.cost.report import Contention, CostReport, JobHarm
from placement.cost.step import model_step
from placement.model.job import Job
from placement.model.state import ClusterState, LinkLoad, RunningJob, Uplink
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic

__all__ = [
    "OBJECTIVES",
    "RunningFlows",
    "SharedFabric",
    "background_for",
    "cluster_seconds",
    "contention",
    "job_flows",
    "link_loads",
    "measured_flows",
    "running_flows",
    "surrogate_state",
    "uplink_pressure",
]

OBJECTIVES = ("own", "cluster")
"""What an answer minimises: ``own`` the job's step, ``cluster`` its step plus the harm (`cluster_seconds`)."""


def job_flows(
    fabric: Fabric, traffic: Traffic, mapping: Sequence[int], step_seconds: float
) -> dict[int, float]:
    """Average bytes/s a job puts on each shared link (resource index of `fabric`): every group's and edge's
    bytes there times its count per step, over the step."""
    if step_seconds <= 0:
        return {}
    total: dict[int, float] = {}
    plans: list[tuple[Plan, float]] = []
    for g in traffic.groups:
        plans.append((fabric.plan_group(g.kind, [mapping[r] for r in g.members], g.bytes), g.count))
    for e in traffic.edges:
        plans.append((fabric.plan_edge(mapping[e.src], mapping[e.dst], e.bytes), e.count))
    for plan, count in plans:
        for st in plan.stages:
            for r, x in st.loads:
                total[r] = total.get(r, 0.0) + count * x
    return {r: x / step_seconds for r, x in sorted(total.items()) if x > 0}


@dataclass(frozen=True)
class RunningFlows:
    """One running job as the shared fabric sees it: its traffic, its step alone and its average flows."""

    running: RunningJob
    traffic: Traffic
    alone_step: float
    rates: Mapping[int, float]
    background: tuple[Plan, ...]
    """Its average flows as background operations, one per link (both directions in one when it loads both)."""

    @property
    def job_id(self) -> str:
        return self.running.job_id

    def flows(self) -> list[Plan]:
        return list(self.background)


def _as_flows(rates: Mapping[int, float], name: str) -> list[Plan]:
    out: list[Plan] = []
    for r in sorted({r & ~1 for r in rates}):
        links = [(x, rates[x]) for x in (r, r + 1) if rates.get(x, 0.0) > 0]
        out.append(background_flow(links, name))
    return out


_cache_lock = threading.Lock()
_flows: weakref.WeakKeyDictionary[RunningJob, dict[int, RunningFlows]] = weakref.WeakKeyDictionary()
_backgrounds: weakref.WeakKeyDictionary[ClusterState, dict[tuple[int, str | None], Background]] = (
    weakref.WeakKeyDictionary()
)


def running_flows(topology: Topology, state: ClusterState, running: RunningJob) -> RunningFlows:
    """`running`'s average flows on `topology` under the health of `state` (computed once per job and fabric)."""
    fabric = fabric_for(topology, state)
    with _cache_lock:
        hit = _flows.get(running, {}).get(id(fabric))
    if hit is not None:
        return hit
    traffic = job_traffic(running.job)
    step = model_step(topology, state, running.job, running.devices, traffic).step_seconds
    rates = job_flows(fabric, traffic, running.devices, step)
    out = RunningFlows(running, traffic, step, rates, tuple(_as_flows(rates, running.job_id)))
    with _cache_lock:
        _flows.setdefault(running, {})[id(fabric)] = out
    return out


def link_loads(topology: Topology, state: ClusterState) -> dict[Uplink, tuple[LinkLoad, float]]:
    """The average load the running jobs of `state` (`ClusterState.running`) put on each host NIC path (level 0)
    and uplink, GB/s per direction, with the link's capacity (GB/s, each way, under the health of `state`): the
    sum of their average flows (`running_flows`). Measured loads are not added (they are `state.link_load`);
    links no running job loads are absent."""
    running = state.running()
    if not running:
        return {}
    fabric = fabric_for(topology, state)
    base = fabric.base
    rates: dict[int, float] = {}
    for rj in running:
        for r, x in running_flows(topology, state, rj).rates.items():
            rates[r] = rates.get(r, 0.0) + x
    out: dict[Uplink, tuple[LinkLoad, float]] = {}
    for r in sorted({r & ~1 for r in rates}):
        level = bisect.bisect_right(base, r) - 1
        up = Uplink(level, (r - base[level]) // 2)
        load = LinkLoad(rates.get(r, 0.0) / 1e9, rates.get(r + 1, 0.0) / 1e9)
        out[up] = (load, fabric.caps[r])
    return out


def measured_flows(fabric: Fabric, state: ClusterState) -> list[Plan]:
    """The measured link loads of `state` (`ClusterState.link_load`) as background flows."""
    rates: dict[int, float] = {}
    for up, load in sorted(state.link_load.items(), key=lambda kv: (kv[0].level, kv[0].domain)):
        r = fabric.base[up.level] + 2 * up.domain
        if load.up > 0:
            rates[r] = load.up * 1e9
        if load.down > 0:
            rates[r + 1] = load.down * 1e9
    return _as_flows(rates, "measured")


def _background(flows: Iterable[Plan]) -> Background:
    by: dict[int, list[Plan]] = {}
    for f in flows:
        for r in {r for st in f.stages for r, _x in st.loads}:
            by.setdefault(r, []).append(f)
    return Background({r: tuple(v) for r, v in by.items()})


def background_for(topology: Topology, state: ClusterState, exclude: str | None = None) -> Background | None:
    """The background flows of `state` (its running jobs but `exclude`, and its measured loads); None without."""
    if not state.has_background:
        return None
    key = (id(topology), exclude)
    with _cache_lock:
        hit = _backgrounds.get(state, {}).get(key)
    if hit is not None:
        return hit
    fabric = fabric_for(topology, state)
    flows = measured_flows(fabric, state)
    for rj in state.running():
        if rj.job_id != exclude:
            flows += running_flows(topology, state, rj).flows()
    bg = _background(flows)
    with _cache_lock:
        _backgrounds.setdefault(state, {})[key] = bg
    return bg


def uplink_pressure(
    topology: Topology, state: ClusterState, exclude: str | None = None
) -> dict[Uplink, float]:
    """The background as the linear surrogate can read it: per loaded uplink (a host's NICs at level 0), how much
    slower a new flow runs there, ``capacity / max(capacity - load, capacity / (flows + 1))`` (what max-min leaves
    a flow that asks for the whole link: the capacity the background's average rates leave, or at least its fair
    share among them), the larger of the two directions. Uplinks the background leaves free are absent."""
    bg = background_for(topology, state, exclude)
    if bg is None:
        return {}
    fabric = fabric_for(topology, state)
    caps, base = fabric.caps_bytes, fabric.base
    out: dict[Uplink, float] = {}
    for r, flows in sorted(bg.flows.items()):
        rate = sum(x for f in flows for st in f.stages for rr, x in st.loads if rr == r) / BACKGROUND_SECONDS
        cap = caps[r]
        factor = cap / max(cap - rate, cap / (len(flows) + 1))
        level = bisect.bisect_right(base, r) - 1
        up = Uplink(level, (r - base[level]) // 2)
        if factor > out.get(up, 1.0):
            out[up] = factor
    return out


def surrogate_state(topology: Topology, state: ClusterState, exclude: str | None = None) -> ClusterState:
    """`state` for the solver's surrogate (`placement.cost.paths`, which reads uplink slowdowns): the background's
    `uplink_pressure` as slowdowns of the uplinks it loads, the background itself dropped (the surrogate prices
    paths, not phases). `state` itself when there is no background."""
    pressure = uplink_pressure(topology, state, exclude)
    if not pressure:
        return state
    slow = dict(state.uplink_slowdown)
    for up, f in pressure.items():
        slow[up] = slow.get(up, 1.0) * f
    return replace(state, uplink_slowdown=slow, background=(), link_load={})


def cluster_seconds(step_seconds: float, harm_gpu_s_per_s: float, gpus: int) -> float:
    """The cluster objective: own step plus the GPU-seconds the running jobs lose per step, over own GPUs."""
    return step_seconds * (1.0 + harm_gpu_s_per_s / max(1, gpus))


def contention(
    topology: Topology,
    state: ClusterState,
    job: Job,
    mapping: Sequence[int],
    traffic: Traffic,
    report: CostReport,
    alone: CostReport,
) -> Contention:
    """The new job's contention seconds (`report` against `alone`, its step with no background) and its harm to
    every running job it shares a link with (module doc)."""
    fabric = fabric_for(topology, state)
    mine = job_flows(fabric, traffic, mapping, report.step_seconds)
    running = [running_flows(topology, state, rj) for rj in state.running() if rj.job_id != job.name]
    measured = measured_flows(fabric, state)
    harms: list[JobHarm] = []
    total = 0.0
    new_flows = _as_flows(mine, job.name)
    for rf in running:
        if not any(r in mine for r in rf.rates):
            continue
        others = measured + [f for o in running if o is not rf for f in o.flows()]
        before = _step_among(topology, state, rf, others)
        after = _step_among(topology, state, rf, others + new_flows)
        added = max(0.0, after - before)
        harms.append(JobHarm(rf.job_id, rf.running.gpus, before, added))
        if after > 0:
            total += rf.running.gpus * added / after
    return Contention(max(0.0, report.step_seconds - alone.step_seconds), alone.step_seconds, harms, total)


def _step_among(topology: Topology, state: ClusterState, rf: RunningFlows, flows: Sequence[Plan]) -> float:
    bg = _background(flows) if flows else None
    run = rf.running
    return model_step(topology, state, run.job, run.devices, rf.traffic, background=bg).step_seconds


class SharedFabric:
    """The running jobs of one topology and health: each one's contended step and the sharing components.

    >>> # fabric = SharedFabric(topology, state); fabric.add(RunningJob("a", job, devices)) -> {"a"}
    >>> # fabric.step("a"); fabric.components(); fabric.remove("a") -> ids repriced

    `state` gives the health (slowdowns) and the measured loads; its `background` is not read (add the jobs).
    """

    def __init__(self, topology: Topology, state: ClusterState) -> None:
        self.topology = topology
        self.state = state
        self.fabric = fabric_for(topology, state)
        self.measured = measured_flows(self.fabric, state)
        self.jobs: dict[str, RunningFlows] = {}
        self.steps: dict[str, float] = {}
        self._users: dict[int, set[str]] = {}  # link -> jobs loading it

    def step(self, job_id: str) -> float:
        """`job_id`'s contended step seconds."""
        return self.steps[job_id]

    def slowdown(self, job_id: str) -> float:
        """Contended step over the step alone."""
        rf = self.jobs[job_id]
        return self.steps[job_id] / rf.alone_step if rf.alone_step > 0 else 1.0

    def component(self, job_id: str) -> set[str]:
        """The jobs that share a link with `job_id`, directly or through others (itself included)."""
        seen = {job_id}
        todo = [job_id]
        while todo:
            j = todo.pop()
            for r in self.jobs[j].rates:
                for o in self._users.get(r, ()):
                    if o not in seen:
                        seen.add(o)
                        todo.append(o)
        return seen

    def components(self) -> list[set[str]]:
        out: list[set[str]] = []
        done: set[str] = set()
        for j in sorted(self.jobs):
            if j not in done:
                c = self.component(j)
                done |= c
                out.append(c)
        return out

    def add(self, running: RunningJob) -> set[str]:
        """Start `running`; returns the ids repriced (its component)."""
        rf = running_flows(self.topology, self.state, running)
        self.jobs[running.job_id] = rf
        for r in rf.rates:
            self._users.setdefault(r, set()).add(running.job_id)
        comp = self.component(running.job_id)
        self._reprice(comp)
        return comp

    def remove(self, job_id: str) -> set[str]:
        """End `job_id`; returns the ids repriced (the jobs that shared its component)."""
        comp = self.component(job_id) - {job_id}
        rf = self.jobs.pop(job_id)
        self.steps.pop(job_id, None)
        for r in rf.rates:
            self._users.get(r, set()).discard(job_id)
        self._reprice(comp)
        return comp

    def _reprice(self, ids: Iterable[str]) -> None:
        for j in sorted(ids):
            rf = self.jobs[j]
            near = {o for r in rf.rates for o in self._users.get(r, ()) if o != j}
            flows = self.measured + [f for o in sorted(near) for f in self.jobs[o].flows()]
            self.steps[j] = _step_among(self.topology, self.state, rf, flows) if flows else rf.alone_step
