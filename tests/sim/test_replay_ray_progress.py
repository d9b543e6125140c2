"""Progress per job from Ray tasks: what a replay task reports while it runs reaches the driver (a Ray queue)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from placement.sim.executors import RayExecutor
from tests.sim.test_replay_policies import _reporting_task

try:
    import ray
except ImportError:  # pragma: no cover - depends on the environment
    ray = None

if ray is None:
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true but Ray is not installed (make test installs .[dev,ray])", pytrace=False)
    pytest.skip("Ray is not installed (pip install 'placement[ray]')", allow_module_level=True)


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayExecutor]:
    assert ray is not None
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, object_store_memory=80 * 1024 * 1024)
    try:
        yield RayExecutor()
    finally:
        ray.shutdown()


def test_progress_reaches_the_driver_from_ray_tasks(ray_head: RayExecutor) -> None:
    seen: list[tuple[int, int, int]] = []
    done: dict[int, int] = {}
    ray_head.run(
        _reporting_task, [5, 3], done.__setitem__, lambda i, e: None, lambda i, d, t: seen.append((i, d, t))
    )
    assert done == {0: 5, 1: 3}
    # each task's first report is sent at once and its last always: progress inside a task, not only its end
    assert {(0, 1, 5), (0, 5, 5), (1, 1, 3), (1, 3, 3)} <= set(seen)
