"""Tests of placement.io.importers.nvidia_smi on real `nvidia-smi topo -m` pastes (the shared topology data). Synthetic
layouts: tests/io/test_io_nvidia_smi_layouts.py; error reports: tests/io/test_io_nvidia_smi_errors.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from placement.errors import InputError
from placement.io.importers.nvidia_smi import NvidiaSmiTopology, nvlink_count, read_nvidia_smi
from tests.conftest import TOPOLOGIES
from tests.support_nvidia_smi import assert_well_formed

DATA = TOPOLOGIES / "nvidia_smi_topo"
needs_data = pytest.mark.skipif(
    not DATA.is_dir(),
    reason=f"shared topology data not found at {DATA} (expected ../shared/data next to the repo)",
)

DGX1 = "dgx1_v100_8gpu_4nic__pytorch_ddp_readme.txt"
DGX1_LIKE = "dgx1like_v100_8gpu_1nic__oneflow_dlperf.txt"
DGX2 = "dgx2_v100_16gpu_10nic__nccl-tests_issue78_EXCERPT_rows0-3.txt"
HGX = "hgx_h100_8gpu_8nic_rail_pix__sglang_issue30401.txt"
A100_H100 = "a100_h100_8gpu_gpuonly__stas00_ml-engineering_network_README_L366-396.txt"
H100 = "h100_8gpu_gpuonly__stas00_ml-engineering_training_performance_README_L755-766.txt"
A100_PCIE = "a100_pcie_8gpu_nvlink_bridge_pairs__nccl-tests_issue178.txt"
DELL = "dell_c4140_v100_4gpu_nv2_1nic__nccl-tests_issue68.txt"
T4 = "t4_4gpu_pcie_sys_node__nccl_issue428.txt"
L40S = "l40s_8gpu_pcie_1nic__nccl-tests_issue273.txt"
K80 = "k80_6gpu_pcie_legacy_soc__nccl_issue19.txt"


def read(name: str, **kw: object) -> NvidiaSmiTopology:
    return read_nvidia_smi(DATA / name, **kw)  # type: ignore[arg-type]


def link(t: NvidiaSmiTopology, a: int, b: int) -> str:
    return t.matrix[a][b]


# ------------------------------------------------------------------------------------- the real files


@needs_data
@pytest.mark.parametrize("path", sorted(DATA.glob("*.txt")) if DATA.is_dir() else [], ids=lambda p: p.name)
def test_every_shared_file_parses(path: Path) -> None:
    t = read_nvidia_smi(path, allow_partial=path.name == DGX2)
    assert_well_formed(t)
    assert len(t.gpus) >= 4


@needs_data
def test_every_expected_file_is_present() -> None:
    names = {p.name for p in DATA.glob("*.txt")}
    for name in (DGX1, DGX1_LIKE, DGX2, HGX, A100_H100, H100, A100_PCIE, DELL, T4, L40S, K80):
        assert name in names


@needs_data
def test_dgx1_cube_mesh_and_four_rails() -> None:
    t = read(DGX1)
    assert len(t.gpus) == 8
    assert (link(t, 0, 1), link(t, 0, 3), link(t, 0, 5)) == ("NV1", "NV2", "SYS")
    assert (link(t, 0, 4), link(t, 1, 5), link(t, 2, 6), link(t, 3, 7)) == ("NV2", "NV2", "NV1", "NV1")
    assert sum(nvlink_count(c) for c in t.matrix[0]) == 6  # 6 NVLinks per V100
    # header order is kept; rails index the natural sort mlx5_0 < mlx5_1 < mlx5_2 < mlx5_3
    assert t.nics == ("mlx5_2", "mlx5_0", "mlx5_3", "mlx5_1")
    assert t.gpu_nic[0] == ("SYS", "PIX", "SYS", "PHB")
    assert t.rails == (0, 0, 1, 1, 2, 2, 3, 3)
    assert t.cpu_affinity == ("0-19,40-59",) * 8
    assert t.numa_affinity == (None,) * 8  # no NUMA Affinity column
    assert t.warnings == ()


@needs_data
def test_dgx1like_single_nic_rails_stop_at_sys() -> None:
    t = read(DGX1_LIKE)
    assert t.nics == ("mlx5_0",)
    assert [r[0] for r in t.gpu_nic] == ["NODE", "NODE", "PIX", "PIX", "SYS", "SYS", "SYS", "SYS"]
    assert t.rails == (0, 0, 0, 0, None, None, None, None)
    assert t.cpu_affinity[0] == "0-11,24-35" and t.cpu_affinity[7] == "12-23,36-47"


@needs_data
def test_hgx_h100_eight_rails_through_the_nic_legend() -> None:
    t = read(HGX)
    assert t.nics == tuple(f"mlx5_{k}" for k in range(8))  # NIC0..NIC7 resolved by the NIC Legend
    assert t.rails == tuple(range(8))
    assert all(link(t, i, j) == "NV18" for i in range(8) for j in range(8) if i != j)
    assert nvlink_count(link(t, 3, 4)) == 18
    assert t.gpu_nic[5] == ("SYS", "SYS", "SYS", "SYS", "NODE", "PIX", "NODE", "NODE")
    assert t.numa_affinity == (0, 0, 0, 0, 1, 1, 1, 1)  # "GPU NUMA ID" N/A column ignored
    assert t.cpu_affinity[0] == "0-47,96-143" and t.cpu_affinity[4] == "48-95,144-191"
    assert t.warnings == ()


@needs_data
def test_a100_pcie_nvlink_bridge_pairs() -> None:
    t = read(A100_PCIE)
    assert (link(t, 0, 1), link(t, 0, 2), link(t, 0, 4)) == ("NV12", "NODE", "SYS")
    assert [link(t, 2 * k, 2 * k + 1) for k in range(4)] == ["NV12"] * 4
    assert (link(t, 4, 6), link(t, 3, 7)) == ("NODE", "SYS")
    assert t.nics == () and t.rails == (None,) * 8
    assert t.cpu_affinity[3] == "0-31,64-95" and t.cpu_affinity[4] == "32-63,96-127"
    assert t.numa_affinity == (0, 0, 0, 0, 1, 1, 1, 1)


@needs_data
def test_k80_legacy_soc_is_sys_with_a_warning() -> None:
    t = read(K80)
    assert len(t.gpus) == 6
    assert (link(t, 0, 1), link(t, 0, 2), link(t, 2, 3), link(t, 2, 4)) == ("PIX", "SYS", "PIX", "PHB")
    assert sum(row.count("SYS") for row in t.matrix) == 16
    assert len(t.warnings) == 1
    assert "SOC" in t.warnings[0] and "SYS" in t.warnings[0] and "16 cell(s)" in t.warnings[0]
    assert t.cpu_affinity == ("0-7,16-23",) * 2 + ("8-15,24-31",) * 4


@needs_data
def test_t4_gpu0_alone_on_its_socket() -> None:
    t = read(T4)
    assert t.matrix[0] == ("X", "SYS", "SYS", "SYS")
    assert (link(t, 1, 2), link(t, 1, 3), link(t, 2, 3)) == ("NODE", "NODE", "NODE")
    assert t.cpu_affinity == ("0-15,32-47",) + ("16-31,48-63",) * 3


@needs_data
def test_l40s_one_far_nic_gives_no_rails() -> None:
    t = read(L40S)
    assert t.nics == ("NIC0",)  # no NIC Legend: header name kept
    assert all(r == ("SYS",) for r in t.gpu_nic)
    assert t.rails == (None,) * 8
    assert (link(t, 0, 3), link(t, 3, 4), link(t, 5, 7)) == ("NODE", "SYS", "NODE")
    assert t.numa_affinity == (0, 0, 0, 0, 1, 1, 1, 1)
    assert t.cpu_affinity[7] == "90-179"


@needs_data
def test_dell_tabs_padded_x_and_one_nic() -> None:
    t = read(DELL)
    assert all(link(t, i, j) == "NV2" for i in range(4) for j in range(4) if i != j)
    assert t.nics == ("mlx5_0",) and t.gpu_nic == (("NODE",),) * 4
    assert t.rails == (0, 0, 0, 0)  # a single NIC at NODE is the unique closest
    assert t.cpu_affinity == ("0,2,4,6,8,10",) * 4 and t.numa_affinity == (0,) * 4


@needs_data
def test_h100_in_a_markdown_fence() -> None:
    t = read(H100)
    assert all(link(t, i, j) == "NV18" for i in range(8) for j in range(8) if i != j)
    assert t.cpu_affinity[0] == "0-51,104-155" and t.numa_affinity[7] == 1
    assert t.warnings == ()


@needs_data
def test_two_tables_first_by_default_with_a_warning() -> None:
    t = read(A100_H100)
    assert link(t, 0, 7) == "NV12" and t.cpu_affinity[4] == "24-47"
    assert t.warnings == (
        "the input holds 2 nvidia-smi tables (headers at lines 5, 20); using the first (table=0); "
        "pass table=<index> (0-based, 0..1) to choose another",
    )
    h = read(A100_H100, table=1)
    assert all(link(h, i, j) == "NV18" for i in range(8) for j in range(8) if i != j)
    assert h.cpu_affinity[4] == "52-103" and h.numa_affinity == (0, 0, 0, 0, 1, 1, 1, 1)
    assert h.warnings == ()
    assert read(A100_H100, table=0).matrix == t.matrix


@needs_data
def test_two_tables_index_out_of_range() -> None:
    with pytest.raises(InputError) as e:
        read(A100_H100, table=2)
    assert str(e.value) == (
        f"{DATA / A100_H100}: table: table=2 is out of range: "
        "the input holds 2 table(s) (valid: 0..1, 0-based)"
    )


@needs_data
def test_dgx2_excerpt_is_truncated() -> None:
    with pytest.raises(InputError) as e:
        read(DGX2)
    assert e.value.source == str(DATA / DGX2)
    assert str(e.value) == (
        f"{DATA / DGX2}: line 1, column 9: table truncated: the header lists 16 GPUs (GPU0..GPU15) but rows "
        "are present only for GPU0..GPU3; missing rows GPU4..GPU15 (allow_partial=True fills them)"
    )


@needs_data
def test_dgx2_excerpt_imports_partially() -> None:
    t = read(DGX2, allow_partial=True)
    assert len(t.gpus) == 16
    assert_well_formed(t)
    assert all(link(t, i, j) == "NV6" for i in range(16) for j in range(16) if i != j)
    assert t.nics == tuple(f"mlx5_{k}" for k in range(10))
    assert t.gpu_nic[0][:4] == ("PIX", "PXB", "NODE", "NODE") and t.gpu_nic[2][:2] == ("PXB", "PIX")
    assert t.rails == (0, 0, 1, 1) + (None,) * 12
    assert t.cpu_affinity == ("0-23,48-71",) * 4 + (None,) * 12
    (w,) = t.warnings
    assert "filled 66 GPU pair(s)" in w and "with NV6" in w and "48 pair(s) from the present row" in w
    assert "120 GPU-NIC cell(s)" in w
