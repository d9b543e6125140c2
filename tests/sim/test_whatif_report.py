"""placement.sim.whatif reports: the ranked tables (one per occupancy level, ranked by step seconds) and the plots."""

from __future__ import annotations

from pathlib import Path

from placement.sim.whatif import plot_sweep, ranked_tables, run_sweep, sweep_from_dict
from tests.support_whatif import sweep_doc


def test_tables_and_plots(tmp_path: Path) -> None:
    from rich.console import Console

    sw = sweep_from_dict(sweep_doc(), "sweep.yaml")
    run = run_sweep(sw, tmp_path, workers=0)
    tables = ranked_tables(sw, run.rows)
    assert len(tables) == 2  # one per occupancy level
    con = Console(record=True, width=200)
    for t in tables:
        con.print(t)
    text = con.export_text()
    assert "tp4 pp1 dp2" in text and "cpsat gap" in text and "the job needs 8 H100 devices" in text
    assert "modeled step seconds, ranked" in text and "cpsat step s" in text and "vs first-fit" in text
    assert "comm s" in text and "MFU" in text and "tokens/s" in text
    # ranked by the best step seconds (ties: exposed comm), whatever the model says they are
    free = next(t for t in tables if "occupancy=0:" in str(t.title))
    shapes = {p.shape.label: p.shape for p in sw.points if p.shape is not None}
    order = [str(c) for c in free.columns[1].cells]
    best = {}
    for label in order:
        keys = {p.key for p in sw.points if p.shape == shapes[label] and p.occupancy == 0}
        best[label] = min(
            (float(run.rows[k]["step_seconds"]), float(run.rows[k]["comm_seconds"])) for k in keys
        )
    assert [best[label] for label in order] == sorted(best.values())
    files = plot_sweep(sw, run.rows, tmp_path)
    assert sorted(p.name for p in files) == sorted(
        f"{s}.{e}" for s in ("step_seconds", "tier_breakdown", "improvement") for e in ("png", "svg")
    )
    svg = (tmp_path / "step_seconds.svg").read_text()
    assert "step seconds" in svg and "seconds / step" not in svg
    assert all(p.stat().st_size > 1000 for p in files)
