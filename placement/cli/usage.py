"""Usage errors of a command without importing it: the command's parser registrations, kept in
`placement.cli.usage_table`, replayed on click's own option parser, so that a wrong option or a missing argument
is reported (same words, same exit code 2) before the solver stack behind the command is imported.

Only what is certain is reported here; anything else (a value whose conversion is not obvious, help) is left to
the command itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from typer._click import Context
from typer._click.exceptions import BadParameter, MissingParameter
from typer._click.parser import _OptionParser
from typer._click.utils import _escape_control_characters

from placement.cli.errors import fail
from placement.cli.help import Command
from placement.cli.usage_table import USAGE

__all__ = ["INPUTS", "InputsRule", "check_usage"]

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_NOT_A_NUMBER_WORDS = {"inf", "infinity", "nan"}


@dataclass(frozen=True)
class InputsRule:
    """A command's inputs: every parameter of `together`, or `alone` instead. The command checks it first (exit
    2), and `check_usage` checks it before the command is imported."""

    together: tuple[str, ...]
    alone: str
    missing: str
    both: str

    def problem(self, given: Mapping[str, object]) -> str | None:
        """The message for the parameters `given` (None: the rule holds)."""
        alone = given.get(self.alone) is not None
        parts = [given.get(k) is not None for k in self.together]
        if alone and any(parts):
            return self.both
        if not alone and not all(parts):
            return self.missing
        return None


INPUTS: dict[str, InputsRule] = {
    "place": InputsRule(
        ("cluster", "job"),
        "request",
        missing="missing CLUSTER and JOB (or --request FILE)",
        both="give either CLUSTER JOB or --request FILE, not both",
    ),
}
"""Commands whose inputs come in one of two forms."""


class _Param:
    """One parameter of a command, as the table holds it: what click's parser needs (`obj` of its
    registrations) and what processing it needs (required, kind of value, error hint, messages)."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.dest: str = row["dest"]
        self.option: bool = row["option"]
        self.required: bool = row["required"]
        self.kind: str = row["kind"]  # safe, int, float, or unsure
        self.hint: str = row["hint"]
        self.bad: str | None = row.get("bad")  # the command's message for a word where a number belongs
        self.envvar: list[str] = list(row.get("envvar", []))
        self.eager: bool = row.get("eager", False)
        self.help: bool = row.get("help", False)
        self.adds: list[dict[str, Any]] = row["adds"]


class _Usage(Command):
    """A stand-in for the command in an error message: its usage line, nothing else."""

    def __init__(self, name: str, pieces: list[str]) -> None:
        super().__init__(name)
        self._pieces = pieces

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        return list(self._pieces)


def _bad_value(p: _Param, value: Any) -> bool | None:
    """True: the value is certainly refused; False: certainly taken; None: not sure (let the command decide)."""
    if p.kind == "safe":
        return False
    if p.kind not in ("int", "float") or not isinstance(value, str):
        return None
    pattern = _INT if p.kind == "int" else _FLOAT
    if pattern.fullmatch(value):
        return False
    if p.bad is not None and value.isalpha() and value.lower() not in _NOT_A_NUMBER_WORDS:
        return True
    return None


def check_usage(parent: Context, name: str, args: Sequence[str]) -> None:
    """Raise the usage error the command `name` would raise for `args`, when it certainly would; else return
    (the command is then loaded and parses `args` itself)."""
    spec = USAGE.get(name)
    if spec is None:
        return
    helps = set(parent.help_option_names)
    head = list(args[: list(args).index("--")]) if "--" in args else list(args)
    if any(a in helps or a.split("=", 1)[0] in helps for a in head):
        return
    if not args and spec.get("no_args_is_help"):
        return
    params = [_Param(row) for row in spec["params"]]
    cmd = _Usage(name, spec["usage"])
    ctx = cmd.context_class(cmd, info_name=name, parent=parent)
    parser = _OptionParser(ctx)
    for p in params:
        for add in p.adds:
            if add["what"] == "option":
                parser.add_option(
                    obj=p,  # type: ignore[arg-type]  # the parser only records it in the order
                    opts=add["opts"],
                    dest=add["dest"],
                    action=add["action"],
                    nargs=add["nargs"],
                    const=add["const"],
                )
            else:
                parser.add_argument(obj=p, dest=add["dest"], nargs=add["nargs"])  # type: ignore[arg-type]
    opts, extra, seen = parser.parse_args(list(args))  # the parser's own errors, as the command raises them
    order: list[Any] = list(seen)
    if any(isinstance(p, _Param) and p.help for p in order):
        return

    def key(p: _Param) -> tuple[bool, float]:
        return not p.eager, float(order.index(p)) if p in order else float("inf")

    for p in sorted(params, key=key):
        value = opts.get(p.dest)
        if value is None or value == ():
            if p.required and not any(os.environ.get(v) for v in p.envvar):
                raise MissingParameter(
                    ctx=ctx, param_hint=p.hint, param_type="option" if p.option else "argument"
                )
            continue
        values = value if isinstance(value, list | tuple) else [value]
        verdicts = {_bad_value(p, v) for v in values}
        if None in verdicts:
            return
        if True in verdicts:
            raise BadParameter(p.bad or "", ctx=ctx, param_hint=p.hint)
    if extra:
        words = " ".join(_escape_control_characters(str(a)) for a in extra)
        ctx.fail(f"Got unexpected extra argument(s) ({words})")
    rule = INPUTS.get(name)
    problem = rule.problem(opts) if rule is not None else None
    if problem is not None:
        fail(problem, 2)
