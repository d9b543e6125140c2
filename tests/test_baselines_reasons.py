"""Every baseline or candidate without a mapping says why (`PlacementResult.stats["why_not:NAME"]`): the cluster
lacks the level it needs, too few devices are free, or how the scheduler would keep the job pending."""

from __future__ import annotations

from placement.model.state import ClusterState
from placement.model.traffic import job_traffic
from placement.sim.scenarios import fat_tree, megatron_job
from placement.solve import place
from placement.solve.baselines import BASELINES, why_none
from placement.solve.run import WHY_NOT


def test_every_missing_mapping_has_its_reason() -> None:
    topo = fat_tree(32, nodes_per_leaf=2, leaves_per_spine=2)  # no block level
    assert "block" not in topo.level_names
    job = megatron_job("j", tp=8, pp=1, dp=4)
    res = place(topo, ClusterState(), job)
    missing = [n for n, comm in res.baselines.items() if comm is None]
    assert "slurm-block" in missing
    for name in missing:
        assert str(res.stats[f"{WHY_NOT}{name}"]), name
    assert "no block level" in str(res.stats[f"{WHY_NOT}slurm-block"])
    assert not any(f"{WHY_NOT}{n}" in res.stats for n, comm in res.baselines.items() if comm is not None)


def test_too_few_free_devices_is_said_with_the_numbers() -> None:
    topo = fat_tree(32, nodes_per_leaf=2, leaves_per_spine=2)
    job = megatron_job("j", tp=8, pp=1, dp=4)
    state = ClusterState(occupied={d: "x" for d in range(5)})  # 27 of 32 free
    free = topo.num_devices - len(state.occupied)
    for name in BASELINES:
        if name == "slurm-block":
            continue
        assert (
            why_none(topo, state, job, job_traffic(job), name)
            == f"only {free} usable free devices for 32 ranks"
        )
