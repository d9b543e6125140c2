"""Format sniffing for topology inputs: which importer a text belongs to, and the one-line refusal when it is not
the importer that was asked.

Owns only recognition; every importer calls `refuse_other_format` before parsing, so a Slurm importer given an
ibnetdiscover dump says so in one line instead of an error per line.
"""

from __future__ import annotations

import re

from placement.errors import InputError, Problem

__all__ = ["FORMATS", "refuse_other_format", "sniff"]

# format key -> (what it is, the command that imports it)
FORMATS: dict[str, tuple[str, str]] = {
    "nvidia-smi": ("`nvidia-smi topo -m` output", "placement import nvidia-smi"),
    "rocm-smi": ("`rocm-smi --showtopo` output", "placement import rocm-smi"),
    "nccl-xml": (
        "an NCCL/RCCL topology XML (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE)",
        "placement import nccl-xml",
    ),
    "nccl-graph": ("an NCCL graph XML (NCCL_GRAPH_FILE: rings and trees, no topology)", ""),
    "ibnetdiscover": ("an `ibnetdiscover` InfiniBand fabric dump", "placement import ibnetdiscover"),
    "topograph-model": ("an NVIDIA topograph cluster model (switches/blocks)", "placement import topograph"),
    "topograph-payload": (
        "an NVIDIA topograph request payload (provider/engine)",
        "placement import topograph",
    ),
    "netq": ("an NVIDIA NetQ topology graph (topograph's netq provider input)", "placement import topograph"),
    "slurm-conf": ("a Slurm topology.conf", "placement import slurm"),
    "slurm-yaml": ("a Slurm topology.yaml", "placement import slurm"),
    "k8s-nodes": ("a Kubernetes node list (kubectl get nodes -o json)", "placement import k8s"),
    # only ever asked for, not sniffed: slurm.conf's NodeName= lines look alike
    "slurm-nodes": (
        "`scontrol -d show node` output (or its --json, or sinfo --json)",
        "placement import slurm-live --nodes",
    ),
    "native": ("a native placement cluster file", "(no import needed: pass it to place/evaluate)"),
}

_ROCM_RE = re.compile(r"ROCm System Management Interface|(Weight|Hops|Link Type) between two GPUs", re.I)
_IBNET_RE = re.compile(r'^(?:Switch|Ca|Rt)\s+\d+\s+"[SHR]-[0-9a-fA-F]+"', re.M)
_IBNET_HEAD_RE = re.compile(r"^(?:switchguid|caguid|sysimgguid)=0x[0-9a-fA-F]+", re.M)
_NVSMI_RE = re.compile(r"^\s*GPU0\s+(?:X\s|GPU1|NIC0|mlx|CPU\s*Affinity)", re.M)
_SLURM_CONF_RE = re.compile(r"^\s*(?:SwitchName|BlockName|RingName|BlockSizes)\s*=", re.M | re.I)
_XML_ROOT_RE = re.compile(r"<\s*(system|graphs)\b")


def sniff(text: str) -> str | None:
    """The format key of `text` (see `FORMATS`), or None when no known format is recognised."""
    head = text.lstrip("\ufeff \t\r\n")[:200_000]
    if head.startswith("<") or "<system" in head[:4000] or "<graphs" in head[:4000]:
        m = _XML_ROOT_RE.search(head)
        if m:
            return "nccl-xml" if m.group(1) == "system" else "nccl-graph"
    if _ROCM_RE.search(head):
        return "rocm-smi"
    if _IBNET_RE.search(head) or _IBNET_HEAD_RE.search(head):
        return "ibnetdiscover"
    if head.startswith("[") and '"compounded_nodes"' in head and '"links"' in head:
        return "netq"
    if head.startswith("{"):
        if re.search(r'"provider"\s*:', head) and re.search(r'"engine"\s*:', head):
            return "topograph-payload"
        if re.search(r'"kind"\s*:\s*"(?:List|NodeList)"', head) or '"items"' in head[:2000]:
            return "k8s-nodes"
        return None
    if re.search(r"^switches\s*:", head, re.M) and re.search(r"^blocks\s*:", head, re.M):
        return "topograph-model"
    if re.search(r"^-?\s*topology\s*:", head, re.M) and re.search(r"\b(tree|block|flat)\s*:", head):
        return "slurm-yaml"
    if _SLURM_CONF_RE.search(head):
        return "slurm-conf"
    if _NVSMI_RE.search(head):
        return "nvidia-smi"
    if re.search(r"^levels\s*:", head, re.M) and re.search(r"^(hosts|generate)\s*:", head, re.M):
        return "native"
    return None


def refuse_other_format(text: str, source: str, expected: str | tuple[str, ...]) -> None:
    """Raise a one-line `InputError` when `text` is recognisably another format than `expected`."""
    wanted = (expected,) if isinstance(expected, str) else expected
    found = sniff(text)
    if found is None or found in wanted:
        return
    what, command = FORMATS[found]
    asked = FORMATS[wanted[0]][0]
    if found == "nccl-graph":
        hint = (
            "it holds NCCL's search result, not the machine; import the <system> topology file "
            "(NCCL_TOPO_FILE or NCCL_TOPO_DUMP_FILE) with `placement import nccl-xml`"
        )
    elif command.startswith("placement"):
        hint = f"use `{command} {source}`"
    else:
        hint = command
    raise InputError(source, [Problem("", f"this is {what}, not {asked}; {hint}")])
