"""The defaults every importer applies when its source is silent: link tiers per level, devices per node, device
kind. One place, so that `placement import ...` commands and request files agree.
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping, Sequence

from placement.errors import InputError, Problem

__all__ = [
    "DEFAULT_DEVICES_PER_NODE",
    "DEFAULT_KIND",
    "DEFAULT_TIERS",
    "TIERS_NOTE",
    "apply_tier_specs",
    "default_tiers",
]

DEFAULT_TIERS: tuple[tuple[float, float], ...] = (
    (450.0, 2.0),
    (50.0, 5.0),
    (25.0, 7.0),
    (12.5, 10.0),
    (6.25, 15.0),
)
"""(bandwidth GB/s, latency µs) bottom-up: an H100 NVLink node, a 400G fabric, then 2:1 per tier above the leaf;
levels above the fifth keep the last tier."""

DEFAULT_DEVICES_PER_NODE = 8
DEFAULT_KIND = "gpu"

TIERS_NOTE = (
    "link tiers are defaults (H100 node, 400G fabric, 2:1 per tier above the leaf); "
    "set them with --tier LEVEL=GBPS:US"
)


def default_tiers(level_names: Sequence[str]) -> dict[str, tuple[float, float]]:
    """The default tier of each level, bottom-up.

    >>> default_tiers(["node", "leaf", "spine"])["spine"]
    (25.0, 7.0)
    >>> default_tiers([f"l{i}" for i in range(7)])["l6"]
    (6.25, 15.0)
    """
    return {name: DEFAULT_TIERS[min(i, len(DEFAULT_TIERS) - 1)] for i, name in enumerate(level_names)}


def apply_tier_specs(specs: Sequence[str], tiers: MutableMapping[str, tuple[float, float]]) -> list[str]:
    """Apply ``--tier LEVEL=BANDWIDTH_GBPS[:LATENCY_US]`` flags to `tiers` (level -> (GB/s, µs)) in place; returns
    the levels they set. A malformed flag, an unknown level or a value out of range is an InputError naming it.

    >>> t = {"node": (450.0, 2.0), "leaf": (50.0, 5.0)}
    >>> apply_tier_specs(["leaf=25:7"], t), t["leaf"]
    (['leaf'], (25.0, 7.0))
    >>> apply_tier_specs(["spine=10"], t)
    Traceback (most recent call last):
    ...
    placement.errors.InputError: --tier 'spine=10': unknown level 'spine'; levels are ['node', 'leaf']
    """
    done: list[str] = []
    for spec in specs:
        name, _, val = spec.partition("=")
        bw, _, lat = val.partition(":")
        where = f"--tier {spec!r}"
        try:
            b, l_ = float(bw), float(lat or 0)
        except ValueError:
            raise InputError(
                where, [Problem("", "write LEVEL=BANDWIDTH_GBPS:LATENCY_US, e.g. leaf=50:5")]
            ) from None
        if name not in tiers:
            raise InputError(where, [Problem("", f"unknown level {name!r}; levels are {list(tiers)}")])
        if not (math.isfinite(b) and math.isfinite(l_)) or b <= 0 or l_ < 0:
            raise InputError(where, [Problem("", "bandwidth must be > 0 and latency >= 0")])
        tiers[name] = (b, l_)
        done.append(name)
    return done
