"""The registry's rules on both backends (SQLite file; PostgreSQL from .ci/postgres.sh): versions, generations,
diffs, reserve/commit/release/renew, idempotency, leases expiring (also across a restart), restart restoring the
state exactly, an update during a solve, and concurrent reserves (two registries = two replicas) never sharing a
device."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from placement.errors import InfeasibleError, InputError
from placement.io.native.serving import serving_job_from_dict
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.registry import (
    Aborted,
    NotFound,
    Refused,
    Registry,
    ReservationStatus,
    StaleGeneration,
    open_store,
)
from placement.registry.audit import audit
from placement.registry.sql.schema import migration_files
from placement.solve import PlacementResult, SolveOptions, place
from tests.registry_util import Clock, cluster_doc, job, store_url
from tests.support_serving import serving_job_doc

OPTS = SolveOptions(time_limit_s=2.0, workers=1)


def _render(_topo: Topology, res: PlacementResult) -> bytes:
    return repr(res.mapping).encode()


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request.param, tmp_path)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _open(url: str, clock: Clock, **kw: Any) -> Registry:
    return Registry(open_store(url), clock=clock, **kw)


@pytest.fixture
def reg(url: str, clock: Clock) -> Iterator[Registry]:
    r = _open(url, clock)
    r.put_cluster("c", cluster_doc(8))
    yield r
    r.close()


def _reserve(
    reg: Registry, ranks: int, key: str | None = None, ttl: float = 60.0, name: str | None = None
) -> Any:
    return reg.reserve(
        "c", job(ranks, name), OPTS, ttl_s=ttl, key=key, fingerprint=f"{ranks}", render=_render
    )


def test_migrations_are_recorded_and_not_applied_twice(url: str, clock: Clock) -> None:
    r1 = _open(url, clock)
    r2 = _open(url, clock)  # a second replica opens the migrated database
    assert (
        r1.store.schema_version() == r2.store.schema_version() == max(v for v, _ in migration_files("sqlite"))
    )
    r1.close()
    r2.close()


def test_put_cluster_versions_only_changes(reg: Registry) -> None:
    assert reg.put_cluster("c", cluster_doc(8)) == (1, False)
    assert reg.put_cluster("c", cluster_doc(12)) == (2, True)
    assert reg.view("c").topology.num_devices == 96
    with pytest.raises(InputError) as e:
        reg.put_cluster("d", {"levels": []})
    assert e.value.problems
    with pytest.raises(NotFound):
        reg.view("nope")


def test_a_new_cluster_version_must_keep_the_devices_the_state_names(reg: Registry) -> None:
    reg.update_state("c", 1, diff={"fail": ["node08/gpu0"]})
    with pytest.raises(Refused, match="node08/gpu0"):
        reg.put_cluster("c", cluster_doc(4))


def test_generations_refuse_stale_updates_and_diffs_apply_in_order(reg: Registry) -> None:
    reg.update_state(
        "c", 5, snapshot={"occupied": [{"job": "a", "devices": ["node01"]}], "failed": ["node02/gpu1"]}
    )
    with pytest.raises(StaleGeneration) as e:
        reg.update_state("c", 5, diff={"free": ["node01"]})
    assert (e.value.given, e.value.current) == (5, 5)
    reg.update_state(
        "c",
        6,
        diff={
            "free": ["node01"],
            "occupy": [{"job": "b", "devices": ["node01/gpu0"]}],
            "recover": ["node02/gpu1"],
            "degrade": [{"device": "node03/gpu2", "slowdown": 2}],
        },
    )
    doc = reg.view("c").document(reg.clock())
    assert doc == {
        "occupied": [{"job": "b", "devices": ["node01/gpu0"]}],
        "degraded": [{"device": "node03/gpu2", "slowdown": 2.0}],
    }
    assert reg.view("c").generation == 6
    with pytest.raises(InputError) as bad:
        reg.update_state("c", 7, diff={"fail": ["node99"], "occupy": [{"devices": ["node01"]}]})
    assert {p.path for p in bad.value.problems} == {"fail[0]", "occupy[0].job"}
    assert reg.view("c").generation == 6  # nothing of a bad diff is applied


def test_reserve_holds_devices_others_cannot_get_and_idempotent_retries_get_the_same(reg: Registry) -> None:
    first = _reserve(reg, 16, key="k1")
    assert first.attempts == 1 and not first.replayed
    assert first.reservation.status is ReservationStatus.HELD and len(first.reservation.devices) == 16
    again = _reserve(reg, 16, key="k1")
    assert again.replayed and again.reservation.id == first.reservation.id
    assert again.reservation.devices == first.reservation.devices
    with pytest.raises(Refused, match="another request"):
        _reserve(reg, 24, key="k1")  # same key, other job
    other = _reserve(reg, 16, key="k2")
    assert not set(other.reservation.devices) & set(first.reservation.devices)
    # Place through the registry (what cluster_id resolves to) sees the held devices as occupied
    topo, state = reg.resolve("c")
    held = {topo.device_index(d) for d in first.reservation.devices}
    assert all(state.occupied[i] == f"reservation:{first.reservation.id}" for i in held)
    assert audit(reg, "c") == []


def test_exactly_the_jobs_that_fit_succeed(reg: Registry) -> None:
    got = [_reserve(reg, 16, name=f"j{i}") for i in range(4)]  # 64 devices, 4 x 16
    with pytest.raises(InfeasibleError):
        _reserve(reg, 8)
    reg.release(got[0].reservation.id)
    assert len(_reserve(reg, 16).reservation.devices) == 16


def test_commit_turns_holds_into_occupancy_and_release_frees_it(reg: Registry) -> None:
    res = _reserve(reg, 8, name="train").reservation
    committed = reg.commit(res.id)
    assert committed.status is ReservationStatus.COMMITTED
    assert reg.commit(res.id).status is ReservationStatus.COMMITTED  # idempotent
    view = reg.view("c")
    assert view.holds(reg.clock()) == {} and {
        d for d, r in view.rows(reg.clock()).items() if r.job == "train"
    } == set(res.devices)
    assert reg.renew(res.id, 10).expires_at == res.expires_at  # a committed reservation has no lease to renew
    with pytest.raises(NotFound):
        reg.renew("no-such-reservation", 10)
    released = reg.release(res.id)
    assert released.status is ReservationStatus.RELEASED and released.ended_at is not None
    assert not any(r.job == "train" for r in reg.view("c").rows(reg.clock()).values())
    assert reg.release(res.id).status is ReservationStatus.RELEASED
    with pytest.raises(Refused, match="RELEASED"):
        reg.commit(res.id)


def test_leases_expire_server_side_and_stay_expired_after_a_restart(url: str, clock: Clock) -> None:
    reg = _open(url, clock)
    reg.put_cluster("c", cluster_doc(2))  # 16 devices
    a = _reserve(reg, 16, ttl=10).reservation
    with pytest.raises(InfeasibleError):
        _reserve(reg, 8)
    clock.advance(5)
    assert reg.renew(a.id, 10).expires_at == clock.now + 10
    clock.advance(9)
    assert reg.reservations("c", live_only=True)[0].id == a.id
    clock.advance(2)  # past the renewed lease
    assert reg.reservations("c", live_only=True) == []
    assert reg.get(a.id).effective_status(clock.now) is ReservationStatus.EXPIRED
    with pytest.raises(Refused, match="EXPIRED"):
        reg.commit(a.id)
    reg.close()
    # restart: a new registry on the same database frees the devices of the expired lease
    reg2 = _open(url, clock)
    assert [r.id for r in reg2.sweep()] == [a.id]
    assert reg2.get(a.id).status is ReservationStatus.EXPIRED
    assert len(_reserve(reg2, 16).reservation.devices) == 16
    assert audit(reg2, "c") == []
    kinds = [e.kind for e in reg2.events("c", 0)]
    assert kinds.count("EXPIRED") == 1 and kinds[-1] == "RESERVED"
    reg2.close()


def test_a_held_device_expiring_needs_no_sweep_to_be_free_again(reg: Registry, clock: Clock) -> None:
    _reserve(reg, 64, ttl=1)
    clock.advance(2)
    assert len(_reserve(reg, 64).reservation.devices) == 64  # the reserve itself sweeps


def test_restart_restores_state_and_reservations_exactly(url: str, clock: Clock) -> None:
    reg = _open(url, clock)
    reg.put_cluster("c", cluster_doc(8))
    reg.update_state(
        "c",
        3,
        snapshot={
            "occupied": [{"job": "x", "devices": ["node01"]}],
            "failed": ["node02/gpu0"],
            "degraded": [{"device": "node03/gpu1", "slowdown": 1.5}],
            "links": [{"uplink": "node04", "slowdown": 2}],
        },
    )
    a = _reserve(reg, 8, key="a").reservation
    b = _reserve(reg, 16, key="b").reservation
    reg.commit(b.id)
    before = (
        reg.view("c").document(reg.clock()),
        reg.view("c").holds(reg.clock()),
        reg.reservations("c"),
        reg.events("c", 0),
    )
    reg.close()
    reg2 = _open(url, clock)
    after = (
        reg2.view("c").document(reg2.clock()),
        reg2.view("c").holds(reg2.clock()),
        reg2.reservations("c"),
        reg2.events("c", 0),
    )
    assert after == before
    assert _reserve(reg2, 8, key="a").reservation == reg2.get(a.id)
    reg2.close()


def test_an_update_during_the_solve_makes_reserve_solve_again(url: str, clock: Clock) -> None:
    calls: list[list[int]] = []
    holder: dict[str, Registry] = {}

    def solve_then_update(
        topo: Topology, state: ClusterState, jb: Any, opts: SolveOptions
    ) -> PlacementResult:
        res = place(topo, state, jb, opts)
        assert res.mapping is not None
        calls.append(list(res.mapping))
        if len(calls) == 1:  # the scheduler occupies exactly the chosen devices while we solved
            holder["reg"].update_state(
                "c",
                2,
                diff={"occupy": [{"job": "sneaky", "devices": [topo.devices[i].id for i in res.mapping]}]},
            )
        return res

    reg = _open(url, clock, solve=solve_then_update)
    holder["reg"] = reg
    reg.put_cluster("c", cluster_doc(8))
    reg.update_state("c", 1, diff={})
    out = _reserve(reg, 16)
    assert out.attempts == 2 and "generation" in out.conflicts[0]
    assert not set(out.reservation.devices) & {
        d for d, r in reg.view("c").rows(reg.clock()).items() if r.job == "sneaky"
    }
    assert out.reservation.generation == 2
    assert audit(reg, "c") == []
    reg.close()


def test_reserve_aborts_when_every_attempt_loses(url: str, clock: Clock) -> None:
    gen = iter(range(2, 100))
    holder: dict[str, Registry] = {}

    def always_moving(topo: Topology, state: ClusterState, jb: Any, opts: SolveOptions) -> PlacementResult:
        res = place(topo, state, jb, opts)
        holder["reg"].update_state(
            "c", next(gen), diff={"degrade": [{"device": "node08/gpu7", "slowdown": 1.1}]}
        )
        return res

    reg = _open(url, clock, solve=always_moving, max_attempts=3)
    holder["reg"] = reg
    reg.put_cluster("c", cluster_doc(8))
    with pytest.raises(Aborted, match="3 solves"):
        _reserve(reg, 8)
    assert reg.reservations("c") == [] and reg.view("c").holds(reg.clock()) == {}
    reg.close()


def test_concurrent_reserves_on_two_replicas_never_share_a_device(url: str, clock: Clock) -> None:
    replicas = [_open(url, clock), _open(url, clock)]
    replicas[0].put_cluster("c", cluster_doc(8))  # 64 devices: room for 8 jobs of 8
    ok: list[Any] = []
    failed: list[BaseException] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        try:
            out = _reserve(replicas[i % 2], 8, key=f"k{i}", name=f"j{i}")
            with lock:
                ok.append(out.reservation)
        except (InfeasibleError, Aborted) as e:
            with lock:
                failed.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    devices = [d for r in ok for d in r.devices]
    assert len(devices) == len(set(devices))
    assert len(ok) == 8 and len(failed) == 4
    assert audit(replicas[1], "c") == []
    for r in replicas:
        r.close()


def test_a_replica_sees_the_other_replicas_writes_and_events(url: str, clock: Clock) -> None:
    a, b = _open(url, clock), _open(url, clock)
    a.put_cluster("c", cluster_doc(4))
    assert b.view("c").generation == 0
    a.update_state("c", 1, diff={"fail": ["node01/gpu0"]})
    assert b.view("c").rows(b.clock())["node01/gpu0"].failed  # b's cache is keyed by the change counter
    res = _reserve(a, 8).reservation
    assert [e.kind for e in b.events("c", 1)] == ["STATE_DIFF", "RESERVED"]
    assert b.events("c", 2)[0].payload["id"] == res.id
    a.close()
    b.close()


def test_store_urls_and_the_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from placement.registry import default_url

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_url() == f"sqlite://{tmp_path}/placement/registry.db"
    store = open_store(default_url())
    assert (tmp_path / "placement" / "registry.db").is_file()
    store.close()
    for bad in ("mysql://x", "sqlite://", "sqlite:///tmp/"):
        with pytest.raises(ValueError, match="registry url"):
            open_store(bad)


def test_a_caller_that_left_gets_nothing_held(reg: Registry) -> None:
    with pytest.raises(Aborted, match="went away"):
        reg.reserve(
            "c", job(8), OPTS, ttl_s=60, key="gone", fingerprint="8", render=_render, gone=lambda: True
        )
    assert reg.reservations("c") == [] and reg.view("c").holds(reg.clock()) == {}


def test_a_serving_reserve_refuses_max_slowdown_at_its_field(reg: Registry) -> None:
    """Place or wait needs an ideal step, which a serving deployment does not have: Reserve with both refuses
    `max_slowdown` by name, before any solve, rather than ignoring it."""
    sj = serving_job_from_dict(serving_job_doc())
    with pytest.raises(InputError) as info:
        reg.reserve(
            "c", job(sj.ranks, sj.name), OPTS, ttl_s=60.0, key=None, fingerprint="s", render=_render,
            max_slowdown=1.5, serving=sj,
        )  # fmt: skip
    assert [p.path for p in info.value.problems] == ["max_slowdown"]
    assert "1.5" in info.value.problems[0].message
    assert reg.reservations("c") == []
