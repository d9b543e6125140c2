"""Shared helpers of the Slurm importer tests (placement.io.importers.slurm): read the levels, domains and hosts of an
imported cluster document, the problem texts of an InputError, and the invariants of every import."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from placement.errors import InputError


def level_names_of(cluster: dict[str, Any]) -> list[str]:
    return [level["name"] for level in cluster["levels"]]


def domain_sizes(cluster: dict[str, Any], level: str) -> Counter[str]:
    """Host count per domain of one level."""
    return Counter(host["domains"][level] for host in cluster["hosts"])


def host_of(cluster: dict[str, Any], name: str) -> dict[str, Any]:
    return next(h for h in cluster["hosts"] if h["name"] == name)


def problem_texts(err: pytest.ExceptionInfo[InputError]) -> list[str]:
    return [str(p) for p in err.value.problems]


def check_common(cluster: dict[str, Any]) -> None:
    """Invariants of every importer result: node first, each host once, a domain on every level, one top."""
    names = level_names_of(cluster)
    assert names[0] == "node"
    assert len(set(names)) == len(names)
    hosts = [h["name"] for h in cluster["hosts"]]
    assert len(set(hosts)) == len(hosts)
    for host in cluster["hosts"]:
        assert list(host["domains"]) == names[1:]
    assert len(domain_sizes(cluster, names[-1])) == 1
