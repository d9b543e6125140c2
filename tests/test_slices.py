"""Balanced slices and segments: on small clusters a valid mapping exists (brute force over every mapping, judged
by the independent validator) iff `place_job` returns one; every returned mapping passes `validate`; the validator
flags unbalanced and split-segment mappings; impossible requests name the field, the value and the rule."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from typer.testing import CliRunner

from placement.cli.app import app
from placement.decide.balance import place_job
from placement.errors import InfeasibleError, InputError
from placement.io.native import cluster_from_dict, job_from_dict, state_from_dict
from placement.messages import message_to_dict
from placement.messages.files import request_from_dict
from placement.model.job import BalanceRule, Job, SegmentRule
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.validate import validate
from placement.solve import SolveOptions, place
from placement.v1 import placement_pb2 as pb
from tests.support_server import cluster_doc, job_doc, running

OPTS = SolveOptions(time_limit_s=2.0, workers=1)


def _cluster(nodes: int = 6, gpus: int = 2, per_leaf: int = 2) -> Topology:
    topo, _ = cluster_from_dict(cluster_doc(nodes, gpus=gpus, per_leaf=per_leaf), "c")
    return topo


def _job(ranks: int, **constraints: Any) -> Job:
    doc = job_doc(1, ranks, name="j")
    doc["constraints"] = constraints
    return job_from_dict(doc, "j")


def _state(topo: Topology, busy: list[int]) -> ClusterState:
    occ = [{"job": "other", "devices": [topo.devices[d].id for d in busy]}] if busy else []
    return state_from_dict({"occupied": occ}, topo, "s")


def _exists(topo: Topology, state: ClusterState, job: Job) -> bool:
    """Some mapping of the job onto free devices passes the validator (every ordered choice of devices)."""
    free = [d for d in range(topo.num_devices) if d not in state.occupied]
    return any(not validate(topo, state, job, list(m)) for m in itertools.permutations(free, job.ranks))


def _solve(topo: Topology, state: ClusterState, job: Job) -> list[int] | None:
    try:
        res = place_job(topo, state, job, OPTS)
    except InfeasibleError:
        return None
    assert res.mapping is not None
    return res.mapping


@pytest.mark.parametrize("seed", range(10))
def test_balanced_mapping_found_iff_one_exists(seed: int) -> None:
    rng = random.Random(seed)
    topo = _cluster(6, gpus=2, per_leaf=2)  # 3 leaves of 2 hosts of 2 devices
    busy = rng.sample(range(topo.num_devices), rng.choice((3, 4, 5, 6)))
    state = _state(topo, busy)
    ranks = rng.choice((3, 4, 5))
    slice_ = 2 if ranks == 4 and rng.random() < 0.5 else 1
    job = _job(ranks, balance={"level": "leaf", "slice": slice_})
    got = _solve(topo, state, job)
    exists = _exists(topo, state, job)
    assert (got is not None) == exists, (busy, ranks, slice_, got)
    if got is not None:
        assert validate(topo, state, job, got) == []
        col = topo.domain_column(1)
        counts = Counter(col[d] for d in got).values()
        assert max(counts) - min(counts) <= slice_  # independent of the validator: slice counts within one


@pytest.mark.parametrize("seed", range(6))
def test_balanced_mapping_with_tp_in_a_node_found_iff_one_exists(seed: int) -> None:
    """Balance with a required level: the devices left out of a q-slice domain must not break the TP groups."""
    rng = random.Random(1000 + seed)
    topo = _cluster(6, gpus=2, per_leaf=2)
    state = _state(topo, rng.sample(range(topo.num_devices), rng.choice((2, 3, 4, 5))))
    doc = job_doc(2, 2, name="j")
    doc["constraints"] = {
        "require": {"tp": "node"},
        "balance": {"level": "leaf", "slice": rng.choice((1, 2))},
    }
    job = job_from_dict(doc, "j")
    got = _solve(topo, state, job)
    assert (got is not None) == _exists(topo, state, job), (sorted(state.occupied), got)
    if got is not None:
        assert validate(topo, state, job, got) == []


@pytest.mark.parametrize("seed", range(8))
def test_segmented_mapping_found_iff_one_exists(seed: int) -> None:
    rng = random.Random(100 + seed)
    topo = _cluster(6, gpus=2, per_leaf=2)
    busy = rng.sample(range(topo.num_devices), rng.choice((2, 3, 4, 5)))
    state = _state(topo, busy)
    nodes = rng.choice((1, 2))
    ranks = 4 if nodes == 2 else rng.choice((2, 4))
    job = _job(ranks, segment={"nodes": nodes, "level": "leaf"})
    try:
        got: list[int] | None = place(topo, state, job, OPTS).mapping
    except InfeasibleError:
        got = None
    exists = _exists(topo, state, job)
    assert (got is not None) == exists, (busy, ranks, nodes, got)
    if got is not None:
        assert validate(topo, state, job, got) == []
        col, size = topo.domain_column(1), nodes * 2
        for first in range(0, ranks, size):
            assert len({col[got[r]] for r in range(first, first + size)}) == 1


def test_balance_and_segment_together_pass_the_validator() -> None:
    topo = _cluster(8, gpus=2, per_leaf=4)  # 2 leaves of 4 hosts
    state = _state(topo, [0, 1, 2, 8])  # leaf01 has 5 free devices, leaf02 7: no leaf holds the job
    job = _job(8, balance={"level": "leaf"}, segment={"nodes": 1, "level": "node"})
    res = place_job(topo, state, job, OPTS)
    assert res.mapping is not None and validate(topo, state, job, res.mapping) == []
    col = topo.domain_column(1)
    assert sorted(Counter(col[d] for d in res.mapping).values()) == [4, 4]  # 5+3 would fit, 4+4 asked


def test_balance_prefers_the_fewest_domains() -> None:
    topo = _cluster(8, gpus=2, per_leaf=4)
    job = _job(8, balance={"level": "leaf"})
    res = place_job(topo, _state(topo, []), job, OPTS)
    assert res.mapping is not None
    col = topo.domain_column(1)
    assert len({col[d] for d in res.mapping}) == 1  # one leaf holds all 8: 8 is balanced on one domain


def test_the_validator_flags_unbalanced_and_split_segments() -> None:
    topo = _cluster(8, gpus=2, per_leaf=4)
    state = _state(topo, [])
    job = _job(6, balance={"level": "leaf"})
    # 5 ranks in leaf01 (devices 0-7) and 1 in leaf02 (devices 8-15): 5+1
    bad = validate(topo, state, job, [0, 1, 2, 3, 4, 8])
    assert [v.rule for v in bad] == ["balance"] and "5+1" in bad[0].message
    assert validate(topo, state, job, [0, 1, 2, 8, 9, 10]) == []
    seg = _job(4, segment={"nodes": 1, "level": "node"})
    bad = validate(topo, state, seg, [0, 2, 4, 5])  # ranks 0-1 on two hosts
    assert [v.rule for v in bad] == ["segment"] and "ranks 0-1" in bad[0].message
    assert validate(topo, state, seg, [2, 3, 4, 5]) == []


@pytest.mark.parametrize(
    ("constraints", "path", "words"),
    [
        ({"balance": {"level": "rack"}}, "constraints.balance.level", "unknown level 'rack'"),
        (
            {"balance": {"level": "leaf", "slice": 4}},
            "constraints.balance.slice",
            "do not divide the job's 6",
        ),
        ({"segment": {"nodes": 2, "level": "leaf"}}, "constraints.segment.nodes", "4 ranks do not divide"),
        (
            {"segment": {"nodes": 2, "level": "node"}},
            "constraints.segment.level",
            "cannot lie inside one node",
        ),
    ],
)
def test_impossible_requests_name_the_field_value_and_rule(
    constraints: dict[str, Any], path: str, words: str
) -> None:
    topo = _cluster(8, gpus=2, per_leaf=4)
    job = _job(6, **constraints)
    with pytest.raises(InputError) as e:
        place_job(topo, _state(topo, []), job, OPTS) if "balance" in constraints else place(
            topo, _state(topo, []), job, OPTS
        )
    text = str(e.value)
    assert path in text and words in text, text


def test_job_yaml_reads_the_rules() -> None:
    job = _job(4, balance={"level": "leaf", "slice": 2}, segment={"nodes": 1, "level": "node"})
    assert job.constraints.balance == BalanceRule("leaf", 2)
    assert job.constraints.segment == SegmentRule(1, "node")
    with pytest.raises(InputError) as e:
        _job(4, balance={"levle": "leaf"})
    assert "constraints.balance" in str(e.value)
    assert dataclasses.replace(job.constraints, balance=None).balance is None


def _unbalancing_files(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """2 leaves of 4 hosts x 2 devices; leaf01 has 5 free devices, leaf02 7: an 8-rank job needs both."""
    cdoc = cluster_doc(8, gpus=2, per_leaf=4)
    topo, _ = cluster_from_dict(cdoc, "c")
    sdoc = {"occupied": [{"job": "o", "devices": [topo.devices[d].id for d in (0, 1, 2, 8)]}]}
    jdoc = {**job_doc(1, 8, name="j"), "constraints": {}}
    for name, doc in (("c.yaml", cdoc), ("s.yaml", sdoc), ("j.yaml", jdoc)):
        (tmp_path / name).write_text(yaml.safe_dump(doc))
    return cdoc, sdoc, jdoc


def _leaf_counts(doc: dict[str, Any]) -> list[int]:
    hosts = [a["host"] for a in doc["result"]["mapping"]]
    return sorted(Counter("leaf01" if int(h[4:]) <= 4 else "leaf02" for h in hosts).values())


def test_balance_and_segment_over_grpc_and_the_cli(tmp_path: Path) -> None:
    cdoc, sdoc, jdoc = _unbalancing_files(tmp_path)
    rules = {"balance": {"level": "leaf"}, "segment": {"nodes": 1, "level": "node"}}
    req = request_from_dict(
        {
            "cluster": cdoc,
            "state": sdoc,
            "job": {**jdoc, "constraints": rules},
            "options": {"time_limit_s": 2},
        },
        pb.PlaceRequest,
    )
    assert req.job.constraints.balance.level == "leaf" and req.job.constraints.segment.nodes == 1
    with running() as r:
        got = message_to_dict(r.stub.Place(req, timeout=60))
        assert _leaf_counts(got) == [4, 4]
        req.job.constraints.balance.slice = 3  # 3 does not divide 8
        with pytest.raises(grpc.RpcError) as e:
            r.stub.Place(req, timeout=60)
        assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "constraints.balance.slice" in str(e.value.details())
    files = [str(tmp_path / "c.yaml"), str(tmp_path / "j.yaml"), "--state", str(tmp_path / "s.yaml")]
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "place",
            *files,
            "--balance",
            "leaf",
            "--segment",
            "1:node",
            "--output",
            "json",
            "--time-limit",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    assert _leaf_counts(json.loads(res.stdout)) == [4, 4]
    res = runner.invoke(app, ["place", *files, "--balance", "leaf:x"])
    assert res.exit_code == 2 and "--balance" in res.output
