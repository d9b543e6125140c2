"""An UpdateState meets the live claims: which reservations it conflicts with (refused, or revoked when asked),
which outside claims and slowdowns it writes, what it leaves to reservations, and the change as stored.

Pure functions over the claims read under the cluster's write lock; the store writes the `UpdatePlan`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from placement.registry.model import Claim, ClaimConflict, ClaimKind, DeviceRow
from placement.registry.statedoc import DiffChange, state_document

__all__ = ["Current", "UpdatePlan", "plan_diff", "plan_snapshot", "stored_rows"]


@dataclass(frozen=True)
class Current:
    """What the store read under the write lock: the claims and slowdowns of the devices in scope (every device
    of the cluster for a snapshot)."""

    claims: Mapping[str, Claim]
    slowdowns: Mapping[str, float]


@dataclass
class UpdatePlan:
    """What to write. `revoke`: reservation id -> reason (every claim of theirs goes first). `claims`: the new
    outside claim (EXTERNAL or FAILED; None: none) of each device whose outside claim changes, or, with
    `replace`, every outside claim of the cluster. `slowdowns`: likewise (None: healthy). `changes`: the stored
    state's change as a diff document; `state`: the whole stored state after a snapshot. `kept`: reservations
    whose devices the update would have freed and that keep them."""

    replace: bool
    revoke: dict[str, str] = field(default_factory=dict)
    claims: dict[str, Claim | None] = field(default_factory=dict)
    slowdowns: dict[str, float | None] = field(default_factory=dict)
    changes: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] | None = None
    kept: list[str] = field(default_factory=list)


def stored_rows(claims: Mapping[str, Claim], slowdowns: Mapping[str, float]) -> dict[str, DeviceRow]:
    """The stored state's rows: outside and committed occupancy by job name, failures, slowdowns (held devices
    are not occupancy: they are in the holds)."""
    rows: dict[str, DeviceRow] = {}
    for d in set(claims) | set(slowdowns):
        c = claims.get(d)
        job = c.job if c is not None and c.kind in (ClaimKind.EXTERNAL, ClaimKind.COMMITTED) else None
        failed = c is not None and c.kind is ClaimKind.FAILED
        row = DeviceRow(job, failed, slowdowns.get(d))
        if not row.empty:
            rows[d] = row
    return rows


def _outside(job: str | None, failed: bool) -> Claim | None:
    """The outside claim a reported row asks for: a failure wins over occupancy (a failed device holds no claim)."""
    if failed:
        return Claim(ClaimKind.FAILED)
    if job is not None:
        return Claim(ClaimKind.EXTERNAL, job=job)
    return None


def _plan(
    scope: Iterable[str],
    reported: Mapping[str, DeviceRow],
    named: set[str],
    cur: Current,
    now: float,
    revoke: bool,
    reason: str,
    cluster_id: str,
    replace: bool,
) -> UpdatePlan:
    """`reported[d]`: the row the update asks for (after the diff's operations, or the snapshot's row);
    `named`: devices the update names as free explicitly (diff `free`) or implicitly (a snapshot)."""
    live = {d: c for d, c in cur.claims.items() if c.live(now)}
    conflicts: dict[str, tuple[str, str, list[tuple[str, str]]]] = {}
    kept: set[str] = set()
    devices = sorted(scope)
    for d in devices:
        c = live.get(d)
        if c is None or not c.registry_owned:
            continue
        want = reported.get(d, DeviceRow())
        what = (
            "failed"
            if want.failed
            else f"occupied by {want.job!r}"
            if want.job is not None and want.job != c.job
            else None
        )
        rid = c.reservation_id or ""  # a held or committed claim names its reservation (a CHECK of the table)
        if what is not None:
            status = "HELD" if c.kind is ClaimKind.HELD else "COMMITTED"
            conflicts.setdefault(rid, (c.job or "", status, []))[2].append((d, what))
        elif want.job is None and d in named and (c.kind is ClaimKind.COMMITTED or not replace):
            kept.add(rid)
    if conflicts and not revoke:
        raise ClaimConflict(cluster_id, conflicts)
    plan = UpdatePlan(replace=replace)
    for rid, (_, _, devs) in sorted(conflicts.items()):
        plan.revoke[rid] = reason or (
            f"revoked by an UpdateState: {len(devs)} of its devices were reported "
            f"{'failed' if all(w == 'failed' for _, w in devs) else 'occupied or failed'}, e.g. {devs[0][0]}"
        )
    kept -= set(plan.revoke)
    plan.kept = sorted(kept)
    # the claims after the revocations; then what the update writes
    before = {d: c for d, c in live.items() if c.reservation_id not in plan.revoke}
    after = dict(before)
    for d in devices:
        want = reported.get(d, DeviceRow())
        slow = want.slowdown if want.slowdown is not None and want.slowdown > 1.0 else None
        if replace or slow != cur.slowdowns.get(d):
            plan.slowdowns[d] = slow
        c = before.get(d)
        if c is not None and c.registry_owned:
            continue  # a reservation keeps its devices (conflicts were revoked above)
        new = _outside(want.job, want.failed)
        if replace or new != c:
            plan.claims[d] = new
        if new is None:
            after.pop(d, None)
        else:
            after[d] = new
    if replace:
        plan.claims = {d: c for d, c in plan.claims.items() if c is not None}
        plan.slowdowns = {d: s for d, s in plan.slowdowns.items() if s is not None}
        slow_after = dict(plan.slowdowns)
    else:
        slow_after = {**cur.slowdowns, **plan.slowdowns}
    in_scope = set(devices)
    old_rows = stored_rows({d: c for d, c in before.items() if d in in_scope}, cur.slowdowns)
    new_rows = stored_rows(
        {d: c for d, c in after.items() if d in in_scope},
        {d: s for d, s in slow_after.items() if s is not None},
    )
    plan.changes = diff_document(old_rows, new_rows)
    return plan


def plan_diff(
    change: DiffChange, cur: Current, now: float, *, revoke: bool, reason: str, cluster_id: str
) -> UpdatePlan:
    """A diff against the claims of the devices it touches. ClaimConflict (nothing written) when it occupies a
    live reservation's device by another job or fails it, unless `revoke`."""
    live = {d: c for d, c in cur.claims.items() if c.live(now)}
    current = {
        d: DeviceRow(
            c.job if c.kind is not ClaimKind.FAILED else None,
            c.kind is ClaimKind.FAILED,
            cur.slowdowns.get(d),
        )
        for d, c in live.items()
    }
    for d, s in cur.slowdowns.items():
        current.setdefault(d, DeviceRow(slowdown=s))
    applied = change.apply(current)
    reported = {d: (row if row is not None else DeviceRow()) for d, row in applied.items()}
    return _plan(change.touched, reported, change.free, cur, now, revoke, reason, cluster_id, replace=False)


def plan_snapshot(
    rows: Mapping[str, DeviceRow],
    extras: Mapping[str, Any],
    cur: Current,
    now: float,
    *,
    revoke: bool,
    reason: str,
    cluster_id: str,
) -> UpdatePlan:
    """A full snapshot of the outside state against every claim of the cluster: outside claims and slowdowns
    are replaced; reservations keep their devices (ClaimConflict when the snapshot fails one or gives it to
    another job, unless `revoke`)."""
    scope = set(cur.claims) | set(cur.slowdowns) | set(rows)
    plan = _plan(scope, rows, scope, cur, now, revoke, reason, cluster_id, replace=True)
    live = {
        d: c
        for d, c in cur.claims.items()
        if c.live(now) and c.registry_owned and c.reservation_id not in plan.revoke
    }
    after = {**live, **{d: c for d, c in plan.claims.items() if c is not None}}
    plan.state = state_document(
        stored_rows(after, {d: s for d, s in plan.slowdowns.items() if s is not None}), extras
    )
    return plan


def diff_document(old: Mapping[str, DeviceRow], new: Mapping[str, DeviceRow]) -> dict[str, Any]:
    """The diff (free, recover, occupy, fail, degrade, applied in that order) that turns rows `old` into `new`."""
    occupy: dict[str, list[str]] = {}
    free: list[str] = []
    fail: list[str] = []
    recover: list[str] = []
    degrade: list[dict[str, Any]] = []
    empty = DeviceRow()
    for d in sorted(set(old) | set(new)):
        a, b = old.get(d, empty), new.get(d, empty)
        if a == b:
            continue
        if a.job is not None and b.job is None:
            free.append(d)
        slow_a = a.slowdown if a.slowdown is not None and a.slowdown > 1.0 else None
        slow_b = b.slowdown if b.slowdown is not None and b.slowdown > 1.0 else None
        recovered = (a.failed and not b.failed) or (slow_a is not None and slow_b is None)
        if recovered:
            recover.append(d)
        if b.job is not None and b.job != a.job:
            occupy.setdefault(b.job, []).append(d)
        if b.failed and (recovered or not a.failed):
            fail.append(d)
        if slow_b is not None and (recovered or slow_b != slow_a):
            degrade.append({"device": d, "slowdown": slow_b})
    doc: dict[str, Any] = {
        "occupy": [{"job": j, "devices": ds} for j, ds in sorted(occupy.items())],
        "free": free,
        "fail": fail,
        "recover": recover,
        "degrade": degrade,
    }
    return {k: v for k, v in doc.items() if v}
