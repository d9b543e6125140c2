"""topology.conf reading: logical lines, tokens and statements after Slurm's config parser, and which plugin
(tree, block, ring) the file describes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from placement.errors import Problems
from placement.io.importers.slurm.common import _KINDS, _Group, _Value

# ---------------------------------------------------------------------------------------------------------
# topology.conf: lines, tokens, statements


@dataclass(frozen=True)
class _Token:
    line: int
    key: str
    value: str
    key_where: str
    value_where: str


_KEY_CHARS = re.compile(r"[A-Za-z0-9_]")
_LOOKS_LIKE_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*=")
_FIRST_KEYS = {"switchname": "tree", "blockname": "block", "ringname": "ring", "blocksizes": "block"}
_FOLLOW_KEYS = {
    "switchname": ("Switches", "Nodes", "LinkSpeed"),
    "blockname": ("Nodes",),
    "ringname": ("Nodes",),
    "blocksizes": (),
}
_CANONICAL = {
    "switchname": "SwitchName",
    "blockname": "BlockName",
    "ringname": "RingName",
    "blocksizes": "BlockSizes",
    "switches": "Switches",
    "nodes": "Nodes",
    "linkspeed": "LinkSpeed",
}


def _logical_lines(text: str) -> list[list[tuple[str, int, int]]]:
    """Split into logical lines of (char, line, column): comments cut, ``\\`` continuations joined."""
    if text.startswith("\ufeff"):
        text = text[1:]
    out: list[list[tuple[str, int, int]]] = []
    pending: list[tuple[str, int, int]] = []
    for number, physical in enumerate(text.split("\n"), start=1):
        physical = physical.removesuffix("\r")
        chars: list[tuple[str, int, int]] = []
        i = 0
        while i < len(physical):
            char = physical[i]
            if char == "\\" and physical[i + 1 : i + 2] == "#":
                chars.append(("#", number, i + 1))
                i += 2
                continue
            if char == "#":
                break
            chars.append((char, number, i + 1))
            i += 1
        while chars and chars[-1][0].isspace():
            chars.pop()
        if chars and chars[-1][0] == "\\":
            pending.extend(chars[:-1])
            continue
        pending.extend(chars)
        if pending:
            out.append(pending)
        pending = []
    if pending:
        out.append(pending)
    return out


def _tokenize(chars: list[tuple[str, int, int]], problems: Problems) -> list[_Token] | None:
    """``Key=Value`` tokens of one logical line (Slurm also allows spaces around ``=`` and quoted values)."""

    def at(i: int) -> str:
        _, line, col = chars[min(i, len(chars) - 1)]
        return f"line {line}, column {col + (1 if i >= len(chars) else 0)}"

    tokens: list[_Token] = []
    n = len(chars)
    i = 0
    while True:
        while i < n and chars[i][0].isspace():
            i += 1
        if i >= n:
            return tokens
        start = i
        while i < n and _KEY_CHARS.match(chars[i][0]):
            i += 1
        key = "".join(c for c, _, _ in chars[start:i])
        if not key:
            problems.add(at(start), f'unexpected "{chars[start][0]}"; expected Key=Value')
            return None
        while i < n and chars[i][0] in " \t":
            i += 1
        if i >= n or chars[i][0] != "=":
            if key.lower() == "include":
                problems.add(at(start), "Include lines are not supported; paste the included lines here")
            else:
                problems.add(at(start), f'expected "=" after "{key}"; write {key}=Value')
            return None
        i += 1
        value_start = i
        while i < n and chars[i][0] in " \t":
            i += 1
        spaced = i > value_start
        if i < n and chars[i][0] == '"':
            close = next((j for j in range(i + 1, n) if chars[j][0] == '"'), None)
            if close is None:
                problems.add(at(i), f'the quote opened after "{key}=" is never closed')
                return None
            value = "".join(c for c, _, _ in chars[i + 1 : close])
            where = at(i + 1) if i + 1 < close else at(i)
            i = close + 1
        else:
            run_start = i
            while i < n and not chars[i][0].isspace():
                i += 1
            value = "".join(c for c, _, _ in chars[run_start:i])
            if spaced and _LOOKS_LIKE_KEY.match(value):
                # "Nodes= LinkSpeed=1": an empty value, the next token is a key of its own.
                value, i = "", run_start
                where = at(value_start)
            else:
                where = at(run_start) if value else at(value_start)
        tokens.append(_Token(chars[start][1], key, value, at(start), where))


def _conf_statements(text: str, problems: Problems) -> list[tuple[int, str, _Group | None, _Value | None]]:
    """(first line, kind, group, BlockSizes value) per meaningful line."""
    out: list[tuple[int, str, _Group | None, _Value | None]] = []
    for chars in _logical_lines(text):
        tokens = _tokenize(chars, problems)
        if not tokens:
            continue
        head = tokens[0]
        lead = head.key.lower()
        if lead not in _FIRST_KEYS:
            if lead in ("nodes", "switches", "linkspeed"):
                problems.add(
                    head.key_where,
                    f'"{head.key}=" must follow SwitchName=, BlockName= or RingName= on the same line',
                )
            else:
                problems.add(
                    head.key_where,
                    f'unknown key "{head.key}"; a line starts with SwitchName=, '
                    "BlockName=, RingName= or BlockSizes=",
                )
            continue
        allowed = {k.lower(): k for k in _FOLLOW_KEYS[lead]}
        seen: dict[str, _Token] = {}
        ok = True
        for token in tokens[1:]:
            low = token.key.lower()
            if low not in allowed:
                ok = False
                takes = ", ".join(f"{k}=" for k in _FOLLOW_KEYS[lead])
                rule = (
                    f"a {_CANONICAL[lead]}= line takes {takes}"
                    if takes
                    else (f"{_CANONICAL[lead]}= stands alone on its line")
                )
                problems.add(token.key_where, f'unknown key "{token.key}"; {rule}')
            elif low in seen:
                ok = False
                problems.add(
                    token.key_where,
                    f'"{allowed[low]}=" is given twice on this line (first at {seen[low].key_where})',
                )
            else:
                seen[low] = token
        line = head.line
        kind = _FIRST_KEYS[lead]
        if lead == "blocksizes":
            out.append((line, kind, None, _Value(head.value, head.value_where)))
            continue
        if not head.value:
            problems.add(head.value_where, f"{_CANONICAL[lead]}= is empty; every {kind} needs a name")
            ok = False
        if not ok:
            out.append((line, kind, None, None))
            continue
        nodes = seen.get("nodes")
        switches = seen.get("switches")
        out.append(
            (
                line,
                kind,
                _Group(
                    head.value,
                    head.value_where,
                    _Value(nodes.value, nodes.value_where) if nodes else None,
                    _Value(switches.value, switches.value_where) if switches else None,
                ),
                None,
            )
        )
    return out


def _pick_kind(
    topology: str | None, first_line: dict[str, int], problems: Problems, warnings: list[str]
) -> str | None:
    found = [k for k in _KINDS if k in first_line]
    if topology is not None:
        wanted = topology.strip().lower().removeprefix("topology/")
        if wanted not in _KINDS:
            problems.add("topology", f'"{topology}" is not one of "tree", "block", "ring"')
            return None
        if wanted not in first_line:
            has = ", ".join(found) if found else "no definitions at all"
            problems.add(
                "topology",
                f'"{topology}" was asked for but the file has no {wanted} definitions (it has: {has})',
            )
            return None
        ignored = [k for k in found if k != wanted]
        if ignored:
            warnings.append(f"ignored the {' and '.join(ignored)} definitions; imported the {wanted} ones")
        return wanted
    if not found:
        if not problems:
            problems.add("", "no SwitchName=, BlockName= or RingName= lines: nothing to import")
        return None
    if len(found) > 1:
        parts = " and ".join(f"{k} (line {first_line[k]})" for k in found)
        choices = " or ".join(f'topology="{k}"' for k in found)
        problems.add("", f"the file mixes {parts} definitions; pass {choices}")
        return None
    return found[0]


def _conf_block_sizes(value: _Value, problems: Problems) -> list[tuple[int, str]] | None:
    if not value.text:
        problems.add(value.where, "BlockSizes= is empty; give sizes in nodes, e.g. BlockSizes=8,16,32")
        return None
    entries: list[tuple[int, str]] = []
    for part in value.text.split(","):
        text = part.strip()
        if not text.isdigit() or not text.isascii() or int(text) <= 0:
            problems.add(value.where, f'BlockSizes entry "{text}" is not a positive whole number of nodes')
            return None
        entries.append((int(text), value.where))
    return entries
