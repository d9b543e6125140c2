"""The serving step model: time to first token, time per output token and tokens/s of a serving job on a mapping.

Owns `model_serving` and its `ServingReport`; collectives are priced by `placement.cost.collectives` (the same
`Fabric` and max-min sharing as training), device speed and HBM bandwidth by `placement.cost.compute`.

Notation (`placement.model.serving`): B requests decoded together per decode replica, pp stages, a stage of
``w = tp * attention_dp`` ranks, E experts, k top-k, h hidden, L layers (Lr routed), ctx the mean context of a
decoding sequence (prompt + (output-1)/2), P prompt tokens.

**Decode** (one output token for each of the B requests). With pp > 1 the batch flows as pp micro-batches of
B/pp; a stage step handles one of them, and every request advances one token per ``pp`` stage steps.

- *Memory and compute* per rank and stage step (each attention-DP rank holds ``b = B / (pp attention_dp)``
  requests): bytes read = dense weights ``(P_total - P_experts) / (tp pp)`` + the routed experts it holds that any
  of the stage's ``B/pp`` tokens visit (``P_experts / (pp w) * (1 - (1 - k/E)^(B/pp))``, every expert
  equally likely) in the weight type, + the KV cache ``b ctx L/pp`` x its KV elements per token and layer (MHA/GQA
  K and V of ``max(1, kv_heads/tp)`` heads; MLA the latent, which every TP rank keeps whole). FLOPs =
  ``2 b P_dense/(tp pp) + 2 (B/pp)/w * P_experts k/E / pp + 4 b ctx (heads/tp) head_dim L/pp``. The stage's
  compute = ``max(bytes / (HBM x MEMORY_EFFICIENCY), FLOPs / (peak x GEMM efficiency))`` (the roofline;
  `placement.cost.compute.gemm_efficiency`, `placement.cost.compute.hbm_gbps`).
- *TP all-reduce* (tp > 1): of ``b h`` activations, once per layer after attention, and once more after each
  dense MLP (a routed MoE layer's output comes back with the EP combine): ``L/pp + (L - Lr)/pp`` per stage
  step, priced by `Fabric.plan_group` (NCCL's tuner picks LL for these small messages), every TP group of the
  deployment at once (`max_min_phase_seconds`).
- *EP dispatch and combine* (ep > 1, once each per routed layer): every EP member sends ``(B/pp)/ep`` tokens
  to k experts each, ``h`` elements of the dispatch type (FP8 carries one fp32 scale per 128) out, ``h``
  activations back. DeepEP's low-latency kernels (deepseek-ai/DeepEP docs/legacy.md): the bytes go as
  `Fabric.plan_group`'s all-to-all puts them (NVLink inside a host or NVLink domain, the hosts' NICs and the
  uplinks across), all EP groups at once, plus `DEEPEP_LL_LATENCY_US` per kernel (not NCCL's ``n-1`` steps).
- *PP send* (pp > 1): each rank passes its share ``(B/pp) h / w`` activations to the next stage's rank.
- ``TPOT = pp * (compute + TP + dispatch + combine) + (pp - 1) * send``; decode tokens/s = replicas * B / TPOT.

**Prefill** (one batch of `ServingLoad.prefill_batch` prompts per prefill replica, compute bound): FLOPs
``2 N_active T + 4 L heads qk_dim P^2/2`` per prompt (causal attention), T = prefill_batch * P tokens, over one
stage's ``w`` ranks at a time (a request's stages run in turn) at the GEMM efficiency; TP all-reduces of
``T/attention_dp * h`` twice per dense layer and once per routed one; EP dispatch and combine of ``T/ep`` tokens
per member per routed layer (DeepEP's normal kernels: bandwidth, so `Fabric.plan_group`'s all-to-all as it is);
``pp - 1`` sends. **KV handoff** (disaggregated): the prompt's KV cache ``P x kv_bytes_per_token`` goes from the
prefill replica's first attention-DP rank (its KV shards: ``min(tp, kv_heads)`` TP ranks for MHA/GQA, one for MLA,
each stage its layers) to the decode replica it feeds (prefill replica i feeds decode replica i mod replicas),
to the decode stage holding the same layers, every prefill replica at once. ``TTFT = prefill + handoff``.

**Throughput.** Disaggregated: the deployment emits ``min(decode tokens/s, prefill requests/s x output
tokens)`` (`ServingReport.bound_by` says which). Aggregated: the same ranks prefill and decode, so a share f of
the time decodes: ``f = 1 / (1 + B t_prefill / (TPOT O prefill_batch))``. Tokens/s per GPU divides by every rank
of the deployment.

Not modeled (docs/serving.md): overlap of communication with compute (DeepSeek's dual-batch overlap), multi-token
prediction, expert load imbalance, queueing, the KV cache's growth over a request and memory fragmentation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from placement.cost.collectives import Fabric, Plan, fabric_for, max_min_phase_seconds
from placement.cost.compute import device_kind, gemm_efficiency, hbm_gbps, job_device_kind
from placement.model.devices import DeviceKind
from placement.model.job import CollectiveKind
from placement.model.serving import DTYPE_BYTES, ServingJob, ServingPool, pool_ranks
from placement.model.state import ClusterState
from placement.model.topology import Topology

__all__ = [
    "DEEPEP_LL_LATENCY_US",
    "MEMORY_EFFICIENCY",
    "ServingPhase",
    "ServingReport",
    "decode_compute",
    "dispatch_token_bytes",
    "ep_exchange",
    "model_serving",
]

DEEPEP_LL_LATENCY_US = 30.0
"""Fixed microseconds of one DeepEP low-latency dispatch or combine beyond its bytes: the intercept of DeepEP's
low-latency table (docs/legacy.md, H800, one CX7 400G NIC per GPU, 128 tokens, top-8, FP8 dispatch, BF16 combine):
the combine moves twice the dispatch's bytes, so ``2 t_dispatch - t_combine`` is the bytes-free part: 41, 37, 32,
15 and 28 µs at EP 16, 32, 64, 128 and 256 (~30)."""
MEMORY_EFFICIENCY = 0.8
"""Share of the HBM bandwidth decode's weight and KV-cache reads stream at (the same share as the optimizer's
elementwise kernels in `placement.cost.compute`)."""
FP8_SCALE_BLOCK = 128
"""Elements per fp32 scale of an FP8 dispatch (DeepEP, DeepSeek-V3's 1x128 activation tiles)."""


@dataclass(frozen=True)
class ServingPhase:
    """One line of the phase table: `seconds` per output token (decode) or per request (prefill, handoff),
    after `count` repetitions; `tier` the bottleneck (``hbm``, ``compute`` or a link tier)."""

    stage: str
    phase: str
    tier: str
    algorithm: str
    critical: str
    count: float
    seconds: float

    def to_dict(self) -> dict[str, object]:
        return {
            "stage": self.stage,
            "phase": self.phase,
            "tier": self.tier,
            "algorithm": self.algorithm,
            "critical": self.critical,
            "count": self.count,
            "seconds": self.seconds,
        }


@dataclass
class ServingReport:
    """The modeled serving of a job on a mapping (module doc). Rates in tokens per second."""

    ttft_seconds: float = 0.0
    tpot_seconds: float = 0.0
    prefill_seconds: float = 0.0
    handoff_seconds: float = 0.0
    decode_tokens_per_s: float = 0.0
    prefill_tokens_per_s: float = math.inf
    """Output tokens/s the prefill pool can feed (prefill requests/s x output tokens); inf when aggregated."""
    tokens_per_s: float = 0.0
    tokens_per_s_per_gpu: float = 0.0
    gpus: int = 0
    bound_by: str = "decode"
    bottleneck_tier: str = ""
    device_kind: str = ""
    decode_memory_bytes: float = 0.0
    """Weights and KV cache one decode rank holds (its requests at full length)."""
    phases: list[ServingPhase] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "ttft_seconds": self.ttft_seconds,
            "tpot_seconds": self.tpot_seconds,
            "prefill_seconds": self.prefill_seconds,
            "handoff_seconds": self.handoff_seconds,
            "decode_tokens_per_s": self.decode_tokens_per_s,
            "prefill_tokens_per_s": self.prefill_tokens_per_s
            if math.isfinite(self.prefill_tokens_per_s)
            else None,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "gpus": self.gpus,
            "bound_by": self.bound_by,
            "bottleneck_tier": self.bottleneck_tier,
            "device_kind": self.device_kind,
            "decode_memory_bytes": self.decode_memory_bytes,
            "phases": [p.to_dict() for p in self.phases],
            "notes": list(self.notes),
        }


def dispatch_token_bytes(job: ServingJob) -> float:
    """Bytes of one token copy an EP dispatch sends: h elements of the dispatch type, plus an fp32 scale per
    `FP8_SCALE_BLOCK` elements when that type is FP8."""
    h = job.model.hidden
    out = h * DTYPE_BYTES[job.model.dispatch_dtype]
    if job.model.dispatch_dtype == "fp8":
        out += math.ceil(h / FP8_SCALE_BLOCK) * 4.0
    return out


def _kv_elements_per_rank(job: ServingJob, tp: int) -> float:
    """KV elements one rank keeps per token and layer (module doc)."""
    m = job.model
    if m.attention == "mla":
        return float(m.head_dim)
    return 2.0 * max(1.0, m.kv_heads / tp) * m.head_dim


@dataclass(frozen=True)
class DecodeCompute:
    """One decode stage step on one rank: bytes it reads, FLOPs it runs, and the seconds of each at its kind."""

    weight_bytes: float
    kv_bytes: float
    flops: float
    memory_seconds: float
    flop_seconds: float

    @property
    def seconds(self) -> float:
        return max(self.memory_seconds, self.flop_seconds)

    @property
    def tier(self) -> str:
        return "hbm" if self.memory_seconds >= self.flop_seconds else "compute"


def decode_compute(job: ServingJob, pool: ServingPool, kind: DeviceKind) -> DecodeCompute:
    """Memory and compute of one decode stage step on one rank of `pool` (module doc, **Decode**)."""
    m, load = job.model, job.load
    pp, w = pool.pp, pool.stage_ranks
    stage_tokens = load.batch / pp
    b = stage_tokens / pool.attention_dp
    layers = m.layers / pp
    wb = m.weight_bytes
    dense = m.dense_parameters / (pool.tp * pp)
    weights = dense * wb
    flops = 2.0 * b * dense
    if m.moe:
        held = m.expert_parameters / (pp * w)
        visited = 1.0 - (1.0 - min(1.0, m.top_k / m.experts)) ** stage_tokens
        weights += held * visited * wb
        flops += 2.0 * (stage_tokens / w) * m.expert_parameters * (m.top_k / m.experts) / pp
    ctx = load.mean_context
    kv = b * ctx * layers * _kv_elements_per_rank(job, pool.tp) * DTYPE_BYTES[m.kv_dtype]
    flops += 4.0 * b * ctx * (m.heads / pool.tp) * m.head_dim * layers
    mem_s = (weights + kv) / (hbm_gbps(kind) * 1e9 * MEMORY_EFFICIENCY)
    flop_s = flops / (kind.tflops * 1e12 * gemm_efficiency(kind, m.hidden, pool.tp))
    return DecodeCompute(weights, kv, flops, mem_s, flop_s)


def ep_exchange(
    fabric: Fabric, groups: Sequence[Sequence[int]], size: float, *, low_latency: bool
) -> tuple[float, str, str, int]:
    """Seconds of one EP dispatch or combine in which every member of each of `groups` (device lists) sends `size`
    bytes (its tokens times top-k copies), all groups at once on the fabric: (seconds of the slowest, its tier,
    the algorithm, its index). `low_latency`: DeepEP's low-latency kernels (`DEEPEP_LL_LATENCY_US` instead of
    NCCL's per-peer steps); else the normal kernels, priced as `Fabric.plan_group`'s all-to-all."""
    plans: list[Plan] = []
    for devs in groups:
        plan = fabric.plan_group(CollectiveKind.ALL_TO_ALL, list(devs), size)
        if low_latency and plan.stages:
            plan = Plan("deepep-ll", DEEPEP_LL_LATENCY_US * 1e-6, plan.stages, plan.slowdown)
        plans.append(plan)
    return _slowest(fabric, plans)


def _slowest(fabric: Fabric, plans: Sequence[Plan]) -> tuple[float, str, str, int]:
    if not plans or all(not p.stages for p in plans):
        return 0.0, "", "", 0
    times = max_min_phase_seconds(fabric, list(plans))
    i = max(range(len(times)), key=lambda j: times[j][0])
    return times[i][0], times[i][1], plans[i].algorithm, i


def _ranks_label(ranks: Sequence[int]) -> str:
    if len(ranks) <= 4:
        return ",".join(str(r) for r in ranks)
    return f"{ranks[0]}-{ranks[-1]} ({len(ranks)})"


def _pool_groups(job: ServingJob, role: str, what: str) -> list[tuple[str, tuple[int, ...]]]:
    """(name, ranks) of every TP or EP group of the pool of `role`, all replicas and stages."""
    p = next(x for x in job.pools if x.role == role)
    out: list[tuple[str, tuple[int, ...]]] = []
    for rep in range(p.replicas):
        for st in range(p.pp):
            if what == "tp":
                for dp in range(p.attention_dp):
                    ranks = pool_ranks(job, role, rep, st, dp)
                    out.append((f"{role} r{rep} s{st} dp{dp} tp ranks {_ranks_label(ranks)}", ranks))
            else:
                stage = pool_ranks(job, role, rep, st)
                for j in range(p.moe_tp):
                    ranks = stage[j :: p.moe_tp]
                    out.append((f"{role} r{rep} s{st} ep ranks {_ranks_label(ranks)}", ranks))
    return out


def _collective(
    fabric: Fabric, mapping: Sequence[int], named: Sequence[tuple[str, tuple[int, ...]]], size: float
) -> tuple[float, str, str, str]:
    plans = [
        fabric.plan_group(CollectiveKind.ALL_REDUCE, [mapping[r] for r in ranks], size) for _, ranks in named
    ]
    t, tier, algo, i = _slowest(fabric, plans)
    return t, tier, algo, named[i][0] if named else ""


def _ep(
    fabric: Fabric,
    mapping: Sequence[int],
    named: Sequence[tuple[str, tuple[int, ...]]],
    size: float,
    low_latency: bool,
) -> tuple[float, str, str, str]:
    t, tier, algo, i = ep_exchange(
        fabric, [[mapping[r] for r in ranks] for _, ranks in named], size, low_latency=low_latency
    )
    return t, tier, algo, named[i][0] if named else ""


def _pp_sends(
    fabric: Fabric, mapping: Sequence[int], job: ServingJob, role: str, size: float
) -> tuple[float, str, str, str]:
    p = next(x for x in job.pools if x.role == role)
    plans: list[Plan] = []
    names: list[str] = []
    for rep in range(p.replicas):
        for st in range(p.pp - 1):
            a, b = pool_ranks(job, role, rep, st), pool_ranks(job, role, rep, st + 1)
            for x, y in zip(a, b, strict=True):
                plans.append(fabric.plan_edge(mapping[x], mapping[y], size))
                names.append(f"{role} r{rep} s{st}->s{st + 1} rank {x}->{y}")
    t, tier, algo, i = _slowest(fabric, plans)
    return t, tier, algo, names[i] if names else ""


def _handoff(fabric: Fabric, mapping: Sequence[int], job: ServingJob) -> tuple[float, str, str, str]:
    """The KV handoff of one request from every prefill replica to the decode replica it feeds (module doc)."""
    pre, dec = job.prefill_pool, job.decode_pool
    m = job.model
    total = job.load.prompt_tokens * m.kv_bytes_per_token
    senders = 1 if m.attention == "mla" else min(pre.tp, m.kv_heads)
    plans: list[Plan] = []
    names: list[str] = []
    for rep in range(pre.replicas):
        drep = rep % dec.replicas
        for st in range(pre.pp):
            src = pool_ranks(job, "prefill", rep, st, 0)[:senders]
            dst_stage = st * dec.pp // pre.pp
            dst = pool_ranks(job, "decode", drep, dst_stage, 0)
            size = total / pre.pp / senders
            for j, x in enumerate(src):
                y = dst[j % len(dst)]
                plans.append(fabric.plan_edge(mapping[x], mapping[y], size))
                names.append(f"prefill r{rep} rank {x} -> decode r{drep} rank {y}")
    t, tier, algo, i = _slowest(fabric, plans)
    return t, tier, algo, names[i] if names else ""


def model_serving(
    topology: Topology, state: ClusterState, job: ServingJob, mapping: Sequence[int]
) -> ServingReport:
    """TTFT, TPOT, tokens/s and the phase table of `job` with rank r on device `mapping[r]` (module doc)."""
    if len(mapping) != job.ranks:
        raise ValueError(
            f"mapping has {len(mapping)} devices, the serving job {job.name!r} has {job.ranks} ranks"
        )
    fabric = fabric_for(topology, state)
    kind = job_device_kind(topology, mapping) or device_kind(job.device_kind, topology)
    if kind is None:
        raise ValueError(
            f"device kind {job.device_kind!r} is unknown: a serving job needs devices of a known kind "
            "(peak FLOP/s and HBM bandwidth); set device_kind or use a cluster whose kinds are known"
        )
    m, load = job.model, job.load
    rep = ServingReport(device_kind=kind.name, gpus=job.ranks)
    act = DTYPE_BYTES[m.activation_dtype]
    dec_role = "decode" if job.disaggregated else job.pools[0].role
    pre_role = "prefill" if job.disaggregated else job.pools[0].role
    dec = job.decode_pool

    # ---- decode ----------------------------------------------------------------------------------------------
    pp = dec.pp
    stage_tokens = load.batch / pp
    comp = decode_compute(job, dec, kind)
    rep.phases.append(
        ServingPhase(
            "decode",
            "compute",
            comp.tier,
            "roofline",
            f"{comp.weight_bytes / 1e9:.2f} GB weights + {comp.kv_bytes / 1e9:.2f} GB KV, {comp.flops / 1e12:.2f} TFLOP",
            pp,
            pp * comp.seconds,
        )
    )
    if dec.tp > 1:
        ar_count = (m.layers + (m.layers - m.routed_layers)) / pp
        size = stage_tokens / dec.attention_dp * m.hidden * act
        t, tier, algo, crit = _collective(fabric, mapping, _pool_groups(job, dec_role, "tp"), size)
        rep.phases.append(
            ServingPhase("decode", "tp all-reduce", tier, algo, crit, pp * ar_count, pp * ar_count * t)
        )
    if m.moe and dec.ep > 1:
        per = stage_tokens / dec.ep * m.top_k
        groups = _pool_groups(job, dec_role, "ep")
        count = m.routed_layers / pp
        for phase, size in (
            ("ep dispatch", per * dispatch_token_bytes(job)),
            ("ep combine", per * m.hidden * act),
        ):
            t, tier, algo, crit = _ep(fabric, mapping, groups, size, True)
            rep.phases.append(ServingPhase("decode", phase, tier, algo, crit, pp * count, pp * count * t))
    if pp > 1:
        size = stage_tokens * m.hidden * act / dec.stage_ranks
        t, tier, algo, crit = _pp_sends(fabric, mapping, job, dec_role, size)
        rep.phases.append(ServingPhase("decode", "pp send", tier, algo, crit, pp - 1, (pp - 1) * t))
    rep.tpot_seconds = sum(p.seconds for p in rep.phases if p.stage == "decode")

    # ---- prefill ---------------------------------------------------------------------------------------------
    pre = job.prefill_pool
    tokens = load.prefill_batch * load.prompt_tokens
    w = pre.stage_ranks
    qk = m.qk_head_dim or m.head_dim
    flops = 2.0 * m.active_parameters * tokens + 2.0 * m.layers * m.heads * qk * load.prompt_tokens**2 * (
        load.prefill_batch
    )
    eff = gemm_efficiency(kind, m.hidden, pre.tp)
    n_phase = len(rep.phases)
    rep.phases.append(
        ServingPhase(
            "prefill",
            "compute",
            "compute",
            "gemm",
            f"{flops / 1e12:.1f} TFLOP over {w} ranks at {eff:.2f} of peak",
            1,
            flops / (w * kind.tflops * 1e12 * eff),
        )
    )
    if pre.tp > 1:
        count = m.layers + (m.layers - m.routed_layers)
        size = tokens / pre.attention_dp * m.hidden * act
        t, tier, algo, crit = _collective(fabric, mapping, _pool_groups(job, pre_role, "tp"), size)
        rep.phases.append(ServingPhase("prefill", "tp all-reduce", tier, algo, crit, count, count * t))
    if m.moe and pre.ep > 1:
        per = tokens / pre.ep * m.top_k
        groups = _pool_groups(job, pre_role, "ep")
        count = m.routed_layers
        for phase, size in (
            ("ep dispatch", per * dispatch_token_bytes(job)),
            ("ep combine", per * m.hidden * act),
        ):
            t, tier, algo, crit = _ep(fabric, mapping, groups, size, False)
            rep.phases.append(ServingPhase("prefill", phase, tier, algo, crit, count, count * t))
    if pre.pp > 1:
        size = tokens * m.hidden * act / w
        t, tier, algo, crit = _pp_sends(fabric, mapping, job, pre_role, size)
        rep.phases.append(ServingPhase("prefill", "pp send", tier, algo, crit, pre.pp - 1, (pre.pp - 1) * t))
    rep.prefill_seconds = sum(p.seconds for p in rep.phases[n_phase:])
    if job.disaggregated:
        t, tier, algo, crit = _handoff(fabric, mapping, job)
        rep.phases.append(ServingPhase("handoff", "kv handoff", tier, algo, crit, 1, t))
        rep.handoff_seconds = t
    rep.ttft_seconds = rep.prefill_seconds + rep.handoff_seconds

    # ---- throughput ------------------------------------------------------------------------------------------
    rep.decode_tokens_per_s = dec.replicas * load.batch / rep.tpot_seconds if rep.tpot_seconds > 0 else 0.0
    if job.disaggregated:
        rep.prefill_tokens_per_s = (
            pre.replicas * load.prefill_batch / rep.prefill_seconds * load.output_tokens
        )
        rep.tokens_per_s = min(rep.decode_tokens_per_s, rep.prefill_tokens_per_s)
        rep.bound_by = "decode" if rep.decode_tokens_per_s <= rep.prefill_tokens_per_s else "prefill"
    else:
        share = 1.0 / (
            1.0
            + load.batch * rep.prefill_seconds / (rep.tpot_seconds * load.output_tokens * load.prefill_batch)
        )
        rep.tokens_per_s = rep.decode_tokens_per_s * share
        rep.bound_by = "decode"
        rep.notes.append(f"aggregated: {share:.0%} of the time decodes, the rest prefills")
    rep.tokens_per_s_per_gpu = rep.tokens_per_s / job.ranks
    decode_phases = [p for p in rep.phases if p.stage == "decode"]
    worst = max(decode_phases, key=lambda p: p.seconds)
    rep.bottleneck_tier = worst.tier

    # ---- memory ----------------------------------------------------------------------------------------------
    held = m.dense_parameters / (dec.tp * pp) + (
        m.expert_parameters / (pp * dec.stage_ranks) if m.moe else 0.0
    )
    kv_full = (
        load.batch
        / (pp * dec.attention_dp)
        * (load.prompt_tokens + load.output_tokens)
        * m.layers
        / pp
        * _kv_elements_per_rank(job, dec.tp)
        * DTYPE_BYTES[m.kv_dtype]
    )
    rep.decode_memory_bytes = held * m.weight_bytes + kv_full
    cap = kind.memory_gb * 1e9
    if rep.decode_memory_bytes > cap:
        rep.notes.append(
            f"a decode rank holds {rep.decode_memory_bytes / 1e9:.0f} GB of weights and KV cache, more than the "
            f"{kind.name}'s {kind.memory_gb:g} GB: fewer requests per replica or more ranks"
        )
    return rep
