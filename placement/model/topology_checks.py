"""Build-time consistency checks of a `placement.model.topology.Topology` (run by `Topology.build`): levels, hosts
and their domain chains, intra-node matrices, NICs, rails and all-pairs paths; each adds every problem to one `Problems`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from placement.errors import Problems
from placement.limits import checkpoint
from placement.model.devices import HostSpec
from placement.model.links import DEFAULT_INTRA_NODE_TIERS, Level, Tier, intra_node_tier

__all__ = ["check_levels", "check_node_types", "check_pair_paths", "resolve_domains"]


def check_levels(ps: Problems, levels: Sequence[Level]) -> None:
    """Levels: at least one (raised at once if none), unique names, positive bandwidth and oversubscription."""
    if not levels:
        ps.add("levels", "at least one level (the host level) is required")
        ps.raise_if_any()
    seen_levels: set[str] = set()
    for i, lv in enumerate(levels):
        if lv.name in seen_levels:
            ps.add(f"levels[{i}].name", f"level {lv.name!r} is listed twice; level names must be unique")
        seen_levels.add(lv.name)
        if not lv.tier.bandwidth_gbps > 0:
            ps.add(f"levels[{i}].bandwidth_gbps", f"must be > 0, got {lv.tier.bandwidth_gbps:g}")
        if lv.tier.latency_us < 0:
            ps.add(f"levels[{i}].latency_us", f"must be >= 0, got {lv.tier.latency_us:g}")
        if not lv.oversubscription > 0:
            ps.add(
                f"levels[{i}].oversubscription",
                f"must be > 0 (1.0 = non-blocking), got {lv.oversubscription:g}",
            )


def resolve_domains(
    ps: Problems, levels: Sequence[Level], hosts: Sequence[HostSpec]
) -> tuple[list[dict[str, int]], list[dict[int, int]]]:
    """Each host's chain of domains, checked: domain name -> index per level, and child index -> parent index.

    Checks unique valid host names, device counts, known levels, a domain at every level, one parent per domain
    and a single top domain.
    """
    if not hosts:
        ps.add("hosts", "the cluster has no hosts")
    upper = [lv.name for lv in levels[1:]]
    host_seen: dict[str, int] = {}
    # domain name -> index per level; parent consistency checks
    dom_index: list[dict[str, int]] = [{} for _ in levels]
    dom_parent: list[dict[int, int]] = [{} for _ in levels]
    for hi, h in enumerate(hosts):
        if h.name in host_seen:
            ps.add(
                f"hosts[{hi}].name",
                f"host {h.name!r} is listed twice (first at hosts[{host_seen[h.name]}])",
            )
            continue
        host_seen[h.name] = hi
        if "/" in h.name or not h.name:
            ps.add(f"hosts[{hi}].name", f"{h.name!r} is not a valid host name (non-empty, no '/')")
        if h.node_type.devices < 1:
            ps.add(f"hosts[{hi}].devices", f"must be >= 1, got {h.node_type.devices}")
        extra = sorted(set(h.domains) - set(upper))
        if extra:
            ps.add(f"hosts[{hi}].domains", f"unknown level(s) {extra}; the levels above the host are {upper}")
        chain: list[str] = []
        for li, lname in enumerate(upper, start=1):
            dname = h.domains.get(lname)
            if dname is None:
                if li == len(levels) - 1:
                    dname = lname  # the single top domain may be left implicit
                else:
                    ps.add(
                        f"hosts[{hi}].domains.{lname}",
                        "missing; every host names its domain at each level",
                    )
                    dname = f"?{lname}"
            chain.append(dname)
        # register chain
        hidx = dom_index[0].setdefault(h.name, len(dom_index[0]))
        below = hidx
        for li, dname in enumerate(chain, start=1):
            di = dom_index[li].setdefault(dname, len(dom_index[li]))
            prev = dom_parent[li - 1].get(below)
            if prev is not None and prev != di:
                prev_name = next(k for k, v in dom_index[li].items() if v == prev)
                child = next(k for k, v in dom_index[li - 1].items() if v == below)
                ps.add(
                    f"hosts[{hi}].domains.{upper[li - 1]}",
                    f"{levels[li - 1].name} {child!r} is placed under {levels[li].name} {dname!r} here but under "
                    f"{prev_name!r} elsewhere; a domain has one parent",
                )
            dom_parent[li - 1][below] = di
            below = di
    # with one level the hosts are the top level: several hosts there would share no domain, and lca_level
    # would price their cross-host pairs at the host tier
    if len(dom_index[-1]) > 1:
        ps.add(
            f"levels[{len(levels) - 1}]",
            f"the top level {levels[-1].name!r} has {len(dom_index[-1])} domains "
            f"({', '.join(sorted(dom_index[-1])[:4])}{'...' if len(dom_index[-1]) > 4 else ''}); the top level must be one domain: add a level above it",
        )
    return dom_index, dom_parent


def check_node_types(
    ps: Problems, hosts: Sequence[HostSpec], intra_node_tiers: Mapping[str, Tier] | None
) -> None:
    """Per host type: a square symmetric matrix of known link codes, positive NICs and link rates, one rail per
    device."""
    for hi, h in enumerate(hosts):
        nt = h.node_type
        if nt.matrix is not None:
            checkpoint("checking the intra-node matrices")  # a cancelled call stops between hosts
            if len(nt.matrix) != nt.devices or any(len(r) != nt.devices for r in nt.matrix):
                ps.add(f"hosts[{hi}].matrix", f"must be {nt.devices}x{nt.devices} for {nt.devices} devices")
            else:
                tbl = dict(DEFAULT_INTRA_NODE_TIERS) | dict(intra_node_tiers or {})
                for a in range(nt.devices):
                    for b in range(nt.devices):
                        code = nt.matrix[a][b]
                        if a == b:
                            continue
                        if code != nt.matrix[b][a]:
                            ps.add(
                                f"hosts[{hi}].matrix[{a}][{b}]",
                                f"{code!r} differs from [{b}][{a}] {nt.matrix[b][a]!r}; the matrix must be symmetric",
                            )
                        try:
                            intra_node_tier(code, tbl)
                        except KeyError:
                            ps.add(
                                f"hosts[{hi}].matrix[{a}][{b}]",
                                f"unknown link code {code!r}; known: NV#, PIX, PXB, PHB, NODE, SYS, SOC",
                            )
        if nt.nics is not None and nt.nics < 1:
            ps.add(f"hosts[{hi}].nics", f"must be >= 1, got {nt.nics}")
        for fname in ("nic_gbps", "mesh_link_gbps"):
            val = getattr(nt, fname)
            if val is not None and not val > 0:
                ps.add(f"hosts[{hi}].{fname}", f"must be > 0 GB/s, got {val:g}")
        if nt.rails is not None and len(nt.rails) != nt.devices:
            ps.add(f"hosts[{hi}].rails", f"has {len(nt.rails)} entries for {nt.devices} devices")


def check_pair_paths(ps: Problems, paths: Sequence[Sequence[Tier]]) -> None:
    """All-pairs paths: a square matrix with positive bandwidth between distinct devices."""
    n = len(paths)
    if n == 0:
        ps.add("paths", "the device graph has no devices")
    for i, row in enumerate(paths):
        if len(row) != n:
            ps.add(f"paths[{i}]", f"has {len(row)} entries for {n} devices")
        for j, t in enumerate(row):
            if i != j and not t.bandwidth_gbps > 0:
                ps.add(
                    f"paths[{i}][{j}]",
                    f"bandwidth must be > 0, got {t.bandwidth_gbps:g} (the devices are not connected)",
                )
