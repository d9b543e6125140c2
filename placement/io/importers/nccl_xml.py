"""Read NCCL / RCCL topology XML (``NCCL_TOPO_FILE``, ``NCCL_TOPO_DUMP_FILE``) into one node's link matrix.

Owns `NodeTopology`, the per-host result every node-level importer (this one, `rocm_smi`) returns, and its
native ``node_types`` entry.

What is read (element and attribute names as NCCL's ``src/graph/xml.cc`` writes them, github.com/NVIDIA/nccl):

* ``<cpu numaid affinity>``: the NUMA node of everything below it; ``affinity`` (a hex CPU mask, most
  significant word first) becomes a CPU list such as ``0-23,96-119``.
* ``<pci busid class>``: PCIe bridges/switches (class ``0x0604..``) and endpoints. A GPU is a ``<gpu dev>``
  element (its ``pci`` parent gives the bus id); a file with no ``<gpu>`` element at all (the static files
  clouds ship) takes PCIe functions of class ``0x0302``, ``0x0380`` or ``0x1200`` as GPUs, in bus-id order.
  A NIC is a ``<net>`` element (``name``, ``dev``, ``speed`` in Mb/s); without any, PCIe functions of class
  ``0x02....`` are NICs named by bus id, of unknown speed.
* ``<nvlink target count tclass>``: NVLinks to a GPU (direct) or to an NVSwitch (``tclass 0x068000``): two
  GPUs that both reach NVSwitches are ``NV<min(count)>``, as nvidia-smi prints them. ``<xgmi target count>``
  (RCCL): AMD Infinity Fabric links between GPUs.

The matrix uses the nvidia-smi codes (NCCL's path types, ``src/include/graph.h``): ``NV#`` for # NVLinks (or,
on AMD, # xGMI links), ``PIX`` through one PCIe switch, ``PXB`` through several, ``PHB`` through the CPU's host
bridge, ``SYS`` across CPUs (NUMA nodes). A fully connected xGMI mesh with one count on every pair has no
matrix: `mesh_link_gbps` is that pair's link (the step model's AMD mesh). A partial xGMI mesh keeps the
matrix, and the cluster's ``NV`` tier is set to the xGMI per-link speed. Rails follow the `nvidia_smi`
rule (closest NICs; one-to-one pairing inside a tie), extended to several NICs per GPU (AWS p5: 4 EFA per
GPU -> the GPU's rail is its first NIC). NIC speed ``speed`` (Mb/s) / 8000 is ``nic_gbps`` (GB/s).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placement.errors import InputError, InternalError, Problem, Problems
from placement.io.affinity import affinity_fields
from placement.io.importers.detect import refuse_other_format
from placement.io.text import read_text

__all__ = ["XGMI_GBPS", "NodeTopology", "parse_nccl_xml", "read_nccl_xml", "read_text"]

# xGMI (Infinity Fabric) per link and direction, GB/s, from AMD's Instinct datasheets (bidirectional per-link
# figures halved): MI50/MI60 and MI100 92 GB/s, MI250/MI250X 100 GB/s, MI300X 128 GB/s, MI355X 153.6 GB/s.
XGMI_GBPS: dict[str, float] = {"gfx906": 46.0, "gfx908": 46.0, "gfx90a": 50.0, "gfx942": 64.0, "gfx950": 76.8}
_AMD_KIND = {"gfx906": "MI50", "gfx908": "MI100", "gfx90a": "MI250", "gfx942": "MI300X", "gfx950": "MI355X"}
_GCN_NUMERIC = {
    "906": "gfx906",
    "908": "gfx908",
    "910": "gfx90a",
    "940": "gfx942",
    "941": "gfx942",
    "942": "gfx942",
}
_NV_KIND = {"70": "V100", "80": "A100", "86": "A10", "89": "L40S", "90": "H100", "100": "B200"}
# NVLink per link and direction for NVLink 5 (B200: 1.8 TB/s over 18 links); older generations keep the
# cluster default (25 GB/s per link, placement.model.links.DEFAULT_INTRA_NODE_TIERS).
_NVLINK5_GBPS = 50.0
_GPU_CLASSES = ("0x0302", "0x0380", "0x1200")
_NVSWITCH_CLASS = "0x0680"
_MAX_NIC_MBPS = 1e7  # 10 Tb/s: a larger <net speed> (Mb/s) is a unit mistake
_PCIE_ORDER = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}


@dataclass(frozen=True)
class NodeTopology:
    """One host as a node-level importer read it: device names, matrix codes, rails, NICs and affinity.

    `matrix` is None for a fully connected xGMI mesh (then `mesh_link_gbps` is set). `nv_link_gbps` is the
    per-link bandwidth the ``NV#`` codes stand for when it is not the NVLink default (xGMI, NVLink 5).
    """

    gpus: tuple[str, ...]
    kind: str
    matrix: tuple[tuple[str, ...], ...] | None
    rails: tuple[int | None, ...]
    nics: tuple[str, ...] = ()
    nic_gbps: float | None = None
    mesh_link_gbps: float | None = None
    nv_link_gbps: float | None = None
    numa: tuple[int | None, ...] = ()
    cpu_affinity: tuple[str | None, ...] = ()
    warnings: tuple[str, ...] = ()

    def node_type(self, name: str, kind: str | None = None) -> dict[str, Any]:
        """The native ``node_types`` entry for this host (matrix rows as strings, like `import nvidia-smi`), with
        ``cpu_affinity`` / ``numa_affinity`` when the source gave them (`export --format rankfile` binds to them)."""
        d: dict[str, Any] = {"name": name, "devices": len(self.gpus), "kind": kind or self.kind}
        if self.matrix is not None:
            d["matrix"] = [" ".join(r) for r in self.matrix]
        if any(r is not None for r in self.rails):
            d["rails"] = list(self.rails)
        if self.nics:
            d["nics"] = len(self.nics)
        if self.nic_gbps is not None:
            d["nic_gbps"] = self.nic_gbps
        if self.mesh_link_gbps is not None:
            d["mesh_link_gbps"] = self.mesh_link_gbps
        d.update(affinity_fields(self.cpu_affinity, self.numa))  # cpu_affinity / numa_affinity, when known
        return d


@dataclass
class _Dev:
    name: str
    busid: str
    chain: list[ET.Element]  # ancestors from the CPU down, excluding the device's own element
    numa: int | None
    affinity: str | None
    order: tuple[int, str]
    elem: ET.Element | None = None  # <gpu> element
    speed: float | None = None  # NIC Mb/s


@dataclass
class _Walk:
    gpus: list[_Dev] = field(default_factory=list)
    nics: list[_Dev] = field(default_factory=list)
    class_gpus: list[_Dev] = field(default_factory=list)
    class_nics: list[_Dev] = field(default_factory=list)
    cpus: int = 0


def _cpu_list(mask: str) -> str | None:
    """``"000000ff,ffff0000"`` -> ``"16-39"`` (words of 32 bits, most significant first)."""
    words = [w for w in mask.replace(" ", "").split(",") if w]
    try:
        value = int("".join(w.rjust(8, "0") for w in words), 16)
    except ValueError:
        return None
    cpus = [i for i in range(value.bit_length()) if value >> i & 1]
    runs: list[str] = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        runs.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(runs) or None


def _int(v: str | None) -> int | None:
    try:
        return int(v, 0) if v is not None else None
    except ValueError:
        return None


def _walk(root: ET.Element) -> _Walk:
    w = _Walk()

    def visit(el: ET.Element, chain: list[ET.Element], numa: int | None, aff: str | None) -> None:
        for child in el:
            tag = child.tag
            if tag == "cpu":
                w.cpus += 1
                visit(child, [child], _int(child.get("numaid")), _cpu_list(child.get("affinity", "")))
            elif tag == "pci":
                cls = (child.get("class") or "").lower()
                busid = (child.get("busid") or "").lower()
                gpu = child.find("gpu")
                if gpu is not None:
                    dev = _int(gpu.get("dev"))
                    order = (dev if dev is not None else 1 << 30, busid)
                    w.gpus.append(
                        _Dev(
                            f"GPU{dev if dev is not None else len(w.gpus)}",
                            busid,
                            chain,
                            numa,
                            aff,
                            order,
                            gpu,
                        )
                    )
                elif cls.startswith(_GPU_CLASSES):
                    w.class_gpus.append(_Dev("", busid, chain, numa, aff, (1 << 30, busid)))
                elif cls.startswith("0x02") and child.find("nic") is None:
                    w.class_nics.append(_Dev(busid, busid, chain, numa, aff, (1 << 30, busid)))
                visit(child, [*chain, child], numa, aff)  # every PCIe element on the way is a hop
            elif tag == "nic":
                own = chain[:-1] if el.tag == "pci" else chain  # a NIC's chain excludes its own PCIe function
                for net in child.iter("net"):
                    dev = _int(net.get("dev"))
                    name = net.get("name") or f"net{dev if dev is not None else len(w.nics)}"
                    speed = _int(net.get("speed"))
                    w.nics.append(
                        _Dev(
                            name,
                            name,
                            own,
                            numa,
                            aff,
                            (dev if dev is not None else 1 << 30, name),
                            speed=float(speed) if speed else None,
                        )
                    )

    visit(root, [], None, None)
    return w


def _pcie_code(a: _Dev, b: _Dev) -> str:
    if not a.chain or not b.chain or a.chain[0] is not b.chain[0]:
        return "SYS"
    k = 0
    while k < min(len(a.chain), len(b.chain)) and a.chain[k] is b.chain[k]:
        k += 1
    if k <= 1:
        return "PHB"  # the lowest shared element is the CPU: through its host bridge
    bridges = {id(e) for e in a.chain[k - 1 :]} | {id(e) for e in b.chain[k - 1 :]}
    return "PIX" if len(bridges) <= 1 else "PXB"


def _links(
    gpus: list[_Dev], tag: str, warnings: list[str]
) -> tuple[dict[tuple[int, int], int], dict[int, int]]:
    """Direct GPU-GPU link counts and per-GPU counts to NVSwitches, from <nvlink>/<xgmi> elements."""
    index = {g.busid: i for i, g in enumerate(gpus)}
    direct: dict[tuple[int, int], int] = {}
    switch: dict[int, int] = {}
    odd: list[str] = []
    for i, g in enumerate(gpus):
        if g.elem is None:
            raise InternalError(f"GPU {g.name} ({g.busid}) has no <gpu> element to read its links from")
        for link in g.elem.findall(tag):
            target = (link.get("target") or "").lower()
            count = _int(link.get("count")) or 0
            tclass = (link.get("tclass") or "").lower()
            if count <= 0:
                continue
            if tclass.startswith(_NVSWITCH_CLASS):
                switch[i] = switch.get(i, 0) + count
            elif target == g.busid:
                odd.append(f"{g.name} -> itself")
            elif target in index:
                j = index[target]
                direct[min(i, j), max(i, j)] = max(direct.get((min(i, j), max(i, j)), 0), count)
            elif tclass.startswith(("0x03", "0x12")):
                odd.append(f"{g.name} -> {target} (not a GPU of this file)")
    if odd:
        shown = ", ".join(odd[:3]) + (f" and {len(odd) - 3} more" if len(odd) > 3 else "")
        warnings.append(f"{len(odd)} <{tag}> link(s) ignored: {shown}")
    return direct, switch


def _rails(
    gpus: list[_Dev], nics: list[_Dev], codes: list[list[str]], warnings: list[str]
) -> list[int | None]:
    rails: list[int | None] = [None] * len(gpus)
    if not nics:
        return rails
    groups: dict[tuple[int, ...], list[int]] = {}
    for g, row in enumerate(codes):
        best = min(_PCIE_ORDER[c] for c in row)
        if best >= _PCIE_ORDER["SYS"]:
            continue
        closest = tuple(k for k, c in enumerate(row) if _PCIE_ORDER[c] == best)
        groups.setdefault(closest, []).append(g)
    nic_of: dict[int, int] = {}
    for closest, members in groups.items():
        if len(closest) == 1:
            nic_of.update({g: closest[0] for g in members})
        elif len(closest) % len(members) == 0:  # k GPUs over k*m NICs: GPU i takes the first NIC of chunk i
            step = len(closest) // len(members)
            nic_of.update({g: closest[i * step] for i, g in enumerate(members)})
        else:
            names = ", ".join(gpus[g].name for g in members)
            warnings.append(
                f"rails: {names} tie over {len(closest)} NICs "
                f"({', '.join(nics[k].name for k in closest)}); rail left as None"
            )
    used = sorted(set(nic_of.values()))
    for g, k in nic_of.items():
        rails[g] = used.index(k)
    return rails


def _gpu_kind(gpus: list[_Dev]) -> tuple[str, str | None]:
    """(device kind, AMD gcn arch or None) from the <gpu> attributes of the first GPU."""
    el = gpus[0].elem if gpus else None
    if el is None:
        return "gpu", None
    gcn = (el.get("gcn") or "").split(":")[0]
    gcn = _GCN_NUMERIC.get(gcn, gcn)
    if gcn:
        return _AMD_KIND.get(gcn, "gpu"), gcn
    return _NV_KIND.get(el.get("sm") or "", "gpu"), None


# --nvlink to suggest per GPU kind when a file lists no NVLinks: links per GPU to the NVSwitches of the SXM
# (HGX/DGX) boards, i.e. the NV# nvidia-smi prints for every pair there.
_SXM_NVLINKS = {"A100": 12, "H100": 18, "B200": 18}


def _no_links_warning(kind: str, gcn: str | None) -> str:
    """The warning for a multi-GPU file without any NVLink or xGMI link: its matrix holds PCIe paths only."""
    if gcn is not None:
        return (
            "the file lists no xGMI links: the matrix holds PCIe paths only, and placement treats the GPUs as "
            "PCIe cards; if they are xGMI-connected, use a topology dumped on the machine "
            "(NCCL_TOPO_DUMP_FILE), which lists the links"
        )
    links = _SXM_NVLINKS.get(kind)
    fix = (
        f"if these are {kind} SXM GPUs on NVSwitches, pass --nvlink {links}"
        if links is not None
        else "if the GPUs are on NVSwitches, pass --nvlink N (N = NVLinks per GPU: 12 for A100 SXM, 18 for H100 SXM)"
    )
    return (
        "the file lists no NVLinks (static NCCL_TOPO_FILEs omit them: NCCL finds NVLink at run time): the "
        f"matrix holds PCIe paths only, so the node level gets a PCIe bandwidth; {fix}"
    )


def parse_nccl_xml(
    text: str, source: str = "<nccl-xml>", *, nvlink: int | None = None, xgmi_gbps: float | None = None
) -> NodeTopology:
    """Parse one NCCL/RCCL topology XML. `nvlink` (a link count, e.g. 18) states that every GPU pair is
    ``NV<nvlink>`` through NVSwitches, for static files that list no NVLinks (NCCL finds them at run time).
    `xgmi_gbps` overrides the per-link xGMI speed. Raises `InputError` with one line per problem."""
    root = _system(text, source)
    warnings: list[str] = []
    w = _walk(root)
    gpus = _gpus(root, w, source, warnings)
    nics = sorted(w.nics, key=lambda d: d.order) or sorted(w.class_nics, key=lambda d: d.busid)
    n = len(gpus)
    matrix = [["X" if i == j else _pcie_code(gpus[i], gpus[j]) for j in range(n)] for i in range(n)]
    kind, gcn = _gpu_kind(gpus)
    nv_gbps, mesh = _gpu_links(gpus, matrix, gcn, xgmi_gbps, warnings)
    if nvlink is not None:
        for i in range(n):
            for j in range(n):
                if i != j:
                    matrix[i][j] = f"NV{nvlink}"
    elif n > 1 and all(not c.startswith("NV") for r in matrix for c in r):
        warnings.append(_no_links_warning(kind, gcn))
    codes = [[_pcie_code(g, nic) for nic in nics] for g in gpus]
    rails = _rails(gpus, nics, codes, warnings)
    return NodeTopology(
        gpus=tuple(g.name for g in gpus),
        kind=kind,
        matrix=None if mesh is not None else tuple(tuple(r) for r in matrix),
        rails=tuple(rails),
        nics=tuple(nic.name for nic in nics),
        nic_gbps=_nic_gbps(nics, warnings),
        mesh_link_gbps=mesh,
        nv_link_gbps=nv_gbps,
        numa=tuple(g.numa for g in gpus),
        cpu_affinity=tuple(g.affinity for g in gpus),
        warnings=tuple(warnings),
    )


def _system(text: str, source: str) -> ET.Element:
    """The <system> root of the XML; InputError for an empty file, another format or malformed XML."""
    if not text.strip():
        raise InputError(source, [Problem("", "the file is empty; expected an NCCL topology XML (<system>)")])
    refuse_other_format(text, source, "nccl-xml")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        line, col = e.position
        msg = str(e).split(":")[0]
        raise InputError(
            source, [Problem(f"line {line}, column {col + 1}", f"is not well-formed XML: {msg}")]
        ) from None
    if root.tag != "system":
        raise InputError(
            source, [Problem("", f"the root element is <{root.tag}>; an NCCL topology XML has <system>")]
        )
    return root


def _gpus(root: ET.Element, w: _Walk, source: str, warnings: list[str]) -> list[_Dev]:
    """The GPUs in order: the <gpu> elements by device number, else the PCIe functions of a GPU class in bus-id
    order; InputError when there is none or one is listed twice."""
    gpus = sorted(w.gpus, key=lambda d: d.order)
    if not gpus and w.class_gpus:
        gpus = sorted(w.class_gpus, key=lambda d: d.busid)
        for i, g in enumerate(gpus):
            g.name = f"GPU{i}"
        warnings.append(
            f"no <gpu> elements: {len(gpus)} GPUs taken from PCIe class codes, numbered in bus-id "
            "order (nvidia-smi's and CUDA_DEVICE_ORDER=PCI_BUS_ID order)"
        )
    if not gpus:
        pcis = list(root.iter("pci"))
        classes = sorted({e.get("class", "") for e in pcis} - {""})
        if pcis and not classes:
            why = (
                f"its {len(pcis)} <pci> elements carry no class attribute (a partial static file: NCCL takes the "
                "device kinds from the running machine), so nothing identifies a GPU"
            )
        else:
            why = (
                f"no <gpu> element and no PCIe function of class {', '.join(_GPU_CLASSES)} "
                f"(classes present: {', '.join(classes[:6]) or 'none'})"
            )
        raise InputError(source, [Problem("", f"no GPU found: {why}")])
    ps = Problems(source)
    seen: dict[str, str] = {}
    for g in gpus:
        if g.name in seen:
            ps.add(f"<gpu dev> of {g.busid}", f"{g.name} is listed twice (also at bus id {seen[g.name]})")
        seen[g.name] = g.busid
    ps.raise_if_any()
    return gpus


def _gpu_links(
    gpus: list[_Dev], matrix: list[list[str]], gcn: str | None, xgmi_gbps: float | None, warnings: list[str]
) -> tuple[float | None, float | None]:
    """Write the NVLink/xGMI pairs (``NV<count>``) into `matrix`; return the GB/s of one NV link (None: the
    cluster's default) and of a fully connected xGMI mesh's link (None: not a mesh)."""
    nv_gbps: float | None = None
    mesh: float | None = None
    if gpus[0].elem is None:
        return nv_gbps, mesh
    n = len(gpus)
    nv_direct, nv_switch = _links(gpus, "nvlink", warnings)
    xg_direct, _ = _links(gpus, "xgmi", warnings)
    for i in range(n):
        for j in range(i + 1, n):
            count = nv_direct.get((i, j), 0) or xg_direct.get((i, j), 0)
            if not count and i in nv_switch and j in nv_switch:
                count = min(nv_switch[i], nv_switch[j])
            if count:
                matrix[i][j] = matrix[j][i] = f"NV{count}"
    if xg_direct:
        per = xgmi_gbps or XGMI_GBPS.get(gcn or "", 64.0)
        if gcn not in XGMI_GBPS and xgmi_gbps is None:
            warnings.append(
                f"xGMI link speed unknown for arch {gcn or '?'}; assumed 64 GB/s per link "
                "(MI300X); set it with --xgmi-gbps"
            )
        counts = {xg_direct.get((i, j), 0) for i in range(n) for j in range(i + 1, n)}
        if len(counts) == 1 and 0 not in counts and n > 1:
            mesh = per * counts.pop()
        else:
            nv_gbps = per
    elif (_int(gpus[0].elem.get("sm")) or 0) >= 100 and (nv_direct or nv_switch):
        nv_gbps = _NVLINK5_GBPS
    return nv_gbps, mesh


def _nic_gbps(nics: list[_Dev], warnings: list[str]) -> float | None:
    """The host's NIC speed in GB/s: the slowest plausible one stated (None: none stated), with warnings."""
    odd = sorted({nic.name for nic in nics if nic.speed and nic.speed > _MAX_NIC_MBPS})
    if odd:
        warnings.append(
            f"NIC speed above {_MAX_NIC_MBPS / 1e6:g} Tb/s ignored as implausible on {', '.join(odd)}"
        )
    speeds = sorted({nic.speed for nic in nics if nic.speed and nic.speed <= _MAX_NIC_MBPS})
    nic_gbps = speeds[0] / 8000.0 if speeds else None
    if len(speeds) > 1:
        warnings.append(
            f"NICs of different speeds ({', '.join(f'{s / 1000:g}' for s in speeds)} Gb/s); "
            f"nic_gbps is the slowest, {nic_gbps:g} GB/s"
        )
    if nics and not speeds:
        warnings.append(f"{len(nics)} NIC(s) without a speed; nic_gbps left unset (the level-1 tier is used)")
    return nic_gbps


def read_nccl_xml(
    path: str | Path, *, nvlink: int | None = None, xgmi_gbps: float | None = None
) -> NodeTopology:
    """Read and parse one NCCL/RCCL topology XML file."""
    return parse_nccl_xml(read_text(path), str(path), nvlink=nvlink, xgmi_gbps=xgmi_gbps)


def merge_warnings(items: Sequence[tuple[str, NodeTopology]]) -> list[str]:
    """Warnings of several hosts, each prefixed with its host, identical ones said once with a count."""
    counts: dict[str, list[str]] = {}
    for host, nt in items:
        for w in nt.warnings:
            counts.setdefault(w, []).append(host)
    return [
        f"{hosts[0]}: {w}" if len(hosts) == 1 else f"{len(hosts)} hosts ({hosts[0]}, ...): {w}"
        for w, hosts in counts.items()
    ]
