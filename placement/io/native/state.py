"""State files: occupancy, failures, degradations, failed links and uplinks, fault domains, resolved against a
topology into a ClusterState."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from placement.errors import Problems
from placement.io.native.document import MAX_SLOWDOWN, _Reader, load_document, short
from placement.limits import LimitError, current_limits, tick
from placement.model.state import ClusterState, Uplink
from placement.model.topology import Topology


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


def state_from_dict(doc: Any, topo: Topology, source: str = "<state>") -> ClusterState:
    """Occupancy, failures, degradation and fault domains, resolved against `topo`."""
    ps = Problems(source)
    r = _Reader(ps)
    if not r.kind(doc, "state"):
        ps.raise_if_any()
    d = r.obj(doc, "")
    r.keys(d, ["occupied", "failed", "degraded", "links", "fault_domains", "description"], "")
    lim = current_limits()
    for key in ("occupied", "failed", "degraded", "links"):
        v = d.get(key)
        lim.check("max_state_entries", len(v) if isinstance(v, list) else 0, key)
    fd_list = d.get("fault_domains")
    lim.check("max_fault_domains", len(fd_list) if isinstance(fd_list, list) else 0, "fault_domains")
    budget = _Budget(topo)
    occupied: dict[int, str] = {}
    for i, o in enumerate(r.lst(d.get("occupied"), "occupied")):
        od = r.obj(o, f"occupied[{i}]")
        r.keys(od, ["job", "devices"], f"occupied[{i}]")
        job = r.str_(od, "job", f"occupied[{i}]", required=True) or "?"
        for j, sel in enumerate(r.lst(od.get("devices"), f"occupied[{i}].devices")):
            for dv in _resolve(topo, sel, f"occupied[{i}].devices[{j}]", ps, budget):
                if dv in occupied and occupied[dv] != job:
                    ps.add(
                        f"occupied[{i}].devices[{j}]",
                        f"{topo.devices[dv].id} is already occupied by job {short(occupied[dv])}",
                    )
                occupied[dv] = job
    failed: set[int] = set()
    for j, sel in enumerate(r.lst(d.get("failed"), "failed")):
        failed.update(_resolve(topo, sel, f"failed[{j}]", ps, budget))
    slow: dict[int, float] = {}
    for i, g in enumerate(r.lst(d.get("degraded"), "degraded")):
        gd = r.obj(g, f"degraded[{i}]")
        r.keys(gd, ["device", "slowdown"], f"degraded[{i}]")
        f = r.num(gd, "slowdown", f"degraded[{i}]", minimum=1, required=True, maximum=MAX_SLOWDOWN)
        for dv in _resolve(topo, gd.get("device"), f"degraded[{i}].device", ps, budget):
            if f is not None:
                slow[dv] = max(slow.get(dv, 1.0), f)
    failed_pairs: set[tuple[int, int]] = set()
    pair_slow: dict[tuple[int, int], float] = {}
    failed_up: set[Uplink] = set()
    up_slow: dict[Uplink, float] = {}
    for i, lk in enumerate(r.lst(d.get("links"), "links")):
        lp = f"links[{i}]"
        ld = r.obj(lk, lp)
        r.keys(ld, ["between", "uplink", "failed", "slowdown"], lp)
        is_failed = bool(ld.get("failed", False))
        f = r.num(ld, "slowdown", lp, minimum=1, default=None, maximum=MAX_SLOWDOWN)
        if not is_failed and f is None:
            ps.add(lp, "a link entry needs failed: true or a slowdown >= 1")
        if ("between" in ld) == ("uplink" in ld):
            ps.add(lp, "give exactly one of between: [device, device] or uplink: host-or-domain")
            continue
        if "between" in ld:
            ends = r.lst(ld["between"], f"{lp}.between")
            if len(ends) != 2:
                ps.add(f"{lp}.between", f"must name two devices, got {len(ends)}")
                continue
            ab = [topo.device_index(str(x)) for x in ends]
            if ab[0] is None or ab[1] is None:
                ps.add(f"{lp}.between", f"unknown device in {short(ends)}; devices are named host/gpuK")
                continue
            a, b = sorted((ab[0], ab[1]))
            if a == b or topo.devices[a].host_index != topo.devices[b].host_index:
                ps.add(
                    f"{lp}.between",
                    f"{short(ends)} is not a link between two devices of one host; use uplink: for network links",
                )
                continue
            if is_failed:
                failed_pairs.add((a, b))
            elif f is not None:
                pair_slow[(a, b)] = f
        else:
            up = _uplink(topo, ld["uplink"], f"{lp}.uplink", ps)
            if up is None:
                continue
            if is_failed:
                failed_up.add(up)
            elif f is not None:
                up_slow[up] = f
    fds: dict[str, dict[str, frozenset[int]]] = {}
    owner: dict[str, dict[int, str]] = {}  # kind -> device -> its domain: overlaps found in linear time
    for i, fdo in enumerate(r.lst(d.get("fault_domains"), "fault_domains")):
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
    ps.raise_if_any()
    return ClusterState(
        occupied,
        frozenset(failed),
        slow,
        frozenset(failed_pairs),
        pair_slow,
        frozenset(failed_up),
        up_slow,
        fds,
    )


def merge_states(base: ClusterState | None, extra: ClusterState) -> ClusterState:
    """`extra` with the fault domains of `base` (from the cluster file) added where `extra` lacks the kind."""
    if base is None:
        return extra
    fds = dict(base.fault_domains) | dict(extra.fault_domains)
    return ClusterState(
        extra.occupied,
        extra.failed,
        extra.device_slowdown,
        extra.failed_pairs,
        extra.pair_slowdown,
        extra.failed_uplinks,
        extra.uplink_slowdown,
        fds,
    )


def load_state(path: str | Path, topo: Topology, base: ClusterState | None = None) -> ClusterState:
    return merge_states(base, state_from_dict(load_document(path), topo, str(path)))
