"""The `placement import` group: every importer's command, from `import_basic` (nvidia-smi, slurm, k8s),
`import_fabric` (nccl-xml, rocm-smi, ibnetdiscover, topograph) and `import_slurm_live` (slurm-live), in that order."""

from __future__ import annotations

from placement.cli.commands import import_basic, import_fabric, import_slurm_live
from placement.cli.help import command_app

__all__ = ["app"]

app = command_app(
    name="import", no_args_is_help=True, help="Read real topology descriptions into a cluster file."
)
for _family in (import_basic, import_fabric, import_slurm_live):
    app.add_typer(_family.app)  # no name: the family's commands join the group
