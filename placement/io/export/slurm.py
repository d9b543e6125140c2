"""Slurm launch script: `#SBATCH` resources (nodes, tasks per node, node list, GPUs per node) and one `srun` with
``--distribution=arbitrary`` over a SLURM_HOSTFILE in rank order, each task running `placement bind`."""

from __future__ import annotations

import re
from collections.abc import Sequence

from placement.io.export.common import (
    ExportOptions,
    bind_command,
    by_host,
    plural,
    ranges,
    relative_note,
    shell_join,
)
from placement.io.export.document import Seat

__all__ = ["sbatch_tasks", "slurm_script", "srun_argv"]


def _gpus_per_node(seats: Sequence[Seat], opts: ExportOptions) -> int:
    need = max(len(v) for v in by_host(seats).values())
    return max(need, opts.gpus_per_node or 0)


def sbatch_tasks(seats: Sequence[Seat]) -> list[str]:
    """The allocation's task options: a CPU per planned task on every node, as the hostfile lays them out.

    `--nodes` and `--ntasks` alone let Slurm spread the tasks as it likes (8 tasks on 2 nodes: 7 CPUs on one, 1 on
    the other, while the hostfile puts 4 on each). With the same count K on every host: ``--ntasks-per-node=K``
    and ``--ntasks``. With different counts: ``--ntasks-per-node`` the largest and no ``--ntasks`` (which would
    make the per-node count a mere maximum), so each node holds at least its own count; the srun step then
    starts the planned tasks (its ``--ntasks``) where the hostfile says.
    """
    hosts = by_host(seats)
    counts = {len(v) for v in hosts.values()}
    if len(counts) == 1:
        return [f"--nodes={len(hosts)}", f"--ntasks-per-node={counts.pop()}", f"--ntasks={len(seats)}"]
    return [f"--nodes={len(hosts)}", f"--ntasks-per-node={max(counts)}"]


def srun_argv(seats: Sequence[Seat], opts: ExportOptions) -> list[str]:
    """The srun command (without the user's command); SLURM_HOSTFILE must name the hostfile. No --nodelist: with
    --distribution=arbitrary srun takes the nodes from SLURM_HOSTFILE, and a node list shorter than the task count
    makes Slurm 22.05 refuse the step ("You asked for N tasks but hostlist specified M nodes")."""
    hosts = by_host(seats)
    return [
        "srun",
        f"--ntasks={len(seats)}",
        f"--nodes={len(hosts)}",
        "--distribution=arbitrary",
        f"--gpus-per-node={_gpus_per_node(seats, opts)}",
        "--gpu-bind=none",
        *bind_command(opts),
    ]


def slurm_script(seats: Sequence[Seat], opts: ExportOptions) -> str:
    """A bash script for ``sbatch SCRIPT CMD [ARGS...]`` (or ``bash SCRIPT CMD ...`` inside an allocation).

    `--gpus-per-node` is one number for every node (Slurm has no per-node GPU count in one step): the largest
    count of ranks on a node, or `opts.gpus_per_node` when larger. Slurm picks which GPUs (lowest free indices
    first); `placement bind` then checks the planned GPU is among them (SLURM_STEP_GPUS) and fails otherwise, so a
    plan Slurm did not honour never runs on the wrong device. Asking for every free GPU of the nodes
    (``--gpus-per-node`` of the export) makes the allocation cover the plan.
    """
    hosts = by_host(seats)
    gpn = _gpus_per_node(seats, opts)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", opts.job) or "job"
    srun = shell_join(srun_argv(seats, opts))
    lines = [
        "#!/bin/bash",
        f"# Slurm launch of job {opts.job}: {plural(len(seats), 'rank')} on {plural(len(hosts), 'node')}. srun puts task i on line i of",
        "# SLURM_HOSTFILE (--distribution=arbitrary); `placement bind` gives each task its planned GPU and CPUs.",
        "# Usage: sbatch THIS_SCRIPT CMD [ARGS...]   (or: bash THIS_SCRIPT CMD [ARGS...] inside salloc)",
        *relative_note(opts),
    ]
    for h, ss in hosts.items():
        lines.append(
            f"#   {h}: ranks {ranges([s.rank for s in ss])}, GPUs {','.join(str(s.index) for s in ss)}"
        )
    counts = sorted({len(v) for v in hosts.values()})
    if len(counts) > 1 or opts.gpus_per_node:
        lines.append(
            f"# --gpus-per-node={gpn} on every node (Slurm takes one count for all nodes of a step)."
        )
    if len(counts) > 1:
        lines.append(
            f"# The nodes hold {counts[0]} to {counts[-1]} ranks: a node with fewer than {gpn} free GPUs keeps the job pending."
        )
        lines.append(
            f"# --ntasks-per-node={counts[-1]} on every node (no --ntasks, which would let Slurm spread the tasks); srun starts {len(seats)}."
        )
    lines += [
        "# Slurm picks WHICH GPUs (lowest free index first); `placement bind` refuses a task whose planned GPU",
        "# is not among them. To be sure the allocation covers the plan, ask for every free GPU of these",
        "# nodes: placement export ... --format slurm --gpus-per-node N.",
    ]
    lines += [
        f"#SBATCH --job-name={name}",
        *(f"#SBATCH {opt}" for opt in sbatch_tasks(seats)),
        f"#SBATCH --nodelist={','.join(hosts)}",
        f"#SBATCH --gpus-per-node={gpn}",
        "set -euo pipefail",
        'if [ "$#" -eq 0 ]; then echo "usage: sbatch $0 CMD [ARGS...]" >&2; exit 2; fi',
        *(
            []
            if opts.placement_path
            else [
                ': "${PLACEMENT_FILE:?set PLACEMENT_FILE to the placement result (placement place --out)}"',
                "export PLACEMENT_FILE",
            ]
        ),
        'hostfile="$(mktemp "${TMPDIR:-/tmp}/placement-hosts.XXXXXX")"',
        "trap 'rm -f \"$hostfile\"' EXIT",
        "cat > \"$hostfile\" <<'PLACEMENT_HOSTS'",
        *[s.host for s in seats],
        "PLACEMENT_HOSTS",
        f'SLURM_HOSTFILE="$hostfile" {srun} "$@"',
    ]
    return "\n".join(lines) + "\n"
