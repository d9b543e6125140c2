"""placement.io.export: each launch format against what its tool documents (OpenMPI rankfile syntax and mpirun
itself, SLURM_HOSTFILE order and the Slurm script run with a stand-in srun, torchrun arguments parsed by
torch.distributed.run's own parser and by a replica of it, dotenv parsed by python-dotenv, Kubernetes objects
against the OpenAPI schema), the result document and `seats_from_document`."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from placement.cost import CostReport, evaluate
from placement.errors import InputError
from placement.io.export import (
    FORMATS,
    ExportOptions,
    Seat,
    baseline_costs,
    export,
    export_files,
    launch_seats,
    result_document,
    seats_from_document,
)
from placement.io.export.torchrun import torchrun_argvs
from placement.io.native import cluster_from_dict, job_from_dict
from placement.state import ClusterState
from placement.topology import Topology

ROOT = Path(__file__).resolve().parents[1]
S0, S1 = "0-47,96-143", "48-95,144-191"
# the case: node02 has GPUs 0, 4, 5, 6 free; rank 1 (local rank 1) needs GPU 4, on the other socket
SEATS = [
    Seat(0, "node02", 0, "H100", S0, 0),
    Seat(1, "node02", 4, "H100", S1, 1),
    Seat(2, "node02", 5, "H100", S1, 1),
    Seat(3, "node02", 6, "H100", S1, 1),
    Seat(4, "node07", 2, "H100", S0, 0),
    Seat(5, "node07", 3, "H100", S0, 0),
]
OPTS = ExportOptions(job="j", placement_path="/shared/result.json")


def _topo() -> Topology:
    doc = {
        "levels": [
            {"name": "node", "bandwidth_gbps": 450},
            {"name": "leaf", "bandwidth_gbps": 50},
            {"name": "spine", "bandwidth_gbps": 25},
        ],
        "node_types": [
            {
                "name": "t",
                "devices": 4,
                "kind": "H100",
                "cpu_affinity": ["0-3", "0-3", "4-7", None],
                "numa_affinity": [0, 0, 1, None],
            }
        ],
        "hosts": [
            {"name": "a", "node_type": "t", "domains": {"leaf": "l1"}},
            {"name": "b", "node_type": "t", "domains": {"leaf": "l2"}},
        ],
    }
    return cluster_from_dict(doc)[0]


# ---- result document and seats -----------------------------------------------------------------------------------


def test_result_document_carries_kind_and_affinity_and_round_trips() -> None:
    topo = _topo()
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
        _topo(), "j", [0], rep, baselines={"first-fit": 0.8}, baseline_reports={"first-fit": own}
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


# ---- OpenMPI rankfile ---------------------------------------------------------------------------------------------

# mpirun(1), "Rankfiles": `rank <N>=<hostname> slot=<slot list>`, a slot list of cores or socket:core ranges
_RANKFILE_LINE = re.compile(
    r"rank (\d+)=([A-Za-z0-9_.-]+) slot=((?:\d+:)?\d+(?:-\d+)?(?:,(?:\d+:)?\d+(?:-\d+)?)*)"
)


def test_rankfile_binds_each_rank_to_its_gpus_cpus() -> None:
    text = export("rankfile", SEATS, options=OPTS)
    body = [line for line in text.splitlines() if not line.startswith("#")]
    parsed = [_RANKFILE_LINE.fullmatch(line) for line in body]
    assert all(parsed), body
    assert [(int(m[1]), m[2], m[3]) for m in parsed if m] == [
        (0, "node02", S0),
        (1, "node02", S1),
        (2, "node02", S1),
        (3, "node02", S1),
        (4, "node07", S0),
        (5, "node07", S0),
    ]
    # the GPU index is nowhere a slot: GPU 4 (rank 1) gets socket 1's CPUs, not core 4
    assert "slot=4\n" not in text
    assert (
        "mpirun --mca rmaps_rank_file_physical 1 --rankfile RANKFILE placement bind --placement /shared/result.json --"
        in text
    )


def test_rankfile_refuses_unknown_cpu_affinity() -> None:
    with pytest.raises(
        InputError,
        match=r"the CPU affinity of node09/gpu4 \(ranks 1\) is unknown, and a rankfile slot is a CPU",
    ):
        export("rankfile", [Seat(0, "node09", 1, "H100", "0-3", 0), Seat(1, "node09", 4, "H100")])


def _mpirun() -> str:
    path = shutil.which("mpirun")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mpirun is not installed (CI installs openmpi-bin with .ci/openmpi.sh)")
        pytest.skip("mpirun is not installed (apt-get install openmpi-bin)")
    return path


def test_mpirun_accepts_the_rankfile_and_bind_gives_each_rank_its_gpu(tmp_path: Path) -> None:
    """OpenMPI itself reads the exported rankfile; each rank then runs `placement bind -- env`."""
    mpirun = _mpirun()
    host = socket.gethostname()
    cpus = sorted(os.sched_getaffinity(0))
    first, last = str(cpus[0]), str(cpus[-1])
    result = tmp_path / "result.json"
    result.write_text(
        json.dumps(
            {
                "job": "mpi",
                "mapping": [
                    {"rank": 0, "device": f"{host}/gpu5", "kind": "H100", "cpus": first},
                    {"rank": 1, "device": f"{host}/gpu2", "kind": "H100", "cpus": last},
                ],
            }
        )
    )
    seats = launch_seats(seats_from_document(json.loads(result.read_text())), json.loads(result.read_text()))
    bind = [sys.executable, "-m", "placement.cli"]
    rankfile = tmp_path / "rankfile"
    rankfile.write_text(
        export("rankfile", seats, options=ExportOptions(job="mpi", placement_path=str(result)))
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "SLURM")) and k != "RANK"}
    env.update(PYTHONPATH=str(ROOT), OMPI_MCA_plm_rsh_agent="false")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    cmd = [
        mpirun,
        *root,
        "--mca",
        "rmaps_rank_file_physical",
        "1",
        "--rankfile",
        str(rankfile),
        "--oversubscribe",
        *bind,
        "bind",
        "--placement",
        str(result),
        "--",
        "sh",
        "-c",
        'echo "rank=$OMPI_COMM_WORLD_RANK cvd=$CUDA_VISIBLE_DEVICES local=$LOCAL_RANK cpus=$(taskset -pc $$ | sed "s/.*: //")"',
    ]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = sorted(line for line in res.stdout.splitlines() if line.startswith("rank="))
    assert lines == [f"rank=0 cvd=5 local=0 cpus={first}", f"rank=1 cvd=2 local=0 cpus={last}"], (
        res.stdout + res.stderr
    )


# ---- Slurm --------------------------------------------------------------------------------------------------------


def test_slurm_hostfile_has_one_line_per_rank_in_rank_order() -> None:
    assert export("hostfile", SEATS) == "node02\n" * 4 + "node07\n" * 2


def test_slurm_script_resources_and_srun_line() -> None:
    text = export("slurm", SEATS, options=OPTS)
    sbatch = dict(
        line[len("#SBATCH ") :].split("=", 1) for line in text.splitlines() if line.startswith("#SBATCH ")
    )
    assert sbatch == {
        "--job-name": "j",
        "--nodes": "2",
        "--ntasks": "6",
        "--nodelist": "node02,node07",
        "--gpus-per-node": "4",
    }
    assert "#   node02: ranks 0-3, GPUs 0,4,5,6" in text and "#   node07: ranks 4-5, GPUs 2,3" in text
    assert "# --gpus-per-node=4 on every node" in text and "Slurm picks WHICH GPUs" in text
    more = export("slurm", SEATS, options=ExportOptions(job="j", gpus_per_node=8))
    assert "#SBATCH --gpus-per-node=8" in more and "--gpus-per-node=8 --gpu-bind=none" in more
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_slurm_script_runs_srun_with_the_hostfile_in_rank_order(tmp_path: Path) -> None:
    """The script as `bash job.sh CMD` would run it, with a stand-in srun that reports what it was given."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    script = tmp_path / "job.sh"
    script.write_text(export("slurm", SEATS, options=OPTS))
    fake = tmp_path / "bin" / "srun"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/sh\necho "hostfile:"; cat "$SLURM_HOSTFILE"; echo "args:"; for a in "$@"; do echo "$a"; done\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "TMPDIR": str(tmp_path)}
    res = subprocess.run(
        ["bash", str(script), "python", "train.py", "--lr", "1e-4"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    hosts, args = out[1 : out.index("args:")], out[out.index("args:") + 1 :]
    assert hosts == [s.host for s in SEATS]
    # no --nodelist on srun: Slurm 22.05 then refuses more tasks than listed nodes; the hostfile names the nodes
    assert args == [
        "--ntasks=6",
        "--nodes=2",
        "--distribution=arbitrary",
        "--gpus-per-node=4",
        "--gpu-bind=none",
        "placement",
        "bind",
        "--placement",
        "/shared/result.json",
        "--",
        "python",
        "train.py",
        "--lr",
        "1e-4",
    ]
    assert not list(tmp_path.glob("placement-hosts.*"))  # the temporary hostfile is removed
    res = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "usage: sbatch" in res.stderr
    # without a placement path (place --output slurm) the script needs PLACEMENT_FILE, and says so
    script.write_text(export("slurm", SEATS, options=ExportOptions(job="j")))
    env.pop("PLACEMENT_FILE", None)
    res = subprocess.run(["bash", str(script), "true"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "set PLACEMENT_FILE to the placement result" in res.stderr
    res = subprocess.run(
        ["bash", str(script), "true"],
        env={**env, "PLACEMENT_FILE": "/r.json"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and res.stdout.splitlines()[-2:] == ["--", "true"]


# ---- torchrun -----------------------------------------------------------------------------------------------------


def _torchrun_parser() -> argparse.ArgumentParser:
    """The options of torch.distributed.run.get_args_parser (PyTorch 2.x) that a launch line uses, with their
    names, aliases, types and defaults as torch declares them, and its two positionals (the script and REMAINDER).
    It fails on any option torch would not accept, so the check holds where torch is absent; where torch is
    importable (the dev extra installs it), the same lines also go through torch's own parser."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--nnodes", type=str, default="1:1")
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=str, default="1")
    p.add_argument("--rdzv-backend", "--rdzv_backend", type=str, default="static")
    p.add_argument("--rdzv-endpoint", "--rdzv_endpoint", type=str, default="")
    p.add_argument("--rdzv-id", "--rdzv_id", type=str, default="none")
    p.add_argument("--standalone", action="store_true")
    p.add_argument("--max-restarts", "--max_restarts", type=int, default=0)
    p.add_argument("-m", "--module", action="store_true")
    p.add_argument("--no-python", "--no_python", action="store_true")
    p.add_argument("--node-rank", "--node_rank", type=int, default=0)
    p.add_argument("--master-addr", "--master_addr", type=str, default="127.0.0.1")
    p.add_argument("--master-port", "--master_port", type=int, default=29500)
    p.add_argument("training_script", type=str)
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return p


def _real_torchrun_parser() -> argparse.ArgumentParser:
    """torch.distributed.run's own parser; skips without torch, except under CI=true (the dev extra has torch)."""
    try:
        from torch.distributed.run import get_args_parser

        return get_args_parser()
    except ImportError as e:
        why = f"torch is not importable ({e}): only the replica parser checks the torchrun lines"
    if os.environ.get("CI") == "true":
        pytest.fail(why + "; CI=true, so this fails instead of skipping", pytrace=False)
    pytest.skip(why)


@pytest.mark.parametrize("parser", ["replica", "torch"])
def test_torchrun_commands_parse_as_torchrun_arguments(parser: str) -> None:
    make = _torchrun_parser if parser == "replica" else _real_torchrun_parser
    cmds = torchrun_argvs(
        SEATS, ExportOptions(job="j", placement_path="/shared/result.json", master_port=29600)
    )
    assert [h for h, _ in cmds] == ["node02", "node07"]
    base = 0
    for k, (host, argv) in enumerate(cmds):
        assert argv[0] == "torchrun"
        a = make().parse_args([*argv[1:], "python", "train.py"])
        assert (a.nnodes, a.node_rank, a.master_addr, a.master_port, a.no_python) == (
            "2",
            k,
            "node02",
            29600,
            True,
        )
        assert (
            a.rdzv_backend == "static"
        )  # so --node-rank decides the block: ranks node_rank*... in node order
        n = int(a.nproc_per_node)
        assert [s.rank for s in SEATS if s.host == host] == list(range(base, base + n))
        base += n
        assert a.training_script == "placement"
        assert a.training_script_args == [
            "bind",
            "--placement",
            "/shared/result.json",
            "--",
            "python",
            "train.py",
        ]
    assert base == len(SEATS)


def test_torchrun_script_runs_the_line_of_its_host(tmp_path: Path) -> None:
    script = tmp_path / "torchrun.sh"
    script.write_text(export("torchrun", SEATS, options=OPTS))
    fake = tmp_path / "bin" / "torchrun"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "PLACEMENT_HOST": "node07"}
    res = subprocess.run(
        ["sh", str(script), "python", "train.py"], env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    a = _torchrun_parser().parse_args(res.stdout.splitlines())
    assert (a.node_rank, a.nproc_per_node, a.training_script_args[-2:]) == (1, "2", ["python", "train.py"])
    res = subprocess.run(
        ["sh", str(script), "x"],
        env={**env, "PLACEMENT_HOST": "node99"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "host node99 runs no rank of job j (hosts: node02 node07)" in res.stderr


def test_torchrun_refuses_ranks_that_are_not_host_blocks() -> None:
    split = [SEATS[0], SEATS[4], SEATS[1]]
    split = [Seat(r, s.host, s.index, s.kind) for r, s in enumerate(split)]
    with pytest.raises(
        InputError,
        match="rank 2 is on node02, but node02's block of ranks 0-0 ended at rank 0 "
        r"\(node07 came between\); torchrun numbers ranks host by host",
    ):
        export("torchrun", split)


# ---- dotenv -------------------------------------------------------------------------------------------------------


def test_dotenv_files_parse_with_python_dotenv() -> None:
    from dotenv import dotenv_values

    files = export_files("dotenv", SEATS, options=ExportOptions(job="j", master_port=29511))
    assert sorted(files) == sorted(f"rank-{r}.env" for r in range(6))
    for s in SEATS:
        assert dotenv_values(stream=__import__("io").StringIO(files[f"rank-{s.rank}.env"])) == {
            "MASTER_ADDR": "node02",
            "MASTER_PORT": "29511",
            "WORLD_SIZE": "6",
            "RANK": str(s.rank),
            "LOCAL_RANK": "0",
            "CUDA_VISIBLE_DEVICES": str(s.index),
        }
    amd = export_files("dotenv", [Seat(0, "mi", 6, "MI300X")])["rank-0.env"]
    values = dotenv_values(stream=__import__("io").StringIO(amd))
    assert (
        values["ROCR_VISIBLE_DEVICES"],
        values["HIP_VISIBLE_DEVICES"],
        values["CUDA_VISIBLE_DEVICES"],
    ) == ("6", "0", "0")
    # the stdout form: every file after a marker line
    assert export("dotenv", SEATS[:1], options=OPTS).startswith(
        "# ==> rank-0.env <==\n# job j, rank 0 of 1: runs on node02, GPU 0\n"
    )


# ---- Kubernetes ---------------------------------------------------------------------------------------------------

# Kueue's Topology CRD (config/components/crd/bases/kueue.x-k8s.io_topologies.yaml in kubernetes-sigs/kueue): the
# OpenAPI schema of `spec`, transcribed; its CEL rules (unique levels, hostname only last) are checked below.
_TOPOLOGY_SPEC = {
    "type": "object",
    "required": ["levels"],
    "additionalProperties": False,
    "properties": {
        "levels": {
            "type": "array",
            "minItems": 1,
            "maxItems": 8,
            "items": {
                "type": "object",
                "required": ["nodeLabel"],
                "additionalProperties": False,
                "properties": {
                    "nodeLabel": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 316,
                        "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                    }
                },
            },
        }
    },
}
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def test_k8s_objects_validate_against_the_kubernetes_and_kueue_schemas() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    kv = pytest.importorskip("kubernetes_validate")
    topo = _topo()
    seats = launch_seats([("b", 3), ("a", 1), ("b", 2)], None, topo)
    opts = ExportOptions(
        job="Llama 13B/tp8",
        image="nvcr.io/nvidia/pytorch:24.05-py3",
        command=("python", "train.py"),
        level_labels={"leaf": "network.example.com/leaf", "spine": "network.example.com/spine"},
    )
    docs = list(yaml.safe_load_all(export("k8s", seats, topology=topo, options=opts)))
    assert [d["kind"] for d in docs] == ["Topology", "Service", "Pod", "Pod", "Pod"]
    top = docs[0]
    assert top["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    jsonschema.validate(top["spec"], _TOPOLOGY_SPEC)
    labels = [lv["nodeLabel"] for lv in top["spec"]["levels"]]
    assert labels == ["network.example.com/spine", "network.example.com/leaf", "kubernetes.io/hostname"]
    assert len(set(labels)) == len(labels) and labels[-1] == "kubernetes.io/hostname"
    version = kv.latest_version()
    for d in docs[1:]:
        kv.validate(d, version, strict=True)  # raises on a field Kubernetes does not know or a wrong type
    for s, pod in zip(seats, docs[2:], strict=True):
        spec = pod["spec"]
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": s.host}
        assert _DNS_LABEL.fullmatch(pod["metadata"]["name"]) and _DNS_LABEL.fullmatch(spec["hostname"])
        env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
        assert env == {
            "MASTER_ADDR": "llama-13b-tp8-rank-0.llama-13b-tp8",
            "MASTER_PORT": "29500",
            "WORLD_SIZE": "3",
            "RANK": str(s.rank),
            "LOCAL_RANK": "0",
            "PLACEMENT_DEVICE": s.device,
        }
        assert spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    # the schema check has teeth: a misspelled field fails
    bad = json.loads(json.dumps(docs[2]))
    bad["spec"]["nodeSelectr"] = bad["spec"].pop("nodeSelector")
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, version, strict=True)


def test_k8s_refuses_what_a_cluster_would_not_accept() -> None:
    topo = _topo()
    seats = launch_seats([("a", 0)], None, topo)
    with pytest.raises(InputError, match="levels \\['leaf', 'spine'\\] need the node-label key"):
        export("k8s", seats, topology=topo, options=ExportOptions(image="img"))
    with pytest.raises(InputError, match="--image is required"):
        export("k8s", seats, topology=topo)
    with pytest.raises(InputError, match="'Leaf Switch' is not a node-label key"):
        export(
            "k8s",
            seats,
            topology=topo,
            options=ExportOptions(image="img", level_labels={"leaf": "Leaf Switch", "spine": "s"}),
        )
    amd = yaml.safe_load_all(export("k8s", [Seat(0, "mi", 1, "MI300X")], options=ExportOptions(image="img")))
    pod = next(d for d in amd if d["kind"] == "Pod")
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"amd.com/gpu": 1}}


# ---- the command line ---------------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "placement.cli", *args], env=env, capture_output=True, text=True, timeout=120
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
    assert f"--placement {shlex.quote(str(result.resolve()))} --" in (tmp_path / "job.sh").read_text()
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
