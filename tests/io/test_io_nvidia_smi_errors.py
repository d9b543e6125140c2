"""Tests of placement.io.importers.nvidia_smi's error reports: every problem named with its line and column, unreadable
files, and fuzzed garbage that must raise InputError, never a raw exception."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.errors import InputError
from placement.io.importers.nvidia_smi import parse_nvidia_smi, read_nvidia_smi
from tests.support_nvidia_smi import assert_well_formed

EXPECTED = "expected X, NV<n> (n >= 1), PIX, PXB, PHB, NODE or SYS (legacy SOC)"


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


# ------------------------------------------------------------------------------------------ hypothesis

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
