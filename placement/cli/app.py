"""The root of the `placement` command line: its options (--limits, --version, -h/--help), the exit codes, and
`COMMANDS`, the table of commands, each loaded from its module only when it runs or shows its own help.

`placement --help`, `--version`, a mistyped command and a command's usage errors (`placement.cli.usage`) import
no command module (nor the solver, numpy or matplotlib behind them), so they answer at once.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer
from typer._click import Command as ClickCommand
from typer._click import Context, HelpFormatter

from placement.cli.errors import EXIT_CODES, PIPE_CLOSED_EXIT, escape, fail, pipe_closed
from placement.cli.help import Command, Group
from placement.cli.usage import check_usage
from placement.limits import parse_limit_overrides, set_process_limits

if TYPE_CHECKING:  # the modules COMMANDS loads, for the import checkers and mypy (loaded lazily at run time)
    from placement.cli.commands import (  # noqa: F401
        batch,
        bind,
        calibrate,
        capacity,
        evaluate,
        export,
        imports,
        place,
        preempt,
        registry,
        repair,
        replay,
        serve,
        whatif,
    )

__all__ = ["COMMANDS", "Entry", "app", "load_command", "main"]


@dataclass(frozen=True)
class Entry:
    """A command of `placement`: the module whose `app` (a typer app) holds it, and its one-line help (the first
    line of the command's own help)."""

    module: str
    help: str


COMMANDS: dict[str, Entry] = {
    "import": Entry("placement.cli.commands.imports", "Read real topology descriptions into a cluster file."),
    "evaluate": Entry("placement.cli.commands.evaluate", "The modeled step of a given mapping."),
    "place": Entry(
        "placement.cli.commands.place",
        "Place a job on a cluster state and show what it costs, next to the baselines.",
    ),
    "place-batch": Entry(
        "placement.cli.commands.batch",
        "Place a queue of jobs jointly, next to FIFO kueue-tas and priority-ordered cpsat.",
    ),
    "export": Entry("placement.cli.commands.export", "Turn a placement into what a launcher reads."),
    "bind": Entry(
        "placement.cli.commands.bind",
        "Run CMD as this task's rank of the placement, on its GPU and that GPU's CPUs.",
    ),
    "repair": Entry("placement.cli.commands.repair", "Repair a running job after failures with few moves."),
    "preempt": Entry(
        "placement.cli.commands.preempt",
        "Preempt the fewest or cheapest lower-priority jobs so that a job fits.",
    ),
    "capacity": Entry(
        "placement.cli.commands.capacity",
        "How many copies of each job shape fit now, per domain, and how fragmented the free devices are.",
    ),
    "whatif": Entry(
        "placement.cli.commands.whatif",
        "What-if studies: `whatif SWEEP` (a sweep file) or `whatif defrag CLUSTER`.",
    ),
    "replay": Entry(
        "placement.cli.commands.replay", "Replay a GPU-cluster trace on a cluster with each placement policy."
    ),
    "registry": Entry(
        "placement.cli.commands.registry", "Clusters, live state and reservations held by a placement server."
    ),
    "serve": Entry("placement.cli.commands.serve", "Run the gRPC server (same as `placement-server`)."),
    "schema": Entry("placement.cli.commands.schema", "The JSON Schema of an input file (docs/formats.md)."),
    "calibrate": Entry(
        "placement.cli.commands.calibrate",
        "Fit a cluster's links to nccl-tests logs, or a job's compute efficiency to a measured step.",
    ),
}

_LISTING = "placement.cli.listing"  # ctx.meta key: the root's help is listing the commands


def load_command(name: str) -> ClickCommand:
    """The command `name` of `COMMANDS`, built from its module's typer app."""
    # the one dynamic import of the CLI, for start-up time: a command's module (and the solver, numpy, matplotlib
    # behind it) is imported only when that command runs or shows its help
    module = importlib.import_module(COMMANDS[name].module)
    return typer.main.get_command(module.app)


class LazyGroup(Group):
    """The root group: lists `COMMANDS` from the table, and imports a command's module only to run it or show its
    help."""

    def list_commands(self, ctx: Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Context, cmd_name: str) -> ClickCommand | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        if ctx.meta.get(_LISTING):
            return Command(cmd_name, help=entry.help, short_help=entry.help)  # a listing, not the command
        return load_command(cmd_name)

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, ClickCommand | None, list[str]]:
        if args and args[0] not in COMMANDS and not args[0].startswith("-"):
            close = difflib.get_close_matches(args[0], list(COMMANDS))
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {args[0]!r}.{hint}")
        if args and args[0] in COMMANDS:
            check_usage(ctx, args[0], args[1:])  # a usage error is reported before the command is imported
        return super().resolve_command(ctx, args)

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        ctx.meta[_LISTING] = True
        try:
            super().format_help(ctx, formatter)
        finally:
            ctx.meta.pop(_LISTING, None)


def _epilog() -> str:
    lines = "\n".join(f"  {code:>3}  {what}" for code, what in EXIT_CODES.items())
    return (
        "Exit codes:\n"
        + lines
        + "\n  bind exits with its command's code, serve with the server's; a closed pipe (placement ... | head) "
        + f"ends a command quietly with {PIPE_CLOSED_EXIT}."
    )


def _version(value: bool) -> None:
    if not value:
        return
    # importlib.metadata (~0.1 s) only for --version: every other start-up, help and usage error goes without it
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        typer.echo(f"placement {dist_version('placement')}")
    except PackageNotFoundError:
        typer.echo("placement (not installed: no package metadata; pip install -e . gives it)")
    raise typer.Exit(0)


app = typer.Typer(
    cls=LazyGroup,
    no_args_is_help=True,
    add_completion=False,
    help="Topology- and traffic-aware GPU placement.",
    epilog=_epilog(),
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _options(
    limits: Annotated[
        str | None,
        typer.Option(
            "--limits",
            envvar="PLACEMENT_LIMITS",
            help="raise (or lower) input limits, e.g. max_ranks=65536,max_devices=400000 (placement.limits)",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_version, help="print the version and exit"),
    ] = False,
) -> None:
    """Topology- and traffic-aware GPU placement."""
    try:
        set_process_limits(parse_limit_overrides(limits) if limits else None)
    except ValueError as e:
        fail(f"--limits: {escape(str(e))}", 2)


def main() -> None:
    try:
        app()
    except BrokenPipeError:  # written outside a command (help, usage): the reader went away too
        try:
            pipe_closed()
        except typer.Exit as e:
            raise SystemExit(e.exit_code) from None


if __name__ == "__main__":
    main()
