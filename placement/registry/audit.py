"""`audit`: the registry's invariants checked from the database, for tests, the crash benchmark and operators.

No device in two live reservations (and the validator passes over their union), every live reservation claims
exactly its devices (held or committed as its status says), no claim belongs to anything but a live reservation,
and no reservation holds a failed device.
"""

from __future__ import annotations

from collections import Counter

from placement.model.job import Job
from placement.model.validate import validate
from placement.registry.model import ClaimKind, ReservationStatus
from placement.registry.registry import Registry
from placement.registry.statedoc import build_state
from placement.registry.update import stored_rows

__all__ = ["audit"]


def audit(registry: Registry, cluster_id: str) -> list[str]:
    """Every broken invariant of one cluster, as sentences (empty: consistent)."""
    problems: list[str] = []
    now = registry.clock()
    view = registry.view(cluster_id)
    topo = view.topology
    reservations = registry.store.reservations(cluster_id, None)
    live = [r for r in reservations if r.live(now)]
    counts = Counter(d for r in live for d in r.devices)
    doubled = sorted(d for d, n in counts.items() if n > 1)
    if doubled:
        problems.append(f"{len(doubled)} device(s) in two live reservations, e.g. {doubled[0]}")
    snap = registry.store.snapshot(cluster_id)
    if snap is None:
        return [*problems, f"cluster {cluster_id} vanished during the audit"]
    by_res: dict[str, dict[str, ClaimKind]] = {}
    for dev, claim in snap.claims.items():
        if claim.reservation_id is not None:
            by_res.setdefault(claim.reservation_id, {})[dev] = claim.kind
    status = {r.id: r for r in reservations}
    for rid, devs in sorted(by_res.items()):
        res = status.get(rid)
        if res is None or res.status not in (ReservationStatus.HELD, ReservationStatus.COMMITTED):
            problems.append(
                f"{len(devs)} claim(s) of reservation {rid}, which is "
                f"{'missing' if res is None else res.status.value}"
            )
    for r in reservations:
        if r.status not in (ReservationStatus.HELD, ReservationStatus.COMMITTED):
            continue
        want = ClaimKind.HELD if r.status is ReservationStatus.HELD else ClaimKind.COMMITTED
        got = by_res.get(r.id, {})
        if set(got) != set(r.devices) or any(k is not want for k in got.values()):
            problems.append(
                f"{r.status.value.lower()} reservation {r.id} claims {len(got)} of its {len(r.devices)} devices"
                f"{'' if all(k is want for k in got.values()) else ' (some of the wrong kind)'}"
            )
    failed = {d for d, c in snap.claims.items() if c.kind is ClaimKind.FAILED}
    on_failed = sorted(d for r in live for d in r.devices if d in failed)
    if on_failed:
        problems.append(f"{len(on_failed)} failed device(s) in live reservations, e.g. {on_failed[0]}")
    held = [r for r in live if r.status is ReservationStatus.HELD]
    if held:  # the union of the held reservations, as one job, on the stored state (holds left out)
        mapping = []
        for r in held:
            for d in r.devices:
                i = topo.device_index(d)
                if i is None:
                    problems.append(f"reservation {r.id} names unknown device {d}")
                else:
                    mapping.append(i)
        rows = stored_rows(
            {d: c for d, c in snap.claims.items() if c.kind is not ClaimKind.HELD}, snap.slowdowns
        )
        base = build_state(topo, view.base, rows, snap.extras)
        union = Job("union-of-held-reservations", ranks=len(mapping))
        problems += [f"union of held reservations: {v}" for v in validate(topo, base, union, mapping)]
    return problems
