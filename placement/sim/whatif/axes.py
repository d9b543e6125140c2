"""The axes of a sweep file (``axes:``): their names, the modes and strategies they may name, and `parse_axes`,
which checks each axis into a list of values (a scalar is a list of one) and the tiers axis per level."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from placement.errors import Problems
from placement.solve import Strategy

__all__ = [
    "AXES",
    "DEFAULT_TIME_LIMIT",
    "MODES",
    "SERVING_AXES",
    "STRATEGIES",
    "Axes",
    "ServingAxes",
    "canonical_strategy",
    "is_int",
    "is_num",
    "known_strategies",
    "parse_axes",
    "parse_serving_axes",
]


DEFAULT_TIME_LIMIT = 10.0
"""The solver time limit of a point whose sweep sets none, in seconds."""

AXES: tuple[str, ...] = (
    "shapes",
    "occupancy",
    "modes",
    "seeds",
    "failed",
    "gpus_per_node",
    "nodes",
    "nodes_per_leaf",
    "tiers",
    "strategies",
    "time_limits",
)
"""The axes a sweep file may vary (under ``axes:``)."""
MODES: tuple[str, ...] = ("whole", "partial", "mixed")
"""Fragmentation modes of `placement.sim.scenarios.occupy`."""
STRATEGIES: tuple[str, ...] = ("first-fit", "kueue-tas", "slurm-tree", "slurm-block", "cpsat")
"""Strategy names, as `placement.solve.Strategy` spells them; the default of the strategies axis is every
strategy the solver knows (`known_strategies`). ``topology-greedy`` is accepted as an alias of ``kueue-tas``."""


def known_strategies() -> tuple[str, ...]:
    """The strategy names the solver knows (`placement.solve.Strategy`), in its order, aliases left out."""
    return tuple(dict.fromkeys(getattr(s, "canonical", s).value for s in Strategy))


def canonical_strategy(name: Any) -> str | None:
    """The solver's name for a strategy axis value (``topology-greedy`` -> ``kueue-tas``), None when unknown."""
    try:
        st = Strategy(name)
    except ValueError:
        return None
    return str(getattr(st, "canonical", st).value)


def _values(
    ps: Problems,
    axes: Mapping[str, Any],
    key: str,
    default: list[Any] | None,
    check: Callable[[Any], str | None],
) -> list[Any]:
    """An axis as a list (a scalar is a list of one), each value checked; an empty list is an error."""
    if key not in axes or axes[key] is None:
        return list(default or [])
    v = axes[key]
    items = v if isinstance(v, list) else [v]
    if not items:
        ps.add(
            f"axes.{key}", "is empty: the grid would have no points; give at least one value or drop the axis"
        )
        return []
    out: list[Any] = []
    for i, x in enumerate(items):
        msg = check(x)
        if msg is not None:
            ps.add(f"axes.{key}[{i}]" if isinstance(v, list) else f"axes.{key}", msg)
        else:
            out.append(x)
    if len(set(map(repr, out))) != len(out):
        ps.add(f"axes.{key}", f"lists a value twice: {items!r}")
    return out


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _fraction(x: Any) -> str | None:
    return None if is_num(x) and 0 <= x < 1 else f"must be a fraction in [0, 1), got {x!r}"


def _positive_int(x: Any) -> str | None:
    return None if is_int(x) and x >= 1 else f"must be an integer >= 1, got {x!r}"


TierOption = tuple[str, float | None, float | None]
"""One value of the tiers axis: (level name, bandwidth_gbps or None, latency_us or None)."""


@dataclass(frozen=True)
class Axes:
    """The checked values of every axis (defaults filled in); `tiers` holds one list of options per level."""

    occupancy: list[Any]
    failed: list[Any]
    modes: list[Any]
    seeds: list[Any]
    strategies: list[Any]
    time_limits: list[Any]
    gpus_per_node: list[Any]
    nodes: list[Any]
    nodes_per_leaf: list[Any]
    tiers: list[list[TierOption]]
    shapes: Any
    """The shapes axis as written (checked by `placement.sim.whatif.shapes.parse_shapes`), None when absent."""


def parse_axes(ps: Problems, value: Any, level_names: list[str] | None) -> Axes:
    """Check the ``axes:`` mapping of a sweep file into `ps`; `level_names` are the cluster's (None: unknown)."""
    axes = value or {}
    if not isinstance(axes, dict):
        ps.add("axes", f"must be a mapping of axis name to values, got {type(axes).__name__}")
        axes = {}
    for k in axes:
        if k not in AXES:
            ps.add(f"axes.{k}", f"unknown axis; known axes: {', '.join(AXES)}")

    occupancy = _values(ps, axes, "occupancy", [0.0], _fraction)
    failed = _values(ps, axes, "failed", [0.0], _fraction)
    modes = _values(
        ps,
        axes,
        "modes",
        ["whole"],
        lambda x: None if x in MODES else f"unknown mode {x!r}; known: {', '.join(MODES)}",
    )
    seeds = _values(ps, axes, "seeds", [0], lambda x: None if is_int(x) else f"must be an integer, got {x!r}")
    known = known_strategies()
    strategies = _values(
        ps,
        axes,
        "strategies",
        list(known),
        lambda x: None if canonical_strategy(x) else f"unknown strategy {x!r}; known: {', '.join(known)}",
    )
    strategies = [canonical_strategy(x) for x in strategies]
    if len(set(strategies)) != len(strategies):
        ps.add(
            "axes.strategies", f"names one strategy twice (an alias and its name): {axes.get('strategies')!r}"
        )
    time_limits = _values(
        ps,
        axes,
        "time_limits",
        [DEFAULT_TIME_LIMIT],
        lambda x: None if is_num(x) and x > 0 else f"must be a number of seconds > 0, got {x!r}",
    )
    gpn = _values(ps, axes, "gpus_per_node", [None], _positive_int)
    nodes = _values(ps, axes, "nodes", [None], _positive_int)
    npl = _values(ps, axes, "nodes_per_leaf", [None], _positive_int)
    tier_axes: list[list[TierOption]] = []
    tiers_doc = axes.get("tiers")
    if tiers_doc is not None:
        if not isinstance(tiers_doc, dict) or not tiers_doc:
            ps.add(
                "axes.tiers",
                "must map level names to lists of {bandwidth_gbps, latency_us}, e.g. {leaf: [{bandwidth_gbps: 50}]}",
            )
        else:
            for lvl, vals in tiers_doc.items():
                tp_ = f"axes.tiers.{lvl}"
                if level_names is not None and lvl not in level_names:
                    ps.add(tp_, f"unknown level; the cluster's levels are {level_names}")
                    continue
                items = vals if isinstance(vals, list) else [vals]
                if not items:
                    ps.add(tp_, "is empty: the grid would have no points")
                    continue
                opts: list[TierOption] = []
                for i, it in enumerate(items):
                    ip = f"{tp_}[{i}]"
                    if not isinstance(it, dict) or not it or set(it) - {"bandwidth_gbps", "latency_us"}:
                        ps.add(ip, f"must be a mapping with bandwidth_gbps and/or latency_us, got {it!r}")
                        continue
                    bw, lat = it.get("bandwidth_gbps"), it.get("latency_us")
                    if bw is not None and not (is_num(bw) and bw > 0):
                        ps.add(f"{ip}.bandwidth_gbps", f"must be > 0, got {bw!r}")
                        continue
                    if lat is not None and not (is_num(lat) and lat >= 0):
                        ps.add(f"{ip}.latency_us", f"must be >= 0, got {lat!r}")
                        continue
                    opts.append(
                        (str(lvl), None if bw is None else float(bw), None if lat is None else float(lat))
                    )
                tier_axes.append(opts)

    return Axes(
        occupancy=occupancy,
        failed=failed,
        modes=modes,
        seeds=seeds,
        strategies=strategies,
        time_limits=time_limits,
        gpus_per_node=gpn,
        nodes=nodes,
        nodes_per_leaf=npl,
        tiers=tier_axes,
        shapes=axes.get("shapes"),
    )


# ---- serving sweeps -------------------------------------------------------------------------------------------

SERVING_AXES: tuple[str, ...] = ("decode_tp", "decode_ep", "decode_replicas", "nodes", "gpus_per_node")
"""The axes of a serving sweep (its job is a serving job): the decode pool's TP, EP and replicas, and the cluster's
nodes and GPUs per node (`placement.sim.whatif.variants`). An absent decode axis keeps the job's value."""


@dataclass(frozen=True)
class ServingAxes:
    """The checked values of a serving sweep's axes (None: the job's own value / the base cluster)."""

    decode_tp: list[Any]
    decode_ep: list[Any]
    decode_replicas: list[Any]
    nodes: list[Any]
    gpus_per_node: list[Any]


def parse_serving_axes(ps: Problems, value: Any, base: tuple[int, int, int]) -> ServingAxes:
    """Check the ``axes:`` mapping of a serving sweep into `ps`; `base` is the job's decode (tp, ep, replicas)."""
    axes = value or {}
    if not isinstance(axes, dict):
        ps.add("axes", f"must be a mapping of axis name to values, got {type(axes).__name__}")
        axes = {}
    for k in axes:
        if k not in SERVING_AXES:
            ps.add(f"axes.{k}", f"unknown axis of a serving sweep; known axes: {', '.join(SERVING_AXES)}")
    return ServingAxes(
        decode_tp=_values(ps, axes, "decode_tp", [base[0]], _positive_int),
        decode_ep=_values(ps, axes, "decode_ep", [base[1]], _positive_int),
        decode_replicas=_values(ps, axes, "decode_replicas", [base[2]], _positive_int),
        nodes=_values(ps, axes, "nodes", [None], _positive_int),
        gpus_per_node=_values(ps, axes, "gpus_per_node", [None], _positive_int),
    )
