"""How every `placement` command reports failure: `error: ...` on stderr and an exit code (`EXIT_CODES`), never
a traceback, whatever the input (binary, deep, huge, absurd numbers).
"""

from __future__ import annotations

import functools
import io
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from placement.errors import RENDER_LIMIT, InfeasibleError, InputError, PlacementError
from placement.limits import ENV_LIMITS, LimitError

__all__ = [
    "CONFLICT_EXIT",
    "EXIT_CODES",
    "PIPE_CLOSED_EXIT",
    "CliConsole",
    "err",
    "escape",
    "fail",
    "guard",
    "pipe_closed",
]

F = TypeVar("F", bound=Callable[..., Any])


class CliConsole(Console):
    """A rich console whose closed pipe ends the command quietly (`pipe_closed`), not with rich's exit 1."""

    def on_broken_pipe(self) -> None:
        pipe_closed()


err = CliConsole(stderr=True)

EXIT_CODES = {
    0: "done",
    1: "a replay failed (placement replay; the others are written)",
    2: "bad input or usage: a file, field, flag or limit (INVALID_ARGUMENT)",
    3: "infeasible: no answer keeps the hard rules (FAILED_PRECONDITION)",
    4: "a server call failed otherwise: unreachable, deadline, token, overload",
    5: "wait: a placement exists, slower than --max-slowdown x the ideal (nothing started or reserved)",
    6: "conflict: the server's state moved on or is claimed (stale --generation, reserved devices); read it again",
    130: "interrupted (Ctrl-C): whatif and replay finish later with --resume",
}
"""What each exit code of `placement` means (`placement --help` and the README list them); `placement bind` exits
with its command's code, `placement serve` with the server's."""


CONFLICT_EXIT = 6
"""A registry call refused because the stored state moved on (a stale generation, a commit that lost its race) or
its devices are claimed by live reservations: not "infeasible" (3), the same call may succeed on fresh state."""

PIPE_CLOSED_EXIT = 0
"""A reader that closed the pipe early (`placement ... | head -1`) got what it wanted: the command ends quietly."""

WAIT_EXIT = 5
"""`place` and `registry reserve` with --max-slowdown: the answer is WAIT (no launch file, nothing reserved)."""


def fail(msg: str, code: int) -> NoReturn:
    """Print `msg` (rich markup allowed; escape user text) as an error and exit with `code`."""
    err.print(f"[bold red]error:[/] {msg}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(code)


def pipe_closed() -> NoReturn:
    """The reader of our output went away (`placement ... | head -1`): stop quietly with `PIPE_CLOSED_EXIT`.

    What is still buffered for stdout goes to /dev/null, so that the flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass  # stdout is not a file (a test's capture): nothing buffered to drop
    raise typer.Exit(PIPE_CLOSED_EXIT)


def guard(fn: F) -> F:
    """Turn the domain's exceptions raised by a command into `fail` with the right exit code."""

    @functools.wraps(fn)
    def wrapper(*a: Any, **k: Any) -> Any:
        try:
            return fn(*a, **k)
        except BrokenPipeError:
            pipe_closed()
        except LimitError as e:
            fail(escape(str(e)) + f" (raise it with --limits {e.limit_name}=N or {ENV_LIMITS})", 2)
        except InputError as e:
            fail(escape(e.render()), 2)
        except InfeasibleError as e:
            reasons = e.reasons[:RENDER_LIMIT]
            more = (
                f"\n  ... and {len(e.reasons) - len(reasons)} more" if len(e.reasons) > len(reasons) else ""
            )
            fail(
                "no placement satisfies the hard rules:\n"
                + "\n".join(f"  - {escape(r[:500])}" for r in reasons)
                + more,
                3,
            )
        except PlacementError as e:
            fail(escape(str(e)[:2000]), 2)
        except FileNotFoundError as e:
            fail(f"{escape(str(e.filename))}: no such file", 2)
        except IsADirectoryError as e:
            fail(f"{escape(str(e.filename))}: is a directory, not a file", 2)
        except PermissionError as e:
            fail(f"{escape(str(e.filename))}: permission denied", 2)
        except UnicodeDecodeError as e:
            fail(
                f"an input is not UTF-8 text: byte 0x{e.object[e.start]:02x} at byte offset {e.start} "
                f"({escape(e.reason)}); save it as UTF-8",
                2,
            )
        except RecursionError:
            fail("an input is nested too deeply to read", 2)
        except MemoryError:
            fail("an input needs more memory than this machine has; make it smaller or lower a limit", 2)
        except OverflowError as e:
            fail(f"a number in the input is too large: {escape(str(e)[:200])}", 2)
        return None

    return wrapper  # type: ignore[return-value]
