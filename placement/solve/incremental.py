"""The evaluator's step model kept up to date under moves: a move re-plans only the groups and edges it
touches and re-prices only their phases (`StepEval`), so the search judges moves by what `place` reports.

Built on the cost model's public pieces (`Fabric`, `share_phase`, `PHASE_ORDER`, the compute model); it
computes what `placement.cost.step.model_step` does, phase by phase (tests check the two agree): max-min sharing
moves every operation that shares a link with a moved one, directly or through others, so a move that changes a
plan re-prices its round whole (the same floats as the full model).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from placement.cost.collectives import Background, Fabric, Plan, fabric_for, share_phase
from placement.cost.compute import ComputeModel, device_kind, job_device_kind, step_compute
from placement.cost.shared import background_for
from placement.cost.step import PHASE_ORDER, assemble_step, phase_exposed
from placement.model.traffic import Traffic
from placement.solve.prepared import MovedMapping, PreparedRequest

__all__ = ["StepEval", "Trial"]

MAX_PLANS = 200_000  # cached plans (keyed by the devices of a group) before the cache is cleared


@dataclass
class Trial:
    """The outcome of a move not yet applied: its (step, exposed comm) and what `StepEval.apply` needs."""

    key: tuple[float, float]
    moves: dict[int, int]
    plans: dict[int, Plan]
    phases: dict[str, tuple[float, float]]
    comp: ComputeModel | None
    rounds: list[tuple[_Round, dict[int, float], float, float, list[int]]]


@dataclass
class _Round:
    """One round of a phase (rank-disjoint groups that run at the same time): its operations, each one's seconds
    and the round's slowest (total and exposed)."""

    ops: list[int]
    times: dict[int, float]
    secs: float = 0.0
    exp: float = 0.0

    def price(
        self, fabric: Fabric, plans: Sequence[Plan], background: Background | None = None
    ) -> dict[int, float]:
        """Seconds of every operation of the round under `plans` (by operation id), as `model_step` prices it
        (with the other jobs' traffic of `background`, as `placement.cost.evaluate.evaluate` gives it)."""
        out = share_phase(fabric, [plans[o] for o in self.ops], background)[0]
        return {o: t for o, (t, _) in zip(self.ops, out, strict=True)}


class StepEval:
    """The step of one mapping, per phase, with plans per group (op ids: groups, then edges offset by the
    number of groups)."""

    def __init__(self, request: PreparedRequest, mapping: Sequence[int]) -> None:
        self.p = request
        t, tr = request.topology, request.traffic
        self.fabric = fabric_for(t, request.state)  # its plan caches outlive the call
        self.background = background_for(t, request.state, exclude=request.job.name)
        self.mapping = list(mapping)
        self.n_groups = len(tr.groups)
        self.ops_of: list[list[int]] = [[] for _ in range(request.job.ranks)]
        self.label_of: list[str] = []
        groups: dict[str, list[int]] = {}
        edges: dict[str, list[int]] = {}
        for gi, g in enumerate(tr.groups):
            groups.setdefault(g.label, []).append(gi)
            self.label_of.append(g.label)
            for r in g.members:
                self.ops_of[r].append(gi)
        for ei, e in enumerate(tr.edges):
            oid = self.n_groups + ei
            edges.setdefault(e.label, []).append(oid)
            self.label_of.append(e.label)
            self.ops_of[e.src].append(oid)
            if e.dst != e.src:
                self.ops_of[e.dst].append(oid)
        seen = list(dict.fromkeys([*groups, *edges]))
        self.labels = [lab for lab in PHASE_ORDER if lab in seen] + [
            lab for lab in seen if lab not in PHASE_ORDER
        ]
        self.rounds: dict[str, list[list[int]]] = {
            lab: _rounds(tr, groups.get(lab, []), edges.get(lab, [])) for lab in self.labels
        }
        kinds = {t.devices[d].kind for d in request.candidates}
        self.one_kind = len(kinds) <= 1
        self._cache: dict[tuple[object, ...], Plan] = {}
        self.plans = [self._plan(oid, self.mapping) for oid in range(len(self.label_of))]
        self.weight = [(g.count, g.count * g.exposed) for g in tr.groups]
        self.weight += [(e.count, e.count * e.exposed) for e in tr.edges]
        self.state: dict[str, list[_Round]] = {}
        self.round_of: dict[int, _Round] = {}
        for lab in self.labels:
            rows = []
            for ops in self.rounds[lab]:
                rd = _Round(list(ops), {})
                for oid in ops:
                    self.round_of[oid] = rd
                rd.times = rd.price(self.fabric, self.plans, self.background)
                rd.secs, rd.exp = self._slowest(rd)
                rows.append(rd)
            self.state[lab] = rows
        self.comp = self._compute(self.mapping)
        self.phases = {lab: self._phase(lab, self.comp) for lab in self.labels}
        self.key = self._key(self.phases, self.comp)

    def _slowest(self, rd: _Round, new: dict[int, float] | None = None) -> tuple[float, float]:
        """The round's slowest operation (total, exposed), with `new` times overriding the round's own."""
        w = self.weight
        base = rd.times
        secs = exp = 0.0
        for oid in rd.ops:
            t = new.get(oid) if new else None
            if t is None:
                t = base[oid]
            a, b = w[oid]
            if a * t > secs:
                secs = a * t
            if b * t > exp:
                exp = b * t
        return secs, exp

    # ---- pieces ------------------------------------------------------------------------------------------------

    def _plan(self, oid: int, mp: Sequence[int] | Mapping[int, int]) -> Plan:
        tr = self.p.traffic
        if oid < self.n_groups:
            g = tr.groups[oid]
            devs = tuple(mp[r] for r in g.members)
            key: tuple[object, ...] = (g.kind, g.bytes, devs)
            hit = self._cache.get(key)
            if hit is None:
                if len(self._cache) > MAX_PLANS:
                    self._cache.clear()
                hit = self.fabric.plan_group(g.kind, devs, g.bytes)
                self._cache[key] = hit
            return hit
        e = tr.edges[oid - self.n_groups]
        return self.fabric.plan_edge(mp[e.src], mp[e.dst], e.bytes)

    def _compute(self, mp: Sequence[int] | Mapping[int, int]) -> ComputeModel | None:
        job, t = self.p.job, self.p.topology
        if job.model is None or job.parallel is None:
            return None
        devs = [mp[r] for r in range(job.ranks)] if not isinstance(mp, list) else mp
        kind = job_device_kind(t, devs) or device_kind(job.device_kind, t)
        return step_compute(job.model, job.parallel, kind) if kind is not None else None

    def _phase(self, label: str, comp: ComputeModel | None) -> tuple[float, float]:
        seconds = exposed = 0.0
        for rd in self.state[label]:
            seconds += rd.secs
            exposed += rd.exp
        return seconds, phase_exposed(label, seconds, exposed, comp, self.p.job)

    def _key(
        self, phases: Mapping[str, tuple[float, float]], comp: ComputeModel | None
    ) -> tuple[float, float]:
        totals = assemble_step(self.labels, phases, comp, self.p.job)
        return totals.step, totals.comm

    # ---- moves -------------------------------------------------------------------------------------------------

    def trial(self, moves: Mapping[int, int]) -> Trial:
        """The step and exposed communication if rank r moved to device moves[r] (nothing is changed): only the
        touched operations are re-planned, and only the rounds where a plan changed re-priced."""
        view = MovedMapping(self.mapping, moves)
        touched = {oid for r in moves for oid in self.ops_of[r]}
        new_plans = {oid: self._plan(oid, view) for oid in touched}
        comp = self.comp if self.one_kind else self._compute(view)
        by_round: dict[int, tuple[_Round, list[int]]] = {}
        for oid in touched:
            rd = self.round_of[oid]
            by_round.setdefault(id(rd), (rd, []))[1].append(oid)
        updates = []
        sums: dict[str, list[float]] = {}
        for rd, oids in by_round.values():
            # max-min sharing moves every operation sharing links with a moved one, directly or through others:
            # the round is priced again, whole, when a plan changed
            moved = [oid for oid in oids if new_plans[oid] != self.plans[oid]]
            new_times: dict[int, float] = {}
            if moved and all(not _loads(self.plans[o]) and not _loads(new_plans[o]) for o in moved):
                # on no shared link before or after (inside a host): the others do not move, these take their own
                out = share_phase(self.fabric, [new_plans[o] for o in moved])[0]
                new_times = {o: t for o, (t, _) in zip(moved, out, strict=True)}
            elif moved:
                new_times = rd.price(
                    self.fabric, _Overlay(self.plans, {oid: new_plans[oid] for oid in moved}), self.background
                )
            secs, exp = self._slowest(rd, new_times)
            updates.append((rd, new_times, secs, exp, oids))
            label = self.label_of[oids[0]]
            acc = sums.setdefault(label, [0.0, 0.0])
            acc[0] += secs - rd.secs
            acc[1] += exp - rd.exp
        labels = set(sums)
        if comp is not self.comp and "dp" in self.phases:
            labels.add("dp")
        phases = dict(self.phases)
        for lab in labels:
            seconds = exposed = 0.0
            for rd in self.state[lab]:
                seconds += rd.secs
                exposed += rd.exp
            d = sums.get(lab, [0.0, 0.0])
            seconds, exposed = seconds + d[0], exposed + d[1]
            phases[lab] = (seconds, phase_exposed(lab, seconds, exposed, comp, self.p.job))
        return Trial(self._key(phases, comp), dict(moves), new_plans, phases, comp, updates)

    def apply(self, trial: Trial) -> None:
        for r, d in trial.moves.items():
            self.mapping[r] = d
        for rd, new_times, secs, exp, _oids in trial.rounds:
            rd.times.update(new_times)
            rd.secs, rd.exp = secs, exp
        for oid, plan in trial.plans.items():
            self.plans[oid] = plan
        self.phases, self.comp, self.key = trial.phases, trial.comp, trial.key


def _rounds(tr: Traffic, group_ids: list[int], edge_ids: list[int]) -> list[list[int]]:
    """Groups in rounds of rank-disjoint groups (first fit, as the step model forms them); edges join the first."""
    from_tr = tr.groups
    rounds: list[list[int]] = []
    used: list[set[int]] = []
    for gi in group_ids:
        members = from_tr[gi].members
        for i, u in enumerate(used):
            if u.isdisjoint(members):
                rounds[i].append(gi)
                u.update(members)
                break
        else:
            rounds.append([gi])
            used.append(set(members))
    if edge_ids:
        if rounds:
            rounds[0].extend(edge_ids)
        else:
            rounds.append(list(edge_ids))
    return rounds


class _Overlay(Sequence[Plan]):
    """Plans by operation id with some replaced (a trial's), without copying the list."""

    def __init__(self, base: list[Plan], new: dict[int, Plan]) -> None:
        self.base, self.new = base, new

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, oid: int) -> Plan:  # type: ignore[override]
        hit = self.new.get(oid)
        return self.base[oid] if hit is None else hit


def _loads(plan: Plan) -> bool:
    """The plan puts bytes on some shared link (a NIC or an uplink)."""
    return any(st.loads for st in plan.stages)
