"""Compute side of a training step: device kinds looked up by name, model FLOPs, MFU, pipeline bubble, activations.

Owns the numbers that turn exposed communication into a step time (`placement.cost.step`) and the memory check of what-if.

Formulas (notation of `placement.model.traffic`; T tokens per step = b * s * m * dp, N active parameters):

- **Model FLOPs per step** (Kaplan et al. 2020; Narayanan et al. 2021, sec. 5.1, "72 B s L h^2 (1 + s/6h)"):
  ``6 N T + 12 L s h T`` (dense matmuls forward + backward, plus attention scores QK^T and AV). With full
  activation recomputation the forward runs twice: ``8 N T + 16 L s h T`` executed FLOPs (the model FLOPs used
  for the reported MFU stay ``6 N T + 12 L s h T``). For MoE, N counts the dense parameters plus the experts a
  token visits: ``(P - P_e) + P_e * top_k / experts``.
- **Compute time**: executed FLOPs / (devices * peak * `ModelShape.mfu`), MFU 0.4 by default (Megatron-LM reports
  0.4-0.5 on A100/H100: Narayanan et al. 2021, table 1; Korthikanti et al. 2022, table 4).
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
    "ComputeModel",
    "activation_bytes",
    "activation_bytes_per_microbatch",
    "device_kind",
    "device_memory_bytes",
    "job_device_kind",
    "model_flops",
    "step_compute",
    "tokens_per_step",
    "tree_channel_gbps",
]

DEFAULT_MFU = 0.4


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
    "B200": (70.0, 42.8, 24.0),
    "GB200": (70.0, 42.8, 24.0),
}


def tree_channel_gbps(
    kind: str | None, topology: Topology | None = None
) -> tuple[float, float, float] | None:
    """NCCL's per-channel tree bus bandwidth cap (1, 2, more hosts) for devices of `kind`; None when NCCL's table
    has no row for it (AMD, user kinds): `placement.cost.collectives` prices their trees by links alone."""
    dk = device_kind(kind, topology)
    return None if dk is None else _TREE_CHANNEL_GBPS.get(dk.name.upper())


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


def step_compute(model: ModelShape, parallel: ParallelSpec, kind: DeviceKind) -> ComputeModel:
    """Compute and bubble seconds per step of `model` under `parallel` on devices of `kind`."""
    world = parallel.world_size
    executed = model_flops(model, parallel, executed=True)
    mfu = model.mfu if model.mfu > 0 else DEFAULT_MFU
    compute = executed / (world * kind.tflops * 1e12 * mfu)
    m = max(1, model.micro_batches)
    bubble = (parallel.pp - 1) / m * compute
    per_mb = compute / m
    bwd_share = 6.0 / 8.0 if model.recompute else 2.0 / 3.0
    return ComputeModel(kind, compute, bubble, model_flops(model, parallel), executed, bwd_share * per_mb)


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
