"""Shared by the native file format tests: the node/leaf(/spine) levels of small clusters, writing a dedented
file into tmp_path, the message of the InputError a reader raises, a small job document and a YAML alias bomb."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from placement.errors import InputError

LEVELS2 = [
    {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
    {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
]
LEVELS3 = [*LEVELS2, {"name": "spine", "bandwidth_gbps": 25, "latency_us": 7}]


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def error_of(fn: Any, *args: Any) -> str:
    with pytest.raises(InputError) as info:
        fn(*args)
    return str(info.value)


def job_doc(**over: Any) -> dict[str, Any]:
    """A TP8 x DP2 job document of a 7B model, with `over` replacing its top-level keys."""
    doc: dict[str, Any] = {
        "name": "j",
        "parallel": {"tp": 8, "dp": 2},
        "model": {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096},
    }
    doc.update(over)
    return doc


def yaml_bomb(levels: int = 9) -> str:
    """A YAML document of nested aliases: 9 ** (levels + 1) values once expanded, a few hundred bytes written."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(levels):
        prev, cur = chr(97 + i), chr(98 + i)
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"
