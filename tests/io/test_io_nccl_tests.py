"""The nccl-tests reader on real logs (tests/fixtures/nccl_tests, each citing where it was posted): hosts, devices,
rows and values read off the logs by eye; malformed logs give errors that name the line."""

from __future__ import annotations

import pytest

from placement.errors import InputError
from placement.io.importers.nccl_tests import bus_factor, parse_nccl_tests, read_nccl_tests
from tests.conftest import FIXTURES

LOGS = FIXTURES / "nccl_tests"


def test_every_fixture_cites_its_source_on_its_first_line() -> None:
    files = sorted(LOGS.glob("*.txt"))
    assert len(files) >= 2
    for f in files:
        first = f.read_text().splitlines()[0]
        assert first.startswith("# source: https://github.com/"), f.name


def test_single_host_a100_all_reduce() -> None:
    log = read_nccl_tests(LOGS / "all_reduce_1x8_a100_nvswitch__oracle-japan_ocitutorials.txt")
    assert log.collective == "all_reduce"
    assert log.hosts == ("inst-ks8ls-comp",)
    assert log.devices_on("inst-ks8ls-comp") == tuple(range(8))
    assert [r.name for r in log.ranks] == ["NVIDIA A100-SXM4-40GB"] * 8
    assert log.ranks[4].bus_id == "0x8d"
    assert len(log.rows) == 28  # 64 B .. 8 GiB, doubling
    assert [r.size for r in log.rows] == [64 * 2**k for k in range(28)]
    last = log.rows[-1]
    assert (last.size, last.count, last.dtype, last.redop) == (8589934592, 2147483648, "float", "sum")
    assert (last.oop_time_us, last.oop_algbw, last.oop_busbw) == (63929.0, 134.37, 235.14)
    assert (last.ip_time_us, last.ip_algbw, last.ip_busbw) == (63911.0, 134.40, 235.21)
    assert log.rows[0].oop_time_us == 32.01
    # the log's busbw column is algbw * 2(n-1)/n for 8 ranks
    assert last.oop_busbw == pytest.approx(last.oop_algbw * 14 / 8, abs=0.01)


def test_two_host_logs() -> None:
    a100 = read_nccl_tests(LOGS / "all_reduce_2x8_a100_roce__oracle-japan_ocitutorials.txt")
    assert a100.collective == "all_reduce"  # from the file name: the log itself names no *_perf
    assert a100.hosts == ("inst-ks8ls-comp", "inst-6ejzf-comp")
    assert [a100.devices_on(h) for h in a100.hosts] == [tuple(range(8))] * 2
    assert a100.rows[-1].oop_busbw == 71.56 and a100.rows[-1].ip_busbw == 71.56
    assert a100.rows[-1].line == 53  # the line in the file, counted from 1
    h200 = read_nccl_tests(LOGS / "all_reduce_2x8_h200__argonne-lcf_oci-howto.txt")
    assert h200.hosts == ("GPU-6550", "GPU-3841") and len(h200.ranks) == 16
    assert [r.size for r in h200.rows] == [2**30 * 2**k for k in range(5)]
    assert h200.rows[-1].oop_busbw == 486.49
    gb10 = read_nccl_tests(LOGS / "all_gather_2x1_gb10__dgx-spark-playbooks_issue25.txt")
    assert gb10.collective == "all_gather"  # "# Collective test starting: all_gather_perf"
    assert gb10.hosts == ("spark", "spark-3995") and [r.device for r in gb10.ranks] == [0, 0]
    (row,) = gb10.rows
    assert (row.size, row.redop, row.oop_busbw, row.ip_busbw) == (17179869184, "none", 18.94, 20.95)
    assert gb10.bus_factor == 0.5 and bus_factor("sendrecv", 2) == 1.0


OLD_FORMAT = """\
# nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#   Rank  0 Pid   3795 on w-system device  0 [0x01] GeForce RTX 2080 Ti
#   Rank  1 Pid   3795 on w-system device  1 [0x02] GeForce RTX 2080 Ti
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2   float     sum     7.18    0.00    0.00  0e+00     7.02    0.00    0.00  0e+00
host:1:1 [0] NCCL INFO something in between
          16             4   float     sum     7.00    0.00    0.00  0e+00      N/A     N/A     N/A    N/A
"""


def test_the_old_format_without_group_nor_root_and_n_a_halves() -> None:
    log = parse_nccl_tests(OLD_FORMAT, "old.txt", collective="all_reduce_perf")
    assert log.collective == "all_reduce" and log.hosts == ("w-system",)
    assert [r.size for r in log.rows] == [8, 16]
    assert log.rows[1].ip_time_us is None and log.rows[1].times_us() == (7.0,)


@pytest.mark.parametrize(
    ("edit", "where", "what"),
    [
        (
            (
                "          16             4   float     sum     7.00",
                "          16             4   float     sum     fast",
            ),
            "line 8",
            "time out-of-place: 'fast' is not a number",
        ),
        (("7.02    0.00    0.00  0e+00\n", "7.02    0.00\n"), "line 6", "10 cells, the header names 12"),
        (
            ("#   Rank  1 Pid   3795 on w-system device  1", "#   Rank  0 Pid   3795 on w-system device  1"),
            "line 3",
            "rank 0 is listed twice",
        ),
        (("device  1 [0x02]", "device  0 [0x02]"), "line 3", "two ranks on w-system device 0"),
    ],
)
def test_malformed_logs_name_the_line(edit: tuple[str, str], where: str, what: str) -> None:
    text = OLD_FORMAT.replace(*edit)
    assert text != OLD_FORMAT
    with pytest.raises(InputError) as e:
        parse_nccl_tests(text, "bad.txt", collective="all_reduce")
    assert f"{where}: {what}" in str(e.value)


def test_a_log_without_header_table_or_collective() -> None:
    with pytest.raises(InputError, match="no rank lines"):
        parse_nccl_tests(OLD_FORMAT.replace("#   Rank", "# R"), "x.txt", collective="all_reduce")
    with pytest.raises(InputError, match="no table"):
        parse_nccl_tests("\n".join(OLD_FORMAT.splitlines()[:3]), "x.txt", collective="all_reduce")
    with pytest.raises(InputError, match="which collective"):
        parse_nccl_tests(OLD_FORMAT, "x.txt")
    rows_first = "           8             2   float     sum     7.18    0.00    0.00  0e+00\n" + OLD_FORMAT
    with pytest.raises(InputError, match="line 1: a table row before the column header"):
        parse_nccl_tests(rows_first, "x.txt", collective="all_reduce")
