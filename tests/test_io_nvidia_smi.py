"""Tests of placement.io.nvidia_smi: real `nvidia-smi topo -m` pastes, synthetic messy inputs, round trips."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.errors import InputError
from placement.io.nvidia_smi import NvidiaSmiTopology, nvlink_count, parse_nvidia_smi, read_nvidia_smi

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "topologies" / "nvidia_smi_topo"
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
EXPECTED = "expected X, NV<n> (n >= 1), PIX, PXB, PHB, NODE or SYS (legacy SOC)"


def read(name: str, **kw: object) -> NvidiaSmiTopology:
    return read_nvidia_smi(DATA / name, **kw)  # type: ignore[arg-type]


def link(t: NvidiaSmiTopology, a: int, b: int) -> str:
    return t.matrix[a][b]


def assert_well_formed(t: NvidiaSmiTopology) -> None:
    n = len(t.gpus)
    assert t.gpus == tuple(f"GPU{i}" for i in range(n))
    assert len(t.matrix) == n and all(len(r) == n for r in t.matrix)
    for i in range(n):
        assert t.matrix[i][i] == "X"
        for j in range(n):
            assert t.matrix[i][j] == t.matrix[j][i]
            assert t.matrix[i][j] != "SOC"
    assert len(t.gpu_nic) == n and all(len(r) == len(t.nics) for r in t.gpu_nic)
    assert len(t.rails) == len(t.cpu_affinity) == len(t.numa_affinity) == n
    assert all(r is None or 0 <= r < len(t.nics) for r in t.rails)


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


# ------------------------------------------------------------------------------------ synthetic mess

MESSY = """\
Here is my topology, any idea why all_reduce is slow?

```bash
$ nvidia-smi topo -m
\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV4\tNV4\tSYS\tPIX\tSYS\t0-15\t0\t\tN/A
GPU1\tNV4\t X \tNV4\tSYS\tPIX\tSYS\t0-15\t0\t\tN/A
GPU2\tNV4\tNV4\t X \tSYS\tSYS\tPXB\t16-31\t1\t\tN/A
GPU3\tSYS\tSYS\tSYS\t X \tSYS\tPXB\t16-31\t1\t\tN/A
NIC0\tPIX\tPIX\tSYS\tSYS\t X \tSYS
NIC1\tSYS\tSYS\tPXB\tPXB\tSYS\t X

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_4
  NIC1: mlx5_10
```
Thanks!
"""


def test_messy_paste_with_fence_prompt_prose_and_legends() -> None:
    t = parse_nvidia_smi(MESSY)
    assert t.gpus == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert t.matrix[0] == ("X", "NV4", "NV4", "SYS") and t.matrix[3] == ("SYS", "SYS", "SYS", "X")
    assert t.nics == ("mlx5_4", "mlx5_10")
    assert t.gpu_nic == (("PIX", "SYS"), ("PIX", "SYS"), ("SYS", "PXB"), ("SYS", "PXB"))
    assert t.rails == (0, 0, 1, 1)  # natural sort: mlx5_4 before mlx5_10
    assert t.cpu_affinity == ("0-15", "0-15", "16-31", "16-31")
    assert t.numa_affinity == (0, 0, 1, 1)
    assert t.warnings == ()


def test_glued_cells_and_headers_are_split_with_warnings() -> None:
    text = (
        "        GPU0    GPU1    GPU2mlx5_0CPU Affinity\n"
        "GPU0     X      NV1NV2    PIX0-7\n"
        "GPU1NV1   X    SYS SYS     8-15\n"
        "GPU2    NV2     SYS     X   SYS8-15\n"
    )
    t = parse_nvidia_smi(text)
    assert t.matrix == (("X", "NV1", "NV2"), ("NV1", "X", "SYS"), ("NV2", "SYS", "X"))
    assert t.nics == ("mlx5_0",) and t.gpu_nic == (("PIX",), ("SYS",), ("SYS",))
    assert t.cpu_affinity == ("0-7", "8-15", "8-15")
    assert t.rails == (0, None, None)
    assert t.warnings == (
        "line 1, column 25: glued header 'GPU2mlx5_0' split into GPU2 | mlx5_0",
        "line 2, column 17: glued cells 'NV1NV2' split into NV1 | NV2",
        "line 2, column 27: glued cells 'PIX0-7' split into PIX | 0-7",
        "line 3, column 1: row label glued to its first cell; split after GPU1",
        "line 4, column 29: glued cells 'SYS8-15' split into SYS | 8-15",
    )


def test_spaces_only_quoted_and_pipe_bordered_tables() -> None:
    text = (
        "> |      | GPU0 | GPU1 | CPU Affinity |\n"
        "> |------|------|------|--------------|\n"
        "> | GPU0 |  X   | NV8  | 0-3          |\n"
        "> | GPU1 | NV8  |  X   | 4-7          |\n"
    )
    t = parse_nvidia_smi(text)
    assert t.matrix == (("X", "NV8"), ("NV8", "X")) and t.cpu_affinity == ("0-3", "4-7")


def test_empty_and_na_affinity_cells_are_aligned_by_column() -> None:
    text = (
        "        GPU0    GPU1    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
        "GPU0     X      PHB     0-7             0               N/A\n"
        "GPU1    PHB      X                      1               N/A\n"
        "\n"  # a stray blank line inside the table does not end it
        "GPU2    PHB      X      N/A             N/A\n"
    )
    with pytest.raises(InputError) as e:  # GPU2 is not in the header
        parse_nvidia_smi(text)
    assert "row 'GPU2' is not a column of the header at line 1 (GPU0, GPU1)" in str(e.value)
    t = parse_nvidia_smi(text.rsplit("\n", 2)[0] + "\n")
    assert t.cpu_affinity == ("0-7", None)
    assert t.numa_affinity == (0, 1)
    assert t.matrix == (("X", "PHB"), ("PHB", "X"))


def test_nic_rows_with_fewer_cells_and_na_affinity() -> None:
    text = (
        "\tGPU0\tGPU1\tmlx5_0\tmlx5_1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tSYS\tNODE\tSYS\tN/A\tN/A\n"
        "GPU1\tSYS\t X \tSYS\tNODE\t\t\n"
        "mlx5_0\tNODE\tSYS\t X \tSYS\n"
        "mlx5_1\tSYS\tNODE\tSYS\t X \n"
    )
    t = parse_nvidia_smi(text)
    assert t.cpu_affinity == (None, None) and t.numa_affinity == (None, None)
    assert t.rails == (0, 1)


def test_prose_starting_with_gpu_ends_the_table() -> None:
    text = "\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tPIX\t X \nGPU0 is the one that hangs.\n"
    assert parse_nvidia_smi(text).matrix == (("X", "PIX"), ("PIX", "X"))


def test_crlf_and_bom() -> None:
    text = "\ufeff\tGPU0\tGPU1\r\nGPU0\t X \tNV2\r\nGPU1\tNV2\t X \r\n"
    assert parse_nvidia_smi(text).matrix == (("X", "NV2"), ("NV2", "X"))


def test_single_gpu() -> None:
    t = parse_nvidia_smi("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-63\t0\n")
    assert t.matrix == (("X",),) and t.cpu_affinity == ("0-63",) and t.numa_affinity == (0,)


# ------------------------------------------------------------------------------------- rails tie rule


def test_rails_pair_gpus_that_share_a_switch_with_as_many_nics() -> None:
    text = (
        "\tGPU0\tGPU1\tGPU2\tGPU3\tmlx5_0\tmlx5_1\tmlx5_2\tmlx5_3\n"
        "GPU0\t X \tNV12\tNV12\tNV12\tPXB\tPXB\tSYS\tSYS\n"
        "GPU1\tNV12\t X \tNV12\tNV12\tPXB\tPXB\tSYS\tSYS\n"
        "GPU2\tNV12\tNV12\t X \tNV12\tSYS\tSYS\tNODE\tNODE\n"
        "GPU3\tNV12\tNV12\tNV12\t X \tSYS\tSYS\tNODE\tNODE\n"
    )
    t = parse_nvidia_smi(text)
    assert t.rails == (0, 1, None, None)
    assert t.warnings == (
        "rails: GPU0, GPU1 tie at PXB over mlx5_0, mlx5_1; paired one to one in order "
        "(GPU0->mlx5_0, GPU1->mlx5_1)",
        "rails: GPU2, GPU3 tie at NODE over mlx5_2, mlx5_3; rail left as None "
        "(a tie-break by name would be arbitrary)",
    )


def test_rails_tie_with_unequal_counts_is_none() -> None:
    text = "\tGPU0\tGPU1\tNIC0\tNIC1\nGPU0\t X \tSYS\tPIX\tPIX\nGPU1\tSYS\t X \tSYS\tSYS\n"
    t = parse_nvidia_smi(text)
    assert t.rails == (None, None)
    assert t.warnings == (
        "rails: GPU0 tie at PIX over NIC0, NIC1; rail left as None (a tie-break by name would be arbitrary)",
    )


# ------------------------------------------------------------------------------------------- errors


def test_unknown_codes_are_all_reported_verbatim() -> None:
    text = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV\tFOO\nGPU1\tNV\t X \tSYS\nGPU2\tFOO\tSYS\t X \n"
    with pytest.raises(InputError) as e:
        parse_nvidia_smi(text, "box.txt")
    assert str(e.value) == (
        "box.txt: 4 error(s)\n"
        f"  - line 2, column 10: unknown link code 'NV' (GPU0 -> GPU1); {EXPECTED}\n"
        f"  - line 2, column 13: unknown link code 'FOO' (GPU0 -> GPU2); {EXPECTED}\n"
        f"  - line 3, column 6: unknown link code 'NV' (GPU1 -> GPU0); {EXPECTED}\n"
        f"  - line 4, column 6: unknown link code 'FOO' (GPU2 -> GPU0); {EXPECTED}"
    )
    assert len(e.value.problems) == 4


def test_nv_code_glued_to_affinity_is_ambiguous() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV120-23\nGPU1\tNV12\t X \t0-23\n"
    with pytest.raises(InputError) as e:
        parse_nvidia_smi(text, "box.txt")
    assert str(e.value) == (
        f"box.txt: line 2, column 10: unknown link code 'NV120-23' (GPU0 -> GPU1); {EXPECTED}; it looks like "
        "NV<n> glued to the CPU Affinity (ambiguous: put a space between them)"
    )


def test_nic_legend_conflicts_are_errors() -> None:
    text = "\tGPU0\tNIC0\tNIC1\nGPU0\t X \tPIX\tSYS\n\nNIC Legend:\n  NIC0: mlx5_0\n  NIC1: mlx5_0\n"
    with pytest.raises(InputError) as e:
        parse_nvidia_smi(text, "box.txt")
    assert (
        str(e.value)
        == "box.txt: line 6, column 9: NIC Legend gives NIC0 and NIC1 the same device name 'mlx5_0'"
    )


def test_asymmetric_matrix_names_both_cells() -> None:
    text = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV1\tSYS\nGPU1\tNV2\t X \tSYS\nGPU2\tSYS\tSYS\t X \n"
    with pytest.raises(InputError) as e:
        parse_nvidia_smi(text, "box.txt")
    assert str(e.value) == (
        "box.txt: line 2, column 10: GPU0 -> GPU1 is 'NV1' but GPU1 -> GPU0 is 'NV2' (line 3, column 6); "
        "the matrix must be symmetric"
    )


def test_asymmetric_gpu_nic_against_nic_row() -> None:
    text = "\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tSYS\t X \n"
    with pytest.raises(InputError) as e:
        parse_nvidia_smi(text)
    assert "GPU0 -> NIC0 is 'PIX' but NIC0 -> GPU0 is 'SYS' (line 3, column 6)" in str(e.value)


def test_truncated_table_verbatim() -> None:
    text = "      GPU0  GPU1  GPU2  GPU3\nGPU0   X    NV1   NV1   NV1\nGPU1  NV1    X    NV1   NV1\n"
    with pytest.raises(InputError) as e:
        parse_nvidia_smi(text, "cut.txt")
    assert str(e.value) == (
        "cut.txt: line 1, column 7: table truncated: the header lists 4 GPUs (GPU0..GPU3) but rows are "
        "present only for GPU0, GPU1; missing rows GPU2, GPU3 (allow_partial=True fills them)"
    )


def test_partial_fill_by_symmetry_and_most_common_code() -> None:
    text = "\tGPU0\tGPU1\tGPU2\tGPU3\nGPU0\t X \tNV2\tNV2\tNV1\n"
    t = parse_nvidia_smi(text, allow_partial=True)
    assert t.matrix == (
        ("X", "NV2", "NV2", "NV1"),
        ("NV2", "X", "NV2", "NV2"),
        ("NV2", "NV2", "X", "NV2"),
        ("NV1", "NV2", "NV2", "X"),
    )
    (w,) = t.warnings
    assert w == (
        "table truncated: the header lists 4 GPUs (GPU0..GPU3) but rows are present only for GPU0; "
        "missing rows GPU1..GPU3; allow_partial=True filled 3 GPU pair(s) whose rows are both missing "
        "with NV2 (the most common GPU-GPU code seen) and 3 pair(s) from the present row by symmetry"
    )


def test_header_without_rows_cannot_be_filled() -> None:
    with pytest.raises(InputError) as e:
        parse_nvidia_smi("\tGPU0\tGPU1\tCPU Affinity\n\nsome prose\n", allow_partial=True)
    assert str(e.value) == (
        "<nvidia-smi>: line 1, column 2: table truncated: the header lists 2 GPUs (GPU0, GPU1) but no GPU "
        "rows are present; missing rows GPU0, GPU1; the rows stop at line 3 ('some prose'); "
        "nothing to fill them from (allow_partial=True)"
    )


def test_truncation_names_the_line_that_stopped_the_rows() -> None:
    text = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV1\tNV1\nGU1\tNV1\t X \tNV1\nGPU2\tNV1\tNV1\t X\n"
    with pytest.raises(InputError, match=r"missing rows GPU1, GPU2; the rows stop at line 3 \('GU1\tNV1"):
        parse_nvidia_smi(text)


def test_spoiled_header_is_pointed_at() -> None:
    text = "        GPU0    GPU1    NV1     CPU Affinity\nGPU0     X      NV1     0-3\n"
    with pytest.raises(InputError) as e:
        parse_nvidia_smi(text)
    assert str(e.value).endswith(
        "; line 1 starts like a header but 'NV1' (line 1, column 25) is not a GPU or NIC name"
        "; line 2 looks like a table row but has no header line above it"
    )


def test_no_table_verbatim() -> None:
    text = "hello\n```\n$ nvidia-smi topo -m\nNo devices were found\n```\n"
    with pytest.raises(InputError) as e:
        parse_nvidia_smi(text, "paste.md")
    assert str(e.value) == (
        "paste.md: lines 1-5: no `nvidia-smi topo -m` table found: expected a header line listing GPU0, "
        "GPU1, ... (then NICs and CPU Affinity, optionally) followed by one row per GPU"
    )


def test_rows_without_header_are_pointed_at() -> None:
    with pytest.raises(InputError, match="line 2 looks like a table row but has no header line above it"):
        parse_nvidia_smi("my rows:\nGPU0 X NV1\nGPU1 NV1 X\n")


def test_empty_input() -> None:
    for text in ("", "  \n\t\n"):
        with pytest.raises(InputError) as e:
            parse_nvidia_smi(text, "empty.txt")
        assert str(e.value) == (
            "empty.txt: line 1, column 1: the input is empty; "
            "expected the text printed by `nvidia-smi topo -m`"
        )


def test_diagonal_off_diagonal_x_and_cell_count() -> None:
    text = (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"
        "GPU0\tNV1\tNV1\tX\t0-3\n"
        "GPU1\tNV1\t X \tSYS\t0-3\n"
        "GPU2\tSYS\tSYS\t0-3\n"
    )
    with pytest.raises(InputError) as e:
        parse_nvidia_smi(text, "t.txt")
    assert [str(p) for p in e.value.problems] == [
        "line 2, column 6: diagonal cell GPU0 -> GPU0 is 'NV1'; the diagonal must be X",
        "line 2, column 14: cell GPU0 -> GPU2 is 'X'; X (self) is only valid on the diagonal",
        "line 4, column 1: row GPU2 has 2 link cells but the header (line 1) has 3 device columns "
        "(3 GPUs + 0 NICs); each row needs one link cell per column",
    ]


def test_bad_affinity_values_and_duplicate_rows() -> None:
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tPIX\t0-3;7\tzero\n"
        "GPU1\tPIX\t X \t4-7\t1\n"
        "GPU1\tPIX\t X \t4-7\t1\n"
    )
    with pytest.raises(InputError) as e:
        parse_nvidia_smi(text)
    assert [str(p) for p in e.value.problems] == [
        "line 2, column 14: CPU Affinity '0-3;7' must be a CPU list like 0-31,64-95 or N/A",
        "line 2, column 20: unexpected cell 'zero' after the affinity cells of row GPU0",
        "line 4, column 1: row GPU1 appears twice (lines 3 and 4); each device has one row",
    ]


def test_bad_table_argument() -> None:
    with pytest.raises(InputError, match="table: must be a table index >= 0"):
        parse_nvidia_smi("\tGPU0\nGPU0\t X \n", table=-1)
    with pytest.raises(InputError, match=r"table=1 is out of range: the input holds 1 table\(s\)"):
        parse_nvidia_smi("\tGPU0\nGPU0\t X \n", table=1)


def test_read_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(InputError) as e:
        read_nvidia_smi(missing)
    assert e.value.source == str(missing) and str(e.value.problems[0]).startswith("cannot read the file")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\tGPU0\nGPU0\t\xff\n")
    with pytest.raises(InputError, match=r"byte 11 \(line 2, column 6\): not UTF-8 text: byte 0xff"):
        read_nvidia_smi(bad)
    utf16 = tmp_path / "ps.txt"
    utf16.write_bytes("\tGPU0\tGPU1\r\nGPU0\t X \tNV1\r\nGPU1\tNV1\t X \r\n".encode("utf-16"))
    assert read_nvidia_smi(utf16).matrix == (("X", "NV1"), ("NV1", "X"))


def test_nvlink_count() -> None:
    codes = ("NV12", "NV1", "NV18", "X", "SYS", "NV", "PIX", " NV4 ")
    assert [nvlink_count(c) for c in codes] == [12, 1, 18, 0, 0, 0, 0, 4]


# ------------------------------------------------------------------------------------------ hypothesis

GPU_CODES = ["NV1", "NV2", "NV4", "NV6", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"]
PCIE_CODES = ["PIX", "PXB", "PHB", "NODE", "SYS"]
Rendered = tuple[str, list[list[str]], list[list[str]], list[str]]  # text, matrix, gpu_nic, cpu
SEPS = st.sampled_from([" ", "  ", "\t", " \t", "\t ", "     ", "\t\t"])


@st.composite
def rendered_tables(draw: st.DrawFn) -> Rendered:
    n = draw(st.integers(1, 9))
    k = draw(st.integers(0, 3))
    mat = [["X"] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            mat[i][j] = mat[j][i] = draw(st.sampled_from(GPU_CODES))
    gn = [[draw(st.sampled_from(PCIE_CODES)) for _ in range(k)] for _ in range(n)]
    nn = [["X"] * k for _ in range(k)]
    for a in range(k):
        for b in range(a + 1, k):
            nn[a][b] = nn[b][a] = draw(st.sampled_from(PCIE_CODES))
    cpu = [f"{draw(st.integers(0, 64))}-{draw(st.integers(65, 127))}" for _ in range(n)]
    names = [f"GPU{i}" for i in range(n)] + [f"mlx5_{a}" for a in range(k)]

    def join(cells: list[str]) -> str:
        return "".join(draw(SEPS) + c for c in cells)

    def pad(code: str) -> str:
        return draw(st.sampled_from([code, f" {code} "])) if code == "X" else code

    lines = [draw(st.sampled_from(["", "$ nvidia-smi topo -m", "```", "Topology:"]))]
    lines.append(join([*names, "CPU Affinity"]))
    for i in range(n):
        lines.append(f"GPU{i}" + join([*(pad(c) for c in mat[i] + gn[i]), cpu[i]]))
    for a in range(k):
        lines.append(f"mlx5_{a}" + join([pad(c) for c in [r[a] for r in gn] + nn[a]]))
    lines.append(draw(st.sampled_from(["", "```", "\nLegend:\n\n  X    = Self"])))
    return "\n".join(lines) + "\n", mat, gn, cpu


@settings(max_examples=150, deadline=None, database=None)
@given(rendered_tables())
def test_round_trip_random_symmetric_tables(case: Rendered) -> None:
    text, mat, gn, cpu = case
    t = parse_nvidia_smi(text)
    assert [list(r) for r in t.matrix] == mat
    assert [list(r) for r in t.gpu_nic] == gn
    assert list(t.cpu_affinity) == cpu
    assert_well_formed(t)


FRAGMENTS = st.sampled_from(
    ["GPU0", "GPU1", "GPU2", "mlx5_0", "NIC0", "X", " X ", "NV1", "NV12", "NV", "SYS", "SOC", "PIX", "FOO",
     "CPU Affinity", "NUMA Affinity", "GPU NUMA ID", "0-3", "N/A", "1", "NIC Legend:", "NIC0: mlx5_0",
     "```", "|", "> ", " ", "\t", "\n", "\n", "\n", "\r\n"]
)  # fmt: skip


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(FRAGMENTS, max_size=60).map("".join))
def test_garbage_never_raises_a_raw_exception(text: str) -> None:
    try:
        t = parse_nvidia_smi(text)
    except InputError as e:
        assert e.problems and all(p.path for p in e.problems)
    else:
        assert_well_formed(t)


@pytest.mark.parametrize(
    "text",
    ["GPU1\nGPU1X", "\tGPU1\tGPU2\nGPU1\tX\tNV1\nGPU2\tNV1\tX", "\tGPU1\tGPU0\nGPU1\tX\tNV1\nGPU0\tNV1\tX"],
)
def test_gpu_columns_that_skip_or_reorder_numbers_are_refused(text: str) -> None:
    """A device's index is its position: a table of GPU1 alone must not become gpu0 (found by the fuzz)."""
    with pytest.raises(InputError, match=r"nvidia-smi numbers the GPUs it sees GPU0\.\.GPU\d in order"):
        parse_nvidia_smi(text)
