"""Outputs for the launchers people use: canonical JSON result, OpenMPI rankfile, SLURM_HOSTFILE, per-rank
environment (CUDA_VISIBLE_DEVICES, RANK, LOCAL_RANK, WORLD_SIZE) and a Kueue-style topology assignment.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from placement.cost import CostReport
from placement.errors import InputError, Problem
from placement.topology import Topology

__all__ = ["FORMATS", "baseline_costs", "export", "result_document", "seats_from_document"]

FORMATS = ("json", "yaml", "rankfile", "hostfile", "env", "kueue")


def _seat(device_id: str) -> tuple[str, int]:
    host, _, gpu = device_id.rpartition("/")
    if not host or not gpu.startswith("gpu") or not gpu[3:].isdigit():
        raise ValueError(device_id)
    return host, int(gpu[3:])


def _rank(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    try:
        r = int(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return r if r >= 0 and (not isinstance(v, float) or v == r) else None


def baseline_costs(report: CostReport, baselines: Mapping[str, float | None],
                   reports: Mapping[str, CostReport] | None = None) -> dict[str, dict[str, float | None]]:
    """Each baseline's modeled step and exposed communication seconds, next to the answer's `report`.

    `baselines` is what the solver reports per baseline and candidate (`PlacementResult.baselines`): the exposed
    communication seconds of its mapping (None: no valid mapping); `reports` their full reports
    (`PlacementResult.baseline_reports`), whose step is taken as it is. Without a report, the step is derived:
    compute and the pipeline bubble do not depend on the mapping, so a baseline's step is its exposed
    communication plus the answer's ``report.step_seconds - report.comm_seconds``.
    """
    rest = report.step_seconds - report.comm_seconds
    out: dict[str, dict[str, float | None]] = {}
    for name, comm in baselines.items():
        own = (reports or {}).get(name) if comm is not None else None
        if own is not None:
            out[name] = {"step_seconds": own.step_seconds, "comm_seconds": own.comm_seconds}
        else:
            out[name] = {"step_seconds": None if comm is None else comm + rest, "comm_seconds": comm}
    return out


def result_document(topology: Topology, job_name: str, mapping: Sequence[int], report: CostReport | None = None,
                    **extra: Any) -> dict[str, Any]:
    """The canonical result: who runs where, what it costs, and anything else the caller adds (status...).

    With a `report`, ``cost`` holds `CostReport.to_dict` (step, exposed and total communication, compute, MFU,
    tokens/s, phases) and, when the caller passes ``baselines`` (name -> exposed communication seconds),
    ``baseline_costs`` holds each baseline's step and exposed communication seconds (`baseline_costs`; the
    caller's ``baseline_reports``, not written themselves, give each baseline's own step).
    """
    doc: dict[str, Any] = {"job": job_name, "cluster": topology.name}
    doc.update(extra)
    if report is not None:
        doc["cost"] = report.to_dict()
        reports = doc.pop("baseline_reports", None)
        if isinstance(extra.get("baselines"), Mapping):
            doc["baseline_costs"] = baseline_costs(report, extra["baselines"], reports)
    doc["mapping"] = [
        {"rank": r, "device": topology.devices[d].id, "host": topology.devices[d].host,
         "local_index": topology.devices[d].local_index}
        for r, d in enumerate(mapping)
    ]
    return doc


def seats_from_document(doc: Any, source: str = "<mapping>") -> list[tuple[str, int]]:
    """(host, local GPU index) per rank from a result document or a plain mapping (list / {rank: device})."""
    items = doc.get("mapping", doc) if isinstance(doc, dict) else doc
    pairs: list[tuple[int, str, str]] = []
    problems: list[Problem] = []
    if isinstance(items, list):
        for i, it in enumerate(items):
            if isinstance(it, dict):
                rank = _rank(it.get("rank", i))
                if rank is None:
                    problems.append(Problem(f"mapping[{i}].rank", f"must be a rank number, got {it.get('rank')!r}"))
                    continue
                pairs.append((rank, str(it.get("device")), f"mapping[{i}].device"))
            else:
                pairs.append((i, str(it), f"mapping[{i}]"))
    elif isinstance(items, dict):
        for k, v in items.items():
            rank = _rank(k)
            if rank is None:
                problems.append(Problem(f"mapping.{k}", "keys are rank numbers"))
                continue
            pairs.append((rank, str(v), f"mapping.{k}"))
    else:
        raise InputError(source, [Problem("mapping", "expected a list of devices or a result document")])
    seats: dict[int, tuple[str, int]] = {}
    holder: dict[tuple[str, int], int] = {}
    for r, dev, path in pairs:
        if r in seats:
            problems.append(Problem(path, f"rank {r} is mapped twice"))
            continue
        try:
            seats[r] = _seat(dev)
        except ValueError:
            problems.append(Problem(path, f"{dev!r} is not a device id of the form host/gpuK"))
            continue
        if seats[r] in holder:
            problems.append(Problem(path, f"{dev} holds ranks {holder[seats[r]]} and {r}; one rank per device"))
        holder.setdefault(seats[r], r)
    n = len(pairs)
    missing = [r for r in range(n) if r not in seats]
    if missing and not problems:
        problems.append(Problem("mapping", f"ranks {missing[:8]} have no device"))
    if problems:
        raise InputError(source, problems)
    return [seats[r] for r in range(n)]


def export(fmt: str, seats: Sequence[tuple[str, int]], *, document: dict[str, Any] | None = None,
           topology: Topology | None = None) -> str:
    """Render one output format. `kueue` needs the topology for the level values of each host."""
    if fmt == "json":
        return json.dumps(document if document is not None else [f"{h}/gpu{k}" for h, k in seats], indent=2) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(document if document is not None else [f"{h}/gpu{k}" for h, k in seats], sort_keys=False)
    if fmt == "rankfile":
        # OpenMPI rankfile (mpirun --rankfile): one line per rank; slot is the GPU's local index on that host.
        return "".join(f"rank {r}={h} slot={k}\n" for r, (h, k) in enumerate(seats))
    if fmt == "hostfile":
        # SLURM_HOSTFILE with srun --distribution=arbitrary: line i is the host of task i.
        return "".join(f"{h}\n" for h, _ in seats)
    if fmt == "env":
        world = len(seats)
        local: dict[str, list[int]] = defaultdict(list)
        for r, (h, _) in enumerate(seats):
            local[h].append(r)
        master = seats[0][0] if seats else ""
        lines = []
        for h in sorted(local, key=lambda h: local[h][0]):
            lines.append(f"# host {h}: {len(local[h])} ranks")
            for lr, r in enumerate(local[h]):
                lines.append(
                    f"{h} RANK={r} LOCAL_RANK={lr} LOCAL_WORLD_SIZE={len(local[h])} WORLD_SIZE={world} "
                    f"CUDA_VISIBLE_DEVICES={seats[r][1]} MASTER_ADDR={master}"
                )
        return "\n".join(lines) + "\n"
    if fmt == "kueue":
        if topology is None:
            raise ValueError("the kueue format needs the cluster (--cluster) for the level values")
        counts = Counter(h for h, _ in seats)
        names = [lv.name for lv in reversed(topology.levels)]
        domains = []
        for h in sorted(counts, key=lambda h: next(r for r, s in enumerate(seats) if s[0] == h)):
            hi = topology.host_names.index(h)
            d0 = topology.devices_in_domain[0][hi][0]
            values = [topology.domain_names[li][topology.domain_of(d0, li)] for li in reversed(range(len(topology.levels)))]
            domains.append({"values": values, "count": counts[h]})
        return yaml.safe_dump({"topologyAssignment": {"levels": names, "domains": domains}}, sort_keys=False)
    raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
