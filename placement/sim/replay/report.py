"""Replay reports: the per-policy numbers (JCT, queueing, utilization, communication hours, fragmentation,
unplaced jobs), the table, and the plots (JCT CDF, utilization and fragmentation over time). Owns `summarize`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placement.sim.whatif.plots import save_figure

if TYPE_CHECKING:
    from placement.sim.replay.sim import ReplayResult

__all__ = ["JOB_COLUMNS", "SUMMARY_COLUMNS", "plot_replays", "summarize", "summary_table"]

JOB_COLUMNS = (
    "key",
    "policy",
    "seed",
    "job",
    "line",
    "gpus",
    "shape",
    "submit_s",
    "start_s",
    "end_s",
    "wait_s",
    "jct_s",
    "trace_duration_s",
    "ideal_step_s",
    "step_s",
    "slowdown",
    "comm_hours",
    "nodes",
    "restarts",
    "repairs",
    "preemptions",
    "waits",
    "contention_gpu_hours",
    "contended_slowdown",
    "shared",
    "placed",
)
SUMMARY_COLUMNS = (
    "key",
    "policy",
    "seed",
    "jobs",
    "placed",
    "unplaced",
    "mean_jct_h",
    "p95_jct_h",
    "mean_wait_h",
    "utilization",
    "utilization_makespan",
    "comm_hours",
    "fragmentation",
    "mean_slowdown",
    "contention_gpu_hours",
    "mean_contended_slowdown",
    "makespan_h",
    "restarts",
    "repairs",
    "preemptions",
    "wall_s",
    "status",
    "error",
)


def _quantile(vals: Sequence[float], q: float) -> float:
    s = sorted(vals)
    if not s:
        return math.nan
    k = (len(s) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def time_average(series: Sequence[tuple[float, int, int, float]], end: float) -> tuple[float, float]:
    """(busy / usable device-seconds, time-weighted fragmentation index) over [0, end]; each point holds until
    the next."""
    busy = usable = frag = 0.0
    for (t, b, u, f), nxt in zip(series, [*series[1:], None], strict=True):
        t1 = min(end, nxt[0] if nxt is not None else end)
        if t1 <= t:
            continue
        busy += b * (t1 - t)
        usable += u * (t1 - t)
        frag += f * (t1 - t)
    return (busy / usable if usable > 0 else 0.0), (frag / end if end > 0 else 0.0)


def summarize(res: ReplayResult, devices: int) -> dict[str, Any]:
    """One replay's summary row (hours for times). The utilization is busy over usable device-time while the
    trace submits (first to last arrival: a trace's few longest jobs would otherwise decide it),
    `utilization_makespan` the same until the last job ends; the fragmentation index (the share of free GPUs not
    in wholly free nodes) is time-weighted over the submission window too."""
    placed = [r for r in res.records if r.get("placed")]
    jct = [r["jct_s"] / 3600.0 for r in placed]
    end = max((r["end_s"] for r in placed), default=0.0)
    last_arrival = max((r["submit_s"] for r in res.records), default=0.0)
    window = last_arrival if last_arrival > 0 else end
    util, frag = time_average(res.series, window)
    util_all, _ = time_average(res.series, end)
    return {
        "jobs": len(res.records),
        "placed": len(placed),
        "unplaced": len(res.records) - len(placed),
        "mean_jct_h": sum(jct) / len(jct) if jct else math.nan,
        "p95_jct_h": _quantile(jct, 0.95),
        "mean_wait_h": sum(r["wait_s"] for r in placed) / 3600.0 / len(placed) if placed else math.nan,
        "utilization": util,
        "utilization_makespan": util_all,
        "comm_hours": sum(r["comm_hours"] for r in res.records),
        "fragmentation": frag,
        "mean_slowdown": sum(r["slowdown"] for r in placed) / len(placed) if placed else math.nan,
        "contention_gpu_hours": sum(r.get("contention_gpu_hours") or 0.0 for r in res.records),
        "mean_contended_slowdown": (
            sum(c) / len(c)
            if (c := [r["contended_slowdown"] for r in placed if r.get("contended_slowdown")])
            else math.nan
        ),
        "makespan_h": end / 3600.0,
        "restarts": sum(r["restarts"] for r in res.records),
        "repairs": sum(r["repairs"] for r in res.records),
        "preemptions": sum(r.get("preemptions", 0) for r in res.records),
        "wall_s": res.wall_s,
    }


def _f(row: Mapping[str, str], col: str, spec: str) -> str:
    v = row.get(col, "")
    try:
        return format(float(v), spec)
    except ValueError:
        return v or "-"


def _contended(rows: Sequence[Mapping[str, str]]) -> bool:
    """Whether the replays modeled contention (a contended slowdown was measured)."""
    for r in rows:
        try:
            if math.isfinite(float(r.get("mean_contended_slowdown") or "nan")):
                return True
        except ValueError:
            continue
    return False


def summary_table(rows: Sequence[Mapping[str, str]], title: str = "replay") -> Any:
    """A rich table, one row per replay (policy, seed); with contention, the GPU-hours lost to it too."""
    from rich.table import Table

    contention = _contended(rows)
    t = Table(title=title)
    cols = [
        "policy",
        "seed",
        "mean JCT h",
        "p95 JCT h",
        "mean wait h",
        "GPU util",
        "comm h",
        "frag index",
        "slowdown",
        *(["contention GPU-h"] if contention else []),
        "unplaced",
        "wall s",
        "status",
    ]
    for c in cols:
        t.add_column(c, justify="left" if c in ("policy", "status") else "right")
    for r in rows:
        t.add_row(
            r.get("policy", ""),
            r.get("seed", ""),
            _f(r, "mean_jct_h", ".3f"),
            _f(r, "p95_jct_h", ".3f"),
            _f(r, "mean_wait_h", ".3f"),
            _f(r, "utilization", ".3f"),
            _f(r, "comm_hours", ".1f"),
            _f(r, "fragmentation", ".3f"),
            _f(r, "mean_slowdown", ".3f"),
            *([_f(r, "contention_gpu_hours", ".1f")] if contention else []),
            r.get("unplaced", ""),
            _f(r, "wall_s", ".1f"),
            r.get("status", "") if r.get("status") == "OK" else f"{r.get('status')}: {r.get('error')}",
        )
    return t


def markdown_table(rows: Sequence[Mapping[str, str]]) -> str:
    """The same table in markdown (README, bench results)."""
    head = "| policy | mean JCT (h) | p95 JCT (h) | mean wait (h) | GPU util | comm hours | frag index | mean slowdown | unplaced |"
    out = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(
            f"| {r.get('policy')} | {_f(r, 'mean_jct_h', '.3f')} | {_f(r, 'p95_jct_h', '.3f')} | "
            f"{_f(r, 'mean_wait_h', '.3f')} | {_f(r, 'utilization', '.3f')} | {_f(r, 'comm_hours', '.1f')} | "
            f"{_f(r, 'fragmentation', '.3f')} | {_f(r, 'mean_slowdown', '.3f')} | {r.get('unplaced', '')} |"
        )
    return "\n".join(out)


def plot_replays(
    jobs: Sequence[Mapping[str, str]],
    series: Sequence[Mapping[str, str]],
    out_dir: str | Path,
    title: str = "",
) -> list[Path]:
    """``jct_cdf``: the JCT CDF per replay; ``utilization`` and ``fragmentation``: over time. PNG and SVG."""
    from matplotlib.figure import Figure

    out = Path(out_dir)
    written: list[Path] = []
    by: dict[str, list[float]] = {}
    for r in jobs:
        if r.get("placed") == "True" and r.get("jct_s"):
            by.setdefault(f"{r['policy']} (seed {r['seed']})", []).append(float(r["jct_s"]) / 3600.0)
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    for label, vals in sorted(by.items()):
        s = sorted(vals)
        ax.step(s, [(i + 1) / len(s) for i in range(len(s))], where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("share of jobs")
    ax.set_title(f"JCT CDF{': ' + title if title else ''}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    written += save_figure(fig, out, "jct_cdf")
    pts: dict[str, list[tuple[float, float, float]]] = {}
    for r in series:
        u = float(r["usable"])
        pts.setdefault(f"{r['policy']} (seed {r['seed']})", []).append(
            (float(r["t_s"]) / 3600.0, float(r["busy"]) / u if u else 0.0, float(r["fragmentation"]))
        )
    for stem, col, ylabel in (
        ("utilization", 1, "busy / usable GPUs"),
        ("fragmentation", 2, "free GPUs not in whole free nodes"),
    ):
        fig = Figure(figsize=(8, 4), layout="constrained")
        ax = fig.subplots()
        for label, p in sorted(pts.items()):
            ax.step([x[0] for x in p], [x[col] for x in p], where="post", label=label, linewidth=0.8)
        ax.set_xlabel("simulated time (hours)")
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{stem}{': ' + title if title else ''}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        written += save_figure(fig, out, stem)
    return written
