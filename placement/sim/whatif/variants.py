"""Cluster variants of a what-if sweep: overrides of the base cluster document (GPUs per node, nodes, nodes per
leaf, link tiers) and the effective values the results CSV records. Owns `Variant` and `apply_variant`;
`placement.sim.whatif` re-exports `Variant`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement.errors import Problems
from placement.model.topology import Topology

__all__ = ["Variant", "apply_variant", "tier_names", "variant_info"]


@dataclass(frozen=True)
class Variant:
    """One cluster variant: overrides applied to the base cluster document before it is built."""

    gpus_per_node: int | None = None
    nodes: int | None = None
    nodes_per_leaf: int | None = None
    tiers: tuple[tuple[str, float | None, float | None], ...] = ()
    """(level, bandwidth GB/s or None, latency µs or None) per overridden level."""

    @property
    def label(self) -> str:
        parts = [
            f"{k}={v}"
            for k, v in (
                ("gpus_per_node", self.gpus_per_node),
                ("nodes", self.nodes),
                ("nodes_per_leaf", self.nodes_per_leaf),
            )
            if v is not None
        ]
        for lvl, bw, lat in self.tiers:
            parts.append(f"{lvl}={'' if bw is None else f'{bw:g}'}/{'' if lat is None else f'{lat:g}'}")
        return ", ".join(parts) or "base"


def apply_variant(
    doc: Mapping[str, Any], v: Variant, level_names: Sequence[str], ps: Problems
) -> dict[str, Any]:
    """The cluster document with the variant's overrides (problems name the axis that cannot apply)."""
    d: dict[str, Any] = copy.deepcopy(dict(doc))
    for lvl, bw, lat in v.tiers:
        for entry in d.get("levels") or []:
            if isinstance(entry, dict) and entry.get("name") == lvl:
                if bw is not None:
                    entry["bandwidth_gbps"] = bw
                if lat is not None:
                    entry["latency_us"] = lat
    gens = d.get("generate")
    gen_list = [gens] if isinstance(gens, dict) else gens if isinstance(gens, list) else []
    if v.gpus_per_node is not None:
        n = v.gpus_per_node
        for nt in d.get("node_types") or []:
            if not isinstance(nt, dict):
                continue
            if nt.get("matrix") is not None or nt.get("nvidia_smi") is not None:
                ps.add(
                    "axes.gpus_per_node",
                    f"node type {nt.get('name')!r} has an intra-node matrix for its own device count; it cannot be resized",
                )
                continue
            nt["devices"] = n
            if nt.get("rails") is not None:
                nt["rails"] = list(range(n))  # one NIC per GPU, as before
        for entry in [*gen_list, *(d.get("hosts") or [])]:
            if isinstance(entry, dict) and entry.get("node_type") is None:
                entry["devices"] = n
    if v.nodes is not None or v.nodes_per_leaf is not None:
        axis = "axes.nodes" if v.nodes is not None else "axes.nodes_per_leaf"
        if len(gen_list) != 1 or not isinstance(gen_list[0], dict) or d.get("hosts"):
            ps.add(
                axis,
                "needs a cluster made by exactly one `generate` entry (hosts listed one by one are not resized)",
            )
            return d
        g = gen_list[0]
        fan = dict(g.get("fanout") or {})
        if v.nodes is not None:
            g["nodes"] = v.nodes
        if v.nodes_per_leaf is not None:
            if len(level_names) < 2:
                ps.add("axes.nodes_per_leaf", "the cluster has no level above the hosts")
                return d
            fan[level_names[1]] = v.nodes_per_leaf
        if len(level_names) > 2 or v.nodes_per_leaf is None:
            fan.pop(level_names[-1], None)  # the top level holds whatever is below it
        g["fanout"] = fan
    return d


def variant_info(topo: Topology) -> dict[str, str]:
    per_node = {nt.devices for nt in topo.host_types}
    info = {
        "gpus_per_node": str(per_node.pop()) if len(per_node) == 1 else "mixed",
        "nodes": str(len(topo.host_names)),
        "nodes_per_leaf": "",
    }
    if len(topo.levels) > 1:
        fan = {len(c) for c in topo.children[1]}
        info["nodes_per_leaf"] = str(fan.pop()) if len(fan) == 1 else "mixed"
    for lv in topo.levels:
        info[f"{lv.name}_bandwidth_gbps"] = f"{lv.tier.bandwidth_gbps:g}"
        info[f"{lv.name}_latency_us"] = f"{lv.tier.latency_us:g}"
    return info


def tier_names(topo: Topology) -> list[str]:
    names = list(topo.level_names)
    for nt in topo.host_types:
        for row in nt.matrix or ():
            names.extend(f"{topo.levels[0].name}:{c}" for c in row if c != "X")
    if topo.pair_paths is not None:
        names.append("graph")
    return list(dict.fromkeys(names))
