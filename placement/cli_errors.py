"""How every `placement` command reports failure: `error: ...` on stderr and an exit code, never a traceback.

Exit codes: 2 for bad input (file, field, flag), 3 for an infeasible request.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from placement.errors import InfeasibleError, InputError, PlacementError

__all__ = ["err", "escape", "fail", "guard"]

F = TypeVar("F", bound=Callable[..., Any])
err = Console(stderr=True)


def fail(msg: str, code: int) -> None:
    """Print `msg` (rich markup allowed; escape user text) as an error and exit with `code`."""
    err.print(f"[bold red]error:[/] {msg}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(code)


def guard(fn: F) -> F:
    """Turn the domain's exceptions raised by a command into `fail` with the right exit code."""

    @functools.wraps(fn)
    def wrapper(*a: Any, **k: Any) -> Any:
        try:
            return fn(*a, **k)
        except InputError as e:
            fail(escape(e.render()), 2)
        except InfeasibleError as e:
            fail("no placement satisfies the hard rules:\n" + "\n".join(f"  - {escape(r)}" for r in e.reasons), 3)
        except PlacementError as e:
            fail(escape(str(e)), 2)
        except FileNotFoundError as e:
            fail(f"{escape(str(e.filename))}: no such file", 2)
        return None

    return wrapper  # type: ignore[return-value]
