"""The sweep file format (`load_sweep`, `sweep_from_dict`): its documents, solver settings and cluster variants,
and the grid of points with their stable keys; the axes themselves are checked by `placement.sim.whatif.axes`.
A sweep whose job is a serving job is a serving sweep (`is_serving_sweep`, `load_serving_sweep`): decode TP x EP x
replicas x cluster nodes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

from placement.errors import InputError, Problem, Problems
from placement.io.native import cluster_from_dict, job_from_dict, load_document, state_from_dict
from placement.io.native.document import short
from placement.io.native.serving import is_serving_document, serving_job_from_dict
from placement.limits import current_limits
from placement.model.job import DIMENSIONS, Job
from placement.model.topology import Topology
from placement.sim.digest import digest
from placement.sim.whatif.axes import (
    STRATEGIES,
    Axes,
    is_int,
    is_num,
    known_strategies,
    parse_axes,
    parse_serving_axes,
)
from placement.sim.whatif.shapes import ServingShape, Shape, parse_shapes, serving_shape_doc, shape_job_doc
from placement.sim.whatif.variants import Variant, apply_variant, tier_names, variant_info

__all__ = [
    "Point",
    "ServingPoint",
    "ServingSweep",
    "Sweep",
    "is_serving_sweep",
    "load_serving_sweep",
    "load_sweep",
    "serving_sweep_from_dict",
    "sweep_from_dict",
]


MAX_POINTS = 100_000
"""A grid larger than this is refused: it is almost always a typo (an axis listed as a range of thousands)."""

_TOP_KEYS = ("name", "description", "cluster", "job", "state", "gpus", "solver", "keep_global_batch", "axes")


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
    solver_deterministic: bool = False
    strategies: tuple[str, ...] = STRATEGIES
    baselines: tuple[str, ...] = ("first-fit",)
    """The baseline strategies the solver reports on every answer (`PlacementResult.baselines`): CSV columns."""
    keep_global_batch: bool = True
    """Shapes keep the base job's global batch (`shape_job_doc`)."""

    @property
    def keys(self) -> tuple[str, ...]:
        """Distinct point keys, in grid order."""
        return tuple(dict.fromkeys(p.key for p in self.points))


def _sub_document(
    value: Any, what: str, base_dir: Path, ps: Problems
) -> tuple[dict[str, Any] | None, Path, str]:
    """A sub-document given inline (mapping) or as a path relative to the sweep file."""

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


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file; every problem is raised at once as `InputError` with field paths."""

    p = Path(path)
    return sweep_from_dict(load_document(p), str(path), p.parent)


def sweep_from_dict(doc: Any, source: str = "<sweep>", base_dir: Path | None = None) -> Sweep:
    """Check a parsed sweep document and expand its grid (see the module docstring for the format)."""

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

    s_workers, s_seed, s_gap, s_det = _solver(ps, doc.get("solver"))

    keep_batch, gpus = _batch_and_gpus(ps, doc)

    level_names = list(base_topo.level_names) if base_topo is not None else []
    ax = parse_axes(ps, doc.get("axes"), level_names if base_topo is not None else None)
    shapes_doc = ax.shapes
    structured = base_job is not None and base_job.parallel is not None and base_job.model is not None
    if shapes_doc is not None and base_job is not None and not structured:
        ps.add("axes.shapes", "needs a structured base job (parallel + model); the job lists explicit groups")
    ps.raise_if_any()
    if base_topo is None or base_job is None or cluster_doc is None or job_doc is None:
        raise InputError(source, [Problem("cluster", "a sweep needs a cluster and a job")])
    if gpus is None:
        gpus = base_job.ranks

    variants, vdocs, vinfo, vtopos = _variants(
        ps, source, cluster_doc, cluster_dir, cluster_ref, state_doc, state_ref, level_names, ax
    )
    ps.raise_if_any()

    shapes_per_variant = parse_shapes(
        ps, shapes_doc, gpus, job_doc, base_job, variants, vtopos, source, keep_batch
    )
    ps.raise_if_any()

    points = _points(
        ps, shapes_per_variant, ax, vdocs, state_doc, job_doc, keep_batch, (s_workers, s_seed, s_gap, s_det)
    )
    labels = (
        tuple(DIMENSIONS)
        if structured
        else tuple(sorted({g.label for g in base_job.groups} | {e.label for e in base_job.edges}))
    )
    tiers = tuple(dict.fromkeys(t for topo in vtopos for t in tier_names(topo)))
    return Sweep(
        name=name,
        source=source,
        cluster_doc=cluster_doc,
        cluster_dir=str(cluster_dir),
        job_doc=job_doc,
        job_name=base_job.name,
        state_doc=state_doc,
        gpus=gpus,
        variants=tuple(variants),
        variant_docs=tuple(vdocs),
        variant_info=tuple(vinfo),
        points=tuple(points),
        labels=labels,
        tiers=tiers,
        level_names=tuple(level_names),
        solver_workers=int(s_workers),
        solver_seed=int(s_seed),
        relative_gap=float(s_gap),
        solver_deterministic=s_det,
        strategies=tuple(str(x) for x in ax.strategies),
        baselines=tuple(x for x in known_strategies() if x != "cpsat"),
        keep_global_batch=keep_batch,
    )


def _solver(ps: Problems, value: Any) -> tuple[int, int, float, bool]:
    """The sweep's solver settings: workers, seed, relative gap, deterministic."""
    solver = value or {}
    if not isinstance(solver, dict):
        ps.add("solver", f"must be a mapping {{workers, seed, relative_gap}}, got {solver!r}")
        solver = {}
    for k in solver:
        if k not in ("workers", "seed", "relative_gap", "deterministic"):
            ps.add(
                f"solver.{k}",
                "unknown field; expected one of ['deterministic', 'relative_gap', 'seed', 'workers']",
            )
    s_workers = solver.get("workers", 1)
    if not (is_int(s_workers) and s_workers >= 1):
        ps.add("solver.workers", f"must be an integer >= 1, got {s_workers!r}")
        s_workers = 1
    s_seed = solver.get("seed", 0)
    if not is_int(s_seed):
        ps.add("solver.seed", f"must be an integer, got {s_seed!r}")
        s_seed = 0
    s_gap = solver.get("relative_gap", 0.0)
    if not (is_num(s_gap) and 0 <= s_gap < 1):
        ps.add("solver.relative_gap", f"must be a number in [0, 1), got {short(s_gap)}")
        s_gap = 0.0
    s_det = solver.get("deterministic", False)
    if not isinstance(s_det, bool):
        ps.add("solver.deterministic", f"must be true or false, got {s_det!r}")
        s_det = False
    return s_workers, s_seed, s_gap, s_det


def _variants(
    ps: Problems,
    source: str,
    cluster_doc: Mapping[str, Any],
    cluster_dir: Path,
    cluster_ref: str,
    state_doc: Mapping[str, Any] | None,
    state_ref: str,
    level_names: list[str],
    ax: Axes,
) -> tuple[list[Variant], list[dict[str, Any]], list[dict[str, str]], list[Topology]]:
    """The cluster variants of the grid, each built (to check it and to know its effective values), with its
    document, its CSV values and its topology; the state checked on each."""
    gpn, nodes, npl, tier_axes = ax.gpus_per_node, ax.nodes, ax.nodes_per_leaf, ax.tiers
    variants: list[Variant] = []
    vdocs: list[dict[str, Any]] = []
    vinfo: list[dict[str, str]] = []
    vtopos: list[Topology] = []
    for combo in product(gpn, nodes, npl, *tier_axes):
        v = Variant(combo[0], combo[1], combo[2], tuple(combo[3:]))
        before = len(ps.items)
        vd = apply_variant(cluster_doc, v, level_names, ps)
        if len(ps.items) > before:
            break  # the same axis problem would repeat for every variant
        try:
            topo, _ = cluster_from_dict(vd, f"{source}: cluster [{v.label}]", cluster_dir)
        except InputError as e:
            for pr in e.problems:
                ps.add(
                    _where("cluster", cluster_ref, pr.path)
                    + ("" if v.label == "base" else f" [variant {v.label}]"),
                    pr.message,
                )
            continue
        if state_doc is not None:
            try:
                state_from_dict(state_doc, topo, f"{source}: state")
            except InputError as e:
                for pr in e.problems:
                    ps.add(
                        _where("state", state_ref, pr.path)
                        + ("" if v.label == "base" else f" [variant {v.label}]"),
                        pr.message,
                    )
                continue
        variants.append(v)
        vdocs.append(vd)
        vinfo.append(variant_info(topo))
        vtopos.append(topo)

    return variants, vdocs, vinfo, vtopos


def _points(
    ps: Problems,
    shapes_per_variant: list[list[Shape | None]],
    ax: Axes,
    vdocs: list[dict[str, Any]],
    state_doc: Mapping[str, Any] | None,
    job_doc: Mapping[str, Any],
    keep_batch: bool,
    solver: tuple[int, int, float, bool],
) -> list[Point]:
    """Every point of the grid, in grid order, keyed by its effective inputs; a grid that is empty or too large
    is refused."""
    occupancy, failed, modes, seeds = ax.occupancy, ax.failed, ax.modes, ax.seeds
    strategies, time_limits = ax.strategies, ax.time_limits
    s_workers, s_seed, s_gap, s_det = solver
    solver_doc = {"workers": s_workers, "seed": s_seed, "relative_gap": s_gap}
    if s_det:  # only then: the keys of earlier results stay valid
        solver_doc["deterministic"] = True
    state_hash = digest(state_doc)
    vhash = [digest(vd) for vd in vdocs]
    job_hash: dict[Shape | None, str] = {}
    points: list[Point] = []
    total = (
        sum(len(s) for s in shapes_per_variant)
        * len(occupancy)
        * len(modes)
        * len(seeds)
        * len(failed)
        * (sum(len(time_limits) if s == "cpsat" else 1 for s in strategies))
    )
    if total == 0:
        ps.add("axes", "the grid is empty: every axis needs at least one value")
    elif total > min(MAX_POINTS, current_limits().max_sweep_points):
        ps.add(
            "axes",
            f"the grid has {total} points; the limit is max_sweep_points="
            f"{min(MAX_POINTS, current_limits().max_sweep_points)}: narrow an axis",
        )
    ps.raise_if_any()
    for vi, shapes in enumerate(shapes_per_variant):
        for shape, occ, mode, seed, fail, strat in product(
            shapes, occupancy, modes, seeds, failed, strategies
        ):
            if shape not in job_hash:
                job_hash[shape] = digest(shape_job_doc(job_doc, shape, keep_global_batch=keep_batch))
            for tl in time_limits if strat == "cpsat" else [None]:
                key_doc = {
                    "cluster": vhash[vi],
                    "state": state_hash,
                    "job": job_hash[shape],
                    "occupancy": float(occ),
                    "failed": float(fail),
                    # a mode cannot matter without occupancy, a seed without occupancy or failures
                    "mode": mode if occ > 0 else "",
                    "seed": seed if occ > 0 or fail > 0 else 0,
                    "strategy": strat,
                    "time_limit_s": None if tl is None else float(tl),
                    "solver": solver_doc if strat == "cpsat" else None,
                }
                points.append(
                    Point(
                        digest(key_doc)[:16],
                        vi,
                        float(occ),
                        str(mode),
                        int(seed),
                        float(fail),
                        shape,
                        str(strat),
                        None if tl is None else float(tl),
                    )
                )
    return points


def _batch_and_gpus(ps: Problems, doc: Mapping[str, Any]) -> tuple[bool, int | None]:
    """`keep_global_batch` (default true) and `gpus` (None: the job's ranks)."""
    keep_batch = doc.get("keep_global_batch", True)
    if not isinstance(keep_batch, bool):
        ps.add("keep_global_batch", f"must be true or false, got {keep_batch!r}")
        keep_batch = True
    gpus = doc.get("gpus")
    if gpus is not None and not (is_int(gpus) and gpus >= 1):
        ps.add("gpus", f"must be an integer >= 1, got {short(gpus)}")
        gpus = None
    elif gpus is not None and gpus > current_limits().max_ranks:
        ps.add("gpus", f"{gpus} is above the limit max_ranks={current_limits().max_ranks}")
        gpus = None
    return keep_batch, gpus


# ---- serving sweeps ---------------------------------------------------------------------------------------------

_SERVING_TOP_KEYS = (
    "name",
    "description",
    "cluster",
    "job",
    "state",
    "solver",
    "batch_per_decode_gpu",
    "axes",
)


@dataclass(frozen=True)
class ServingPoint:
    """One point of a serving sweep: a cluster variant and a decode shape, its serving job document, and why it
    cannot run (`problem`; None: it runs). `key` hashes its effective inputs."""

    key: str
    variant: int
    shape: ServingShape
    job_doc: Mapping[str, Any]
    ranks: int = 0
    problem: str | None = None


@dataclass(frozen=True, eq=False)
class ServingSweep:
    """A parsed serving sweep: the cluster variants and the points (decode tp x ep x replicas per variant)."""

    name: str
    source: str
    cluster_dir: str
    state_doc: Mapping[str, Any] | None
    job_name: str
    variants: tuple[Variant, ...]
    variant_docs: tuple[Mapping[str, Any], ...]
    variant_info: tuple[Mapping[str, str], ...]
    points: tuple[ServingPoint, ...]
    time_limit_s: float = 10.0
    solver_workers: int = 1
    solver_seed: int = 0
    solver_deterministic: bool = False
    tpot_bound_ms: float | None = None


def _job_value(value: Any, base_dir: Path) -> Any:
    """The job of a sweep document as written or loaded from its path (None when it cannot be read)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        p = Path(value) if Path(value).is_absolute() else base_dir / value
        try:
            return load_document(p)
        except (InputError, OSError):
            return None
    return None


def is_serving_sweep(doc: Any, base_dir: Path | None = None) -> bool:
    """True when a sweep document's job is a serving job (inline or by path)."""
    if not isinstance(doc, dict):
        return False
    return is_serving_document(_job_value(doc.get("job"), base_dir if base_dir is not None else Path.cwd()))


def load_serving_sweep(path: str | Path) -> ServingSweep:
    """Read and check a serving sweep file; every problem is raised at once as `InputError` with field paths."""
    p = Path(path)
    return serving_sweep_from_dict(load_document(p), str(path), p.parent)


def serving_sweep_from_dict(doc: Any, source: str = "<sweep>", base_dir: Path | None = None) -> ServingSweep:
    """Check a serving sweep document and expand its grid: cluster variants (nodes x gpus_per_node) x decode TP x
    EP x replicas. A shape the serving job's rules refuse (EP not dividing the experts...) is kept as a point with
    its problem, not run."""
    base = base_dir if base_dir is not None else Path.cwd()
    ps = Problems(source)
    if not isinstance(doc, dict):
        ps.add("", f"a sweep file is a mapping with cluster, job and axes, got {type(doc).__name__}")
        ps.raise_if_any()
    for k in doc:
        if k not in _SERVING_TOP_KEYS:
            ps.add(str(k), f"unknown field of a serving sweep; expected one of {sorted(_SERVING_TOP_KEYS)}")
    name = str(doc.get("name") or Path(source).stem or "sweep")
    for req in ("cluster", "job"):
        if doc.get(req) is None:
            ps.add(req, f"is required: a path to a native {req} file or the {req} inline")
    ps.raise_if_any()
    cluster_doc, cluster_dir, cluster_ref = _sub_document(doc["cluster"], "cluster", base, ps)
    job_doc, _, job_ref = _sub_document(doc["job"], "job", base, ps)
    state_doc: dict[str, Any] | None = None
    if doc.get("state") is not None:
        state_doc, _, _ = _sub_document(doc["state"], "state", base, ps)
    base_topo: Topology | None = None
    if cluster_doc is not None:
        try:
            base_topo, _ = cluster_from_dict(cluster_doc, cluster_ref or f"{source}: cluster", cluster_dir)
        except InputError as e:
            for pr in e.problems:
                ps.add(_where("cluster", cluster_ref, pr.path), pr.message)
    job = None
    if job_doc is not None:
        try:
            job = serving_job_from_dict(job_doc, job_ref or f"{source}: job")
        except InputError as e:
            for pr in e.problems:
                ps.add(_where("job", job_ref, pr.path), pr.message)
    solver = doc.get("solver") or {}
    if not isinstance(solver, dict):
        ps.add("solver", f"must be a mapping {{workers, seed, deterministic, time_limit_s}}, got {solver!r}")
        solver = {}
    for k in solver:
        if k not in ("workers", "seed", "deterministic", "time_limit_s"):
            ps.add(
                f"solver.{k}",
                "unknown field; expected one of ['deterministic', 'seed', 'time_limit_s', 'workers']",
            )
    s_workers, s_seed = solver.get("workers", 1), solver.get("seed", 0)
    s_det, s_limit = solver.get("deterministic", False), solver.get("time_limit_s", 10.0)
    if not (is_int(s_workers) and s_workers >= 1):
        ps.add("solver.workers", f"must be an integer >= 1, got {s_workers!r}")
    if not is_int(s_seed):
        ps.add("solver.seed", f"must be an integer, got {s_seed!r}")
    if not isinstance(s_det, bool):
        ps.add("solver.deterministic", f"must be true or false, got {s_det!r}")
    if not (is_num(s_limit) and s_limit > 0):
        ps.add("solver.time_limit_s", f"must be a number of seconds > 0, got {short(s_limit)}")
    per_gpu = doc.get("batch_per_decode_gpu")
    if per_gpu is not None and not (is_int(per_gpu) and per_gpu >= 1):
        ps.add("batch_per_decode_gpu", f"must be an integer >= 1, got {short(per_gpu)}")
    ps.raise_if_any()
    if base_topo is None or job is None or cluster_doc is None or job_doc is None:
        raise InputError(source, [Problem("cluster", "a serving sweep needs a cluster and a serving job")])
    dec = job.decode_pool
    ax = parse_serving_axes(ps, doc.get("axes"), (dec.tp, dec.ep, dec.replicas))
    ps.raise_if_any()
    level_names = list(base_topo.level_names)
    variants: list[Variant] = []
    vdocs: list[dict[str, Any]] = []
    vinfo: list[dict[str, str]] = []
    for gpn, nodes in product(ax.gpus_per_node, ax.nodes):
        v = Variant(gpus_per_node=gpn, nodes=nodes)
        vd = apply_variant(cluster_doc, v, level_names, ps)
        try:
            topo, _ = cluster_from_dict(vd, f"{source}: cluster [{v.label}]", cluster_dir)
        except InputError as e:
            for pr in e.problems:
                ps.add(_where("cluster", cluster_ref, pr.path) + f" [variant {v.label}]", pr.message)
            continue
        variants.append(v)
        vdocs.append(vd)
        vinfo.append(variant_info(topo))
    ps.raise_if_any()
    solver_doc = {
        "workers": s_workers,
        "seed": s_seed,
        "deterministic": s_det,
        "time_limit_s": float(s_limit),
    }
    state_hash = digest(state_doc)
    points: list[ServingPoint] = []
    for vi, vd in enumerate(vdocs):
        vhash = digest(vd)
        for tp, ep, reps in product(ax.decode_tp, ax.decode_ep, ax.decode_replicas):
            shape = ServingShape(int(tp), int(ep), int(reps))
            sdoc = serving_shape_doc(job_doc, shape, per_gpu)
            problem = shape.problem()
            ranks = 0
            if problem is None:
                try:
                    ranks = serving_job_from_dict(sdoc, f"{source}: job [{shape.label}]").ranks
                except InputError as e:
                    problem = "; ".join(f"{pr.path}: {pr.message}" for pr in e.problems)
            key = digest({"cluster": vhash, "state": state_hash, "job": digest(sdoc), "solver": solver_doc})
            points.append(ServingPoint(key[:16], vi, shape, sdoc, ranks, problem))
    if len(points) > min(MAX_POINTS, current_limits().max_sweep_points):
        ps.add("axes", f"the grid has {len(points)} points; narrow an axis")
    ps.raise_if_any()
    return ServingSweep(
        name=name,
        source=source,
        cluster_dir=str(cluster_dir),
        state_doc=state_doc,
        job_name=job.name,
        variants=tuple(variants),
        variant_docs=tuple(vdocs),
        variant_info=tuple(vinfo),
        points=tuple(points),
        time_limit_s=float(s_limit),
        solver_workers=int(s_workers),
        solver_seed=int(s_seed),
        solver_deterministic=bool(s_det),
        tpot_bound_ms=job.load.tpot_bound_ms,
    )
