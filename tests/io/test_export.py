"""placement.io.export's process launchers, each against what its tool documents: OpenMPI rankfile syntax and
mpirun itself, SLURM_HOSTFILE order and the Slurm script run with a stand-in srun, torchrun arguments parsed by
torch.distributed.run's own parser and by a replica of it, and dotenv parsed by python-dotenv."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from placement.errors import InputError
from placement.io.export import ExportOptions, Seat, export, export_files, launch_seats, seats_from_document
from placement.io.export.torchrun import torchrun_argvs
from tests.conftest import ROOT
from tests.support_export import OPTS, S0, S1, SEATS

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
    bind = [sys.executable, "-m", "placement.cli.app"]
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
    per_node = Counter(s.host for s in SEATS)
    assert sorted(per_node.values()) == [2, 4]  # different counts: every node gets the largest, srun starts 6
    assert sbatch == {
        "--job-name": "j",
        "--nodes": "2",
        "--ntasks-per-node": str(max(per_node.values())),
        "--nodelist": "node02,node07",
        "--gpus-per-node": "4",
    }
    assert "--ntasks=6 " in text.splitlines()[-1]  # the step starts the planned tasks
    assert "#   node02: ranks 0-3, GPUs 0,4,5,6" in text and "#   node07: ranks 4-5, GPUs 2,3" in text
    assert "# --gpus-per-node=4 on every node" in text and "Slurm picks WHICH GPUs" in text
    more = export("slurm", SEATS, options=ExportOptions(job="j", gpus_per_node=8))
    assert "#SBATCH --gpus-per-node=8" in more and "--gpus-per-node=8 --gpu-bind=none" in more
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_slurm_script_pins_the_tasks_of_each_node() -> None:
    """The same count on every host: `--ntasks-per-node` is that count, with `--ntasks`. Without it Slurm may
    spread 8 tasks on 2 nodes as 7 + 1 (measured on a real Slurm, tests/io/test_slurm_e2e.py)."""
    seats = [Seat(r, f"node{1 + r // 4:02d}", r % 4) for r in range(8)]
    assert Counter(s.host for s in seats) == {"node01": 4, "node02": 4}
    text = export("slurm", seats, options=OPTS)
    sbatch = [line for line in text.splitlines() if line.startswith(("#SBATCH --nodes", "#SBATCH --ntasks"))]
    assert sbatch == ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --ntasks=8"]
    assert "--ntasks=8 --nodes=2 --distribution=arbitrary" in text.splitlines()[-1]


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
