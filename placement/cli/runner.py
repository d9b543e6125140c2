"""How `whatif` and `replay` run their tasks from the command line, written once: where they run (--executor,
--workers, --address), the progress (a bar on a terminal, log lines with the rate otherwise) and an interrupted run.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType
from typing import Annotated, NoReturn

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from placement.cli.errors import err, escape, fail
from placement.sim.executors import EXECUTORS, Executor, make_executor

__all__ = [
    "AddressOpt",
    "ExecutorOpt",
    "RunProgress",
    "WorkersOpt",
    "choose_executor",
    "interrupted",
]

WORKERS_HELP = (
    "0: run in this process; N: N local worker processes (default: the usable cores, at most one per task); "
    "with --executor ray: Ray workers (default: the cluster's CPUs)"
)
WorkersOpt = Annotated[int | None, typer.Option(help=WORKERS_HELP)]
ExecutorOpt = Annotated[str, typer.Option(help="where tasks run: local (this machine) or ray")]
AddressOpt = Annotated[
    str | None, typer.Option(help="Ray cluster address (--executor ray; default: start a local head)")
]


def choose_executor(
    executor: str, workers: int | None, address: str | None, tasks: int | None = None
) -> Executor:
    """The executor `--executor`, `--workers` and `--address` name, with one meaning of `--workers` for every
    command (`WORKERS_HELP`); local workers are capped at `tasks` when given. Bad values exit 2."""
    if executor not in EXECUTORS:
        fail(f"--executor: must be {' or '.join(EXECUTORS)}, got {escape(repr(executor))}", 2)
    if workers is not None and workers < 0:
        fail(f"--workers: must be >= 0 (0: in this process), got {workers}", 2)
    try:
        return make_executor(executor, workers, address, tasks)
    except RuntimeError as e:  # Ray missing or unreachable
        fail(escape(f"--executor: {e}"), 2)


class RunProgress:
    """Progress of a run as ``progress(done, total)`` calls: a bar when stderr is a terminal, else a log line every
    `log_every` units (and at the end; 0: none). `label` names the run, `unit` what is counted, `detail` what the
    total is made of (``40 jobs x 2 policies``). A context manager around the run."""

    def __init__(self, label: str, unit: str, detail: str = "", log_every: int = 0) -> None:
        self.label, self.unit, self.detail, self.log_every = label, unit, detail, log_every
        self.live = err.is_terminal
        self.t0 = time.monotonic()
        self.logged = 0
        self.task: TaskID | None = None
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(escape(unit)),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=err,
            disable=not self.live,
        )

    def __enter__(self) -> RunProgress:
        self.bar.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.bar.__exit__(kind, exc, tb)

    def __call__(self, done: int, total: int) -> None:
        el = time.monotonic() - self.t0
        rate = f"{done / el:.1f} {self.unit}/s" if el > 0 else ""
        if self.live:
            if self.task is None:
                self.task = self.bar.add_task(self.label, total=total, rate="")
            self.bar.update(self.task, completed=done, rate=rate)
            return
        due = done - self.logged >= self.log_every or (done == total and done > self.logged)
        if self.log_every and due:
            self.logged = done
            what = f" ({self.detail})" if self.detail else ""
            err.print(
                f"{self.label}: {done}/{total} {self.unit}{what} ({100 * done / max(1, total):.1f}%), {rate}, "
                f"{el:.0f} s",
                highlight=False,
                soft_wrap=True,
            )


def interrupted(what: str, done: int, total: int, where: Path) -> NoReturn:
    """An interrupted run (Ctrl-C): say what is kept and how to finish, and exit 130."""
    err.print(
        f"[yellow]interrupted:[/] {done} of {total} {what} are in {escape(str(where))}; run again with --resume to "
        "finish the rest",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(130)
