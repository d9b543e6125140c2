"""Rich tables of the CLI: a modeled step, its phases, exposed communication per group kind and tier, the answer
next to every baseline, and how wide a table may print (80 columns by default, every column with --wide).
"""

from __future__ import annotations

import copy
from collections.abc import Collection
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from placement.cost.report import CostReport
from placement.messages.domain import report_from_proto
from placement.v1.placement_pb2 import SOLVE_STATUS_WAIT

__all__ = [
    "drop_columns",
    "headline",
    "num",
    "place_title",
    "print_report",
    "print_result",
    "print_verdict",
    "table_console",
]

out = Console()


def table_console(wide: bool) -> Console:
    """Where tables print: the terminal's width (80 columns when piped), or with `wide` as wide as each table needs
    (no column shrunk, no cell wrapped)."""
    return Console(width=100_000) if wide else out


def drop_columns(table: Table, headers: Collection[str]) -> Table:
    """A copy of `table` without the columns whose header is in `headers` (the narrow form of a wide table)."""
    narrow = copy.copy(table)
    narrow.columns = [c for c in table.columns if str(c.header) not in headers]
    return narrow


def num(x: float | None, fmt: str = ".4f") -> str:
    return "-" if x is None else format(x, fmt)


def _step_table(title: str, report: CostReport) -> Table:
    """The modeled step: its time, exposed and total communication, compute, bubble, MFU and tokens/s."""
    t = Table(title=title, title_justify="left")
    t.add_column("part")
    t.add_column("seconds", justify="right")
    t.add_column("share of step", justify="right")
    step = report.step_seconds

    def share(x: float | None) -> str:
        return "" if x is None or not step else f"{100 * x / step:.1f}%"

    t.add_row("[bold]step[/]", f"[bold]{report.step_seconds:.4f}[/]", "100.0%" if step else "")
    t.add_row("compute", num(report.compute_seconds), share(report.compute_seconds))
    t.add_row("pipeline bubble", num(report.bubble_seconds), share(report.bubble_seconds))
    t.add_row("exposed comm", f"{report.comm_seconds:.4f}", share(report.comm_seconds))
    if report.straggler_seconds:
        t.add_row("straggler wait", num(report.straggler_seconds), share(report.straggler_seconds))
    t.add_row("total comm (before overlap)", f"{report.comm_seconds_total:.4f}", "")
    t.add_section()
    t.add_row("MFU", "-" if report.mfu is None else f"{100 * report.mfu:.1f}%", "")
    t.add_row("tokens/s", num(report.tokens_per_s, ",.0f"), "")
    return t


def _phase_table(report: CostReport) -> Table:
    """One row per phase of the step: its bottleneck tier, algorithm, critical group, seconds and exposed part."""
    t = Table(title="phases, in sequence (the critical group is the slowest)", title_justify="left")
    for name in ("phase", "tier", "algorithm", "critical group"):
        t.add_column(name)
    t.add_column("seconds", justify="right")
    t.add_column("exposed", justify="right")
    for p in report.phases:
        t.add_row(
            p.name,
            p.tier,
            p.algorithm or "-",
            p.critical or "-",
            f"{p.seconds:.4f}",
            f"{p.exposed_seconds:.4f}",
        )
    if not report.phases:
        t.add_row("[dim]none[/]", "", "", "", "", "")
    else:
        t.add_section()
        t.add_row(
            "[bold]total[/]",
            "",
            "",
            "",
            f"{sum(p.seconds for p in report.phases):.4f}",
            f"{sum(p.exposed_seconds for p in report.phases):.4f}",
        )
    return t


def _cost_table(title: str, report: CostReport) -> Table:
    """Exposed communication per group kind and bottleneck tier, and the preference misses."""
    t = Table(title=title, title_justify="left")
    t.add_column("group kind")
    t.add_column("tier")
    t.add_column("exposed comm s", justify="right")
    t.add_column("share", justify="right")
    total = report.comm_seconds or 1.0
    for (label, tier), s in sorted(report.by_label_tier.items(), key=lambda kv: -kv[1]):
        t.add_row(label, tier, f"{s:.4f}", f"{100 * s / total:.1f}%")
    t.add_section()
    t.add_row("[bold]total[/]", "", f"[bold]{report.comm_seconds:.4f}[/]", "100.0%")
    for label, n in sorted(report.preference_misses.items()):
        t.add_row(f"[yellow]{label} misses its preferred level[/]", "", f"{n} group(s)", "")
    return t


def _baseline_table(strategy: str, report: CostReport, costs: dict[str, dict[str, float | None]]) -> Table:
    """The answer next to each baseline on the same state: step and exposed communication seconds."""
    t = Table(title="against the baselines on the same state", title_justify="left")
    t.add_column("strategy")
    t.add_column("step s", justify="right")
    t.add_column("exposed comm s", justify="right")
    t.add_column("step vs answer", justify="right")
    t.add_row(
        f"[bold]{strategy} (answer)[/]",
        f"[bold]{report.step_seconds:.4f}[/]",
        f"{report.comm_seconds:.4f}",
        "x1.00",
    )
    for name, c in costs.items():
        step, comm = c["step_seconds"], c["comm_seconds"]
        ratio = "" if step is None or not report.step_seconds else f"x{step / report.step_seconds:.2f}"
        t.add_row(name, "no valid mapping" if step is None else f"{step:.4f}", num(comm), ratio)
    return t


def _shared_table(report: CostReport) -> Table | None:
    """Only with other traffic on the fabric: what it costs the job, and what the job costs each running job."""
    c = report.contention
    if c is None:
        return None
    t = Table(title="shared fabric", title_justify="left")
    t.add_column("job")
    t.add_column("GPUs", justify="right")
    t.add_column("step s", justify="right")
    t.add_column("added s/step", justify="right")
    t.add_column("slowdown", justify="right")
    mine = report.step_seconds
    alone = c.alone_step_seconds
    t.add_row(
        "[bold]this job[/] (against the background)",
        "",
        f"{mine:.4f}",
        f"{c.seconds:.4f}",
        f"x{mine / alone:.3f}" if alone > 0 else "",
    )
    for h in c.harm:
        t.add_row(
            h.job_id,
            str(h.gpus),
            f"{h.step_seconds:.4f}",
            f"{h.added_seconds:.4f}",
            f"x{(h.step_seconds + h.added_seconds) / h.step_seconds:.3f}" if h.step_seconds > 0 else "",
        )
    t.add_section()
    cluster = (
        "" if report.objective_seconds is None else f", cluster objective {report.objective_seconds:.4f} s"
    )
    t.add_row(
        f"[bold]harm[/]: {c.harm_gpu_s_per_s:.3f} GPU-s/s lost by running jobs{cluster}", "", "", "", ""
    )
    return t


def print_report(
    title: str,
    report: CostReport,
    strategy: str | None = None,
    costs: dict[str, dict[str, float | None]] | None = None,
) -> None:
    out.print(title, highlight=False, soft_wrap=True)
    out.print(_step_table("the modeled step", report))
    out.print(_phase_table(report))
    out.print(_cost_table("exposed communication by group kind and tier", report))
    shared = _shared_table(report)
    if shared is not None:
        out.print(shared)
    if strategy is not None and costs:
        out.print(_baseline_table(strategy, report, costs))


def headline(report: CostReport) -> str:
    mfu = "" if report.mfu is None else f", MFU {100 * report.mfu:.1f}%"
    return f"step {report.step_seconds:.4f} s, exposed comm {report.comm_seconds:.4f} s{mfu}"


def place_title(
    job: str,
    ranks: int,
    cluster: str,
    status: str,
    report: CostReport,
    bound: float | None,
    bound_source: str | None,
    gap: float | None,
    wall_s: float,
    stop_reason: str | None = None,
) -> str:
    """The headline of a placement, the same for `place`, `place --request [--server]` and `registry reserve`:
    job, ranks, cluster, status, the modeled step, the bound on exposed communication (and the argument that
    binds), the gap to it, the solve time and why the search stopped."""
    bound_s = "-" if bound is None else f"{bound:.4f} s"
    if bound is not None and bound_source:
        bound_s += f" ({bound_source})"
    gap_s = "-" if gap is None else f"{100 * gap:.2f}%"
    stopped = f" (stopped: {stop_reason.replace('_', ' ')})" if stop_reason else ""
    return (
        f"{job} ({ranks} ranks) on {cluster}: {status}, {headline(report)}, comm bound {bound_s}, "
        f"gap {gap_s}, {wall_s:.2f} s{stopped}"
    )


def print_result(result: Any, cluster: str) -> None:
    """The tables of a PlacementResult message (a server's answer, or a request solved here), as `place` prints
    them; `cluster` names where it was placed (the request's cluster name or registry id)."""
    rep = report_from_proto(result.cost, result.breakdown)
    costs: dict[str, dict[str, float | None]] = {
        b.strategy: {
            "step_seconds": b.step_seconds if b.HasField("step_seconds") else None,
            "comm_seconds": b.comm_seconds if b.HasField("comm_seconds") else None,
        }
        for b in result.baselines
    }
    stats = result.stats if result.HasField("stats") else None
    status = (
        type(result)
        .DESCRIPTOR.fields_by_name["status"]
        .enum_type.values_by_number[result.status]
        .name.removeprefix("SOLVE_STATUS_")
    )
    title = place_title(
        result.job,
        len(result.mapping),
        cluster,
        status,
        rep,
        result.lower_bound_s if result.HasField("lower_bound_s") else None,
        stats.notes.get("bound_source") if stats is not None else None,
        result.gap if result.HasField("gap") else None,
        stats.wall_s if stats is not None else 0.0,
        stats.notes.get("stop_reason") if stats is not None else None,
    )
    print_report(title, rep, result.strategy, costs)


def print_verdict(result: Any, console: Console = out) -> None:
    """The slowdown line of a PlacementResult message and, for a WAIT, the reasons and the earliest start."""
    if not result.HasField("slowdown"):
        return
    console.print(
        f"slowdown {result.slowdown:.3f}x against the ideal step {result.ideal_step_s:.4f} s "
        f"({result.ideal_source})",
        soft_wrap=True,
        highlight=False,
    )
    if result.status != SOLVE_STATUS_WAIT:
        return
    w = result.wait
    console.print(
        f"WAIT: above the bound of {w.max_slowdown:g}x; nothing to start", soft_wrap=True, highlight=False
    )
    for line in w.reasons:
        console.print(f"  {escape(line)}", soft_wrap=True, highlight=False)
    when = (
        f"earliest start within the bound: {w.earliest_start_unix_s:.0f} (Unix s)"
        if w.HasField("earliest_start_unix_s")
        else "earliest start within the bound: unknown"
    )
    console.print(f"  {when}; {escape(w.earliest_how)}", soft_wrap=True, highlight=False)
