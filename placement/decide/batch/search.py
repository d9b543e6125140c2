"""One batch request being searched (`BatchSearch`): its inputs and clock, each job's traffic and pre-checks, and
single-job placements (cpsat through `place_job`, which aims for a balance rule, or the FIFO kueue-tas baseline) on
a state that shrinks as jobs are admitted."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
from placement.cost.serving import ServingReport
from placement.decide.balance import place_job
from placement.decide.batch.admit import Admission
from placement.decide.batch.explain import pre_checks
from placement.decide.batch.types import Assign, BatchJob
from placement.decide.serving import place_decode_step, price_decode_step
from placement.errors import InfeasibleError
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.model.validate import validate
from placement.solve.baselines import kueue_tas
from placement.solve.types import SolveOptions, Strategy
from placement.solve.units import candidate_devices

__all__ = ["BatchSearch"]


class BatchSearch:
    """One request: the inputs, the clock, and the single-job placements on a shrinking state."""

    def __init__(
        self,
        topology: Topology,
        state: ClusterState,
        jobs: Sequence[BatchJob],
        options: SolveOptions,
        traffic: Sequence[Traffic],
    ) -> None:
        """`traffic`: each job's `job_traffic`, in queue order."""
        self.topology, self.state, self.jobs, self.options = topology, state, list(jobs), options
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + options.time_limit_s
        self.traffic: list[Traffic] = list(traffic)
        self.solo: list[list[str]] = [
            pre_checks(topology, state, bj.job, t) for bj, t in zip(jobs, self.traffic, strict=True)
        ]
        self.feasible = [i for i, r in enumerate(self.solo) if not r]
        self.placements = 0
        self.cut_short = 0  # sequential passes ended early at the time limit
        self.seen: dict[
            int, dict[tuple[int, ...], CostReport]
        ] = {}  # every placement found per job, any state
        self.serving_seen: dict[tuple[int, tuple[int, ...]], ServingReport] = {}  # serving jobs' reports

    def remaining(self) -> float:
        if self.options.deterministic:
            return self.options.time_limit_s
        return self.deadline - time.perf_counter()

    def stopped(self) -> bool:
        return self.options.stop is not None and self.options.stop.is_set()

    def state_with(
        self, assign: Mapping[int, tuple[list[int], CostReport]], skip: int | None = None
    ) -> ClusterState:
        """The base state with the devices of every job in `assign` (but `skip`) occupied by that job."""
        occ = dict(self.state.occupied)
        for j, (m, _) in assign.items():
            if j != skip:
                name = self.jobs[j].job.name
                for d in m:
                    occ[d] = name
        return replace(self.state, occupied=occ)

    def place_one(
        self, j: int, state: ClusterState, limit_s: float, allowed: set[int] | None = None
    ) -> tuple[list[int], CostReport] | None:
        """Job `j` by the cpsat strategy through `place_job` (balanced slices aimed for) on `state` (only on
        `allowed` devices, when given); None if it fails."""
        job = self.jobs[j].job
        if allowed is not None:
            occ = dict(state.occupied)
            for d in candidate_devices(self.topology, state, job):
                if d not in allowed:
                    occ[d] = "<reserved for another job of the batch>"
            solve_state = replace(state, occupied=occ)
        else:
            solve_state = state
        if pre_checks(self.topology, solve_state, job, self.traffic[j]):
            return None
        opts = SolveOptions(
            strategy=Strategy.CPSAT,
            time_limit_s=max(0.05, limit_s),
            relative_gap=self.options.relative_gap,
            seed=self.options.seed,
            workers=self.options.workers,
            stop=self.options.stop,
            deterministic=self.options.deterministic,
        )
        self.placements += 1
        serving = self.jobs[j].serving
        if serving is not None:  # by the serving objective; its step is its TPOT (placement.decide.serving)
            try:
                m, rep, srep = place_decode_step(self.topology, solve_state, serving, opts)
            except InfeasibleError:
                return None
            if validate(self.topology, state, job, m, traffic=self.traffic[j]):
                return None
            self.seen.setdefault(j, {})[tuple(m)] = rep
            self.serving_seen[(j, tuple(m))] = srep
            return m, rep
        try:
            res = place_job(self.topology, solve_state, job, opts, traffic=self.traffic[j])
        except InfeasibleError:
            return None
        if (
            res.mapping is None
            or res.report is None
            or validate(self.topology, state, job, res.mapping, traffic=self.traffic[j])
        ):
            return None
        self.seen.setdefault(j, {})[tuple(res.mapping)] = res.report
        return list(res.mapping), res.report

    def sequential(
        self,
        order: Sequence[int],
        budget_s: float,
        assign: Assign | None = None,
        allowed: Mapping[int, set[int]] | None = None,
    ) -> Assign:
        """Place `order` one job after the other on what the jobs before left; a job that does not fit is left
        out. Each job's time limit is its share (by ranks, at least 16) of `budget_s`."""
        out: Assign = dict(assign or {})
        todo = [j for j in order if j not in out]
        total = sum(max(16, self.jobs[j].job.ranks) for j in todo)
        end = time.perf_counter() + budget_s
        for j in todo:
            if self.stopped():
                break
            size = max(16, self.jobs[j].job.ranks)
            if self.options.deterministic:
                share = budget_s * size / max(total, 1)
            else:
                if self.remaining() < 0.05:  # the whole limit is spent (a loaded machine): leave the rest out
                    self.cut_short += 1
                    break
                share = min(
                    max(0.0, end - time.perf_counter()) * size / max(total, 1), self.remaining() - 0.05
                )
            total -= size
            got = self.place_one(j, self.state_with(out), share, None if allowed is None else allowed.get(j))
            if got is not None:
                out[j] = got
        return out

    def fifo(self) -> Assign:
        """The FIFO kueue-tas baseline."""
        out: Assign = {}
        for j in self.feasible:
            st = self.state_with(out)
            job, traffic = self.jobs[j].job, self.traffic[j]
            m = kueue_tas(self.topology, st, job, traffic)
            if m is not None and not validate(self.topology, st, job, m, traffic=traffic):
                serving = self.jobs[j].serving
                if serving is not None:
                    rep, srep = price_decode_step(self.topology, st, serving, m)
                    self.serving_seen[(j, tuple(m))] = srep
                    out[j] = (m, rep)
                else:
                    out[j] = (m, evaluate(self.topology, st, job, m, traffic=traffic, check=False))
                self.seen.setdefault(j, {})[tuple(m)] = out[j][1]
        return out

    def serving_report(self, j: int, mapping: Sequence[int]) -> ServingReport | None:
        """The serving report of job `j` on `mapping` (None: a training job)."""
        serving = self.jobs[j].serving
        if serving is None:
            return None
        key = (j, tuple(mapping))
        if key not in self.serving_seen:
            self.serving_seen[key] = price_decode_step(self.topology, self.state, serving, mapping)[1]
        return self.serving_seen[key]

    def key(self, assign: Assign) -> tuple[float, float, float]:
        w = [bj.weight for bj in self.jobs]
        return (
            -round(sum(w[j] for j in assign), 9),
            sum(w[j] * r.step_seconds for j, (_, r) in assign.items()),
            sum(w[j] * r.comm_seconds for j, (_, r) in assign.items()),
        )

    def reserved(self, adm: Admission, order: Sequence[int]) -> dict[int, set[int]]:
        """Concrete devices for the knapsack's host allocation: per host, its free candidates in device order go
        to the jobs in `order`; jobs without host-level units get every free device nobody reserved."""
        taken: set[int] = set()
        out: dict[int, set[int]] = {}
        hosts = self.topology.devices_in_domain[0]
        for j in order:
            if j not in adm.hosts:
                continue
            cands = set(candidate_devices(self.topology, self.state, self.jobs[j].job))
            mine: set[int] = set()
            for h, k in adm.hosts[j].items():
                free = [d for d in hosts[h] if d in cands and d not in taken][:k]
                mine.update(free)
                taken.update(free)
            out[j] = mine
        rest = {d for d in range(self.topology.num_devices) if self.state.usable(d) and d not in taken}
        for j in order:
            out.setdefault(j, rest)
        return out
