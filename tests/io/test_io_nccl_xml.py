"""NCCL/RCCL topology XML importer: hand-checked matrices per vendor, refusals, and the import -> place -> evaluate
round trip over every shared file of the four new formats (nccl-xml, rocm-smi fixture, ibnetdiscover, topograph)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from placement.cli.app import app
from placement.errors import InputError
from placement.io.importers.nccl_xml import parse_nccl_xml, read_nccl_xml
from placement.io.native import load_cluster
from tests.conftest import FIXTURES, TOPOLOGIES, shared_file

XML = "topologies/nccl_xml"
FABRIC = TOPOLOGIES / "cluster_fabric" / "nvidia_topograph" / "tests"
JOB = """name: rt
parallel: {tp: 2, dp: 1}
model: {parameters: 1.0e9, hidden: 1024, layers: 4, seq_len: 1024, micro_batch: 1, micro_batches: 2,
        bytes_per_element: 2}
"""


def test_azure_ndv4_pcie_paths_rails_and_numa() -> None:
    t = read_nccl_xml(shared_file(f"{XML}/azure/ndv4-topo.xml"))
    assert t.gpus == tuple(f"GPU{i}" for i in range(8))
    # bus-id order: 0001 0002 (NUMA 1, one switch), 0003 0004 (NUMA 0), 000b 000c (NUMA 3), 000d 000e (NUMA 2)
    assert t.matrix is not None
    assert t.matrix[0] == ("X", "PIX", "SYS", "SYS", "SYS", "SYS", "SYS", "SYS")
    assert t.matrix[4][5] == "PIX" and t.matrix[6][7] == "PIX" and t.matrix[2][4] == "SYS"
    assert t.numa == (1, 1, 0, 0, 3, 3, 2, 2)
    assert t.cpu_affinity[0] == "24-47"  # 00000000,0000ffff,ff000000
    # two GPUs tie over the two NICs of their switch: paired in order; one NIC (0101..0108) per GPU
    assert t.rails == (0, 1, 2, 3, 4, 5, 6, 7) and len(t.nics) == 8 and t.nic_gbps is None
    assert any("no NVLinks" in w for w in t.warnings)


def test_azure_ndv4_with_nvswitch_flag() -> None:
    t = read_nccl_xml(shared_file(f"{XML}/azure/ndv4-topo.xml"), nvlink=12)
    assert t.matrix is not None and {c for r in t.matrix for c in r} == {"X", "NV12"}


def test_aws_p4d_two_gpus_per_efa() -> None:
    t = read_nccl_xml(shared_file(f"{XML}/aws/p4d-24xl-topo.xml"))
    assert t.matrix is not None
    assert t.matrix[0] == ("X", "PIX", "PHB", "PHB", "SYS", "SYS", "SYS", "SYS")
    assert t.rails == (0, 0, 1, 1, 2, 2, 3, 3) and t.nics == (
        "0000:10:1b.0",
        "0000:20:1b.0",
        "0000:90:1b.0",
        "0000:a0:1b.0",
    )


def test_aws_p5_four_efa_per_gpu() -> None:
    t = read_nccl_xml(shared_file(f"{XML}/aws/p5.48xl-topo.xml"))
    assert t.kind == "H100" and len(t.gpus) == 8
    assert len(t.nics) == 32 and t.nic_gbps == 12.5  # speed="100000" Mb/s
    assert t.rails == tuple(range(8))  # GPU k's first EFA is NIC 4k: rail k
    # each GPU under its own host bridge of the one CPU, and no <nvlink> in the file: PCIe paths only ...
    assert t.matrix is not None
    assert {t.matrix[i][j] for i in range(8) for j in range(8) if i != j} == {"PHB"}
    assert t.numa == (0,) * 8 and t.cpu_affinity == ("0-47",) * 8
    # ... so the import says so, and names the fix for H100 SXM on NVSwitches (the file has <gpu> elements)
    [warning] = [w for w in t.warnings if "no NVLinks" in w]
    assert "pass --nvlink 18" in warning and "H100 SXM" in warning


def test_aws_p5_import_warns_and_nvlink_18_gives_the_nvswitch_node(tmp_path: Path) -> None:
    x = shared_file(f"{XML}/aws/p5.48xl-topo.xml")
    res = run("import", "nccl-xml", x, "--out", tmp_path / "pcie.yaml")
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    said = " ".join(res.output.split())  # type: ignore[attr-defined]
    assert "warning: node0: the file lists no NVLinks" in said and "pass --nvlink 18" in said
    assert "node 16 GB/s (the node matrix's best GPU pair, PHB: PCIe only" in said
    topo, _ = load_cluster(tmp_path / "pcie.yaml")
    assert topo.levels[0].tier.bandwidth_gbps == 16.0
    res = run("import", "nccl-xml", x, "--nvlink", "18", "--out", tmp_path / "nv.yaml")
    assert res.exit_code == 0 and "no NVLinks" not in res.output, res.output  # type: ignore[attr-defined]
    topo, _ = load_cluster(tmp_path / "nv.yaml")
    assert topo.levels[0].tier.bandwidth_gbps == 18 * 25.0  # NV18 at the default 25 GB/s per link
    assert {c for r in topo.host_types[0].matrix or () for c in r} == {"X", "NV18"}


def test_no_link_warning_names_the_kind_or_xgmi() -> None:
    pcie_h100 = """<system version="1"><cpu numaid="0" affinity="ff">
      <pci busid="0000:01:00.0" class="0x030200"><gpu dev="0" sm="90"/></pci>
      <pci busid="0000:02:00.0" class="0x030200"><gpu dev="1" sm="90"/></pci></cpu></system>"""
    assert any(
        "H100 SXM GPUs on NVSwitches, pass --nvlink 18" in w for w in parse_nccl_xml(pcie_h100).warnings
    )
    unknown = pcie_h100.replace('sm="90"', 'sm="75"')
    assert any("pass --nvlink N (N = NVLinks per GPU" in w for w in parse_nccl_xml(unknown).warnings)
    one = """<system version="1"><cpu numaid="0" affinity="ff">
      <pci busid="0000:01:00.0" class="0x030200"><gpu dev="0" sm="90"/></pci></cpu></system>"""
    assert not any("no NVLinks" in w for w in parse_nccl_xml(one).warnings)  # one GPU: nothing to link
    t = read_nccl_xml(shared_file(f"{XML}/rccl_topo_expl/topo_8p_pcie.xml"))  # MI50 PCIe cards
    assert any(w.startswith("the file lists no xGMI links") for w in t.warnings)
    assert not any("--nvlink" in w for w in t.warnings)


def test_ndv4_import_writes_affinity_and_a_true_tiers_note(tmp_path: Path) -> None:
    x = shared_file(f"{XML}/azure/ndv4-topo.xml")
    out = tmp_path / "c.yaml"
    res = run("import", "nccl-xml", x, x, "--hosts", "a,b", "--levels", "rack:1,cluster", "--out", out)
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    said = " ".join(res.output.split())  # type: ignore[attr-defined]
    # the note states the tiers written: a PCIe node level (no NVLink in the file), then the switch defaults
    assert (
        "note: link tiers are defaults: node 24 GB/s (the node matrix's best GPU pair, PIX: PCIe only, the node "
        "file lists no NVLink); rack 50 GB/s (leaf: a 400G link); cluster 25 GB/s"
    ) in said
    assert "NVLink domain" not in said
    cpus = ["24-47", "24-47", "0-23", "0-23", "72-95", "72-95", "48-71", "48-71"]
    numa = [1, 1, 0, 0, 3, 3, 2, 2]
    [nt_doc] = yaml.safe_load(out.read_text())["node_types"]
    assert nt_doc["cpu_affinity"] == cpus and nt_doc["numa_affinity"] == numa
    topo, _ = load_cluster(out)
    assert topo.levels[0].tier.bandwidth_gbps == 24.0
    assert topo.host_types[0].cpu_affinity == tuple(cpus) and topo.host_types[0].numa_affinity == tuple(numa)
    # the rankfile export binds each rank to its GPU's CPUs
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    placed = run("place", out, job, "--output", "json", "--out", tmp_path / "r.json")
    assert placed.exit_code == 0, placed.output  # type: ignore[attr-defined]
    ranks = run("export", tmp_path / "r.json", "--format", "rankfile", "--cluster", out)
    assert ranks.exit_code == 0, ranks.output  # type: ignore[attr-defined]
    lines = ranks.output.splitlines()  # type: ignore[attr-defined]
    slots = [ln.split("slot=")[1] for ln in lines if ln.startswith("rank ")]
    assert len(slots) == 2 and all(s in cpus for s in slots)
    # --tier on a level takes it out of the note; with every level set there is no note
    res = run(
        "import",
        "nccl-xml",
        x,
        x,
        "--hosts",
        "a,b",
        "--levels",
        "rack:1,cluster",
        "--tier",
        "node=300:1",
        "--tier",
        "rack=50:5",
        "--tier",
        "cluster=25:7",
    )
    assert res.exit_code == 0 and "note:" not in res.output, res.output  # type: ignore[attr-defined]


def test_amd_mi300x_full_xgmi_mesh() -> None:
    t = read_nccl_xml(shared_file(f"{XML}/rccl_topo_expl/topo_8p_940.xml"))
    assert t.kind == "MI300X" and t.matrix is None and t.mesh_link_gbps == 64.0
    assert t.nics == tuple(f"mlx5_{i}" for i in range(8)) and t.nic_gbps == 50.0  # 400000 Mb/s
    assert t.rails == tuple(range(8)) and t.numa == (0, 0, 0, 0, 1, 1, 1, 1)


def test_amd_mi100_partial_xgmi_mesh() -> None:
    t = read_nccl_xml(shared_file(f"{XML}/rccl_topo_expl/topo_8p6l.xml"))
    assert t.kind == "MI100" and t.nv_link_gbps == 46.0 and t.matrix is not None
    # GPU0 (63:00.0) links to 43, 24, 03, e3, a3, 83: every GPU but GPU5 (c3:00.0, the other CPU)
    assert t.matrix[0] == ("X", "NV1", "NV1", "NV1", "NV1", "SYS", "NV1", "NV1")


def test_nvswitch_links_give_nv_count() -> None:
    xml = """<system version="1"><cpu numaid="0" affinity="ff">
      <pci busid="0000:01:00.0" class="0x030200"><gpu dev="0" sm="90">
        <nvlink target="0000:a0:00.0" count="9" tclass="0x068000"/><nvlink target="0000:a1:00.0" count="9" tclass="0x068000"/>
      </gpu></pci>
      <pci busid="0000:02:00.0" class="0x030200"><gpu dev="1" sm="90">
        <nvlink target="0000:a0:00.0" count="18" tclass="0x068000"/></gpu></pci>
    </cpu></system>"""
    t = parse_nccl_xml(xml)
    assert t.matrix == (("X", "NV18"), ("NV18", "X")) and t.kind == "H100"


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("azure/ncv4-graph.xml", "NCCL graph XML"),
        ("aws/g5.48xl-topo.xml", "carry no class attribute"),
        ("aws/p5.48xl-topo.2023-8807ce1.xml", "carry no class attribute"),
    ],
)
def test_refusals_are_one_line(name: str, needle: str) -> None:
    with pytest.raises(InputError) as e:
        read_nccl_xml(shared_file(f"{XML}/{name}"))
    assert len(e.value.problems) == 1 and needle in e.value.render() and "\n" not in e.value.render()


def test_other_formats_and_bad_xml() -> None:
    with pytest.raises(InputError, match="placement import rocm-smi"):
        read_nccl_xml(FIXTURES / "rocm_smi_showtopo_mi300x.txt")
    with pytest.raises(InputError, match=r"line 1, column \d+: is not well-formed XML"):
        parse_nccl_xml("<system><cpu></system>")
    with pytest.raises(InputError, match="no GPU found"):
        parse_nccl_xml('<system><cpu numaid="0"><pci busid="0:0" class="0x020000"/></cpu></system>')


def run(*args: object) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def _cases() -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = [("nccl-xml", p) for p in sorted((TOPOLOGIES / "nccl_xml").glob("*/*.xml"))]
    out.append(("rocm-smi", FIXTURES / "rocm_smi_showtopo_mi300x.txt"))
    out += [("ibnetdiscover", p) for p in sorted((FABRIC / "output" / "ibnetdiscover").glob("*.out"))]
    out += [("topograph", p) for p in sorted((FABRIC / "models").glob("*.yaml"))]
    out += [("topograph", p) for p in sorted((FABRIC / "payloads").glob("*.json"))]
    out += [("topograph", p) for p in sorted((FABRIC / "output" / "netq").glob("*.json"))]
    return out


CASES = _cases()


@pytest.mark.skipif(not (TOPOLOGIES / "nccl_xml").is_dir(), reason=f"shared data not found at {TOPOLOGIES}")
@pytest.mark.parametrize(("command", "path"), CASES, ids=[f"{c}:{p.name}" for c, p in CASES])
def test_round_trip_import_place_evaluate(command: str, path: Path, tmp_path: Path) -> None:
    """Every shared file imports and a job is placed and evaluated on it, or it is refused in one line."""
    cluster = tmp_path / "c.yaml"
    res = run("import", command, path, "--out", cluster)
    if res.exit_code != 0:  # type: ignore[attr-defined]
        lines = [x for x in res.output.strip().splitlines() if x.startswith("error:")]  # type: ignore[attr-defined]
        assert res.exit_code == 2 and len(lines) == 1, res.output  # type: ignore[attr-defined]
        return
    topo, _ = load_cluster(cluster)
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    out = tmp_path / "r.json"
    placed = run("place", cluster, job, "--strategy", "kueue-tas", "--output", "json", "--out", out)
    assert placed.exit_code == 0, placed.output  # type: ignore[attr-defined]
    mapping = json.loads(out.read_text())["result"]["mapping"]  # the PlaceResponse JSON mapping
    assert len(mapping) == 2 and all(topo.device_index(m["device"]) is not None for m in mapping)
    ev = run("evaluate", cluster, job, out, "--output", "json")
    assert ev.exit_code == 0, ev.output  # type: ignore[attr-defined]


def test_several_files_make_a_cluster_with_levels(tmp_path: Path) -> None:
    x = shared_file(f"{XML}/rccl_topo_expl/topo_8p_940.xml")
    out = tmp_path / "c.yaml"
    res = run(
        "import", "nccl-xml", x, x, x, x, "--hosts", "a,b,c,d", "--levels", "rack:2,cluster", "--out", out
    )
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    topo, _ = load_cluster(out)
    assert topo.level_names == ("node", "rack", "cluster") and topo.host_names == ("a", "b", "c", "d")
    assert topo.domain_names[1] == ("rack1", "rack2") and topo.num_devices == 32
    nt = topo.host_types[0]
    assert nt.mesh_link_gbps == 64.0 and nt.nics == 8 and nt.nic_gbps == 50.0 and nt.kind == "MI300X"
    assert topo.levels[0].tier.bandwidth_gbps == 7 * 64.0  # the mesh: (n-1) links per device
    bad = run("import", "nccl-xml", x, x, x, "--hosts", "a,b,c", "--levels", "rack:2")
    assert bad.exit_code == 2 and "end with a level without fan-out" in bad.output  # type: ignore[attr-defined]
