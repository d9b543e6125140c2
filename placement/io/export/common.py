"""What the launch formats share: their options, refusing a mapping with a clear message, ranks grouped by host,
the `placement bind` command line, and which device kinds are AMD (ROCR_/HIP_VISIBLE_DEVICES, not CUDA's).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from placement.errors import InputError, Problem
from placement.io.affinity import cpu_list
from placement.io.export.document import Seat

__all__ = [
    "ExportOptions",
    "bind_command",
    "by_host",
    "device_env",
    "is_amd",
    "plural",
    "ranges",
    "refuse",
    "relative_note",
    "shell_join",
]

_AMD_RE = re.compile(r"(?:AMD|MI\d|GFX\d|INSTINCT|RADEON)", re.IGNORECASE)


@dataclass(frozen=True)
class ExportOptions:
    """Settings of the launch formats.

    `placement_path`: where `placement bind` finds the result on the compute nodes (None: the bind command reads
    ``PLACEMENT_FILE``; a relative path is relative to the directory the launch runs in); `bind`: the
    `placement` command there (a shell word list, e.g. ``.venv/bin/placement`` or ``/usr/bin/python3 -m
    placement.cli.app``); `command`: the program a Kubernetes Pod runs;
    `image`, `level_labels` (level name -> node-label key), `gpu_resource`: Kubernetes only; `gpus_per_node`:
    Slurm's per-node GPU request when more than the ranks on a node (so that the allocation covers the plan).
    """

    job: str = "job"
    placement_path: str | None = None
    master_port: int = 29500
    bind: str = "placement"
    command: tuple[str, ...] = ()
    image: str | None = None
    level_labels: Mapping[str, str] = field(default_factory=dict)
    gpu_resource: str | None = None
    gpus_per_node: int | None = None


def is_amd(kind: str | None) -> bool:
    """AMD Instinct/Radeon kinds (MI300X, MI250, gfx942, ...): their runtime reads ROCR_VISIBLE_DEVICES."""
    return bool(kind and _AMD_RE.match(kind.strip()))


def device_env(kind: str | None, visible: str) -> dict[str, str]:
    """The variables that show a process exactly one device, `visible` (an index the runtime understands)."""
    if is_amd(kind):
        # ROCr filters first; HIP (and CUDA_VISIBLE_DEVICES, which HIP also reads) index within what ROCr shows
        return {"ROCR_VISIBLE_DEVICES": visible, "HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0"}
    return {"CUDA_VISIBLE_DEVICES": visible}


def refuse(fmt: str, message: str, path: str = "mapping") -> InputError:
    return InputError(f"--format {fmt}", [Problem(path, message)])


def by_host(seats: Sequence[Seat]) -> dict[str, list[Seat]]:
    """Seats per host, hosts in the order of their first rank, ranks in order."""
    out: dict[str, list[Seat]] = {}
    for s in seats:
        out.setdefault(s.host, []).append(s)
    return out


def bind_command(opts: ExportOptions) -> list[str]:
    """``placement bind [--placement FILE] --``: what each launched task runs before the user's command."""
    argv = [*(shlex.split(opts.bind) or ["placement"]), "bind"]
    if opts.placement_path is not None:
        argv += ["--placement", opts.placement_path]
    return [*argv, "--"]


def relative_note(opts: ExportOptions) -> list[str]:
    """The comment line a launch file carries when the result's path is relative: where to run it from."""
    path = opts.placement_path
    if path is None or path.startswith("/"):
        return []
    return [
        f"# {path} is relative to the directory this runs in: launch it from the directory of the export."
    ]


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def shell_join(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def ranges(xs: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the Linux list form, `placement.io.affinity.cpu_list`)."""
    return cpu_list(xs)
