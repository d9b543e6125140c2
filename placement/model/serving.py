"""Serving jobs: a model (dense or MoE) served by one pool (aggregated) or two (prefill, decode), and its load.

Owns the description and the rank layout (pool -> replica -> stage -> attention-DP rank -> TP rank).

**Ranks.** A pool's replica runs ``tp * attention_dp * pp`` ranks: each pipeline stage holds ``attention_dp``
attention replicas of ``tp`` ranks each (SGLang's ``--enable-dp-attention``, vLLM's data-parallel attention).
The MoE layers of a stage span the same ``tp * attention_dp`` ranks with expert parallelism ``ep`` (which must
divide it; the experts of one EP rank are split over the ``tp * attention_dp / ep`` ranks left, MoE TP). So
SGLang's DeepSeek decode ``--tp 16 --dp 16 --enable-dp-attention --ep 16`` is ``tp: 1, attention_dp: 16, ep: 16``
(16 ranks), and a dense model on 8 GPUs with TP 8 is ``tp: 8``. Counting ``tp x ep x pp x attention_dp`` would
count the GPUs of an EP group twice.

Rank numbers: the pools in order (prefill first, then decode; one aggregated pool alone), inside a pool the
replicas, inside a replica the stages, inside a stage the attention-DP ranks, inside those the TP ranks
(fastest). `pool_ranks` gives the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "DTYPE_BYTES",
    "POOL_ROLES",
    "ServingJob",
    "ServingLoad",
    "ServingModel",
    "ServingPlacement",
    "ServingPool",
    "pool_ranks",
]

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "fp4": 0.5,
    "int4": 0.5,
}
"""Bytes per element of the weight and KV-cache data types a serving job may name."""

POOL_ROLES: tuple[str, ...] = ("aggregated", "prefill", "decode")
"""An aggregated pool prefills and decodes; a disaggregated deployment has one prefill and one decode pool."""


@dataclass(frozen=True)
class ServingModel:
    """The served model's shape.

    `parameters` counts every weight (routed experts included), `expert_parameters` the routed experts' share
    (0: dense). Attention: ``mha`` (MHA or GQA: K and V of `kv_heads` heads of `head_dim` per layer and token) or
    ``mla`` (DeepSeek's multi-head latent attention: one latent of `head_dim` elements per layer and token,
    e.g. 512 + 64 = 576, shared by every head). `moe_layers`: the layers whose MLP is routed (DeepSeek-V3: 58 of
    61; 0 with experts means every layer).
    """

    parameters: float
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    attention: str = "mha"
    experts: int = 0
    top_k: int = 0
    shared_experts: int = 0
    expert_parameters: float = 0.0
    moe_layers: int = 0
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    activation_dtype: str = "bf16"
    dispatch_dtype: str = "fp8"
    """Data type of the tokens an EP dispatch sends (DeepEP: FP8 with one fp32 scale per 128 elements)."""
    qk_head_dim: int = 0
    """Per-head query/key width prefill's attention multiplies with (DeepSeek-V3's MLA: 128 + 64 = 192); 0: head_dim."""

    @property
    def moe(self) -> bool:
        return self.experts > 0 and self.expert_parameters > 0

    @property
    def routed_layers(self) -> int:
        """Layers whose MLP is a routed MoE."""
        if not self.moe:
            return 0
        return self.moe_layers if self.moe_layers > 0 else self.layers

    @property
    def dense_parameters(self) -> float:
        """Weights every token reads: attention, dense MLPs, shared experts, embeddings."""
        return self.parameters - self.expert_parameters

    @property
    def active_parameters(self) -> float:
        """Weights one token multiplies with: the dense ones and top_k of the routed experts."""
        if not self.moe:
            return self.parameters
        return self.dense_parameters + self.expert_parameters * min(1.0, self.top_k / self.experts)

    @property
    def weight_bytes(self) -> float:
        return DTYPE_BYTES[self.weight_dtype]

    @property
    def kv_elements_per_token_layer(self) -> int:
        """KV-cache elements one token keeps per layer: ``2 kv_heads head_dim`` (mha), ``head_dim`` (mla)."""
        if self.attention == "mla":
            return self.head_dim
        return 2 * self.kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes of one token over all layers."""
        return self.kv_elements_per_token_layer * self.layers * DTYPE_BYTES[self.kv_dtype]


@dataclass(frozen=True)
class ServingPool:
    """One pool: its role, parallel sizes per replica (module doc) and the number of replicas."""

    role: str = "aggregated"
    tp: int = 1
    ep: int = 1
    pp: int = 1
    attention_dp: int = 1
    replicas: int = 1

    @property
    def stage_ranks(self) -> int:
        """Ranks of one pipeline stage of one replica: ``tp * attention_dp`` (the MoE's EP spans them)."""
        return self.tp * self.attention_dp

    @property
    def replica_ranks(self) -> int:
        return self.stage_ranks * self.pp

    @property
    def ranks(self) -> int:
        return self.replica_ranks * self.replicas

    @property
    def moe_tp(self) -> int:
        """Ranks one EP rank's experts are split over (``stage_ranks / ep``)."""
        return max(1, self.stage_ranks // max(1, self.ep))


@dataclass(frozen=True)
class ServingLoad:
    """The load: requests decoded together per decode replica (`batch`), prompt and output tokens per request.

    `prefill_batch`: prompts one prefill replica (or the aggregated pool) processes together. `tpot_bound_ms`:
    the time per output token a deployment must meet (placement's objective becomes tokens/s within it).
    """

    batch: int
    prompt_tokens: int
    output_tokens: int
    prefill_batch: int = 1
    tpot_bound_ms: float | None = None

    @property
    def mean_context(self) -> float:
        """Tokens in a sequence's KV cache on average over its decode: prompt + (output - 1) / 2."""
        return self.prompt_tokens + (self.output_tokens - 1) / 2


@dataclass(frozen=True)
class ServingPlacement:
    """Rules for placing a serving job: `spread` replicas over fault domains of `spread_kind` (None: the state's
    first fault-domain kind, else the level above the host), and `ep_level` (None: the lowest level whose domains
    hold an EP group, chosen from the cluster) where each EP group is preferred to stay; `require_ep` makes that
    a hard rule."""

    spread: bool = True
    spread_kind: str | None = None
    ep_level: str | None = None
    require_ep: bool = False


@dataclass(frozen=True)
class ServingJob:
    """A deployment: the model, its pools (one aggregated, or prefill and decode), the load and placement rules."""

    name: str
    model: ServingModel
    pools: tuple[ServingPool, ...]
    load: ServingLoad
    device_kind: str | None = None
    placement: ServingPlacement = field(default_factory=ServingPlacement)

    @property
    def ranks(self) -> int:
        return sum(p.ranks for p in self.pools)

    @property
    def disaggregated(self) -> bool:
        return any(p.role == "prefill" for p in self.pools)

    def pool(self, role: str) -> ServingPool | None:
        return next((p for p in self.pools if p.role == role), None)

    @property
    def decode_pool(self) -> ServingPool:
        """The pool that decodes (the aggregated pool when there is one)."""
        return self.pool("decode") or self.pools[0]

    @property
    def prefill_pool(self) -> ServingPool:
        """The pool that prefills (the aggregated pool when there is one)."""
        return self.pool("prefill") or self.pools[0]

    def pool_offset(self, role: str) -> int:
        """The first rank of the pool of `role` (module doc)."""
        off = 0
        for p in self.pools:
            if p.role == role:
                return off
            off += p.ranks
        raise KeyError(role)


def pool_ranks(
    job: ServingJob, role: str, replica: int, stage: int = 0, dp: int | None = None
) -> tuple[int, ...]:
    """The ranks of one stage of one replica of the pool of `role` (one attention-DP rank's TP ranks if `dp`).

    >>> m = ServingModel(1e9, 1024, 4, 8, 8, 128)
    >>> j = ServingJob("s", m, (ServingPool("decode", tp=2, attention_dp=2, pp=2, replicas=2),), ServingLoad(8, 100, 10))
    >>> pool_ranks(j, "decode", 1, stage=1)
    (12, 13, 14, 15)
    >>> pool_ranks(j, "decode", 0, stage=0, dp=1)
    (2, 3)
    """
    p = next(x for x in job.pools if x.role == role)
    base = job.pool_offset(role) + replica * p.replica_ranks + stage * p.stage_ranks
    if dp is None:
        return tuple(range(base, base + p.stage_ranks))
    return tuple(range(base + dp * p.tp, base + (dp + 1) * p.tp))
