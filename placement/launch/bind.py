"""`placement bind -- CMD`: the exec wrapper that makes any launcher honour a placement. It finds the task's rank,
shows it exactly its planned device, binds it to that device's CPUs and NUMA node, and execs the command.

Never guesses: no rank variable, a rank the placement lacks, a wrong host or a device the task cannot see is a
`BindError` with the values involved. `plan` is pure (environment, placement and machine facts in, `BindPlan`
out); `execute` applies it. The command line is in `placement.cli.commands.bind`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from placement.errors import InputError
from placement.io.affinity import cpu_list, parse_cpu_list
from placement.io.export.common import device_env, is_amd
from placement.io.export.document import Seat, launch_seats, seats_from_document
from placement.io.native import load_document

__all__ = [
    "RANK_VARS",
    "BindError",
    "BindPlan",
    "Machine",
    "execute",
    "find_rank",
    "load_placement",
    "plan",
    "visible_device",
]

RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
"""Where the rank comes from, first set wins: torchrun / env://, OpenMPI, MPICH and Intel MPI (PMI), Slurm."""
_SIZE_VARS = {
    "RANK": ("WORLD_SIZE",),
    "OMPI_COMM_WORLD_RANK": ("OMPI_COMM_WORLD_SIZE",),
    "PMI_RANK": ("PMI_SIZE",),
    "SLURM_PROCID": ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"),
}
PLACEMENT_FILE_VAR = "PLACEMENT_FILE"
CPU_BIND_MODES = ("auto", "off", "strict")


class BindError(Exception):
    """Why the wrapper refuses to start the command (exit code 2)."""


@dataclass(frozen=True)
class Machine:
    """What bind needs to know about the machine it runs on (tests pass their own)."""

    hostnames: tuple[str, ...]
    allowed_cpus: frozenset[int]
    numa_cpus: Mapping[int, frozenset[int]]
    which: Callable[[str], str | None] = shutil.which

    @staticmethod
    def here() -> Machine:
        name = socket.gethostname()
        fq = socket.getfqdn()
        allowed = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
        numa: dict[int, frozenset[int]] = {}
        base = Path("/sys/devices/system/node")
        for d in sorted(base.glob("node[0-9]*")) if base.is_dir() else []:
            try:
                text = (d / "cpulist").read_text().strip()
                numa[int(d.name[4:])] = frozenset(parse_cpu_list(text)) if text else frozenset()
            except (OSError, ValueError):
                continue
        return Machine(tuple(dict.fromkeys([name, fq])), allowed, numa)


@dataclass
class BindPlan:
    """The rank, where its number came from, its seat, the variables to set, the command to exec, and notes
    (what was skipped and why); `affinity`: CPUs to bind with sched_setaffinity when no tool is used."""

    rank: int
    rank_var: str
    seat: Seat
    env: dict[str, str]
    argv: list[str]
    notes: list[str] = field(default_factory=list)
    affinity: frozenset[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "rank_var": self.rank_var,
            "device": self.seat.device,
            "env": self.env,
            "argv": self.argv,
            "notes": self.notes,
        }


def find_rank(env: Mapping[str, str], override: int | None = None) -> tuple[int, str]:
    """(rank, the variable it came from): `override`, else the first of `RANK_VARS` that is set."""
    if override is not None:
        return override, "--rank"
    for var in RANK_VARS:
        raw = env.get(var)
        if raw is None or raw.strip() == "":
            continue
        if not raw.strip().isdigit():
            raise BindError(f"{var}={raw!r} is not a rank number")
        return int(raw), var
    raise BindError(
        f"no rank: none of {', '.join(RANK_VARS)} is set (run under mpirun, srun or torchrun, or give --rank)"
    )


def load_placement(path: str | None, env: Mapping[str, str]) -> tuple[list[Seat], str]:
    """The seats of the placement file (`path`, else $PLACEMENT_FILE) and its name."""

    src = path or env.get(PLACEMENT_FILE_VAR)
    if not src:
        raise BindError(
            f"no placement: give --placement FILE or set {PLACEMENT_FILE_VAR} (the result of `placement place --out`)"
        )
    try:
        doc = load_document(src)
        return launch_seats(seats_from_document(doc, src), doc), src
    except InputError as e:
        raise BindError(e.render()) from None


def _check_host(seat: Seat, env: Mapping[str, str], machine: Machine) -> None:
    names: tuple[str, ...]
    for var in ("PLACEMENT_HOST", "SLURMD_NODENAME"):
        if env.get(var):
            names, where = (env[var],), f"{var}={env[var]}"
            break
    else:
        names, where = machine.hostnames, f"hostname {' / '.join(machine.hostnames)}"
    short = {n.split(".")[0] for n in names}
    if seat.host not in names and seat.host.split(".")[0] not in short:
        raise BindError(
            f"rank {seat.rank} is placed on {seat.host}, but this is {where}: the launcher started it "
            "on another host (check the hostfile / rankfile order), or set PLACEMENT_HOST if the "
            "names differ (--no-host-check skips this check)"
        )


def _gpu_list(var: str, raw: str) -> list[int]:
    items = [x.strip() for x in raw.split(",") if x.strip()]
    if not all(x.isdigit() for x in items):
        raise BindError(f"{var}={raw!r}: expected GPU indices like 0,4,5")
    return [int(x) for x in items]


def visible_device(seat: Seat, env: Mapping[str, str]) -> tuple[str, str]:
    """(the value that selects physical GPU `seat.index` in the visible-devices variable, how it was found).

    If Slurm listed the step's GPUs (SLURM_STEP_GPUS, else SLURM_JOB_GPUS), the GPU must be among them, and the
    value is the entry of the visible list Slurm set (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES for AMD) at the
    GPU's position: the ordinal under cgroup device limits, the index itself without. Else a visible list already
    set must contain the index. Else the value is the index.
    """
    phys = seat.index
    vis_vars = (
        ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
        if is_amd(seat.kind)
        else ("CUDA_VISIBLE_DEVICES",)
    )
    # Slurm writes NoDevFiles when its gres has no device files: no restriction it knows of
    vis_var = next((v for v in vis_vars if env.get(v, "").strip() not in ("", "NoDevFiles")), None)
    current = [x.strip() for x in env[vis_var].split(",")] if vis_var else None
    slurm_var = next((v for v in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS") if env.get(v, "").strip()), None)
    if slurm_var is not None:
        gpus = _gpu_list(slurm_var, env[slurm_var])
        if phys not in gpus:
            raise BindError(
                f"rank {seat.rank} needs GPU {phys} of {seat.host}, but Slurm gave this step GPUs "
                f"{slurm_var}={env[slurm_var]}: the allocation differs from the plan (other jobs took "
                "the planned GPUs, or Slurm chose others); re-place on the current state"
            )
        pos = gpus.index(phys)
        if current is None:
            raise BindError(
                f"{slurm_var}={env[slurm_var]} is set but {vis_vars[0]} is not: cannot tell whether "
                f"GPU {phys} is visible as ordinal {pos} (cgroup device limits) or {phys}"
            )
        if vis_var is None:
            raise BindError(f"{slurm_var} is set but no visible-devices variable is")
        if len(current) != len(gpus):
            raise BindError(
                f"cannot pair {vis_var}={env[vis_var]} with {slurm_var}={env[slurm_var]}: "
                f"{len(current)} entries against {len(gpus)}"
            )
        return current[pos], f"{slurm_var}={env[slurm_var]}, {vis_var}={env[vis_var]}"
    if current is not None and vis_var is not None:
        ints = [x for x in current if x.isdigit()]
        if len(ints) != len(current):
            raise BindError(
                f"{vis_var}={env[vis_var]} names devices by UUID or MIG id: cannot tell which is GPU "
                f"{phys}; unset it or run under Slurm's GPU allocation"
            )
        if str(phys) not in [str(int(x)) for x in current]:
            raise BindError(
                f"rank {seat.rank} needs GPU {phys} of {seat.host}, which is not visible here "
                f"({vis_var}={env[vis_var]})"
            )
        return str(phys), f"{vis_var}={env[vis_var]}"
    return str(phys), "all devices visible"


def _cpu_binding(
    seat: Seat, mode: str, machine: Machine
) -> tuple[list[str], frozenset[int] | None, list[str]]:
    """(command prefix, CPUs for sched_setaffinity, notes) binding to the GPU's NUMA node or CPUs."""
    notes: list[str] = []
    if mode == "off":
        return [], None, notes
    allowed = machine.allowed_cpus
    if seat.numa is not None:
        node = machine.numa_cpus.get(seat.numa)
        if node is None:
            notes.append(
                f"NUMA node {seat.numa} of {seat.device} does not exist here (nodes {sorted(machine.numa_cpus)})"
            )
        elif allowed and not node & allowed:
            notes.append(
                f"NUMA node {seat.numa}'s CPUs are outside this task's allowed CPUs {cpu_list(sorted(allowed))}"
            )
        elif machine.which("numactl"):
            return ["numactl", f"--cpunodebind={seat.numa}", f"--membind={seat.numa}", "--"], None, notes
        else:
            notes.append("numactl is not installed: memory is not bound, CPUs are")
            if seat.cpus is None:
                cpus = node & allowed if allowed else node
                return (
                    _cpus_prefix(frozenset(cpus), machine),
                    (None if machine.which("taskset") else frozenset(cpus)),
                    notes,
                )
    if seat.cpus is not None:
        want = frozenset(parse_cpu_list(seat.cpus))
        cpus = want & allowed if allowed else want
        if not cpus:
            notes.append(
                f"the CPUs of {seat.device} ({seat.cpus}) are outside this task's allowed CPUs "
                f"{cpu_list(sorted(allowed))}"
            )
        else:
            return _cpus_prefix(cpus, machine), (None if machine.which("taskset") else cpus), notes
    elif seat.numa is None:
        notes.append(
            f"the CPU and NUMA affinity of {seat.device} are unknown (the cluster's node type has no cpu_affinity)"
        )
    if mode == "strict":
        raise BindError("cannot bind CPUs (--cpu-bind strict): " + "; ".join(notes))
    return [], None, notes


def _cpus_prefix(cpus: frozenset[int], machine: Machine) -> list[str]:
    return ["taskset", "-c", cpu_list(sorted(cpus))] if machine.which("taskset") else []


def plan(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    placement: str | None = None,
    rank: int | None = None,
    host_check: bool = True,
    cpu_bind: str = "auto",
    master_port: int = 29500,
    machine: Machine | None = None,
) -> BindPlan:
    """Everything `placement bind` will do, without doing it."""
    if not command:
        raise BindError("no command: write `placement bind [OPTIONS] -- CMD [ARGS...]`")
    if cpu_bind not in CPU_BIND_MODES:
        raise BindError(f"--cpu-bind: unknown value {cpu_bind!r}; use one of {', '.join(CPU_BIND_MODES)}")
    machine = machine or Machine.here()
    if "/" not in command[0] and machine.which(command[0]) is None:
        raise BindError(f"cannot run {command[0]!r}: not found on PATH")
    r, var = find_rank(env, rank)
    seats, src = load_placement(placement, env)
    if not 0 <= r < len(seats):
        raise BindError(
            f"rank {r} (from {var}) is not in the placement {src}: it has ranks 0..{len(seats) - 1}"
        )
    for size_var in _SIZE_VARS.get(var, ()):
        if env.get(size_var, "").strip():
            if env[size_var].strip() != str(len(seats)):
                raise BindError(
                    f"{size_var}={env[size_var]} tasks were launched, but the placement {src} has "
                    f"{len(seats)} ranks"
                )
            break
    seat = seats[r]
    if host_check:
        _check_host(seat, env, machine)
    value, how = visible_device(seat, env)
    out: dict[str, str] = dict(device_env(seat.kind, value))
    if is_amd(seat.kind) and env.get("GPU_DEVICE_ORDINAL"):
        out["GPU_DEVICE_ORDINAL"] = "0"  # Slurm's list of ordinals; within ROCr's one device it is 0
    out["LOCAL_RANK"] = "0"
    for key, default in (
        ("RANK", str(r)),
        ("WORLD_SIZE", str(len(seats))),
        ("MASTER_ADDR", seats[0].host),
        ("MASTER_PORT", str(master_port)),
    ):
        if not env.get(key):
            out[key] = default
    out.update(PLACEMENT_RANK=str(r), PLACEMENT_DEVICE=seat.device, PLACEMENT_HOST=seat.host)
    prefix, affinity, notes = _cpu_binding(seat, cpu_bind, machine)
    notes.insert(0, f"device: {how}")
    return BindPlan(r, var, seat, out, [*prefix, *command], notes, affinity)


def describe(p: BindPlan) -> str:
    """One line for stderr: what the task gets."""
    dev = " ".join(f"{k}={v}" for k, v in p.env.items() if k.endswith("VISIBLE_DEVICES"))
    if p.argv and p.argv[0] == "numactl":
        cpu = " ".join(p.argv[:3])
    elif p.argv and p.argv[0] == "taskset":
        cpu = f"taskset -c {p.argv[2]}"
    elif p.affinity is not None:
        cpu = f"CPUs {cpu_list(sorted(p.affinity))}"
    else:
        cpu = "no CPU binding"
    return f"placement bind: rank {p.rank} ({p.rank_var}) -> {p.seat.device}: {dev} LOCAL_RANK=0, {cpu}"


def execute(p: BindPlan, env: Mapping[str, str]) -> NoReturn:
    """Bind (when no tool does it) and exec the command with the plan's variables."""
    full = {**env, **p.env}
    if p.affinity is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, p.affinity)
    try:
        os.execvpe(p.argv[0], p.argv, full)
    except OSError as e:
        raise BindError(f"cannot run {p.argv[0]!r}: {e.strerror}") from None


def dry_run(p: BindPlan) -> str:
    return json.dumps(p.to_dict(), indent=2) + "\n"
