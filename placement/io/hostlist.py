"""Slurm hostlist expressions: expand ``node[001-016,020]`` into names and compress names back.

Owns only the syntax; the importers (``slurm``, ``k8s``) and exporters call it and report its problems.

Grammar (a subset of Slurm's, covering everything topology files use)::

    hostlist := element ("," element)*          # commas inside brackets do not split
    element  := (text | "[" item ("," item)* "]")+
    item     := number | number "-" number      # low-high, inclusive, low <= high

* Every bracket group of one element multiplies out, the leftmost group varying slowest:
  ``rack[1-2]-node[01-02]`` -> rack1-node01, rack1-node02, rack2-node01, rack2-node02.
* A range is zero-padded to the width of its *low* bound, like Slurm: ``[01-10]`` -> 01 .. 10,
  ``[1-10]`` -> 1 .. 10, ``[001-016]`` -> 001 .. 016.
* Order and duplicates are kept exactly as written; nothing is sorted.

`compress_hostlist` is the inverse: ``expand_hostlist(compress_hostlist(names)) == names`` for every
list of names without brackets, commas or whitespace. It merges neighbours in the given order only,
so pass ``sort=True`` (or sorted names) for the most compact form.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from placement.errors import InputError, Problem

__all__ = ["MAX_HOSTS", "compress_hostlist", "expand_hostlist"]

MAX_HOSTS = 1_000_000
"""An expression may expand to at most this many names (a guard against ``n[0-999999999]``)."""

_FORBIDDEN = frozenset("[],")
_TRAILING_NUMBER = re.compile(r"^(.*?)([0-9]+)$", re.DOTALL)


class _Syntax(Exception):
    """One syntax error inside a hostlist expression, at a 1-based character position."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


def expand_hostlist(expr: str, *, source: str = "hostlist", path: str = "") -> list[str]:
    """Expand a Slurm hostlist expression into the names it stands for, in written order.

    Raises `InputError(source, [Problem(path, ...)])` for an empty expression or element, an unbalanced
    or nested bracket, a bracket without numbers, a backwards range (``node[5-3]``), or an expression
    that expands to more than `MAX_HOSTS` names.

    >>> expand_hostlist("node[001-003,020],login1")
    ['node001', 'node002', 'node003', 'node020', 'login1']
    """
    try:
        return _expand(expr)
    except _Syntax as err:
        shown = expr if len(expr) <= 200 else expr[:197] + "..."
        raise InputError(source, [Problem(path, f'hostlist "{shown}": {err.message}')]) from None


def compress_hostlist(names: Iterable[str], *, sort: bool = False) -> str:
    """Write names as one hostlist expression, merging runs of consecutive numbers.

    Only the trailing number of a name is ranged (``switch.1.10`` -> prefix ``switch.1.``, number 10).
    Neighbours merge when they share the prefix and the number goes up by one with the same zero
    padding. With ``sort=True`` names are first ordered by (prefix, number), the usual compact form.
    Raises `ValueError` for an empty name or one containing ``[``, ``]``, ``,`` or whitespace.

    >>> compress_hostlist(["node01", "node02", "node03", "node07", "login1"])
    'node[01-03,07],login1'
    """
    items = list(names)
    for name in items:
        if not name or any(c in _FORBIDDEN or c.isspace() for c in name):
            raise ValueError(
                f"cannot write {name!r} in a hostlist: names must be non-empty and free of "
                "brackets, commas and whitespace"
            )
    if sort:
        items.sort(key=_sort_key)

    out: list[str] = []
    # Current group: prefix plus ranges [(low_text, low, high)], low_text fixing the padding.
    prefix: str | None = None
    ranges: list[tuple[str, int, int]] = []

    def flush() -> None:
        if prefix is None:
            return
        if len(ranges) == 1 and ranges[0][1] == ranges[0][2]:
            out.append(prefix + ranges[0][0])
            return
        parts = [
            low_text if low == high else f"{low_text}-{_pad(high, len(low_text))}"
            for low_text, low, high in ranges
        ]
        out.append(f"{prefix}[{','.join(parts)}]")

    for name in items:
        match = _TRAILING_NUMBER.match(name)
        if match is None:
            flush()
            prefix, ranges = None, []
            out.append(name)
            continue
        head, digits = match.group(1), match.group(2)
        number = int(digits)
        if prefix == head and ranges:
            low_text, low, high = ranges[-1]
            if number == high + 1 and _pad(number, len(low_text)) == digits:
                ranges[-1] = (low_text, low, number)
            else:
                ranges.append((digits, number, number))
            continue
        flush()
        prefix, ranges = head, [(digits, number, number)]
    flush()
    return ",".join(out)


def _sort_key(name: str) -> tuple[str, int, int, str]:
    match = _TRAILING_NUMBER.match(name)
    if match is None:
        return (name, -1, 0, name)
    return (match.group(1), int(match.group(2)), len(match.group(2)), name)


def _pad(number: int, width: int) -> str:
    return str(number).zfill(width)


def _expand(expr: str) -> list[str]:
    if not expr.strip():
        raise _Syntax("is empty; give at least one name", 1)
    names: list[str] = []
    for start, element in _split_top_level(expr):
        stripped = element.strip()
        if not stripped:
            where = "after the last comma" if start > len(expr) - 1 else f"at character {start + 1}"
            raise _Syntax(f"empty name {where}; remove the extra comma", start + 1)
        offset = start + (len(element) - len(element.lstrip()))
        for i, char in enumerate(stripped):
            if char.isspace():
                raise _Syntax(
                    f"whitespace inside a name at character {offset + i + 1}; separate names with commas",
                    offset + i + 1,
                )
        expanded = _expand_element(stripped, offset)
        if len(names) + len(expanded) > MAX_HOSTS:
            raise _Syntax(f"expands to more than {MAX_HOSTS} names", start + 1)
        names.extend(expanded)
    return names


def _split_top_level(expr: str) -> list[tuple[int, str]]:
    """Split at commas outside brackets; return (0-based start, text) pairs."""
    parts: list[tuple[int, str]] = []
    depth = 0
    start = 0
    for i, char in enumerate(expr):
        if char == "[":
            if depth:
                raise _Syntax(f'nested "[" at character {i + 1}; brackets do not nest', i + 1)
            depth = 1
        elif char == "]":
            if not depth:
                raise _Syntax(f'"]" at character {i + 1} has no matching "["', i + 1)
            depth = 0
        elif char == "," and not depth:
            parts.append((start, expr[start:i]))
            start = i + 1
    if depth:
        opened = expr.rfind("[")
        raise _Syntax(f'"[" at character {opened + 1} is never closed with "]"', opened + 1)
    parts.append((start, expr[start:]))
    return parts


def _expand_element(element: str, offset: int) -> list[str]:
    """Expand one comma-free (at top level) element; `offset` is its 0-based start in the expression."""
    pieces: list[list[str]] = []
    i = 0
    total = 1
    while i < len(element):
        if element[i] != "[":
            j = element.find("[", i)
            j = len(element) if j < 0 else j
            pieces.append([element[i:j]])
            i = j
            continue
        close = element.index("]", i)  # balanced: checked by _split_top_level
        choices = _expand_bracket(element[i + 1 : close], offset + i + 1)
        total *= len(choices)
        if total > MAX_HOSTS:
            raise _Syntax(f"expands to more than {MAX_HOSTS} names", offset + i + 1)
        pieces.append(choices)
        i = close + 1
    names = [""]
    for choices in pieces:
        names = [head + tail for head in names for tail in choices]
    return names


def _expand_bracket(body: str, offset: int) -> list[str]:
    """Expand the inside of one ``[...]``; `offset` is the 0-based position of its first character."""
    if not body.strip():
        raise _Syntax(f'empty brackets "[]" at character {offset}; put numbers or ranges inside', offset)
    out: list[str] = []
    position = offset
    for item in body.split(","):
        col = position + 1
        position += len(item) + 1
        text = item.strip()
        if not text:
            raise _Syntax(f"empty entry inside brackets at character {col}", col)
        low_text, dash, high_text = text.partition("-")
        if (
            not low_text.isdigit()
            or not low_text.isascii()
            or (dash and (not high_text.isdigit() or not high_text.isascii()))
        ):
            raise _Syntax(f'"{text}" at character {col} is not a number or a low-high range of numbers', col)
        low = int(low_text)
        high = int(high_text) if dash else low
        if high < low:
            raise _Syntax(
                f'range "{text}" at character {col} runs backwards; write the lower bound first '
                f'("{high_text}-{low_text}")',
                col,
            )
        if high - low + 1 + len(out) > MAX_HOSTS:
            raise _Syntax(f'range "{text}" at character {col} has more than {MAX_HOSTS} numbers', col)
        width = len(low_text)
        out.extend(_pad(n, width) for n in range(low, high + 1))
    return out
