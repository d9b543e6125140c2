"""The defaults every importer applies when its source is silent: link tiers per level, devices per node, device
kind. One place, so that `placement import ...` commands and request files agree.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DEFAULT_DEVICES_PER_NODE", "DEFAULT_KIND", "DEFAULT_TIERS", "TIERS_NOTE", "default_tiers"]

DEFAULT_TIERS: tuple[tuple[float, float], ...] = ((450.0, 2.0), (50.0, 5.0), (25.0, 7.0), (12.5, 10.0), (6.25, 15.0))
"""(bandwidth GB/s, latency µs) bottom-up: an H100 NVLink node, a 400G fabric, then 2:1 per tier above the leaf;
levels above the fifth keep the last tier."""

DEFAULT_DEVICES_PER_NODE = 8
DEFAULT_KIND = "gpu"

TIERS_NOTE = ("link tiers are defaults (H100 node, 400G fabric, 2:1 per tier above the leaf); "
              "set them with --tier LEVEL=GBPS:US")


def default_tiers(level_names: Sequence[str]) -> dict[str, tuple[float, float]]:
    """The default tier of each level, bottom-up.

    >>> default_tiers(["node", "leaf", "spine"])["spine"]
    (25.0, 7.0)
    >>> default_tiers([f"l{i}" for i in range(7)])["l6"]
    (6.25, 15.0)
    """
    return {name: DEFAULT_TIERS[min(i, len(DEFAULT_TIERS) - 1)] for i, name in enumerate(level_names)}
