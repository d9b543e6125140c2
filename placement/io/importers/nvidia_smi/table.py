"""The validated `nvidia-smi topo -m` table (`NvidiaSmiTopology`) and the link-code vocabulary every stage of
the reader shares: code and name patterns, NIC closeness ranks."""

from __future__ import annotations

import re
from dataclasses import dataclass

_CODE_ALT = r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC"
_CODE_RE = re.compile(rf"(?:{_CODE_ALT})")
_CODE_PART_RE = re.compile(_CODE_ALT)
_GLUED_CODES_RE = re.compile(rf"(?:{_CODE_ALT})+")
# codes glued to a following affinity cell; only when the last code is not NV# (NV12 + 0-23 is ambiguous)
_GLUED_AFF_RE = re.compile(rf"((?:{_CODE_ALT})*(?:X|PIX|PXB|PHB|NODE|SYS|SOC))(\d[\d,\-]*)")
_AFF_LIKE_RE = re.compile(r"[Nn]/?[Aa]|\d\S*")
_LABEL_RE = re.compile(r"CPU\s*Affinity|NUMA\s*Affinity|GPU\s*NUMA\s*ID", re.IGNORECASE)
_LABELS = {"cpuaffinity": "CPU Affinity", "numaaffinity": "NUMA Affinity", "gpunumaid": "GPU NUMA ID"}
_NAME_PART_RE = re.compile(r"GPU\d+|NIC\d+|mlx\d+_\d+")
_GLUED_NAMES_RE = re.compile(r"(?:GPU\d+|NIC\d+|mlx\d+_\d+)+")
_DEVICE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.:\-]*\d")
_GPU_RE = re.compile(r"GPU(\d+)")
_LEGEND_HEAD_RE = re.compile(r"\s*NIC\s*Legend\s*:?\s*", re.IGNORECASE)
_LEGEND_ENTRY_RE = re.compile(r"\s*(NIC\d+)\s*[:=]\s*(\S+)\s*")
_SEPARATOR_RE = re.compile(r"[\s|:+=\-]*-[\s|:+=\-]*")
_CPU_LIST_RE = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")
_TOKEN_RE = re.compile(r"\S+")
_EXPECTED_CODES = "expected X, NV<n> (n >= 1), PIX, PXB, PHB, NODE or SYS (legacy SOC)"
_NV_GLUED_HINT = "; it looks like NV<n> glued to the CPU Affinity (ambiguous: put a space between them)"
# closeness of a GPU to a NIC, best first; NV# (a NIC behind NVLink, rare) counts as closest
_NIC_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}
_SYS_RANK = _NIC_RANK["SYS"]
_SWITCH_RANK = _NIC_RANK["PXB"]


@dataclass(frozen=True)
class NvidiaSmiTopology:
    """One `nvidia-smi topo -m` table, validated and normalized.

    `matrix[i][j]` is the GPU i -> GPU j code ("X" on the diagonal, "NV12", "PIX", "PXB", "PHB", "NODE",
    "SYS"); `gpu_nic[i][k]` is GPU i -> `nics[k]`; `rails[i]` is the rail of GPU i (see the module doc).
    """

    gpus: tuple[str, ...]
    matrix: tuple[tuple[str, ...], ...]
    nics: tuple[str, ...]
    gpu_nic: tuple[tuple[str, ...], ...]
    rails: tuple[int | None, ...]
    cpu_affinity: tuple[str | None, ...]
    numa_affinity: tuple[int | None, ...]
    warnings: tuple[str, ...]


def nvlink_count(code: str) -> int:
    """Number of bonded NVLinks a link code stands for: ``"NV12"`` -> 12, anything else -> 0."""
    m = re.fullmatch(r"NV(\d+)", code.strip())
    return int(m.group(1)) if m else 0
