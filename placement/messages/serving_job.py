"""A serving job and its report as messages: `placement.model.serving.ServingJob` <-> a `Job` message with its
`serving` field, and `placement.cost.serving.ServingReport` <-> `ServingCost`; read by every request converter
and by the request files (a ``job_file`` naming a serving job file).

The message is read through the native reader (`placement.io.native.serving`), so the wire and the files share one
set of rules and error messages (field paths under ``job.serving``).
"""

from __future__ import annotations

import math
from typing import Any

from google.protobuf.json_format import MessageToDict

from placement.cost.serving import ServingPhase, ServingReport
from placement.errors import InputError, Problem
from placement.io.native.serving import serving_job_from_dict
from placement.limits import LimitError
from placement.model.serving import ServingJob
from placement.v1 import placement_pb2 as pb

__all__ = [
    "is_serving_message",
    "serving_cost",
    "serving_from_proto",
    "serving_report_from_proto",
    "serving_to_proto",
]


def is_serving_message(job: pb.Job) -> bool:
    """True when the Job message carries a serving job."""
    return job.HasField("serving")


def serving_from_proto(job: pb.Job, source: str = "job") -> ServingJob:
    """The serving job of a Job message (InputError naming the fields, as the native reader does, by their paths
    in the Job message: ``serving.pools[0].ep``, ``serving.rules.spread``, ``name``)."""
    s = MessageToDict(job.serving, preserving_proto_field_name=True)
    doc: dict[str, Any] = {"kind": "serving"}
    for key in ("model", "pools", "load"):
        if key in s:
            doc[key] = s[key]
    if "rules" in s:
        doc["placement"] = s["rules"]
    if job.name:
        doc["name"] = job.name
    if job.description:
        doc["description"] = job.description
    if job.device_kind:
        doc["device_kind"] = job.device_kind
    try:
        return serving_job_from_dict(doc, source)
    except LimitError:
        raise
    except InputError as e:
        problems = [Problem(_message_path(p.path), p.message) for p in e.problems]
        raise InputError(e.source, problems, e.omitted) from None


def _message_path(path: str) -> str:
    """A path of the serving reader as the Job message names it: the serving fields under ``serving`` (the file's
    ``placement`` is the message's ``rules``), the job's own (``name``, ``device_kind``) as they are."""
    head = path.split(".", 1)[0].split("[", 1)[0]
    if head == "placement":
        return "serving.rules" + path[len(head) :]
    if head in ("model", "pools", "load"):
        return f"serving.{path}"
    return path


def serving_to_proto(job: ServingJob) -> pb.Job:
    """A Job message carrying `job` (every field set, defaults included, so a reader needs no defaults)."""
    m = job.model
    model = pb.ServingModel(
        parameters=m.parameters,
        hidden=m.hidden,
        layers=m.layers,
        heads=m.heads,
        kv_heads=m.kv_heads,
        head_dim=m.head_dim,
        qk_head_dim=m.qk_head_dim,
        attention=m.attention,
        experts=m.experts,
        top_k=m.top_k,
        shared_experts=m.shared_experts,
        expert_parameters=m.expert_parameters,
        moe_layers=m.moe_layers,
        weight_dtype=m.weight_dtype,
        kv_dtype=m.kv_dtype,
        activation_dtype=m.activation_dtype,
        dispatch_dtype=m.dispatch_dtype,
    )
    pools = [
        pb.ServingPool(
            role=p.role, tp=p.tp, ep=p.ep, pp=p.pp, attention_dp=p.attention_dp, replicas=p.replicas
        )
        for p in job.pools
    ]
    ld = job.load
    load = pb.ServingLoad(
        batch=ld.batch,
        prompt_tokens=ld.prompt_tokens,
        output_tokens=ld.output_tokens,
        prefill_batch=ld.prefill_batch,
    )
    if ld.tpot_bound_ms is not None:
        load.tpot_bound_ms = ld.tpot_bound_ms
    r = job.placement
    rules = pb.ServingRules(
        spread=r.spread, spread_kind=r.spread_kind or "", ep_level=r.ep_level or "", require_ep=r.require_ep
    )
    return pb.Job(
        name=job.name,
        device_kind=job.device_kind or "",
        serving=pb.Serving(model=model, pools=pools, load=load, rules=rules),
    )


def serving_cost(report: ServingReport) -> pb.ServingCost:
    """A serving report as a message (field for field)."""
    out = pb.ServingCost(
        ttft_s=report.ttft_seconds,
        tpot_s=report.tpot_seconds,
        prefill_s=report.prefill_seconds,
        handoff_s=report.handoff_seconds,
        decode_tokens_per_s=report.decode_tokens_per_s,
        tokens_per_s=report.tokens_per_s,
        tokens_per_s_per_gpu=report.tokens_per_s_per_gpu,
        gpus=report.gpus,
        bound_by=report.bound_by,
        bottleneck_tier=report.bottleneck_tier,
        device_kind=report.device_kind,
        decode_memory_bytes=report.decode_memory_bytes,
        phases=[
            pb.ServingPhase(
                stage=p.stage,
                phase=p.phase,
                tier=p.tier,
                algorithm=p.algorithm,
                critical=p.critical,
                count=p.count,
                seconds=p.seconds,
            )
            for p in report.phases
        ],
        notes=list(report.notes),
    )
    if math.isfinite(report.prefill_tokens_per_s):
        out.prefill_tokens_per_s = report.prefill_tokens_per_s
    return out


def serving_report_from_proto(msg: pb.ServingCost) -> ServingReport:
    """What `serving_cost` wrote, back into a ServingReport."""
    return ServingReport(
        ttft_seconds=msg.ttft_s,
        tpot_seconds=msg.tpot_s,
        prefill_seconds=msg.prefill_s,
        handoff_seconds=msg.handoff_s,
        decode_tokens_per_s=msg.decode_tokens_per_s,
        prefill_tokens_per_s=msg.prefill_tokens_per_s if msg.HasField("prefill_tokens_per_s") else math.inf,
        tokens_per_s=msg.tokens_per_s,
        tokens_per_s_per_gpu=msg.tokens_per_s_per_gpu,
        gpus=msg.gpus,
        bound_by=msg.bound_by,
        bottleneck_tier=msg.bottleneck_tier,
        device_kind=msg.device_kind,
        decode_memory_bytes=msg.decode_memory_bytes,
        phases=[
            ServingPhase(p.stage, p.phase, p.tier, p.algorithm, p.critical, p.count, p.seconds)
            for p in msg.phases
        ],
        notes=list(msg.notes),
    )
