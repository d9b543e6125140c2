"""A cluster fabric read from a dump (topograph, ibnetdiscover): `ImportedFabric`, what the fabric importers
return, and `nest_levels`, which turns candidate levels (a domain per host each) into the strict tree the native
format wants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from placement.errors import InputError, Problem, Problems
from placement.io.importers.levels import check_level_names

__all__ = ["ImportedFabric", "fabric_from_levels", "nest_levels"]


@dataclass
class ImportedFabric:
    """A cluster fabric read from a file: the explicit-hosts native dict (``name``, ``levels`` bottom up from
    ``node``, ``hosts`` with ``domains``), each level's role (``node``, ``accel``, ``switch``), and per host
    the NICs the fabric saw (``(rail, GB/s)``, for ibnetdiscover)."""

    doc: dict[str, Any]
    roles: list[str]
    warnings: list[str] = field(default_factory=list)
    host_nics: dict[str, list[tuple[int | None, float | None]]] = field(default_factory=dict)
    rail_optimized: bool = False


def nest_levels(
    hosts: Sequence[str], candidates: Sequence[tuple[str, str, Mapping[str, str]]], warnings: list[str]
) -> tuple[list[tuple[str, str]], list[dict[str, str]]]:
    """Keep the candidate levels (name, role, host -> domain) that nest: every domain of the level below lies
    in one domain of this one. Drops the others and the ones that repeat the partition below, with a warning;
    adds ``cluster`` on top when the top level has several domains. Returns the kept (name, role) and, per
    host, its domain at each kept level."""
    kept: list[tuple[str, str]] = []
    chains: list[dict[str, str]] = [{} for _ in hosts]
    below: list[str] = list(hosts)
    for name, role, dom in candidates:
        column = [dom.get(h, below[k]) for k, h in enumerate(hosts)]
        parent: dict[str, str] = {}
        split = ""
        for low, up in zip(below, column, strict=True):
            if parent.setdefault(low, up) != up and not split:
                split = f"{low!r} lies in both {parent[low]!r} and {up!r}"
        if split:
            warnings.append(f"level {name!r} dropped: its domains do not nest in the level below ({split})")
            continue
        if len(set(column)) == len(set(below)):
            continue  # the same partition as the level below (an NVL72 rack on its own leaf switch)
        kept.append((name, role))
        for k, d in enumerate(column):
            chains[k][name] = d
        below = column
    if len(set(below)) > 1 or not kept:
        if any(n == "cluster" for n, _ in kept):
            raise InputError("levels", [Problem("", "the name 'cluster' is taken; the top level needs it")])
        kept.append(("cluster", "switch"))
        for c in chains:
            c["cluster"] = "cluster"
    return kept, chains


def fabric_from_levels(
    name: str,
    hosts: Sequence[str],
    candidates: Sequence[tuple[str, str, Mapping[str, str]]],
    warnings: list[str],
    level_names: Sequence[str] | None,
    source: str,
) -> ImportedFabric:
    """The fabric of `hosts` from candidate levels (`nest_levels`), its levels renamed to `level_names` when
    given (checked: one name per kept level, bottom up)."""
    kept, chains = nest_levels(hosts, candidates, warnings)
    names = [n for n, _ in kept]
    if level_names is not None:
        ps = Problems(source)
        given = list(level_names)
        if len(given) != len(names):
            ps.add(
                "level_names",
                f"has {len(given)} name(s) but the fabric has {len(names)} level(s) above the "
                f"hosts ({', '.join(names)}), named bottom-up",
            )
        else:
            check_level_names(given, ps)
        ps.raise_if_any()
        rename = dict(zip(names, given, strict=True))
        chains = [{rename[k]: v for k, v in c.items()} for c in chains]
        names = given
    doc = {
        "name": name,
        # an NVLink domain (NVL72 rack, or a part of one) is marked so that NVLS runs across its trays
        "levels": [
            {"name": "node"},
            *(
                {"name": n, "nvlink": True} if kind == "accel" else {"name": n}
                for (_, kind), n in zip(kept, names, strict=True)
            ),
        ],
        "hosts": [{"name": h, "domains": c} for h, c in zip(hosts, chains, strict=True)],
    }
    return ImportedFabric(doc, ["node", *(r for _, r in kept)], warnings)
