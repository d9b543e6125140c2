"""The stage-per-domain heuristic (placement.solve.heuristics.stage_per_domain): each pipeline stage inside one
domain, TP groups whole on hosts with room, the rest split evenly inside their lowest common domain. Checked
against a mapping built by hand, every rank-to-host assignment of tiny clusters, the validator and `place`."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from placement.cost.evaluate import evaluate
from placement.model.devices import HostSpec, NodeType
from placement.model.job import Constraints, Job
from placement.model.links import Level, Tier
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.model.validate import validate
from placement.sim.scenarios import fat_tree, megatron_job
from placement.solve import SolveOptions, place
from placement.solve.heuristics import HEURISTICS, stage_per_domain, stage_per_domain_at
from placement.solve.types import key_better
from tests.support_solve import fragmented, host_assignments


def _four_level(free_per_host: list[int], per_host: int) -> tuple[Topology, ClusterState]:
    """Hosts two to a leaf, two leaves to a spine, one core; host h keeps its last `free_per_host[h]` devices."""
    nt = NodeType("t", per_host, "H100")
    hs = [
        HostSpec(f"h{i}", {"leaf": f"l{i // 2}", "spine": f"s{i // 4}", "core": "c"}, nt)
        for i in range(len(free_per_host))
    ]
    levels = [
        Level("node", Tier(400, 1)),
        Level("leaf", Tier(50, 5)),
        Level("spine", Tier(25, 10)),
        Level("core", Tier(12.5, 20)),
    ]
    topo = Topology.build("four", levels, hs)
    busy = {
        d: "other"
        for h, f in enumerate(free_per_host)
        for d in list(topo.devices_in_domain[0][h])[: per_host - f]
    }
    return topo, ClusterState(occupied=busy)


def test_matches_the_mapping_built_by_hand() -> None:
    """tp4 pp2 dp2 on 4-GPU hosts; spine 0 has hosts with 4, 2 | 2, 0 free, spine 1 has 4, 4 | 0, 1. Spine 1 is the
    roomiest (9): stage 0's groups whole on h4 and h5. Stage 1 in spine 0: its first group whole on h0; no host
    holds the second and no leaf has two hosts with 2 left, so it goes in halves on h1 and h2 (common domain: the
    spine)."""
    topo, state = _four_level([4, 2, 2, 0, 4, 4, 0, 1], 4)
    job = megatron_job("j", tp=4, pp=2, dp=2, hidden=1024, layers=4)
    # ranks tp fastest, then dp, then pp: (dp0, pp0) = 0..3, (dp1, pp0) = 4..7, (dp0, pp1) = 8..11, (dp1, pp1) = 12..15
    by_hand = [4] * 4 + [5] * 4 + [0] * 4 + [1] * 2 + [2] * 2
    m = HEURISTICS["stage-per-domain"](topo, state, job, job_traffic(job))
    assert m is not None
    assert [topo.devices[d].host_index for d in m] == by_hand
    assert not validate(topo, state, job, m)
    assert stage_per_domain_at(topo, state, job, 2) == m  # the highest level below the core


@pytest.mark.parametrize(
    "free",
    [
        [2, 1, 1, 0, 2, 2, 0, 1],
        [2, 2, 0, 0, 2, 1, 1, 0],
        [1, 1, 1, 1, 2, 0, 0, 2],
        [2, 0, 1, 1, 0, 1, 2, 1],
    ],
)
def test_no_assignment_with_stages_in_spines_beats_it(free: list[int]) -> None:
    """tp2 pp2 dp2 on 2-GPU hosts: every rank-to-host assignment that keeps each stage inside one spine (hosts are
    alike inside, so one device order stands for all) costs at least the heuristic's mapping in exposed
    communication, and any cheaper assignment overall leaves a stage across spines."""
    topo, state = _four_level(free, 2)
    job = megatron_job("j", tp=2, pp=2, dp=2, hidden=1024, layers=4)
    traffic = job_traffic(job)
    m = stage_per_domain(topo, state, job, traffic)
    assert m is not None and not validate(topo, state, job, m, traffic=traffic)
    mine = evaluate(topo, state, job, m, traffic=traffic).comm_seconds
    devs = {h: [d for d in topo.devices_in_domain[0][h] if d not in state.occupied] for h in range(len(free))}
    stage_of = [job.parallel.coords(r)["pp"] for r in range(job.ranks)]  # type: ignore[union-attr]
    least = None
    for a in host_assignments(free, job.ranks):
        if any(len({a[r] // 4 for r in range(job.ranks) if stage_of[r] == s}) > 1 for s in (0, 1)):
            continue
        seen: Counter[int] = Counter()
        mapping = []
        for h in a:
            mapping.append(devs[h][seen[h]])
            seen[h] += 1
        c = evaluate(topo, state, job, mapping, traffic=traffic).comm_seconds
        least = c if least is None else min(least, c)
    assert least is not None
    assert mine <= least * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shape", [(8, 4, 4), (4, 2, 8), (2, 4, 8), (8, 2, 2), (1, 4, 8)])
def test_valid_or_none_with_stages_inside_one_domain(seed: int, shape: tuple[int, int, int]) -> None:
    """Fragmented fat trees: the mapping is valid by the validator, or None; each stage's devices lie in one domain
    of some level below the top, and each TP group is whole on one host when it fits a host it could use."""
    topo = fat_tree(512, nodes_per_leaf=4, leaves_per_spine=4)
    state = fragmented(topo, 0.3 + 0.06 * seed, seed)
    tp, pp, dp = shape
    job = megatron_job("j", tp=tp, pp=pp, dp=dp, hidden=2048, layers=8)
    traffic = job_traffic(job)
    m = stage_per_domain(topo, state, job, traffic)
    if m is None:
        return
    assert not validate(topo, state, job, m, traffic=traffic)
    par = job.parallel
    assert par is not None
    for s in range(pp):
        stage = [m[r] for r in range(job.ranks) if par.coords(r)["pp"] == s]
        assert any(
            len({topo.domain_of(d, li) for d in stage}) == 1 for li in range(1, len(topo.levels) - 1)
        ), s


def test_none_for_pins_and_explicit_jobs() -> None:
    """Pinned ranks and jobs without parallel sizes are left to the other heuristics."""
    topo, state = _four_level([4, 4, 4, 4, 4, 4, 4, 4], 4)
    job = megatron_job("j", tp=4, pp=2, dp=2, hidden=1024, layers=4)
    pinned = dataclasses.replace(job, constraints=Constraints(pins={0: topo.devices[0].id}))
    assert stage_per_domain(topo, state, pinned, job_traffic(pinned)) is None
    explicit = Job(name="e", ranks=4, groups=job_traffic(job).groups[:1])
    assert stage_per_domain(topo, state, explicit, job_traffic(explicit)) is None


def test_place_answer_is_never_worse_on_a_fragmented_cluster() -> None:
    """A fragmented fat tree where full hosts are too few for the TP groups: `place`'s answer has no more exposed
    communication than the stage-per-domain mapping, and is not worse by (step, exposed comm)."""
    topo = fat_tree(512, nodes_per_leaf=4, leaves_per_spine=4)
    state = fragmented(topo, 0.45, 3)
    job = megatron_job("j", tp=8, pp=4, dp=4, hidden=2048, layers=8)
    traffic = job_traffic(job)
    m = stage_per_domain(topo, state, job, traffic)
    assert m is not None
    mine = evaluate(topo, state, job, m, traffic=traffic)
    res = place(topo, state, job, SolveOptions(time_limit_s=2.0, seed=0, workers=1))
    assert res.report is not None
    assert res.comm_seconds <= mine.comm_seconds * (1 + 1e-9)
    assert not key_better((mine.step_seconds, mine.comm_seconds), (res.report.step_seconds, res.comm_seconds))
