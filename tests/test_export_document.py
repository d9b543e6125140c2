"""placement.io.export's result document and `seats_from_document` (kind, affinity, baseline costs, plain
mappings and their errors), the json/yaml and retired formats, and the `placement export` command."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
from placement.errors import InputError
from placement.io.export import (
    FORMATS,
    Seat,
    baseline_costs,
    export,
    launch_seats,
    result_document,
    seats_from_document,
)
from placement.io.native import cluster_from_dict, job_from_dict
from placement.model.state import ClusterState
from tests.conftest import ROOT
from tests.support_export import S0, S1, SEATS, affinity_topology

# ---- result document and seats -----------------------------------------------------------------------------------


def test_result_document_carries_kind_and_affinity_and_round_trips() -> None:
    topo = affinity_topology()
    job = job_from_dict({"name": "job", "ranks": 3, "groups": [{"members": [0, 1, 2], "bytes": 1e6}]})
    mapping = [7, 1, 6]
    rep = evaluate(topo, ClusterState(), job, mapping)
    doc = result_document(topo, job.name, mapping, rep, status="OPTIMAL")
    assert doc["job"] == "job" and doc["cluster"] == topo.name and doc["status"] == "OPTIMAL"
    assert doc["cost"]["step_seconds"] == rep.step_seconds and doc["cost"]["comm_seconds"] == rep.comm_seconds
    assert doc["cost"]["seconds_per_step"] == rep.comm_seconds  # the deprecated v1 name
    assert "baseline_costs" not in doc
    assert doc["mapping"] == [  # b/gpu3 has no known affinity: the keys are left out, not guessed
        {"rank": 0, "device": "b/gpu3", "host": "b", "local_index": 3, "kind": "H100"},
        {
            "rank": 1,
            "device": "a/gpu1",
            "host": "a",
            "local_index": 1,
            "kind": "H100",
            "cpus": "0-3",
            "numa_node": 0,
        },
        {
            "rank": 2,
            "device": "b/gpu2",
            "host": "b",
            "local_index": 2,
            "kind": "H100",
            "cpus": "4-7",
            "numa_node": 1,
        },
    ]
    back = json.loads(json.dumps(doc))
    assert seats_from_document(back) == [("b", 3), ("a", 1), ("b", 2)]
    assert launch_seats(seats_from_document(back), back) == [
        Seat(0, "b", 3, "H100"),
        Seat(1, "a", 1, "H100", "0-3", 0),
        Seat(2, "b", 2, "H100", "4-7", 1),
    ]
    # a plain mapping gains kind and affinity from the cluster
    assert launch_seats([("b", 2)], None, topo) == [Seat(0, "b", 2, "H100", "4-7", 1)]


def test_cluster_affinity_lists_are_checked() -> None:
    base = {"levels": [{"name": "node", "bandwidth_gbps": 450}], "hosts": [{"name": "a", "node_type": "t"}]}
    with pytest.raises(InputError) as e:
        cluster_from_dict(
            {
                **base,
                "node_types": [
                    {"name": "t", "devices": 2, "cpu_affinity": ["0-3", "x"], "numa_affinity": [0, -2, 2]}
                ],
            },
            "c.yaml",
        )
    text = str(e.value)
    assert "node_types[0].cpu_affinity[1]: 'x' is not a CPU list like 0-47,96-143" in text
    assert (
        "node_types[0].numa_affinity: must be NUMA node numbers (>= 0), or null / -1 for unknown, got [0, -2, 2]"
        in text
    )


def test_baseline_costs_add_the_answers_compute_to_each_baselines_exposed_comm() -> None:
    rep = CostReport(step_seconds=2.0, comm_seconds=0.5, comm_seconds_total=0.9, compute_seconds=1.5)
    costs = baseline_costs(rep, {"first-fit": 0.8, "kueue-tas": None})
    assert costs == {
        "first-fit": {"step_seconds": pytest.approx(2.3), "comm_seconds": 0.8},
        "kueue-tas": {"step_seconds": None, "comm_seconds": None},
    }
    own = CostReport(step_seconds=2.6, comm_seconds=0.8)
    assert baseline_costs(rep, {"first-fit": 0.8}, {"first-fit": own}) == {
        "first-fit": {"step_seconds": 2.6, "comm_seconds": 0.8}
    }
    doc = result_document(
        affinity_topology(), "j", [0], rep, baselines={"first-fit": 0.8}, baseline_reports={"first-fit": own}
    )
    assert doc["baseline_costs"]["first-fit"]["step_seconds"] == 2.6 and "baseline_reports" not in doc


def test_seats_from_plain_mappings() -> None:
    assert seats_from_document(["x/gpu1", "y.example.com/gpu12"]) == [("x", 1), ("y.example.com", 12)]
    assert seats_from_document({"1": "x/gpu0", "0": "x/gpu1"}) == [("x", 1), ("x", 0)]
    assert seats_from_document(
        {"mapping": [{"rank": 1, "device": "x/gpu0"}, {"rank": 0, "device": "x/gpu1"}]}
    ) == [("x", 1), ("x", 0)]


def _seat_errors(doc: Any) -> str:
    with pytest.raises(InputError) as info:
        seats_from_document(doc, "r.json")
    return str(info.value)


def test_seats_from_document_errors() -> None:
    assert _seat_errors("x/gpu0") == "r.json: mapping: expected a list of devices or a result document"
    assert _seat_errors(["x/gpu0", "x/cpu1", "gpu2", 7]) == (
        "r.json: 3 error(s)\n"
        "  - mapping[1]: 'x/cpu1' is not a device id of the form host/gpuK\n"
        "  - mapping[2]: 'gpu2' is not a device id of the form host/gpuK\n"
        "  - mapping[3]: '7' is not a device id of the form host/gpuK"
    )
    assert _seat_errors({"0": "x/gpu0", "2": "x/gpu1"}) == "r.json: mapping: ranks [1] have no device"
    assert _seat_errors({"mapping": [{"rank": "first", "device": "x/gpu0"}]}) == (
        "r.json: mapping[0].rank: must be a rank number, got 'first'"
    )
    assert _seat_errors([{"rank": 0, "device": "x/gpu0"}, {"rank": 0, "device": "x/gpu1"}]) == (
        "r.json: mapping[1].device: rank 0 is mapped twice"
    )
    assert _seat_errors(["x/gpu0", "x/gpu1", "x/gpu0"]) == (
        "r.json: mapping[2]: x/gpu0 holds ranks 0 and 2; one rank per device"
    )


def test_json_yaml_and_retired_formats() -> None:
    assert json.loads(export("json", [("b", 3), ("b", 1)])) == ["b/gpu3", "b/gpu1"]
    assert yaml.safe_load(export("yaml", [("b", 3)])) == ["b/gpu3"]
    assert json.loads(export("json", SEATS, document={"job": "x"})) == {"job": "x"}
    assert FORMATS == ("json", "yaml", "rankfile", "hostfile", "slurm", "torchrun", "dotenv", "k8s")
    with pytest.raises(ValueError, match="--format env wrote lines no tool reads; use --format dotenv"):
        export("env", SEATS)
    with pytest.raises(
        ValueError, match="--format kueue wrote a status field Kueue sets itself; use --format k8s"
    ):
        export("kueue", SEATS)
    with pytest.raises(ValueError, match="unknown format 'mpi'"):
        export("mpi", SEATS)


# ---- the command line ---------------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "placement.cli.app", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_export_command_writes_dotenv_directories_and_executable_scripts(tmp_path: Path) -> None:
    result = tmp_path / "r.json"
    result.write_text(
        json.dumps(
            {
                "job": "x",
                "mapping": [{"rank": 0, "device": "node02/gpu1"}, {"rank": 1, "device": "node01/gpu3"}],
            }
        )
    )
    res = _cli("export", str(result), "--format", "dotenv", "--out", str(tmp_path / "env"))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (tmp_path / "env").iterdir()) == ["rank-0.env", "rank-1.env"]
    res = _cli("export", str(result), "--format", "slurm", "--out", str(tmp_path / "job.sh"))
    assert res.returncode == 0 and os.access(tmp_path / "job.sh", os.X_OK)
    # the result relative to the directory the export ran in (where sbatch runs), the placement that wrote it
    rel = os.path.relpath(result, Path.cwd())
    assert f"bind --placement {shlex.quote(rel)} --" in (tmp_path / "job.sh").read_text()
    assert f"{shlex.quote(sys.executable)} -m placement.cli.app bind" in (tmp_path / "job.sh").read_text()
    res = _cli("export", str(result), "--format", "rankfile")
    assert (
        res.returncode == 2
        and "CPU affinity of node01/gpu3, node02/gpu1" in res.stderr
        and "Traceback" not in res.stderr
    )
    res = _cli("export", str(result), "--format", "env")
    assert res.returncode == 2 and "use --format dotenv" in res.stderr


def test_nvidia_smi_affinity_reaches_the_rankfile(tmp_path: Path) -> None:
    """`import nvidia-smi` keeps the CPU/NUMA Affinity columns; a placement on that node carries them to the
    result and the rankfile."""
    from tests.conftest import shared_file

    topo_txt = shared_file("topologies/nvidia_smi_topo/hgx_h100_8gpu_8nic_rail_pix__sglang_issue30401.txt")
    cluster = tmp_path / "node.yaml"
    res = _cli(
        "import", "nvidia-smi", str(topo_txt), "--host", "node02", "--kind", "H100", "--out", str(cluster)
    )
    assert res.returncode == 0, res.stderr
    nt = yaml.safe_load(cluster.read_text())["node_types"][0]
    assert nt["cpu_affinity"] == [S0] * 4 + [S1] * 4 and nt["numa_affinity"] == [0, 0, 0, 0, 1, 1, 1, 1]
    result = tmp_path / "r.json"
    result.write_text(json.dumps(["node02/gpu0", "node02/gpu4", "node02/gpu5"]))
    res = _cli("export", str(result), "--format", "rankfile", "--cluster", str(cluster))
    assert res.returncode == 0, res.stderr
    assert [line for line in res.stdout.splitlines() if line.startswith("rank")] == [
        f"rank 0=node02 slot={S0}",
        f"rank 1=node02 slot={S1}",
        f"rank 2=node02 slot={S1}",
    ]
