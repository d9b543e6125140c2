"""The job option ``launcher: torchrun``: the job file and proto field, host blocks, the solver keeping each host's
ranks contiguous and reporting the price against the free mapping, and the exports that then work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from placement.cli.app import app
from placement.errors import InfeasibleError, InputError
from placement.io.export import export, launch_seats
from placement.io.native import cluster_from_dict, job_from_dict
from placement.model.job import host_blocks
from placement.model.state import ClusterState
from placement.model.validate import validate
from placement.solve import SolveOptions, place
from placement.solve.launcher import is_contiguous

CLUSTER = {
    "name": "two",
    "levels": [{"name": "node", "bandwidth_gbps": 400}, {"name": "leaf", "bandwidth_gbps": 10}],
    "generate": {"nodes": 2, "devices": 2, "kind": "H100", "fanout": {"leaf": 2}},
}
# ranks 0 and 2 talk, 1 and 3 talk: the free optimum puts {0, 2} and {1, 3} on one node each (not contiguous)
JOB = {
    "name": "pairs",
    "ranks": 4,
    "groups": [
        {"label": "a", "members": [0, 2], "bytes": 1e9},
        {"label": "b", "members": [1, 3], "bytes": 1e9},
    ],
}
OPTS = SolveOptions(time_limit_s=2.0, deterministic=True, workers=1)


def test_host_blocks() -> None:
    assert host_blocks(["a", "a", "b", "c", "c"]) == [("a", 0, 2), ("b", 2, 1), ("c", 3, 2)]
    assert host_blocks([]) == []
    with pytest.raises(
        ValueError, match=r"rank 3 is on a, but a's block of ranks 0-1 ended at rank 1 \(b came between\)"
    ):
        host_blocks(["a", "a", "b", "a"])


def test_job_file_launcher_field() -> None:
    assert job_from_dict(JOB).launcher == "any"
    assert job_from_dict({**JOB, "launcher": "torchrun"}).launcher == "torchrun"
    with pytest.raises(InputError, match="launcher: unknown launcher 'mpi'; use one of any, torchrun"):
        job_from_dict({**JOB, "launcher": "mpi"}, "j.yaml")


def test_proto_job_carries_the_launcher() -> None:
    from placement.messages import domain as convert
    from placement.v1 import placement_pb2 as pb

    msg = pb.Job(name="pairs", ranks=4, launcher="torchrun")
    g = msg.groups.add()
    g.label, g.bytes = "a", 1e9
    g.members.extend([0, 2])
    ps = convert._Problems()
    job = convert._job(msg, "job", ps)
    assert job is not None and job.launcher == "torchrun"


def test_the_solver_keeps_host_blocks_and_reports_the_price() -> None:
    topo, static = cluster_from_dict(CLUSTER)
    state = static or ClusterState()
    free = place(topo, state, job_from_dict(JOB), OPTS)
    assert free.mapping is not None and not is_contiguous(topo, free.mapping)
    assert "launcher" not in free.stats
    tj = job_from_dict({**JOB, "launcher": "torchrun"})
    res = place(topo, state, tj, OPTS)
    assert res.mapping is not None and res.report is not None and free.report is not None
    assert is_contiguous(topo, res.mapping) and not validate(topo, state, tj, res.mapping)
    assert res.stats["launcher"] == "torchrun" and res.stats["launcher_free_was_contiguous"] == 0
    assert res.stats["launcher_free_step_seconds"] == pytest.approx(free.report.step_seconds)
    assert res.report.step_seconds > free.report.step_seconds  # the pairs now cross the leaf
    assert res.stats["launcher_step_ratio"] == pytest.approx(
        res.report.step_seconds / free.report.step_seconds
    )
    # the same answer again (deterministic budget)
    assert place(topo, state, tj, OPTS).mapping == res.mapping
    seats = launch_seats(
        [(topo.devices[d].host, topo.devices[d].local_index) for d in res.mapping], None, topo
    )
    assert export("torchrun", seats).count("exec torchrun") == 2


def test_a_contiguous_free_answer_costs_nothing_more() -> None:
    topo, static = cluster_from_dict(CLUSTER)
    job = {
        **JOB,
        "groups": [
            {"label": "a", "members": [0, 1], "bytes": 1e9},
            {"label": "b", "members": [2, 3], "bytes": 1e9},
        ],
    }
    res = place(topo, static or ClusterState(), job_from_dict({**job, "launcher": "torchrun"}), OPTS)
    assert res.stats["launcher_free_was_contiguous"] == 1 and res.stats[
        "launcher_step_ratio"
    ] == pytest.approx(1.0)


def test_pins_that_split_a_host_are_infeasible_under_torchrun() -> None:
    topo, static = cluster_from_dict(CLUSTER)
    pins = {"constraints": {"pins": {"0": "node01/gpu0", "1": "node02/gpu0", "2": "node01/gpu1"}}}
    job = job_from_dict({**JOB, **pins, "launcher": "torchrun"})
    with pytest.raises(
        InfeasibleError, match="launcher torchrun: each host's ranks must be one contiguous block"
    ):
        place(topo, static or ClusterState(), job, OPTS)


def test_place_table_shows_the_price_of_torchrun(tmp_path: Path) -> None:
    import yaml

    cluster, job = tmp_path / "c.yaml", tmp_path / "j.yaml"
    cluster.write_text(yaml.safe_dump(CLUSTER))
    job.write_text(yaml.safe_dump({**JOB, "launcher": "torchrun"}))
    res = CliRunner().invoke(
        app, ["place", str(cluster), str(job), "--time-limit", "2", "--deterministic", "--workers", "1"]
    )
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("launcher torchrun"))
    assert "each host's ranks one contiguous block" in line and "for the free mapping (+" in line
    res = CliRunner().invoke(
        app,
        [
            "place",
            str(cluster),
            str(job),
            "--time-limit",
            "2",
            "--deterministic",
            "--workers",
            "1",
            "--output",
            "json",
        ],
    )
    doc = json.loads(res.stdout)
    stats = doc["result"]["stats"]  # the PlaceResponse JSON mapping: numbers in values, words in notes
    assert stats["notes"]["launcher"] == "torchrun" and stats["values"]["launcher_step_ratio"] > 1.0


def test_the_grpc_result_carries_the_price() -> None:
    from placement.messages import domain as convert

    topo, static = cluster_from_dict(CLUSTER)
    job = job_from_dict({**JOB, "launcher": "torchrun"})
    res = place(topo, static or ClusterState(), job, OPTS)
    msg = convert.result_to_proto(topo, job, res, time_limit_s=2.0, deadline_limited=False)
    assert msg.stats.notes["launcher"] == "torchrun"
    assert msg.stats.values["launcher_step_ratio"] == pytest.approx(res.stats["launcher_step_ratio"])
    assert msg.stats.values["launcher_free_step_seconds"] == pytest.approx(
        res.stats["launcher_free_step_seconds"]
    )
