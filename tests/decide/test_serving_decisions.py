"""Serving jobs in the decisions (`placement.decide.serving`): PlaceBatch admits a serving deployment next to
training jobs, priced by its time per output token; Repair replaces the ranks of a failed replica keeping its EP
group inside its domain; Preempt frees room for a serving job. Each serving number is checked against the serving
model recomputed on the answer's mapping, and the repair against every single-device replacement (brute force).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from placement.cost.serving import model_serving
from placement.decide.batch.joint import place_batch
from placement.decide.batch.types import BatchJob
from placement.io.native.serving import serving_job_from_dict
from placement.model.serving import ServingJob, pool_ranks
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.sim.scenarios import megatron_job
from placement.solve.serving import place_serving, serving_traffic_job
from placement.solve.types import SolveOptions
from tests.support_serving import serving_job_doc, write_serving_cluster

OPTS = SolveOptions(time_limit_s=2.0, workers=1, deterministic=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Topology]:
    return write_serving_cluster(tmp_path_factory.mktemp("serving-decisions"))


def serving(name: str = "moe") -> ServingJob:
    """12 ranks: a prefill replica of EP 4 and a decode replica of EP 8 (module `serving_job_doc`)."""
    return serving_job_from_dict(serving_job_doc(name=name))


def leaves_of(topo: Topology, devices: list[int]) -> set[int]:
    return {topo.domain_of(d, topo.level_index("leaf")) for d in devices}


def test_batch_admits_a_serving_job_beside_a_training_job_priced_by_its_tpot(
    cluster: tuple[Path, Topology],
) -> None:
    """16 GPUs: the serving job's 12 ranks and a 4-rank TP job fill them. Its step seconds are the TPOT that the
    serving model gives on its mapping, its decode EP 8 sits in one leaf (8 GPUs: the lowest level that holds it),
    and it decodes as fast as when placed alone on the empty cluster (the TP job fits on the host left)."""
    _, topo = cluster
    sj = serving()
    state = ClusterState()
    queue = [
        BatchJob(megatron_job("train", tp=4, dp=1, pp=1, hidden=1024, layers=4, micro_batches=2), 1.0, 0.0),
        BatchJob(serving_traffic_job(topo, state, sj), 1.0, 0.0, sj),
    ]
    res = place_batch(topo, state, queue, OPTS)
    plan = res.plan
    assert [o.admitted for o in plan.outcomes] == [True, True]
    train, served = plan.outcomes
    assert served.mapping is not None and train.mapping is not None and served.report is not None
    assert not set(served.mapping) & set(train.mapping)
    again = model_serving(topo, state, sj, served.mapping)
    assert served.serving is not None
    assert served.serving.tpot_seconds == pytest.approx(again.tpot_seconds)
    assert served.report.step_seconds == pytest.approx(again.tpot_seconds)
    assert served.serving.ttft_seconds == pytest.approx(again.ttft_seconds)
    assert train.serving is None and train.report is not None
    decode = [served.mapping[r] for r in pool_ranks(sj, "decode", 0)]
    assert len(leaves_of(topo, decode)) == 1
    alone = place_serving(topo, state, sj, OPTS)
    assert again.tpot_seconds == pytest.approx(alone.report.tpot_seconds)
    # the plan's weighted step is the training step plus the serving job's TPOT
    assert plan.weighted_step_seconds == pytest.approx(train.report.step_seconds + again.tpot_seconds)
