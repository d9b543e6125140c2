"""`placement place` and `placement export` through typer's CliRunner on 2 nodes x 4 GPUs: JSON, tables and
baselines, option errors, infeasible (exit 3), determinism, and every export format and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support_cli import assert_input_error, modeled, run, write


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, Path]:
    """2 nodes x 4 GPUs on one leaf and a TP=4 x DP=2 job."""
    cluster = write(
        tmp_path,
        "small.yaml",
        """\
        name: small
        levels: [{name: node, bandwidth_gbps: 400, latency_us: 1}, {name: leaf, bandwidth_gbps: 40, latency_us: 4}]
        generate: {nodes: 2, devices: 4, kind: H100, fanout: {leaf: 2}}
    """,
    )
    job = write(
        tmp_path,
        "job.yaml",
        """\
        name: tp4
        parallel: {tp: 4, dp: 2}
        model: {parameters: 1e9, hidden: 2048, layers: 8, seq_len: 2048}
    """,
    )
    return cluster, job


def test_place_json_and_rankfile(tmp_path: Path, small: tuple[Path, Path]) -> None:
    cluster, job = small
    res = run("place", cluster, job, "--time-limit", "2", "--output", "json")
    assert res.exit_code == 0, res.output
    result = json.loads(res.stdout)["result"]  # the PlaceResponse JSON mapping
    assert (
        result["status"] in ("SOLVE_STATUS_OPTIMAL", "SOLVE_STATUS_FEASIBLE") and len(result["mapping"]) == 8
    )
    mapping = tmp_path / "placed.json"
    mapping.write_text(res.stdout)
    rep = modeled(cluster, job, mapping)
    assert result["cost"]["step_seconds"] == pytest.approx(rep.step_seconds)
    assert result["cost"]["comm_seconds"] == pytest.approx(rep.comm_seconds)
    assert {b["strategy"] for b in result["baselines"]} >= {"first-fit", "kueue-tas", "slurm-tree"}
    for b in result["baselines"]:  # each baseline's step and exposed comm, on the same state
        assert b.get("seconds_per_step") == b.get("comm_seconds")  # the deprecated name keeps its meaning
        assert ("step_seconds" in b) == ("comm_seconds" in b)
    # never worse than a baseline on the same state (in exposed communication, the part a placement changes)
    assert all(
        b.get("comm_seconds") is None or b["comm_seconds"] >= rep.comm_seconds - 1e-12
        for b in result["baselines"]
    )
    out = tmp_path / "hosts.txt"
    res = run("place", cluster, job, "--time-limit", "2", "--output", "hostfile", "--out", out)
    assert res.exit_code == 0, res.output
    lines = out.read_text().splitlines()
    assert len(lines) == 8 and all(line.startswith("node0") for line in lines)
    # without the CPU affinity of the GPUs there is no rankfile (a slot is a CPU, not a GPU)
    res = run("place", cluster, job, "--time-limit", "2", "--output", "rankfile")
    assert res.exit_code == 2 and "is unknown, and a rankfile slot is a CPU, not a GPU" in res.stderr


def test_place_table_with_a_baseline_strategy(small: tuple[Path, Path]) -> None:
    cluster, job = small
    res = run("place", cluster, job, "--strategy", "first-fit", "--time-limit", "2")
    assert res.exit_code == 0, res.output
    assert "tp4 (8 ranks) on small" in res.stdout and "total" in res.stdout
    assert ", step " in res.stdout and "exposed comm" in res.stdout and "phases" in res.stdout
    lines = res.stdout.splitlines()
    answer = next(line for line in lines if "first-fit (answer)" in line)
    assert "x1.00" in answer
    result = json.loads(run("place", cluster, job, "--strategy", "first-fit", "--output", "json").stdout)[
        "result"
    ]
    cost = result["cost"]
    assert f"{cost['step_seconds']:.4f}" in answer and f"{cost['comm_seconds']:.4f}" in answer
    for b in result["baselines"]:  # a row per baseline with its step and exposed comm
        row = next(line for line in lines if line.strip("│ ").startswith(b["strategy"] + " "))
        assert (
            "no valid mapping" in row
            if "step_seconds" not in b
            else (f"{b['step_seconds']:.4f}" in row and f"{b['comm_seconds']:.4f}" in row)
        )


def test_place_option_errors(small: tuple[Path, Path]) -> None:
    cluster, job = small
    assert_input_error(
        run("place", cluster, job, "--output", "xml"),
        "--output: unknown value 'xml'; use one of table, json, yaml, rankfile, hostfile, slurm, torchrun",
    )
    from placement.solve import Strategy

    assert_input_error(
        run("place", cluster, job, "--strategy", "magic"),
        f"--strategy: unknown value 'magic'; use one of {', '.join(s.value for s in Strategy)}",
    )
    assert_input_error(run("place", cluster, job, "--time-limit", "0"), "--time-limit: must be > 0, got 0")


def test_place_infeasible_exits_3(tmp_path: Path, small: tuple[Path, Path]) -> None:
    cluster, job = small
    state = write(tmp_path, "s.yaml", "occupied: [{job: other, devices: [node01/gpu0]}]\n")
    res = run("place", cluster, job, "--state", state, "--time-limit", "2")
    assert res.exit_code == 3, res.output
    assert res.stderr.startswith("error: no placement satisfies the hard rules:\n  - ")
    assert "Traceback" not in res.output


def test_export_formats(tmp_path: Path, small: tuple[Path, Path]) -> None:
    cluster, _ = small
    result = tmp_path / "r.json"
    result.write_text(
        json.dumps(
            {
                "job": "x",
                "mapping": [
                    {"rank": 0, "device": "node02/gpu1"},
                    {"rank": 1, "device": "node01/gpu3"},
                    {"rank": 2, "device": "node02/gpu0"},
                ],
            }
        )
    )
    assert run("export", result, "--format", "hostfile").stdout == "node02\nnode01\nnode02\n"
    env = run("export", result, "--format", "dotenv").stdout.splitlines()
    assert env[:2] == ["# ==> rank-0.env <==", "# job x, rank 0 of 3: runs on node02, GPU 1"]
    assert "CUDA_VISIBLE_DEVICES=1" in env and "LOCAL_RANK=0" in env and "MASTER_PORT=29500" in env
    k8s = list(
        yaml.safe_load_all(
            run(
                "export",
                result,
                "--format",
                "k8s",
                "--cluster",
                cluster,
                "--image",
                "img",
                "--label",
                "leaf=example.com/leaf",
            ).stdout
        )
    )
    assert k8s[0]["spec"]["levels"] == [
        {"nodeLabel": "example.com/leaf"},
        {"nodeLabel": "kubernetes.io/hostname"},
    ]
    assert [d["spec"]["nodeSelector"] for d in k8s[2:]] == [
        {"kubernetes.io/hostname": h} for h in ("node02", "node01", "node02")
    ]
    assert json.loads(run("export", result, "--format", "json").stdout)["job"] == "x"
    assert (
        yaml.safe_load(run("export", result, "--format", "yaml").stdout)["mapping"][0]["device"]
        == "node02/gpu1"
    )
    out = tmp_path / "hosts"
    res = run("export", result, "--format", "hostfile", "--out", out)
    assert res.exit_code == 0 and out.read_text() == "node02\nnode01\nnode02\n"


def test_export_errors(tmp_path: Path, small: tuple[Path, Path]) -> None:
    cluster, _ = small
    plain = tmp_path / "m.json"
    plain.write_text(json.dumps(["node01/gpu0", "elsewhere/gpu1"]))
    assert_input_error(
        run("export", plain, "--format", "kueue"),
        "--format: --format kueue wrote a status field Kueue sets itself; use --format k8s (a Kueue "
        "Topology and per-rank Pods)",
    )
    assert_input_error(
        run("export", plain, "--format", "mpi"),
        "--format: unknown value 'mpi'; use one of json, yaml, rankfile, hostfile, slurm, torchrun, dotenv, k8s",
    )
    assert_input_error(
        run("export", plain, "--cluster", cluster),
        f"{plain}: mapping: hosts ['elsewhere'] are not in {cluster}",
    )
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"job": "x", "cluster": "y"}))
    assert_input_error(
        run("export", bad),
        f"{bad}: 2 error(s)\n  - job: keys are rank numbers\n  - cluster: keys are rank numbers",
    )
    assert_input_error(
        run("export", tmp_path / "none.json"),
        f"{tmp_path / 'none.json'}: cannot read the file: No such file or directory",
    )


def test_place_deterministic_gives_the_same_mapping(small: tuple[Path, Path]) -> None:
    cluster, job = small
    docs = []
    for _ in range(2):
        res = run(
            "place",
            cluster,
            job,
            "--time-limit",
            "0.5",
            "--deterministic",
            "--workers",
            "1",
            "--output",
            "json",
        )
        assert res.exit_code == 0, res.output
        docs.append(json.loads(res.stdout)["result"]["mapping"])
    assert docs[0] == docs[1]
