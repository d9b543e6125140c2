"""What-if sweeps: a grid of job shapes, occupancy, cluster variants, strategies and time limits, run in parallel.

Owns the sweep file format (`load_sweep`), the grid and its stable point keys, the run (`run_sweep`: a CSV appended
row by row, resumable), the ranked comparison tables (`ranked_tables`) and the plots (`plot_sweep`).

The file format, the CSV columns and a measured example are in docs/whatif.md. Points of one state and strategy
are evaluated by `placement.solve.run.compare`, the function behind the gRPC Compare RPC.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import math
import multiprocessing
import os
import random
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path
from typing import Any

from placement.errors import InputError, Problems
from placement.job import DIMENSIONS, Job
from placement.state import ClusterState
from placement.topology import Topology

__all__ = [
    "AXES",
    "MODES",
    "OUTPUT_COLUMNS",
    "STRATEGIES",
    "TASK_SECONDS",
    "Point",
    "Shape",
    "Sweep",
    "SweepRun",
    "Task",
    "Variant",
    "activation_gb",
    "batch_problem",
    "build_state",
    "canonical_strategy",
    "csv_columns",
    "default_workers",
    "device_memory_gb",
    "evaluate_task",
    "factorizations",
    "global_micro_batches",
    "iter_missing",
    "known_strategies",
    "load_sweep",
    "model_state_gb",
    "plan_tasks",
    "plot_sweep",
    "ranked_tables",
    "read_results",
    "run_sweep",
    "shape_job_doc",
    "sweep_from_dict",
]

AXES: tuple[str, ...] = (
    "shapes", "occupancy", "modes", "seeds", "failed", "gpus_per_node", "nodes", "nodes_per_leaf", "tiers",
    "strategies", "time_limits",
)
"""The axes a sweep file may vary (under ``axes:``)."""
MODES: tuple[str, ...] = ("whole", "partial", "mixed")
"""Fragmentation modes of `placement.scenarios.occupy`."""
STRATEGIES: tuple[str, ...] = ("first-fit", "kueue-tas", "slurm-tree", "slurm-block", "cpsat")
"""Strategy names, as `placement.solve.Strategy` spells them; the default of the strategies axis is every
strategy the solver knows (`known_strategies`). ``topology-greedy`` is accepted as an alias of ``kueue-tas``."""


def known_strategies() -> tuple[str, ...]:
    """The strategy names the solver knows (`placement.solve.Strategy`), in its order, aliases left out."""
    from placement.solve import Strategy

    return tuple(dict.fromkeys(getattr(s, "canonical", s).value for s in Strategy))


def canonical_strategy(name: Any) -> str | None:
    """The solver's name for a strategy axis value (``topology-greedy`` -> ``kueue-tas``), None when unknown."""
    from placement.solve import Strategy

    try:
        st = Strategy(name)
    except ValueError:
        return None
    return str(getattr(st, "canonical", st).value)
MAX_POINTS = 100_000
"""A grid larger than this is refused: it is almost always a typo (an axis listed as a range of thousands)."""

_TOP_KEYS = ("name", "description", "cluster", "job", "state", "gpus", "solver", "keep_global_batch", "axes")
_SHAPE_FILTERS = (*DIMENSIONS, *(f"max_{d}" for d in DIMENSIONS), "heads", "tp_within_node", "memory_gb",
                  "distributed_optimizer", "activations")


def model_state_gb(parameters: float, s: Shape, *, distributed_optimizer: bool = True) -> float:
    """GB per GPU for weights, gradients and Adam states in mixed precision (ZeRO paper, Rajbhandari et al.
    2020, sec. 3.1: 2 + 2 + 12 bytes per parameter); the distributed optimizer (Megatron-LM, ZeRO-1) shards the
    12 optimizer bytes over the data-parallel ranks (dp x cp). Activations are `activation_gb`.

    70B over tp8 x pp4 is 2.19e9 parameters per GPU, each 2 + 2 + 12/4 = 7 bytes (dp4 shards Adam):

    >>> round(model_state_gb(70e9, Shape(8, 1, 1, 4, 4)), 1)
    15.3
    """
    per_rank = parameters / (s.tp * s.pp)
    optimizer = 12.0 / (s.dp * s.cp) if distributed_optimizer else 12.0
    return per_rank * (4.0 + optimizer) / 1e9


def device_memory_gb(kind: str | None, topology: Topology | None = None) -> float | None:
    """Memory per device (GB) of a device kind: the cluster's own kinds, then `placement.compute.DEVICE_KINDS`
    (V100 ... MI300X); None when the kind is unknown.

    >>> device_memory_gb("H100"), device_memory_gb("gpu")
    (80.0, None)
    """
    from placement.compute import device_kind

    dk = device_kind(kind, topology)
    return None if dk is None else dk.memory_gb


def activation_gb(s: Shape, *, hidden: int, layers: int, seq_len: int, micro_batch: int = 1,
                  micro_batches: int = 1, heads: int = 0, recompute: bool = False) -> float:
    """GB of activations per device on the first pipeline stage at its peak: `placement.compute.activation_bytes`
    (Korthikanti et al. 2022, eq. 2, under tensor and sequence parallelism: ``s*b*h*(34 + 5*a*s/h) / tp`` bytes
    per layer, s split by cp; full recomputation keeps ``2*s*b*h / tp``; 1F1B holds ``min(pp, micro_batches)``
    micro-batches of ``layers / pp`` layers). Heads default to hidden / 128.

    A 70B-class model (h 8192, 64 heads, 80 layers, s 4096, b 1) on tp8 pp4 with 16 micro-batches: 33.5e6 * (34 +
    160) / 8 bytes per layer, 20 layers x 4 micro-batches in flight:

    >>> round(activation_gb(Shape(8, 1, 1, 8, 4), hidden=8192, layers=80, seq_len=4096, micro_batches=16, heads=64), 1)
    65.1
    """
    from placement.compute import activation_bytes
    from placement.job import ModelShape, ParallelSpec

    model = ModelShape(parameters=1.0, hidden=hidden, layers=layers, seq_len=seq_len, micro_batch=micro_batch,
                       micro_batches=micro_batches, recompute=recompute, heads=heads)
    return activation_bytes(model, ParallelSpec(s.tp, s.cp, s.ep, s.dp, s.pp)) / 1e9


_FEASIBLE = ("OPTIMAL", "FEASIBLE")
_DEFAULT_TIME_LIMIT = 10.0
TASK_SECONDS = 6.0
"""About how much solver time limit one task (one `compare` call) holds."""


# ---- the grid -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """Parallel sizes of one job shape."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1
    pp: int = 1

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.ep * self.dp * self.pp

    @property
    def key(self) -> str:
        """Every size, in the CSV's spelling: ``tp8-cp1-ep1-dp8-pp4``."""
        return "-".join(f"{d}{getattr(self, d)}" for d in ("tp", "cp", "ep", "dp", "pp"))

    @property
    def label(self) -> str:
        """Short display form, sizes of 1 left out except tp, pp and dp: ``tp8 pp4 dp8``."""
        parts = [f"tp{self.tp}"] + [f"{d}{getattr(self, d)}" for d in ("cp", "ep") if getattr(self, d) > 1]
        return " ".join([*parts, f"pp{self.pp}", f"dp{self.dp}"])


@dataclass(frozen=True)
class Variant:
    """One cluster variant: overrides applied to the base cluster document before it is built."""

    gpus_per_node: int | None = None
    nodes: int | None = None
    nodes_per_leaf: int | None = None
    tiers: tuple[tuple[str, float | None, float | None], ...] = ()
    """(level, bandwidth GB/s or None, latency µs or None) per overridden level."""

    @property
    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in (("gpus_per_node", self.gpus_per_node), ("nodes", self.nodes),
                                         ("nodes_per_leaf", self.nodes_per_leaf)) if v is not None]
        for lvl, bw, lat in self.tiers:
            parts.append(f"{lvl}={'' if bw is None else f'{bw:g}'}/{'' if lat is None else f'{lat:g}'}")
        return ", ".join(parts) or "base"


@dataclass(frozen=True)
class Point:
    """One point of the grid. `key` is the stable hash of its effective inputs (shared by equivalent points)."""

    key: str
    variant: int
    occupancy: float
    mode: str
    seed: int
    failed: float
    shape: Shape | None
    strategy: str
    time_limit_s: float | None

    def axis_values(self, sweep: Sweep) -> dict[str, str]:
        """The point's value on each axis, as the tables and plots name it."""
        return {
            "variant": sweep.variants[self.variant].label,
            "occupancy": f"{self.occupancy:g}",
            "mode": self.mode,
            "seed": str(self.seed),
            "failed": f"{self.failed:g}",
            "shape": self.shape.label if self.shape is not None else sweep.job_name,
            "strategy": self.strategy,
            "time_limit": "" if self.time_limit_s is None else f"{self.time_limit_s:g}",
        }


@dataclass(frozen=True, eq=False)
class Sweep:
    """A parsed sweep file: base documents, the cluster variants, and the grid's points (in grid order)."""

    name: str
    source: str
    cluster_doc: Mapping[str, Any]
    cluster_dir: str
    job_doc: Mapping[str, Any]
    job_name: str
    state_doc: Mapping[str, Any] | None
    gpus: int | None
    variants: tuple[Variant, ...]
    variant_docs: tuple[Mapping[str, Any], ...]
    variant_info: tuple[Mapping[str, str], ...]
    """Effective values of each variant for the CSV: gpus_per_node, nodes, nodes_per_leaf, tiers per level."""
    points: tuple[Point, ...]
    labels: tuple[str, ...]
    tiers: tuple[str, ...]
    level_names: tuple[str, ...]
    solver_workers: int = 1
    solver_seed: int = 0
    relative_gap: float = 0.0
    strategies: tuple[str, ...] = STRATEGIES
    baselines: tuple[str, ...] = ("first-fit",)
    """The baseline strategies the solver reports on every answer (`PlacementResult.baselines`): CSV columns."""
    keep_global_batch: bool = True
    """Shapes keep the base job's global batch (`shape_job_doc`)."""

    @property
    def keys(self) -> tuple[str, ...]:
        """Distinct point keys, in grid order."""
        return tuple(dict.fromkeys(p.key for p in self.points))


def factorizations(gpus: int, filters: Mapping[str, Any] | None = None, *, gpus_per_node: int | None = None,
                   hidden: int | None = None, layers: int | None = None, seq_len: int | None = None,
                   experts: int = 0, parameters: float | None = None, micro_batch: int = 1, micro_batches: int = 1,
                   recompute: bool = False, heads: int = 0, device_memory_gb: float | None = None,
                   global_micro_batches: int | None = None) -> list[Shape]:
    """Every (tp, cp, ep, dp, pp) whose product is `gpus` and that passes the filters, sorted by tp, cp, ep, pp.

    Filters: allowed values per dimension (``tp: [1, 2, 4, 8]``), ``max_<dim>``, ``heads`` (tp divides it;
    default the model's `heads`),
    ``tp_within_node`` (default true: tp <= `gpus_per_node`), ``memory_gb`` (GB per GPU; default
    `device_memory_gb`, the memory of the job's device kind). With a memory limit and `parameters`, a shape must
    hold its model states (`model_state_gb`; ``distributed_optimizer``, default true, shards the optimizer over
    dp) plus, with ``activations`` (default true) and the model's sizes, the activations of `activation_gb`.
    The model rules always apply: tp divides `hidden`, pp divides `layers`, cp divides `seq_len`, ep > 1 needs
    `experts` divisible by ep. With `global_micro_batches` (the global batch, in micro-batches, that every shape
    keeps) dp must divide it, and each shape runs ``global_micro_batches / dp`` micro-batches per step.

    >>> [s.label for s in factorizations(8, {"cp": [1], "ep": [1]}, gpus_per_node=4, layers=2)]
    ['tp1 pp1 dp8', 'tp1 pp2 dp4', 'tp2 pp1 dp4', 'tp2 pp2 dp2', 'tp4 pp1 dp2', 'tp4 pp2 dp1']
    """
    f = dict(filters or {})
    divisors = [d for d in range(1, gpus + 1) if gpus % d == 0]

    def allowed(dim: str, v: int) -> bool:
        vals = f.get(dim)
        if vals is not None and v not in vals:
            return False
        mx = f.get(f"max_{dim}")
        return mx is None or v <= mx

    out: list[Shape] = []
    for tp, cp, ep, pp in product(divisors, repeat=4):
        rest, rem = divmod(gpus, tp * cp * ep * pp)
        if rem or rest < 1:
            continue
        s = Shape(tp, cp, ep, rest, pp)
        if not all(allowed(d, getattr(s, d)) for d in DIMENSIONS):
            continue
        if f.get("tp_within_node", True) and gpus_per_node is not None and tp > gpus_per_node:
            continue
        n_heads = f.get("heads") or heads
        if (n_heads and n_heads % tp) or (hidden and hidden % tp) or (layers and layers % pp) or (seq_len and seq_len % cp):
            continue
        if ep > 1 and (experts < ep or experts % ep):
            continue
        m = micro_batches
        if global_micro_batches is not None:
            if global_micro_batches % s.dp:
                continue
            m = global_micro_batches // s.dp
        mem = f.get("memory_gb", device_memory_gb)
        if mem is not None and parameters is not None:
            need = model_state_gb(parameters, s, distributed_optimizer=f.get("distributed_optimizer", True))
            if f.get("activations", True) and hidden and layers and seq_len:
                need += activation_gb(s, hidden=hidden, layers=layers, seq_len=seq_len, micro_batch=micro_batch,
                                      micro_batches=m, heads=n_heads, recompute=recompute)
            if need > mem:
                continue
        out.append(s)
    out.sort(key=lambda s: (s.tp, s.cp, s.ep, s.pp, s.dp))
    return out


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str, separators=(",", ":")).encode()).hexdigest()


def _sub_document(value: Any, what: str, base_dir: Path, ps: Problems) -> tuple[dict[str, Any] | None, Path, str]:
    """A sub-document given inline (mapping) or as a path relative to the sweep file."""
    from placement.io.native import load_document

    if isinstance(value, dict):
        return value, base_dir, ""
    if isinstance(value, str):
        p = Path(value)
        if not p.is_absolute():
            p = base_dir / p
        try:
            doc = load_document(p)
        except InputError as e:
            for pr in e.problems:
                ps.add(f"{what} ({value}) {pr.path}".rstrip(), pr.message)
            return None, p.parent, value
        if not isinstance(doc, dict):
            ps.add(f"{what} ({value})", f"must hold a mapping, got {type(doc).__name__}")
            return None, p.parent, value
        return doc, p.parent, value
    ps.add(what, f"must be a path to a {what} file or the {what} inline as a mapping, got {value!r}")
    return None, base_dir, ""


def _where(what: str, ref: str, path: str) -> str:
    """Field path of a problem inside a sub-document: ``cluster.levels[0]`` inline, ``cluster (c.yaml) levels[0]``."""
    if ref:
        return f"{what} ({ref}) {path}".rstrip()
    return f"{what}.{path}" if path else what


def _values(ps: Problems, axes: Mapping[str, Any], key: str, default: list[Any] | None,
            check: Callable[[Any], str | None]) -> list[Any]:
    """An axis as a list (a scalar is a list of one), each value checked; an empty list is an error."""
    if key not in axes or axes[key] is None:
        return list(default or [])
    v = axes[key]
    items = v if isinstance(v, list) else [v]
    if not items:
        ps.add(f"axes.{key}", "is empty: the grid would have no points; give at least one value or drop the axis")
        return []
    out: list[Any] = []
    for i, x in enumerate(items):
        msg = check(x)
        if msg is not None:
            ps.add(f"axes.{key}[{i}]" if isinstance(v, list) else f"axes.{key}", msg)
        else:
            out.append(x)
    if len(set(map(repr, out))) != len(out):
        ps.add(f"axes.{key}", f"lists a value twice: {items!r}")
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _fraction(x: Any) -> str | None:
    return None if _is_num(x) and 0 <= x < 1 else f"must be a fraction in [0, 1), got {x!r}"


def _positive_int(x: Any) -> str | None:
    return None if _is_int(x) and x >= 1 else f"must be an integer >= 1, got {x!r}"


def _apply_variant(doc: Mapping[str, Any], v: Variant, level_names: Sequence[str], ps: Problems) -> dict[str, Any]:
    """The cluster document with the variant's overrides (problems name the axis that cannot apply)."""
    d: dict[str, Any] = copy.deepcopy(dict(doc))
    for lvl, bw, lat in v.tiers:
        for entry in d.get("levels") or []:
            if isinstance(entry, dict) and entry.get("name") == lvl:
                if bw is not None:
                    entry["bandwidth_gbps"] = bw
                if lat is not None:
                    entry["latency_us"] = lat
    gens = d.get("generate")
    gen_list = [gens] if isinstance(gens, dict) else gens if isinstance(gens, list) else []
    if v.gpus_per_node is not None:
        n = v.gpus_per_node
        for nt in d.get("node_types") or []:
            if not isinstance(nt, dict):
                continue
            if nt.get("matrix") is not None or nt.get("nvidia_smi") is not None:
                ps.add("axes.gpus_per_node", f"node type {nt.get('name')!r} has an intra-node matrix for its own device count; it cannot be resized")
                continue
            nt["devices"] = n
            if nt.get("rails") is not None:
                nt["rails"] = list(range(n))  # one NIC per GPU, as before
        for entry in [*gen_list, *(d.get("hosts") or [])]:
            if isinstance(entry, dict) and entry.get("node_type") is None:
                entry["devices"] = n
    if v.nodes is not None or v.nodes_per_leaf is not None:
        axis = "axes.nodes" if v.nodes is not None else "axes.nodes_per_leaf"
        if len(gen_list) != 1 or not isinstance(gen_list[0], dict) or d.get("hosts"):
            ps.add(axis, "needs a cluster made by exactly one `generate` entry (hosts listed one by one are not resized)")
            return d
        g = gen_list[0]
        fan = dict(g.get("fanout") or {})
        if v.nodes is not None:
            g["nodes"] = v.nodes
        if v.nodes_per_leaf is not None:
            if len(level_names) < 2:
                ps.add("axes.nodes_per_leaf", "the cluster has no level above the hosts")
                return d
            fan[level_names[1]] = v.nodes_per_leaf
        if len(level_names) > 2 or v.nodes_per_leaf is None:
            fan.pop(level_names[-1], None)  # the top level holds whatever is below it
        g["fanout"] = fan
    return d


def _variant_info(topo: Topology) -> dict[str, str]:
    per_node = {nt.devices for nt in topo.host_types}
    info = {
        "gpus_per_node": str(per_node.pop()) if len(per_node) == 1 else "mixed",
        "nodes": str(len(topo.host_names)),
        "nodes_per_leaf": "",
    }
    if len(topo.levels) > 1:
        fan = {len(c) for c in topo.children[1]}
        info["nodes_per_leaf"] = str(fan.pop()) if len(fan) == 1 else "mixed"
    for lv in topo.levels:
        info[f"{lv.name}_bandwidth_gbps"] = f"{lv.tier.bandwidth_gbps:g}"
        info[f"{lv.name}_latency_us"] = f"{lv.tier.latency_us:g}"
    return info


def _tier_names(topo: Topology) -> list[str]:
    names = list(topo.level_names)
    for nt in topo.host_types:
        for row in nt.matrix or ():
            names.extend(f"{topo.levels[0].name}:{c}" for c in row if c != "X")
    if topo.pair_paths is not None:
        names.append("graph")
    return list(dict.fromkeys(names))


def global_micro_batches(job_doc: Mapping[str, Any]) -> int | None:
    """The base job's global batch in micro-batches, ``dp * micro_batches`` (None without a model). Sweeping
    shapes keeps it, as a training recipe does: a shape with dp replicas runs ``global / dp`` micro-batches, so
    that step times of different shapes train on the same tokens."""
    model, par = job_doc.get("model"), job_doc.get("parallel")
    if not isinstance(model, Mapping):
        return None
    dp = par.get("dp", 1) if isinstance(par, Mapping) else 1
    m = model.get("micro_batches", 1)
    return dp * m if _is_int(dp) and _is_int(m) else None


def batch_problem(job_doc: Mapping[str, Any], shape: Shape) -> str | None:
    """Why `shape` cannot keep the base job's global batch (None: it can)."""
    g = global_micro_batches(job_doc)
    if g is None or g % shape.dp == 0:
        return None
    return (f"dp={shape.dp} does not divide the global batch of {g} micro-batches (the base job's dp x "
            f"micro_batches); pick another dp or set keep_global_batch: false")


def shape_job_doc(job_doc: Mapping[str, Any], shape: Shape | None, *, keep_global_batch: bool = True) -> dict[str, Any]:
    """The base job document with one shape's parallel sizes (and a name that says the shape). With
    `keep_global_batch` the shape also gets the micro-batches per step that keep the base job's global batch
    (`global_micro_batches`); a shape whose dp does not divide it is a `ValueError` (`batch_problem`)."""
    d = copy.deepcopy(dict(job_doc))
    if shape is None:
        return d
    g = global_micro_batches(job_doc) if keep_global_batch else None
    if g is not None:
        problem = batch_problem(job_doc, shape)
        if problem is not None:
            raise ValueError(problem)
        d["model"] = {**d["model"], "micro_batches": g // shape.dp}
    par = dict(d.get("parallel") or {})
    par.update({k: getattr(shape, k) for k in DIMENSIONS})
    d["parallel"] = par
    d.pop("ranks", None)
    d["name"] = f"{d.get('name') or 'job'}-{shape.key}"
    return d


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file; every problem is raised at once as `InputError` with field paths."""
    from placement.io.native import load_document

    p = Path(path)
    return sweep_from_dict(load_document(p), str(path), p.parent)


def _shapes(ps: Problems, shapes_doc: Any, gpus: int, job_doc: Mapping[str, Any], base_job: Job,
            variants: Sequence[Variant], vtopos: Sequence[Topology], source: str,
            keep_global_batch: bool = True) -> list[list[Shape | None]]:
    """The job shapes of each variant (tp <= GPUs per node depends on the variant); problems go to `ps`."""
    from placement.io.native import job_from_dict

    shapes_per_variant: list[list[Shape | None]] = []
    model = base_job.model
    if shapes_doc is None:
        par = base_job.parallel
        one: Shape | None = None if par is None else Shape(par.tp, par.cp, par.ep, par.dp, par.pp)
        shapes_per_variant = [[one] for _ in variants]
    elif isinstance(shapes_doc, list):
        if not shapes_doc:
            ps.add("axes.shapes", "is empty: the grid would have no points; give at least one shape or drop the axis")
        explicit: list[Shape | None] = []
        for i, sd in enumerate(shapes_doc):
            sp = f"axes.shapes[{i}]"
            if not isinstance(sd, dict) or not sd:
                ps.add(sp, f"must be a mapping of sizes like {{tp: 8, pp: 4, dp: 8}}, got {sd!r}")
                continue
            bad = [k for k in sd if k not in DIMENSIONS]
            if bad:
                ps.add(sp, f"unknown dimension(s) {bad}; known: {', '.join(DIMENSIONS)}")
                continue
            if not all(_is_int(x) and x >= 1 for x in sd.values()):
                ps.add(sp, f"sizes must be integers >= 1, got {sd!r}")
                continue
            sizes = {k: int(sd.get(k, 1)) for k in DIMENSIONS}
            other = sizes["tp"] * sizes["cp"] * sizes["ep"] * sizes["pp"]
            if "dp" not in sd:
                if gpus % other:
                    ps.add(sp, f"tp*cp*ep*pp = {other} does not divide the sweep's {gpus} GPUs, so no dp fits")
                    continue
                sizes["dp"] = gpus // other
            s = Shape(**sizes)
            if s.world_size != gpus:
                prod_s = "*".join(str(sizes[k]) for k in ("tp", "cp", "ep", "dp", "pp"))
                ps.add(sp, f"tp*cp*ep*dp*pp = {prod_s} = {s.world_size}, not the sweep's {gpus} GPUs")
                continue
            if s in explicit:
                ps.add(sp, f"shape {s.label} is listed twice")
                continue
            problem = batch_problem(job_doc, s) if keep_global_batch else None
            if problem is not None:
                ps.add(sp, problem)
                continue
            try:
                job_from_dict(shape_job_doc(job_doc, s, keep_global_batch=keep_global_batch), f"{source}: {sp}")
            except InputError as e:
                for pr in e.problems:
                    ps.add(f"{sp} ({pr.path})" if pr.path else sp, pr.message)
                continue
            explicit.append(s)
        shapes_per_variant = [list(explicit) for _ in variants]
    elif shapes_doc == "all" or isinstance(shapes_doc, dict):
        filters: dict[str, Any] = {} if shapes_doc == "all" else dict(shapes_doc)
        ok = True
        for k, val in filters.items():
            fp = f"axes.shapes.{k}"
            if k not in _SHAPE_FILTERS:
                ps.add(fp, f"unknown filter; known: {', '.join(_SHAPE_FILTERS)}")
                ok = False
            elif k in DIMENSIONS:
                vals = val if isinstance(val, list) else [val]
                if not vals or not all(_is_int(x) and x >= 1 for x in vals):
                    ps.add(fp, f"must be a non-empty list of integers >= 1, got {val!r}")
                    ok = False
                filters[k] = vals
            elif k == "memory_gb":
                if isinstance(val, bool) or not isinstance(val, int | float) or val <= 0:
                    ps.add(fp, f"must be a number of GB > 0, got {val!r}")
                    ok = False
            elif k in ("tp_within_node", "distributed_optimizer", "activations"):
                if not isinstance(val, bool):
                    ps.add(fp, f"must be true or false, got {val!r}")
                    ok = False
            elif not (_is_int(val) and val >= 1):
                ps.add(fp, f"must be an integer >= 1, got {val!r}")
                ok = False
        if ok:
            assert model is not None
            for v, topo in zip(variants, vtopos, strict=True):
                types = [nt for nt in topo.host_types if base_job.device_kind in (None, nt.kind)]
                kinds = [nt.devices for nt in types]
                mems = [device_memory_gb(nt.kind, topo) for nt in types]
                found = factorizations(gpus, filters, gpus_per_node=max(kinds, default=None), hidden=model.hidden,
                                       layers=model.layers, seq_len=model.seq_len, experts=model.experts,
                                       parameters=model.parameters, micro_batch=model.micro_batch,
                                       micro_batches=model.micro_batches, recompute=model.recompute, heads=model.heads,
                                       device_memory_gb=min((m for m in mems if m is not None), default=None),
                                       global_micro_batches=global_micro_batches(job_doc) if keep_global_batch else None)
                shapes: list[Shape | None] = [*found]
                if not shapes:
                    rules = [f"tp <= {max(kinds, default=0)} GPUs per node" if filters.get("tp_within_node", True) else "",
                             f"tp divides hidden {model.hidden}", f"pp divides layers {model.layers}"]
                    g = global_micro_batches(job_doc) if keep_global_batch else None
                    if g is not None:
                        rules.append(f"dp divides the global batch of {g} micro-batches")
                    mem = filters.get("memory_gb", min((m for m in mems if m is not None), default=None))
                    if mem is not None:
                        what = "model states + activations" if filters.get("activations", True) else "model states"
                        rules.append(f"{what} <= {mem:g} GB per device")
                    rules += [f"{k} {filters[k]}" for k in filters
                              if k not in ("tp_within_node", "distributed_optimizer", "activations", "memory_gb")]
                    where = "" if v.label == "base" else f" (variant {v.label})"
                    ps.add("axes.shapes", f"no factorization of {gpus} GPUs passes the filters{where}: {'; '.join(r for r in rules if r)}")
                shapes_per_variant.append(shapes)
    else:
        ps.add("axes.shapes", f"must be `all`, a mapping of filters, or a list of shapes, got {shapes_doc!r}")
    return shapes_per_variant


def sweep_from_dict(doc: Any, source: str = "<sweep>", base_dir: Path | None = None) -> Sweep:
    """Check a parsed sweep document and expand its grid (see the module docstring for the format)."""
    from placement.io.native import cluster_from_dict, job_from_dict, state_from_dict

    base = base_dir if base_dir is not None else Path.cwd()
    ps = Problems(source)
    if not isinstance(doc, dict):
        ps.add("", f"a sweep file is a mapping with cluster, job and axes, got {type(doc).__name__}")
        ps.raise_if_any()
    for k in doc:
        if k not in _TOP_KEYS:
            ps.add(str(k), f"unknown field; expected one of {sorted(_TOP_KEYS)}")
    name = str(doc.get("name") or Path(source).stem or "sweep")
    missing = [req for req in ("cluster", "job") if doc.get(req) is None]
    for req in missing:
        ps.add(req, f"is required: a path to a native {req} file or the {req} inline")
    if missing:
        ps.raise_if_any()

    cluster_doc, cluster_dir, cluster_ref = _sub_document(doc["cluster"], "cluster", base, ps)
    job_doc, _, job_ref = _sub_document(doc["job"], "job", base, ps)
    state_doc: dict[str, Any] | None = None
    state_ref = ""
    if doc.get("state") is not None:
        state_doc, _, state_ref = _sub_document(doc["state"], "state", base, ps)
    base_topo: Topology | None = None
    if cluster_doc is not None:
        try:
            base_topo, _ = cluster_from_dict(cluster_doc, cluster_ref or f"{source}: cluster", cluster_dir)
        except InputError as e:
            for pr in e.problems:
                ps.add(_where("cluster", cluster_ref, pr.path), pr.message)
    base_job: Job | None = None
    if job_doc is not None:
        try:
            base_job = job_from_dict(job_doc, job_ref or f"{source}: job")
        except InputError as e:
            for pr in e.problems:
                ps.add(_where("job", job_ref, pr.path), pr.message)

    solver = doc.get("solver") or {}
    if not isinstance(solver, dict):
        ps.add("solver", f"must be a mapping {{workers, seed, relative_gap}}, got {solver!r}")
        solver = {}
    for k in solver:
        if k not in ("workers", "seed", "relative_gap"):
            ps.add(f"solver.{k}", "unknown field; expected one of ['relative_gap', 'seed', 'workers']")
    s_workers = solver.get("workers", 1)
    if not (_is_int(s_workers) and s_workers >= 1):
        ps.add("solver.workers", f"must be an integer >= 1, got {s_workers!r}")
        s_workers = 1
    s_seed = solver.get("seed", 0)
    if not _is_int(s_seed):
        ps.add("solver.seed", f"must be an integer, got {s_seed!r}")
        s_seed = 0
    s_gap = solver.get("relative_gap", 0.0)
    if not (_is_num(s_gap) and s_gap >= 0):
        ps.add("solver.relative_gap", f"must be a number >= 0, got {s_gap!r}")
        s_gap = 0.0

    keep_batch = doc.get("keep_global_batch", True)
    if not isinstance(keep_batch, bool):
        ps.add("keep_global_batch", f"must be true or false, got {keep_batch!r}")
        keep_batch = True
    gpus = doc.get("gpus")
    if gpus is not None and not (_is_int(gpus) and gpus >= 1):
        ps.add("gpus", f"must be an integer >= 1, got {gpus!r}")
        gpus = None

    axes = doc.get("axes") or {}
    if not isinstance(axes, dict):
        ps.add("axes", f"must be a mapping of axis name to values, got {type(axes).__name__}")
        axes = {}
    for k in axes:
        if k not in AXES:
            ps.add(f"axes.{k}", f"unknown axis; known axes: {', '.join(AXES)}")

    occupancy = _values(ps, axes, "occupancy", [0.0], _fraction)
    failed = _values(ps, axes, "failed", [0.0], _fraction)
    modes = _values(ps, axes, "modes", ["whole"], lambda x: None if x in MODES else f"unknown mode {x!r}; known: {', '.join(MODES)}")
    seeds = _values(ps, axes, "seeds", [0], lambda x: None if _is_int(x) else f"must be an integer, got {x!r}")
    known = known_strategies()
    strategies = _values(ps, axes, "strategies", list(known),
                         lambda x: None if canonical_strategy(x) else f"unknown strategy {x!r}; known: {', '.join(known)}")
    strategies = [canonical_strategy(x) for x in strategies]
    if len(set(strategies)) != len(strategies):
        ps.add("axes.strategies", f"names one strategy twice (an alias and its name): {axes.get('strategies')!r}")
    time_limits = _values(ps, axes, "time_limits", [_DEFAULT_TIME_LIMIT],
                          lambda x: None if _is_num(x) and x > 0 else f"must be a number of seconds > 0, got {x!r}")
    gpn = _values(ps, axes, "gpus_per_node", [None], _positive_int)
    nodes = _values(ps, axes, "nodes", [None], _positive_int)
    npl = _values(ps, axes, "nodes_per_leaf", [None], _positive_int)
    level_names = list(base_topo.level_names) if base_topo is not None else []
    tier_axes: list[list[tuple[str, float | None, float | None]]] = []
    tiers_doc = axes.get("tiers")
    if tiers_doc is not None:
        if not isinstance(tiers_doc, dict) or not tiers_doc:
            ps.add("axes.tiers", "must map level names to lists of {bandwidth_gbps, latency_us}, e.g. {leaf: [{bandwidth_gbps: 50}]}")
        else:
            for lvl, vals in tiers_doc.items():
                tp_ = f"axes.tiers.{lvl}"
                if base_topo is not None and lvl not in level_names:
                    ps.add(tp_, f"unknown level; the cluster's levels are {level_names}")
                    continue
                items = vals if isinstance(vals, list) else [vals]
                if not items:
                    ps.add(tp_, "is empty: the grid would have no points")
                    continue
                opts: list[tuple[str, float | None, float | None]] = []
                for i, it in enumerate(items):
                    ip = f"{tp_}[{i}]"
                    if not isinstance(it, dict) or not it or set(it) - {"bandwidth_gbps", "latency_us"}:
                        ps.add(ip, f"must be a mapping with bandwidth_gbps and/or latency_us, got {it!r}")
                        continue
                    bw, lat = it.get("bandwidth_gbps"), it.get("latency_us")
                    if bw is not None and not (_is_num(bw) and bw > 0):
                        ps.add(f"{ip}.bandwidth_gbps", f"must be > 0, got {bw!r}")
                        continue
                    if lat is not None and not (_is_num(lat) and lat >= 0):
                        ps.add(f"{ip}.latency_us", f"must be >= 0, got {lat!r}")
                        continue
                    opts.append((str(lvl), None if bw is None else float(bw), None if lat is None else float(lat)))
                tier_axes.append(opts)

    shapes_doc = axes.get("shapes")
    structured = base_job is not None and base_job.parallel is not None and base_job.model is not None
    if shapes_doc is not None and base_job is not None and not structured:
        ps.add("axes.shapes", "needs a structured base job (parallel + model); the job lists explicit groups")
    if gpus is None and base_job is not None:
        gpus = base_job.ranks
    ps.raise_if_any()
    assert base_topo is not None and base_job is not None and cluster_doc is not None and job_doc is not None

    # cluster variants: build each, to check it and to know its effective values
    variants: list[Variant] = []
    vdocs: list[dict[str, Any]] = []
    vinfo: list[dict[str, str]] = []
    vtopos: list[Topology] = []
    for combo in product(gpn, nodes, npl, *tier_axes):
        v = Variant(combo[0], combo[1], combo[2], tuple(combo[3:]))
        before = len(ps.items)
        vd = _apply_variant(cluster_doc, v, level_names, ps)
        if len(ps.items) > before:
            break  # the same axis problem would repeat for every variant
        try:
            topo, _ = cluster_from_dict(vd, f"{source}: cluster [{v.label}]", cluster_dir)
        except InputError as e:
            for pr in e.problems:
                ps.add(_where("cluster", cluster_ref, pr.path) + ("" if v.label == "base" else f" [variant {v.label}]"), pr.message)
            continue
        if state_doc is not None:
            try:
                state_from_dict(state_doc, topo, f"{source}: state")
            except InputError as e:
                for pr in e.problems:
                    ps.add(_where("state", state_ref, pr.path) + ("" if v.label == "base" else f" [variant {v.label}]"), pr.message)
                continue
        variants.append(v)
        vdocs.append(vd)
        vinfo.append(_variant_info(topo))
        vtopos.append(topo)
    ps.raise_if_any()

    shapes_per_variant = _shapes(ps, shapes_doc, gpus, job_doc, base_job, variants, vtopos, source, keep_batch)
    ps.raise_if_any()

    # the points, keyed by their effective inputs
    solver_doc = {"workers": s_workers, "seed": s_seed, "relative_gap": s_gap}
    state_hash = _digest(state_doc)
    vhash = [_digest(vd) for vd in vdocs]
    job_hash: dict[Shape | None, str] = {}
    points: list[Point] = []
    total = sum(len(s) for s in shapes_per_variant) * len(occupancy) * len(modes) * len(seeds) * len(failed) * (
        sum(len(time_limits) if s == "cpsat" else 1 for s in strategies))
    if total == 0:
        ps.add("axes", "the grid is empty: every axis needs at least one value")
    elif total > MAX_POINTS:
        ps.add("axes", f"the grid has {total} points; the limit is {MAX_POINTS}: narrow an axis")
    ps.raise_if_any()
    for vi, shapes in enumerate(shapes_per_variant):
        for shape, occ, mode, seed, fail, strat in product(shapes, occupancy, modes, seeds, failed, strategies):
            if shape not in job_hash:
                job_hash[shape] = _digest(shape_job_doc(job_doc, shape, keep_global_batch=keep_batch))
            for tl in (time_limits if strat == "cpsat" else [None]):
                key_doc = {
                    "cluster": vhash[vi], "state": state_hash, "job": job_hash[shape],
                    "occupancy": float(occ), "failed": float(fail),
                    # a mode cannot matter without occupancy, a seed without occupancy or failures
                    "mode": mode if occ > 0 else "", "seed": seed if occ > 0 or fail > 0 else 0,
                    "strategy": strat, "time_limit_s": None if tl is None else float(tl),
                    "solver": solver_doc if strat == "cpsat" else None,
                }
                points.append(Point(_digest(key_doc)[:16], vi, float(occ), str(mode), int(seed), float(fail), shape,
                                    str(strat), None if tl is None else float(tl)))
    labels = tuple(DIMENSIONS) if structured else tuple(sorted({g.label for g in base_job.groups} | {e.label for e in base_job.edges}))
    tiers = tuple(dict.fromkeys(t for topo in vtopos for t in _tier_names(topo)))
    return Sweep(
        name=name, source=source, cluster_doc=cluster_doc, cluster_dir=str(cluster_dir), job_doc=job_doc,
        job_name=base_job.name, state_doc=state_doc, gpus=gpus, variants=tuple(variants), variant_docs=tuple(vdocs),
        variant_info=tuple(vinfo), points=tuple(points), labels=labels, tiers=tiers, level_names=tuple(level_names),
        solver_workers=int(s_workers), solver_seed=int(s_seed), relative_gap=float(s_gap),
        strategies=tuple(str(x) for x in strategies), baselines=tuple(x for x in known if x != "cpsat"),
        keep_global_batch=keep_batch,
    )


# ---- evaluating points --------------------------------------------------------------------------------------


def build_state(topology: Topology, static: ClusterState | None, state_doc: Mapping[str, Any] | None, *,
                occupancy: float, mode: str, seed: int, failed: float, source: str = "<state>") -> ClusterState:
    """The base state (file, plus the cluster's fault domains), other jobs on about `occupancy` of the devices
    (`placement.scenarios.occupy`), and round(`failed` * devices) failed devices drawn with `seed`."""
    from placement.io.native import merge_states, state_from_dict
    from placement.scenarios import occupy

    base = merge_states(static, state_from_dict(state_doc, topology, source) if state_doc is not None else ClusterState())
    occupied = dict(occupy(topology, occupancy, seed=seed, mode=mode).occupied) if occupancy > 0 else {}
    occupied.update(base.occupied)
    dead = set(base.failed)
    if failed > 0:
        rng = random.Random(f"failed:{seed}")
        dead.update(rng.sample(range(topology.num_devices), round(failed * topology.num_devices)))
    return replace(base, occupied=occupied, failed=frozenset(dead))


@dataclass(frozen=True)
class Task:
    """Points that share one cluster state, strategy and time limit: evaluated together by `compare`.

    Plain data, so that it pickles to a spawned worker process.
    """

    cluster_doc: Mapping[str, Any]
    cluster_hash: str
    cluster_dir: str
    state_doc: Mapping[str, Any] | None
    job_doc: Mapping[str, Any]
    source: str
    occupancy: float
    mode: str
    seed: int
    failed: float
    strategy: str
    time_limit_s: float | None
    solver_workers: int
    solver_seed: int
    relative_gap: float
    points: tuple[tuple[str, Shape | None], ...]
    weight: float = 1.0
    keep_global_batch: bool = True


_TOPOLOGIES: dict[str, tuple[Topology, ClusterState | None]] = {}


def _topology(task: Task) -> tuple[Topology, ClusterState | None]:
    """The task's cluster, built once per process."""
    from placement.io.native import cluster_from_dict

    hit = _TOPOLOGIES.get(task.cluster_hash)
    if hit is None:
        hit = cluster_from_dict(task.cluster_doc, f"{task.source}: cluster", Path(task.cluster_dir))
        _TOPOLOGIES[task.cluster_hash] = hit
    return hit


def _fmt(x: float | None) -> str:
    return "" if x is None else format(x, ".9g")


def _outputs(res: Any, reason: str | None, free: int) -> dict[str, str]:
    """A point's output columns from a `PlacementResult` (None: infeasible with `reason`)."""
    out: dict[str, str] = {"free_devices": str(free)}
    if res is None:
        out.update(status="INFEASIBLE", error=reason or "")
        return out
    from placement.cost import CostReport
    from placement.io.export import baseline_costs

    rep = res.report
    out.update(status=res.status.value, lower_bound=_fmt(res.lower_bound), gap=_fmt(res.gap),
               wall_s=_fmt(float(res.stats.get("wall_s", 0.0))), error="")
    if not isinstance(rep, CostReport):
        return out
    step, comm = rep.step_seconds, rep.comm_seconds
    out.update(step_seconds=_fmt(step), comm_seconds=_fmt(comm), comm_seconds_total=_fmt(rep.comm_seconds_total),
               compute_seconds=_fmt(rep.compute_seconds), bubble_seconds=_fmt(rep.bubble_seconds),
               mfu=_fmt(rep.mfu), tokens_per_s=_fmt(rep.tokens_per_s), seconds_per_step=_fmt(comm))
    for b, cost in baseline_costs(rep, res.baselines, res.baseline_reports).items():
        col = b.replace("-", "_")
        b_comm, b_step = cost["comm_seconds"], cost["step_seconds"]
        out[f"baseline_{col}_s"] = _fmt(b_comm)
        out[f"baseline_{col}_step_s"] = _fmt(b_step)
        if b_comm is not None and b_comm > 0:
            out[f"improvement_vs_{col}"] = _fmt((b_comm - comm) / b_comm)
        if b_step is not None and b_step > 0:
            out[f"step_improvement_vs_{col}"] = _fmt((b_step - step) / b_step)
    for lab, s in rep.by_label.items():
        out[f"label_{lab}_s"] = _fmt(s)
    for tier, s in rep.by_tier.items():
        out[f"tier_{tier}_s"] = _fmt(s)
    return out


def evaluate_task(task: Task) -> list[tuple[str, dict[str, str]]]:
    """Build the task's cluster, state and jobs and rank the jobs with `placement.solve.run.compare`.

    Returns (point key, output columns) per point. A job that breaks the solver (not merely infeasible) gets
    status ERROR and the exception in `error`; the other jobs of the task still run.
    """
    from placement.io.native import job_from_dict
    from placement.solve import SolveOptions, Strategy
    from placement.solve.run import compare

    topo, static = _topology(task)
    state = build_state(topo, static, task.state_doc, occupancy=task.occupancy, mode=task.mode, seed=task.seed,
                        failed=task.failed, source=f"{task.source}: state")
    jobs: list[Job] = []
    key_of: dict[str, str] = {}
    for key, shape in task.points:
        job = job_from_dict(shape_job_doc(task.job_doc, shape, keep_global_batch=task.keep_global_batch),
                            f"{task.source}: job")
        jobs.append(job)
        key_of[job.name] = key
    kind = jobs[0].device_kind if jobs else None
    free = sum(1 for d in topo.devices if (kind is None or d.kind == kind) and state.usable(d.index))
    opts = SolveOptions(strategy=Strategy(task.strategy), time_limit_s=task.time_limit_s or _DEFAULT_TIME_LIMIT,
                        relative_gap=task.relative_gap, seed=task.solver_seed, workers=task.solver_workers)
    out: dict[str, dict[str, str]] = {}
    try:
        ranked = compare(topo, state, jobs, opts)
    except Exception:  # one bad job must not take the others down: retry one by one
        ranked = []
        for job in jobs:
            try:
                ranked.extend(compare(topo, state, [job], opts))
            except Exception as e:
                out[key_of[job.name]] = {"status": "ERROR", "error": f"{type(e).__name__}: {e}", "free_devices": str(free)}
    for job, res, reason in ranked:
        out[key_of[job.name]] = _outputs(res, reason, free)
    return [(k, out[k]) for k, _ in task.points if k in out]


def _worker_init() -> None:
    """Ctrl-C is the parent's to handle. Blocked rather than ignored: CP-SAT installs its own SIGINT handler for
    each solve and leaves the default action (end the process) behind; a blocked signal reaches neither."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    else:  # pragma: no cover - not POSIX
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def plan_tasks(sweep: Sweep, todo: set[str], workers: int) -> list[Task]:
    """Group the points to run by (variant, occupancy, mode, seed, failed, strategy, time limit), split big groups
    so that there are at least 4 tasks per worker and no task holds much more than `TASK_SECONDS` of solver time
    (progress, Ctrl-C and --resume work per task), longest first."""
    groups: dict[tuple[Any, ...], list[Point]] = {}
    seen: set[str] = set()
    for p in sweep.points:
        if p.key not in todo or p.key in seen:
            continue
        seen.add(p.key)
        gk = (p.variant, p.occupancy, p.mode, p.seed, p.failed, p.strategy, p.time_limit_s)
        groups.setdefault(gk, []).append(p)

    def weight(p: Point) -> float:
        return (p.time_limit_s or _DEFAULT_TIME_LIMIT) if p.strategy == "cpsat" else 0.05

    total_w = sum(weight(p) for ps in groups.values() for p in ps) or 1.0
    target = max(4 * max(1, workers), math.ceil(total_w / TASK_SECONDS))
    vhash = [_digest(vd) for vd in sweep.variant_docs]
    tasks: list[Task] = []
    for (vi, occ, mode, seed, fail, strat, tl), pts in groups.items():
        gw = sum(weight(p) for p in pts)
        splits = max(1, min(len(pts), math.ceil(target * gw / total_w)))
        size = math.ceil(len(pts) / splits)
        for i in range(0, len(pts), size):
            chunk = pts[i:i + size]
            tasks.append(Task(
                cluster_doc=sweep.variant_docs[vi], cluster_hash=vhash[vi], cluster_dir=sweep.cluster_dir,
                state_doc=sweep.state_doc, job_doc=sweep.job_doc, source=sweep.source, occupancy=occ, mode=mode,
                seed=seed, failed=fail, strategy=strat, time_limit_s=tl, solver_workers=sweep.solver_workers,
                solver_seed=sweep.solver_seed, relative_gap=sweep.relative_gap,
                points=tuple((p.key, p.shape) for p in chunk), weight=sum(weight(p) for p in chunk),
                keep_global_batch=sweep.keep_global_batch,
            ))
    tasks.sort(key=lambda t: -t.weight)
    return tasks


# ---- the CSV ------------------------------------------------------------------------------------------------


OUTPUT_COLUMNS: tuple[str, ...] = (
    "step_seconds", "comm_seconds", "comm_seconds_total", "compute_seconds", "bubble_seconds", "mfu", "tokens_per_s",
    "seconds_per_step",
)
"""The modeled step of a point's answer (`placement.cost.CostReport`); ``seconds_per_step`` is the deprecated v1
name of ``comm_seconds``, kept so that older results files resume."""


def csv_columns(sweep: Sweep) -> list[str]:
    """Every input and output column, in order."""
    cols = ["key", "sweep", "variant", "gpus_per_node", "nodes", "nodes_per_leaf"]
    for lv in sweep.level_names:
        cols += [f"{lv}_bandwidth_gbps", f"{lv}_latency_us"]
    cols += ["occupancy", "mode", "seed", "failed_fraction", "free_devices", "shape", "tp", "cp", "ep", "dp", "pp",
             "ranks", "strategy", "time_limit_s", "status", *OUTPUT_COLUMNS, "lower_bound", "gap"]
    names = [b.replace("-", "_") for b in sweep.baselines]
    cols += [f"baseline_{b}_step_s" for b in names]
    cols += [f"baseline_{b}_s" for b in names]
    cols += [f"step_improvement_vs_{b}" for b in names]
    cols += [f"improvement_vs_{b}" for b in names]
    cols += [f"label_{lab}_s" for lab in sweep.labels]
    cols += [f"tier_{t}_s" for t in sweep.tiers]
    cols += ["tier_other_s", "wall_s", "error"]
    return cols


def _input_row(sweep: Sweep, p: Point) -> dict[str, str]:
    row = {"key": p.key, "sweep": sweep.name, "variant": sweep.variants[p.variant].label}
    row.update(sweep.variant_info[p.variant])
    row.update(occupancy=f"{p.occupancy:g}", mode=p.mode, seed=str(p.seed), failed_fraction=f"{p.failed:g}",
               strategy=p.strategy, time_limit_s="" if p.time_limit_s is None else f"{p.time_limit_s:g}")
    if p.shape is not None:
        row.update(shape=p.shape.key, ranks=str(p.shape.world_size),
                   **{d: str(getattr(p.shape, d)) for d in ("tp", "cp", "ep", "dp", "pp")})
    else:
        row.update(shape=sweep.job_name, ranks=str(sweep.gpus or ""))
    return row


def read_results(path: str | Path) -> list[dict[str, str]]:
    """The rows of a results CSV (empty when the file does not exist)."""
    p = Path(path)
    if not p.is_file():
        return []
    with p.open(newline="") as f:
        return [dict(r) for r in csv.DictReader(f)]


class _Sink:
    """The results CSV, appended and flushed row by row."""

    def __init__(self, path: Path, columns: list[str], resume: bool) -> None:
        self.columns = columns
        old: list[dict[str, Any]] = []
        if resume and path.is_file():
            with path.open(newline="") as f:
                old = [dict(r) for r in csv.DictReader(f)]
        # finished: a known final status and every field present (a row cut short by a killed run is not)
        kept = {r["key"]: r for r in old if r.get("key") and r.get("status") in ("OPTIMAL", "FEASIBLE", "INFEASIBLE")
                and None not in r.values() and None not in r}
        self.done = set(kept)
        # start from a clean file holding the finished rows under today's columns, replaced atomically
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", newline="") as f:
            w = csv.DictWriter(f, columns, extrasaction="ignore")
            w.writeheader()
            w.writerows(kept.values())
        os.replace(tmp, path)
        self.file = path.open("a", newline="")
        self.writer = csv.DictWriter(self.file, columns, extrasaction="ignore")

    def write(self, row: Mapping[str, str]) -> None:
        self.writer.writerow(row)
        self.file.flush()

    def close(self) -> None:
        self.file.close()


@dataclass
class SweepRun:
    """What `run_sweep` did: the CSV, how many distinct points there are, how many ran now and before."""

    csv_path: Path
    total: int
    skipped: int
    executed: int = 0
    interrupted: bool = False
    rows: dict[str, dict[str, str]] = field(default_factory=dict)
    """Finished rows of this sweep's points, by key (those of earlier runs included)."""


def _fold_unknown(out: dict[str, str], columns: set[str]) -> dict[str, str]:
    """Tier or label columns the header does not have go to tier_other_s (the header is fixed up front)."""
    other = 0.0
    for k in [k for k in out if k not in columns]:
        if k.startswith(("tier_", "label_")):
            if k.startswith("tier_"):
                other += float(out[k])
            del out[k]
    if other:
        out["tier_other_s"] = _fmt(other)
    return out


def default_workers() -> int:
    """Usable cores."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def run_sweep(sweep: Sweep, out_dir: str | Path, *, workers: int | None = None, resume: bool = False,
              progress: Callable[[int, int], None] | None = None) -> SweepRun:
    """Run the sweep's points (those not finished already, with `resume`) on `workers` local processes.

    Rows go to ``out_dir/results.csv`` as they finish (one write and flush per row). `progress(done, total)` is
    called once before the first task and after each. Ctrl-C stops the run: pending points are dropped, the
    worker processes are ended, and the result says `interrupted`; the rows written so far stay.

    `workers` defaults to the usable cores. Points always run in spawned worker processes, so that this process
    never runs CP-SAT: CP-SAT takes SIGINT over during a solve and leaves it at the default action (end the
    process at once) afterwards. ``workers=0`` runs them in this process instead (tests, debugging), where a
    Ctrl-C during a solve is CP-SAT's to handle.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.csv"
    columns = csv_columns(sweep)
    colset = set(columns)
    sink = _Sink(path, columns, resume)
    keys = sweep.keys
    first: dict[str, Point] = {}
    for p in sweep.points:
        first.setdefault(p.key, p)
    todo = {k for k in keys if k not in sink.done}
    run = SweepRun(path, len(keys), len(keys) - len(todo))
    if workers is not None and workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    n_workers = max(1, workers if workers is not None else default_workers())
    tasks = plan_tasks(sweep, todo, n_workers)
    n_todo = sum(len(t.points) for t in tasks)
    done = 0

    def finish(results: list[tuple[str, dict[str, str]]]) -> None:
        nonlocal done
        for key, outputs in results:
            row = _input_row(sweep, first[key])
            row.update(_fold_unknown(dict(outputs), colset))
            sink.write(row)
            run.executed += 1
        done += len(results)
        if progress is not None:
            progress(done, n_todo)

    if progress is not None:
        progress(0, n_todo)
    try:
        if workers == 0:
            for t in tasks:
                finish(evaluate_task(t))
        elif tasks:
            _run_pool(tasks, min(n_workers, len(tasks)), finish)
    except KeyboardInterrupt:
        run.interrupted = True
    finally:
        sink.close()
    found = {r["key"]: r for r in read_results(path)}
    run.rows = {k: found[k] for k in keys if k in found}
    return run


def _run_pool(tasks: Sequence[Task], workers: int, finish: Callable[[list[tuple[str, dict[str, str]]]], None]) -> None:
    ctx = multiprocessing.get_context("spawn")
    ex = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init)
    futures: list[Future[list[tuple[str, dict[str, str]]]]] = []
    clean = False
    try:
        futures = [ex.submit(evaluate_task, t) for t in tasks]
        for fut in as_completed(futures):
            finish(fut.result())
        clean = True
    finally:
        if clean:
            ex.shutdown(wait=True)
        else:  # Ctrl-C or a broken worker: drop what is pending and end the workers this pool started
            procs = list(getattr(ex, "_processes", {}).values())
            for f in futures:
                f.cancel()
            ex.shutdown(wait=False, cancel_futures=True)
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            for proc in procs:
                proc.join(timeout=5)


# ---- tables and plots ---------------------------------------------------------------------------------------


def _num(row: Mapping[str, str] | None, col: str) -> float | None:
    if row is None:
        return None
    v = row.get(col) or ""
    try:
        return float(v)
    except ValueError:
        return None


def _mean(vals: Sequence[float | None]) -> float | None:
    xs = [v for v in vals if v is not None]
    return sum(xs) / len(xs) if xs else None


@dataclass
class _Layout:
    """How tables and plots slice the grid: the x axis, the facets (panels) and the series (lines)."""

    x: str
    facets: tuple[str, ...]
    xs: list[str]
    facet_labels: list[str]
    series: list[str]
    series_strategy: dict[str, str]
    cells: dict[tuple[str, str, str], list[dict[str, str]]]
    """(facet, x, series) -> the finished rows there (several when seeds vary: tables and plots take means)."""


def _layout(sweep: Sweep, rows: Mapping[str, Mapping[str, str]]) -> _Layout:
    vals = [(p, p.axis_values(sweep)) for p in sweep.points]
    distinct = {a: list(dict.fromkeys(v[a] for _, v in vals)) for a in ("variant", "occupancy", "mode", "failed", "shape")}
    tls = list(dict.fromkeys(v["time_limit"] for p, v in vals if p.strategy == "cpsat"))
    varying = [a for a in ("shape", "variant", "occupancy", "failed", "mode") if len(distinct[a]) > 1]
    if len(tls) > 1:
        varying.append("time_limit")
    x = varying[0] if varying else "shape"
    facets = tuple(a for a in varying if a not in (x, "time_limit"))
    xs = tls if x == "time_limit" else distinct[x]
    series_of: dict[Point, str] = {}
    for p, v in vals:
        s = p.strategy
        if p.strategy == "cpsat" and len(tls) > 1 and x != "time_limit":
            s = f"cpsat {v['time_limit']}s"
        series_of[p] = s
    series = list(dict.fromkeys(series_of[p] for p, _ in vals))
    cells: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    facet_labels: list[str] = []
    for p, v in vals:
        fl = ", ".join(f"{a}={v[a]}" for a in facets) or "all"
        if fl not in facet_labels:
            facet_labels.append(fl)
        row = rows.get(p.key)
        if row is None:
            continue
        targets = [v["time_limit"]] if x == "time_limit" and p.strategy == "cpsat" else xs if x == "time_limit" else [v[x]]
        for xv in targets:
            cells.setdefault((fl, xv, series_of[p]), []).append(dict(row))
    strat = {s: s.split(" ")[0] for s in series}
    return _Layout(x, facets, list(xs), facet_labels, series, strat, cells)


def _metric(rows: Sequence[Mapping[str, str]] | None, col: str) -> float | None:
    """The mean of a column over the placed rows of a cell (several when seeds vary)."""
    return _mean([_num(r, col) for r in rows or () if r.get("status") in _FEASIBLE])


def _step(rows: Sequence[Mapping[str, str]] | None) -> float | None:
    """Modeled step seconds of a cell; rows of results files older than the step model carry only
    ``seconds_per_step`` (then communication alone)."""
    return _mean([_num(r, "step_seconds") if r.get("step_seconds") else _num(r, "seconds_per_step")
                  for r in rows or () if r.get("status") in _FEASIBLE])


def _comm(rows: Sequence[Mapping[str, str]] | None) -> float | None:
    return _mean([_num(r, "comm_seconds") if r.get("comm_seconds") else _num(r, "seconds_per_step")
                  for r in rows or () if r.get("status") in _FEASIBLE])


def _optimizer(lay: _Layout) -> str | None:
    return next((s for s in lay.series if lay.series_strategy[s] == "cpsat"), None)


def ranked_tables(sweep: Sweep, rows: Mapping[str, Mapping[str, str]], *, top: int = 10) -> list[Any]:
    """One rich table per facet: the x values (job shapes, usually) ranked by their best modeled step seconds
    (ties: less exposed communication), each strategy's step seconds, the best strategy's exposed communication,
    MFU and tokens/s, the optimizer's gap and the step time it saves over each baseline on the same state."""
    from rich.table import Table

    lay = _layout(sweep, rows)
    opt = _optimizer(lay)
    tables: list[Any] = []
    for fl in lay.facet_labels:
        ranked: list[tuple[float, float, str, str | None]] = []
        for xv in lay.xs:
            best: tuple[float, float, str, str | None] = (math.inf, math.inf, xv, None)
            for s in lay.series:
                cell = lay.cells.get((fl, xv, s))
                st = _step(cell)
                if st is not None:
                    best = min(best, (st, _comm(cell) or 0.0, xv, s), key=lambda b: (b[0], b[1]))
            ranked.append(best)
        ranked.sort(key=lambda t_: (t_[0], t_[1]))  # stable: grid order breaks ties
        shown_bases = [b for b in sweep.baselines if opt is not None and any(
            _metric(lay.cells.get((fl, xv, opt)), f"step_improvement_vs_{b.replace('-', '_')}") is not None
            for _, _, xv, _ in ranked[:top])]
        body: list[list[str]] = []
        for i, (step, _, xv, best_s) in enumerate(ranked[:top], start=1):
            cells = [f"{v:.4f}" if (v := _step(lay.cells.get((fl, xv, s)))) is not None else "-" for s in lay.series]
            bc = lay.cells.get((fl, xv, best_s)) if best_s is not None else None
            comm, mfu, tok = _comm(bc), _metric(bc, "mfu"), _metric(bc, "tokens_per_s")
            steps = [v for s in lay.series if (v := _step(lay.cells.get((fl, xv, s)))) is not None]
            if len(steps) > 1 and max(steps) - min(steps) <= 1e-9 * max(1.0, max(steps)):
                best_s = "all tie"
            cells += [best_s or "-", "-" if comm is None else f"{comm:.4f}", "-" if mfu is None else f"{100 * mfu:.1f}%",
                      "-" if tok is None else f"{tok:,.0f}"]
            if opt is not None:
                orows = [r for r in lay.cells.get((fl, xv, opt), []) if r.get("status") in _FEASIBLE]
                gap = _mean([_num(r, "gap") for r in orows])
                cells.append("-" if gap is None else f"{100 * gap:.1f}%")
                for b in shown_bases:
                    imp = _mean([_num(r, f"step_improvement_vs_{b.replace('-', '_')}") for r in orows])
                    cells.append("-" if imp is None else f"{100 * imp:+.1f}%")
            notes = sorted({(r.get("error") or "")[:90] for s in lay.series for r in lay.cells.get((fl, xv, s), [])
                            if r.get("status") not in _FEASIBLE and r.get("error")})
            body.append([str(i) if math.isfinite(step) else "", xv, *cells, notes[0] if notes else ""])
        head = f"{sweep.name}: {fl}" if fl != "all" else sweep.name
        t = Table(title=f"{head}: modeled step seconds, ranked by the best strategy", title_justify="left",
                  caption_justify="left")
        t.add_column("#", justify="right")
        t.add_column(lay.x, no_wrap=True)
        for s in lay.series:
            t.add_column(f"{s} step s", justify="right")
        t.add_column("best")
        t.add_column("comm s", justify="right")
        t.add_column("MFU", justify="right")
        t.add_column("tokens/s", justify="right")
        if opt is not None:
            t.add_column(f"{opt} gap", justify="right")
            for b in shown_bases:
                t.add_column(f"vs {b}", justify="right")
        with_notes = any(r[-1] for r in body)
        if with_notes:
            t.add_column("why not placed")
        for r in body:
            t.add_row(*(r if with_notes else r[:-1]))
        caption = ["step s: compute + bubble + exposed comm; comm s, MFU, tokens/s: of the best strategy's answer"]
        if opt is not None:
            caption.append(f"gap: of the solver's surrogate objective; vs X: step time {opt} saves over X on the same state")
        if len(ranked) > len(body):
            caption.append(f"top {len(body)} of {len(ranked)}; every row is in the CSV")
        n_inf = sum(1 for b in ranked if not math.isfinite(b[0]))
        if n_inf:
            caption.append(f"{n_inf} with no placement")
        t.caption = "; ".join(caption)
        tables.append(t)
    return tables


def _grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = min(max_cols, max(1, n))
    return math.ceil(n / cols), cols


def _save(fig: Any, out: Path, stem: str) -> list[Path]:
    """PNG then SVG; the constrained layout is computed once (by the first save) and then frozen."""
    png, svg = out / f"{stem}.png", out / f"{stem}.svg"
    fig.savefig(png, dpi=100)
    fig.set_layout_engine("none")
    fig.savefig(svg, metadata={"Date": None})
    return [png, svg]


def plot_sweep(sweep: Sweep, rows: Mapping[str, Mapping[str, str]], out_dir: str | Path, *,
               max_panels: int = 12) -> list[Path]:
    """Three figures, each as PNG and SVG: modeled step seconds per strategy across the swept axis
    (``step_seconds``), the exposed communication stacked per bottleneck tier (``tier_breakdown``), and the step
    time the optimizer saves over each baseline (``improvement``). Returns the files written."""
    from matplotlib.figure import Figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lay = _layout(sweep, rows)
    facets = lay.facet_labels[:max_panels]
    more = f" (first {len(facets)} of {len(lay.facet_labels)} panels)" if len(lay.facet_labels) > len(facets) else ""
    xi = list(range(len(lay.xs)))
    width = max(5.0, 0.32 * len(lay.xs) + 1.5)
    max_cols = 1 if len(lay.xs) > 12 else 3
    written: list[Path] = []

    def axes_grid(fig: Any, n: int, cols: int = 3) -> list[Any]:
        r, c = _grid(n, cols)
        axs = fig.subplots(r, c, squeeze=False, sharey=False)
        flat = [a for row in axs for a in row]
        for a in flat[n:]:
            a.set_visible(False)
        return flat[:n]

    def xticks(ax: Any) -> None:
        ax.set_xticks(xi)
        ax.set_xticklabels(lay.xs, rotation=60 if len(lay.xs) > 4 else 0, ha="right" if len(lay.xs) > 4 else "center",
                           fontsize=8)
        ax.set_xlabel(lay.x)
        ax.grid(True, axis="y", alpha=0.3)

    # 1. modeled step seconds per strategy
    r, c = _grid(len(facets), max_cols)
    fig = Figure(figsize=(width * c, 3.6 * r + 0.6), layout="constrained")
    for ax, fl in zip(axes_grid(fig, len(facets), max_cols), facets, strict=True):
        for s in lay.series:
            ys = [_step(lay.cells.get((fl, xv, s))) for xv in lay.xs]
            ax.plot(xi, [math.nan if y is None else y for y in ys], marker="o", ms=4, label=s)
        ax.set_title(fl, fontsize=10)
        ax.set_ylabel("step seconds")
        xticks(ax)
        ax.legend(fontsize=8)
    fig.suptitle(f"{sweep.name}: modeled step seconds (compute + bubble + exposed comm){more}")
    written += _save(fig, out, "step_seconds")

    # 2. stacked breakdown per tier: a row of panels per strategy
    tiers = [t for t in [*sweep.tiers, "other"]
             if any(_num(row, f"tier_{t}_s") for cl in lay.cells.values() for row in cl)]
    fcols = facets[:4]
    fig = Figure(figsize=(width * len(fcols), 3.6 * len(lay.series)), layout="constrained")
    axs = fig.subplots(len(lay.series), len(fcols), squeeze=False)
    colors = {t: f"C{i % 10}" for i, t in enumerate(tiers)}
    for si, s in enumerate(lay.series):
        for fi, fl in enumerate(fcols):
            ax = axs[si][fi]
            bottom = [0.0] * len(lay.xs)
            for t in tiers:
                vals = []
                for xv in lay.xs:
                    feas = [rw for rw in lay.cells.get((fl, xv, s), []) if rw.get("status") in _FEASIBLE]
                    vals.append(_mean([_num(rw, f"tier_{t}_s") or 0.0 for rw in feas]) or 0.0)
                ax.bar(xi, vals, bottom=bottom, color=colors[t], label=t, width=0.75)
                bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
            ax.set_title(f"{s} | {fl}", fontsize=9)
            ax.set_ylabel("exposed comm seconds")
            xticks(ax)
    if tiers:
        handles, labels = axs[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, title="tier", loc="outside right upper")
    fig.suptitle(f"{sweep.name}: exposed communication seconds per step by bottleneck tier"
                 f"{more if len(lay.facet_labels) > 4 else ''}")
    written += _save(fig, out, "tier_breakdown")

    # 3. improvement of the optimizer over the baselines (the baselines on the same state, from its rows)
    opt = _optimizer(lay)
    if opt is not None:
        fig = Figure(figsize=(width * c, 3.6 * r + 0.6), layout="constrained")
        for ax, fl in zip(axes_grid(fig, len(facets), max_cols), facets, strict=True):
            bar = 0.8 / max(1, len(sweep.baselines))
            for bi, b in enumerate(sweep.baselines):
                ys = []
                for xv in lay.xs:
                    imp = _metric(lay.cells.get((fl, xv, opt)), f"step_improvement_vs_{b.replace('-', '_')}")
                    ys.append(math.nan if imp is None else 100 * imp)
                offset = (bi - (len(sweep.baselines) - 1) / 2) * bar
                ax.bar([x + offset for x in xi], ys, width=bar, label=f"vs {b}", color=f"C{(bi + 3) % 10}")
            ax.axhline(0, color="black", lw=0.8)
            ax.set_title(fl, fontsize=10)
            ax.set_ylabel(f"{opt}: step time saved (%)")
            xticks(ax)
            ax.legend(fontsize=8)
        fig.suptitle(f"{sweep.name}: modeled step time {opt} saves over each baseline on the same state{more}")
        written += _save(fig, out, "improvement")
    return written


def iter_missing(sweep: Sweep, rows: Mapping[str, Mapping[str, str]]) -> Iterator[Point]:
    """Points of the sweep that have no finished row."""
    for p in sweep.points:
        if p.key not in rows:
            yield p
