"""placement.cli through typer's CliRunner: import (nvidia-smi, slurm, k8s), evaluate, place, export, and clean
input errors: exit code 2 with the message verbatim and no traceback."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import Result
from typer.testing import CliRunner

from placement.cli import app
from placement.cost import CostReport, evaluate
from placement.io.native import cluster_from_dict, load_cluster, load_job, load_mapping
from placement.scenarios import A100_PCIE_PAIRS
from tests.conftest import EXAMPLES, FIXTURES, shared_file

GKE = "cloud.google.com/gce-topology-block,cloud.google.com/gce-topology-subblock,kubernetes.io/hostname"


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def modeled(cluster: Path, job: Path, mapping: Path) -> CostReport:
    """What placement.cost.evaluate says of the mapping: the numbers the CLI must print (the model may change)."""
    topo, static = load_cluster(cluster)
    from placement.state import ClusterState

    return evaluate(topo, static or ClusterState(), load_job(job), load_mapping(mapping, topo))


def assert_input_error(res: Result, message: str) -> None:
    """Exit code 2, the whole message on stderr after `error: `, nothing else, and no traceback."""
    assert res.exit_code == 2, res.output
    assert res.stderr == f"error: {message}\n"
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)  # not an escaped exception


@pytest.fixture
def example() -> tuple[Path, Path]:
    cluster, job = EXAMPLES / "dgx-h100-4node.yaml", EXAMPLES / "tp8-dp4.yaml"
    if not (cluster.is_file() and job.is_file()):
        pytest.skip("examples/dgx-h100-4node.yaml or examples/tp8-dp4.yaml is not in this checkout")
    return cluster, job


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


# ---- import -------------------------------------------------------------------------------------------------------


def test_import_nvidia_smi(tmp_path: Path) -> None:
    src = shared_file(
        "topologies/nvidia_smi_topo/a100_pcie_8gpu_nvlink_bridge_pairs__nccl-tests_issue178.txt"
    )
    out = tmp_path / "node.yaml"
    res = run("import", "nvidia-smi", src, "--host", "gpu-17", "--kind", "A100", "--out", out)
    assert res.exit_code == 0, res.output
    topo, _ = load_cluster(out)
    assert topo.host_names == ("gpu-17",) and topo.num_devices == 8 and topo.kinds() == ("A100",)
    assert topo.host_types[0].matrix == tuple(tuple(r.split()) for r in A100_PCIE_PAIRS)
    assert topo.pair_tier(0, 1)[1] == "node:NV12" and topo.pair_tier(0, 7)[1] == "node:SYS"


def test_import_nvidia_smi_to_stdout() -> None:
    src = shared_file("topologies/nvidia_smi_topo/dgx1_v100_8gpu_4nic__pytorch_ddp_readme.txt")
    res = run("import", "nvidia-smi", src)
    assert res.exit_code == 0, res.output
    topo, _ = cluster_from_dict(yaml.safe_load(res.stdout))
    assert topo.num_devices == 8 and topo.pair_code(0, 3) == "NV2" and topo.pair_code(0, 5) == "SYS"


def test_import_slurm_tree_produces_a_cluster_that_loads(tmp_path: Path) -> None:
    src = shared_file("topologies/slurm/topology.conf.tree.example__slurm_man5.conf")
    out = tmp_path / "slurm.yaml"
    res = run(
        "import",
        "slurm",
        src,
        "--levels",
        "leaf,spine",
        "--tier",
        "leaf=100:3",
        "--gpus-per-node",
        "4",
        "--out",
        out,
    )
    assert res.exit_code == 0, res.output
    topo, _ = load_cluster(out)
    assert topo.level_names == ("node", "leaf", "spine")
    assert topo.levels[1].tier.bandwidth_gbps == 100 and topo.levels[1].tier.latency_us == 3
    assert topo.host_names == tuple(f"dev{i}" for i in range(18)) and topo.num_devices == 72
    assert topo.domain_names[1] == ("s0", "s1", "s2") and topo.domain_names[2] == ("s3",)
    assert topo.lca_level(topo.resolve("dev5")[0], topo.resolve("dev6")[0]) == 2
    assert "note: link tiers are defaults" not in res.stderr


def test_import_k8s_gke_labels(tmp_path: Path) -> None:
    src = FIXTURES / "k8s" / "gke-a3mega-nodes.json"
    out = tmp_path / "gke.yaml"
    res = run("import", "k8s", src, "--levels", GKE, "--out", out)
    assert res.exit_code == 0, res.output
    assert "skipped 1 node(s)" in res.stderr and "note: link tiers are defaults" in res.stderr
    topo, _ = load_cluster(out)
    # block > subblock > host; two blocks, so a `cluster` level is added on top
    assert topo.level_names == ("node", "subblock", "block", "cluster")
    assert [len(n) for n in topo.domain_names] == [16, 4, 2, 1]
    assert topo.num_devices == 128 and topo.host_names[0] == "gke-train-a3mega-pool-6b1d2e7f-820d"
    assert topo.kinds() == ("gpu",)  # GKE nodes carry no nvidia.com/gpu.product label


def test_import_errors_are_clean() -> None:
    src = FIXTURES / "k8s" / "gke-a3mega-nodes.json"
    res = run("import", "k8s", src, "--levels", GKE, "--tier", "leaf=fast")
    assert_input_error(res, "--tier 'leaf=fast': write LEVEL=BANDWIDTH_GBPS:LATENCY_US, e.g. leaf=50:5")
    res = run("import", "k8s", src, "--levels", GKE, "--tier", "rack=10:1")
    assert_input_error(
        res, "--tier 'rack=10:1': unknown level 'rack'; levels are ['node', 'subblock', 'block', 'cluster']"
    )


# ---- evaluate -----------------------------------------------------------------------------------------------------


def test_evaluate_table_and_json(tmp_path: Path, example: tuple[Path, Path]) -> None:
    cluster, job = example
    mapping = tmp_path / "m.json"
    mapping.write_text(json.dumps([f"node{h:02d}/gpu{k}" for h in range(1, 5) for k in range(8)]))
    rep = modeled(cluster, job, mapping)
    res = run("evaluate", cluster, job, mapping)
    assert res.exit_code == 0, res.output
    head = f"tp8-dp4 on dgx-h100-4node: step {rep.step_seconds:.4f} s, exposed comm {rep.comm_seconds:.4f} s"
    assert head in res.stdout
    lines = res.stdout.splitlines()
    for name, value in (
        ("step", rep.step_seconds),
        ("exposed comm", rep.comm_seconds),
        ("total comm", rep.comm_seconds_total),
    ):
        row = next(line for line in lines if line.strip("│ ").startswith(name))
        assert f"{value:.4f}" in row, row
    assert any(line.strip("│ ").startswith("MFU") for line in lines)
    assert any(line.strip("│ ").startswith("tokens/s") for line in lines)
    assert "compute" in res.stdout and "phases" in res.stdout and "critical group" in res.stdout
    for p in rep.phases:  # one row per phase, with its tier and exposed seconds
        assert any(p.name in line and p.tier in line and f"{p.exposed_seconds:.4f}" in line for line in lines)
    assert "tp" in res.stdout and "node" in res.stdout and "leaf" in res.stdout and "total" in res.stdout
    res = run("evaluate", cluster, job, mapping, "--output", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    cost = doc["cost"]  # the EvaluateResponse JSON mapping
    assert cost["step_seconds"] == pytest.approx(rep.step_seconds)
    assert cost["comm_seconds"] == pytest.approx(rep.comm_seconds)
    assert cost["comm_seconds_total"] == pytest.approx(rep.comm_seconds_total)
    assert doc["seconds_per_step"] == pytest.approx(rep.comm_seconds)  # the deprecated name keeps its meaning
    assert {"compute_seconds", "bubble_seconds", "tokens_per_s", "mfu", "surrogate_seconds"} <= set(cost)
    assert [p["name"] for p in cost["phases"]] == [p.name for p in rep.phases]
    assert set(doc["breakdown"]["by_label_s"]) == {"tp", "dp"}
    assert doc["mapping"][9] == {"rank": 9, "device": "node02/gpu1", "host": "node02", "kind": "H100"}


def test_evaluate_prints_every_phase_and_the_compute_side(
    tmp_path: Path, example: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report with phases and compute (what the v2 model gives) goes to the table and the JSON unchanged."""
    import placement.cost
    from placement.cost import PhaseCost

    cluster, job = example
    mapping = tmp_path / "m.json"
    mapping.write_text(json.dumps([f"node{h:02d}/gpu{k}" for h in range(1, 5) for k in range(8)]))
    real = modeled(cluster, job, mapping)
    fake = CostReport(
        step_seconds=1.25,
        comm_seconds=0.125,
        comm_seconds_total=0.5,
        compute_seconds=1.0,
        bubble_seconds=0.125,
        tokens_per_s=26214.4,
        mfu=0.375,
        by_label=real.by_label,
        by_tier=real.by_tier,
        by_label_tier=real.by_label_tier,
        phases=[
            PhaseCost("tp", 0.375, 0.0625, "node:NV18", "tp[2]", "ring"),
            PhaseCost("dp", 0.125, 0.0625, "leaf", "dp[5]", "hierarchical"),
        ],
    )
    monkeypatch.setattr(placement.cost, "evaluate", lambda *a, **k: fake)
    res = run("evaluate", cluster, job, mapping)
    assert res.exit_code == 0, res.output
    assert "step 1.2500 s, exposed comm 0.1250 s, MFU 37.5%" in res.stdout
    lines = [line.strip("│ ") for line in res.stdout.splitlines()]
    assert any(line.startswith("MFU") and "37.5%" in line for line in lines)
    assert any(line.startswith("tokens/s") and "26,214" in line for line in lines)
    assert any(line.startswith("compute") and "1.0000" in line and "80.0%" in line for line in lines)
    assert any(line.startswith("pipeline bubble") and "0.1250" in line for line in lines)
    tp = next(line for line in lines if line.startswith("tp ") and "ring" in line)
    assert "node:NV18" in tp and "tp[2]" in tp and "0.3750" in tp and "0.0625" in tp
    dp = next(line for line in lines if line.startswith("dp ") and "hierarchical" in line)
    assert "leaf" in dp and "dp[5]" in dp
    cost = json.loads(run("evaluate", cluster, job, mapping, "--output", "json").stdout)["cost"]
    assert (cost["mfu"], cost["tokens_per_s"], cost["compute_seconds"]) == (0.375, 26214.4, 1.0)
    assert cost["phases"][1] == {
        "name": "dp",
        "seconds": 0.125,
        "exposed_seconds": 0.0625,
        "tier": "leaf",
        "critical": "dp[5]",
        "algorithm": "hierarchical",
    }


def test_evaluate_refuses_an_invalid_mapping(tmp_path: Path, example: tuple[Path, Path]) -> None:
    cluster, job = example
    mapping = write(tmp_path, "m.yaml", "[node01/gpu0, node01/gpu0]\n")
    res = run("evaluate", cluster, job, mapping)
    assert_input_error(
        res, "the mapping breaks 1 hard rule(s):\n  - [rank-count] the mapping places 2 ranks; the job has 32"
    )
    mapping.write_text(json.dumps([f"node{h:02d}/gpu{k}" for h in range(1, 5) for k in range(8)]))
    assert_input_error(
        run("evaluate", cluster, job, mapping, "--output", "xml"),
        "--output: unknown value 'xml'; use table or json",
    )


def test_evaluate_with_a_state_occupied_by_the_job_itself(tmp_path: Path, example: tuple[Path, Path]) -> None:
    cluster, job = example
    state = write(tmp_path, "s.yaml", "occupied: [{job: tp8-dp4, devices: [node01, node02]}]\n")
    mapping = write(
        tmp_path, "m.json", json.dumps({str(r): f"node{r // 8 + 1:02d}/gpu{r % 8}" for r in range(32)})
    )
    res = run("evaluate", cluster, job, mapping, "--state", state, "--output", "json")
    assert res.exit_code == 0, res.output
    other = write(tmp_path, "o.yaml", "occupied: [{job: other, devices: [node02/gpu7]}]\n")
    res = run("evaluate", cluster, job, mapping, "--state", other)
    assert_input_error(
        res,
        "the mapping breaks 1 hard rule(s):\n"
        "  - [occupied] rank 15: device node02/gpu7 is occupied by job 'other'",
    )


# ---- place --------------------------------------------------------------------------------------------------------


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


# ---- export -------------------------------------------------------------------------------------------------------


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
        f"{bad}: 2 error(s)\n  - mapping.job: keys are rank numbers\n  - mapping.cluster: keys are rank numbers",
    )
    assert_input_error(
        run("export", tmp_path / "none.json"),
        f"{tmp_path / 'none.json'}: cannot read the file: No such file or directory",
    )


# ---- input errors, verbatim ---------------------------------------------------------------------------------------


def test_cluster_errors_verbatim(tmp_path: Path, example: tuple[Path, Path]) -> None:
    _, job = example
    mapping = write(tmp_path, "m.json", "[]")
    fan = write(
        tmp_path,
        "fan.yaml",
        """\
        levels: [{name: node, bandwidth_gbps: 450}, {name: leaf, bandwidth_gbps: 50}, {name: spine, bandwidth_gbps: 25}]
        generate: {nodes: 4, devices: 8, fanout: {leaf: 0}}
    """,
    )
    assert_input_error(
        run("evaluate", fan, job, mapping), f"{fan}: generate.fanout.leaf: must be >= 1, got 0"
    )
    neg = write(
        tmp_path,
        "neg.yaml",
        """\
        levels: [{name: node, bandwidth_gbps: 450}, {name: leaf, bandwidth_gbps: -50}]
        hosts: [{name: a, devices: 8}]
    """,
    )
    assert_input_error(
        run("evaluate", neg, job, mapping), f"{neg}: levels[1].bandwidth_gbps: must be > 0, got -50"
    )
    twice = write(
        tmp_path,
        "twice.yaml",
        """\
        levels: [{name: node, bandwidth_gbps: 450}, {name: leaf, bandwidth_gbps: 50}]
        hosts: [{name: gpu-a, devices: 8}, {name: gpu-a, devices: 8}]
    """,
    )
    assert_input_error(
        run("place", twice, job), f"{twice}: hosts[1].name: host 'gpu-a' is listed twice (first at hosts[0])"
    )
    several = write(
        tmp_path,
        "several.yaml",
        """\
        levels: [{name: node, bandwidth_gbps: 0}, {name: leaf, bandwidth_gbps: -50}]
        generate: {nodes: 4, devices: 8, fanout: {leaf: 0}}
    """,
    )
    assert_input_error(
        run("place", several, job),
        f"{several}: 3 error(s)\n"
        "  - levels[0].bandwidth_gbps: must be > 0, got 0\n"
        "  - levels[1].bandwidth_gbps: must be > 0, got -50\n"
        "  - generate.fanout.leaf: must be >= 1, got 0",
    )


def test_state_error_verbatim(tmp_path: Path, example: tuple[Path, Path]) -> None:
    cluster, job = example
    state = write(
        tmp_path, "s.yaml", "occupied: [{job: a, devices: [node01]}, {job: b, devices: [node01/gpu2]}]\n"
    )
    mapping = write(tmp_path, "m.json", "[]")
    assert_input_error(
        run("evaluate", cluster, job, mapping, "--state", state),
        f"{state}: occupied[1].devices[0]: node01/gpu2 is already occupied by job 'a'",
    )


def test_job_errors_verbatim(tmp_path: Path, example: tuple[Path, Path]) -> None:
    cluster, _ = example
    ranks = write(
        tmp_path,
        "ranks.yaml",
        """\
        ranks: 16
        parallel: {tp: 8, dp: 4}
        model: {parameters: 7e9, hidden: 4096, layers: 32, seq_len: 4096}
    """,
    )
    assert_input_error(
        run("place", cluster, ranks), f"{ranks}: ranks: 16 does not equal tp*cp*ep*dp*pp = 8*1*1*4*1 = 32"
    )
    order = write(
        tmp_path,
        "order.yaml",
        """\
        parallel: {tp: 8, dp: 4, order: tp-cp-dp-pp}
        model: {parameters: 7e9, hidden: 4096, layers: 32, seq_len: 4096}
    """,
    )
    assert_input_error(
        run("place", cluster, order),
        f"{order}: parallel.order: 'tp-cp-dp-pp' misses ep; it must name each of tp, cp, ep, dp, pp "
        "once, e.g. 'tp-cp-ep-dp-pp'",
    )


def test_mapping_error_verbatim(tmp_path: Path, example: tuple[Path, Path]) -> None:
    cluster, job = example
    mapping = write(tmp_path, "m.json", json.dumps({"mapping": ["node01/gpu0", "node09/gpu0"]}))
    assert_input_error(
        run("evaluate", cluster, job, mapping),
        f"{mapping}: mapping[1]: unknown device 'node09/gpu0'; devices are named host/gpuK, e.g. node01/gpu0",
    )


def test_missing_and_malformed_files(tmp_path: Path, example: tuple[Path, Path]) -> None:
    _, job = example
    assert_input_error(
        run("place", tmp_path / "no.yaml", job),
        f"{tmp_path / 'no.yaml'}: cannot read the file: No such file or directory",
    )
    broken = write(tmp_path, "broken.yaml", "levels: [\n")
    res = run("place", broken, job)
    assert (
        res.exit_code == 2
        and res.stderr.startswith(f"error: {broken}: line ")
        and "invalid YAML" in res.stderr
    )
    assert "Traceback" not in res.output


def test_readme_showcase_numbers(example: tuple[Path, Path]) -> None:
    cluster, job = example
    contiguous, split = EXAMPLES / "mapping-tp8-contiguous.json", EXAMPLES / "mapping-tp8-split.json"
    if not (contiguous.is_file() and split.is_file()):
        pytest.skip("examples/mapping-tp8-*.json are not in this checkout")
    a = json.loads(run("evaluate", cluster, job, contiguous, "--output", "json").stdout)["cost"]
    b = json.loads(run("evaluate", cluster, job, split, "--output", "json").stdout)["cost"]
    for got, mapping in ((a, contiguous), (b, split)):  # the numbers README.md quotes come from the model
        rep = modeled(cluster, job, mapping)
        assert got["step_seconds"] == pytest.approx(rep.step_seconds)
        assert got["comm_seconds"] == pytest.approx(rep.comm_seconds)
    # TP groups split over two nodes pay the NIC: slower in exposed comm and in the step
    assert b["comm_seconds"] > a["comm_seconds"] and b["step_seconds"] > a["step_seconds"]


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
