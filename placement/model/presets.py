"""Model presets (name -> hidden size, layers, parameters) and the one builder of a structured job from a parallel
shape and a model: `preset_model`, `structured_job`. Replay, capacity's --shape and the scenarios all use them.

A preset states its model's real parameter count; a model given only by its sizes counts ``12 h^2 L``
(`dense_parameters`, the attention and MLP weights of a dense transformer layer). Heads are the model shape's
default, ``hidden / 128``, which every preset's real head count matches except ``1b`` (GPT-3 XL's 24; activation
memory only, not traffic).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from placement.model.job import Constraints, Job, ModelShape, ParallelSpec

__all__ = [
    "MODEL_PRESETS",
    "ModelPreset",
    "dense_parameters",
    "pipeline_layers",
    "preset_model",
    "structured_job",
]


@dataclass(frozen=True)
class ModelPreset:
    """A dense transformer: hidden size, layers and its parameter count."""

    hidden: int
    layers: int
    parameters: float


MODEL_PRESETS: Mapping[str, ModelPreset] = {
    # Llama-class shapes (GPT-3 XL for 1b): the parameter counts their papers state
    "1b": ModelPreset(2048, 24, 1.3e9),
    "7b": ModelPreset(4096, 32, 6.7e9),
    "13b": ModelPreset(5120, 40, 13.0e9),
    "30b": ModelPreset(6656, 60, 32.5e9),
    "70b": ModelPreset(8192, 80, 70.0e9),
    # `placement capacity --shape`'s model since its first release: the 7b shape with a round 7e9 parameters,
    # kept so that the steps capacity reports (and bench/capacity.py) do not move
    "7b-round": ModelPreset(4096, 32, 7e9),
}
"""Model presets by name; `replay`'s trace classes and models name the first five."""


def dense_parameters(hidden: int, layers: int) -> float:
    """The parameters of `layers` dense transformer layers of width `hidden`: ``12 h^2 L`` (QKV and output
    projections 4 h^2, a 4h-wide MLP 8 h^2; embeddings left out)."""
    return 12.0 * hidden * hidden * layers


def pipeline_layers(layers: int, pp: int) -> int:
    """`layers` rounded up to a multiple of `pp`, so that each pipeline stage holds the same number."""
    return pp * math.ceil(layers / pp)


def preset_model(
    preset: str | ModelPreset, *, pp: int = 1, micro_batches: int, seq_len: int = 4096
) -> ModelShape:
    """The model shape of a preset (by name or given) on `pp` pipeline stages: its layers rounded up to a
    multiple of `pp`, micro-batch 1, 2-byte elements."""
    p = MODEL_PRESETS[preset] if isinstance(preset, str) else preset
    return ModelShape(
        parameters=p.parameters,
        hidden=p.hidden,
        layers=pipeline_layers(p.layers, pp),
        seq_len=seq_len,
        micro_batch=1,
        micro_batches=micro_batches,
        bytes_per_element=2,
    )


def structured_job(
    name: str,
    parallel: ParallelSpec,
    model: ModelShape,
    *,
    kind: str | None,
    tp_level: str = "node",
    tp_rule: str = "prefer",
    exposure: Mapping[str, float] | None = None,
) -> Job:
    """A structured job of `parallel` x `model` on devices of `kind` (None: any): TP groups ``prefer`` (a soft
    rule) or ``require`` (a hard one) one domain of `tp_level`; `exposure` per group label (default: none)."""
    if tp_rule not in ("prefer", "require"):
        raise ValueError(f"structured_job: tp_rule must be prefer or require, got {tp_rule!r}")
    rule = {"tp": tp_level}
    cons = Constraints(require=rule) if tp_rule == "require" else Constraints(prefer=rule)
    return Job(name, parallel.world_size, kind, parallel, model, dict(exposure or {}), constraints=cons)
