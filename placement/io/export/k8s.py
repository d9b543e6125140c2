"""Kubernetes manifests (stub until the k8s format lands)."""

from __future__ import annotations

from collections.abc import Sequence

from placement.io.export.common import ExportOptions, refuse
from placement.io.export.document import Seat
from placement.topology import Topology

__all__ = ["k8s_manifests"]


def k8s_manifests(seats: Sequence[Seat], opts: ExportOptions, topology: Topology | None) -> str:
    raise refuse("k8s", "not implemented yet")
