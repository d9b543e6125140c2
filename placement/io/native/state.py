"""State files: occupancy (with the running jobs' shapes), failures, degradations, failed, slow and loaded links
and uplinks, fault domains, resolved against a topology into a ClusterState."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from placement.errors import InputError, Problem, Problems
from placement.io.native.document import MAX_SLOWDOWN, _Reader, load_document, short
from placement.io.native.job import job_from_dict
from placement.limits import LimitError, current_limits, tick
from placement.model.state import ClusterState, LinkLoad, RunningJob, Uplink
from placement.model.topology import Topology

MAX_LOAD_GBPS = 1e6
"""The largest measured link load read (GB/s): beyond any link built."""


class _Budget:
    """Devices named by the selectors of one state so far: bounded (a selector may name the whole cluster, and a
    state may repeat it), and a checkpoint for the current call every few hundred selectors."""

    def __init__(self, topo: Topology) -> None:
        self.limit = 8 * max(topo.num_devices, 1) + current_limits().max_state_entries
        self.used = 0
        self.calls = 0

    def take(self, devices: tuple[int, ...], path: str) -> tuple[int, ...]:
        self.used += len(devices)
        self.calls += 1
        tick(self.calls, "reading the state")
        if self.used > self.limit:
            raise LimitError(
                f"{path} (devices named by the state's selectors so far)",
                self.used,
                "8 x devices + max_state_entries",
                self.limit,
            )
        return devices


def _resolve(
    topo: Topology, sel: Any, path: str, ps: Problems, budget: _Budget | None = None
) -> tuple[int, ...]:
    if not isinstance(sel, str):
        ps.add(path, f"must be a device, host or domain name, got {short(sel)}")
        return ()
    try:
        devs = topo.resolve(sel)
    except KeyError as e:
        ps.add(path, str(e.args[0])[:300])
        return ()
    return budget.take(devs, path) if budget is not None else devs


def _uplink(topo: Topology, sel: Any, path: str, ps: Problems) -> Uplink | None:
    if not isinstance(sel, str):
        ps.add(path, f"must be a host or domain name, got {short(sel)}")
        return None
    if ":" in sel:
        lname, dname = sel.split(":", 1)
        try:
            li = topo.level_index(lname)
        except KeyError as e:
            ps.add(path, str(e.args[0]))
            return None
        cands = [(li, k) for k, n in enumerate(topo.domain_names[li]) if n == dname]
    else:
        cands = [
            (li, k) for li, names in enumerate(topo.domain_names) for k, n in enumerate(names) if n == sel
        ]
    if not cands:
        ps.add(path, f"unknown host or domain {short(sel)}")
        return None
    if len(cands) > 1:
        ps.add(path, f"{short(sel)} names domains at several levels; write level:name")
        return None
    li, k = cands[0]
    if li == len(topo.levels) - 1:
        ps.add(path, f"{short(sel)} is the top domain; it has no uplink")
        return None
    return Uplink(li, k)


STATE_KEYS = ["occupied", "failed", "degraded", "links", "fault_domains", "description"]
DIRECTIONS = ("up", "down", "both")


def state_from_dict(
    doc: Any, topo: Topology, source: str = "<state>", base_dir: Path | None = None
) -> ClusterState:
    """Occupancy, failures, degradation, fault domains and the traffic already on the fabric (running jobs'
    shapes, measured link loads), resolved against `topo`. `base_dir`: where `job_file` paths are relative to."""
    ps = Problems(source)
    r = _Reader(ps)
    if not r.kind(doc, "state"):
        ps.raise_if_any()
    d = r.obj(doc, "")
    r.keys(d, STATE_KEYS, "")
    lim = current_limits()
    for key in ("occupied", "failed", "degraded", "links"):
        v = d.get(key)
        lim.check("max_state_entries", len(v) if isinstance(v, list) else 0, key)
    fd_list = d.get("fault_domains")
    lim.check("max_fault_domains", len(fd_list) if isinstance(fd_list, list) else 0, "fault_domains")
    budget = _Budget(topo)
    occupied, background = _occupied(r, d.get("occupied"), topo, budget, base_dir)
    failed: set[int] = set()
    for j, sel in enumerate(r.lst(d.get("failed"), "failed")):
        failed.update(_resolve(topo, sel, f"failed[{j}]", ps, budget))
    slow = _degraded(r, d.get("degraded"), topo, budget)
    links = _links(r, d.get("links"), topo)
    fds = _fault_domains(r, d.get("fault_domains"), topo, budget)
    ps.raise_if_any()
    return ClusterState(
        occupied,
        frozenset(failed),
        slow,
        frozenset(links.failed_pairs),
        links.pair_slow,
        frozenset(links.failed_up),
        links.up_slow,
        fds,
        tuple(background),
        links.loads,
    )


def _occupied(
    r: _Reader, v: Any, topo: Topology, budget: _Budget, base_dir: Path | None
) -> tuple[dict[int, str], list[RunningJob]]:
    """`occupied:` entries: device -> job id, and the running jobs whose shape an entry gives."""
    ps = r.ps
    occupied: dict[int, str] = {}
    background: list[RunningJob] = []
    for i, o in enumerate(r.lst(v, "occupied")):
        op = f"occupied[{i}]"
        od = r.obj(o, op)
        r.keys(od, ["job", "devices", "shape", "job_file", "ranks"], op)
        job = r.str_(od, "job", op, required=True) or "?"
        held: list[int] = []
        for j, sel in enumerate(r.lst(od.get("devices"), f"{op}.devices")):
            for dv in _resolve(topo, sel, f"{op}.devices[{j}]", ps, budget):
                if dv in occupied and occupied[dv] != job:
                    ps.add(
                        f"{op}.devices[{j}]",
                        f"{topo.devices[dv].id} is already occupied by job {short(occupied[dv])}",
                    )
                occupied[dv] = job
                held.append(dv)
        running = _running(r, od, op, job, held, topo, budget, base_dir)
        if running is not None:
            background.append(running)
    return occupied, background


def _running(
    r: _Reader,
    od: Any,
    op: str,
    job_id: str,
    held: list[int],
    topo: Topology,
    budget: _Budget,
    base_dir: Path | None,
) -> RunningJob | None:
    """The running job an `occupied:` entry describes with `shape:` (a job file's body) or `job_file:`, its
    ranks on `ranks:` (device per rank) or on `devices:` in order; None when the entry gives no shape."""
    if not isinstance(od, dict) or ("shape" not in od and "job_file" not in od):
        if isinstance(od, dict) and "ranks" in od:
            r.ps.add(f"{op}.ranks", "ranks order a running job's shape; give shape: or job_file: with it")
        return None
    ps = r.ps
    if "shape" in od and "job_file" in od:
        ps.add(
            op, "give one of shape: (the job's parallel/model or groups/edges) or job_file: path, not both"
        )
        return None
    if "ranks" in od:
        ranks: list[int] = []
        for j, sel in enumerate(r.lst(od.get("ranks"), f"{op}.ranks")):
            devs = _resolve(topo, sel, f"{op}.ranks[{j}]", ps, budget)
            if len(devs) > 1:
                ps.add(
                    f"{op}.ranks[{j}]", f"{short(sel)} names {len(devs)} devices; a rank runs on one device"
                )
            ranks.extend(devs[:1])
        outside = [dv for dv in ranks if dv not in set(held)]
        if outside:
            ps.add(f"{op}.ranks", f"{topo.devices[outside[0]].id} is not among the entry's devices")
            return None
        if len(set(ranks)) != len(ranks):
            ps.add(f"{op}.ranks", "names a device twice; each rank runs on its own device")
            return None
    else:
        ranks = held
    if "job_file" in od:
        path = r.str_(od, "job_file", op, required=True)
        if path is None:
            return None
        file = Path(path) if base_dir is None or Path(path).is_absolute() else base_dir / path
        try:
            doc = load_document(file)
        except (OSError, InputError) as e:
            ps.add(f"{op}.job_file", f"cannot read {short(path)}: {str(e)[:200]}")
            return None
        where = f"{op}.job_file"
    else:
        doc = od.get("shape")
        if not isinstance(doc, dict):
            ps.add(f"{op}.shape", f"must be a job (parallel/model, or groups/edges), got {short(doc)}")
            return None
        doc = {"name": job_id, **({} if "parallel" in doc else {"ranks": len(ranks)}), **doc}
        where = f"{op}.shape"
    try:
        job = job_from_dict(doc, where)
    except InputError as e:
        ps.extend(
            [Problem(f"{where}.{p.path}" if p.path else where, p.message) for p in e.problems], e.omitted
        )
        return None
    if job.ranks != len(ranks):
        ps.add(
            f"{op}.ranks" if "ranks" in od else f"{op}.devices",
            f"the running job has {job.ranks} ranks but the entry places {len(ranks)}; a rank per device",
        )
        return None
    return RunningJob(job_id, job, tuple(ranks))


def _degraded(r: _Reader, v: Any, topo: Topology, budget: _Budget) -> dict[int, float]:
    slow: dict[int, float] = {}
    for i, g in enumerate(r.lst(v, "degraded")):
        gd = r.obj(g, f"degraded[{i}]")
        r.keys(gd, ["device", "slowdown"], f"degraded[{i}]")
        f = r.num(gd, "slowdown", f"degraded[{i}]", minimum=1, required=True, maximum=MAX_SLOWDOWN)
        for dv in _resolve(topo, gd.get("device"), f"degraded[{i}].device", r.ps, budget):
            if f is not None:
                slow[dv] = max(slow.get(dv, 1.0), f)
    return slow


@dataclass
class _Links:
    """What the `links:` entries say: failed and slow intra-node pairs and uplinks, measured loads."""

    failed_pairs: set[tuple[int, int]] = field(default_factory=set)
    pair_slow: dict[tuple[int, int], float] = field(default_factory=dict)
    failed_up: set[Uplink] = field(default_factory=set)
    up_slow: dict[Uplink, float] = field(default_factory=dict)
    loads: dict[Uplink, LinkLoad] = field(default_factory=dict)


def _links(r: _Reader, v: Any, topo: Topology) -> _Links:
    ps = r.ps
    out = _Links()
    for i, lk in enumerate(r.lst(v, "links")):
        lp = f"links[{i}]"
        ld = r.obj(lk, lp)
        r.keys(ld, ["between", "uplink", "failed", "slowdown", "load_gbps", "direction"], lp)
        is_failed = bool(ld.get("failed", False))
        f = r.num(ld, "slowdown", lp, minimum=1, default=None, maximum=MAX_SLOWDOWN)
        load = r.num(ld, "load_gbps", lp, minimum=0, default=None, maximum=MAX_LOAD_GBPS)
        if not is_failed and f is None and "load_gbps" not in ld:
            ps.add(lp, "a link entry needs failed: true, a slowdown >= 1 or a load_gbps >= 0")
        if ("between" in ld) == ("uplink" in ld):
            ps.add(lp, "give exactly one of between: [device, device] or uplink: host-or-domain")
            continue
        if "between" in ld:
            if load is not None:
                ps.add(
                    f"{lp}.load_gbps",
                    "a measured load is on an uplink (host NICs or a domain's), not between devices",
                )
            _pair(r, ld, lp, topo, is_failed, f, out)
            continue
        up = _uplink(topo, ld["uplink"], f"{lp}.uplink", ps)
        if up is None:
            continue
        if is_failed:
            out.failed_up.add(up)
        elif f is not None:
            out.up_slow[up] = f
        if load is not None:
            _load(r, ld, lp, up, load, out)
        elif "direction" in ld:
            ps.add(f"{lp}.direction", "a direction belongs to a load_gbps")
    return out


def _load(r: _Reader, ld: Any, lp: str, up: Uplink, load: float, out: _Links) -> None:
    """A measured load on `up`: `direction` up (leaving the domain), down (entering) or both (the default)."""
    way = ld.get("direction", "both")
    if way not in DIRECTIONS:
        r.ps.add(f"{lp}.direction", f"must be one of {', '.join(DIRECTIONS)}, got {short(way)}")
        return
    old = out.loads.get(up, LinkLoad())
    out.loads[up] = LinkLoad(
        old.up + (load if way in ("up", "both") else 0.0),
        old.down + (load if way in ("down", "both") else 0.0),
    )


def _pair(
    r: _Reader, ld: Any, lp: str, topo: Topology, is_failed: bool, f: float | None, out: _Links
) -> None:
    ps = r.ps
    ends = r.lst(ld["between"], f"{lp}.between")
    if len(ends) != 2:
        ps.add(f"{lp}.between", f"must name two devices, got {len(ends)}")
        return
    ab = [topo.device_index(str(x)) for x in ends]
    if ab[0] is None or ab[1] is None:
        ps.add(f"{lp}.between", f"unknown device in {short(ends)}; devices are named host/gpuK")
        return
    a, b = sorted((ab[0], ab[1]))
    if a == b or topo.devices[a].host_index != topo.devices[b].host_index:
        ps.add(
            f"{lp}.between",
            f"{short(ends)} is not a link between two devices of one host; use uplink: for network links",
        )
        return
    if is_failed:
        out.failed_pairs.add((a, b))
    elif f is not None:
        out.pair_slow[(a, b)] = f


def _fault_domains(
    r: _Reader, v: Any, topo: Topology, budget: _Budget
) -> dict[str, dict[str, frozenset[int]]]:
    ps = r.ps
    fds: dict[str, dict[str, frozenset[int]]] = {}
    owner: dict[str, dict[int, str]] = {}  # kind -> device -> its domain: overlaps found in linear time
    for i, fdo in enumerate(r.lst(v, "fault_domains")):
        tick(i, "reading the fault domains")
        fp = f"fault_domains[{i}]"
        fdd = r.obj(fdo, fp)
        r.keys(fdd, ["kind", "name", "members"], fp)
        kind = r.str_(fdd, "kind", fp, required=True) or "?"
        nm = r.str_(fdd, "name", fp, required=True) or "?"
        devs: set[int] = set()
        for j, sel in enumerate(r.lst(fdd.get("members"), f"{fp}.members")):
            devs.update(_resolve(topo, sel, f"{fp}.members[{j}]", ps, budget))
        bucket = fds.setdefault(kind, {})
        own = owner.setdefault(kind, {})
        shared: dict[str, list[int]] = {}
        for dv in devs:
            other = own.get(dv)
            if other is not None:
                shared.setdefault(other, []).append(dv)
        for other, both in list(shared.items())[:1]:
            ps.add(
                f"{fp}.members",
                f"{kind[:80]} domains {short(other)} and {short(nm)} share {len(both)} device(s), e.g. {topo.devices[min(both)].id}; a device is in one domain of a kind",
            )
        for dv in devs:
            own.setdefault(dv, nm)
        bucket[nm] = frozenset(devs)
    return fds


def merge_states(base: ClusterState | None, extra: ClusterState) -> ClusterState:
    """`extra` with the fault domains of `base` (from the cluster file) added where `extra` lacks the kind."""
    if base is None:
        return extra
    fds = dict(base.fault_domains) | dict(extra.fault_domains)
    return replace(extra, fault_domains=fds)


def load_state(path: str | Path, topo: Topology, base: ClusterState | None = None) -> ClusterState:
    return merge_states(base, state_from_dict(load_document(path), topo, str(path), Path(path).parent))
