"""The native serving job file (``kind: serving``, or the job under a ``serving:`` key): model, pools, load and
placement rules read into a `placement.model.serving.ServingJob`, with every problem reported at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from placement.errors import Problems
from placement.io.native.document import _Reader, load_document, short
from placement.model.serving import (
    DTYPE_BYTES,
    POOL_ROLES,
    ServingJob,
    ServingLoad,
    ServingModel,
    ServingPlacement,
    ServingPool,
)

__all__ = ["is_serving_document", "load_serving_job", "serving_job_from_dict"]

_TOP = ("kind", "name", "description", "device_kind", "model", "pools", "load", "placement")
_MODEL = (
    "parameters",
    "hidden",
    "layers",
    "heads",
    "kv_heads",
    "head_dim",
    "qk_head_dim",
    "attention",
    "experts",
    "top_k",
    "shared_experts",
    "expert_parameters",
    "moe_layers",
    "weight_dtype",
    "kv_dtype",
    "activation_dtype",
    "dispatch_dtype",
)
_POOL = ("role", "tp", "ep", "pp", "attention_dp", "replicas")
_LOAD = ("batch", "concurrency", "prompt_tokens", "output_tokens", "prefill_batch", "tpot_bound_ms")
_PLACEMENT = ("spread", "spread_kind", "ep_level", "require_ep")
MAX_SIZE = 1 << 20


def is_serving_document(doc: Any) -> bool:
    """True for a serving job: ``kind: serving`` at the top, or a ``serving:`` mapping."""
    return isinstance(doc, dict) and (doc.get("kind") == "serving" or isinstance(doc.get("serving"), dict))


def _dtype(r: _Reader, d: dict[str, Any], key: str, default: str) -> str:
    v = r.str_(d, key, "model", default=default) or default
    if v.lower() not in DTYPE_BYTES:
        r.ps.add(f"model.{key}", f"unknown data type {short(v)}; use one of {', '.join(DTYPE_BYTES)}")
        return default
    return v.lower()


def _model(r: _Reader, v: Any) -> ServingModel:
    d = r.obj(v, "model")
    if v is None:
        r.ps.add("model", "is required: parameters, hidden, layers, heads, kv_heads, head_dim, ...")
    r.keys(d, _MODEL, "model")
    attention = (r.str_(d, "attention", "model", default="mha") or "mha").lower()
    if attention not in ("mha", "gqa", "mla"):
        r.ps.add("model.attention", f"unknown attention {short(attention)}; use mha (also GQA) or mla")
        attention = "mha"
    attention = "mha" if attention == "gqa" else attention
    heads = r.int_(d, "heads", "model", minimum=1, maximum=MAX_SIZE, required=True) or 1
    kv_heads = r.int_(
        d, "kv_heads", "model", minimum=1, maximum=MAX_SIZE, default=1 if attention == "mla" else heads
    )
    model = ServingModel(
        parameters=r.num(d, "parameters", "model", minimum=0, exclusive=True, required=True, maximum=1e15)
        or 1.0,
        hidden=r.int_(d, "hidden", "model", minimum=1, maximum=MAX_SIZE, required=True) or 1,
        layers=r.int_(d, "layers", "model", minimum=1, maximum=MAX_SIZE, required=True) or 1,
        heads=heads,
        kv_heads=kv_heads or 1,
        head_dim=r.int_(d, "head_dim", "model", minimum=1, maximum=MAX_SIZE, required=True) or 1,
        qk_head_dim=r.int_(d, "qk_head_dim", "model", minimum=0, maximum=MAX_SIZE, default=0) or 0,
        attention=attention,
        experts=r.int_(d, "experts", "model", minimum=0, maximum=MAX_SIZE, default=0) or 0,
        top_k=r.int_(d, "top_k", "model", minimum=0, maximum=MAX_SIZE, default=0) or 0,
        shared_experts=r.int_(d, "shared_experts", "model", minimum=0, maximum=MAX_SIZE, default=0) or 0,
        expert_parameters=r.num(d, "expert_parameters", "model", minimum=0, default=0.0, maximum=1e15) or 0.0,
        moe_layers=r.int_(d, "moe_layers", "model", minimum=0, maximum=MAX_SIZE, default=0) or 0,
        weight_dtype=_dtype(r, d, "weight_dtype", "bf16"),
        kv_dtype=_dtype(r, d, "kv_dtype", "bf16"),
        activation_dtype=_dtype(r, d, "activation_dtype", "bf16"),
        dispatch_dtype=_dtype(r, d, "dispatch_dtype", "fp8"),
    )
    if model.experts > 0 or model.expert_parameters > 0:
        if model.experts == 0:
            r.ps.add(
                "model.experts",
                f"is 0, but expert_parameters is {model.expert_parameters:g}: give the expert count",
            )
        elif model.expert_parameters <= 0:
            r.ps.add(
                "model.expert_parameters",
                f"is required with experts {model.experts}: the routed experts' weights",
            )
        if model.top_k < 1 or model.top_k > max(1, model.experts):
            r.ps.add(
                "model.top_k", f"must be in 1..experts ({model.experts}) for a MoE model, got {model.top_k}"
            )
        if model.expert_parameters >= model.parameters:
            r.ps.add(
                "model.expert_parameters",
                f"{model.expert_parameters:g} must be less than parameters {model.parameters:g} (attention and "
                "embeddings are not experts)",
            )
        if model.moe_layers > model.layers:
            r.ps.add("model.moe_layers", f"{model.moe_layers} is more than layers {model.layers}")
    if attention == "mha" and model.kv_heads > model.heads:
        r.ps.add("model.kv_heads", f"{model.kv_heads} is more than heads {model.heads}")
    elif attention == "mha" and model.heads % model.kv_heads:
        r.ps.add(
            "model.kv_heads", f"{model.kv_heads} must divide heads {model.heads} (grouped-query attention)"
        )
    return model


def _pool(r: _Reader, v: Any, path: str, default_role: str) -> ServingPool:
    d = r.obj(v, path)
    r.keys(d, _POOL, path)
    role = (r.str_(d, "role", path, default=default_role) or default_role).lower()
    if role not in POOL_ROLES:
        r.ps.add(f"{path}.role", f"unknown role {short(role)}; use one of {', '.join(POOL_ROLES)}")
        role = default_role
    sizes = {k: r.int_(d, k, path, minimum=1, maximum=MAX_SIZE, default=1) or 1 for k in _POOL[1:]}
    pool = ServingPool(role=role, **sizes)
    if pool.ep > 1 and pool.stage_ranks % pool.ep:
        r.ps.add(
            f"{path}.ep",
            f"{pool.ep} must divide tp x attention_dp = {pool.stage_ranks}: the MoE layers of a stage run on its "
            f"{pool.stage_ranks} ranks (e.g. attention_dp: {pool.ep // pool.tp or 1} with tp {pool.tp})",
        )
    return pool


def serving_job_from_dict(doc: Any, source: str = "<serving job>") -> ServingJob:
    """A serving job from a parsed document (``kind: serving`` or a ``serving:`` key)."""
    ps = Problems(source)
    r = _Reader(ps)
    top = r.obj(doc, "")
    inner = top.get("serving") if isinstance(top.get("serving"), dict) else None
    prefix = "serving." if inner is not None else ""
    d = inner if inner is not None else top
    if inner is not None:
        r.keys(top, ("serving", "name", "description", "kind"), "")
    r.keys(d, _TOP, prefix.rstrip("."))
    if d.get("kind") not in (None, "serving"):
        ps.add(f"{prefix}kind", f"is {short(d.get('kind'))}; a serving job says kind: serving")
    if r.typos_at(prefix.rstrip(".")):
        ps.raise_if_any()
    name = (
        r.str_(d, "name", "", default=None) or r.str_(top, "name", "", default=Path(source).stem) or "serving"
    )
    model = _model(r, d.get("model"))
    raw_pools = r.lst(d.get("pools"), f"{prefix}pools")
    if not raw_pools:
        ps.add(f"{prefix}pools", "is required: one aggregated pool, or a prefill and a decode pool")
    pools: list[ServingPool] = []
    for i, pv in enumerate(raw_pools):
        default = "aggregated" if len(raw_pools) == 1 else ("prefill", "decode")[min(i, 1)]
        pools.append(_pool(r, pv, f"{prefix}pools[{i}]", default))
    roles = [p.role for p in pools]
    if pools and not (roles == ["aggregated"] or sorted(roles) == ["decode", "prefill"]):
        ps.add(
            f"{prefix}pools",
            f"roles {roles}: give one aggregated pool, or one prefill and one decode pool",
        )
    pools.sort(key=lambda p: POOL_ROLES.index(p.role))
    for i, p in enumerate(pools):
        if model.moe and p.ep > model.experts:
            ps.add(f"{prefix}pools[{i}].ep", f"{p.ep} is more than the model's {model.experts} experts")
    ld = r.obj(d.get("load"), f"{prefix}load")
    if d.get("load") is None:
        ps.add(f"{prefix}load", "is required: batch (or concurrency), prompt_tokens, output_tokens")
    r.keys(ld, _LOAD, f"{prefix}load")
    lp = f"{prefix}load"
    batch = r.int_(ld, "batch", lp, minimum=1, maximum=MAX_SIZE * 16)
    conc = r.int_(ld, "concurrency", lp, minimum=1, maximum=MAX_SIZE * 64)
    decode_replicas = next((p.replicas for p in pools if p.role in ("decode", "aggregated")), 1)
    if batch is not None and conc is not None:
        ps.add(
            lp, f"give batch ({batch}, per decode replica) or concurrency ({conc}, the deployment), not both"
        )
    elif batch is None and conc is None:
        ps.add(
            f"{lp}.batch", "is required (requests decoded together per decode replica), or give concurrency"
        )
    if batch is None and conc is not None:
        batch = max(1, conc // decode_replicas)
        if conc % decode_replicas:
            ps.add(
                f"{lp}.concurrency", f"{conc} does not split evenly over {decode_replicas} decode replicas"
            )
    load = ServingLoad(
        batch=batch or 1,
        prompt_tokens=r.int_(ld, "prompt_tokens", lp, minimum=1, maximum=MAX_SIZE * 16, required=True) or 1,
        output_tokens=r.int_(ld, "output_tokens", lp, minimum=1, maximum=MAX_SIZE * 16, required=True) or 1,
        prefill_batch=r.int_(ld, "prefill_batch", lp, minimum=1, maximum=MAX_SIZE, default=1) or 1,
        tpot_bound_ms=r.num(ld, "tpot_bound_ms", lp, minimum=0, exclusive=True),
    )
    pd = r.obj(d.get("placement"), f"{prefix}placement")
    r.keys(pd, _PLACEMENT, f"{prefix}placement")
    pl = f"{prefix}placement"
    rules = ServingPlacement(
        spread=r.bool_(pd, "spread", pl, default=True),
        spread_kind=r.str_(pd, "spread_kind", pl),
        ep_level=r.str_(pd, "ep_level", pl),
        require_ep=r.bool_(pd, "require_ep", pl, default=False),
    )
    ps.raise_if_any()
    return ServingJob(
        name=name,
        model=model,
        pools=tuple(pools),
        load=load,
        device_kind=r.str_(d, "device_kind", prefix.rstrip(".")),
        placement=rules,
    )


def load_serving_job(path: str | Path) -> ServingJob:
    return serving_job_from_dict(load_document(path), str(path))
