"""The evaluator's step model v2 kept up to date under moves: a move re-plans only the groups and edges it
touches and re-prices only their phases (`StepEval`), so the search judges moves by what `place` reports.

Built on the cost model's public pieces (`Fabric`, `phase_seconds`, `PHASE_ORDER`, the compute model); it
computes what `placement.cost.step.model_step` does, phase by phase (tests check the two agree).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from placement.cost.collectives import Fabric, Plan, phase_seconds
from placement.cost.compute import ComputeModel, device_kind, job_device_kind, step_compute
from placement.cost.step import PHASE_ORDER
from placement.model.traffic import Traffic
from placement.solve.prepared import PreparedRequest

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


class StepEval:
    """The step of one mapping, per phase, with plans per group (op ids: groups, then edges offset by the
    number of groups)."""

    def __init__(self, request: PreparedRequest, mapping: Sequence[int]) -> None:
        self.p = request
        t, tr = request.topology, request.traffic
        self.fabric = Fabric(t, request.state)
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
        self.comp = self._compute(self.mapping)
        self.phases = {lab: self._phase(lab, self.plans, self.comp) for lab in self.labels}
        self.key = self._key(self.phases, self.comp)

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

    def _phase(
        self, label: str, plans: Sequence[Plan] | Mapping[int, Plan], comp: ComputeModel | None
    ) -> tuple[float, float]:
        tr, ng = self.p.traffic, self.n_groups
        seconds = exposed = 0.0
        for rnd in self.rounds[label]:
            times = phase_seconds(self.fabric, [plans[oid] for oid in rnd])
            r_secs = r_exp = 0.0
            for oid, (tm, _) in zip(rnd, times, strict=True):
                op = tr.groups[oid] if oid < ng else tr.edges[oid - ng]
                total = op.count * tm
                r_exp = max(r_exp, total * op.exposed)
                r_secs = max(r_secs, total)
            seconds += r_secs
            exposed += r_exp
        if label == "dp" and comp is not None and "dp" not in self.p.job.exposure:
            exposed = max(0.0, seconds - comp.backward_seconds_per_microbatch)
        return seconds, exposed

    def _key(
        self, phases: Mapping[str, tuple[float, float]], comp: ComputeModel | None
    ) -> tuple[float, float]:
        comm = 0.0
        for lab in self.labels:
            comm += phases[lab][1]
        job = self.p.job
        if comp is None or job.model is None or job.parallel is None:
            return comm, comm
        per_mb = comp.compute_seconds + sum(phases[lab][1] for lab in self.labels if lab != "dp")
        bubble = (job.parallel.pp - 1) / max(1, job.model.micro_batches) * per_mb
        return comp.compute_seconds + bubble + comm, comm

    # ---- moves -------------------------------------------------------------------------------------------------

    def trial(self, moves: Mapping[int, int]) -> Trial:
        """The step and exposed communication if rank r moved to device moves[r] (nothing is changed)."""
        view = _Overlay(self.mapping, moves)
        touched = {oid for r in moves for oid in self.ops_of[r]}
        new_plans = {oid: self._plan(oid, view) for oid in touched}
        plans = _PlanOverlay(self.plans, new_plans)
        comp = self.comp if self.one_kind else self._compute(view)
        labels = {self.label_of[oid] for oid in touched}
        if comp is not self.comp and "dp" in self.phases:
            labels.add("dp")
        phases = dict(self.phases)
        for lab in labels:
            phases[lab] = self._phase(lab, plans, comp)
        return Trial(self._key(phases, comp), dict(moves), new_plans, phases, comp)

    def apply(self, trial: Trial) -> None:
        for r, d in trial.moves.items():
            self.mapping[r] = d
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


class _Overlay(Mapping[int, int]):
    """A mapping with a few ranks moved, without copying it."""

    def __init__(self, base: Sequence[int], moves: Mapping[int, int]) -> None:
        self.base, self.moves = base, moves

    def __getitem__(self, r: int) -> int:
        return self.moves.get(r, self.base[r])

    def __len__(self) -> int:
        return len(self.base)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(len(self.base)))


class _PlanOverlay(Mapping[int, Plan]):
    def __init__(self, base: Sequence[Plan], new: Mapping[int, Plan]) -> None:
        self.base, self.new = base, new

    def __getitem__(self, oid: int) -> Plan:
        hit = self.new.get(oid)
        return self.base[oid] if hit is None else hit

    def __len__(self) -> int:
        return len(self.base)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(len(self.base)))
