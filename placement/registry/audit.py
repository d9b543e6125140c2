"""`audit`: the registry's invariants checked from the database, for tests, the crash benchmark and operators.

No device in two live reservations (and the validator passes over their union), every held reservation holds
exactly its devices, and no hold belongs to anything but a held reservation.
"""

from __future__ import annotations

from collections import Counter

from placement.model.job import Job
from placement.model.validate import validate
from placement.registry.registry import Registry
from placement.registry.statedoc import build_state

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
    holds = registry.store.snapshot(cluster_id, float("-inf"))
    assert holds is not None
    by_res: dict[str, set[str]] = {}
    for dev, (rid, _) in holds.holds.items():
        by_res.setdefault(rid, set()).add(dev)
    status = {r.id: r for r in reservations}
    for rid, devs in sorted(by_res.items()):
        res = status.get(rid)
        if res is None or res.status.value != "HELD":
            problems.append(
                f"{len(devs)} hold(s) of reservation {rid}, which is "
                f"{'missing' if res is None else res.status.value}"
            )
    for r in reservations:
        if r.status.value == "HELD" and by_res.get(r.id, set()) != set(r.devices):
            problems.append(
                f"held reservation {r.id} holds {len(by_res.get(r.id, set()))} of its "
                f"{len(r.devices)} devices"
            )
    held = [r for r in live if r.status.value == "HELD"]
    if held:  # the union of the held reservations, as one job, on the stored state (holds left out)
        mapping = []
        for r in held:
            for d in r.devices:
                i = topo.device_index(d)
                if i is None:
                    problems.append(f"reservation {r.id} names unknown device {d}")
                else:
                    mapping.append(i)
        base = build_state(topo, view.base, view.rows, view.extras)
        union = Job("union-of-held-reservations", ranks=len(mapping))
        problems += [f"union of held reservations: {v}" for v in validate(topo, base, union, mapping)]
    return problems
