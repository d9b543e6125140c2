"""OpenMPI rankfile (``mpirun --rankfile``) with each rank bound to the CPUs of its GPU, and the SLURM_HOSTFILE
(`srun --distribution=arbitrary`: line i is the host of task i)."""

from __future__ import annotations

from collections.abc import Sequence

from placement.io.export.common import (
    ExportOptions,
    bind_command,
    by_host,
    plural,
    refuse,
    relative_note,
    shell_join,
)
from placement.io.export.document import Seat

__all__ = ["hostfile", "rankfile"]


def rankfile(seats: Sequence[Seat], opts: ExportOptions) -> str:
    """``rank R=HOST slot=CPUS``: CPUS is the GPU's CPU affinity as OS CPU ids (nvidia-smi's "CPU Affinity"), which
    OpenMPI reads as such with ``--mca rmaps_rank_file_physical 1``. The GPU itself is chosen by `placement bind`.

    A rank whose CPU affinity is unknown is refused: OpenMPI's slot is a CPU, and a GPU index is not one.
    """
    unknown = [s for s in seats if s.cpus is None]
    if unknown:
        devs = sorted({s.device for s in unknown})
        raise refuse(
            "rankfile",
            f"the CPU affinity of {', '.join(devs[:4])}{' ...' if len(devs) > 4 else ''} "
            f"(ranks {', '.join(str(s.rank) for s in unknown[:8])}{' ...' if len(unknown) > 8 else ''}) is "
            "unknown, and a rankfile slot is a CPU, not a GPU. Give the node type cpu_affinity (import it with "
            "--node-topo from `nvidia-smi topo -m`) and pass --cluster, or launch with --format slurm / torchrun",
        )
    hosts = by_host(seats)
    cmd = (
        shell_join(
            [
                "mpirun",
                "--mca",
                "rmaps_rank_file_physical",
                "1",
                "--rankfile",
                "RANKFILE",
                *bind_command(opts),
            ]
        )
        + " CMD..."
    )
    lines = [
        f"# OpenMPI rankfile: job {opts.job}, {plural(len(seats), 'rank')} on {plural(len(hosts), 'host')}; slot = the CPUs close to the",
        "# rank's GPU (OS CPU ids); `placement bind` sets the GPU. Run:",
        f"#   {cmd}",
        *relative_note(opts),
    ]
    lines += [f"rank {s.rank}={s.host} slot={s.cpus}" for s in seats]
    return "\n".join(lines) + "\n"


def hostfile(seats: Sequence[Seat]) -> str:
    return "".join(f"{s.host}\n" for s in seats)
