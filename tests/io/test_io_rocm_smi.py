"""rocm-smi --showtopo importer: the MI300X fixture (written from ROCm's documented format), a mixed XGMI/PCIe
table, and refusals."""

from __future__ import annotations

import pytest

from placement.errors import InputError
from placement.io.importers.nvidia_smi import parse_nvidia_smi
from placement.io.importers.rocm_smi import parse_rocm_smi, read_rocm_smi
from tests.conftest import FIXTURES

MIXED = """============================ ROCm System Management Interface ============================
================================ Weight between two GPUs =================================
       GPU0         GPU1         GPU2         GPU3
GPU0   0            15           40           52
GPU1   15           0            52           40
GPU2   40           52           0            15
GPU3   52           40           15           0

================================= Hops between two GPUs ==================================
       GPU0         GPU1         GPU2         GPU3
GPU0   0            1            2            3
GPU1   1            0            3            2
GPU2   2            3            0            1
GPU3   3            2            1            0

=============================== Link Type between two GPUs ===============================
       GPU0         GPU1         GPU2         GPU3
GPU0   0            XGMI         PCIE         PCIE
GPU1   XGMI         0            PCIE         PCIE
GPU2   PCIE         PCIE         0            XGMI
GPU3   PCIE         PCIE         XGMI         0

======================================= Numa Nodes =======================================
GPU[0]\t\t: (Topology) Numa Node: 0
GPU[1]\t\t: (Topology) Numa Node: 1
GPU[2]\t\t: (Topology) Numa Node: 0
GPU[3]\t\t: (Topology) Numa Node: 1
================================== End of ROCm SMI Log ===================================
"""


def test_mi300x_fixture_is_a_full_xgmi_mesh() -> None:
    t = read_rocm_smi(FIXTURES / "rocm_smi_showtopo_mi300x.txt")
    assert t.gpus == tuple(f"GPU{i}" for i in range(8)) and t.kind == "MI300X"
    assert t.matrix is None and t.mesh_link_gbps == 64.0  # every pair XGMI at 1 hop: 1 link of 64 GB/s
    assert t.numa == (0, 0, 0, 0, 1, 1, 1, 1) and t.warnings == ()


def test_mixed_xgmi_and_pcie_map_onto_codes() -> None:
    t = parse_rocm_smi(MIXED, model="MI250")
    assert t.kind == "MI250" and t.nv_link_gbps == 50.0 and t.mesh_link_gbps is None
    # XGMI 1 hop -> NV1; PCIe on one NUMA node at 2 hops -> PIX; across NUMA nodes -> SYS
    assert t.matrix == (
        ("X", "NV1", "PIX", "SYS"),
        ("NV1", "X", "SYS", "PIX"),
        ("PIX", "SYS", "X", "NV1"),
        ("SYS", "PIX", "NV1", "X"),
    )


def test_refusals() -> None:
    with pytest.raises(InputError, match="placement import nvidia-smi"):
        parse_rocm_smi(
            "        GPU0    GPU1    CPU Affinity\nGPU0     X      NV18    0-55\nGPU1    NV18     X      0-55\n"
        )
    with pytest.raises(InputError, match="no `Link Type between two GPUs` table"):
        parse_rocm_smi(
            MIXED.split("=====")[0] + "========== Weight between two GPUs ==========\n  GPU0\nGPU0 0\n"
        )
    with pytest.raises(InputError, match="must be symmetric"):
        parse_rocm_smi(
            MIXED.replace("GPU3   PCIE         PCIE         XGMI", "GPU3   PCIE         PCIE         PCIE")
        )
    with pytest.raises(InputError, match="unknown GPU model"):
        parse_rocm_smi(MIXED, model="MI999")


def test_nvidia_smi_importer_names_rocm_smi() -> None:
    with pytest.raises(InputError) as e:
        parse_nvidia_smi((FIXTURES / "rocm_smi_showtopo_mi300x.txt").read_text(), "x.txt")
    assert len(e.value.problems) == 1 and "placement import rocm-smi" in e.value.render()
