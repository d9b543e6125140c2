"""The history checker of the registry (in the spirit of Jepsen's Elle): an independent model of claims replays
the registry's event log (its commit order) and checks the invariant after every event, and every operation a
client saw acknowledged (or refused) is checked against that order: it happened, once, inside its call's window,
with the answer the client got. Reads are compared with the model at their seq; the final database with the
model at the end. Nothing here uses the registry's own planning code."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format

from placement.registry.model import Event

__all__ = ["Checker", "Op"]

TOL_S = 0.5  # server and clients share the host's clock; slack for the time between taking `now` and the call


@dataclass
class Op:
    """One client call: what was asked, when, and what came back (ok, fail with a code, or info: unknown)."""

    client: int
    kind: str  # reserve, commit, renew, release, diff, snapshot, read, list
    args: dict[str, Any]
    invoke: float
    complete: float = 0.0
    outcome: str = ""  # ok | fail | info
    code: str = ""
    detail: str = ""
    resp: Any = None
    types: list[str] = field(default_factory=list)  # PreconditionFailure violation types
    subjects: list[str] = field(default_factory=list)  # and their descriptions


@dataclass
class _Res:
    rid: str
    job: str
    devices: tuple[str, ...]
    status: str
    expires: float
    heartbeat: float | None
    reserved: Event
    committed: Event | None = None
    ended: Event | None = None
    renewals: list[Event] = field(default_factory=list)

    def runs_out(self) -> bool:
        return self.status == "HELD" or (self.status == "COMMITTED" and self.heartbeat is not None)

    def live(self) -> bool:
        return self.status in ("HELD", "COMMITTED")


class Checker:
    """Replay with `apply(event)` in seq order, then `check_ops(history)`; `problems` lists every violation."""

    def __init__(self, devices: list[str]) -> None:
        self.devices = devices
        self.owner: dict[str, tuple[str, str]] = {}  # device -> ("res", rid) | ("ext", job) | ("failed", "")
        self.slow: dict[str, float] = {}
        self.res: dict[str, _Res] = {}
        self.generation = 0
        self.seq = 0
        self.by_generation: dict[int, Event] = {}
        self.pending_revoked: list[str] = []
        self.states: dict[
            int, tuple[dict[str, str], set[str], dict[str, float], dict[str, Any], dict[str, float]]
        ]
        self.states = {}
        self.problems: list[str] = []
        self.kinds: Counter[str] = Counter()

    def _bad(self, ev: Event | None, msg: str) -> None:
        where = f"seq {ev.seq} {ev.kind}: " if ev is not None else ""
        self.problems.append(where + msg)

    # ---- replay ----------------------------------------------------------------------------------------------

    def apply(self, ev: Event) -> None:
        if ev.seq != self.seq + 1:
            self._bad(ev, f"a gap in the event log after seq {self.seq}")
        self.seq = ev.seq
        self.kinds[ev.kind] += 1
        if self.pending_revoked and ev.kind not in ("REVOKED", "STATE_DIFF", "STATE_REPLACED"):
            self._bad(ev, f"revocations {self.pending_revoked} not followed by their update")
            self.pending_revoked = []
        p = ev.payload
        handler = getattr(self, f"_on_{ev.kind.lower()}", None)
        if handler is None:
            self._bad(ev, "unknown event kind")
        else:
            handler(ev, p)
        self._invariant(ev)
        self.states[ev.seq] = (
            {d: o[1] for d, o in self.owner.items() if o[0] == "ext"}
            | {
                d: self.res[o[1]].job
                for d, o in self.owner.items()
                if o[0] == "res" and self.res[o[1]].status == "COMMITTED"
            },
            {d for d, o in self.owner.items() if o[0] == "failed"},
            dict(self.slow),
            {r.rid: (r.devices, r.expires) for r in self.res.values() if r.status == "HELD"},
            {
                d: r.expires
                for r in self.res.values()
                if r.status == "COMMITTED" and r.heartbeat is not None
                for d in r.devices
            },
        )

    def _invariant(self, ev: Event) -> None:
        """Every device in at most one live claim, and no failed device in a live reservation."""
        seen: dict[str, str] = {}
        for r in self.res.values():
            if not r.live():
                continue
            for d in r.devices:
                if d in seen:
                    self._bad(ev, f"{d} in two live reservations {seen[d]} and {r.rid}")
                seen[d] = r.rid
                if self.owner.get(d) != ("res", r.rid):
                    self._bad(ev, f"{d} of live reservation {r.rid} is {self.owner.get(d)}")
        for d, o in self.owner.items():
            if o[0] == "res" and seen.get(d) != o[1]:
                self._bad(ev, f"{d} claimed by {o[1]}, which is not live")

    def _on_cluster_put(self, ev: Event, p: dict[str, Any]) -> None:
        pass

    def _on_reserved(self, ev: Event, p: dict[str, Any]) -> None:
        rid = p["id"]
        if rid in self.res:
            self._bad(ev, f"reservation {rid} reserved twice")
            return
        if p["generation"] != self.generation:
            self._bad(ev, f"computed on generation {p['generation']}, the state is at {self.generation}")
        devs = tuple(p["devices"])
        if len(set(devs)) != len(devs):
            self._bad(ev, "a device twice in one reservation")
        for d in devs:
            if d in self.owner:
                self._bad(ev, f"{d} reserved while it is {self.owner[d]}")
            self.owner[d] = ("res", rid)
        self.res[rid] = _Res(rid, p["job"], devs, "HELD", p["expires_at"], None, ev)

    def _live(self, ev: Event, rid: str, what: str) -> _Res | None:
        r = self.res.get(rid)
        if r is None:
            self._bad(ev, f"{what} of unknown reservation {rid}")
            return None
        if not r.live():
            self._bad(ev, f"{what} of reservation {rid}, which is {r.status}")
            return None
        if r.runs_out() and ev.at >= r.expires:
            self._bad(ev, f"{what} of reservation {rid} after its end {r.expires}")
        return r

    def _on_committed(self, ev: Event, p: dict[str, Any]) -> None:
        r = self._live(ev, p["id"], "commit")
        if r is None:
            return
        if r.status != "HELD":
            self._bad(ev, f"commit of {r.rid}, which is {r.status}")
        r.status, r.committed = "COMMITTED", ev
        r.heartbeat, r.expires = p.get("heartbeat_s"), p["expires_at"]

    def _on_renewed(self, ev: Event, p: dict[str, Any]) -> None:
        r = self._live(ev, p["id"], "renew")
        if r is not None:
            if not r.runs_out():
                self._bad(ev, f"renew of {r.rid}, which has no lease or heartbeat")
            r.expires = p["expires_at"]
            r.renewals.append(ev)

    def _end(self, ev: Event, p: dict[str, Any], status: str) -> _Res | None:
        r = self._live(ev, p["id"], status.lower()) if status != "EXPIRED" else self.res.get(p["id"])
        if r is None:
            self._bad(ev, f"{status} of unknown reservation {p['id']}") if status == "EXPIRED" else None
            return None
        if status == "EXPIRED":
            if not (r.live() and r.runs_out()):
                self._bad(ev, f"expiry of {r.rid}, which is {r.status} without an end")
            elif r.expires > ev.at + 1e-6:
                self._bad(ev, f"{r.rid} expired at {ev.at} before its end {r.expires}")
        for d in r.devices:
            if self.owner.get(d) == ("res", r.rid):
                del self.owner[d]
        r.status, r.ended = status, ev
        return r

    def _on_released(self, ev: Event, p: dict[str, Any]) -> None:
        self._end(ev, p, "RELEASED")

    def _on_expired(self, ev: Event, p: dict[str, Any]) -> None:
        self._end(ev, p, "EXPIRED")

    def _on_revoked(self, ev: Event, p: dict[str, Any]) -> None:
        if self._end(ev, p, "REVOKED") is not None:
            self.pending_revoked.append(p["id"])

    def _update(self, ev: Event, p: dict[str, Any]) -> None:
        if ev.generation <= self.generation:
            self._bad(ev, f"generation {ev.generation} not above {self.generation}")
        self.generation = ev.generation
        if ev.generation in self.by_generation:
            self._bad(ev, f"two updates of generation {ev.generation}")
        self.by_generation[ev.generation] = ev
        if sorted(p.get("revoked", [])) != sorted(self.pending_revoked):
            self._bad(ev, f"names revoked {p.get('revoked', [])}, the log revoked {self.pending_revoked}")
        self.pending_revoked = []

    def _outside(self, ev: Event, d: str, what: str) -> bool:
        o = self.owner.get(d)
        if o is not None and o[0] == "res":
            self._bad(ev, f"{what} {d}, which reservation {o[1]} holds")
            return False
        return True

    def _on_state_diff(self, ev: Event, p: dict[str, Any]) -> None:
        self._update(ev, p)
        diff = p["diff"]
        for d in diff.get("free", []):
            if self.owner.get(d, ("", ""))[0] != "ext":
                self._bad(ev, f"frees {d}, which is {self.owner.get(d)}")
            elif self._outside(ev, d, "frees"):
                del self.owner[d]
        for d in diff.get("recover", []):
            if self.owner.get(d, ("", ""))[0] == "failed":
                del self.owner[d]
            self.slow.pop(d, None)
        for occ in diff.get("occupy", []):
            for d in occ["devices"]:
                if self.owner.get(d, ("", ""))[0] == "failed":
                    self._bad(ev, f"occupies failed {d}")
                elif self._outside(ev, d, "occupies"):
                    self.owner[d] = ("ext", occ["job"])
        for d in diff.get("fail", []):
            if self.owner.get(d, ("", ""))[0] == "ext":
                self._bad(ev, f"fails {d} and leaves its outside job on it")
            elif self._outside(ev, d, "fails"):
                self.owner[d] = ("failed", "")
        for g in diff.get("degrade", []):
            self.slow[g["device"]] = g["slowdown"]

    def _on_state_replaced(self, ev: Event, p: dict[str, Any]) -> None:
        self._update(ev, p)
        st = p["state"]
        occupied = {d: o["job"] for o in st.get("occupied", []) for d in o["devices"]}
        failed = set(st.get("failed", []))
        for r in self.res.values():  # a snapshot never drops a reservation's devices
            if r.status == "COMMITTED" and any(occupied.get(d) != r.job for d in r.devices):
                self._bad(ev, f"the stored state lost committed reservation {r.rid}")
            if r.status == "HELD" and any(d in occupied or d in failed for d in r.devices):
                self._bad(ev, f"the stored state took held reservation {r.rid}'s devices")
        self.owner = {d: o for d, o in self.owner.items() if o[0] == "res"}
        for d in failed:
            if self._outside(ev, d, "fails"):
                self.owner[d] = ("failed", "")
        for d, job in occupied.items():
            if d in failed:
                self._bad(ev, f"{d} both occupied and failed in the stored state")
            elif self.owner.get(d, ("", ""))[0] != "res":
                self.owner[d] = ("ext", job)
        self.slow = {g["device"]: g["slowdown"] for g in st.get("degraded", [])}

    # ---- the acknowledged history ---------------------------------------------------------------------------

    def _window(self, op: Op, ev: Event, what: str) -> None:
        if not (op.invoke - TOL_S <= ev.at <= op.complete + TOL_S):
            self._bad(
                None,
                f"{what} of client {op.client} happened at {ev.at}, outside its call "
                f"[{op.invoke}, {op.complete}]",
            )

    def check_ops(self, history: list[Op]) -> Counter[str]:
        """Check every call against the replayed log; returns counts of outcomes per kind and code."""
        seen: Counter[str] = Counter()
        for op in history:
            seen[f"{op.kind}:{op.outcome}:{op.code}"] += 1
            if op.outcome == "fail" and op.code in ("INTERNAL", "UNKNOWN", "INVALID_ARGUMENT"):
                self._bad(None, f"{op.kind} of client {op.client} failed with {op.code}: {op.detail}")
            if op.outcome == "info":
                continue  # unknown: it may or may not have happened (a killed replica, a deadline)
            getattr(self, f"_check_{op.kind}")(op)
        return seen

    def _check_reserve(self, op: Op) -> None:
        if op.outcome != "ok":
            return
        rid = op.resp.reservation_id
        r = self.res.get(rid)
        if r is None:
            self._bad(None, f"acknowledged reservation {rid} is not in the log (lost)")
            return
        if tuple(op.resp.reservation.devices) != r.devices:
            self._bad(None, f"reservation {rid}: the client got other devices than the log holds")
        if [a.device for a in op.resp.result.mapping] != list(r.devices):
            self._bad(None, f"reservation {rid}: its placement and its devices differ")
        if not op.resp.replayed:
            self._window(op, r.reserved, f"reservation {rid}")

    def _gone(self, op: Op, rid: str) -> bool:
        """The reservation was ended, committed or past its end by the end of the call."""
        r = self.res.get(rid)
        if r is None:
            return False
        t = op.complete + TOL_S
        return (
            (r.ended is not None and r.ended.at <= t)
            or (r.runs_out() and r.expires <= t)
            or (r.committed is not None and r.committed.at <= t)
        )

    def _refused(self, op: Op, rid: str, allowed: tuple[str, ...], why: str) -> None:
        if op.code == "NOT_FOUND":
            self._bad(None, f"{op.kind} of acknowledged reservation {rid}: NOT_FOUND (lost)")
        elif op.code == "FAILED_PRECONDITION":
            kinds = set(op.types)
            if not kinds <= set(allowed):
                self._bad(None, f"{op.kind} of {rid} refused as {kinds}: {op.detail}")
            elif why and not self._gone(op, rid):
                self._bad(None, f"{op.kind} of {rid} refused ({op.detail}) while it was live")

    def _check_commit(self, op: Op) -> None:
        rid = op.args["rid"]
        r = self.res.get(rid)
        if op.outcome == "fail":
            self._refused(op, rid, ("expired", "revoked", "wrong-status"), "live")
            return
        if r is None or r.committed is None or op.resp.reservation.status != 2:
            self._bad(None, f"acknowledged commit of {rid} is not in the log")
            return
        if r.committed.at > op.complete + TOL_S:
            self._bad(None, f"commit of {rid} logged after the call ended")

    def _check_renew(self, op: Op) -> None:
        rid = op.args["rid"]
        r = self.res.get(rid)
        if op.outcome == "fail":
            self._refused(op, rid, ("expired", "revoked", "wrong-status"), "")
            return
        if r is None:
            self._bad(None, f"acknowledged renew of unknown {rid}")
            return
        got = op.resp.reservation
        if got.status == 2 and not got.HasField("heartbeat_s"):
            return  # no lease: nothing to renew, no event
        if not any(abs(e.payload["expires_at"] - got.expires_unix_s) < 1e-6 for e in r.renewals):
            self._bad(None, f"acknowledged renew of {rid} to {got.expires_unix_s} is not in the log")

    def _check_release(self, op: Op) -> None:
        rid = op.args["rid"]
        r = self.res.get(rid)
        if op.outcome == "fail":
            self._refused(op, rid, (), "")
            return
        names = {3: "RELEASED", 4: "EXPIRED", 5: "REVOKED"}
        got = names.get(op.resp.reservation.status, "?")
        if r is None or r.ended is None or r.status != got:
            self._bad(None, f"release of {rid} answered {got}, the log says {r and r.status}")
        elif got == "RELEASED" and r.ended.at > op.complete + TOL_S:
            self._bad(None, f"release of {rid} logged after the call ended")

    def _check_update(self, op: Op) -> None:
        g = op.args["generation"]
        ev = self.by_generation.get(g)
        if op.outcome == "fail" or op.args.get("dry_run"):
            if ev is not None:
                self._bad(ev, f"generation {g} was refused or a dry run, yet it is in the log")
            if op.outcome == "fail" and "claimed-device" in op.types:
                for rid in {m for s in op.subjects for m in re.findall(r"reservation ([0-9a-f]{32})", s)}:
                    r = self.res.get(rid)
                    if (
                        r is None
                        or r.reserved.at > op.complete + TOL_S
                        or (r.ended is not None and r.ended.at < op.invoke - TOL_S)
                    ):
                        self._bad(None, f"update {g} refused for reservation {rid}, not live during the call")
            elif op.outcome == "fail" and op.code != "ABORTED" and not set(op.types) <= {"stale-generation"}:
                self._bad(None, f"update {g} refused as {op.types}: {op.detail}")
            return
        if ev is None:
            self._bad(None, f"acknowledged update of generation {g} is not in the log (lost)")
            return
        self._window(op, ev, f"update {g}")
        if op.resp.seq != ev.seq:
            self._bad(ev, f"update {g} answered seq {op.resp.seq}")
        if sorted(r.id for r in op.resp.revoked) != sorted(ev.payload.get("revoked", [])):
            self._bad(ev, f"update {g} answered other revocations than it logged")
        if op.kind == "diff":
            changes = json_format.MessageToDict(op.resp.changes)
            if _norm(changes) != _norm(ev.payload["diff"]):
                self._bad(ev, f"update {g} answered changes {changes}, logged {ev.payload['diff']}")

    _check_diff = _check_update
    _check_snapshot = _check_update

    def _check_read(self, op: Op) -> None:
        if op.outcome != "ok":
            return
        st = self.states.get(op.resp.seq)
        if st is None:
            self._bad(None, f"a read at seq {op.resp.seq}, which the log does not have")
            return
        occupied, failed, slow, holds, beats = st
        got = json_format.MessageToDict(op.resp.state)
        got_occ = {d: o["job"] for o in got.get("occupied", []) for d in o["devices"]}
        unsure = {d for d, end in beats.items() if end <= op.complete + TOL_S}  # a heartbeat ending during it
        differ = {d for d in set(got_occ) | set(occupied) if got_occ.get(d) != occupied.get(d)} - unsure
        if differ or set(got.get("failed", [])) != failed:
            self._bad(
                None,
                f"a read at seq {op.resp.seq} differs from the log's state there: occupied "
                f"{sorted((d, got_occ.get(d), occupied.get(d)) for d in differ)[:4]}, failed "
                f"{sorted(set(got.get('failed', [])) ^ failed)[:4]}",
            )
        if {g["device"]: g["slowdown"] for g in got.get("degraded", [])} != slow:
            self._bad(None, f"a read at seq {op.resp.seq}: other slowdowns than the log's")
        got_holds = {h.id: tuple(h.devices) for h in op.resp.holds}
        for rid, (devs, exp) in holds.items():  # a lease ending during the read may be in or out
            if exp > op.complete + TOL_S and got_holds.get(rid) != devs:
                self._bad(None, f"a read at seq {op.resp.seq} misses hold {rid}")
        for rid in got_holds:
            if rid not in holds:
                self._bad(None, f"a read at seq {op.resp.seq} shows hold {rid}, not held there")

    def _check_list(self, op: Op) -> None:
        """A reservation a ListReservations reported EXPIRED is EXPIRED for good: the log ends it EXPIRED (or it is
        still unswept past its end), never commits, renews or releases it afterwards."""
        if op.outcome != "ok":
            return
        for got in op.resp.reservations:
            if got.status != 4:  # RESERVATION_STATUS_EXPIRED
                continue
            r = self.res.get(got.id)
            if r is None:
                self._bad(None, f"a list reported {got.id} EXPIRED; the log has no such reservation")
            elif r.status != "EXPIRED" and not (r.runs_out() and r.expires <= op.invoke + TOL_S):
                self._bad(
                    None, f"a list reported {got.id} EXPIRED at {op.invoke}; the log ends it {r.status}"
                )

    # ---- the end --------------------------------------------------------------------------------------------

    def check_final(self, claims: dict[str, tuple[str, str]], statuses: dict[str, str], now: float) -> None:
        """The database at the end equals the model after the last event (leases may have run out since)."""
        if claims != self.owner:
            diff = sorted(set(claims.items()) ^ set(self.owner.items()))[:4]
            self._bad(None, f"the final claims differ from the log's: {diff}")
        for rid, r in self.res.items():
            if statuses.get(rid) != r.status:
                self._bad(
                    None, f"reservation {rid} is {statuses.get(rid)} in the database, {r.status} in the log"
                )


def _norm(diff: dict[str, Any]) -> dict[str, Any]:
    out = dict(diff)
    if "degrade" in out:
        out["degrade"] = sorted((g["device"], float(g["slowdown"])) for g in out["degrade"])
    if "occupy" in out:
        out["occupy"] = sorted((o["job"], tuple(sorted(o["devices"]))) for o in out["occupy"])
    for k in ("free", "fail", "recover"):
        if k in out:
            out[k] = sorted(out[k])
    return out
