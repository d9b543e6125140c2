"""`placement.sim.replay.plan.ReplayPlan`: a replay run's options checked in the library, every problem named by
its flag at once, and one SimConfig per seed and policy."""

from __future__ import annotations

import pytest

from placement.errors import InputError
from placement.sim.replay import POLICIES
from placement.sim.replay.plan import ReplayPlan


def test_every_bad_option_is_named_at_once() -> None:
    plan = ReplayPlan(
        ("first-fit", "best"), failure_mode="explode", repair_hours=0, load=11, max_slowdown=0.5
    )
    with pytest.raises(InputError) as ei:
        plan.configs()
    got = {p.path: p.message for p in ei.value.problems}
    assert set(got) == {"--policy", "--failure-mode", "--repair-hours", "--load", "--max-slowdown"}
    assert "'best'" in got["--policy"] and "'explode'" in got["--failure-mode"]


def test_one_config_per_seed_and_policy() -> None:
    configs = ReplayPlan(seeds=(1, 2), checkpoint_minutes=10, wall_time=True).configs()
    # every policy but cpsat-cluster, which weighs other jobs' traffic and so needs --contention
    plain = [p for p in POLICIES if p != "cpsat-cluster"]
    assert [(c.seed, c.policy) for c in configs] == [(s, p) for s in (1, 2) for p in plain]
    assert not any(c.contention for c in configs)
    assert all(c.checkpoint_s == 600 and not c.deterministic for c in configs)
