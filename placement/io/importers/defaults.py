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
    "set them with --tier LEVEL=GBPS:US[:OVERSUBSCRIPTION]"
)


def default_tiers(level_names: Sequence[str]) -> dict[str, tuple[float, float]]:
    """The default tier of each level, bottom-up.

    >>> default_tiers(["node", "leaf", "spine"])["spine"]
    (25.0, 7.0)
    >>> default_tiers([f"l{i}" for i in range(7)])["l6"]
    (6.25, 15.0)
    """
    return {name: DEFAULT_TIERS[min(i, len(DEFAULT_TIERS) - 1)] for i, name in enumerate(level_names)}


def apply_tier_specs(
    specs: Sequence[str],
    tiers: MutableMapping[str, tuple[float, float]],
    oversubscription: MutableMapping[str, float] | None = None,
) -> list[str]:
    """Apply ``--tier LEVEL=BANDWIDTH_GBPS[:LATENCY_US[:OVERSUBSCRIPTION]]`` flags to `tiers` (level -> (GB/s, µs))
    in place; returns the levels they set. OVERSUBSCRIPTION is the ratio of the links *into* LEVEL (the uplinks of
    the level below it): they carry 1/ratio of what the devices under them could send at LEVEL's tier, so a flow
    alone crosses at BANDWIDTH_GBPS and many flows share the uplink (`oversubscription` of the level below, set in
    `oversubscription` by the level below's name). A malformed flag, an unknown level or a value out of range is an
    InputError naming it.

    >>> t = {"node": (450.0, 2.0), "leaf": (50.0, 5.0), "spine": (25.0, 7.0)}
    >>> apply_tier_specs(["leaf=25:7"], t), t["leaf"]
    (['leaf'], (25.0, 7.0))
    >>> o = {}
    >>> apply_tier_specs(["spine=50:7:2"], t, o), t["spine"], o
    (['spine'], (50.0, 7.0), {'leaf': 2.0})
    >>> apply_tier_specs(["core=10"], t)
    Traceback (most recent call last):
    ...
    placement.errors.InputError: --tier 'core=10': unknown level 'core'; levels are ['node', 'leaf', 'spine']
    """
    done: list[str] = []
    names = list(tiers)
    for spec in specs:
        name, _, val = spec.partition("=")
        bw, _, rest = val.partition(":")
        lat, _, ratio = rest.partition(":")
        where = f"--tier {spec!r}"
        try:
            b, l_, o = float(bw), float(lat or 0), float(ratio or 1)
        except ValueError:
            raise InputError(
                where,
                [
                    Problem(
                        "",
                        "write LEVEL=BANDWIDTH_GBPS:LATENCY_US[:OVERSUBSCRIPTION], e.g. leaf=50:5 or spine=50:7:2",
                    )
                ],
            ) from None
        if name not in tiers:
            raise InputError(where, [Problem("", f"unknown level {name!r}; levels are {names}")])
        if not (math.isfinite(b) and math.isfinite(l_)) or b <= 0 or l_ < 0:
            raise InputError(
                where, [Problem("", f"bandwidth {bw} must be > 0 and latency {lat or 0} must be >= 0")]
            )
        if ratio:
            if not math.isfinite(o) or o <= 0 or o > 1e3:  # the cluster file's rule for the level's field
                raise InputError(where, [Problem("", f"oversubscription {ratio} must be > 0 and <= 1,000")])
            if oversubscription is None:
                raise InputError(
                    where, [Problem("", "this command takes no oversubscription; write LEVEL=GBPS:US")]
                )
            if names.index(name) == 0:
                raise InputError(
                    where, [Problem("", f"the lowest level {name!r} has no links into it to oversubscribe")]
                )
            oversubscription[names[names.index(name) - 1]] = o
        tiers[name] = (b, l_)
        done.append(name)
    return done
