"""The shared fabric (placement.cost.shared): other jobs' traffic priced by max-min sharing, the harm a new job does
to running ones, measured loads against job shapes, and the cluster objective; every number worked by hand."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from placement.cli.app import app
from placement.cost import collectives
from placement.cost.evaluate import evaluate
from placement.cost.shared import (
    SharedFabric,
    background_for,
    cluster_seconds,
    surrogate_state,
    uplink_pressure,
)
from placement.errors import InputError
from placement.io.native.state import state_from_dict
from placement.messages.domain import breakdown, place_inputs, report_from_proto, step_cost
from placement.messages.files import request_from_dict
from placement.model.devices import HostSpec, NodeType
from placement.model.job import CollectiveKind, Edge, Group, Job
from placement.model.links import Level, Tier
from placement.model.state import ClusterState, LinkLoad, RunningJob, Uplink
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.sim.scenarios import megatron_job
from placement.solve.incremental import StepEval
from placement.solve.prepared import PreparedRequest
from placement.solve.run import place
from placement.solve.types import SolveOptions, key_better, report_key
from placement.v1 import placement_pb2 as pb

AR = CollectiveKind.ALL_REDUCE
S = 1e9  # bytes of every all-reduce
SPINE_LAT = 8e-6  # seconds per ring step across the spine


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-9, abs=0.0)


def two_leaves(hosts_per_leaf: int = 2) -> Topology:
    """Hosts of one GPU, `hosts_per_leaf` per leaf, two leaves under a spine. A host's NIC: 10 GB/s. A leaf's
    uplinks: hosts x 10 GB/s / oversubscription 2 = 10 GB/s each way with 2 hosts (X below)."""
    nt = NodeType("t", 1, "gpu")
    levels = [
        Level("node", Tier(100.0, 1.0)),
        Level("leaf", Tier(10.0, 5.0), 2.0),
        Level("spine", Tier(10.0, SPINE_LAT * 1e6)),
    ]
    hosts = [HostSpec(f"h{h}", {"leaf": f"l{h // hosts_per_leaf}"}, nt) for h in range(2 * hosts_per_leaf)]
    return Topology.build("two-leaves", levels, hosts)


def ring(name: str) -> Job:
    """A DP all-reduce of S bytes over 2 ranks, no compute: its step is the all-reduce."""
    return Job(name, 2, groups=(Group("dp", AR, (0, 1), S, 1.0),))


def test_two_equal_rings_on_one_oversubscribed_uplink_each_get_half() -> None:
    t = two_leaves()
    # Alone, a 2-rank ring all-reduce moves 2(n-1)/n S = S through each leaf's uplink each way, in 2 ring steps of
    # the spine's latency: X = 10 GB/s, so 2 x 8 us + 1e9 / 10e9 = 0.100016 s.
    alone = evaluate(t, ClusterState(), ring("b"), [1, 3])
    assert alone.step_seconds == approx(2 * SPINE_LAT + S / 10e9)
    assert alone.contention is None
    # Job a runs the same ring on hosts h0 (leaf l0) and h2 (leaf l1): both rings cross both leaves' uplinks (their
    # NICs differ). Job a's average rate on each uplink: S / its step = 1e9 / 0.100016 = 9.9984 GB/s, more than
    # the fair share X/2 = 5 GB/s, so max-min gives each ring X/2 and b's all-reduce takes
    # 2 x 8 us + 1e9 / 5e9 = 0.200016 s.
    a = RunningJob("a", ring("a"), (0, 2))
    state = ClusterState(occupied={0: "a", 2: "a"}, background=(a,))
    rep = evaluate(t, state, ring("b"), [1, 3])
    assert rep.step_seconds == approx(2 * SPINE_LAT + S / 5e9)
    c = rep.contention
    assert c is not None
    assert c.seconds == approx(S / 5e9 - S / 10e9)
    assert c.alone_step_seconds == approx(alone.step_seconds)
    # The harm: b's average rate is S / 0.200016 = 4.9996 GB/s, below the fair share, so b keeps it and a gets
    # the rest of X: a's step becomes 2 x 8 us + S / (10e9 - S / 0.200016).
    b_rate = S / (2 * SPINE_LAT + S / 5e9)
    a_after = 2 * SPINE_LAT + S / (10e9 - b_rate)
    a_before = 2 * SPINE_LAT + S / 10e9
    (h,) = c.harm
    assert (h.job_id, h.gpus) == ("a", 2)
    assert h.step_seconds == approx(a_before)
    assert h.added_seconds == approx(a_after - a_before)
    assert c.harm_gpu_s_per_s == approx(2 * (a_after - a_before) / a_after)


def test_a_ring_on_other_links_is_not_slowed() -> None:
    # 4 hosts per leaf: a ring inside leaf l1 (h4, h5) shares no link with a ring inside leaf l0 (h0, h1)
    t = two_leaves(4)
    a = RunningJob("a", ring("a"), (4, 5))
    state = ClusterState(occupied={4: "a", 5: "a"}, background=(a,))
    rep = evaluate(t, state, ring("b"), [0, 1])
    assert rep.step_seconds == approx(evaluate(t, ClusterState(), ring("b"), [0, 1]).step_seconds)
    assert rep.contention is not None and rep.contention.harm == [] and rep.contention.harm_gpu_s_per_s == 0.0


def test_a_measured_load_equal_to_a_jobs_average_gives_the_same_step() -> None:
    t = two_leaves()
    a = RunningJob("a", ring("a"), (0, 2))
    shape = evaluate(t, ClusterState(occupied={0: "a", 2: "a"}, background=(a,)), ring("b"), [1, 3])
    # job a's average rate on each leaf's uplinks, both ways (first test): S / a's step alone; its NICs are
    # h0's and h2's, which b does not use
    rate = S / (2 * SPINE_LAT + S / 10e9) / 1e9
    load = {Uplink(1, 0): LinkLoad(rate, rate), Uplink(1, 1): LinkLoad(rate, rate)}
    measured = evaluate(t, ClusterState(link_load=load), ring("b"), [1, 3])
    assert measured.step_seconds == approx(shape.step_seconds)
    # a small load leaves b more than half: max-min gives the load its 2 GB/s and b the 8 GB/s left
    small = {Uplink(1, 0): LinkLoad(2.0, 2.0)}
    rep = evaluate(t, ClusterState(link_load=small), ring("b"), [1, 3])
    assert rep.step_seconds == approx(2 * SPINE_LAT + S / 8e9)


def test_one_direction_of_load_slows_only_transfers_that_way() -> None:
    t = two_leaves()
    job = Job("p", 2, edges=(Edge("pp", 0, 1, S),))
    down = {Uplink(1, 0): LinkLoad(0.0, 6.0)}  # into leaf l0 only
    # rank 0 on h0 (l0) sends to rank 1 on h2 (l1): it leaves l0 (up) and enters l1 (down), untouched
    free = evaluate(t, ClusterState(link_load=down), job, [0, 2]).step_seconds
    assert free == approx(evaluate(t, ClusterState(), job, [0, 2]).step_seconds)
    # the other way it enters l0: the load asks 6 GB/s of X = 10, more than the fair share 5, so max-min gives
    # each 5 GB/s: S / 5e9 plus the spine's latency (a load of 4 would keep its 4 and leave 6)
    slowed = evaluate(t, ClusterState(link_load=down), job, [2, 0]).step_seconds
    assert slowed == approx(SPINE_LAT + S / 5e9)
    light = {Uplink(1, 0): LinkLoad(0.0, 4.0)}
    assert evaluate(t, ClusterState(link_load=light), job, [2, 0]).step_seconds == approx(SPINE_LAT + S / 6e9)


def test_shared_fabric_reprices_only_the_component() -> None:
    # 5 hosts per leaf (h0-h4 in l0, h5-h9 in l1): a leaf's uplinks carry 5 x 10 / 2 = 25 GB/s each way, a
    # host's NIC 10 GB/s
    t = two_leaves(5)
    fab = SharedFabric(t, ClusterState())
    alone = 2 * SPINE_LAT + S / 10e9  # the NIC binds
    assert fab.add(RunningJob("a", ring("a"), (0, 5))) == {"a"}
    assert fab.step("a") == approx(alone)
    assert fab.add(RunningJob("c", ring("c"), (3, 4))) == {"c"}  # inside l0 on other NICs: no shared link
    # b crosses the same uplinks: one component with a; each ring's average (9.9984 GB/s) fits in 25: no loss
    assert fab.add(RunningJob("b", ring("b"), (1, 6))) == {"a", "b"}
    assert sorted(map(sorted, fab.components())) == [["a", "b"], ["c"]]
    assert fab.step("a") == approx(alone) and fab.slowdown("b") == approx(1.0)
    # f makes three rings on 25 GB/s: a sees b and f at 9.9984 GB/s each, more than the fair share 25/3, so each
    # of the three gets 25/3 GB/s and a's step is 2 x 8 us + S / (25e9 / 3); c is not repriced
    assert fab.add(RunningJob("f", ring("f"), (2, 7))) == {"a", "b", "f"}
    assert fab.step("a") == approx(2 * SPINE_LAT + S / (25e9 / 3))
    assert fab.step("c") == approx(2 * 5e-6 + S / 10e9)  # inside the leaf: its tier's latency, its NICs
    assert fab.remove("f") == {"a", "b"}
    assert fab.step("a") == approx(alone)


def test_cluster_seconds_adds_the_harm_per_own_gpu() -> None:
    assert cluster_seconds(2.0, 0.0, 8) == 2.0
    assert cluster_seconds(2.0, 4.0, 8) == approx(2.0 * (1 + 4.0 / 8))


def _busy_leaves() -> tuple[Topology, ClusterState]:
    """4 hosts per leaf (uplinks 20 GB/s each way); rings a1 (h0, h4) and a2 (h1, h5) fill both leaves' uplinks
    (9.9984 GB/s each on average); h3 and h7 are degraded 1.6x, so a ring inside a leaf pays 1.6x on its NIC."""
    t = two_leaves(4)
    a1 = RunningJob("a1", ring("a1"), (0, 4))
    a2 = RunningJob("a2", ring("a2"), (1, 5))
    state = ClusterState(
        occupied={0: "a1", 4: "a1", 1: "a2", 5: "a2"},
        device_slowdown={3: 1.6, 7: 1.6},
        background=(a1, a2),
    )
    return t, state


def test_objective_cluster_avoids_the_loaded_uplink_that_own_takes() -> None:
    t, state = _busy_leaves()
    # Own step across the leaves: three rings on 20 GB/s, each 20/3 GB/s: 2 x 8 us + S / (20e9 / 3) = 0.150016 s;
    # inside a leaf (h2, h3 or h6, h7): 2 x 5 us + 1.6 x S / 10e9 = 0.16001 s. Own takes the uplink.
    cross = 2 * SPINE_LAT + S / (20e9 / 3)
    inside = 2 * 5e-6 + 1.6 * S / 10e9
    own = place(t, state, ring("b"), SolveOptions(time_limit_s=2.0, deterministic=True))
    assert own.report is not None and own.mapping is not None
    assert own.report.step_seconds == approx(cross)
    assert t.lca_level(own.mapping[0], own.mapping[1]) == 2
    c = own.report.contention
    assert c is not None and c.harm_gpu_s_per_s > 0
    # Cluster: b harms a1 and a2 (each 2 GPUs); harm > 0 makes cross cost step * (1 + harm / 2) > 0.150016 x 1.5
    # (each of a1, a2 loses at least a third of its rate), above inside's 0.16001 with no harm.
    clu = place(t, state, ring("b"), SolveOptions(time_limit_s=2.0, deterministic=True, objective="cluster"))
    assert clu.report is not None and clu.mapping is not None
    assert t.lca_level(clu.mapping[0], clu.mapping[1]) == 1
    assert clu.report.step_seconds == approx(inside)
    assert clu.report.contention is not None and clu.report.contention.harm_gpu_s_per_s == 0.0
    assert clu.report.objective_seconds == approx(inside)
    assert own.report.contention is not None
    assert cluster_seconds(cross, c.harm_gpu_s_per_s, 2) > inside
    # the answers are never worse than a baseline row under the contended model, each by its own objective, and
    # the bound (contention only lengthens a phase) stays below every contended mapping's exposed communication
    for res in (own, clu):
        assert res.report is not None and res.lower_bound is not None
        for rep in [res.report, *res.baseline_reports.values()]:
            assert not key_better(report_key(rep), report_key(res.report))
            assert res.lower_bound <= rep.comm_seconds * (1 + 1e-12)


def test_unknown_objective_is_refused() -> None:
    t, state = _busy_leaves()
    with pytest.raises(InputError, match="objective"):
        place(t, state, ring("b"), SolveOptions(objective="global"))


# ---- state files and the wire -----------------------------------------------------------------------------------


def test_a_state_file_carries_shapes_and_loads(tmp_path: Path) -> None:
    t = two_leaves()
    (tmp_path / "a.yaml").write_text(
        "name: a\nranks: 2\ngroups:\n- {label: dp, kind: all_reduce, members: [0, 1], bytes: 1.0e9}\n"
    )
    doc = {
        "occupied": [
            {"job": "a", "devices": ["h0", "h2"], "job_file": "a.yaml"},
            {
                "job": "c",
                "devices": ["h1", "h3"],
                "ranks": ["h3/gpu0", "h1/gpu0"],
                "shape": {"groups": [{"label": "dp", "kind": "all_reduce", "members": [0, 1], "bytes": 1e9}]},
            },
        ],
        "links": [{"uplink": "l0", "load_gbps": 2.5, "direction": "down"}, {"uplink": "l1", "load_gbps": 1}],
    }
    st = state_from_dict(doc, t, "s.yaml", tmp_path)
    assert [(r.job_id, r.devices, r.job.ranks) for r in st.background] == [("a", (0, 2), 2), ("c", (3, 1), 2)]
    assert st.link_load == {Uplink(1, 0): LinkLoad(0.0, 2.5), Uplink(1, 1): LinkLoad(1.0, 1.0)}
    assert st.occupied == {0: "a", 2: "a", 1: "c", 3: "c"}


def test_bad_background_is_refused_with_field_value_and_rule(tmp_path: Path) -> None:
    t = two_leaves()
    doc = {
        "occupied": [
            {"job": "a", "devices": ["h0", "h2"], "shape": {"parallel": {"tp": 2}}},
            {"job": "b", "devices": ["h1"], "ranks": ["h3/gpu0"], "shape": {"groups": []}},
            {"job": "c", "devices": ["h3"], "shape": 5},
            {"job": "d", "devices": ["h3"], "ranks": ["h3"]},
            {"job": "e", "devices": ["h3"], "job_file": "missing.yaml"},
        ],
        "links": [
            {"uplink": "l0", "load_gbps": -1},
            {"uplink": "l1", "load_gbps": 5, "direction": "sideways"},
            {"between": ["h0/gpu0", "h0/gpu0"], "load_gbps": 5},
        ],
    }
    with pytest.raises(InputError) as info:
        state_from_dict(doc, t, "s.yaml", tmp_path)
    text = "\n".join(str(p) for p in info.value.problems)
    assert "occupied[0].shape.model: is required with `parallel`" in text
    assert "occupied[1].ranks: h3/gpu0 is not among the entry's devices" in text
    assert "occupied[2].shape: must be a job (parallel/model, or groups/edges), got 5" in text
    assert "occupied[3].ranks: ranks order a running job's shape; give shape: or job_file: with it" in text
    assert "occupied[4].job_file: cannot read 'missing.yaml'" in text
    assert "links[0].load_gbps: must be >= 0, got -1" in text
    assert "links[1].direction: must be one of up, down, both, got 'sideways'" in text
    assert "links[2].load_gbps: a measured load is on an uplink" in text


def test_the_wire_carries_the_background_and_the_contention() -> None:
    t = two_leaves()
    a = RunningJob("a", ring("a"), (0, 2))
    rep = evaluate(t, ClusterState(occupied={0: "a", 2: "a"}, background=(a,)), ring("b"), [1, 3])
    back = report_from_proto(step_cost(rep), breakdown(rep))
    assert back.contention == rep.contention and back.objective_seconds is None
    req = request_from_dict(
        {
            "cluster": {
                "name": "two-leaves",
                "levels": [
                    {"name": "node", "bandwidth_gbps": 100, "latency_us": 1},
                    {"name": "leaf", "bandwidth_gbps": 10, "latency_us": 5, "oversubscription": 2},
                    {"name": "spine", "bandwidth_gbps": 10, "latency_us": 8},
                ],
                "node_types": [{"name": "t", "devices": 1}],
                "generate": [{"nodes": 4, "node_type": "t", "fanout": {"leaf": 2}}],
            },
            "state": {
                "occupied": [
                    {
                        "job": "a",
                        "devices": ["node01", "node03"],
                        "shape": {
                            "groups": [{"label": "dp", "kind": "all_reduce", "members": [0, 1], "bytes": 1e9}]
                        },
                    }
                ],
                "links": [{"uplink": "leaf01", "load_gbps": 3, "direction": "up"}],
            },
            "job": {
                "name": "b",
                "ranks": 2,
                "groups": [{"label": "dp", "kind": "all_reduce", "members": [0, 1], "bytes": 1e9}],
            },
            "options": {"objective": "cluster"},
        },
        pb.PlaceRequest,
        "<test>",
        Path("."),
    )
    inputs = place_inputs(req)
    assert inputs.options.objective == "cluster"
    (run,) = inputs.state.background
    assert run.job_id == "a" and run.devices == (0, 2)
    assert inputs.state.link_load == {Uplink(1, 0): LinkLoad(3.0, 0.0)}
    bad = pb.PlaceRequest()
    bad.CopyFrom(req)
    bad.options.objective = "global"
    with pytest.raises(InputError, match=r"options\.objective: must be one of own, cluster, got 'global'"):
        place_inputs(bad)


def test_a_job_freed_from_the_occupancy_carries_no_traffic() -> None:
    # what a preemption does (placement.decide.preempt.freed_state): the victim leaves `occupied`, its shape stays
    t = two_leaves()
    a = RunningJob("a", ring("a"), (0, 2))
    freed = ClusterState(occupied={}, background=(a,))
    assert not freed.has_background
    rep = evaluate(t, freed, ring("b"), [1, 3])
    assert rep.contention is None and rep.step_seconds == approx(2 * SPINE_LAT + S / 10e9)


# ---- the search sees the background -----------------------------------------------------------------------------


def _busy_fat_tree(seed: int, oversubscription: float = 16.0) -> tuple[Topology, ClusterState]:
    """256 GPUs: 8 leaves of 4 hosts of 8 switch-connected GPUs, leaves 16:1 oversubscribed (a leaf's uplinks
    carry 32 x 25 / 16 = 50 GB/s each way); 40% busy with jobs of 3 hosts each (an all-reduce over their devices
    and a send from the first to the last), anywhere in the tree; a measured load on two leaves' uplinks."""
    nt = NodeType("hgx", 8, "H100")
    levels = [
        Level("node", Tier(450.0, 2.0)),
        Level("leaf", Tier(50.0, 5.0), oversubscription),
        Level("spine", Tier(25.0, 8.0)),
    ]
    t = Topology.build("busy", levels, [HostSpec(f"n{h:02d}", {"leaf": f"l{h // 4}"}, nt) for h in range(32)])
    rng = random.Random(seed)
    hosts = list(range(len(t.host_names)))
    rng.shuffle(hosts)
    occupied: dict[int, str] = {}
    background: list[RunningJob] = []
    for j in range(0, round(0.4 * len(hosts)) // 3 * 3, 3):
        name = f"bg{j // 3}"
        devs = tuple(d for h in hosts[j : j + 3] for d in t.devices_in_domain[0][h])
        for d in devs:
            occupied[d] = name
        shape = Job(
            name,
            len(devs),
            groups=(Group("dp", AR, tuple(range(len(devs))), 4e8, 1.0),),
            edges=(Edge("pp", 0, len(devs) - 1, 1e8),),
        )
        background.append(RunningJob(name, shape, devs))
    load = {Uplink(1, 0): LinkLoad(30.0, 30.0), Uplink(1, 3): LinkLoad(40.0, 5.0)}
    return t, ClusterState(occupied=occupied, background=tuple(background), link_load=load)


@pytest.mark.parametrize("seed", [1, 2])
def test_incremental_step_model_agrees_with_evaluate_under_background(seed: int) -> None:
    t, state = _busy_fat_tree(seed)
    job = megatron_job("j", tp=4, pp=2, dp=4, hidden=2048, layers=8)
    req = PreparedRequest.prepare(t, state, job, SolveOptions())
    rng = random.Random(seed)
    ev = StepEval(req, rng.sample(req.candidates, job.ranks))
    contended = 0
    for _ in range(30):
        unused = sorted(set(req.candidates) - set(ev.mapping))
        if rng.random() < 0.5 and unused:
            moves = {rng.randrange(job.ranks): rng.choice(unused)}
        else:
            a, b = rng.sample(range(job.ranks), 2)
            moves = {a: ev.mapping[b], b: ev.mapping[a]}
        trial = ev.trial(moves)
        moved = list(ev.mapping)
        for r, d in moves.items():
            moved[r] = d
        rep = evaluate(t, state, job, moved, check=False)
        assert trial.key == pytest.approx((rep.step_seconds, rep.comm_seconds), rel=1e-12)
        assert rep.contention is not None
        contended += rep.contention.seconds > 0
        ev.apply(trial)
    assert contended > 0  # the background does slow some of these mappings


def test_a_request_file_reads_the_running_jobs_files_beside_its_state_file(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "a.yaml").write_text(
        "name: a\nranks: 2\ngroups:\n- {label: dp, kind: all_reduce, members: 0-1, bytes: 1.0e9}\n"
    )
    (tmp_path / "s" / "state.yaml").write_text(
        "occupied:\n- {job: a, devices: [node01, node03], job_file: a.yaml}\n"
    )
    cluster = {
        "name": "c",
        "levels": [
            {"name": "node", "bandwidth_gbps": 100, "latency_us": 1},
            {"name": "leaf", "bandwidth_gbps": 10, "latency_us": 5, "oversubscription": 2},
            {"name": "spine", "bandwidth_gbps": 10, "latency_us": 8},
        ],
        "node_types": [{"name": "t", "devices": 1}],
        "generate": [{"nodes": 4, "node_type": "t", "fanout": {"leaf": 2}}],
    }
    doc = {
        "cluster": cluster,
        "state_file": "s/state.yaml",
        "job": {
            "name": "b",
            "ranks": 2,
            "groups": [{"label": "dp", "kind": "all_reduce", "members": "0-1", "bytes": 1e9}],
        },
    }
    req = request_from_dict(doc, pb.PlaceRequest, "r.yaml", tmp_path)
    (run,) = place_inputs(req).state.background
    assert (run.job_id, run.devices, run.job.groups[0].members) == ("a", (0, 2), (0, 1))


def test_the_surrogate_reads_the_background_as_uplink_slowdowns() -> None:
    t, state = _busy_leaves()
    # a1 and a2 each load both leaves' uplinks at S / 0.100016 s = 9.9984 GB/s of X = 20: together 19.9968, more
    # than X minus a fair share of 20/3, so a new flow is left 20/3 GB/s: a slowdown of 3 on each direction; on
    # their own hosts' NICs (10 GB/s) one flow each leaves a new one its fair share 5: a slowdown of 2
    pressure = uplink_pressure(t, state, "b")
    nics = {Uplink(0, h): approx(2.0) for h in (0, 1, 4, 5)}
    assert pressure == {Uplink(1, 0): approx(3.0), Uplink(1, 1): approx(3.0), **nics}
    sur = surrogate_state(t, state, "b")
    assert sur.uplink_slowdown == pressure and sur.background == () and sur.occupied == state.occupied
    empty = ClusterState()
    assert surrogate_state(t, empty, "b") is empty and uplink_pressure(t, empty) == {}
    # the surrogate of a ring across the leaves grows, one inside a leaf does not
    req = PreparedRequest.prepare(t, state, ring("b"), SolveOptions())
    plain = ClusterState(occupied=state.occupied, device_slowdown=state.device_slowdown)
    bare = PreparedRequest.prepare(t, plain, ring("b"), SolveOptions())
    assert req.surrogate([2, 6]) > bare.surrogate([2, 6])
    assert req.surrogate([2, 3]) == bare.surrogate([2, 3])


def test_the_cli_shows_the_shared_fabric_table_only_with_other_traffic() -> None:
    root = Path(__file__).resolve().parents[1] / "examples"
    args = [
        "place",
        str(root / "h100-256.yaml"),
        str(root / "tp8-dp16-urgent.yaml"),
        "--strategy",
        "first-fit",
    ]
    runner = CliRunner()
    busy = runner.invoke(
        app, [*args, "--state", str(root / "h100-256-shared.yaml"), "--objective", "cluster"]
    )
    assert busy.exit_code == 0, busy.output
    assert "shared fabric" in busy.output and "train-a" in busy.output and "GPU-s/s lost" in busy.output
    alone = runner.invoke(app, args)
    assert alone.exit_code == 0, alone.output
    assert "shared fabric" not in alone.output
    bad = runner.invoke(app, [*args, "--objective", "global"])
    assert bad.exit_code == 2 and "--objective: unknown value 'global'" in bad.output


@pytest.mark.parametrize(("seed", "oversubscription"), [(1, 16.0), (2, 2.0), (3, 1.0)])
def test_background_flows_that_cannot_fill_a_link_change_no_time(seed: int, oversubscription: float) -> None:
    """`Background.touching` leaves out the flows on links that cannot fill; the filling with every flow on the
    phase's links (what it did before) gives the same times, for random mappings on a busy, loaded tree."""
    t, state = _busy_fat_tree(seed, oversubscription)
    job = megatron_job("j", tp=4, pp=2, dp=4, hidden=2048, layers=8)
    bg = background_for(t, state, exclude=job.name)
    assert bg is not None
    fabric = collectives.fabric_for(t, state)
    free = [d for d in range(t.num_devices) if d not in state.occupied]
    rng = random.Random(seed)
    dropped = kept = 0
    for _ in range(20):
        m = rng.sample(free, job.ranks)
        plans = [
            fabric.plan_group(g.kind, [m[r] for r in g.members], g.bytes) for g in job_traffic(job).groups
        ]
        every = list(
            {
                id(f): f for p in plans for st in p.stages for r, _x in st.loads for f in bg.flows.get(r, ())
            }.values()
        )
        some = bg.touching(plans, fabric.caps_bytes)
        assert {id(f) for f in some} <= {id(f) for f in every}
        dropped += len(every) - len(some)
        kept += len(some)
        n = len(plans)
        full = (
            collectives.share_phase(fabric, [*plans, *every])[0][:n]
            if every
            else collectives.share_phase(fabric, plans)[0]
        )
        got = collectives.share_phase(fabric, plans, bg)[0]
        assert [tier for _s, tier in got] == [tier for _s, tier in full]
        assert [sec for sec, _t in got] == pytest.approx([sec for sec, _t in full], rel=1e-12)
    if oversubscription <= 2:
        assert dropped > 0  # the filter does leave flows out where uplinks have room
    else:
        assert kept > 0  # and keeps them where they fill
