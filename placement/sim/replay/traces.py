"""Trace readers (Alibaba PAI 2020, openb 2023, DLRM 2025, spot 2026; Philly; Acme and its summary; plain CSV).
Owns `read_trace`, `TraceJob`, the bad-row rules (reported by line) and the rows skipped on purpose (counted).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from placement.errors import InputError, Problem
from placement.io.text import read_text
from placement.sim.replay.shapes import MODELS
from placement.sim.whatif.shapes import Shape

__all__ = ["FORMATS", "Trace", "TraceJob", "read_trace"]

FORMATS = ("auto", "csv", "openb", "pai2020", "dlrm2025", "spot2026", "philly", "acme", "acme-summary")
"""Trace formats ``--format`` accepts (``auto``: from the file's suffix and header)."""

PAI2020_TASK_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace: submitted at `submit` s (from the first job), `gpus` devices for `duration` s on an
    ideal placement; optionally its own shape and model preset; `line` of the file it came from."""

    name: str
    submit: float
    gpus: int
    duration: float
    line: int
    shape: Shape | None = None
    model: str | None = None
    shared: bool = False
    """A GPU-sharing pod (openb ``gpu_milli`` < 1000): it is replayed on one whole GPU (devices are not split)."""


SKIP_REASONS = {
    "cpu-only": "CPU-only rows (0 GPUs): not GPU jobs, nothing to place",
    "never-ran": "rows that never ran (no scheduled_time / start): their run time is unknown",
    "outside": "rows that began before the trace or ended after it (NaN times, per the DLRM trace's README)",
}
"""Rows that are not bad but are not replayed, by reason (counted in `Trace.skipped`)."""


@dataclass
class Trace:
    """The good jobs, sorted by submit time; one problem per bad row (path ``line N``); counts of the rows
    skipped on purpose by reason (`SKIP_REASONS`); and `shared`, the GPU-sharing jobs replayed on whole GPUs."""

    source: str
    format: str
    jobs: list[TraceJob]
    bad: list[Problem] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    shared: int = 0

    def notes(self) -> list[str]:
        """One line per kind of row that is not replayed as written: skipped ones and GPU-sharing ones."""
        out = [f"skipped {n} {SKIP_REASONS[k]}" for k, n in sorted(self.skipped.items()) if n]
        if self.shared:
            out.append(
                f"{self.shared} GPU-sharing job(s) (a fraction of one GPU) are replayed on one whole GPU each "
                "(the simulator does not split devices)"
            )
        return out


class _Skip(Exception):
    """A row that is not a GPU job that ran (not an error): counted by `reason` (a key of SKIP_REASONS)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Bad(Exception):
    def __init__(self, col: str, message: str) -> None:
        super().__init__(f"{col}: {message}")
        self.col, self.message = col, message


_CHECK_TEXT_BYTES = 512 * 1024 * 1024
"""Trace files up to this size are checked to be UTF-8 text as a whole before they are read row by row."""


def _time(v: Any, col: str) -> float:
    """Seconds: a number, or a date-time (``2017-10-07 01:12:09``, ISO 8601)."""
    if v is None or (isinstance(v, str) and v.strip() in ("", "None", "nan", "NaN")):
        raise _Bad(col, "is missing")
    try:
        return float(v)
    except (TypeError, ValueError):
        pass
    try:
        return datetime.fromisoformat(str(v).strip().replace(" PDT", "").replace(" PST", "")).timestamp()
    except ValueError:
        raise _Bad(col, f"{v!r} is neither seconds nor a date-time") from None


def _num(row: Mapping[str, Any], col: str) -> float:
    v = row.get(col)
    if v is None or str(v).strip() in ("", "nan", "NaN", "None"):
        raise _Bad(col, "is missing")
    try:
        return float(v)
    except ValueError:
        raise _Bad(col, f"{v!r} is not a number") from None


def _first(row: Mapping[str, Any], *cols: str) -> str | None:
    for c in cols:
        if c in row and row[c] not in (None, ""):
            return c
    return None


# ---- row readers: (row) -> (name, submit, gpus, duration, shape, model) -----------------------------------

Row = tuple[str, float, float, float, Shape | None, str | None, bool]
"""(name, submit, GPUs, duration, shape, model, GPU-sharing)."""


def _plain(row: Mapping[str, Any], n: int) -> Row:
    sub = _first(row, "submit_time", "submit", "submitted_time", "creation_time", "arrival") or "submit_time"
    gcol = _first(row, "gpus", "gpu_num", "num_gpu", "gpu_request", "num_gpus") or "gpus"
    submit = _time(row.get(sub), sub)
    gpus = _num(row, gcol)
    if "worker_num" in row and gcol == "gpu_request":
        gpus *= _num(row, "worker_num")
    dcol = _first(row, "duration", "runtime", "run_time")
    if dcol is not None:
        dur = _num(row, dcol)
    else:
        start = _first(row, "start_time", "scheduled_time")
        end = _first(row, "end_time", "deletion_time")
        if end is None:
            raise _Bad("duration", "is missing (and there is no end_time or deletion_time)")
        dur = _time(row[end], end) - (_time(row[start], start) if start else submit)
    shape = None
    if _first(row, "tp", "pp", "dp"):
        sizes = {
            d: int(_num(row, d)) if row.get(d) not in (None, "") else 1
            for d in ("tp", "cp", "ep", "dp", "pp")
        }
        shape = Shape(**sizes)
        if shape.world_size != int(gpus):
            raise _Bad("tp", f"tp x cp x ep x dp x pp = {shape.world_size}, but the job has {gpus:g} GPUs")
    model = (row.get("model") or "").strip() or None
    name = str(
        row.get("name") or row.get("job_name") or row.get("job_id") or row.get("instance_sn") or f"job-{n}"
    )
    return name, submit, gpus, dur, shape, model, False


def _missing(v: Any) -> bool:
    return v is None or str(v).strip() in ("", "nan", "NaN", "None")


def _openb(row: Mapping[str, Any], n: int) -> Row:
    """A pod: GPUs `num_gpu` (0: CPU-only, skipped), run time deletion - scheduled (no scheduled_time: the pod
    never ran, skipped); `gpu_milli` < 1000 on one GPU marks a GPU-sharing pod."""
    gpus = _num(row, "num_gpu")
    if gpus == 0:
        raise _Skip("cpu-only")
    shared = gpus == 1 and not _missing(row.get("gpu_milli")) and _num(row, "gpu_milli") < 1000
    submit = _time(row.get("creation_time"), "creation_time")
    if _missing(row.get("scheduled_time")):
        raise _Skip("never-ran")
    start = _time(row["scheduled_time"], "scheduled_time")
    return (
        str(row.get("name") or f"pod-{n}"),
        submit,
        gpus,
        _time(row.get("deletion_time"), "deletion_time") - start,
        None,
        None,
        shared,
    )


def _dlrm(row: Mapping[str, Any], n: int) -> Row:
    """An instance: GPUs `gpu_request` (0: CPU-only, skipped), run time deletion - scheduled (no
    scheduled_time: it never ran; no creation or deletion time: outside the trace's window; both skipped)."""
    gpus = _num(row, "gpu_request")
    if gpus == 0:
        raise _Skip("cpu-only")
    if _missing(row.get("creation_time")) or _missing(row.get("deletion_time")):
        raise _Skip("outside")
    submit = _time(row.get("creation_time"), "creation_time")
    if _missing(row.get("scheduled_time")):
        raise _Skip("never-ran")
    return (
        str(row.get("instance_sn") or f"inst-{n}"),
        submit,
        gpus,
        _time(row.get("deletion_time"), "deletion_time") - _time(row["scheduled_time"], "scheduled_time"),
        None,
        None,
        False,
    )


_READERS: dict[str, Callable[[Mapping[str, Any], int], Row]] = {
    "csv": _plain,
    "acme": _plain,
    "spot2026": _plain,
    "openb": _openb,
    "dlrm2025": _dlrm,
}


def _detect(path: Path, header: list[str]) -> str:
    cols = set(header)
    if path.suffix == ".json" or (header and header[0].startswith(("[", "{"))):
        return "philly"
    if {"avg_gpu_num", "med_run_time_gpu"} <= cols:
        return "acme-summary"
    if {"num_gpu", "creation_time", "deletion_time"} <= cols:
        return "openb"
    if {"gpu_request", "rdma_request"} <= cols:
        return "dlrm2025"
    if {"gpu_request", "worker_num"} <= cols:
        return "spot2026"
    if {"gpu_num", "submit_time"} <= cols:
        return "acme"
    if (
        len(header) == len(PAI2020_TASK_COLUMNS)
        and (header[0] == "job_name" or not _is_num(header[0]))
        and (cols >= set(PAI2020_TASK_COLUMNS) or _is_num(header[2]))
    ):
        return "pai2020"
    return "csv"


def _is_num(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _csv_rows(path: Path, header: list[str] | None = None) -> Iterator[tuple[int, dict[str, str]]]:
    with path.open(newline="") as f:
        rd = csv.DictReader(f, fieldnames=header)
        for row in rd:
            yield rd.line_num, dict(row)


Item = Row | _Bad | _Skip


def _pai2020(path: Path, has_header: bool) -> Iterator[tuple[int, Item]]:
    """pai_task_table: a job is its tasks' union (submit: earliest start, end: latest end, GPUs: the sum of
    inst_num x plan_gpu / 100 over tasks, rounded up); the job's line is its first task's."""
    jobs: dict[str, dict[str, Any]] = {}
    for line, row in _csv_rows(path, None if has_header else list(PAI2020_TASK_COLUMNS)):
        j = jobs.setdefault(
            row["job_name"], {"line": line, "start": math.inf, "end": -math.inf, "gpu": 0.0, "bad": None}
        )
        try:
            j["start"] = min(j["start"], _time(row.get("start_time"), "start_time"))
            j["end"] = max(j["end"], _time(row.get("end_time"), "end_time"))
            if row.get("plan_gpu") not in (None, ""):
                j["gpu"] += _num(row, "inst_num") * _num(row, "plan_gpu") / 100.0
        except _Bad as e:
            j["bad"] = j["bad"] or e
    for name, j in jobs.items():
        yield (
            j["line"],
            j["bad"]
            or (
                name,
                j["start"],
                float(math.ceil(j["gpu"] - 1e-9)),
                j["end"] - j["start"],
                None,
                None,
                False,
            ),
        )


def _philly(path: Path) -> Iterator[tuple[int, Item]]:
    """cluster_job_log: GPUs of the first attempt, run time the sum of the attempts; the entry's line number."""
    text = read_text(path)
    dec = json.JSONDecoder()
    i = text.index("[") + 1
    line, pos = 1, 0
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return
        line += text.count("\n", pos, i)
        pos = i
        obj, i = dec.raw_decode(text, i)
        try:
            atts = obj.get("attempts") or []
            if not atts:
                yield line, _Skip("never-ran")
                continue
            gpus = sum(len(d.get("gpus") or []) for d in atts[0].get("detail") or [])
            dur = sum(
                _time(a.get("end_time"), "attempts.end_time")
                - _time(a.get("start_time"), "attempts.start_time")
                for a in atts
            )
            yield (
                line,
                (
                    str(obj.get("jobid") or f"job-{line}"),
                    _time(obj.get("submitted_time"), "submitted_time"),
                    float(gpus),
                    dur,
                    None,
                    None,
                    False,
                ),
            )
        except _Bad as e:
            yield line, e


def _acme_summary(
    path: Path, cluster: str, jobs: int, cluster_gpus: int, load: float, seed: int
) -> Iterator[tuple[int, Item]]:
    """Sample `jobs` jobs from one cluster's published summary (acme/cluster_summary.csv): GPU counts are powers
    of two, half of them 1 GPU (the median is 1), the rest geometric with the ratio that gives the mean, up to the
    maximum; run times log-normal with the median and mean; Poisson arrivals at `load` x the cluster's GPUs."""
    rows = list(_csv_rows(path))
    names = [r.get("id", "") for _, r in rows]
    hit = [(ln, r) for ln, r in rows if r.get("id", "").lower() == cluster.lower()]
    if not hit:
        raise InputError(str(path), [Problem("id", f"no cluster {cluster!r}; clusters are {names}")])
    ln, r = hit[0]
    mean_g, max_g = _num(r, "avg_gpu_num"), max(1.0, _num(r, "max_gpu"))
    med_t, mean_t = _num(r, "med_run_time_gpu"), _num(r, "avg_run_time_gpu")
    top = min(int(math.log2(max_g)), max(0, int(math.log2(max(1, cluster_gpus)))))
    p1 = 0.5 if top > 0 else 1.0
    target = max(2.0, (mean_g - p1) / (1 - p1)) if top > 0 else 1.0

    def mean_multi(ratio: float) -> float:
        w = [float(ratio**k) for k in range(1, top + 1)]
        return sum(wk * 2.0**k for k, wk in zip(range(1, top + 1), w, strict=True)) / max(sum(w), 1e-300)

    lo, hi = 1e-3, 4.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_multi(mid) < target else (lo, mid)
    ratio = (lo + hi) / 2
    sizes = [1] + [2**k for k in range(1, top + 1)]
    wts = [p1] + [(1 - p1) * ratio**k / sum(ratio**j for j in range(1, top + 1)) for k in range(1, top + 1)]
    sigma = math.sqrt(2 * math.log(mean_t / med_t)) if mean_t > med_t > 0 else 0.5
    rng = random.Random(f"acme:{cluster}:{seed}")
    drawn = [
        (rng.choices(sizes, wts)[0], min(_num(r, "max_run_time_gpu"), med_t * math.exp(rng.gauss(0, sigma))))
        for _ in range(jobs)
    ]
    work = sum(g * d for g, d in drawn) / max(1, len(drawn))
    rate = load * cluster_gpus / work if work > 0 else 1.0
    t = 0.0
    for i, (g, d) in enumerate(drawn):
        yield ln, (f"{r['id'].lower()}-{i:05d}", t, float(g), max(1.0, round(d, 1)), None, None, False)
        t += rng.expovariate(rate)


def read_trace(
    path: str | Path,
    fmt: str = "auto",
    *,
    cluster_gpus: int,
    strict: bool = False,
    limit: int | None = None,
    acme_cluster: str = "Kalos",
    load: float = 0.9,
    seed: int = 0,
) -> Trace:
    """Read a trace. Bad rows (a field missing or unreadable, duration < 0, GPUs < 1, more GPUs than the
    cluster's `cluster_gpus`) are skipped and listed in `Trace.bad` by line; with `strict` they are an
    `InputError` naming every one. CPU-only rows (0 GPUs) and rows that never ran are not bad: they are skipped
    and counted in `Trace.skipped`. `limit` keeps the first N arrivals (the good jobs sorted by submit time);
    submit times are shifted so that the first job arrives at 0. Bad rows are reported over the whole file. ``acme-summary`` samples `limit` (default 2,000) jobs of `acme_cluster`."""
    p = Path(path)
    if fmt not in FORMATS:
        raise InputError(
            "--format", [Problem("", f"unknown trace format {fmt!r}; formats are {list(FORMATS)}")]
        )
    if not p.is_file():
        read_text(p)  # the one "cannot read" message (missing, a directory, no permission)
    if p.stat().st_size <= _CHECK_TEXT_BYTES:
        read_text(p)  # not text: the byte offset, before a reader meets it mid-file
    if fmt == "auto":
        with p.open(newline="") as f:
            first = f.readline()
        header = next(csv.reader([first]), []) if first else []
        fmt = _detect(p, [h.strip() for h in header])
    src: Iterator[tuple[int, Item]]
    if fmt == "philly":
        src = _philly(p)
    elif fmt == "pai2020":
        with p.open() as f:
            src = _pai2020(p, f.readline().startswith("job_name"))
    elif fmt == "acme-summary":
        src = _acme_summary(p, acme_cluster, limit or 2000, cluster_gpus, load, seed)
    else:
        reader = _READERS[fmt]

        def gen() -> Iterator[tuple[int, Item]]:
            for n, (line, row) in enumerate(_csv_rows(p)):
                try:
                    yield line, reader(row, n)
                except (_Bad, _Skip) as e:
                    yield line, e

        src = gen()
    jobs: list[TraceJob] = []
    bad: list[Problem] = []
    skipped: dict[str, int] = {}
    for line, item in src:
        if isinstance(item, _Bad):
            bad.append(Problem(f"line {line}", f"{item.col} {item.message}"))
            continue
        if isinstance(item, _Skip):
            skipped[item.reason] = skipped.get(item.reason, 0) + 1
            continue
        name, submit, gpus, dur, shape, model, shared = item
        if gpus == 0:
            skipped["cpu-only"] = skipped.get("cpu-only", 0) + 1
            continue
        why = None
        if dur < 0:
            why = f"duration is negative ({dur:g} s); it must be >= 0"
        elif gpus < 1 or gpus != int(gpus):
            why = f"GPUs is {gpus:g}; a job needs a whole number >= 1 of GPUs"
        elif gpus > cluster_gpus:
            why = f"GPUs is {gpus:g}, more than the cluster's {cluster_gpus}"
        elif model is not None and model not in MODELS:
            why = f"model {model!r} is not one of {list(MODELS)}"
        if why:
            bad.append(Problem(f"line {line}", why))
            continue
        jobs.append(TraceJob(name, submit, int(gpus), dur, line, shape, model, shared))
    if strict and bad:
        raise InputError(str(p), bad)
    jobs.sort(key=lambda j: (j.submit, j.line))
    if limit is not None:
        jobs = jobs[:limit]  # the first N arrivals (files are not always in time order: the DLRM trace)
    t0 = jobs[0].submit if jobs else 0.0
    jobs = [dataclasses.replace(j, submit=j.submit - t0) for j in jobs]
    return Trace(str(p), fmt, jobs, bad, skipped, sum(1 for j in jobs if j.shared))
