"""The native job file: structured (parallel sizes, order, model shape) or explicit (groups and edges), with the
exposure and constraints of the request, read into a `placement.model.job.Job` with every problem reported at once.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from placement.cost.compute import DEFAULT_MFU
from placement.errors import Problems
from placement.io.native.document import MAX_BYTES, MAX_COUNT, MAX_PARAMETERS, _Reader, load_document, short
from placement.limits import LimitError, current_limits, tick
from placement.model.job import (
    DIMENSIONS,
    LAUNCHERS,
    BalanceRule,
    CollectiveKind,
    Constraints,
    Edge,
    Group,
    Job,
    ModelShape,
    ParallelSpec,
    SegmentRule,
    SpreadRule,
)

__all__ = ["job_from_dict", "load_job"]


def _members(r: _Reader, v: Any, path: str, budget: list[int]) -> tuple[int, ...]:
    """Members as a list of ints or a range string ``"0-7"`` / ``"0-7,16-23"``. `budget` holds the members
    still allowed (limit max_group_members over the job): a range is sized before it is expanded."""
    lim = current_limits()
    if isinstance(v, str):
        out: list[int] = []
        for part in v.split(","):
            m = re.fullmatch(r"\s*(\d{1,18})\s*(?:-\s*(\d{1,18})\s*)?", part)
            if not m:
                r.ps.add(path, f'bad rank range {short(part)}; write e.g. "0-7,16-23"')
                return ()
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if hi < lo:
                r.ps.add(path, f"bad rank range {short(part)}: {hi} < {lo}")
                return ()
            if hi > lim.max_index:
                r.ps.add(path, f"rank {hi} in {short(part)} is above the limit max_index={lim.max_index}")
                return ()
            budget[0] -= hi - lo + 1
            if budget[0] < 0:
                raise LimitError(
                    f"{path} (group members over the job)",
                    lim.max_group_members - budget[0],
                    "max_group_members",
                    lim.max_group_members,
                )
            out.extend(range(lo, hi + 1))
        return tuple(out)
    items = r.lst(v, path)
    budget[0] -= len(items)
    if budget[0] < 0:
        raise LimitError(
            f"{path} (group members over the job)",
            lim.max_group_members - budget[0],
            "max_group_members",
            lim.max_group_members,
        )
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in items):
        r.ps.add(path, "members must be rank numbers")
        return ()
    return tuple(items)


_JOB_KEYS = (
    "name",
    "ranks",
    "device_kind",
    "parallel",
    "model",
    "exposure",
    "groups",
    "edges",
    "constraints",
    "description",
    "launcher",
)
_MODEL_KEYS = (
    "parameters",
    "hidden",
    "layers",
    "seq_len",
    "micro_batch",
    "micro_batches",
    "bytes_per_element",
    "grad_bytes_per_element",
    "experts",
    "top_k",
    "expert_parameters",
    "kv_fraction",
    "recompute",
    "mfu",
    "heads",
    "distributed_optimizer",
)


def job_from_dict(doc: Any, source: str = "<job>") -> Job:
    """A structured or explicit job with its constraints."""
    ps = Problems(source)
    r = _Reader(ps)
    if not r.kind(doc, "job"):
        ps.raise_if_any()
    d = r.obj(doc, "")
    r.keys(d, _JOB_KEYS, "")
    if r.typos_at(""):
        # a mistyped top-level key changes what the rest means (`paralel:` makes the job explicit, and then
        # `ranks` "is required"): report the typos alone
        ps.raise_if_any()
    name = r.str_(d, "name", "", default=Path(source).stem) or "job"
    lim = current_limits()
    if (
        isinstance(d.get("ranks"), int | float)
        and not isinstance(d.get("ranks"), bool)
        and math.isfinite(d["ranks"])
    ):
        lim.check("max_ranks", int(d["ranks"]), "ranks")
    for key in ("groups", "edges"):
        lim.check("max_groups", len(d[key]) if isinstance(d.get(key), list) else 0, key)
    kind = r.str_(d, "device_kind", "")
    par: ParallelSpec | None = None
    model: ModelShape | None = None
    if d.get("parallel") is not None:
        par, sized = _parallel(r, d)
        model = _model(r, d, par)
        ranks = (
            r.int_(d, "ranks", "", minimum=1, default=par.world_size, maximum=lim.max_ranks) or par.world_size
        )
        if ranks != par.world_size and sized:
            sizes = "*".join(str(getattr(par, k)) for k in DIMENSIONS)
            ps.add("ranks", f"{ranks} does not equal tp*cp*ep*dp*pp = {sizes} = {par.world_size}")
        if d.get("groups") or d.get("edges"):
            ps.add("groups", "a job is structured (parallel + model) or explicit (groups/edges), not both")
    else:
        ranks = r.int_(d, "ranks", "", minimum=1, required=True, maximum=lim.max_ranks) or 1
        if d.get("groups") is None and d.get("edges") is None and "ranks" in d:
            ps.add("", "an explicit job needs `groups` and/or `edges` (or give `parallel` and `model`)")
    groups = _groups(r, d, ranks)
    edges = _edges(r, d, ranks)
    exposure = _exposure(r, d)
    cons = _constraints(r, d.get("constraints"), ranks)
    launcher = r.str_(d, "launcher", "", default="any") or "any"
    if launcher not in LAUNCHERS:
        ps.add(
            "launcher",
            f"unknown launcher {launcher!r}; use one of {', '.join(LAUNCHERS)} (torchrun: each host's ranks one contiguous block)",
        )
        launcher = "any"
    ps.raise_if_any()
    return Job(name, ranks, kind, par, model, exposure, tuple(groups), tuple(edges), cons, launcher)


def _parallel(r: _Reader, d: Mapping[str, Any]) -> tuple[ParallelSpec, bool]:
    """The parallel sizes and rank order; whether the sizes are as written (a mistyped size, `tpp: 8`, is not
    also a wrong world size)."""
    lim = current_limits()
    pd = r.obj(d["parallel"], "parallel")
    r.keys(pd, [*DIMENSIONS, "order"], "parallel")
    sizes = {
        k: r.int_(pd, k, "parallel", minimum=1, default=1, maximum=lim.max_ranks) or 1 for k in DIMENSIONS
    }
    world = math.prod(sizes.values())
    sized = not r.typos_at("parallel")
    lim.check("max_ranks", world, "tp*cp*ep*dp*pp")
    order = r.str_(pd, "order", "parallel", default="tp-cp-ep-dp-pp") or "tp-cp-ep-dp-pp"
    dims = order.split("-")
    missing = [x for x in DIMENSIONS if x not in dims]
    unknown = [x for x in dims if x not in DIMENSIONS]
    dup = sorted({x for x in dims if dims.count(x) > 1})
    if missing or unknown or dup:
        what = []
        if missing:
            what.append(f"misses {', '.join(missing)}")
        if unknown:
            what.append(f"has unknown {', '.join(repr(u) for u in unknown)}")
        if dup:
            what.append(f"repeats {', '.join(dup)}")
        r.ps.add(
            "parallel.order",
            f"{short(order)} {' and '.join(what)}; it must name each of tp, cp, ep, dp, pp once, e.g. 'tp-cp-ep-dp-pp'",
        )
        order = "tp-cp-ep-dp-pp"
    return ParallelSpec(order=order, **sizes), sized


def _model(r: _Reader, d: Mapping[str, Any], par: ParallelSpec) -> ModelShape | None:
    """The model shape of a structured job, checked against its parallel sizes."""
    ps = r.ps
    md = r.obj(d.get("model"), "model")
    model_start = len(ps.items)
    if "model" not in d:
        ps.add("model", "is required with `parallel`: parameters, hidden, layers, seq_len, ...")
        return None
    r.keys(md, _MODEL_KEYS, "model")
    model = ModelShape(
        parameters=r.num(
            md, "parameters", "model", minimum=0, exclusive=True, required=True, maximum=MAX_PARAMETERS
        )
        or 1.0,
        hidden=r.int_(md, "hidden", "model", minimum=1, required=True, maximum=10**7) or 1,
        layers=r.int_(md, "layers", "model", minimum=1, required=True, maximum=10**6) or 1,
        seq_len=r.int_(md, "seq_len", "model", minimum=1, required=True, maximum=10**9) or 1,
        micro_batch=r.int_(md, "micro_batch", "model", minimum=1, default=1, maximum=10**6) or 1,
        micro_batches=r.int_(md, "micro_batches", "model", minimum=1, default=1, maximum=10**6) or 1,
        bytes_per_element=r.int_(md, "bytes_per_element", "model", minimum=1, default=2, maximum=64) or 2,
        grad_bytes_per_element=r.int_(md, "grad_bytes_per_element", "model", minimum=1, maximum=64),
        experts=r.int_(md, "experts", "model", minimum=0, default=0, maximum=10**6) or 0,
        top_k=r.int_(md, "top_k", "model", minimum=0, default=0, maximum=10**6) or 0,
        expert_parameters=r.num(
            md, "expert_parameters", "model", minimum=0, default=0.0, maximum=MAX_PARAMETERS
        )
        or 0.0,
        kv_fraction=r.num(md, "kv_fraction", "model", minimum=0, exclusive=True, default=1.0, maximum=1.0)
        or 1.0,
        recompute=r.bool_(md, "recompute", "model"),
        distributed_optimizer=r.bool_(md, "distributed_optimizer", "model"),
        mfu=r.num(md, "mfu", "model", minimum=0, exclusive=True, maximum=1.0, default=DEFAULT_MFU)
        or DEFAULT_MFU,
        heads=r.int_(md, "heads", "model", minimum=1, default=0, maximum=10**6) or 0,
    )
    # a model field wrong, missing or mistyped stands for its default, which proves nothing below
    unsure = {p.path.removeprefix("model.") for p in ps.items[model_start:]}
    unsure.update(k for (path, k) in r.typos if path == "model")
    _model_checks(ps, model, {k: getattr(par, k) for k in DIMENSIONS}, unsure)
    return model


def _groups(r: _Reader, d: Mapping[str, Any], ranks: int) -> list[Group]:
    """The collectives of an explicit job."""
    ps = r.ps
    groups: list[Group] = []
    kinds = {k.value: k for k in CollectiveKind}
    budget = [current_limits().max_group_members]
    for i, g in enumerate(r.lst(d.get("groups"), "groups")):
        tick(i, "reading the groups")
        gp = f"groups[{i}]"
        gd = r.obj(g, gp)
        r.keys(gd, ["label", "kind", "members", "bytes", "count", "exposed"], gp)
        kname = r.str_(gd, "kind", gp, default="all_reduce") or "all_reduce"
        if kname not in kinds:
            ps.add(f"{gp}.kind", f"unknown collective {short(kname)}; known: {sorted(kinds)}")
            kname = "all_reduce"
        mem = _members(r, gd.get("members"), f"{gp}.members", budget)
        bad = [m for m in mem if not 0 <= m < ranks][:5]
        if bad:
            ps.add(f"{gp}.members", f"rank(s) {bad[:5]} outside 0..{ranks - 1}")
        if len(set(mem)) != len(mem):
            ps.add(f"{gp}.members", "lists a rank twice")
        if len(mem) < 2 and not r.typo(gp, "members"):
            ps.add(f"{gp}.members", f"a group needs >= 2 members, got {len(mem)}")
        groups.append(
            Group(
                r.str_(gd, "label", gp, default=kname) or kname,
                kinds[kname],
                mem,
                r.num(gd, "bytes", gp, minimum=0, maximum=MAX_BYTES, required=True) or 0.0,
                r.num(gd, "count", gp, minimum=0, maximum=MAX_COUNT, default=1.0) or 0.0,
                _exposed(r, gd, gp),
            )
        )
    return groups


def _edges(r: _Reader, d: Mapping[str, Any], ranks: int) -> list[Edge]:
    """The point-to-point transfers of an explicit job."""
    ps = r.ps
    edges: list[Edge] = []
    for i, e in enumerate(r.lst(d.get("edges"), "edges")):
        tick(i, "reading the edges")
        ep = f"edges[{i}]"
        ed = r.obj(e, ep)
        r.keys(ed, ["label", "src", "dst", "bytes", "count", "exposed"], ep)
        src = r.int_(ed, "src", ep, minimum=0, required=True)
        dst = r.int_(ed, "dst", ep, minimum=0, required=True)
        for k, val in (("src", src), ("dst", dst)):
            if val is not None and val >= ranks:
                ps.add(f"{ep}.{k}", f"rank {val} outside 0..{ranks - 1}")
        if src is not None and src == dst:
            ps.add(ep, f"an edge joins two different ranks, got {src}->{dst}")
        edges.append(
            Edge(
                r.str_(ed, "label", ep, default="p2p") or "p2p",
                src or 0,
                dst or 0,
                r.num(ed, "bytes", ep, minimum=0, maximum=MAX_BYTES, required=True) or 0.0,
                r.num(ed, "count", ep, minimum=0, maximum=MAX_COUNT, default=1.0) or 0.0,
                _exposed(r, ed, ep),
            )
        )
    return edges


def _exposure(r: _Reader, d: Mapping[str, Any]) -> dict[str, float]:
    """The exposed fraction of each group label."""
    exposure: dict[str, float] = {}
    for lab, val in r.obj(d.get("exposure"), "exposure").items():
        f = r.num({lab: val}, lab, "exposure", minimum=0)
        if f is not None and f > 1:
            r.ps.add(f"exposure.{lab}", f"an exposed fraction is in [0, 1], got {f:g}")
        elif f is not None:
            exposure[str(lab)] = f
    return exposure


def _model_checks(ps: Problems, model: ModelShape, sizes: Mapping[str, int], unsure: set[str]) -> None:
    """The rules between the model shape and the parallel sizes, for the model fields not in `unsure` (those
    already reported wrong, missing or mistyped)."""
    if "layers" not in unsure and model.layers % sizes["pp"]:
        ps.add("model.layers", f"{model.layers} layers do not split evenly over pp={sizes['pp']} stages")
    tp = sizes["tp"]
    if "hidden" not in unsure and model.hidden % tp:
        ps.add(
            "model.hidden",
            f"{model.hidden} is not divisible by tp={tp}: tensor parallelism splits the hidden size evenly over "
            "its ranks (tp must divide hidden)",
        )
    if "heads" not in unsure and model.heads and model.heads % tp:
        ps.add(
            "model.heads",
            f"{model.heads} attention heads do not split evenly over tp={tp} (tp must divide heads)",
        )
    moe_known = not unsure & {"experts", "top_k"}
    if moe_known and sizes["ep"] > 1 and (model.experts < sizes["ep"] or model.top_k < 1):
        ps.add(
            "model.experts",
            f"ep={sizes['ep']} needs experts >= ep and top_k >= 1, got experts={model.experts}, top_k={model.top_k}",
        )
    if moe_known and model.experts and sizes["ep"] > 1 and model.experts % sizes["ep"]:
        ps.add("model.experts", f"{model.experts} experts do not split evenly over ep={sizes['ep']}")
    if not unsure & {"parameters", "expert_parameters"} and model.expert_parameters >= model.parameters:
        ps.add(
            "model.expert_parameters",
            f"{model.expert_parameters:g} must be < parameters {model.parameters:g}",
        )


def _exposed(r: _Reader, d: Mapping[str, Any], path: str) -> float:
    """The exposed fraction of a group or edge, in [0, 1] like the job's `exposure` values (default 1)."""
    f = r.num(d, "exposed", path, minimum=0, default=1.0)
    if f is None:
        return 1.0
    if f > 1:
        r.ps.add(f"{path}.exposed", f"an exposed fraction is in [0, 1], got {f:g}")
        return 1.0
    return f


def _constraints(r: _Reader, v: Any, ranks: int) -> Constraints:
    cd = r.obj(v, "constraints")
    r.keys(cd, ["require", "prefer", "spread", "pins", "exclude", "balance", "segment"], "constraints")
    req = {str(k): str(x) for k, x in r.obj(cd.get("require"), "constraints.require").items()}
    pref = {str(k): str(x) for k, x in r.obj(cd.get("prefer"), "constraints.prefer").items()}
    spread: list[SpreadRule] = []
    for i, s in enumerate(r.lst(cd.get("spread"), "constraints.spread")):
        sp = f"constraints.spread[{i}]"
        sd = r.obj(s, sp)
        r.keys(sd, ["kind", "scope", "min_domains", "max_ranks_per_domain"], sp)
        rule = SpreadRule(
            r.str_(sd, "kind", sp, required=True) or "?",
            r.str_(sd, "scope", sp, default="job") or "job",
            r.int_(sd, "min_domains", sp, minimum=1),
            r.int_(sd, "max_ranks_per_domain", sp, minimum=1),
        )
        if rule.min_domains is None and rule.max_ranks_per_domain is None:
            r.ps.add(sp, "give min_domains and/or max_ranks_per_domain")
        spread.append(rule)
    pins: dict[int, str] = {}
    raw_pins = r.obj(cd.get("pins"), "constraints.pins")
    lim = current_limits()
    lim.check("max_pins", len(raw_pins), "constraints.pins")
    for i, (k, dev) in enumerate(raw_pins.items()):
        tick(i, "reading the pins")
        try:
            rk = int(k)
        except (TypeError, ValueError, OverflowError):
            r.ps.add(f"constraints.pins.{str(k)[:80]}", "keys are rank numbers")
            continue
        if not 0 <= rk < ranks:
            r.ps.add(f"constraints.pins.{str(k)[:80]}", f"rank {short(rk)} outside 0..{ranks - 1}")
            continue
        if not isinstance(dev, str | int) or isinstance(dev, bool):
            r.ps.add(f"constraints.pins.{rk}", f"must be a device name, got {short(dev)}")
            continue
        pins[rk] = str(dev)
    counts = Counter(pins.values())  # linear: a device pinned to several ranks
    dup = sorted(x for x, c in counts.items() if c > 1)
    if dup:
        r.ps.add("constraints.pins", f"device(s) {short(dup)} pinned to more than one rank")
    excl_raw = r.lst(cd.get("exclude"), "constraints.exclude")
    lim.check("max_state_entries", len(excl_raw), "constraints.exclude")
    excl = [str(x) for x in excl_raw]
    balance: BalanceRule | None = None
    if cd.get("balance") is not None:
        bd = r.obj(cd.get("balance"), "constraints.balance")
        r.keys(bd, ["level", "slice"], "constraints.balance")
        level = r.str_(bd, "level", "constraints.balance", required=True) or "?"
        balance = BalanceRule(level, r.int_(bd, "slice", "constraints.balance", minimum=1) or 1)
    segment: SegmentRule | None = None
    if cd.get("segment") is not None:
        sd = r.obj(cd.get("segment"), "constraints.segment")
        r.keys(sd, ["nodes", "level"], "constraints.segment")
        nodes = r.int_(sd, "nodes", "constraints.segment", minimum=1, required=True)
        level = r.str_(sd, "level", "constraints.segment", required=True) or "?"
        segment = SegmentRule(nodes or 1, level)
    return Constraints(req, pref, tuple(spread), pins, tuple(excl), balance, segment)


def load_job(path: str | Path) -> Job:
    return job_from_dict(load_document(path), str(path))


# ---- mapping ------------------------------------------------------------------------------------------------
