"""Compute side of a training step: device kinds looked up by name, model FLOPs, MFU, pipeline bubble, activations.

Owns the numbers that turn exposed communication into a step time (`placement.cost.step`) and the memory check of what-if.

Formulas (notation of `placement.model.traffic`; T tokens per step = b * s * m * dp, N active parameters):

- **Model FLOPs per step** (Kaplan et al. 2020; Narayanan et al. 2021, sec. 5.1, "72 B s L h^2 (1 + s/6h)"):
  ``6 N T + 12 L s h T`` (dense matmuls forward + backward, plus attention scores QK^T and AV). With full
  activation recomputation the forward runs twice: ``8 N T + 16 L s h T`` executed FLOPs (the model FLOPs used
  for the reported MFU stay ``6 N T + 12 L s h T``). For MoE, N counts the dense parameters plus the experts a
  token visits: ``(P - P_e) + P_e * top_k / experts``.
- **Compute time**: executed FLOPs / (devices * peak * GEMM efficiency). The efficiency is the fraction of peak the
  layer's kernels reach on one device (`gemm_efficiency`): by device kind, ``e_kind * w / (w + w_half)`` with
  ``w = hidden / tp`` the width of the device's weight shards (thin shards keep the tensor cores busy for
  less of the time). A job that states its own `ModelShape.mfu` (anything but the default 0.4, e.g. what
  ``placement calibrate step`` fitted) uses that instead. The MFU a report gives is computed from the resulting
  step (model FLOPs / (step * devices * peak)), so communication, bubble and optimizer lower it once.
- **Optimizer step** (after the gradient reduce): memory bound, Adam with fp32 master weights reads and writes
  ``OPTIMIZER_BYTES_PER_PARAMETER`` = 30 bytes per parameter a device holds (parameters, gradients, two moments,
  the 16-bit copy) at ``OPTIMIZER_MEMORY_EFFICIENCY`` of the device's memory bandwidth. It is part of
  `ComputeModel.compute_seconds` (and so of the bubble's base: ``(p-1)/m`` of a few ms too many, kept so that
  compute is one number for the step, the bubble and `placement.solve.bound`'s step bound alike).
- **Pipeline bubble** (1F1B, Narayanan et al. 2021 sec. 2.2): ``(p - 1) / m`` of the compute time
  (`ComputeModel.bubble_seconds`; `placement.cost.step` adds the per-micro-batch communication to it).
- **Activation memory per micro-batch and stage** (Korthikanti et al. 2022, eq. 2 with tensor and sequence
  parallelism): ``L/pp * (s/cp) * b * h * (34 + 5 a (s/cp) / h) / tp`` bytes (16-bit activations, a heads); with
  full recomputation only each layer's input is kept: ``L/pp * 2 (s/cp) b h / tp``. 1F1B holds up to
  ``min(pp, m)`` micro-batches in flight on the first stage.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from placement.model.devices import DEVICE_KINDS, DeviceKind
from placement.model.job import ModelShape, ParallelSpec
from placement.model.topology import Topology

__all__ = [
    "DEFAULT_MFU",
    "OPTIMIZER_BYTES_PER_PARAMETER",
    "ComputeModel",
    "activation_bytes",
    "activation_bytes_per_microbatch",
    "device_kind",
    "device_memory_bytes",
    "gemm_efficiency",
    "gradient_bytes",
    "hbm_gbps",
    "job_device_kind",
    "model_flops",
    "nccl_generation",
    "step_compute",
    "tokens_per_step",
    "tree_channel_gbps",
]

DEFAULT_MFU = 0.4
"""`ModelShape.mfu`'s default: a job that leaves it there gets the kind's GEMM efficiency (`gemm_efficiency`)."""

# Per device kind: (e_kind, the fraction of peak a transformer layer's kernels reach on wide shards; w_half, the
# shard width hidden/tp at which they reach half of it; memory GB/s). e_kind from single-device or small-scale
# layer throughput: V100 39 TFLOP/s of 125 at h 1536 on one GPU (Shoeybi et al. 2019, sec. 5.1); A100 up to 163 of
# 312 end to end at scale (Narayanan et al. 2021, table 1), so ~0.6 for the layer alone; H100/H200 ~0.6 (Megatron-
# Core's 0.47-0.55 end-to-end MFU for GPT-175B and Llama-70B at scale); B200/GB200 and MI300X lower (younger
# kernels). w_half grows with the tensor cores' tile appetite. Memory: the vendors' datasheets (HBM GB/s).
_GEMM: Mapping[str, tuple[float, float, float]] = {
    "V100": (0.32, 64.0, 900.0),
    "A100": (0.60, 256.0, 2039.0),
    "H100": (0.60, 384.0, 3350.0),
    "H800": (0.60, 384.0, 3350.0),
    "H200": (0.60, 384.0, 4800.0),
    "B200": (0.50, 512.0, 8000.0),
    "GB200": (0.50, 512.0, 8000.0),
    "MI300X": (0.40, 384.0, 5300.0),
    "L40S": (0.50, 256.0, 864.0),
}
_GEMM_OTHER = (0.50, 256.0, 2000.0)  # a kind NCCL and the table do not know (a cluster file's own kind)
OPTIMIZER_BYTES_PER_PARAMETER = 30.0
"""Adam, fp32 master weights: read 16 (weight, gradient, 2 moments), write 14 (weight, 2 moments, 16-bit copy)."""
OPTIMIZER_MEMORY_EFFICIENCY = 0.8
"""Share of the memory bandwidth an elementwise optimizer kernel streams at."""


def gemm_efficiency(kind: DeviceKind, hidden: int, tp: int) -> float:
    """Fraction of `kind`'s peak a layer's kernels reach with weight shards ``hidden / tp`` wide (module doc)."""
    e, w_half, _ = _GEMM.get(kind.name.upper(), _GEMM_OTHER)
    w = max(1.0, hidden / max(1, tp))
    return e * w / (w + w_half)


def device_kind(kind: str | None, topology: Topology | None = None) -> DeviceKind | None:
    """The device kind named `kind`: the cluster's own kinds first, then the built-in table.

    Case-insensitive; a name with a suffix after ``-``, ``_`` or a space (``H100-80GB``, ``a100_sxm``) matches
    its first word. None when unknown (``gpu``).
    """
    if kind is None:
        return None
    own: Mapping[str, DeviceKind] = topology.device_kinds if topology is not None else {}
    for table in (own, DEVICE_KINDS):
        if kind in table:
            return table[kind]
        upper = {k.upper(): v for k, v in table.items()}
        key = kind.strip().upper()
        if key in upper:
            return upper[key]
        head = re.split(r"[-_ ]", key, maxsplit=1)[0]
        if head in upper:
            return upper[head]
    return None


# NCCL's perChMaxTreeBws: bus GB/s one tree channel carries at most with 1, 2 and more hosts, by generation
# (Volta; Ampere incl. sm89; Hopper; Blackwell): github.com/NVIDIA/nccl src/graph/tuning.cc @ 5067397c.
_TREE_CHANNEL_GBPS: Mapping[str, tuple[float, float, float]] = {
    "V100": (26.5, 18.5, 10.0),
    "A100": (24.0, 23.6, 17.8),
    "L40S": (24.0, 23.6, 17.8),
    "H100": (38.7, 41.4, 36.0),
    "H200": (38.7, 41.4, 36.0),
    "H800": (38.7, 41.4, 36.0),
    "B200": (70.0, 42.8, 24.0),
    "GB200": (70.0, 42.8, 24.0),
}


_GENERATION: Mapping[str, str] = {
    "V100": "volta",
    "A100": "ampere",
    "L40S": "ampere",
    "H100": "hopper",
    "H200": "hopper",
    "B200": "blackwell",
    "GB200": "blackwell",
}


def nccl_generation(kind: str | None, topology: Topology | None = None) -> str | None:
    """The row of NCCL's tuner tables devices of `kind` use (``volta``, ``ampere``, ``hopper``, ``blackwell``);
    None for kinds NCCL does not tune (AMD, a cluster's own kinds)."""
    dk = device_kind(kind, topology)
    return None if dk is None else _GENERATION.get(dk.name.upper())


def tree_channel_gbps(
    kind: str | None, topology: Topology | None = None
) -> tuple[float, float, float] | None:
    """NCCL's per-channel tree bus bandwidth cap (1, 2, more hosts) for devices of `kind`; None when NCCL's table
    has no row for it (AMD, user kinds): `placement.cost.collectives` prices their trees by links alone."""
    dk = device_kind(kind, topology)
    return None if dk is None else _TREE_CHANNEL_GBPS.get(dk.name.upper())


def hbm_gbps(kind: DeviceKind) -> float:
    """Memory (HBM) bandwidth of one device of `kind` in GB/s, from the vendors' datasheets (NVIDIA H100 and H800
    SXM 3.35 TB/s, A100 80 GB SXM 2.04 TB/s, H200 4.8 TB/s, HGX B200 and GB200 NVL72 8 TB/s per GPU); a kind the
    table does not know gets 2 TB/s. The serving step reads weights and KV cache at it (`placement.cost.serving`)."""
    return _GEMM.get(kind.name.upper(), _GEMM_OTHER)[2]


def device_memory_bytes(kind: str | None, topology: Topology | None = None) -> float | None:
    """Memory of one device of `kind` in bytes, or None when the kind is unknown."""
    dk = device_kind(kind, topology)
    return None if dk is None else dk.memory_gb * 1e9


def job_device_kind(topology: Topology, devices: Iterable[int]) -> DeviceKind | None:
    """The slowest kind among `devices` (it paces every synchronous step); None if any kind is unknown."""
    worst: DeviceKind | None = None
    for name in {topology.devices[d].kind for d in devices}:
        dk = device_kind(name, topology)
        if dk is None:
            return None
        if worst is None or dk.tflops < worst.tflops:
            worst = dk
    return worst


def _active_parameters(model: ModelShape) -> float:
    if model.experts > 0 and model.expert_parameters > 0:
        share = min(1.0, max(model.top_k, 1) / model.experts)
        return model.parameters - model.expert_parameters + model.expert_parameters * share
    return model.parameters


def tokens_per_step(model: ModelShape, parallel: ParallelSpec) -> float:
    """Tokens one step trains on: micro_batch * seq_len * micro_batches * dp."""
    return float(model.micro_batch * model.seq_len * model.micro_batches * parallel.dp)


def model_flops(model: ModelShape, parallel: ParallelSpec, *, executed: bool = False) -> float:
    """FLOPs per step: ``6 N T + 12 L s h T``; with `executed` and recomputation ``8 N T + 16 L s h T``."""
    t = tokens_per_step(model, parallel)
    factor = 8.0 if executed and model.recompute else 6.0
    return (
        factor * _active_parameters(model) * t
        + 2.0 * factor * model.layers * model.seq_len * model.hidden * t
    )


@dataclass(frozen=True)
class ComputeModel:
    """Compute of one step on one device kind: busy seconds, bubble seconds, and the FLOPs behind them."""

    kind: DeviceKind
    compute_seconds: float
    bubble_seconds: float
    model_flops: float
    executed_flops: float
    backward_seconds_per_microbatch: float
    """Backward (and recomputed forward) compute of one micro-batch on one stage: what a gradient reduce can
    hide behind."""
    efficiency: float = DEFAULT_MFU
    """The fraction of peak the compute kernels run at (`gemm_efficiency`, or the job's own `ModelShape.mfu`)."""
    optimizer_seconds: float = 0.0
    """The optimizer step after the gradient reduce (memory bound, module doc), included in `compute_seconds`."""
    gradient_bytes: float = 0.0
    """Gradient bytes one device reduces per step (dense and expert parameters it holds)."""


def gradient_bytes(model: ModelShape, parallel: ParallelSpec) -> float:
    """Gradient bytes one device holds and reduces per step (the DP groups of `placement.model.traffic`)."""
    g = model.grad_bytes_per_element or model.bytes_per_element
    dense = model.parameters - model.expert_parameters
    out = max(0.0, dense) / (parallel.tp * parallel.pp) * g
    if parallel.ep > 1 and model.expert_parameters > 0:
        out += model.expert_parameters / (parallel.tp * parallel.pp * parallel.ep) * g
    elif model.expert_parameters > 0:
        out += model.expert_parameters / (parallel.tp * parallel.pp) * g
    return out


def step_compute(model: ModelShape, parallel: ParallelSpec, kind: DeviceKind) -> ComputeModel:
    """Compute, bubble and optimizer seconds per step of `model` under `parallel` on devices of `kind`."""
    world = parallel.world_size
    executed = model_flops(model, parallel, executed=True)
    if model.mfu > 0 and model.mfu != DEFAULT_MFU:
        eff = model.mfu
    else:
        eff = gemm_efficiency(kind, model.hidden, parallel.tp)
    layers = executed / (world * kind.tflops * 1e12 * eff)
    local_params = model.parameters / (parallel.tp * parallel.pp)
    if parallel.ep > 1 and model.expert_parameters > 0:
        local_params -= model.expert_parameters * (1 - 1 / parallel.ep) / (parallel.tp * parallel.pp)
    mem = _GEMM.get(kind.name.upper(), _GEMM_OTHER)[2] * 1e9 * OPTIMIZER_MEMORY_EFFICIENCY
    if model.distributed_optimizer:  # each DP rank updates its 1/dp shard of the parameters
        local_params /= parallel.dp
    optimizer = local_params * OPTIMIZER_BYTES_PER_PARAMETER / mem
    compute = layers + optimizer
    m = max(1, model.micro_batches)
    bubble = (parallel.pp - 1) / m * compute
    bwd_share = 6.0 / 8.0 if model.recompute else 2.0 / 3.0
    return ComputeModel(
        kind,
        compute,
        bubble,
        model_flops(model, parallel),
        executed,
        bwd_share * layers / m,
        eff,
        optimizer,
        gradient_bytes(model, parallel),
    )


def activation_bytes_per_microbatch(model: ModelShape, parallel: ParallelSpec) -> float:
    """Activation bytes one device keeps for one micro-batch of its stage (Korthikanti et al. 2022, eq. 2)."""
    s = model.seq_len / parallel.cp
    layers = model.layers / parallel.pp
    b, h = model.micro_batch, model.hidden
    if model.recompute:
        return layers * 2.0 * s * b * h / parallel.tp
    heads = model.heads if model.heads > 0 else max(1, h // 128)
    return layers * s * b * h * (34.0 + 5.0 * heads * s / h) / parallel.tp


def activation_bytes(model: ModelShape, parallel: ParallelSpec) -> float:
    """Peak activation bytes per device under 1F1B: ``min(pp, m)`` micro-batches in flight on the first stage."""
    return activation_bytes_per_microbatch(model, parallel) * min(parallel.pp, model.micro_batches)
