"""The replay with contention: running jobs' rates follow their contended steps, repriced when a job sharing
their links starts or ends, and the GPU-hours they lose; checked against the step model priced by hand."""

from __future__ import annotations

import pytest

from placement.cost.evaluate import evaluate
from placement.errors import InputError
from placement.model.devices import HostSpec, NodeType
from placement.model.links import Level, Tier
from placement.model.state import ClusterState, RunningJob
from placement.model.topology import Topology
from placement.sim.replay.plan import ReplayPlan
from placement.sim.replay.sim import _ARRIVE, SimConfig, Simulation, simulate
from placement.sim.replay.traces import TraceJob
from placement.sim.whatif.shapes import Shape


def two_leaves() -> Topology:
    """Two leaves of two 8-GPU hosts under a spine that is 16:1 oversubscribed: a job with one host in each leaf
    sends its DP ring through both leaves' uplinks, and two such jobs share them."""
    nt = NodeType("hgx", 8, "H100")
    levels = [
        Level("node", Tier(450.0, 2.0)),
        Level("leaf", Tier(50.0, 5.0), 16.0),
        Level("spine", Tier(25.0, 8.0)),
    ]
    return Topology.build(
        "two-leaves", levels, [HostSpec(f"n{h}", {"leaf": f"l{h // 2}"}, nt) for h in range(4)]
    )


def _jobs(duration: float) -> list[TraceJob]:
    shape = Shape(tp=8, dp=2, pp=1)
    return [TraceJob(f"t{i}", 0.0, 16, duration, i + 1, shape=shape, model="7b") for i in range(2)]


def _started(topo: Topology, sim: Simulation, mappings: list[list[int]]) -> None:
    """Start both runs at 0 on `mappings` (as a policy would), instead of their arrivals."""
    sim.ev[:] = [e for e in sim.ev if e[1] != _ARRIVE]
    for r, m in zip(sim.runs, mappings, strict=True):
        rep = evaluate(topo, sim.state(), r.job, m, traffic=r.traffic, check=False)
        sim.start(r, m, rep, 0.0)


def test_two_jobs_on_shared_uplinks_run_at_their_contended_step_and_charge_the_loss() -> None:
    topo = two_leaves()
    hosts = topo.devices_in_domain[0]
    # job 0 on hosts n0 (leaf l0) and n2 (leaf l1), job 1 on n1 and n3: both rings cross both uplinks
    maps = [list(hosts[0]) + list(hosts[2]), list(hosts[1]) + list(hosts[3])]
    duration = 3600.0
    sim = Simulation(topo, _jobs(duration), SimConfig("first-fit", contention=True))
    _started(topo, sim, maps)
    res = sim.run()
    r0, r1 = sim.runs
    # independently: each job's step from the step model with the other as background, and alone
    occ = {d: "j0" for d in maps[0]} | {d: "j1" for d in maps[1]}
    other = RunningJob("j1", r1.job, tuple(maps[1]))
    contended = evaluate(
        topo, ClusterState(occupied=occ, background=(other,)), r0.job, maps[0], traffic=r0.traffic
    ).step_seconds
    alone = evaluate(topo, ClusterState(), r0.job, maps[0], traffic=r0.traffic).step_seconds
    assert contended > alone * 1.01  # the shared uplinks do slow it
    # symmetric jobs: both run their whole work at the contended step and end together
    end = duration * contended / r0.ideal
    for rec in res.records:
        assert rec["end_s"] == pytest.approx(end, rel=1e-9)
        assert rec["contended_slowdown"] == pytest.approx(contended / alone, rel=1e-9)
        # the GPU-hours lost: 16 GPUs x the wall time beyond the same work alone on the same devices
        assert rec["contention_gpu_hours"] == pytest.approx(
            16 * end * (1 - alone / contended) / 3600, rel=1e-9
        )


def test_a_job_speeds_up_when_the_job_sharing_its_links_ends() -> None:
    topo = two_leaves()
    hosts = topo.devices_in_domain[0]
    maps = [list(hosts[0]) + list(hosts[2]), list(hosts[1]) + list(hosts[3])]
    jobs = _jobs(3600.0)
    jobs[1] = TraceJob("t1", 0.0, 16, 600.0, 2, shape=jobs[1].shape, model="7b")  # the short one
    sim = Simulation(topo, jobs, SimConfig("first-fit", contention=True))
    _started(topo, sim, maps)
    res = sim.run()
    r0, r1 = sim.runs
    occ = {d: "j0" for d in maps[0]} | {d: "j1" for d in maps[1]}
    with_other = evaluate(
        topo,
        ClusterState(occupied=occ, background=(RunningJob("j1", r1.job, tuple(maps[1])),)),
        r0.job,
        maps[0],
        traffic=r0.traffic,
    ).step_seconds
    alone = evaluate(topo, ClusterState(), r0.job, maps[0], traffic=r0.traffic).step_seconds
    # job 1 ends at 600 x contended/ideal; job 0 did that much wall time of work at the contended rate, then the
    # rest alone
    t1 = 600.0 * with_other / r1.ideal
    assert res.records[1]["end_s"] == pytest.approx(t1, rel=1e-9)
    done = t1 * r0.ideal / with_other  # ideal-step seconds of work job 0 did by then
    assert res.records[0]["end_s"] == pytest.approx(t1 + (3600.0 - done) * alone / r0.ideal, rel=1e-9)
    assert res.records[0]["step_s"] == pytest.approx(alone, rel=1e-9)  # its last rate: alone


def test_without_contention_nothing_changes() -> None:
    topo = two_leaves()
    jobs = _jobs(1800.0)
    for policy in ("first-fit", "kueue-tas"):
        a = simulate(topo, jobs, SimConfig(policy))
        assert all(r["contention_gpu_hours"] == 0 for r in a.records)
        assert all(r["contended_slowdown"] is None for r in a.records)


def test_cpsat_cluster_is_a_policy() -> None:
    topo = two_leaves()
    res = simulate(topo, _jobs(600.0), SimConfig("cpsat-cluster", contention=True, time_limit_s=0.2))
    assert all(r["placed"] for r in res.records)


def test_the_plan_adds_cpsat_cluster_only_with_contention() -> None:
    assert "cpsat-cluster" not in ReplayPlan().policy_names
    assert "cpsat-cluster" in ReplayPlan(contention=True).policy_names
    assert all(c.contention for c in ReplayPlan(contention=True).configs())
    with pytest.raises(InputError) as e:
        ReplayPlan(policies=("cpsat-cluster",)).configs()
    assert "--policy" in str(e.value) and "--contention" in str(e.value)
