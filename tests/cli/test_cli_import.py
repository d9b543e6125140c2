"""`placement import` through typer's CliRunner: nvidia-smi (to a file and to stdout), a Slurm topology.conf and
Kubernetes node labels give clusters that load; bad --tier values are clean input errors."""

from __future__ import annotations

from pathlib import Path

import yaml

from placement.io.native import cluster_from_dict, load_cluster
from placement.sim.scenarios import A100_PCIE_PAIRS
from tests.conftest import FIXTURES, shared_file
from tests.support_cli import assert_input_error, run

GKE = "cloud.google.com/gce-topology-block,cloud.google.com/gce-topology-subblock,kubernetes.io/hostname"


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
    assert_input_error(
        res,
        "--tier 'leaf=fast': write LEVEL=BANDWIDTH_GBPS:LATENCY_US[:OVERSUBSCRIPTION], e.g. leaf=50:5 or spine=50:7:2",
    )
    res = run("import", "k8s", src, "--levels", GKE, "--tier", "rack=10:1")
    assert_input_error(
        res, "--tier 'rack=10:1': unknown level 'rack'; levels are ['node', 'subblock', 'block', 'cluster']"
    )


def test_import_topograph_keeps_the_nvlink_domain(tmp_path: Path) -> None:
    src = shared_file("topologies/cluster_fabric/nvidia_topograph/tests/models/medium.yaml")
    out = tmp_path / "medium.yaml"
    res = run("import", "topograph", src, "--gpus-per-node", "4", "--out", out)
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(out.read_text())
    # the NVL block is an NVLink domain in the written file and in the topology it loads as
    assert [(lv["name"], lv.get("nvlink", False)) for lv in doc["levels"]][:2] == [
        ("node", False),
        ("nvl", True),
    ]
    assert [lv.nvlink for lv in load_cluster(out)[0].levels][:2] == [False, True]
