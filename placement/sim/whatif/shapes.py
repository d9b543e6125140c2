"""Job shapes of a what-if sweep: the TP x CP x EP x DP x PP factorizations, the memory check (model states,
activations, device memory) and the global batch every shape keeps. Owns `Shape`, `factorizations`,
`shape_job_doc` and the shapes axis of a sweep file (`parse_shapes`); `placement.sim.whatif` re-exports them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import TYPE_CHECKING, Any

from placement.cost.compute import activation_bytes, device_kind
from placement.errors import InputError, Problems
from placement.io.native import job_from_dict
from placement.model.job import DIMENSIONS, Job, ModelShape, ParallelSpec
from placement.model.topology import Topology

if TYPE_CHECKING:
    from placement.sim.whatif.variants import Variant

__all__ = [
    "SHAPE_FILTERS",
    "ServingShape",
    "Shape",
    "activation_gb",
    "batch_problem",
    "device_memory_gb",
    "factorizations",
    "global_micro_batches",
    "model_state_gb",
    "parse_shapes",
    "serving_shape_doc",
    "shape_job_doc",
]


SHAPE_FILTERS = (
    *DIMENSIONS,
    *(f"max_{d}" for d in DIMENSIONS),
    "heads",
    "tp_within_node",
    "memory_gb",
    "distributed_optimizer",
    "activations",
)
"""The filters of a generated shapes axis (``shapes: {tp: [1, 2, 4, 8], memory_gb: 80}``)."""


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
    """Memory per device (GB) of a device kind: the cluster's own kinds, then `placement.model.devices.DEVICE_KINDS`
    (V100 ... MI300X); None when the kind is unknown.

    >>> device_memory_gb("H100"), device_memory_gb("gpu")
    (80.0, None)
    """

    dk = device_kind(kind, topology)
    return None if dk is None else dk.memory_gb


def activation_gb(
    s: Shape,
    *,
    hidden: int,
    layers: int,
    seq_len: int,
    micro_batch: int = 1,
    micro_batches: int = 1,
    heads: int = 0,
    recompute: bool = False,
) -> float:
    """GB of activations per device on the first pipeline stage at its peak: `placement.cost.compute.activation_bytes`
    (Korthikanti et al. 2022, eq. 2, under tensor and sequence parallelism: ``s*b*h*(34 + 5*a*s/h) / tp`` bytes
    per layer, s split by cp; full recomputation keeps ``2*s*b*h / tp``; 1F1B holds ``min(pp, micro_batches)``
    micro-batches of ``layers / pp`` layers). Heads default to hidden / 128.

    A 70B-class model (h 8192, 64 heads, 80 layers, s 4096, b 1) on tp8 pp4 with 16 micro-batches: 33.5e6 * (34 +
    160) / 8 bytes per layer, 20 layers x 4 micro-batches in flight:

    >>> round(activation_gb(Shape(8, 1, 1, 8, 4), hidden=8192, layers=80, seq_len=4096, micro_batches=16, heads=64), 1)
    65.1
    """

    model = ModelShape(
        parameters=1.0,
        hidden=hidden,
        layers=layers,
        seq_len=seq_len,
        micro_batch=micro_batch,
        micro_batches=micro_batches,
        recompute=recompute,
        heads=heads,
    )
    return activation_bytes(model, ParallelSpec(s.tp, s.cp, s.ep, s.dp, s.pp)) / 1e9


def factorizations(
    gpus: int,
    filters: Mapping[str, Any] | None = None,
    *,
    gpus_per_node: int | None = None,
    hidden: int | None = None,
    layers: int | None = None,
    seq_len: int | None = None,
    experts: int = 0,
    parameters: float | None = None,
    micro_batch: int = 1,
    micro_batches: int = 1,
    recompute: bool = False,
    heads: int = 0,
    device_memory_gb: float | None = None,
    global_micro_batches: int | None = None,
) -> list[Shape]:
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
        if (
            (n_heads and n_heads % tp)
            or (hidden and hidden % tp)
            or (layers and layers % pp)
            or (seq_len and seq_len % cp)
        ):
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
                need += activation_gb(
                    s,
                    hidden=hidden,
                    layers=layers,
                    seq_len=seq_len,
                    micro_batch=micro_batch,
                    micro_batches=m,
                    heads=n_heads,
                    recompute=recompute,
                )
            if need > mem:
                continue
        out.append(s)
    out.sort(key=lambda s: (s.tp, s.cp, s.ep, s.pp, s.dp))
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


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
    return (
        f"dp={shape.dp} does not divide the global batch of {g} micro-batches (the base job's dp x "
        f"micro_batches); pick another dp or set keep_global_batch: false"
    )


def shape_job_doc(
    job_doc: Mapping[str, Any], shape: Shape | None, *, keep_global_batch: bool = True
) -> dict[str, Any]:
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


def parse_shapes(
    ps: Problems,
    shapes_doc: Any,
    gpus: int,
    job_doc: Mapping[str, Any],
    base_job: Job,
    variants: Sequence[Variant],
    vtopos: Sequence[Topology],
    source: str,
    keep_global_batch: bool = True,
) -> list[list[Shape | None]]:
    """The job shapes of each variant (tp <= GPUs per node depends on the variant); problems go to `ps`."""
    if shapes_doc is None:
        par = base_job.parallel
        one: Shape | None = None if par is None else Shape(par.tp, par.cp, par.ep, par.dp, par.pp)
        return [[one] for _ in variants]
    if isinstance(shapes_doc, list):
        explicit = _listed_shapes(ps, shapes_doc, gpus, job_doc, source, keep_global_batch)
        return [list(explicit) for _ in variants]
    if shapes_doc == "all" or isinstance(shapes_doc, dict):
        filters: dict[str, Any] = {} if shapes_doc == "all" else dict(shapes_doc)
        if not _check_filters(ps, filters):
            return []
        if base_job.model is None:
            ps.add(
                "axes.shapes",
                "enumerating shapes needs the job's model (model: parameters, hidden, layers, ...)",
            )
            return []
        return [
            _enumerated_shapes(ps, filters, gpus, job_doc, base_job, v, topo, keep_global_batch)
            for v, topo in zip(variants, vtopos, strict=True)
        ]
    ps.add("axes.shapes", f"must be `all`, a mapping of filters, or a list of shapes, got {shapes_doc!r}")
    return []


def _listed_shapes(
    ps: Problems,
    shapes_doc: list[Any],
    gpus: int,
    job_doc: Mapping[str, Any],
    source: str,
    keep_global_batch: bool,
) -> list[Shape | None]:
    """`axes.shapes` given as a list of sizes: each checked (dimensions, product, batch, the job it makes)."""
    if not shapes_doc:
        ps.add(
            "axes.shapes",
            "is empty: the grid would have no points; give at least one shape or drop the axis",
        )
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
    return explicit


def _check_filters(ps: Problems, filters: dict[str, Any]) -> bool:
    """`axes.shapes` as filters (`all` or a mapping): each known and of its type; lists normalized in place."""
    ok = True
    for k, val in filters.items():
        fp = f"axes.shapes.{k}"
        if k not in SHAPE_FILTERS:
            ps.add(fp, f"unknown filter; known: {', '.join(SHAPE_FILTERS)}")
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
    return ok


def _enumerated_shapes(
    ps: Problems,
    filters: Mapping[str, Any],
    gpus: int,
    job_doc: Mapping[str, Any],
    base_job: Job,
    v: Variant,
    topo: Topology,
    keep_global_batch: bool,
) -> list[Shape | None]:
    """Every factorization of `gpus` that passes `filters` on variant `v`'s cluster; none: a problem naming the
    rules that left nothing."""
    model = base_job.model
    assert model is not None
    types = [nt for nt in topo.host_types if base_job.device_kind in (None, nt.kind)]
    kinds = [nt.devices for nt in types]
    mems = [device_memory_gb(nt.kind, topo) for nt in types]
    found = factorizations(
        gpus,
        dict(filters),
        gpus_per_node=max(kinds, default=None),
        hidden=model.hidden,
        layers=model.layers,
        seq_len=model.seq_len,
        experts=model.experts,
        parameters=model.parameters,
        micro_batch=model.micro_batch,
        micro_batches=model.micro_batches,
        recompute=model.recompute,
        heads=model.heads,
        device_memory_gb=min((m for m in mems if m is not None), default=None),
        global_micro_batches=global_micro_batches(job_doc) if keep_global_batch else None,
    )
    shapes: list[Shape | None] = [*found]
    if shapes:
        return shapes
    rules = [
        f"tp <= {max(kinds, default=0)} GPUs per node" if filters.get("tp_within_node", True) else "",
        f"tp divides hidden {model.hidden}",
        f"pp divides layers {model.layers}",
    ]
    g = global_micro_batches(job_doc) if keep_global_batch else None
    if g is not None:
        rules.append(f"dp divides the global batch of {g} micro-batches")
    mem = filters.get("memory_gb", min((m for m in mems if m is not None), default=None))
    if mem is not None:
        what = "model states + activations" if filters.get("activations", True) else "model states"
        rules.append(f"{what} <= {mem:g} GB per device")
    rules += [
        f"{k} {filters[k]}"
        for k in filters
        if k not in ("tp_within_node", "distributed_optimizer", "activations", "memory_gb")
    ]
    where = "" if v.label == "base" else f" (variant {v.label})"
    ps.add(
        "axes.shapes",
        f"no factorization of {gpus} GPUs passes the filters{where}: {'; '.join(r for r in rules if r)}",
    )
    return shapes


# ---- serving sweeps: the decode pool's shape ----------------------------------------------------------------------


@dataclass(frozen=True)
class ServingShape:
    """One decode pool shape of a serving sweep: TP, EP and replicas; attention-DP follows (`serving_shape_doc`)."""

    tp: int
    ep: int
    replicas: int

    @property
    def attention_dp(self) -> int:
        """EP spans a stage's ``tp x attention_dp`` ranks: ``ep / tp`` attention replicas when EP >= TP (each
        stage is one EP group), else 1 (a stage of ``tp`` ranks holds ``tp / ep`` EP groups)."""
        return self.ep // self.tp if self.ep >= self.tp else 1

    @property
    def label(self) -> str:
        return f"tp{self.tp}-ep{self.ep}-x{self.replicas}"

    def problem(self) -> str | None:
        """Why the shape cannot be a pool (None: it can)."""
        if self.ep % self.tp and self.tp % self.ep:
            return (
                f"decode_tp {self.tp} and decode_ep {self.ep}: one must divide the other (a stage has tp x "
                f"attention_dp ranks and EP divides them)"
            )
        return None


def _decode_pool_index(pools: Sequence[Any]) -> int | None:
    """The decode pool of a serving job's ``pools`` (role decode, or its one aggregated pool)."""
    for i, pool in enumerate(pools):
        if isinstance(pool, dict) and pool.get("role") == "decode":
            return i
    if len(pools) == 1:
        return 0
    if len(pools) == 2:
        return 1  # the reader's default roles: prefill, then decode
    return None


def serving_shape_doc(
    job_doc: Mapping[str, Any], shape: ServingShape, batch_per_gpu: int | None = None
) -> dict[str, Any]:
    """The serving job document with its decode pool (role decode, or the aggregated pool) of `shape`: tp, ep,
    attention_dp and replicas; with `batch_per_gpu` the decode batch per replica is that times the replica's
    ranks (``load.concurrency`` is then dropped). The name gets the shape's label. The reader checks the rest."""
    doc: dict[str, Any] = copy.deepcopy(dict(job_doc))
    body = doc["serving"] if isinstance(doc.get("serving"), dict) else doc
    pools = body.get("pools")
    if not isinstance(pools, list):
        return doc
    k = _decode_pool_index(pools)
    if k is None or not isinstance(pools[k], dict):
        return doc
    pool = pools[k]
    pool.update(tp=shape.tp, ep=shape.ep, attention_dp=shape.attention_dp, replicas=shape.replicas)
    if batch_per_gpu is not None:
        load = body.setdefault("load", {})
        if isinstance(load, dict):
            load.pop("concurrency", None)
            pp = pool.get("pp", 1) if isinstance(pool.get("pp", 1), int) else 1
            load["batch"] = batch_per_gpu * shape.tp * shape.attention_dp * pp
    name = str(doc.get("name") or body.get("name") or "serving")
    if "name" in body:
        body["name"] = f"{name}-{shape.label}"
    else:
        doc["name"] = f"{name}-{shape.label}"
    return doc
