"""Registry state <-> native documents: full state files into device rows, diffs into row changes, rows back into
a native state document and into the `ClusterState` a solve runs on (claims labelled by their occupants).

Device rows hold the per-device facts (job, failed, slowdown); links, fault domains and the description of the
last full snapshot are kept whole as `extras`, and so are the shapes its occupied entries gave (`running`: job,
shape, device of each rank). Every problem of a document is reported at once with its path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from placement.errors import Problems
from placement.io.native import job_from_dict, merge_states, state_from_dict
from placement.io.native.document import _Reader
from placement.model.job import Job
from placement.model.state import ClusterState, RunningJob
from placement.model.topology import Topology
from placement.registry.model import DeviceRow

__all__ = [
    "EXTRA_KEYS",
    "RUNNING",
    "DiffChange",
    "Shaped",
    "build_state",
    "extras_of",
    "parse_diff",
    "rows_from_snapshot",
    "running_under",
    "shape_job",
    "state_document",
]

EXTRA_KEYS = ("links", "fault_domains", "description")
RUNNING = "running"
"""The extras key of the outside jobs' shapes: [{job, shape, ranks}] (ranks: the device id of each rank)."""

Shaped = tuple[str, Mapping[str, Any], Sequence[str]]
"""A running job with its shape: (job name, shape document as given, device id of each rank)."""


def shape_job(name: str, shape: Mapping[str, Any], ranks: int, source: str = "shape") -> Job:
    """The Job a stored shape describes (as a state file's `occupied[].shape` is read: named after its job, an
    explicit shape sized by its ranks)."""
    doc = {"name": name, **({} if "parallel" in shape else {"ranks": ranks}), **shape}
    return job_from_dict(doc, source)


def extras_of(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The extras of a stored state document (device ids): links, fault domains, description, and the shapes
    of its occupied entries."""
    out = {k: doc[k] for k in EXTRA_KEYS if doc.get(k)}
    running = [
        {"job": o["job"], "shape": o["shape"], "ranks": list(o.get("ranks") or o["devices"])}
        for o in doc.get("occupied", [])
        if isinstance(o, dict) and isinstance(o.get("shape"), dict)
    ]
    if running:
        out[RUNNING] = running
    return out


_DIFF_KEYS = ("occupy", "free", "fail", "recover", "degrade")


def rows_from_snapshot(
    doc: Any, topo: Topology, source: str = "state"
) -> tuple[dict[str, DeviceRow], dict[str, Any]]:
    """A full native state document: (row per device that is not free and healthy, extras). InputError with
    every problem (the native reader's checks and paths)."""
    st = state_from_dict(doc, topo, source)
    ids = topo.devices
    touched = set(st.occupied) | set(st.failed) | set(st.device_slowdown)
    rows = {
        ids[d].id: DeviceRow(st.occupied.get(d), d in st.failed, st.device_slowdown.get(d)) for d in touched
    }
    extras = {k: doc[k] for k in EXTRA_KEYS if isinstance(doc, dict) and doc.get(k)}
    # the entries that give a shape, in order, are the state's background in order (job_file: inlined by the
    # request reader before it gets here; a shape the document gives by file alone is read, not kept)
    given = [
        o
        for o in (doc.get("occupied") or [] if isinstance(doc, dict) else [])
        if isinstance(o, dict) and ("shape" in o or "job_file" in o)
    ]
    running = [
        {"job": rj.job_id, "shape": o["shape"], "ranks": [ids[d].id for d in rj.devices]}
        for o, rj in zip(given, st.background, strict=True)
        if isinstance(o.get("shape"), dict)
    ]
    if running:
        extras[RUNNING] = running
    return rows, extras


class DiffChange:
    """A parsed diff: the devices it touches and how each row changes (applied in the order free, recover,
    occupy, fail, degrade, so that `occupy` wins over `free` of the same device in one diff)."""

    def __init__(self) -> None:
        self.free: set[str] = set()
        self.recover: set[str] = set()
        self.occupy: dict[str, str] = {}
        self.fail: set[str] = set()
        self.degrade: dict[str, float] = {}

    @property
    def touched(self) -> list[str]:
        return sorted(self.free | self.recover | set(self.occupy) | self.fail | set(self.degrade))

    def apply(self, current: Mapping[str, DeviceRow]) -> dict[str, DeviceRow | None]:
        """The new row of every touched device (None: free and healthy, no row)."""
        out: dict[str, DeviceRow | None] = {}
        for d in self.touched:
            row = current.get(d, DeviceRow())
            job, failed, slow = row.job, row.failed, row.slowdown
            if d in self.free:
                job = None
            if d in self.recover:
                failed, slow = False, None
            if d in self.occupy:
                job = self.occupy[d]
            if d in self.fail:
                failed = True
            if d in self.degrade:
                slow = self.degrade[d]
            new = DeviceRow(job, failed, slow)
            out[d] = None if new.empty else new
        return out

    def document(self) -> dict[str, Any]:
        """The diff as a normalized document of device ids (what WatchState sends)."""
        jobs: dict[str, list[str]] = {}
        for d, j in sorted(self.occupy.items()):
            jobs.setdefault(j, []).append(d)
        doc: dict[str, Any] = {
            "occupy": [{"job": j, "devices": ds} for j, ds in sorted(jobs.items())],
            "free": sorted(self.free),
            "fail": sorted(self.fail),
            "recover": sorted(self.recover),
            "degrade": [{"device": d, "slowdown": s} for d, s in sorted(self.degrade.items())],
        }
        return {k: v for k, v in doc.items() if v}


def parse_diff(doc: Any, topo: Topology, source: str = "diff") -> DiffChange:
    """A diff document (StateDiff): selectors resolved to device ids; InputError with every problem."""
    ps = Problems(source)
    r = _Reader(ps)
    d = r.obj(doc, "")
    r.keys(d, list(_DIFF_KEYS), "")
    out = DiffChange()
    ids = topo.devices

    def resolve(sel: Any, path: str) -> list[str]:
        if not isinstance(sel, str):
            ps.add(path, f"must be a device, host or domain name, got {sel!r}")
            return []
        try:
            return [ids[i].id for i in topo.resolve(sel)]
        except KeyError as e:
            ps.add(path, str(e.args[0]))
            return []

    for key in ("free", "fail", "recover"):
        target: set[str] = getattr(out, key)
        for j, sel in enumerate(r.lst(d.get(key), key)):
            target.update(resolve(sel, f"{key}[{j}]"))
    for i, o in enumerate(r.lst(d.get("occupy"), "occupy")):
        od = r.obj(o, f"occupy[{i}]")
        r.keys(od, ["job", "devices"], f"occupy[{i}]")
        job = r.str_(od, "job", f"occupy[{i}]", required=True) or "?"
        for j, sel in enumerate(r.lst(od.get("devices"), f"occupy[{i}].devices")):
            for dev in resolve(sel, f"occupy[{i}].devices[{j}]"):
                if out.occupy.get(dev, job) != job:
                    ps.add(
                        f"occupy[{i}].devices[{j}]", f"{dev} is given to jobs {out.occupy[dev]!r} and {job!r}"
                    )
                out.occupy[dev] = job
    for i, g in enumerate(r.lst(d.get("degrade"), "degrade")):
        gd = r.obj(g, f"degrade[{i}]")
        r.keys(gd, ["device", "slowdown"], f"degrade[{i}]")
        f = r.num(gd, "slowdown", f"degrade[{i}]", minimum=1, required=True)
        for dev in resolve(gd.get("device"), f"degrade[{i}].device"):
            if f is not None:
                out.degrade[dev] = f
    ps.raise_if_any()
    return out


def _occupied_entries(jobs: Mapping[str, list[str]], shaped: Sequence[Shaped]) -> list[dict[str, Any]]:
    """Occupied entries by job; a running job with a shape gets an entry of its own (its devices, `shape`, and
    `ranks` when their order is not the devices' order), the job's other devices one without."""
    by_job: dict[str, list[Shaped]] = {}
    for s in shaped:
        by_job.setdefault(s[0], []).append(s)
    out: list[dict[str, Any]] = []
    for j, ds in sorted(jobs.items()):
        left = set(ds)
        for _, shape, ranks in sorted(by_job.get(j, []), key=lambda s: list(s[2])):
            if not ranks or not set(ranks) <= left or len(set(ranks)) != len(ranks):
                continue  # the job no longer holds every device of its ranks: its shape is not shown
            left -= set(ranks)
            entry: dict[str, Any] = {"job": j, "devices": sorted(ranks), "shape": dict(shape)}
            if list(ranks) != sorted(ranks):
                entry["ranks"] = list(ranks)
            out.append(entry)
        if left:
            out.append({"job": j, "devices": sorted(left)})
    return out


def state_document(
    rows: Mapping[str, DeviceRow], extras: Mapping[str, Any], shaped: Sequence[Shaped] = ()
) -> dict[str, Any]:
    """The native state document of device rows and extras (occupied grouped by job, everything sorted). The
    running jobs with a shape (the outside ones of `extras`, and `shaped`: committed reservations) get occupied
    entries of their own with `shape` and `ranks`, as a state file writes them."""
    jobs: dict[str, list[str]] = {}
    failed: list[str] = []
    degraded: list[dict[str, Any]] = []
    for dev, row in sorted(rows.items()):
        if row.job is not None:
            jobs.setdefault(row.job, []).append(dev)
        if row.failed:
            failed.append(dev)
        if row.slowdown is not None and row.slowdown > 1.0:
            degraded.append({"device": dev, "slowdown": row.slowdown})
    doc: dict[str, Any] = {}
    if extras.get("description"):
        doc["description"] = extras["description"]
    outside = [(o["job"], o["shape"], o["ranks"]) for o in extras.get(RUNNING, [])]
    doc["occupied"] = _occupied_entries(jobs, [*outside, *shaped])
    doc["failed"] = failed
    doc["degraded"] = degraded
    for k in ("links", "fault_domains"):
        if extras.get(k):
            doc[k] = extras[k]
    return {k: v for k, v in doc.items() if v}


def build_state(
    topo: Topology,
    base: ClusterState | None,
    rows: Mapping[str, DeviceRow],
    extras: Mapping[str, Any],
    occupants: Mapping[str, str] | None = None,
    background: Sequence[tuple[tuple[int, ...], Job]] = (),
) -> ClusterState:
    """The ClusterState a solve sees: rows, links (failures, slowdowns, measured loads) and fault domains of
    the extras, the cluster's static fault domains, and every device of `occupants` occupied by its label (it
    wins over the row's job). `background`: running jobs' (device of each rank, shape); each runs under the
    label its devices are occupied by (one label on all of them, else it is left out)."""
    linked = state_from_dict(
        {k: extras[k] for k in ("links", "fault_domains") if extras.get(k)}, topo, "state"
    )
    index = topo.device_index
    occupied: dict[int, str] = {}
    failed: set[int] = set()
    slow: dict[int, float] = {}
    for dev, row in rows.items():
        i = index(dev)
        if i is None:
            continue  # a device of an older cluster version (PutCluster checks there are none)
        if row.job is not None:
            occupied[i] = row.job
        if row.failed:
            failed.add(i)
        if row.slowdown is not None and row.slowdown > 1.0:
            slow[i] = row.slowdown
    for dev, label in (occupants or {}).items():
        i = index(dev)
        if i is not None:
            occupied[i] = label
    st = ClusterState(
        occupied,
        frozenset(failed),
        slow,
        linked.failed_pairs,
        linked.pair_slowdown,
        linked.failed_uplinks,
        linked.uplink_slowdown,
        linked.fault_domains,
        running_under(occupied, background),
        linked.link_load,
    )
    return merge_states(base, st)


def running_under(
    occupied: Mapping[int, str], background: Sequence[tuple[tuple[int, ...], Job]]
) -> tuple[RunningJob, ...]:
    """Running jobs named by the label their devices are occupied by (the job name in a stored state, the
    owner label in a Reserve's); a job whose devices are not all under one label is left out."""
    out = []
    for devices, job in background:
        labels = {occupied.get(d) for d in devices}
        if len(labels) == 1 and None not in labels:
            label = str(labels.pop())
            key = (label, devices, id(job))
            hit = _RUNNING.get(key)
            if hit is None or hit.job is not job:
                if len(_RUNNING) >= _RUNNING_KEPT:
                    _RUNNING.clear()
                hit = _RUNNING[key] = RunningJob(label, job, devices)
            out.append(hit)
    return tuple(out)


# the same running job under the same label is the same object from one state to the next, so that its flows
# (placement.cost.shared.running_flows, cached per RunningJob) are computed once, not at every change
_RUNNING: dict[tuple[str, tuple[int, ...], int], RunningJob] = {}
_RUNNING_KEPT = 4096
