"""Importers fill `nics` / `nic_gbps` where their source knows them and warn where it does not: nvidia-smi (NIC
columns, no speed), NCCL XML (<net speed>), ibnetdiscover (HCA port rates), topograph and Slurm (neither). On the
real files of ../shared/data/topologies (skipped, saying which, when absent) and on small synthetic ones; the
expected counts and speeds are read from the files independently of the importers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from placement.cli.app import app
from placement.io.importers.nics import nic_fields, nic_warnings
from placement.io.native import cluster_from_dict
from tests.conftest import shared_file

TOPO = "topologies"


def _import(*args: str) -> tuple[dict[str, Any], str]:
    res = CliRunner().invoke(app, ["import", *args], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(res.stdout)
    cluster_from_dict(doc, "<test>")  # what was written is a valid cluster
    return doc, " ".join(res.stderr.split())


def test_nvidia_smi_nic_columns_give_the_count_and_the_missing_speed_is_warned() -> None:
    path = shared_file(f"{TOPO}/nvidia_smi_topo/hgx_h100_8gpu_8nic_rail_pix__sglang_issue30401.txt")
    header = next(line for line in path.read_text().splitlines() if re.match(r"\s*GPU0\s", line))
    columns = len(re.findall(r"\bNIC\d+\b", header))
    assert columns == 8
    doc, err = _import("nvidia-smi", str(path))
    (nt,) = doc["node_types"]
    assert nt["nics"] == columns and "nic_gbps" not in nt
    assert f"{columns} NIC(s) but not their speed" in err


def test_nvidia_smi_without_nic_columns_warns_and_writes_no_nics() -> None:
    path = shared_file(
        f"{TOPO}/nvidia_smi_topo/h100_8gpu_gpuonly__stas00_ml-engineering_training_performance_README_L755-766.txt"
    )
    doc, err = _import("nvidia-smi", str(path))
    assert "nics" not in doc["node_types"][0]
    assert "names no NICs for node type" in err


SMI = """\
        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity
GPU0     X      NV4     PIX     0-15    0
GPU1    NV4      X      SYS     0-15    0
NIC0    PIX     SYS      X

NIC Legend:

  NIC0: mlx5_0
"""


def test_nvidia_smi_synthetic_one_nic(tmp_path: Path) -> None:
    f = tmp_path / "smi.txt"
    f.write_text(SMI)
    doc, err = _import("nvidia-smi", str(f))
    assert doc["node_types"][0]["nics"] == 1
    assert "1 NIC(s) but not their speed" in err


def test_nccl_xml_net_speeds_fill_nic_gbps() -> None:
    path = shared_file(f"{TOPO}/nccl_xml/aws/p5.48xl-topo.xml")
    text = path.read_text()
    nets = re.findall(r"<net\b[^>]*\bspeed=\"(\d+)\"", text)
    doc, err = _import("nccl-xml", str(path))
    (nt,) = doc["node_types"]
    assert nt["nics"] == len(nets) == 32
    assert nt["nic_gbps"] == min(int(s) for s in nets) / 8000  # Mb/s -> GB/s
    assert "not their speed" not in err


def test_nccl_xml_without_net_speed_warns() -> None:
    path = shared_file(f"{TOPO}/nccl_xml/azure/ndv5-topo.xml")
    nic_functions = len(re.findall(r'class="0x02', path.read_text()))
    doc, err = _import("nccl-xml", str(path))
    (nt,) = doc["node_types"]
    assert nt["nics"] == nic_functions == 8 and "nic_gbps" not in nt
    assert "without a speed" in err


XML = """<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:01:00.0" class="0x030200" vendor="0x10de" device="0x2330" link_speed="32.0 GT/s PCIe" link_width="16">
      <gpu dev="0" sm="90" rank="0" gdr="1"/>
    </pci>
    <pci busid="0000:02:00.0" class="0x020700" vendor="0x15b3" device="0x1021" link_speed="32.0 GT/s PCIe" link_width="16">
      <nic><net name="mlx5_0" dev="0" speed="200000" port="1" gdr="1"/></nic>
    </pci>
    <pci busid="0000:03:00.0" class="0x020700" vendor="0x15b3" device="0x1021" link_speed="32.0 GT/s PCIe" link_width="16">
      <nic><net name="mlx5_1" dev="1" speed="400000" port="1" gdr="1"/></nic>
    </pci>
  </cpu>
</system>
"""


def test_nccl_xml_synthetic_two_speeds_take_the_slowest(tmp_path: Path) -> None:
    f = tmp_path / "node.xml"
    f.write_text(XML)
    doc, err = _import("nccl-xml", str(f))
    (nt,) = doc["node_types"]
    assert nt["nics"] == 2 and nt["nic_gbps"] == 25.0  # 200 Gb/s, the slower of the two
    assert "different speeds" in err


def test_ibnetdiscover_hca_rates_fill_every_host() -> None:
    path = shared_file(f"{TOPO}/cluster_fabric/nvidia_topograph/tests/output/ibnetdiscover/example.out")
    # a host's HCAs: the switch ports cabled to a CA described "<host> mlx5_N" or "<host> HCA-N", each 4xNDR
    # (4 lanes x 100 Gb/s = 50 GB/s)
    hcas = set(
        re.findall(
            r'"H-[0-9a-f]+"\[\d+\]\S*\s+#\s+"(\S+) ((?:mlx5_|HCA-)\d+)" lid \d+ 4xNDR', path.read_text()
        )
    )
    cas: dict[str, int] = {}
    for host, _hca in hcas:
        cas[host] = cas.get(host, 0) + 1
    doc, _err = _import("ibnetdiscover", str(path))
    types = {t["name"]: t for t in doc["node_types"]}
    for h in doc["hosts"]:
        t = types[h["node_type"]]
        assert t["nic_gbps"] == 50.0, h
        assert t["nics"] == cas[h["name"]], h


def test_topograph_and_slurm_know_no_nics_and_say_so() -> None:
    model = shared_file(f"{TOPO}/cluster_fabric/nvidia_topograph/tests/models/small-tree.yaml")
    doc, err = _import("topograph", str(model))
    assert all("nics" not in t and "nic_gbps" not in t for t in doc["node_types"])
    assert "the fabric file names no NICs" in err
    conf = shared_file(f"{TOPO}/slurm/topology.conf.tree.example__slurm_man5.conf")
    doc, err = _import("slurm", str(conf))
    assert all("node_type" not in h for h in doc["hosts"])
    assert f"names no NICs: {len(doc['hosts'])} host(s)" in err


def test_slurm_with_an_nvidia_smi_node_topo_gets_the_nic_count(tmp_path: Path) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=s1 Nodes=n[1-2]\n")
    smi = tmp_path / "smi.txt"
    smi.write_text(SMI)
    doc, err = _import("slurm", str(conf), "--node-topo", str(smi))
    (nt,) = doc["node_types"]
    assert nt["nics"] == 1 and "nic_gbps" not in nt
    assert "(2 host(s)) 1 NIC(s) but not their speed" in err


def test_nic_fields_and_warnings_on_documents() -> None:
    assert nic_fields(()) == {} and nic_fields(("a", "b"), 50.0) == {"nics": 2, "nic_gbps": 50.0}
    assert nic_fields(("a",), 0.0) == {"nics": 1}
    doc = {
        "node_types": [
            {"name": "full", "devices": 8, "nics": 8, "nic_gbps": 50.0},
            {"name": "count", "devices": 8, "nics": 4},
            {"name": "none", "devices": 8},
        ],
        "hosts": [
            {"name": "a", "node_type": "full"},
            {"name": "b", "node_type": "count"},
            {"name": "c", "devices": 4},
        ],
        "generate": [{"nodes": 3, "node_type": "none"}],
    }
    ws = nic_warnings(doc, "src")
    assert len(ws) == 3
    assert ws[0].startswith("src names no NICs: 1 host(s) (c)")
    assert "node type count (1 host(s)) 4 NIC(s) but not their speed" in ws[1]
    assert "no NICs for node type none (3 host(s))" in ws[2]
    assert not any("full" in w for w in ws)
