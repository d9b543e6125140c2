"""Rich tables of the CLI: a modeled step, its phases, exposed communication per group kind and tier, the answer
next to every baseline, and how wide a table may print (80 columns by default, every column with --wide).
"""

from __future__ import annotations

import copy
import textwrap
from collections.abc import Collection
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from placement.cli.errors import CliConsole
from placement.cost.report import CostReport
from placement.io.hostlist import compress_hostlist
from placement.messages.domain import report_from_proto
from placement.solve.baselines import BASELINES
from placement.solve.run import WHY_NOT
from placement.v1.placement_pb2 import SOLVE_STATUS_WAIT

__all__ = [
    "baseline_rows",
    "drop_columns",
    "headline",
    "mapping_rows",
    "num",
    "place_title",
    "print_mapping",
    "print_report",
    "print_result",
    "print_verdict",
    "print_wrapped",
    "seats_of",
    "table_console",
]

out = CliConsole()


def table_console(wide: bool) -> Console:
    """Where tables print: the terminal's width (80 columns when piped), or with `wide` as wide as each table needs
    (no column shrunk, no cell wrapped)."""
    return CliConsole(width=100_000) if wide else out


def print_wrapped(console: Console, line: str, wide: bool = False, indent: int = 2) -> None:
    """A long line of plain text, indented: wrapped to the console's width at spaces (continuations indented two
    more), or with `wide` on one line."""
    if wide:
        console.print(" " * indent + escape(line), highlight=False, soft_wrap=True)
        return
    text = textwrap.fill(
        line,
        width=max(20, console.width),
        initial_indent=" " * indent,
        subsequent_indent=" " * (indent + 2),
        break_long_words=True,
        break_on_hyphens=False,
    )
    console.print(escape(text), highlight=False, soft_wrap=True)


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


SCHEDULERS = tuple(BASELINES)
"""The baselines every table shows, in this order: the schedulers people run (first-fit, kueue-tas, slurm-tree,
slurm-block). The other candidates (heuristics) follow: by default only the best one, with --all-candidates
every one, best first (`baseline_rows`)."""


def baseline_rows(
    costs: dict[str, dict[str, float | None]], all_candidates: bool = False
) -> tuple[list[str], int]:
    """The baseline rows to show, in the one order offline and server answers share: `SCHEDULERS` as listed,
    then the other candidates by step (no valid mapping last), then name; without `all_candidates` only the best
    of those. Returns the names and how many candidates were left out."""

    def by_step(name: str) -> tuple[bool, float, str]:
        step = costs[name]["step_seconds"]
        return (step is None, step if step is not None else 0.0, name)

    schedulers = [n for n in SCHEDULERS if n in costs]
    others = sorted((n for n in costs if n not in SCHEDULERS), key=by_step)
    if all_candidates:
        return schedulers + others, 0
    best = [n for n in others[:1] if costs[n]["step_seconds"] is not None]
    return schedulers + best, len(others) - len(best)


def _baseline_table(
    strategy: str,
    report: CostReport,
    costs: dict[str, dict[str, float | None]],
    why_not: dict[str, str],
    all_candidates: bool,
) -> Table:
    """The answer next to each baseline on the same state (step and exposed communication seconds); under it,
    why each baseline without a mapping has none, and which heuristic is shown."""
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
    names, hidden = baseline_rows(costs, all_candidates)
    notes = []
    for name in names:
        c = costs[name]
        step, comm = c["step_seconds"], c["comm_seconds"]
        ratio = "" if step is None or not report.step_seconds else f"x{step / report.step_seconds:.2f}"
        if name not in SCHEDULERS and (name == names[0] or names[names.index(name) - 1] in SCHEDULERS):
            t.add_section()  # the heuristics below the schedulers
        t.add_row(escape(name), "no valid mapping" if step is None else f"{step:.4f}", num(comm), ratio)
        if step is None:
            notes.append(f"{name}: {why_not.get(name) or 'no reason given'}")
    if hidden:
        best = next((n for n in names if n not in SCHEDULERS), None)
        notes.append(
            (
                f"{best}: the best of {hidden + 1} other candidates; "
                if best
                else f"{hidden} other candidates found none; "
            )
            + "--all-candidates lists every one"
        )
    t.caption = "\n".join(escape(n) for n in notes) or None
    t.caption_justify = "left"
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
    why_not: dict[str, str] | None = None,
    all_candidates: bool = False,
    console: Console = out,
) -> None:
    """The headline and the tables of a modeled step: its parts, its phases, its communication by group kind and
    tier (and the shared fabric when other traffic shares it), and (with `costs`) the baselines; on `console`
    (`table_console`: 80 columns when piped, or --wide)."""
    console.print(title, highlight=False, soft_wrap=True)
    console.print(_step_table("the modeled step", report))
    console.print(_phase_table(report))
    console.print(_cost_table("exposed communication by group kind and tier", report))
    shared = _shared_table(report)
    if shared is not None:
        console.print(shared)
    if strategy is not None and costs:
        console.print(_baseline_table(strategy, report, costs, why_not or {}, all_candidates))


def _runs(pairs: list[tuple[int, int]]) -> list[str]:
    """(GPU, rank) pairs of one host, by GPU, as runs: ``gpu0-7: ranks 0-7`` (both consecutive),
    ``gpu0-3: ranks 0..24 by 8`` (a constant stride), ``gpu5: rank 9``."""
    out_runs: list[str] = []
    i = 0
    while i < len(pairs):
        j = i + 1
        stride = pairs[j][1] - pairs[i][1] if j < len(pairs) and pairs[j][0] == pairs[i][0] + 1 else None
        while (
            stride is not None
            and j < len(pairs)
            and pairs[j][0] == pairs[j - 1][0] + 1
            and pairs[j][1] - pairs[j - 1][1] == stride
        ):
            j += 1
        run = pairs[i:j]
        (g0, r0), (g1, r1) = run[0], run[-1]
        if len(run) == 1:
            out_runs.append(f"gpu{g0}: rank {r0}")
        elif stride == 1:
            out_runs.append(f"gpu{g0}-{g1}: ranks {r0}-{r1}")
        elif len(run) == 2:
            out_runs.append(f"gpu{g0}-{g1}: ranks {r0},{r1}")
        else:
            out_runs.append(f"gpu{g0}-{g1}: ranks {r0}..{r1} by {stride}")
        i = j
    return out_runs


def mapping_rows(seats: list[tuple[str, int]]) -> list[tuple[str, str]]:
    """A mapping (rank -> (host, GPU index on it)) per host, hosts in the order of their first rank: the host
    and its GPU -> rank runs (`_runs`). Neighbouring hosts that each hold one block of ranks on the same GPUs,
    the blocks in host order, share a row (``node[01-04]``, ``gpu0-7: ranks 0-31, 8 a host in host order``)."""
    by_host: dict[str, list[tuple[int, int]]] = {}
    for rank, (host, gpu) in enumerate(seats):
        by_host.setdefault(host, []).append((gpu, rank))
    rows: list[tuple[str, str]] = []
    group: list[tuple[str, list[tuple[int, int]]]] = []

    def flush() -> None:
        if len(group) == 1:
            rows.append((group[0][0], ", ".join(_runs(group[0][1]))))
        elif group:
            first, last = group[0][1], group[-1][1]
            try:
                hosts = compress_hostlist([h for h, _ in group])
            except ValueError:
                hosts = f"{group[0][0]} .. {group[-1][0]}"
            rows.append(
                (
                    hosts,
                    f"gpu{first[0][0]}-{first[-1][0]}: ranks {first[0][1]}-{last[-1][1]}, {len(first)} a host in "
                    "host order",
                )
            )
        group.clear()

    for host, pairs in by_host.items():
        pairs.sort()
        block = len(pairs) > 1 and all(
            g == pairs[0][0] + i and r == pairs[0][1] + i for i, (g, r) in enumerate(pairs)
        )
        joins = bool(group) and block and [g for g, _ in pairs] == [g for g, _ in group[-1][1]]
        if not (joins and pairs[0][1] == group[-1][1][-1][1] + 1):
            flush()
        if block:
            group.append((host, pairs))
        else:
            rows.append((host, ", ".join(_runs(pairs))))
    flush()
    return rows


MAPPING_ROWS = 16
"""Hosts the mapping table shows before it elides the middle (the whole mapping: --output json, or a file)."""


def print_mapping(seats: list[tuple[str, int]], console: Console = out) -> None:
    """The mapping in a few lines: per host, its GPUs and the ranks on them, and how to get it as a file."""
    rows = mapping_rows(seats)
    hosts = len({h for h, _ in seats})
    console.print(
        f"the mapping: {len(seats)} ranks on {hosts} host{'s' if hosts != 1 else ''}", highlight=False
    )
    t = Table()
    t.add_column("host", no_wrap=True)
    t.add_column("GPU: ranks")
    shown = rows if len(rows) <= MAPPING_ROWS else [*rows[: MAPPING_ROWS - 2], ("...", ""), *rows[-1:]]
    for host, runs in shown:
        t.add_row(
            escape(host), escape(runs) if host != "..." else f"{len(rows) - MAPPING_ROWS + 2} more hosts"
        )
    console.print(t)
    console.print(
        "as a file: --out result.json, or --output rankfile, hostfile, slurm or torchrun", highlight=False
    )


def headline(report: CostReport) -> str:
    mfu = "" if report.mfu is None else f", MFU {100 * report.mfu:.1f}%"
    return f"step {report.step_seconds:.4f} s, exposed comm {report.comm_seconds:.4f} s{mfu}"


STOP_WORDS = {
    "gap_closed": "gap closed",
    "time_limit": "time limit",
    "no_improvement": "no improvement",
    "launcher_blocks": "the free mapping closed its gap; the launcher's contiguous host blocks cost the rest",
}
"""How the headline says why the search stopped (`PlacementResult.stats["stop_reason"]`)."""


def stop_words(stop_reason: str, gap: float | None) -> str:
    """Why the search stopped, in words that never contradict the printed gap: a "gap closed" with a gap left
    says which gap closed (the search's own, against a bound the evaluator's gap does not use)."""
    if stop_reason == "gap_closed" and gap is not None and gap > 1e-6:
        return "the search closed its own gap; the gap shown is to a weaker bound"
    return STOP_WORDS.get(stop_reason, stop_reason.replace("_", " "))


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
    stopped = f" (stopped: {stop_words(stop_reason, gap)})" if stop_reason else ""
    return (
        f"{job} ({ranks} ranks) on {cluster}: {status}, {headline(report)}, comm bound {bound_s}, "
        f"gap {gap_s}, {wall_s:.2f} s{stopped}"
    )


def seats_of(result: Any) -> list[tuple[str, int]]:
    """(host, GPU index on it) per rank of a PlacementResult message."""
    return [(a.host, int(a.device.rpartition("/gpu")[2] or 0)) for a in result.mapping]


def print_result(result: Any, cluster: str, all_candidates: bool = False, wide: bool = False) -> None:
    """The tables of a PlacementResult message (solved here, by a server, or reserved), as `place` prints them:
    the headline, the step, its phases and communication, the baselines (why each without a mapping has none),
    the launcher's price and the mapping; `cluster` names where it was placed (the cluster name or registry
    id)."""
    rep = report_from_proto(result.cost, result.breakdown)
    costs: dict[str, dict[str, float | None]] = {
        b.strategy: {
            "step_seconds": b.step_seconds if b.HasField("step_seconds") else None,
            "comm_seconds": b.comm_seconds if b.HasField("comm_seconds") else None,
        }
        for b in result.baselines
    }
    stats = result.stats if result.HasField("stats") else None
    notes = dict(stats.notes) if stats is not None else {}
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
        notes.get("bound_source"),
        result.gap if result.HasField("gap") else None,
        stats.wall_s if stats is not None else 0.0,
        notes.get("stop_reason"),
    )
    why_not = {k.removeprefix(WHY_NOT): v for k, v in notes.items() if k.startswith(WHY_NOT)}
    con = table_console(wide)
    print_report(title, rep, result.strategy, costs, why_not, all_candidates, con)
    free = stats.values.get("launcher_free_step_seconds") if stats is not None else None
    if notes.get("launcher") == "torchrun" and free:  # the price of contiguous host blocks
        con.print(
            f"launcher torchrun (each host's ranks one contiguous block): step {rep.step_seconds:.4f} s "
            f"against {free:.4f} s for the free mapping ({100 * (rep.step_seconds / free - 1):+.2f}%)",
            soft_wrap=True,
        )
    if result.mapping:
        print_mapping(seats_of(result), con)


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
