"""Shared by the native file format tests: the node/leaf(/spine) levels of small clusters, writing a dedented
file into tmp_path, and the message of the InputError a reader raises."""

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
