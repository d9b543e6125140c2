"""Tests of placement.io.importers.nvidia_smi on synthetic layouts: messy pastes (fences, prose, glued cells, pipes, CRLF),
the rails tie rule, NVLink counts, and round trips of random symmetric tables."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.errors import InputError
from placement.io.importers.nvidia_smi import nvlink_count, parse_nvidia_smi
from tests.support_nvidia_smi import assert_well_formed

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
