"""Calibration: the link tiers, latencies and NIC bandwidth of a cluster fitted to measured collectives (nccl-tests
runs, given as `Measured` points), and the compute efficiency fitted to a measured step time.

Owns the fit, not the files: `placement.io.importers.nccl_tests` reads the logs, `placement.io.calibration` maps
them onto a cluster and writes the fitted copy.

**Prediction.** Every point is priced by the model itself: a collective by `Fabric.plan_group` (NCCL's ring or
tree, the host's ring order, shared NICs) and `Fabric.alone`; ``sendrecv`` (rank i sends to i+1) by
`Fabric.plan_edge` for every pair at once, through `phase_seconds`. Nothing here restates a formula.

**Knobs.** The numbers a cluster file states and the model reads on those paths: each level's tier bandwidth and
latency, each intra-node code's tier (``NV`` per link, ``PIX``...), and each node type's ``nic_gbps`` (the NIC
bus bandwidth of a host is ``nics x nic_gbps``; ``nics`` stays as stated, else one per device).

**Fit.** Least squares on log-time, over every measured time of a point (out-of-place and in-place), of the log
of a scale per knob, in the two regimes of an alpha-beta line: bandwidths on the large messages (within a factor
`LARGE` of a run's largest size), latencies on the small ones (up to `SMALL_BYTES`). The sizes between are where
NCCL switches protocols (LL, LL128, Simple), which the model does not have yet: they are reported, not fitted,
so that they do not drag the large-message bandwidth down. A knob is exercised by a run when changing it alone
changes the modeled time of that run's points of its regime (bandwidths lowered 20%, latencies raised 25%: a
``min`` that does not bind does not move); only exercised knobs are fitted. The search: one scale for all
bandwidths and one for all latencies, then each knob alone for a few rounds of coordinate descent; each
one-dimensional search is a grid over ``[1/1000, 1000]`` (then ``[1/20, 20]`` around the current value)
refined by golden-section search. Last, a knob whose own value does not matter after all (the loss is flat
there: another ``min`` binds) goes back to what the file said, so the fitted file changes what the runs showed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from placement.cost.collectives import Fabric, phase_seconds
from placement.cost.compute import device_kind, job_device_kind, step_compute
from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
from placement.model.devices import NodeType
from placement.model.job import CollectiveKind, Job
from placement.model.links import DEFAULT_INTRA_NODE_TIERS, Tier
from placement.model.state import ClusterState
from placement.model.topology import Topology

__all__ = [
    "COLLECTIVES",
    "LARGE",
    "SMALL_BYTES",
    "ComputeFit",
    "Fit",
    "Knob",
    "Measured",
    "fit_compute_efficiency",
    "fit_topology",
    "large_points",
    "predict_seconds",
]

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")
LARGE = 8
"""Large messages (the bandwidth regime): within a factor LARGE of their run's largest size."""
SMALL_BYTES = 65536
"""Small messages (the latency regime): at most this many bytes (and not large)."""
_LN = math.log(1000.0)
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


@dataclass(frozen=True)
class Measured:
    """One measured point: `collective` over `devices` (cluster device indices, in rank order) on `size` bytes,
    the measured seconds (one per measurement), and where it came from (`run`, `line`)."""

    run: str
    line: int
    collective: str
    devices: tuple[int, ...]
    size: float
    seconds: tuple[float, ...]


@dataclass(frozen=True)
class Knob:
    """One fitted number of the cluster: its path in the cluster file, its value before and after, and the runs
    that exercised it."""

    name: str
    before: float
    after: float
    runs: tuple[str, ...]


@dataclass(frozen=True)
class Fit:
    """The fitted topology, its knobs, and the RMS of the log-time residuals before and after."""

    topology: Topology
    knobs: tuple[Knob, ...]
    rms_before: float
    rms_after: float


# A knob key: ("level_bw"|"level_lat", level index) | ("intra_bw"|"intra_lat", code) | ("nic", node type name)
_Key = tuple[str, int | str]


def _check(points: Sequence[Measured], topology: Topology) -> None:
    for p in points:
        if p.collective not in COLLECTIVES:
            raise ValueError(
                f"{p.run} line {p.line}: collective {p.collective!r}; known: {', '.join(COLLECTIVES)}"
            )
        if len(p.devices) < 2:
            raise ValueError(f"{p.run} line {p.line}: {len(p.devices)} device(s); a collective needs >= 2")
        if any(not 0 <= d < topology.num_devices for d in p.devices):
            raise ValueError(f"{p.run} line {p.line}: a device index is outside the cluster")
        if p.size <= 0 or not p.seconds or any(s <= 0 for s in p.seconds):
            raise ValueError(f"{p.run} line {p.line}: size and times must be > 0")


def predict_seconds(topology: Topology, points: Sequence[Measured]) -> list[float]:
    """The modeled seconds of each point on `topology` (no other traffic, a healthy cluster)."""
    fabric = Fabric(topology, ClusterState())
    out: list[float] = []
    for p in points:
        if p.collective == "sendrecv":
            n = len(p.devices)
            plans = [fabric.plan_edge(p.devices[i], p.devices[(i + 1) % n], p.size) for i in range(n)]
            out.append(max(t for t, _ in phase_seconds(fabric, plans)))
        else:
            out.append(fabric.alone(fabric.plan_group(CollectiveKind(p.collective), p.devices, p.size)))
    return out


def _involved_types(topology: Topology, points: Sequence[Measured]) -> dict[int, NodeType]:
    hosts = {topology.devices[d].host_index for p in points for d in p.devices}
    return {id(topology.host_types[h]): topology.host_types[h] for h in sorted(hosts)}


def _base_values(topology: Topology, points: Sequence[Measured]) -> dict[_Key, float]:
    """Every candidate knob with its value as the model reads it today."""
    values: dict[_Key, float] = {}
    for i, lv in enumerate(topology.levels):
        values[("level_bw", i)] = lv.tier.bandwidth_gbps
        values[("level_lat", i)] = lv.tier.latency_us
    types = _involved_types(topology, points)
    if any(nt.matrix is not None for nt in types.values()):
        for code in sorted(set(DEFAULT_INTRA_NODE_TIERS) | set(topology.intra_node_tiers)):
            t = topology.intra_node_tiers.get(code, DEFAULT_INTRA_NODE_TIERS.get(code))
            if t is not None:
                values[("intra_bw", code)] = t.bandwidth_gbps
                values[("intra_lat", code)] = t.latency_us
    lvs = topology.levels
    nic_default = lvs[1].tier.bandwidth_gbps if len(lvs) > 1 else lvs[0].tier.bandwidth_gbps
    for nt in types.values():
        values[("nic", nt.name)] = nt.nic_gbps or nic_default
    return values


def _apply(topology: Topology, values: Mapping[_Key, float]) -> Topology:
    """`topology` with the knobs set to `values` (NICs made explicit: ``nics`` as stated or one per device)."""
    levels = tuple(
        replace(
            lv,
            tier=Tier(
                values.get(("level_bw", i), lv.tier.bandwidth_gbps),
                values.get(("level_lat", i), lv.tier.latency_us),
            ),
        )
        for i, lv in enumerate(topology.levels)
    )
    tiers = dict(topology.intra_node_tiers)
    for (kind, key), v in values.items():
        if kind == "intra_bw" and isinstance(key, str):
            tiers[key] = Tier(
                v, values.get(("intra_lat", key), tiers.get(key, DEFAULT_INTRA_NODE_TIERS[key]).latency_us)
            )
    new_types: dict[int, NodeType] = {}
    for nt in topology.host_types:
        nic = values.get(("nic", nt.name))
        if nic is not None and id(nt) not in new_types:
            new_types[id(nt)] = replace(nt, nics=nt.nics or nt.devices, nic_gbps=nic)
    host_types = tuple(new_types.get(id(nt), nt) for nt in topology.host_types)
    return replace(topology, levels=levels, intra_node_tiers=tiers, host_types=host_types)


def _knob_name(topology: Topology, key: _Key) -> str:
    kind, k = key
    if kind in ("level_bw", "level_lat") and isinstance(k, int):
        field = "bandwidth_gbps" if kind == "level_bw" else "latency_us"
        return f"levels[{k}] ({topology.levels[k].name}).{field}"
    if kind in ("intra_bw", "intra_lat"):
        field = "bandwidth_gbps" if kind == "intra_bw" else "latency_us"
        per = " (per link)" if k == "NV" else ""
        return f"intra_node_tiers.{k}.{field}{per}"
    return f"node_types.{k}.nic_gbps"


def _search(f: Callable[[float], float], lo: float, hi: float, steps: int = 24) -> tuple[float, float]:
    """The minimum of `f` on [lo, hi]: the best of a grid, refined by golden-section search around it."""
    xs = [lo + (hi - lo) * i / steps for i in range(steps + 1)]
    fs = [f(x) for x in xs]
    i = min(range(len(xs)), key=fs.__getitem__)
    a, b = xs[max(0, i - 1)], xs[min(steps, i + 1)]
    best_x, best_f = xs[i], fs[i]
    c, d = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(40):
        if b - a < 1e-6:
            break
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - _GOLDEN * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + _GOLDEN * (b - a)
            fd = f(d)
    for x, fx in ((c, fc), (d, fd)):
        if fx < best_f:
            best_x, best_f = x, fx
    return best_x, best_f


def large_points(points: Sequence[Measured]) -> list[bool]:
    """Whether each point is a large message: within a factor `LARGE` of its run's largest size."""
    top: dict[str, float] = {}
    for p in points:
        top[p.run] = max(top.get(p.run, 0.0), p.size)
    return [p.size * LARGE >= top[p.run] for p in points]


def fit_topology(topology: Topology, points: Sequence[Measured], *, rounds: int = 3) -> Fit:
    """Fit the knobs the points exercise (see the module docstring) and return the fitted topology."""
    if not points:
        raise ValueError("no measured points to fit")
    _check(points, topology)
    base = _base_values(topology, points)
    topo0 = _apply(topology, base)
    logs = [[math.log(s) for s in p.seconds] for p in points]
    large = large_points(points)
    small = [p.size <= SMALL_BYTES and not lg for p, lg in zip(points, large, strict=True)]

    def loss_of(pred: Sequence[float], where: Sequence[bool]) -> float:
        return sum(
            (math.log(max(t, 1e-15)) - m) ** 2
            for t, ms, w in zip(pred, logs, where, strict=True)
            if w
            for m in ms
        )

    ref = predict_seconds(topo0, points)
    exercised: dict[_Key, tuple[str, ...]] = {}
    for key, v in base.items():
        lat = key[0].endswith("lat")
        bumped = dict(base)
        bumped[key] = v * (1.25 if lat else 0.8)
        pred = predict_seconds(_apply(topology, bumped), points)
        where = small if lat else large
        runs = tuple(
            dict.fromkeys(
                p.run
                for p, a, b, w in zip(points, ref, pred, where, strict=True)
                if w and abs(a - b) > 1e-9 * a
            )
        )
        if runs:
            exercised[key] = runs
    keys = list(exercised)
    x = dict.fromkeys(keys, 0.0)  # log-scale of each knob

    def values_of(xs: Mapping[_Key, float]) -> dict[_Key, float]:
        return {k: base[k] * math.exp(xs.get(k, 0.0)) for k in base}

    def loss(xs: Mapping[_Key, float], where: Sequence[bool]) -> float:
        return loss_of(predict_seconds(_apply(topology, values_of(xs)), points), where)

    fitted_on = [lg or sm for lg, sm in zip(large, small, strict=True)]
    n_meas = max(1, sum(len(ms) for ms, w in zip(logs, fitted_on, strict=True) if w))
    before = loss_of(ref, fitted_on)
    groups = [
        ([k for k in keys if not k[0].endswith("lat")], large),
        ([k for k in keys if k[0].endswith("lat")], small),
    ]
    for _ in range(2):
        for grp, where in groups:
            if not grp:
                continue
            start = {k: x[k] for k in grp}

            def g(
                s: float, grp: list[_Key] = grp, start: dict[_Key, float] = start, where: list[bool] = where
            ) -> float:
                return loss({**x, **{k: start[k] + s for k in grp}}, where)

            s, _f = _search(g, -_LN, _LN)
            for k in grp:
                x[k] = start[k] + s
    for r in range(rounds):
        width = _LN if r == 0 else math.log(20.0)
        for grp, where in groups:
            for k in grp:
                x0 = x[k]

                def h(v: float, k: _Key = k, where: list[bool] = where) -> float:
                    return loss({**x, k: v}, where)

                v, fv = _search(h, max(-_LN, x0 - width), min(_LN, x0 + width))
                if fv < loss(x, where):
                    x[k] = v
    # a knob the fit moved but that does not bind after all (the loss is flat there) goes back to its value
    for grp, where in groups:
        for k in grp:
            if x[k] != 0.0 and loss({**x, k: 0.0}, where) <= loss(x, where) * (1 + 1e-9) + 1e-15:
                x[k] = 0.0
    fitted = values_of(x)
    knobs = tuple(Knob(_knob_name(topology, k), base[k], fitted[k], exercised[k]) for k in keys)
    after = loss(x, fitted_on)
    return Fit(_apply(topology, fitted), knobs, math.sqrt(before / n_meas), math.sqrt(after / n_meas))


@dataclass(frozen=True)
class ComputeFit:
    """The compute efficiency (`ModelShape.mfu`) before and after, and the modeled steps at each."""

    efficiency_before: float
    efficiency_after: float
    before: CostReport
    after: CostReport
    measured_step: float


def fit_compute_efficiency(
    topology: Topology, state: ClusterState, job: Job, mapping: Sequence[int], measured_step: float
) -> ComputeFit:
    """The compute efficiency (`ModelShape.mfu`, what compute time divides by; a job that leaves it at the default
    runs at its kind's GEMM efficiency, `placement.cost.compute.gemm_efficiency`) at which the modeled step of `job`
    under `mapping` equals `measured_step` seconds (bisection on log-efficiency; the step falls as it rises)."""
    if job.model is None or job.parallel is None:
        raise ValueError("the job has no model shape: its step has no compute to fit")
    if not measured_step > 0:
        raise ValueError(f"the measured step must be > 0 seconds, got {measured_step:g}")
    model = job.model

    def step(eff: float) -> CostReport:
        return evaluate(topology, state, replace(job, model=replace(model, mfu=eff)), mapping)

    before = step(model.mfu)
    if not before.compute_seconds:
        raise ValueError("the job's devices are of no known kind: the model has no compute time to fit")
    lo, hi = 1e-4, 1.0
    s_hi = step(hi).step_seconds
    if s_hi > measured_step:
        raise ValueError(
            f"the measured step {measured_step:.4g} s is shorter than the modeled step at efficiency 1.0 "
            f"({s_hi:.4g} s): communication and bubble alone exceed it"
        )
    if step(lo).step_seconds < measured_step:
        raise ValueError(f"the measured step {measured_step:.4g} s needs an efficiency below {lo:g}")
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if step(mid).step_seconds > measured_step:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-9:
            break
    eff = math.sqrt(lo * hi)
    # the efficiency the model ran at before: the job's own, or its kind's GEMM efficiency (`step_compute`)
    kind = job_device_kind(topology, mapping) or device_kind(job.device_kind, topology)
    used = step_compute(model, job.parallel, kind).efficiency if kind is not None else model.mfu
    return ComputeFit(used, eff, before, step(eff), measured_step)
