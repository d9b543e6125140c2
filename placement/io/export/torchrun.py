"""torchrun launch: one command per host (--nnodes, --node-rank, --nproc-per-node, --master-addr, --master-port)
running `placement bind`, in one POSIX shell script that picks the line of the host it runs on."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from placement.io.export.common import ExportOptions, bind_command, plural, refuse, relative_note, shell_join
from placement.io.export.document import Seat
from placement.model.job import host_blocks

__all__ = ["torchrun_argvs", "torchrun_script"]


def torchrun_argvs(seats: Sequence[Seat], opts: ExportOptions) -> list[tuple[str, list[str]]]:
    """(host, torchrun argv without the user's command) per host in node-rank order; refuses a mapping whose
    hosts' ranks are not contiguous blocks (torchrun gives node rank k the ranks after those of nodes < k)."""
    try:
        blocks = host_blocks([s.host for s in seats])
    except ValueError as e:
        raise refuse("torchrun", f"{e}; place the job with `launcher: torchrun` in the job file") from None
    master = seats[0].host
    out = []
    for k, (host, _, n) in enumerate(blocks):
        out.append(
            (
                host,
                [
                    "torchrun",
                    f"--nnodes={len(blocks)}",
                    f"--node-rank={k}",
                    f"--nproc-per-node={n}",
                    f"--master-addr={master}",
                    f"--master-port={opts.master_port}",
                    "--no-python",
                    *bind_command(opts),
                ],
            )
        )
    return out


def torchrun_script(seats: Sequence[Seat], opts: ExportOptions) -> str:
    """``sh SCRIPT CMD [ARGS...]`` on every host: it execs that host's torchrun (host from $PLACEMENT_HOST, else
    `hostname -s`). Inside, `placement bind` (RANK from torchrun) gives each worker its planned GPU."""
    cmds = torchrun_argvs(seats, opts)
    hosts = [h for h, _ in cmds]
    lines = [
        "#!/bin/sh",
        f"# torchrun launch of job {opts.job}: {plural(len(seats), 'rank')} on {plural(len(cmds), 'host')}, one torchrun per host;",
        "# torchrun numbers ranks host by host, so node rank k runs the k-th contiguous block of ranks.",
        "# Run on every host: sh THIS_SCRIPT CMD [ARGS...]   (the host is $PLACEMENT_HOST, else `hostname -s`)",
        *relative_note(opts),
    ]
    by: dict[str, list[Seat]] = {}
    for s in seats:
        by.setdefault(s.host, []).append(s)
    for k, h in enumerate(hosts):
        ss = by[h]
        lines.append(
            f"#   {h}: node rank {k}, ranks {ss[0].rank}-{ss[-1].rank}, GPUs {','.join(str(s.index) for s in ss)}"
        )
    lines += [
        "set -eu",
        '[ "$#" -gt 0 ] || { echo "usage: sh $0 CMD [ARGS...]" >&2; exit 2; }',
        *(
            []
            if opts.placement_path
            else [
                ': "${PLACEMENT_FILE:?set PLACEMENT_FILE to the placement result (placement place --out)}"',
                "export PLACEMENT_FILE",
            ]
        ),
        'host="${PLACEMENT_HOST:-$(hostname -s)}"',
        'case "$host" in',
    ]
    for h, argv in cmds:
        lines.append(f'  {shlex.quote(h)}) exec {shell_join(argv)} "$@" ;;')
    lines += [
        f'  *) echo "$0: host $host runs no rank of job {opts.job} (hosts: {" ".join(hosts)})" >&2; exit 2 ;;',
        "esac",
    ]
    return "\n".join(lines) + "\n"
