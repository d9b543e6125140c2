"""PlaceBatch with a balance rule (placement.decide.batch): a job that asks for balanced slices gets a balanced mapping,
also where the solver without the rule would pick an unbalanced one; the admitted weight is the most a brute force
over the jobs' device sets (judged by the independent validator) admits; a balanced job that cannot be placed gets a
reason naming the rule, alone (``rule``) or next to the admitted jobs (``conflict``)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

from placement.decide.batch.explain import validate_batch
from placement.decide.batch.joint import place_batch
from placement.decide.batch.types import BatchJob
from placement.io.native import cluster_from_dict, job_from_dict, state_from_dict
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.validate import validate
from placement.solve import SolveOptions
from tests.support_server import cluster_doc, job_doc

OPTS = SolveOptions(time_limit_s=4.0, workers=1, deterministic=True)


def _setup() -> tuple[Topology, ClusterState]:
    """3 leaves of 2 hosts of 2 devices (leaf01: devices 0-3, leaf02: 4-7, leaf03: 8-11). Free: leaf01 devices 1,
    2, 3; leaf02 devices 4 (node03) and 7 (node04); leaf03 device 10."""
    topo, _ = cluster_from_dict(cluster_doc(6, gpus=2, per_leaf=2), "c")
    busy = [0, 5, 6, 8, 9, 11]
    state = state_from_dict(
        {"occupied": [{"job": "p", "devices": [topo.devices[d].id for d in busy]}]}, topo, "s"
    )
    return topo, state


def _job(name: str, ranks: int, slice_: int | None = None) -> Job:
    doc = job_doc(1, ranks, name=name)
    doc["constraints"] = {"balance": {"level": "leaf", "slice": slice_}} if slice_ else {}
    return job_from_dict(doc, name)


def _valid_sets(topo: Topology, state: ClusterState, job: Job) -> list[frozenset[int]]:
    """Every free device set of the job's size that the validator accepts (the ranks are interchangeable: one DP
    group and no level required, so one order of a set is as valid as any)."""
    free = [d for d in range(topo.num_devices) if d not in state.occupied]
    return [
        frozenset(c)
        for c in itertools.combinations(free, job.ranks)
        if not validate(topo, state, job, list(c))
    ]


def _most_weight(topo: Topology, state: ClusterState, jobs: Sequence[BatchJob]) -> float:
    """The most admitted weight over every choice of pairwise disjoint valid device sets, one per admitted job."""
    options = [_valid_sets(topo, state, bj.job) for bj in jobs]

    def best(i: int, used: frozenset[int]) -> float:
        if i == len(jobs):
            return 0.0
        out = best(i + 1, used)
        for s in options[i]:
            if not s & used:
                out = max(out, jobs[i].weight + best(i + 1, used | s))
        return out

    return best(0, frozenset())


def _balanced(topo: Topology, mapping: Sequence[int], slice_: int) -> bool:
    counts = Counter(topo.domain_column(1)[d] for d in mapping).values()
    return all(c % slice_ == 0 for c in counts) and max(counts) - min(counts) <= slice_


def test_a_balanced_job_is_placed_balanced_next_to_another() -> None:
    """The balanced job (4 ranks, slices of 2 over leaves) fits only as 2 in leaf01 + devices 4 and 7: three hosts,
    as many as an unbalanced 3 + 1, so nothing but the rule leads to it."""
    topo, state = _setup()
    jobs = [BatchJob(_job("balanced", 4, 2), 2.0), BatchJob(_job("plain", 2), 1.0)]
    res = place_batch(topo, state, jobs, OPTS)
    expected = _most_weight(topo, state, jobs)
    assert expected == 3.0  # both fit together (computed by brute force)
    assert res.plan.admitted_weight == expected
    maps = {o.index: o.mapping for o in res.plan.admitted}
    assert validate_batch(topo, state, [bj.job for bj in jobs], maps) == []
    balanced = maps[0]
    assert balanced is not None and _balanced(topo, balanced, 2)


def test_a_balance_rule_that_no_free_domains_meet_is_named() -> None:
    """6 ranks in slices of 2 over leaves need 3 slices in one leaf, 2 + 1 or 1 + 1 + 1; the free devices hold
    one slice in leaf01, one in leaf02, none in leaf03."""
    topo, state = _setup()
    job = _job("wide", 6, 2)
    assert _valid_sets(topo, state, job) == []  # no balanced mapping exists (brute force)
    jobs = [BatchJob(job), BatchJob(_job("plain", 2))]
    res = place_batch(topo, state, jobs, OPTS)
    out = res.plan.outcomes[0]
    assert not out.admitted and out.reason == "rule"
    assert any("balance over leaf" in line for line in out.explanation)
    assert res.plan.outcomes[1].admitted


def test_a_balanced_job_left_out_next_to_another_says_why() -> None:
    """Two balanced jobs that each fit alone (brute force) but not together: the lighter (2 ranks in one leaf)
    is left out as a conflict; next to the admitted one 2 devices are free, in two leaves, and the reason names
    the balance rule."""
    topo, state = _setup()
    jobs = [BatchJob(_job("heavy", 4, 2), 2.0), BatchJob(_job("light", 2, 2), 1.0)]
    assert all(_valid_sets(topo, state, bj.job) for bj in jobs)
    assert _most_weight(topo, state, jobs) == 2.0
    res = place_batch(topo, state, jobs, OPTS)
    heavy, light = res.plan.outcomes
    assert heavy.admitted and heavy.mapping is not None and _balanced(topo, heavy.mapping, 2)
    assert not light.admitted and light.reason == "conflict" and light.conflicts_with == ["heavy"]
    assert any("balance over leaf" in line for line in light.explanation)
