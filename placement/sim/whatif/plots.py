"""Plots of a what-if sweep's results: modeled step seconds per shape and strategy, and the optimizer's saving,
written as PNG and SVG. Owns `plot_sweep`."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from placement.sim.whatif.spec import Sweep

from placement.sim.whatif.axes import canonical_strategy
from placement.sim.whatif.report import _FEASIBLE, _layout, _mean, _metric, _num, _optimizer, _step

__all__ = ["plot_sweep", "save_figure"]


def _grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = min(max_cols, max(1, n))
    return math.ceil(n / cols), cols


def suptitle(fig: Any, text: str) -> None:
    """The figure's title, wrapped at spaces to fit its width (a long title is never clipped at the edges)."""
    width_in = float(fig.get_figwidth())
    chars = max(20, int(width_in * 72 / (12 * 0.62)))  # the title's 12 pt characters, about 0.6 em wide each
    fig.suptitle(textwrap.fill(text, width=chars, break_long_words=False, break_on_hyphens=False))


def save_figure(fig: Any, out: Path, stem: str) -> list[Path]:
    """PNG then SVG; the constrained layout is computed once (by the first save) and then frozen."""
    png, svg = out / f"{stem}.png", out / f"{stem}.svg"
    fig.savefig(png, dpi=100)
    fig.set_layout_engine("none")
    fig.savefig(svg, metadata={"Date": None})
    return [png, svg]


def plot_sweep(
    sweep: Sweep, rows: Mapping[str, Mapping[str, str]], out_dir: str | Path, *, max_panels: int = 12
) -> list[Path]:
    """Three figures, each as PNG and SVG: modeled step seconds per strategy across the swept axis
    (``step_seconds``), the exposed communication stacked per bottleneck tier (``tier_breakdown``), and the step
    time the optimizer saves over each baseline (``improvement``). Returns the files written."""
    from matplotlib.figure import Figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lay = _layout(sweep, rows)
    facets = lay.facet_labels[:max_panels]
    more = (
        f" (first {len(facets)} of {len(lay.facet_labels)} panels)"
        if len(lay.facet_labels) > len(facets)
        else ""
    )
    xi = list(range(len(lay.xs)))
    width = max(5.0, 0.32 * len(lay.xs) + 1.5)
    max_cols = 1 if len(lay.xs) > 12 else 3
    written: list[Path] = []

    def axes_grid(fig: Any, n: int, cols: int = 3) -> list[Any]:
        r, c = _grid(n, cols)
        axs = fig.subplots(r, c, squeeze=False, sharey=False)
        flat = [a for row in axs for a in row]
        for a in flat[n:]:
            a.set_visible(False)
        return flat[:n]

    def xticks(ax: Any) -> None:
        ax.set_xticks(xi)
        ax.set_xticklabels(
            lay.xs,
            rotation=60 if len(lay.xs) > 4 else 0,
            ha="right" if len(lay.xs) > 4 else "center",
            fontsize=8,
        )
        ax.set_xlabel(lay.x)
        ax.grid(True, axis="y", alpha=0.3)

    # 1. modeled step seconds per strategy
    r, c = _grid(len(facets), max_cols)
    fig = Figure(figsize=(width * c, 3.6 * r + 0.6), layout="constrained")
    for ax, fl in zip(axes_grid(fig, len(facets), max_cols), facets, strict=True):
        for s in lay.series:
            ys = [_step(lay.cells.get((fl, xv, s))) for xv in lay.xs]
            ax.plot(xi, [math.nan if y is None else y for y in ys], marker="o", ms=4, label=s)
        ax.set_title(fl, fontsize=10)
        ax.set_ylabel("step seconds")
        xticks(ax)
        ax.legend(fontsize=8)
    suptitle(
        fig, f"{sweep.name}: modeled step seconds (compute + bubble + exposed comm + straggler wait){more}"
    )
    written += save_figure(fig, out, "step_seconds")

    # 2. stacked breakdown per tier: a row of panels per strategy
    tiers = [
        t
        for t in [*sweep.tiers, "other"]
        if any(_num(row, f"tier_{t}_s") for cl in lay.cells.values() for row in cl)
    ]
    fcols = facets[:4]
    fig = Figure(figsize=(width * len(fcols), 3.6 * len(lay.series)), layout="constrained")
    axs = fig.subplots(len(lay.series), len(fcols), squeeze=False)
    colors = {t: f"C{i % 10}" for i, t in enumerate(tiers)}
    for si, s in enumerate(lay.series):
        for fi, fl in enumerate(fcols):
            ax = axs[si][fi]
            bottom = [0.0] * len(lay.xs)
            for t in tiers:
                vals = []
                for xv in lay.xs:
                    feas = [rw for rw in lay.cells.get((fl, xv, s), []) if rw.get("status") in _FEASIBLE]
                    vals.append(_mean([_num(rw, f"tier_{t}_s") or 0.0 for rw in feas]) or 0.0)
                ax.bar(xi, vals, bottom=bottom, color=colors[t], label=t, width=0.75)
                bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
            ax.set_title(f"{s} | {fl}", fontsize=9)
            ax.set_ylabel("exposed comm seconds")
            xticks(ax)
    if tiers:
        handles, labels = axs[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, title="tier", loc="outside lower center", ncols=min(len(tiers), 6))
    suptitle(
        fig,
        f"{sweep.name}: exposed communication seconds per step by bottleneck tier"
        f"{more if len(lay.facet_labels) > 4 else ''}",
    )
    written += save_figure(fig, out, "tier_breakdown")

    # 3. improvement of the optimizer over the baselines (the baselines on the same state, from its rows)
    opt = _optimizer(lay)
    if opt is not None:
        saved = {  # (baseline, facet) -> the saving per x, for the baselines the sweep ran (a value somewhere)
            (b, fl): [
                _metric(lay.cells.get((fl, xv, opt)), f"step_improvement_vs_{b.replace('-', '_')}")
                for xv in lay.xs
            ]
            for b in sweep.baselines
            for fl in facets
        }
        run = {canonical_strategy(x) for x in sweep.strategies}  # the legend names only what the sweep ran
        ran = [
            b
            for b in sweep.baselines
            if canonical_strategy(b) in run and any(v is not None for fl in facets for v in saved[(b, fl)])
        ]
        fig = Figure(figsize=(width * c, 3.6 * r + 0.6), layout="constrained")
        for ax, fl in zip(axes_grid(fig, len(facets), max_cols), facets, strict=True):
            bar = 0.8 / max(1, len(ran))
            for bi, b in enumerate(ran):
                ys = [math.nan if v is None else 100 * v for v in saved[(b, fl)]]
                offset = (bi - (len(ran) - 1) / 2) * bar
                ax.bar([x + offset for x in xi], ys, width=bar, label=f"vs {b}", color=f"C{(bi + 3) % 10}")
            ax.axhline(0, color="black", lw=0.8)
            ax.set_title(fl, fontsize=10)
            ax.set_ylabel(f"{opt}: step time saved (%)")
            xticks(ax)
            if ran:
                ax.legend(fontsize=8)
        suptitle(
            fig, f"{sweep.name}: modeled step time {opt} saves over each baseline on the same state{more}"
        )
        written += save_figure(fig, out, "improvement")
    return written
