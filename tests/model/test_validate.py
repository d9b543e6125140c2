"""placement.model.validate: one test per hard rule with its message, and every violation returned at once."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from placement.model.job import CollectiveKind, Constraints, Edge, Group, Job, SpreadRule
from placement.model.state import ClusterState, DeviceStatus, Uplink
from placement.model.topology import Topology
from placement.model.validate import Violation, excluded_devices, validate
from tests.conftest import tree

# small tree: h0,h1 in leaf l0; h2,h3 in leaf l1; 4 GPUs each; h0/gpu0 = 0, h1/gpu0 = 4, h2/gpu0 = 8, h3/gpu0 = 12
T = tree()
EMPTY = ClusterState()
GOOD = [0, 1, 4, 5]  # tp (0,1) on h0, tp (2,3) on h1, dp (0,2) and (1,3) inside l0, pp 1->3 inside l0


def job(*, kind: str | None = None, name: str = "j", **cons: object) -> Job:
    groups = (
        Group("tp", CollectiveKind.ALL_REDUCE, (0, 1), 1e6, 1),
        Group("tp", CollectiveKind.ALL_REDUCE, (2, 3), 1e6, 1),
        Group("dp", CollectiveKind.ALL_REDUCE, (0, 2), 1e6, 1),
        Group("dp", CollectiveKind.ALL_REDUCE, (1, 3), 1e6, 1),
    )
    return Job(name, 4, kind, groups=groups, edges=(Edge("pp", 1, 3, 1e6),), constraints=Constraints(**cons))  # type: ignore[arg-type]


def check(
    mapping: Sequence[int], j: Job | None = None, state: ClusterState = EMPTY, topo: Topology = T
) -> list[str]:
    return [str(v) for v in validate(topo, state, j or job(), mapping)]


def test_a_good_mapping_has_no_violation() -> None:
    assert check(GOOD) == []


def test_rank_count() -> None:
    assert check([0, 1, 4]) == ["[rank-count] the mapping places 3 ranks; the job has 4"]


def test_unknown_device_index() -> None:
    assert check([0, 99, 4, -1]) == [
        "[unknown-device] rank 1: device index 99 is not in the cluster",
        "[unknown-device] rank 3: device index -1 is not in the cluster",
    ]


def test_one_rank_per_device() -> None:
    assert check([0, 0, 4, 0]) == ["[one-rank-per-device] device h0/gpu0 holds ranks 0, 1, 3"]


def test_failed_device() -> None:
    st = ClusterState(failed=frozenset({5}))
    assert st.status(5) is DeviceStatus.FAILED
    assert check(GOOD, state=st) == ["[failed] rank 3: device h1/gpu1 has failed"]


def test_occupied_device() -> None:
    st = ClusterState(occupied={4: "other"})
    assert st.status(4) is DeviceStatus.OCCUPIED
    assert check(GOOD, state=st) == ["[occupied] rank 2: device h1/gpu0 is occupied by job 'other'"]


def test_devices_occupied_by_the_job_itself_are_allowed() -> None:
    st = ClusterState(occupied={0: "j", 1: "j", 4: "j", 5: "j"})
    assert check(GOOD, job(name="j"), st) == []
    assert check(GOOD, job(name="k"), st)[0] == "[occupied] rank 0: device h0/gpu0 is occupied by job 'j'"
    assert st.usable(0, "j") and not st.usable(0, "k") and not st.usable(0)


def test_degraded_device_is_usable() -> None:
    st = ClusterState(device_slowdown={0: 1.5})
    assert st.status(0) is DeviceStatus.DEGRADED and st.status(1) is DeviceStatus.FREE
    assert check(GOOD, state=st) == []


def test_device_kind() -> None:
    mixed = tree(kind="A100")
    assert check(GOOD, job(kind="H100"), topo=mixed) == [
        f"[kind] rank {r}: device {mixed.devices[d].id} is a A100; the job needs H100"
        for r, d in enumerate(GOOD)
    ]
    assert check(GOOD, job(kind="A100"), topo=mixed) == []


def test_excluded_devices_and_unknown_selectors() -> None:
    j = job(exclude=("h1/gpu1", "leaf:l1", "zz"))
    assert check(GOOD, j) == [
        "[exclude] constraints.exclude: unknown device, host or domain 'zz'",
        "[excluded] rank 3: device h1/gpu1 is excluded by the request",
    ]
    devs, bad = excluded_devices(T, j)
    assert devs == {5, *range(8, 16)} and bad == [
        Violation("exclude", "constraints.exclude: unknown device, host or domain 'zz'")
    ]
    assert check(GOOD, job(exclude=("h0",))) == [
        f"[excluded] rank {r}: device h0/gpu{r} is excluded by the request" for r in (0, 1)
    ]


def test_pins() -> None:
    j = job(pins={0: "h0/gpu0", 1: "h3/gpu3", 2: "zz/gpu0", 9: "h0/gpu2"})
    assert check(GOOD, j) == [
        "[pin] rank 1 is pinned to h3/gpu3 but placed on h0/gpu1",
        "[pin] constraints.pins[2]: unknown device 'zz/gpu0'",
        "[pin] constraints.pins: rank 9 is outside 0..3",
    ]


def test_required_level_for_groups_and_edges() -> None:
    split = [0, 4, 8, 12]  # every tp group crosses hosts and leaves; the pp edge 1->3 crosses leaves
    assert check(split, job(require={"tp": "node", "pp": "leaf"})) == [
        "[required-level] pp edge 1->3 crosses leaf domains l0 and l1; pp requires one leaf",
        "[required-level] tp group of ranks 0, 1 spans 2 node domains (h0, h1); tp requires one node",
        "[required-level] tp group of ranks 2, 3 spans 2 node domains (h2, h3); tp requires one node",
    ]
    assert check(GOOD, job(require={"tp": "node", "dp": "leaf", "pp": "leaf"})) == []
    assert check(GOOD, job(require={"tp": "rack"})) == [
        "[required-level] constraints.require.tp: unknown level 'rack'; levels are ['node', 'leaf', 'spine']"
    ]


def test_spread_min_domains_job_scope() -> None:
    j = job(spread=(SpreadRule("leaf", min_domains=2),))
    assert check(GOOD, j) == ["[spread] the job covers 1 leaf domain(s) (l0); at least 2 required"]
    assert check([0, 1, 8, 9], j) == []


def test_spread_max_ranks_per_domain_job_scope() -> None:
    j = job(spread=(SpreadRule("node", max_ranks_per_domain=1),))
    assert check(GOOD, j) == [
        "[spread] the job puts 2 ranks in node h0; at most 1 allowed",
        "[spread] the job puts 2 ranks in node h1; at most 1 allowed",
    ]
    assert check([0, 4, 8, 12], j) == []


def test_spread_group_scope_with_custom_fault_domains() -> None:
    # power feeds cut across the network tree: feed A = h0 + h2, feed B = h1 + h3
    power = {"A": frozenset([*range(0, 4), *range(8, 12)]), "B": frozenset([*range(4, 8), *range(12, 16)])}
    st = ClusterState(fault_domains={"power": power})
    j = job(
        spread=(
            SpreadRule("power", scope="tp", min_domains=2),
            SpreadRule("power", scope="dp", max_ranks_per_domain=1),
        )
    )
    assert check(GOOD, j, st) == [
        "[spread] tp group of ranks 0, 1 covers 1 power domain(s) (A); at least 2 required",
        "[spread] tp group of ranks 2, 3 covers 1 power domain(s) (B); at least 2 required",
    ]
    # each tp group on two feeds; each dp group too (h0 with h2 is feed A twice)
    assert check([0, 4, 8, 12], j, st) == [
        "[spread] dp group of ranks 0, 2 puts 2 ranks in power A; at most 1 allowed",
        "[spread] dp group of ranks 1, 3 puts 2 ranks in power B; at most 1 allowed",
    ]
    assert check([0, 4, 12, 8], j, st) == []
    assert st.fault_domain_of("power", T)[9] == "A" and st.fault_domain_of("leaf", T)[9] == "l1"
    assert st.fault_kinds(T) == ("leaf", "node", "power", "spine")


def test_spread_unknown_kind_and_scope() -> None:
    j = job(spread=(SpreadRule("pdu", min_domains=2), SpreadRule("node", scope="ep", min_domains=2)))
    assert check(GOOD, j) == [
        "[spread] constraints.spread[0].kind: unknown fault-domain kind 'pdu'; known: ['leaf', 'node', 'spine']",
        "[spread] constraints.spread[1].scope: the job has no 'ep' groups; scopes are 'job' or one of ['dp', 'pp', 'tp']",
    ]


def test_failed_link_between_members() -> None:
    st = ClusterState(failed_pairs=frozenset({(0, 1)}))
    assert st.has_link_faults
    assert check(GOOD, state=st) == [
        "[failed-link] tp traffic of ranks 0, 1 needs the failed link h0/gpu0<->h0/gpu1"
    ]
    assert check([0, 2, 4, 5], state=st) == []  # no group holds both ends


def test_failed_uplink_crossed() -> None:
    st = ClusterState(failed_uplinks=frozenset({Uplink(1, 0)}))  # leaf l0 lost its spine uplinks
    assert check(GOOD, state=st) == []  # everything stays inside l0
    assert check([0, 1, 8, 9], state=st) == [
        "[failed-link] dp traffic of ranks 0, 2 crosses the failed uplink of leaf l0",
        "[failed-link] dp traffic of ranks 1, 3 crosses the failed uplink of leaf l0",
        "[failed-link] pp traffic of ranks 1, 3 crosses the failed uplink of leaf l0",
    ]
    host_nic = ClusterState(failed_uplinks=frozenset({Uplink(0, 1)}))  # h1's NIC path
    assert check(GOOD, state=host_nic) == [
        "[failed-link] dp traffic of ranks 0, 2 crosses the failed uplink of node h1",
        "[failed-link] dp traffic of ranks 1, 3 crosses the failed uplink of node h1",
        "[failed-link] pp traffic of ranks 1, 3 crosses the failed uplink of node h1",
    ]


def test_every_violation_is_returned_not_the_first() -> None:
    st = ClusterState(occupied={4: "other"}, failed=frozenset({1}), failed_pairs=frozenset({(8, 9)}))
    j = job(
        require={"tp": "node"},
        pins={0: "h3/gpu0"},
        exclude=("h2/gpu1",),
        spread=(SpreadRule("leaf", min_domains=3),),
    )
    got = validate(T, st, j, [1, 4, 8, 9])
    assert [v.rule for v in got] == [
        "failed",
        "occupied",
        "excluded",
        "pin",
        "required-level",
        "spread",
        "failed-link",
    ]
    assert str(got[-1]) == "[failed-link] tp traffic of ranks 2, 3 needs the failed link h2/gpu0<->h2/gpu1"


@pytest.mark.parametrize("n", [7, 8])
def test_long_rank_lists_are_shortened(n: int) -> None:
    j = Job(
        "big",
        n,
        groups=(Group("tp", CollectiveKind.ALL_REDUCE, tuple(range(n)), 1.0, 1),),
        constraints=Constraints(require={"tp": "node"}),
    )
    msg = check([0, 1, 2, 3, 4, 5, 6, 7][:n], j)
    head = "0, 1, 2, 3, 4, 5" + (f", ... ({n} in all)" if n > 6 else "")
    assert msg == [
        f"[required-level] tp group of ranks {head} spans 2 node domains (h0, h1); tp requires one node"
    ]
