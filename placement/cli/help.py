"""How every `placement` command's help reads: positionals as NAME, [NAME] (optional) or NAME... in usage lines
and errors, flags without a `<bool>` type; the `Command` and `Group` classes every command and group is built with.
"""

from __future__ import annotations

import inspect
from typing import Any

import typer

# typer 0.29 vendors click as typer._click: its command classes, contexts and parameters are built on it
from typer._click import Context, Parameter
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

__all__ = ["Command", "Group", "command_app", "reflow", "usage_name"]


def usage_name(param: TyperArgument) -> str:
    """A positional in a usage line: CLUSTER when required, [CLUSTER] when optional, with ... when repeated."""
    name = param.metavar or (param.name or "").upper()
    name = name if param.required else f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


def _plain(params: list[Parameter]) -> list[Parameter]:
    """Positionals named in upper case (the help panel, usage line and errors agree); flags typeless."""
    for p in params:
        if isinstance(p, TyperArgument) and p.metavar is None:
            p.metavar = (p.name or "").upper()
        elif isinstance(p, TyperOption) and p.is_flag and p.metavar is None:
            p.metavar = ""  # a flag (--x/--no-x) takes no value: no `<bool>` beside it
    return params


def reflow(text: str | None) -> str | None:
    """A docstring as help: paragraphs kept, the line breaks inside each one dropped (the terminal wraps them)."""
    if not text:
        return text
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


class Command(TyperCommand):
    """A command whose usage line spells positionals one way (`usage_name`), whose flags show no type, and whose
    help paragraphs wrap at the terminal's width, not at the docstring's line breaks."""

    def __init__(self, name: str | None, **settings: Any) -> None:
        settings["help"] = reflow(settings.get("help"))
        super().__init__(name, **settings)

    def get_params(self, ctx: Context) -> list[Parameter]:
        return _plain(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for p in self.get_params(ctx):
            pieces += [usage_name(p)] if isinstance(p, TyperArgument) else p.get_usage_pieces(ctx)
        return pieces


class Group(TyperGroup):
    """A group of commands whose own options and help read as `Command`'s do."""

    def __init__(self, **settings: Any) -> None:
        settings["help"] = reflow(settings.get("help"))
        super().__init__(**settings)

    def get_params(self, ctx: Context) -> list[Parameter]:
        return _plain(super().get_params(ctx))


def command_app(**settings: Any) -> typer.Typer:
    """The typer app of one command module: `Group` for groups, no shell-completion options (the root has none)."""
    return typer.Typer(**{"cls": Group, "add_completion": False, **settings})
