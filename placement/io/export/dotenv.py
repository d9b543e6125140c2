"""Per-rank dotenv files (``rank-R.env``): MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK and the visible
device, in the ``KEY=value`` syntax python-dotenv, docker --env-file and systemd EnvironmentFile read."""

from __future__ import annotations

import re
from collections.abc import Sequence

from placement.io.export.common import ExportOptions, device_env
from placement.io.export.document import Seat

__all__ = ["dotenv_files", "rank_env"]

_PLAIN = re.compile(r"[A-Za-z0-9_.:/,@%+-]*")


def rank_env(seat: Seat, seats: Sequence[Seat], opts: ExportOptions) -> dict[str, str]:
    """The variables of one rank. Only its GPU is visible, so LOCAL_RANK is 0 (device 0 is the right one)."""
    env = {
        "MASTER_ADDR": seats[0].host,
        "MASTER_PORT": str(opts.master_port),
        "WORLD_SIZE": str(len(seats)),
        "RANK": str(seat.rank),
        "LOCAL_RANK": "0",
    }
    env.update(device_env(seat.kind, str(seat.index)))
    return env


def _value(v: str) -> str:
    return v if _PLAIN.fullmatch(v) else "'" + v.replace("'", "") + "'"


def dotenv_files(seats: Sequence[Seat], opts: ExportOptions) -> dict[str, str]:
    """``rank-R.env`` -> its text, one file per rank."""
    out: dict[str, str] = {}
    for s in seats:
        lines = [f"# job {opts.job}, rank {s.rank} of {len(seats)}: runs on {s.host}, GPU {s.index}"]
        lines += [f"{k}={_value(v)}" for k, v in rank_env(s, seats, opts).items()]
        out[f"rank-{s.rank}.env"] = "\n".join(lines) + "\n"
    return out
