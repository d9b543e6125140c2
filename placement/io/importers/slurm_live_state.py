"""The cluster dict and the state dict of a live Slurm, from the records `placement.io.importers.slurm_live` parses.

Owns the rules: which nodes are hosts, GPU counts and kinds, per-GPU occupancy (GresUsed IDX plus each job's
gres_detail), failed nodes; `placement.io.native` validates both dicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from placement.errors import InputError, Problem
from placement.io.importers.slurm_live import FAILED_STATES, HOLDING_STATES, GresEntry, LiveJob, LiveNode

__all__ = ["build_live"]


# ---- cluster and state --------------------------------------------------------------------------------------


def _gpu_count(entries: Iterable[GresEntry], gres_name: str) -> tuple[int, str | None]:
    count, types = 0, []
    for e in entries:
        if e.name == gres_name:
            count += e.count
            if e.type:
                types.append(e.type)
    kinds = sorted(set(types))
    return count, (kinds[0] if len(kinds) == 1 else None)


def build_live(
    nodes: Sequence[LiveNode],
    jobs: Sequence[LiveJob],
    topology: tuple[dict[str, Any], list[str]] | None,
    *,
    gres_name: str = "gpu",
    partition: str | None = None,
    kind: str | None = None,
    name: str = "slurm",
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The native cluster dict (levels without tiers), the state dict and warnings, from parsed outputs.

    Hosts are the nodes with `gres_name` gres (in `partition` if given); `topology` is an importer result
    (`read_slurm`, `topology_from_scontrol`) or None for a flat cluster (levels ``node``, ``cluster``).
    """
    warnings: list[str] = []
    gpu_nodes: dict[str, LiveNode] = {}
    counts: dict[str, tuple[int, str | None]] = {}
    skipped = []
    for node in nodes:
        if partition is not None and partition not in node.partitions:
            continue
        count, gtype = _gpu_count(node.gres, gres_name)
        if count <= 0:
            skipped.append(node.name)
            continue
        if node.name in gpu_nodes:
            raise InputError("scontrol show node", [Problem(f"NodeName={node.name}", "is listed twice")])
        gpu_nodes[node.name] = node
        counts[node.name] = (count, gtype)
    if skipped:
        warnings.append(
            f"{len(skipped)} node(s) without {gres_name} gres left out: {', '.join(skipped[:8])}"
            + (" ..." if len(skipped) > 8 else "")
        )
    if not gpu_nodes:
        where = f" in partition {partition!r}" if partition else ""
        raise InputError(
            "scontrol show node",
            [
                Problem(
                    "Gres", f"no node{where} has {gres_name} gres (Gres={gres_name}:N); nothing to place on"
                )
            ],
        )

    if topology is None:
        levels: list[dict[str, Any]] = [{"name": "node"}, {"name": "cluster"}]
        hosts: list[dict[str, Any]] = [{"name": n, "domains": {"cluster": "cluster"}} for n in gpu_nodes]
        warnings.append(
            "Slurm reports no topology (topology/none or flat): every node sits in one domain "
            "'cluster'; give --topology-file for the switch tree"
        )
    else:
        tdoc, twarn = topology
        warnings.extend(twarn)
        levels = list(tdoc["levels"])
        known = {h["name"] for h in tdoc["hosts"]}
        hosts = [
            {"name": h["name"], "domains": dict(h["domains"])}
            for h in tdoc["hosts"]
            if h["name"] in gpu_nodes
        ]
        outside = [n for n in gpu_nodes if n not in known]
        if outside:
            warnings.append(
                f"{len(outside)} GPU node(s) are not in the topology and are left out: "
                f"{', '.join(outside[:8])}" + (" ..." if len(outside) > 8 else "")
            )
        if not hosts:
            raise InputError(
                "topology",
                [
                    Problem(
                        "",
                        "none of the GPU nodes appears in the topology; check that it describes this cluster",
                    )
                ],
            )
    for h in hosts:
        count, gtype = counts[h["name"]]
        h["devices"] = count
        h["kind"] = kind or (gtype.upper() if gtype else "gpu")
    cluster = {"name": name, "levels": levels, "hosts": hosts}
    state = _state(gpu_nodes, counts, jobs, {h["name"] for h in hosts}, gres_name, warnings)
    return cluster, state, warnings


def _state(
    gpu_nodes: Mapping[str, LiveNode],
    counts: Mapping[str, tuple[int, str | None]],
    jobs: Sequence[LiveJob],
    hosts: set[str],
    gres_name: str,
    warnings: list[str],
) -> dict[str, Any]:
    owner: dict[tuple[str, int], str] = {}
    for job in jobs:
        if not HOLDING_STATES.intersection(job.states):
            continue
        for node_name, entries in job.gres.items():
            if node_name not in hosts:
                continue
            for e in entries:
                if e.name != gres_name:
                    continue
                if e.indices is None:
                    if e.count:
                        warnings.append(
                            f"job {job.job_id} holds {e.count} {gres_name} on {node_name} without indices"
                        )
                    continue
                for k in sorted(e.indices):
                    owner.setdefault((node_name, k), job.job_id)
    failed: list[str] = []
    unattributed: list[str] = []
    for name in gpu_nodes:
        if name not in hosts:
            continue
        node = gpu_nodes[name]
        total = counts[name][0]
        bad = FAILED_STATES.intersection(node.states)
        if bad:
            failed.append(name)
        used_idx: set[int] = set()
        used_count = 0
        known = True
        for e in node.gres_used:
            if e.name != gres_name:
                continue
            used_count += e.count
            if e.indices is None:
                known = known and e.count == 0
            else:
                used_idx.update(e.indices)
        held = {k for (n, k) in owner if n == name}
        if not known and used_count > len(held):
            # Slurm keeps no per-GPU indices here (gres.conf without Type=/Cores=, or no -d): take the lowest
            # free ones, as Slurm's own bitmap allocation does, and say so
            extra = [k for k in range(total) if k not in held][: used_count - len(held)]
            used_idx.update(extra)
            warnings.append(
                f"{name}: GresUsed gives {used_count} busy {gres_name} without indices; assumed "
                f"{gres_name} {', '.join(map(str, extra))} (run scontrol with -d, and give gres.conf "
                "Type= or Cores= so that Slurm reports IDX)"
            )
        for k in sorted(used_idx - held):
            if k >= total:
                warnings.append(f"{name}: GresUsed index {k} is beyond its {total} {gres_name}; ignored")
                continue
            unattributed.append(f"{name}/gpu{k}")
        for k in sorted(held):
            if k >= total:
                warnings.append(f"{name}: a job holds {gres_name} index {k}, beyond its {total}; ignored")
                owner.pop((name, k))
    occupied: dict[str, list[str]] = {}
    for (host, k), job_id in sorted(owner.items(), key=lambda item: (item[1], item[0])):
        occupied.setdefault(job_id, []).append(f"{host}/gpu{k}")
    state: dict[str, Any] = {
        "description": "read from Slurm by `placement import slurm-live`",
        "occupied": [{"job": j, "devices": devs} for j, devs in occupied.items()],
    }
    if unattributed:
        state["occupied"].append({"job": "slurm-unattributed", "devices": unattributed})
    if failed:
        state["failed"] = failed
        for name in failed:
            node = gpu_nodes[name]
            why = "+".join(node.states) + (f" ({node.reason})" if node.reason else "")
            warnings.append(f"{name} is {why}: all its {gres_name} count as failed")
    return state
