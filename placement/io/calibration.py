"""Calibration files: nccl-tests logs mapped onto a cluster as the fit's measured points (`log_points`), and the
fitted numbers written back into a cluster document (`write_fitted`). The fit itself is `placement.cost.calibrate`.
"""

from __future__ import annotations

from typing import Any

from placement.cost.calibrate import COLLECTIVES, Fit, Measured
from placement.io.importers.nccl_tests import NcclTestsLog
from placement.model.topology import Topology

__all__ = ["log_points", "write_fitted"]


def _devices(topo: Topology, log: NcclTestsLog) -> tuple[tuple[int, ...], list[str]]:
    """The cluster devices of the log's ranks (rank order) and notes on how its hosts were matched."""
    notes: list[str] = []
    names = set(topo.host_names)
    hosts = log.hosts
    if all(h in names for h in hosts):
        on = {h: h for h in hosts}
    else:
        if len(hosts) > len(topo.host_names):
            raise ValueError(
                f"{log.source}: the run used {len(hosts)} hosts, the cluster has {len(topo.host_names)}"
            )
        on = dict(zip(hosts, topo.host_names, strict=False))
        notes.append(
            f"{log.source}: hosts {', '.join(hosts)} are not in the cluster; "
            f"taken as {', '.join(on[h] for h in hosts)} (the cluster's first hosts)"
        )
    devs: list[int] = []
    for r in log.ranks:
        host = on[r.host]
        d = topo.device_index(f"{host}/gpu{r.device}")
        if d is None:
            raise ValueError(
                f"{log.source} line {r.line}: rank {r.rank} ran on device {r.device} of {r.host}; "
                f"cluster host {host} has no device {r.device}"
            )
        devs.append(d)
    return tuple(devs), notes


def log_points(topo: Topology, log: NcclTestsLog) -> tuple[list[Measured], list[str]]:
    """The measured points of one log on `topo` (rows of size 0 are skipped)."""
    if log.collective not in COLLECTIVES:
        raise ValueError(
            f"{log.source}: {log.collective}_perf cannot be calibrated; use one of {', '.join(COLLECTIVES)}"
        )
    if len(log.ranks) < 2:
        raise ValueError(f"{log.source}: one rank; a collective needs two or more")
    devs, notes = _devices(topo, log)
    pts = [
        Measured(
            log.source, r.line, log.collective, devs, float(r.size), tuple(t * 1e-6 for t in r.times_us())
        )
        for r in log.rows
        if r.size > 0 and r.times_us()
    ]
    if not pts:
        raise ValueError(f"{log.source}: no row with a size and a time")
    return pts, notes


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def write_fitted(doc: dict[str, Any], fit: Fit) -> list[str]:
    """Set the fitted numbers in `doc` (a cluster document); warnings for those it cannot hold."""
    warnings: list[str] = []
    topo = fit.topology
    for i, lv in enumerate(doc.get("levels") or []):
        t = topo.levels[i].tier
        lv["bandwidth_gbps"], lv["latency_us"] = _round(t.bandwidth_gbps), _round(t.latency_us)
    intra = {k.name.split(".")[1] for k in fit.knobs if k.name.startswith("intra_node_tiers.")}
    if intra:
        tiers = doc.setdefault("intra_node_tiers", {})
        for code in sorted(intra):
            t = topo.intra_node_tiers[code]
            tiers[code] = {"bandwidth_gbps": _round(t.bandwidth_gbps), "latency_us": _round(t.latency_us)}
    nic_types = {k.name.split(".")[1] for k in fit.knobs if k.name.startswith("node_types.")}
    by_name = {nt.name: nt for nt in topo.host_types}
    entries = {str(e.get("name")): e for e in doc.get("node_types") or [] if isinstance(e, dict)}
    for name in sorted(nic_types):
        nt = by_name[name]
        if name in entries:
            entries[name]["nics"] = nt.nics
            entries[name]["nic_gbps"] = _round(nt.nic_gbps or 0.0)
        else:
            warnings.append(
                f"hosts without a node type ({name}) cannot state NICs: give them a node type to keep "
                f"nics: {nt.nics}, nic_gbps: {_round(nt.nic_gbps or 0.0)}"
            )
    return warnings
