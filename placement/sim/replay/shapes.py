"""The rule that turns a trace job's GPU count into a parallel shape and a model (traces rarely say either).
Owns `ShapeRule` (parsed from ``--shape-rule``) and `job_for`, which builds the `Job` with the one builder
(`placement.model.presets`: the presets table and `structured_job`).
"""

from __future__ import annotations

from dataclasses import dataclass

from placement.errors import InputError, Problem
from placement.model.job import Job, ParallelSpec
from placement.model.presets import preset_model, structured_job
from placement.sim.whatif.shapes import Shape

__all__ = ["MODELS", "ShapeRule", "job_for", "parse_shape_rule"]

MODELS: tuple[str, ...] = ("1b", "7b", "13b", "30b", "70b")
"""The model presets a trace class or row names (`placement.model.presets.MODEL_PRESETS`: Llama-class shapes)."""


@dataclass(frozen=True)
class ShapeRule:
    """How a job of `gpus` GPUs is shaped when its trace row gives only the count.

    - TP: the largest divisor of `gpus` that is <= `tp_max` (0: one node's devices), so TP stays in a node;
    - PP: `pp` when the job has >= `pp_from` GPUs and pp divides what TP leaves (else 1);
    - DP: the rest.
    - model: by size class, the first ``(max_gpus, model)`` of `classes` with gpus <= max_gpus;
    - `tp_in_node`: ``prefer`` (default: TP groups should stay in a node, a soft rule the solver may break when
      no node has room) or ``require`` (a hard rule: a TP group never spans nodes; the job waits instead).
    """

    tp_max: int = 0
    pp: int = 1
    pp_from: int = 0
    classes: tuple[tuple[int, str], ...] = ((8, "7b"), (64, "13b"), (1 << 30, "70b"))
    micro_batches: int = 8
    tp_in_node: str = "prefer"

    def shape(self, gpus: int, gpus_per_node: int) -> Shape:
        cap = self.tp_max or gpus_per_node
        tp = max(d for d in range(1, min(cap, gpus) + 1) if gpus % d == 0)
        rest = gpus // tp
        pp = self.pp if (self.pp > 1 and self.pp_from and gpus >= self.pp_from and rest % self.pp == 0) else 1
        return Shape(tp=tp, dp=rest // pp, pp=pp)

    def model(self, gpus: int) -> str:
        for limit, name in self.classes:
            if gpus <= limit:
                return name
        return self.classes[-1][1]

    def describe(self) -> str:
        cls = ", ".join(f"<= {g} GPUs: {m}" if g < (1 << 30) else f"larger: {m}" for g, m in self.classes)
        pp = f"pp={self.pp} from {self.pp_from} GPUs" if self.pp > 1 and self.pp_from else "pp=1"
        tp = "TP required in a node" if self.tp_in_node == "require" else "TP preferred in a node"
        return f"tp <= {self.tp_max or 'one node'}, {pp}, dp = the rest; model {cls}; {tp}"


def parse_shape_rule(text: str | None) -> ShapeRule:
    """``tp_max=8,pp=4,pp_from=256,classes=8:7b/64:13b/inf:70b,micro_batches=8,tp_in_node=require`` (every key
    optional)."""
    if not text:
        return ShapeRule()
    kw: dict[str, object] = {}
    probs: list[Problem] = []
    for part in text.split(","):
        if not part.strip():
            continue
        key, _, val = part.partition("=")
        key, val = key.strip(), val.strip()
        if key in ("tp_max", "pp", "pp_from", "micro_batches"):
            try:
                n = int(val)
            except ValueError:
                probs.append(Problem(key, f"must be an integer, got {val!r}"))
                continue
            if n < (0 if key in ("tp_max", "pp_from") else 1):
                probs.append(Problem(key, f"must be >= {0 if key in ('tp_max', 'pp_from') else 1}, got {n}"))
            kw[key] = n
        elif key == "classes":
            classes: list[tuple[int, str]] = []
            for c in val.split("/"):
                lim, _, model = c.partition(":")
                if model not in MODELS:
                    probs.append(
                        Problem("classes", f"unknown model {model!r} in {c!r}; models are {list(MODELS)}")
                    )
                    continue
                try:
                    classes.append((1 << 30 if lim in ("inf", "*") else int(lim), model))
                except ValueError:
                    probs.append(Problem("classes", f"{c!r}: the GPU limit must be an integer or inf"))
            kw["classes"] = tuple(sorted(classes))
        elif key == "tp_in_node":
            if val not in ("prefer", "require"):
                probs.append(Problem(key, f"must be prefer or require, got {val!r}"))
            kw[key] = val
        else:
            probs.append(
                Problem(
                    key or "<empty>",
                    "unknown key; keys are tp_max, pp, pp_from, classes, micro_batches, tp_in_node",
                )
            )
    if probs:
        raise InputError("--shape-rule", probs)
    return ShapeRule(**kw)  # type: ignore[arg-type]


def job_for(
    name: str,
    gpus: int,
    rule: ShapeRule,
    *,
    gpus_per_node: int,
    kind: str | None,
    shape: Shape | None = None,
    model: str | None = None,
    node_level: str = "node",
) -> Job:
    """The structured job a trace row stands for: its own shape and model when the row has them, else the rule's.
    TP prefers (or with ``tp_in_node=require`` must keep to) one domain of `node_level`; the global batch is
    `micro_batches` x DP."""
    s = shape or rule.shape(gpus, gpus_per_node)
    model_shape = preset_model(
        model or rule.model(gpus), pp=s.pp, micro_batches=max(rule.micro_batches, s.pp)
    )
    par = ParallelSpec(tp=s.tp, cp=s.cp, ep=s.ep, dp=s.dp, pp=s.pp)
    return structured_job(
        name, par, model_shape, kind=kind, tp_level=node_level, tp_rule=rule.tp_in_node, exposure={"dp": 0.5}
    )
