"""The constructive heuristics (placement.solve.heuristics): they keep pins and use only free devices, the fill
families place any job with enough free devices, and the tile and stage packers put data-parallel neighbours on
one host."""

from __future__ import annotations

import dataclasses

import pytest

from placement.model.devices import HostSpec, NodeType
from placement.model.job import Constraints
from placement.model.links import Level, Tier
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.model.validate import validate
from placement.sim.scenarios import (
    fat_tree,
    megatron_job,
)
from placement.solve.heuristics import HEURISTICS
from placement.solve.units import candidate_devices
from tests.support_solve import fragmented


def test_heuristics_keep_pins_and_use_only_free_devices() -> None:
    topo = fat_tree(256, nodes_per_leaf=4, leaves_per_spine=4)
    state = fragmented(topo, 0.5, 11)
    job = megatron_job("j", tp=4, pp=2, dp=2, hidden=2048, layers=8)
    free = candidate_devices(topo, state, job)
    pin = free[5]
    job = dataclasses.replace(job, constraints=Constraints(pins={3: topo.devices[pin].id}))
    traffic = job_traffic(job)
    # counted from the state by hand: the devices no other job holds and none failed
    usable = {d for d in range(topo.num_devices) if d not in state.occupied and d not in state.failed}
    assert pin in usable and len(usable) >= job.ranks + 64  # room to spare: a fill must find its devices
    placed: set[str] = set()
    for name, f in HEURISTICS.items():
        m = f(topo, state, job, traffic)
        if m is None:
            continue
        placed.add(name)
        assert m[3] == pin, name
        assert len(set(m)) == job.ranks and set(m) <= usable, name
        assert not validate(topo, state, job, m, traffic=traffic), name
    # the fill heuristics need only enough free devices (no rule asks for whole units here): each must place the
    # job, so a family that returns None everywhere fails this test
    assert set(HEURISTICS) >= FILL_HEURISTICS
    assert placed >= FILL_HEURISTICS, sorted(FILL_HEURISTICS - placed)


FILL_HEURISTICS = {
    "tight-emptiest",
    "tight-fullest",
    "tight-emptiest-nested",
    "tight-fullest-nested",
    "least-free",
    "contiguous",
}
"""Heuristics that fill the free devices of a domain in some order: they place any job that has enough free devices
and no required level or spread rule."""


@pytest.mark.parametrize("name", ["stage-fill", "tile-pack-pp"])
def test_tile_and_stage_packing_give_dp_groups_many_members_per_host(name: str) -> None:
    """4 empty 8-GPU hosts and 4 with 6 free: the 16 TP2 units of a tp2 pp2 dp8 job fit 4 to a host on the empty
    ones, so every DP group (one member per unit of its stage) can have 4 members on each of its hosts, and the
    packers that tile data-parallel neighbours onto one host give it that (a scheduler filling ranks in order
    gives 1)."""
    nt = NodeType("h8", 8, "H100")
    hs = [HostSpec(f"h{i}", {"leaf": f"l{i // 4}", "spine": "s"}, nt) for i in range(8)]
    levels = [Level("node", Tier(450, 1)), Level("leaf", Tier(50, 5)), Level("spine", Tier(25, 10))]
    topo = Topology.build("eight", levels, hs)
    busy = {d: "other" for h in range(4, 8) for d in topo.devices_in_domain[0][h][:2]}
    state = ClusterState(occupied=busy)
    job = megatron_job("j", tp=2, pp=2, dp=8, hidden=2048, layers=8)
    traffic = job_traffic(job)
    m = HEURISTICS[name](topo, state, job, traffic)
    assert m is not None and not validate(topo, state, job, m, traffic=traffic)
    for g in traffic.groups:
        hosts = [topo.devices[m[r]].host_index for r in g.members]
        if g.label == "tp":
            assert len(set(hosts)) == 1
        if g.label == "dp":
            assert min(hosts.count(h) for h in set(hosts)) == 4, (g.members, hosts)
