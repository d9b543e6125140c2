"""placement.launch.bind and `placement bind`: each rank variable, Slurm-restricted devices, missing ranks, AMD kinds, the
host check, CPU/NUMA binding, and the real exec through the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from placement.io.export.document import Seat
from placement.launch.bind import RANK_VARS, BindError, Machine, find_rank, plan, visible_device
from tests.conftest import ROOT

# rank -> (host, GPU): node02 has GPUs 0, 4, 5, 6 free, so rank 1 (local rank 1) needs GPU 4
MAPPING = [
    {"rank": 0, "device": "node02/gpu0", "kind": "H100", "cpus": "0-47,96-143", "numa_node": 0},
    {"rank": 1, "device": "node02/gpu4", "kind": "H100", "cpus": "48-95,144-191", "numa_node": 1},
    {"rank": 2, "device": "node02/gpu5", "kind": "H100", "cpus": "48-95,144-191", "numa_node": 1},
    {"rank": 3, "device": "node03/gpu2", "kind": "H100"},
]
TWO_SOCKETS = {
    0: frozenset(range(0, 48)) | frozenset(range(96, 144)),
    1: frozenset(range(48, 96)) | frozenset(range(144, 192)),
}


def machine(
    host: str = "node02",
    tools: tuple[str, ...] = ("numactl", "taskset"),
    allowed: frozenset[int] | None = None,
    numa: dict[int, frozenset[int]] | None = None,
) -> Machine:
    return Machine(
        (host, f"{host}.cluster"),
        allowed if allowed is not None else frozenset(range(192)),
        TWO_SOCKETS if numa is None else numa,
        lambda t: (
            None
            if t.startswith("missing") or (t in ("numactl", "taskset") and t not in tools)
            else f"/usr/bin/{t}"
        ),
    )


@pytest.fixture
def placement_file(tmp_path: Path) -> str:
    p = tmp_path / "result.json"
    p.write_text(json.dumps({"job": "j", "mapping": MAPPING}))
    return str(p)


@pytest.mark.parametrize("var", RANK_VARS)
def test_each_rank_variable_gives_the_planned_gpu_as_device_0(var: str, placement_file: str) -> None:
    p = plan(["train"], {var: "1"}, placement=placement_file, machine=machine())
    assert (p.rank, p.rank_var, p.seat.device) == (1, var, "node02/gpu4")
    assert p.env["CUDA_VISIBLE_DEVICES"] == "4" and p.env["LOCAL_RANK"] == "0"
    assert p.env["PLACEMENT_DEVICE"] == "node02/gpu4" and p.env["PLACEMENT_RANK"] == "1"


def test_rank_variables_are_read_in_order_and_must_be_numbers() -> None:
    assert find_rank({"SLURM_PROCID": "0", "RANK": "5", "PMI_RANK": "3"}) == (5, "RANK")
    assert find_rank({"SLURM_PROCID": "2", "PMI_RANK": "3"}) == (3, "PMI_RANK")
    assert find_rank({"RANK": "", "SLURM_PROCID": "2"}) == (2, "SLURM_PROCID")
    assert find_rank({"RANK": "1"}, override=0) == (0, "--rank")
    with pytest.raises(BindError, match="OMPI_COMM_WORLD_RANK='x' is not a rank number"):
        find_rank({"OMPI_COMM_WORLD_RANK": "x"})


def test_a_missing_rank_fails_with_the_reason(placement_file: str) -> None:
    with pytest.raises(
        BindError, match="no rank: none of RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID is set"
    ):
        plan(["train"], {}, placement=placement_file, machine=machine())
    with pytest.raises(
        BindError, match=r"rank 7 \(from SLURM_PROCID\) is not in the placement .*: it has ranks 0..3"
    ):
        plan(["train"], {"SLURM_PROCID": "7"}, placement=placement_file, machine=machine())
    with pytest.raises(
        BindError, match=r"OMPI_COMM_WORLD_SIZE=8 tasks were launched, but the placement .* has 4 ranks"
    ):
        plan(
            ["train"],
            {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "8"},
            placement=placement_file,
            machine=machine(),
        )
    with pytest.raises(BindError, match="no placement: give --placement FILE or set PLACEMENT_FILE"):
        plan(["train"], {"RANK": "0"}, machine=machine())
    with pytest.raises(BindError, match="no command"):
        plan([], {"RANK": "0"}, placement=placement_file, machine=machine())
    with pytest.raises(BindError, match="cannot run 'missing-tool': not found on PATH"):
        plan(["missing-tool"], {"RANK": "0"}, placement=placement_file, machine=machine())


def test_the_placement_file_comes_from_the_env_var_and_bad_files_are_named(
    tmp_path: Path, placement_file: str
) -> None:
    p = plan(["train"], {"RANK": "0", "PLACEMENT_FILE": placement_file}, machine=machine())
    assert p.seat.device == "node02/gpu0"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(["node02/cpu1"]))
    with pytest.raises(BindError, match="'node02/cpu1' is not a device id of the form host/gpuK"):
        plan(["train"], {"RANK": "0"}, placement=str(bad), machine=machine())


def test_slurm_restricted_devices_map_physical_indices_to_what_the_task_sees() -> None:
    seat = Seat(1, "node02", 5, "H100")
    # cgroup ConstrainDevices: Slurm shows the step's GPUs 4,5,6 as ordinals 0,1,2
    assert visible_device(seat, {"SLURM_STEP_GPUS": "4,5,6", "CUDA_VISIBLE_DEVICES": "0,1,2"})[0] == "1"
    # no device cgroup: Slurm sets the global indices
    assert visible_device(seat, {"SLURM_STEP_GPUS": "4,5,6", "CUDA_VISIBLE_DEVICES": "4,5,6"})[0] == "5"
    # a batch step has SLURM_JOB_GPUS only
    assert visible_device(seat, {"SLURM_JOB_GPUS": "5,7", "CUDA_VISIBLE_DEVICES": "0,1"})[0] == "0"
    with pytest.raises(
        BindError, match=r"needs GPU 5 of node02, but Slurm gave this step GPUs SLURM_STEP_GPUS=0,1"
    ):
        visible_device(seat, {"SLURM_STEP_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0,1"})
    with pytest.raises(
        BindError, match="cannot pair CUDA_VISIBLE_DEVICES=0 with SLURM_STEP_GPUS=4,5: 1 entries against 2"
    ):
        visible_device(seat, {"SLURM_STEP_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "0"})
    with pytest.raises(BindError, match="SLURM_STEP_GPUS=4,5 is set but CUDA_VISIBLE_DEVICES is not"):
        visible_device(seat, {"SLURM_STEP_GPUS": "4,5"})


def test_a_device_that_is_not_visible_fails() -> None:
    seat = Seat(1, "node02", 5, "H100")
    assert visible_device(seat, {"CUDA_VISIBLE_DEVICES": "3,5"})[0] == "5"
    with pytest.raises(
        BindError, match=r"needs GPU 5 of node02, which is not visible here \(CUDA_VISIBLE_DEVICES=0,1\)"
    ):
        visible_device(seat, {"CUDA_VISIBLE_DEVICES": "0,1"})
    with pytest.raises(BindError, match="names devices by UUID or MIG id"):
        visible_device(seat, {"CUDA_VISIBLE_DEVICES": "GPU-8a1b"})
    assert visible_device(seat, {}) == ("5", "all devices visible")
    # Slurm's marker for a gres without device files is no restriction
    assert visible_device(seat, {"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == ("5", "all devices visible")


def test_amd_kinds_use_rocr_visible_devices(tmp_path: Path) -> None:
    f = tmp_path / "amd.json"
    f.write_text(
        json.dumps(
            [
                {"rank": 0, "device": "mi/gpu6", "kind": "MI300X"},
                {"rank": 1, "device": "mi/gpu2", "kind": "gfx942"},
            ]
        )
    )
    p = plan(["train"], {"RANK": "0"}, placement=str(f), machine=machine("mi"))
    assert {k: v for k, v in p.env.items() if "VISIBLE" in k} == {
        "ROCR_VISIBLE_DEVICES": "6",
        "HIP_VISIBLE_DEVICES": "0",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    # Slurm's AMD gres sets ROCR_VISIBLE_DEVICES; the ordinal is taken from it
    p = plan(
        ["train"],
        {"RANK": "1", "SLURM_STEP_GPUS": "1,2", "ROCR_VISIBLE_DEVICES": "0,1"},
        placement=str(f),
        machine=machine("mi"),
    )
    assert p.env["ROCR_VISIBLE_DEVICES"] == "1" and p.env["LOCAL_RANK"] == "0"
    p = plan(
        ["train"],
        {"RANK": "1", "SLURM_STEP_GPUS": "1,2", "ROCR_VISIBLE_DEVICES": "0,1", "GPU_DEVICE_ORDINAL": "0,1"},
        placement=str(f),
        machine=machine("mi"),
    )
    assert p.env["GPU_DEVICE_ORDINAL"] == "0"
    with pytest.raises(
        BindError, match=r"GPU 2 of mi, which is not visible here \(ROCR_VISIBLE_DEVICES=0,1\)"
    ):
        plan(["train"], {"RANK": "1", "ROCR_VISIBLE_DEVICES": "0,1"}, placement=str(f), machine=machine("mi"))


def test_the_host_check(placement_file: str) -> None:
    with pytest.raises(
        BindError, match=r"rank 3 is placed on node03, but this is hostname node02 / node02.cluster"
    ):
        plan(["train"], {"RANK": "3"}, placement=placement_file, machine=machine())
    with pytest.raises(BindError, match="rank 0 is placed on node02, but this is SLURMD_NODENAME=node03"):
        plan(
            ["train"], {"RANK": "0", "SLURMD_NODENAME": "node03"}, placement=placement_file, machine=machine()
        )
    assert (
        plan(
            ["train"], {"RANK": "3", "PLACEMENT_HOST": "node03"}, placement=placement_file, machine=machine()
        ).rank
        == 3
    )
    assert (
        plan(["train"], {"RANK": "3"}, placement=placement_file, machine=machine("node03.example.org")).rank
        == 3
    )
    assert (
        plan(["train"], {"RANK": "3"}, placement=placement_file, host_check=False, machine=machine()).rank
        == 3
    )


def test_rank_and_rendezvous_variables_are_set_only_when_missing(placement_file: str) -> None:
    p = plan(["train"], {"OMPI_COMM_WORLD_RANK": "2"}, placement=placement_file, machine=machine())
    assert (p.env["RANK"], p.env["WORLD_SIZE"], p.env["MASTER_ADDR"], p.env["MASTER_PORT"]) == (
        "2",
        "4",
        "node02",
        "29500",
    )
    p = plan(
        ["train"],
        {"RANK": "2", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"},
        placement=placement_file,
        master_port=9,
        machine=machine(),
    )
    assert not {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"} & set(p.env)


def test_cpu_and_memory_binding(placement_file: str) -> None:
    env = {"RANK": "1"}
    p = plan(["train", "-x"], env, placement=placement_file, machine=machine())
    assert p.argv == ["numactl", "--cpunodebind=1", "--membind=1", "--", "train", "-x"]
    # without numactl: taskset on the GPU's CPUs (memory then follows first touch)
    p = plan(["train"], env, placement=placement_file, machine=machine(tools=("taskset",)))
    assert p.argv == ["taskset", "-c", "48-95,144-191", "train"]
    assert "numactl is not installed: memory is not bound, CPUs are" in p.notes
    # no tool at all: sched_setaffinity before exec
    p = plan(["train"], env, placement=placement_file, machine=machine(tools=()))
    assert p.argv == ["train"] and p.affinity == TWO_SOCKETS[1]
    # a cgroup cpuset: only the allowed CPUs of the GPU's set; NUMA node 1 missing here -> CPUs
    p = plan(
        ["train"],
        env,
        placement=placement_file,
        machine=machine(allowed=frozenset({50, 51, 3}), numa={0: frozenset(range(192))}),
    )
    assert p.argv == ["taskset", "-c", "50-51", "train"]
    assert any("NUMA node 1 of node02/gpu4 does not exist here (nodes [0])" in n for n in p.notes)
    # nothing known: no binding, a note; strict fails
    p = plan(["train"], {"RANK": "3"}, placement=placement_file, host_check=False, machine=machine())
    assert p.argv == ["train"] and any("affinity of node03/gpu2 are unknown" in n for n in p.notes)
    with pytest.raises(BindError, match="cannot bind CPUs"):
        plan(
            ["train"],
            {"RANK": "3"},
            placement=placement_file,
            host_check=False,
            cpu_bind="strict",
            machine=machine(),
        )
    with pytest.raises(BindError, match="outside this task's allowed CPUs 0-1"):
        plan(
            ["train"],
            env,
            placement=placement_file,
            cpu_bind="strict",
            machine=machine(allowed=frozenset({0, 1}), numa={}),
        )
    assert plan(["train"], env, placement=placement_file, cpu_bind="off", machine=machine()).argv == ["train"]


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {
        k: v
        for k, v in os.environ.items()
        if k not in RANK_VARS and "VISIBLE" not in k and not k.startswith(("SLURM", "PLACEMENT"))
    }
    full.update(env)
    full["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "placement.cli.app", "bind", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_execs_with_the_planned_environment(placement_file: str) -> None:
    code = (
        "import os; print(os.environ['RANK'], os.environ['CUDA_VISIBLE_DEVICES'], os.environ['LOCAL_RANK'])"
    )
    res = _cli(
        ["--cpu-bind", "off", "-v", "--", sys.executable, "-c", code],
        {"OMPI_COMM_WORLD_RANK": "2", "PLACEMENT_FILE": placement_file, "PLACEMENT_HOST": "node02"},
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == "2 5 0\n"
    assert (
        "placement bind: rank 2 (OMPI_COMM_WORLD_RANK) -> node02/gpu5: CUDA_VISIBLE_DEVICES=5 LOCAL_RANK=0"
        in res.stderr
    )
    # the command's exit code is the wrapper's (exec, no child)
    res = _cli(["--placement", placement_file, "--no-host-check", "--", "sh", "-c", "exit 7"], {"RANK": "0"})
    assert res.returncode == 7
    # options of the command are not taken for bind's
    res = _cli(
        [
            "--placement",
            placement_file,
            "--no-host-check",
            "--dry-run",
            "--",
            "python",
            "-c",
            "x",
            "--rank",
            "3",
        ],
        {"RANK": "0"},
    )
    assert res.returncode == 0 and json.loads(res.stdout)["argv"][-5:] == ["python", "-c", "x", "--rank", "3"]


def test_the_command_line_errors_exit_2_without_a_traceback(placement_file: str) -> None:
    res = _cli(["--placement", placement_file, "--", "true"], {"RANK": "9"})
    assert res.returncode == 2 and "rank 9 (from RANK) is not in the placement" in res.stderr
    assert "Traceback" not in res.stderr
    res = _cli(["--placement", placement_file, "--no-host-check", "--", "no-such-program-xyz"], {"RANK": "0"})
    assert res.returncode == 2 and "cannot run 'no-such-program-xyz': not found on PATH" in res.stderr
    res = _cli(["--placement", placement_file, "--cpu-bind", "maybe", "--", "true"], {"RANK": "0"})
    assert res.returncode == 2 and "--cpu-bind: unknown value 'maybe'" in res.stderr
