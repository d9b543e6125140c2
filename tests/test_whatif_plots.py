"""The what-if figures: a title wrapped inside the figure, never clipped at its edges, and an improvement
legend that names only the baselines the sweep ran."""

from __future__ import annotations

from pathlib import Path

import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from typer.testing import CliRunner

from placement.cli.app import app
from placement.sim.whatif.plots import suptitle
from tests.support_whatif import sweep_doc


def test_a_long_title_stays_inside_the_figure() -> None:
    for width in (5.0, 10.0, 15.0):
        fig = Figure(figsize=(width, 4), layout="constrained")
        fig.subplots(1, 2)
        text = "sweep-with-a-rather-long-name: modeled step seconds (compute + bubble + exposed comm + straggler wait)"
        suptitle(fig, text)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        title = fig._suptitle  # type: ignore[attr-defined]
        box = title.get_window_extent(canvas.get_renderer())
        assert box.x0 >= 0 and box.x1 <= fig.bbox.x1, (width, box)


def test_the_improvement_legend_names_only_the_baselines_the_sweep_ran(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(sweep_doc(strategies=["first-fit", "cpsat"], occupancy=[0])))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["whatif", str(sweep), "--workers", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    svg = (out / "improvement.svg").read_text()  # matplotlib writes each text as a comment before its glyphs
    assert "<!-- vs first-fit -->" in svg
    for other in ("kueue-tas", "slurm-tree", "slurm-block"):
        assert f"<!-- vs {other} -->" not in svg
