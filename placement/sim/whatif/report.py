"""Ranked tables of a what-if sweep's results: shapes ranked by modeled step seconds (then exposed
communication), each strategy's step, MFU, tokens/s and the optimizer's savings. Owns `ranked_tables`
(`placement.sim.whatif.plots` draws the same numbers); `placement.sim.whatif` re-exports it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from placement.sim.whatif.spec import Point, Sweep

__all__ = ["ranked_tables"]

_FEASIBLE = ("OPTIMAL", "FEASIBLE")


def _num(row: Mapping[str, str] | None, col: str) -> float | None:
    if row is None:
        return None
    v = row.get(col) or ""
    try:
        return float(v)
    except ValueError:
        return None


def _mean(vals: Sequence[float | None]) -> float | None:
    xs = [v for v in vals if v is not None]
    return sum(xs) / len(xs) if xs else None


@dataclass
class _Layout:
    """How tables and plots slice the grid: the x axis, the facets (panels) and the series (lines)."""

    x: str
    facets: tuple[str, ...]
    xs: list[str]
    facet_labels: list[str]
    series: list[str]
    series_strategy: dict[str, str]
    cells: dict[tuple[str, str, str], list[dict[str, str]]]
    """(facet, x, series) -> the finished rows there (several when seeds vary: tables and plots take means)."""


def _layout(sweep: Sweep, rows: Mapping[str, Mapping[str, str]]) -> _Layout:
    vals = [(p, p.axis_values(sweep)) for p in sweep.points]
    distinct = {
        a: list(dict.fromkeys(v[a] for _, v in vals))
        for a in ("variant", "occupancy", "mode", "failed", "shape")
    }
    tls = list(dict.fromkeys(v["time_limit"] for p, v in vals if p.strategy == "cpsat"))
    varying = [a for a in ("shape", "variant", "occupancy", "failed", "mode") if len(distinct[a]) > 1]
    if len(tls) > 1:
        varying.append("time_limit")
    x = varying[0] if varying else "shape"
    facets = tuple(a for a in varying if a not in (x, "time_limit"))
    xs = tls if x == "time_limit" else distinct[x]
    series_of: dict[Point, str] = {}
    for p, v in vals:
        s = p.strategy
        if p.strategy == "cpsat" and len(tls) > 1 and x != "time_limit":
            s = f"cpsat {v['time_limit']}s"
        series_of[p] = s
    series = list(dict.fromkeys(series_of[p] for p, _ in vals))
    cells: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    facet_labels: list[str] = []
    for p, v in vals:
        fl = ", ".join(f"{a}={v[a]}" for a in facets) or "all"
        if fl not in facet_labels:
            facet_labels.append(fl)
        row = rows.get(p.key)
        if row is None:
            continue
        targets = (
            [v["time_limit"]]
            if x == "time_limit" and p.strategy == "cpsat"
            else xs
            if x == "time_limit"
            else [v[x]]
        )
        for xv in targets:
            cells.setdefault((fl, xv, series_of[p]), []).append(dict(row))
    strat = {s: s.split(" ")[0] for s in series}
    return _Layout(x, facets, list(xs), facet_labels, series, strat, cells)


def _metric(rows: Sequence[Mapping[str, str]] | None, col: str) -> float | None:
    """The mean of a column over the placed rows of a cell (several when seeds vary)."""
    return _mean([_num(r, col) for r in rows or () if r.get("status") in _FEASIBLE])


def _step(rows: Sequence[Mapping[str, str]] | None) -> float | None:
    """Modeled step seconds of a cell; rows of results files older than the step model carry only
    ``seconds_per_step`` (then communication alone)."""
    return _mean(
        [
            _num(r, "step_seconds") if r.get("step_seconds") else _num(r, "seconds_per_step")
            for r in rows or ()
            if r.get("status") in _FEASIBLE
        ]
    )


def _comm(rows: Sequence[Mapping[str, str]] | None) -> float | None:
    return _mean(
        [
            _num(r, "comm_seconds") if r.get("comm_seconds") else _num(r, "seconds_per_step")
            for r in rows or ()
            if r.get("status") in _FEASIBLE
        ]
    )


def _optimizer(lay: _Layout) -> str | None:
    return next((s for s in lay.series if lay.series_strategy[s] == "cpsat"), None)


def ranked_tables(sweep: Sweep, rows: Mapping[str, Mapping[str, str]], *, top: int = 10) -> list[Any]:
    """One rich table per facet: the x values (job shapes, usually) ranked by their best modeled step seconds
    (ties: less exposed communication), each strategy's step seconds, the best strategy's exposed communication,
    MFU and tokens/s, the optimizer's gap and the step time it saves over each baseline on the same state (the
    baselines among the sweep's strategies only)."""
    from rich.table import Table

    lay = _layout(sweep, rows)
    opt = _optimizer(lay)
    in_table = set(lay.series_strategy.values())
    tables: list[Any] = []
    for fl in lay.facet_labels:
        ranked: list[tuple[float, float, str, str | None]] = []
        for xv in lay.xs:
            best: tuple[float, float, str, str | None] = (math.inf, math.inf, xv, None)
            for s in lay.series:
                cell = lay.cells.get((fl, xv, s))
                st = _step(cell)
                if st is not None:
                    best = min(best, (st, _comm(cell) or 0.0, xv, s), key=lambda b: (b[0], b[1]))
            ranked.append(best)
        ranked.sort(key=lambda t_: (t_[0], t_[1]))  # stable: grid order breaks ties
        shown_bases = [  # only baselines in the table: "vs X" compares against a column the reader sees
            b
            for b in sweep.baselines
            if opt is not None
            and b in in_table
            and any(
                _metric(lay.cells.get((fl, xv, opt)), f"step_improvement_vs_{b.replace('-', '_')}")
                is not None
                for _, _, xv, _ in ranked[:top]
            )
        ]
        body: list[list[str]] = []
        for i, (step, _, xv, best_s) in enumerate(ranked[:top], start=1):
            cells = [
                f"{v:.4f}" if (v := _step(lay.cells.get((fl, xv, s)))) is not None else "-"
                for s in lay.series
            ]
            bc = lay.cells.get((fl, xv, best_s)) if best_s is not None else None
            comm, mfu, tok = _comm(bc), _metric(bc, "mfu"), _metric(bc, "tokens_per_s")
            steps = [v for s in lay.series if (v := _step(lay.cells.get((fl, xv, s)))) is not None]
            if len(steps) > 1 and max(steps) - min(steps) <= 1e-9 * max(1.0, max(steps)):
                best_s = "all tie"
            cells += [
                best_s or "-",
                "-" if comm is None else f"{comm:.4f}",
                "-" if mfu is None else f"{100 * mfu:.1f}%",
                "-" if tok is None else f"{tok:,.0f}",
            ]
            if opt is not None:
                orows = [r for r in lay.cells.get((fl, xv, opt), []) if r.get("status") in _FEASIBLE]
                gap = _mean([_num(r, "gap") for r in orows])
                cells.append("-" if gap is None else f"{100 * gap:.1f}%")
                for b in shown_bases:
                    imp = _mean([_num(r, f"step_improvement_vs_{b.replace('-', '_')}") for r in orows])
                    cells.append("-" if imp is None else f"{100 * imp:+.1f}%")
            notes = sorted(
                {
                    (r.get("error") or "")[:90]
                    for s in lay.series
                    for r in lay.cells.get((fl, xv, s), [])
                    if r.get("status") not in _FEASIBLE and r.get("error")
                }
            )
            body.append([str(i) if math.isfinite(step) else "", xv, *cells, notes[0] if notes else ""])
        head = f"{sweep.name}: {fl}" if fl != "all" else sweep.name
        t = Table(
            title=f"{head}: modeled step seconds, ranked by the best strategy",
            title_justify="left",
            caption_justify="left",
        )
        t.add_column("#", justify="right")
        t.add_column(lay.x, no_wrap=True)
        for s in lay.series:
            t.add_column(f"{s} step s", justify="right")
        t.add_column("best")
        t.add_column("comm s", justify="right")
        t.add_column("MFU", justify="right")
        t.add_column("tokens/s", justify="right")
        if opt is not None:
            t.add_column(f"{opt} gap", justify="right")
            for b in shown_bases:
                t.add_column(f"vs {b}", justify="right")
        with_notes = any(r[-1] for r in body)
        if with_notes:
            t.add_column("why not placed")
        for r in body:
            t.add_row(*(r if with_notes else r[:-1]))
        caption = [
            "step s: compute + bubble + exposed comm + straggler wait; comm s, MFU, tokens/s: of the best strategy's answer"
        ]
        if opt is not None:
            caption.append(
                f"gap: of exposed comm to the solver's bound; vs X: step time {opt} saves over X on the same state"
            )
        if len(ranked) > len(body):
            caption.append(f"top {len(body)} of {len(ranked)}; every row is in the CSV")
        n_inf = sum(1 for b in ranked if not math.isfinite(b[0]))
        if n_inf:
            caption.append(f"{n_inf} with no placement")
        t.caption = "; ".join(caption)
        tables.append(t)
    return tables
