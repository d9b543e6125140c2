"""Sweeps and replays on Ray: a local Ray head (2 CPUs) started once for this module gives the same results as the
local executor for the same seeds (deterministic-time solver options), and a task's progress reaches the driver.
Skips without Ray, except under CI=true. One head per test session: a second ``ray.init`` in the same process
after a shutdown failed once in CI, so every Ray test lives here."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from placement.sim.executors import InlineExecutor, LocalExecutor, RayExecutor
from placement.sim.replay import SimConfig, TraceJob
from placement.sim.replay.run import ReplayTask, run_replays, task_key
from placement.sim.replay.shapes import ShapeRule
from placement.sim.whatif import run_sweep, sweep_from_dict
from tests.support_executors import reporting_task
from tests.support_whatif import sweep_doc

try:
    import ray
except ImportError:  # pragma: no cover - depends on the environment
    ray = None

if ray is None:
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true but Ray is not installed (make test installs .[dev,ray])", pytrace=False)
    pytest.skip("Ray is not installed (pip install 'placement[ray]')", allow_module_level=True)

CLUSTER = {
    "name": "ft-64",
    "levels": [
        {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
        {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
        {"name": "spine", "bandwidth_gbps": 25, "latency_us": 7},
    ],
    "node_types": [{"name": "hgx", "devices": 8, "kind": "H100"}],
    "generate": {"nodes": 8, "node_type": "hgx", "fanout": {"leaf": 2}},
}


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayExecutor]:
    assert ray is not None
    kw: dict[str, Any] = dict(
        num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=80 * 1024 * 1024
    )
    try:
        ray.init(**kw)
    except Exception:  # a head that did not come up under load: start it once more, cleanly
        ray.shutdown()
        ray.init(**kw)
    try:
        yield RayExecutor()
    finally:
        ray.shutdown()


def rows(path: Path, drop: tuple[str, ...]) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        out = [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]
    return sorted(out, key=lambda r: (r.get("key", ""), r.get("job", "")))


def test_sweep_on_ray_equals_local(ray_head: RayExecutor, tmp_path: Path) -> None:
    doc = sweep_doc(strategies=["first-fit", "kueue-tas", "cpsat"], time_limits=[0.3])
    doc["solver"] = {"workers": 1, "seed": 0, "deterministic": True}
    sw = sweep_from_dict(doc, "sweep.yaml")
    local = run_sweep(sw, tmp_path / "local", workers=0)
    remote = run_sweep(sw, tmp_path / "ray", executor=ray_head)
    assert ray_head.workers == 2
    assert remote.executed == local.executed == local.total > 0 and not remote.interrupted
    a = rows(local.csv_path, ("wall_s",))
    b = rows(remote.csv_path, ("wall_s",))
    assert all(r["status"] in ("OPTIMAL", "FEASIBLE", "INFEASIBLE") for r in b)
    assert a == b


def replay_tasks() -> list[ReplayTask]:
    import random

    rng = random.Random(3)
    jobs = tuple(
        TraceJob(
            f"t{i}", i * rng.uniform(5, 60), rng.choice([1, 2, 4, 8, 16, 32]), rng.uniform(50, 900), i + 2
        )
        for i in range(24)
    )
    rule = ShapeRule()
    out = []
    for policy in ("kueue-tas", "cpsat"):
        cfg = SimConfig(
            policy,
            seed=1,
            time_limit_s=0.2,
            deterministic=True,
            failure_rate=1.0,
            failure_mode="repair",
            repair_hours=0.5,
        )
        out.append(ReplayTask(task_key(CLUSTER, jobs, cfg, rule), CLUSTER, ".", jobs, cfg, rule))
    return out


def test_replay_on_ray_equals_local(ray_head: RayExecutor, tmp_path: Path) -> None:
    tasks = replay_tasks()
    local = run_replays(tasks, tmp_path / "local", executor=LocalExecutor(2))
    remote = run_replays(tasks, tmp_path / "ray", executor=ray_head)
    assert remote.executed == local.executed == 2 and remote.failed == 0
    for name in ("summary.csv", "jobs.csv", "series.csv"):
        assert rows(tmp_path / "local" / name, ("wall_s",)) == rows(tmp_path / "ray" / name, ("wall_s",)), (
            name
        )
    inline = run_replays(tasks, tmp_path / "inline", executor=InlineExecutor())
    assert rows(tmp_path / "inline" / "jobs.csv", ()) == rows(tmp_path / "ray" / "jobs.csv", ())
    assert inline.executed == 2


def boom(_: Any) -> None:
    raise RuntimeError("boom")


def test_ray_failed_task_is_retried_once_then_reported(ray_head: RayExecutor) -> None:
    done: dict[int, Any] = {}
    failed: dict[int, str] = {}
    ray_head.run(boom, [1, 2], done.__setitem__, failed.__setitem__)
    assert done == {} and sorted(failed) == [0, 1] and all("boom" in e for e in failed.values())


def test_progress_reaches_the_driver_from_ray_tasks(ray_head: RayExecutor) -> None:
    seen: list[tuple[int, int, int]] = []
    done: dict[int, int] = {}
    ray_head.run(
        reporting_task, [5, 3], done.__setitem__, lambda i, e: None, lambda i, d, t: seen.append((i, d, t))
    )
    assert done == {0: 5, 1: 3}
    # each task's first report is sent at once and its last always: progress inside a task, not only its end
    assert {(0, 1, 5), (0, 5, 5), (1, 1, 3), (1, 3, 3)} <= set(seen)
