"""Read the output of NVIDIA's nccl-tests (``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``,
``sendrecv_perf``...): the ranks with their hosts and devices, and the table of sizes, times and bandwidths.

Owns `NcclTestsLog` (one run: collective, ranks, rows) and its reader; the fit is `placement.cost.calibrate`.

What is read (the format of github.com/NVIDIA/nccl-tests ``src/common.cu``, old and new):

* the rank lines ``#  Rank  3 Group  0 Pid 944 on HOST device  3 [0x54] NVIDIA A100-SXM4-40GB`` (``Group``
  since 2.13; older logs have none): which host and which CUDA device each rank ran on;
* the column header ``size count type redop [root] time algbw busbw #wrong|error time algbw busbw #wrong|error``
  (out-of-place, then in-place): the columns are found by name, so logs with or without ``redop``/``root``
  read alike; a test that prints only one half (in-place ``N/A``) keeps that half;
* one row per size; a row with fewer or more cells than the header, or a cell that is not a number, is an error
  that names the line. Lines that are neither comments nor rows (NCCL INFO, shell prompts) are skipped.

The collective comes from ``# Collective test starting: NAME_perf`` (nccl-tests >= 2.17), else from the first
``NAME_perf`` the text names (the command line), else from the file name (``all_reduce...``), else from the
caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from placement.errors import Problems
from placement.io.text import read_text

__all__ = [
    "NcclTestsLog",
    "PerfRow",
    "RankInfo",
    "bus_factor",
    "parse_nccl_tests",
    "read_nccl_tests",
]

_RANK_RE = re.compile(
    r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_TEST_RE = re.compile(r"Collective test starting:\s*(\w+?)_perf\b")
_PERF_RE = re.compile(
    r"\b(all_reduce|all_gather|reduce_scatter|sendrecv|alltoall|broadcast|reduce|gather|scatter)_perf"
)
_NAME_RE = re.compile(r"(all_reduce|all_gather|reduce_scatter|sendrecv|alltoall|broadcast)")
_NUMBER_ROW = re.compile(r"^\s*\d+\s")


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw / algbw for `collective` over `n` ranks (``GetBw`` in its ``src/*.cu``): all-reduce
    2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; send/recv, broadcast, reduce 1."""
    if n < 1:
        raise ValueError(f"ranks must be >= 1, got {n}")
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class RankInfo:
    """One rank as the log's header names it: its host and CUDA device (index and PCI bus id), the GPU's name."""

    rank: int
    host: str
    device: int
    bus_id: str
    name: str
    line: int


@dataclass(frozen=True)
class PerfRow:
    """One size of the table: bytes, elements, data type, reduction, and per half (out-of-place, in-place) the
    time in µs and the algorithm and bus bandwidths in GB/s (None where the log prints ``N/A``)."""

    line: int
    size: int
    count: int
    dtype: str
    redop: str
    oop_time_us: float | None
    oop_algbw: float | None
    oop_busbw: float | None
    ip_time_us: float | None
    ip_algbw: float | None
    ip_busbw: float | None

    def times_us(self) -> tuple[float, ...]:
        """The measured times of this size (out-of-place and in-place, those the log gives)."""
        return tuple(t for t in (self.oop_time_us, self.ip_time_us) if t is not None and t > 0)

    def busbw(self) -> float | None:
        """The mean bus bandwidth of the halves the log gives."""
        xs = [b for b in (self.oop_busbw, self.ip_busbw) if b is not None]
        return sum(xs) / len(xs) if xs else None


@dataclass(frozen=True)
class NcclTestsLog:
    """One nccl-tests run: the collective (``all_reduce``...), its ranks in rank order, and its rows."""

    source: str
    collective: str
    ranks: tuple[RankInfo, ...]
    rows: tuple[PerfRow, ...]

    @property
    def hosts(self) -> tuple[str, ...]:
        """The hosts the run used, in order of first rank."""
        return tuple(dict.fromkeys(r.host for r in self.ranks))

    def devices_on(self, host: str) -> tuple[int, ...]:
        """The CUDA devices the run used on `host`, in rank order."""
        return tuple(r.device for r in self.ranks if r.host == host)

    @property
    def bus_factor(self) -> float:
        return bus_factor(self.collective, len(self.ranks))


def _number(cell: str) -> float | None:
    if cell.upper() == "N/A":
        return None
    return float(cell)


def _header_columns(line: str) -> list[str] | None:
    """The column names of a ``# size count type ...`` header line, or None if `line` is not one."""
    words = line.lstrip("#").split()
    if (
        len(words) >= 6
        and words[0] == "size"
        and words[1] == "count"
        and "time" in words
        and "busbw" in words
    ):
        return words
    return None


def _collective(text: str, source: str, given: str | None) -> str | None:
    if given:
        return given.removesuffix("_perf")
    m = _TEST_RE.search(text) or _PERF_RE.search(text) or _NAME_RE.search(Path(source).name)
    return m.group(1) if m else None


def parse_nccl_tests(
    text: str, source: str = "<nccl-tests>", *, collective: str | None = None
) -> NcclTestsLog:
    """Parse the output of one nccl-tests run (see the module docstring); `collective` overrides the detection."""
    ps = Problems(source)
    ranks: list[RankInfo] = []
    rows: list[PerfRow] = []
    cols: list[str] | None = None
    seen_ranks: dict[int, int] = {}
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        body = line.lstrip()
        m = _RANK_RE.match(body)
        if m:
            rank = int(m.group(1))
            if rank in seen_ranks:
                ps.add(f"line {no}", f"rank {rank} is listed twice (first on line {seen_ranks[rank]})")
                continue
            seen_ranks[rank] = no
            ranks.append(RankInfo(rank, m.group(4), int(m.group(5)), m.group(6), m.group(7), no))
            continue
        if body.startswith("#") or not body:
            hc = _header_columns(body)
            if hc is not None:
                cols = hc
            continue
        if not _NUMBER_ROW.match(line):
            continue  # NCCL INFO, prompts, warnings
        if cols is None:
            ps.add(
                f"line {no}", f"a table row before the column header ('# size count type ...'): {body[:60]!r}"
            )
            continue
        cells = body.split()
        if len(cells) != len(cols):
            ps.add(
                f"line {no}",
                f"{len(cells)} cells, the header names {len(cols)} ({' '.join(cols)}): {body[:80]!r}",
            )
            continue
        try:
            rows.append(_row(no, cols, cells))
        except ValueError as e:
            ps.add(f"line {no}", f"{e}: {body[:80]!r}")
    if not ranks:
        ps.add(
            "",
            "no rank lines ('#  Rank  0 Group  0 Pid ... on HOST device 0 [...] NAME'): the log's header is missing",
        )
    if not rows and cols is None:
        ps.add("", "no table ('#  size  count  type ... time  algbw  busbw ...'): is this nccl-tests output?")
    elif not rows:
        ps.add("", "the table has no rows")
    if ranks and sorted(seen_ranks) != list(range(len(ranks))):
        ps.add("", f"ranks must be 0..{len(ranks) - 1}, got {sorted(seen_ranks)}")
    coll = _collective(text, source, collective)
    if coll is None:
        ps.add(
            "",
            "which collective? the log names no '*_perf' test and no file name says; pass it (--collective)",
        )
    ps.raise_if_any()
    ranks.sort(key=lambda r: r.rank)
    first: dict[tuple[str, int], RankInfo] = {}
    for r in sorted(ranks, key=lambda x: x.line):
        if (r.host, r.device) in first:
            ps.add(
                f"line {r.line}",
                f"two ranks on {r.host} device {r.device} (ranks {first[(r.host, r.device)].rank} and {r.rank}): "
                "one device per rank",
            )
        first.setdefault((r.host, r.device), r)
    ps.raise_if_any()
    return NcclTestsLog(source, str(coll), tuple(ranks), tuple(rows))


def _row(no: int, cols: list[str], cells: list[str]) -> PerfRow:
    def at(name: str, k: int) -> str | None:
        idx = [i for i, c in enumerate(cols) if c == name]
        return cells[idx[k]] if len(idx) > k else None

    def num(name: str, k: int) -> float | None:
        v = at(name, k)
        if v is None:
            return None
        try:
            return _number(v)
        except ValueError:
            raise ValueError(
                f"{name} {'out-of-place' if k == 0 else 'in-place'}: {v!r} is not a number"
            ) from None

    try:
        size, count = int(cells[0]), int(cells[1])
    except ValueError:
        raise ValueError(f"size and count must be integers, got {cells[0]!r} and {cells[1]!r}") from None
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    values = [num(c, k) for k in (0, 1) for c in ("time", "algbw", "busbw")]
    for v, what in zip(values, ("time", "algbw", "busbw") * 2, strict=True):
        if v is not None and v < 0:
            raise ValueError(f"{what} must be >= 0, got {v:g}")
    return PerfRow(no, size, count, at("type", 0) or "?", at("redop", 0) or "none", *values)


def read_nccl_tests(path: str | Path, *, collective: str | None = None) -> NcclTestsLog:
    """Read and parse one nccl-tests log file."""
    return parse_nccl_tests(read_text(path), str(path), collective=collective)
