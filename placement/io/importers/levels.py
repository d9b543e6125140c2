"""Rules shared by the importers for user-given level names (Slurm `--levels`, Kubernetes `--level-names`)."""

from __future__ import annotations

from collections.abc import Sequence

from placement.errors import Problems

__all__ = ["check_level_names"]


def check_level_names(given: Sequence[object], problems: Problems) -> list[str] | None:
    """The names if each is a non-empty string, none is "node" (the host level) and none repeats; else None,
    with a problem per bad entry at ``level_names[i]``."""
    ok = True
    seen: set[str] = set()
    for i, level in enumerate(given):
        if not isinstance(level, str) or not level.strip():
            problems.add(f"level_names[{i}]", f"must be a non-empty string, got {level!r}")
            ok = False
        elif level == "node":
            problems.add(f"level_names[{i}]", '"node" is the host level; choose another name')
            ok = False
        elif level in seen:
            problems.add(f"level_names[{i}]", f'"{level}" is used twice; level names must be unique')
            ok = False
        else:
            seen.add(level)
    return [str(x) for x in given] if ok else None
