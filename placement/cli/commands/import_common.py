"""What the `placement import` commands share: finishing an imported cluster document (link tiers, the node type of
--node-topo, device counts), validating it and writing it as cluster YAML with its warnings and notes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from placement.cli.errors import err, escape
from placement.cli.inputs import write_output
from placement.io.affinity import affinity_fields
from placement.io.importers.defaults import (
    DEFAULT_DEVICES_PER_NODE,
    TIERS_NOTE,
    apply_tier_specs,
    default_tiers,
)
from placement.io.importers.nics import nic_fields, nic_warnings
from placement.io.importers.nvidia_smi import read_nvidia_smi
from placement.io.native import cluster_from_dict

__all__ = ["cluster_yaml", "finish_import", "parse_tiers"]


def parse_tiers(
    tiers: list[str], level_names: list[str]
) -> tuple[dict[str, tuple[float, float]], dict[str, float]]:
    """The default tier of each level, overridden by `--tier LEVEL=GBPS:US[:OVERSUBSCRIPTION]` specs, and the
    oversubscription those specs set (by the name of the level whose uplinks it concerns)."""
    out = default_tiers(level_names)
    over: dict[str, float] = {}
    apply_tier_specs(tiers, out, over)
    return out, over


def cluster_yaml(doc: dict[str, Any]) -> str:
    """A cluster (or state) document as the YAML every importer writes."""
    return str(yaml.safe_dump(doc, sort_keys=False, default_flow_style=None))


def finish_import(
    doc: dict[str, Any],
    warnings: list[str],
    tiers: list[str],
    gpus_per_node: int | None,
    kind: str | None,
    node_topo: Path | None,
    out_file: Path | None,
) -> None:
    """Give `doc` (levels and hosts from a scheduler's topology) its tiers and devices per host (from `node_topo`,
    an `nvidia-smi topo -m` applied to every node, or `gpus_per_node`), validate it, print the warnings and
    write it to `out_file` or stdout."""
    names = [lv["name"] for lv in doc["levels"]]
    tier, over = parse_tiers(tiers, names)
    # an importer's marks on a level (``nvlink``) stay; the tiers are set here
    doc["levels"] = [
        {
            **lv,
            "bandwidth_gbps": tier[lv["name"]][0],
            "latency_us": tier[lv["name"]][1],
            **({"oversubscription": over[lv["name"]]} if lv["name"] in over else {}),
        }
        for lv in doc["levels"]
    ]
    if node_topo is not None:
        nt = read_nvidia_smi(node_topo)
        warnings.extend(nt.warnings)
        doc["node_types"] = [
            {
                "name": node_topo.stem,
                "devices": len(nt.gpus),
                "kind": kind or "gpu",
                "matrix": [" ".join(r) for r in nt.matrix],
                "rails": list(nt.rails),
                **nic_fields(nt.nics),
                **affinity_fields(nt.cpu_affinity, nt.numa_affinity),
            }
        ]
    for h in doc["hosts"]:
        if node_topo is not None:
            h.pop("devices", None)
            h.pop("kind", None)
            h["node_type"] = node_topo.stem
        elif "devices" not in h:
            h["devices"] = gpus_per_node or DEFAULT_DEVICES_PER_NODE
            if kind:
                h["kind"] = kind
    cluster_from_dict(doc, "<imported>")  # validate what we are about to write
    warnings.extend(nic_warnings(doc, "the imported topology"))
    for w in warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    if not tiers:
        err.print(f"[yellow]note:[/] {TIERS_NOTE}", soft_wrap=True)
    write_output(cluster_yaml(doc), out_file)
