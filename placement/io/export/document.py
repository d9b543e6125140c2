"""Reading a result back for launching: `seats_from_document` and `launch_seats`, the per-rank facts (host, GPU
index, kind, CPU and NUMA affinity) every launch format is built from; the baselines' costs next to an answer.
The result schema is the PlaceResponse JSON (docs/results.md, `placement.messages`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement.cost.report import CostReport
from placement.errors import Problems
from placement.io.native.mapping import parse_mapping
from placement.model.topology import Topology

__all__ = [
    "Seat",
    "baseline_costs",
    "is_legacy_result",
    "launch_seats",
    "result_body",
    "seats_from_document",
]


@dataclass(frozen=True)
class Seat:
    """Where one rank runs: `host`, the physical GPU `index` on it, the device `kind`, and the CPUs (`cpus`, a
    Linux CPU list) and NUMA node (`numa`) close to that GPU when the cluster knows them (None: unknown)."""

    rank: int
    host: str
    index: int
    kind: str | None = None
    cpus: str | None = None
    numa: int | None = None

    @property
    def device(self) -> str:
        return f"{self.host}/gpu{self.index}"


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


def baseline_costs(
    report: CostReport, baselines: Mapping[str, float | None], reports: Mapping[str, CostReport] | None = None
) -> dict[str, dict[str, float | None]]:
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


def device_affinity(topology: Topology, d: int) -> tuple[str | None, int | None]:
    """(CPU list, NUMA node) of device `d` from its node type; None where unknown."""
    dev = topology.devices[d]
    nt = topology.host_types[dev.host_index]
    cpus = nt.cpu_affinity[dev.local_index] if nt.cpu_affinity is not None else None
    numa = nt.numa_affinity[dev.local_index] if nt.numa_affinity is not None else None
    return cpus, numa


def result_body(doc: Any) -> Any:
    """The part of a result that names the job and its mapping: a PlaceResponse's ``result`` (the result schema,
    docs/results.md); any other document (an EvaluateResponse, a native result, a plain mapping) as it is."""
    if isinstance(doc, dict) and isinstance(doc.get("result"), dict):
        return doc["result"]
    return doc


def is_legacy_result(doc: Any) -> bool:
    """A native result document of earlier releases (``{job, cluster, status, cost, mapping}``), which `export`
    and `bind` still read for one release: the result schema is now the PlaceResponse JSON mapping."""
    return isinstance(doc, dict) and "result" not in doc and "cluster" in doc and "mapping" in doc


def seats_from_document(doc: Any, source: str = "<mapping>") -> list[tuple[str, int]]:
    """(host, local GPU index) per rank from a result or a plain mapping (list / {rank: device}), read by the one
    mapping parser (`placement.io.native.mapping.parse_mapping`: its shapes, limits and messages); each device
    must be named ``host/gpuK`` and hold one rank.

    A result is the protobuf JSON mapping of a PlaceResponse (``result.mapping``) or an EvaluateResponse
    (``mapping``), or the native result of earlier releases (`is_legacy_result`).
    """
    holder: dict[tuple[str, int], int] = {}

    def seat(rank: int, dev: Any, path: str, ps: Problems) -> tuple[str, int] | None:
        try:
            where = _seat(str(dev))
        except ValueError:
            ps.add(path, f"{str(dev)!r} is not a device id of the form host/gpuK")
            return None
        if where in holder:
            ps.add(path, f"{dev} holds ranks {holder[where]} and {rank}; one rank per device")
        holder.setdefault(where, rank)
        return where

    return parse_mapping(doc, source, seat)


def launch_seats(
    seats: Sequence[tuple[str, int]], document: Any = None, topology: Topology | None = None
) -> list[Seat]:
    """Each rank's `Seat`: kind, CPUs and NUMA node from the document's mapping entries (what the PlaceResponse
    JSON carries), else from `topology` when the host is in it; unknown stays None."""
    entries: dict[int, Mapping[str, Any]] = {}
    document = result_body(document)
    items = document.get("mapping") if isinstance(document, dict) else document
    if isinstance(items, list):
        for i, it in enumerate(items):
            if isinstance(it, dict):
                r = _rank(it.get("rank", i))
                if r is not None:
                    entries[r] = it
    out: list[Seat] = []
    for r, (host, k) in enumerate(seats):
        e = entries.get(r, {})
        kind = e.get("kind") if isinstance(e.get("kind"), str) else None
        cpus = e.get("cpus") if isinstance(e.get("cpus"), str) else None
        numa = _rank(e.get("numa_node")) if e.get("numa_node") is not None else None
        if topology is not None:
            d = topology.device_index(f"{host}/gpu{k}")
            if d is not None:
                tc, tn = device_affinity(topology, d)
                kind = kind or topology.devices[d].kind
                cpus = cpus if cpus is not None else tc
                numa = numa if numa is not None else tn
        out.append(Seat(r, host, k, kind, cpus, numa))
    return out
