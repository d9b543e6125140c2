"""What an imported cluster says about each host's NICs, and the warning where its source is silent: ``nics`` (how
many) and ``nic_gbps`` (GB/s each, a direction) of a node type, which `placement.cost.collectives` prices host NICs by.

Which source knows what:

* NCCL / RCCL XML: the ``<net>`` elements (count) and their ``speed`` (Mb/s / 8000 = GB/s) (`nccl_xml`);
* ibnetdiscover: the HCA ports of a host (count) and their link rate, e.g. ``4xNDR`` = 50 GB/s (`ibnetdiscover`);
* nvidia-smi ``topo -m``: the NIC columns (``NIC0``.., ``mlx5_0``..) give the count; the speed is not printed;
* topograph models and payloads, Slurm's topology.conf / topology.yaml, Kubernetes labels: neither.

Without ``nics`` the model takes one NIC per device; without ``nic_gbps`` each NIC runs at the level-1 tier's
bandwidth. Both are guesses that make the TP-across-the-NIC cliff wrong by up to the NIC count (issue 25), so
`nic_warnings` names every node type an import leaves without them, and says how to state them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["nic_fields", "nic_warnings"]


def nic_fields(names: Sequence[str], gbps: float | None = None) -> dict[str, Any]:
    """The node-type fields for a host with the NICs `names` (``nics``, when there is any) of `gbps` GB/s each
    (``nic_gbps``, when known)."""
    out: dict[str, Any] = {}
    if names:
        out["nics"] = len(names)
    if gbps is not None and gbps > 0:
        out["nic_gbps"] = gbps
    return out


def nic_warnings(doc: Mapping[str, Any], source: str) -> list[str]:
    """A warning for each node type (and for the hosts without one) of the cluster document `doc` that states no
    NIC count or no NIC speed; `source` names what was imported (``the Slurm topology``, ``the nvidia-smi table``)."""
    hosts = [h for h in doc.get("hosts") or [] if isinstance(h, Mapping)]
    uses = Counter(str(h.get("node_type")) for h in hosts if h.get("node_type") is not None)
    typed = {str(t.get("name")): t for t in doc.get("node_types") or [] if isinstance(t, Mapping)}
    for g in doc.get("generate") or []:
        if isinstance(g, Mapping) and g.get("node_type") is not None:
            uses[str(g["node_type"])] += int(g.get("nodes") or 0)
    out: list[str] = []
    how = "state them in node_types, or import the node's NCCL XML (its <net speed>) with --node-topo"
    bare = [str(h.get("name")) for h in hosts if h.get("node_type") is None]
    if bare:
        out.append(
            f"{source} names no NICs: {len(bare)} host(s) ({bare[0]}{', ...' if len(bare) > 1 else ''}) get the "
            f"default, one NIC per device at the level-1 tier's bandwidth; {how}"
        )
    for name, t in typed.items():
        n = uses.get(name, 0)
        where = f"node type {name} ({n} host(s))"
        if t.get("nics") is None and t.get("nic_gbps") is None:
            out.append(
                f"{source} names no NICs for {where}: one NIC per device at the level-1 tier's bandwidth is "
                f"assumed; {how}"
            )
        elif t.get("nic_gbps") is None:
            out.append(
                f"{source} gives {where} {t['nics']} NIC(s) but not their speed: nic_gbps is left unset (each "
                f"NIC runs at the level-1 tier's bandwidth); {how}"
            )
    return out
