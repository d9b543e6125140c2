"""The results CSV of a sweep: its columns, a point's input columns, number formatting, and the sink that keeps
the finished rows of an earlier run (--resume) and appends new rows one write and flush at a time."""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from placement.sim.whatif.spec import Point, Sweep

__all__ = ["OUTPUT_COLUMNS", "ResultSink", "csv_columns", "fmt", "fold_unknown", "input_row", "read_results"]


def fmt(x: float | None) -> str:
    """A number as the CSV writes it (9 significant digits; None: empty)."""
    return "" if x is None else format(x, ".9g")


OUTPUT_COLUMNS: tuple[str, ...] = (
    "step_seconds",
    "comm_seconds",
    "comm_seconds_total",
    "compute_seconds",
    "bubble_seconds",
    "mfu",
    "tokens_per_s",
    "seconds_per_step",
)
"""The modeled step of a point's answer (`placement.cost.report.CostReport`); ``seconds_per_step`` is the deprecated v1
name of ``comm_seconds``, kept so that older results files resume."""


def csv_columns(sweep: Sweep) -> list[str]:
    """Every input and output column, in order."""
    cols = ["key", "sweep", "variant", "gpus_per_node", "nodes", "nodes_per_leaf"]
    for lv in sweep.level_names:
        cols += [f"{lv}_bandwidth_gbps", f"{lv}_latency_us"]
    cols += [
        "occupancy",
        "mode",
        "seed",
        "failed_fraction",
        "free_devices",
        "shape",
        "tp",
        "cp",
        "ep",
        "dp",
        "pp",
        "ranks",
        "strategy",
        "time_limit_s",
        "status",
        *OUTPUT_COLUMNS,
        "lower_bound",
        "gap",
    ]
    names = [b.replace("-", "_") for b in sweep.baselines]
    cols += [f"baseline_{b}_step_s" for b in names]
    cols += [f"baseline_{b}_s" for b in names]
    cols += [f"step_improvement_vs_{b}" for b in names]
    cols += [f"improvement_vs_{b}" for b in names]
    cols += [f"label_{lab}_s" for lab in sweep.labels]
    cols += [f"tier_{t}_s" for t in sweep.tiers]
    cols += ["tier_other_s", "wall_s", "error"]
    return cols


def input_row(sweep: Sweep, p: Point) -> dict[str, str]:
    row = {"key": p.key, "sweep": sweep.name, "variant": sweep.variants[p.variant].label}
    row.update(sweep.variant_info[p.variant])
    row.update(
        occupancy=f"{p.occupancy:g}",
        mode=p.mode,
        seed=str(p.seed),
        failed_fraction=f"{p.failed:g}",
        strategy=p.strategy,
        time_limit_s="" if p.time_limit_s is None else f"{p.time_limit_s:g}",
    )
    if p.shape is not None:
        row.update(
            shape=p.shape.key,
            ranks=str(p.shape.world_size),
            **{d: str(getattr(p.shape, d)) for d in ("tp", "cp", "ep", "dp", "pp")},
        )
    else:
        row.update(shape=sweep.job_name, ranks=str(sweep.gpus or ""))
    return row


def read_results(path: str | Path) -> list[dict[str, str]]:
    """The rows of a results CSV (empty when the file does not exist)."""
    p = Path(path)
    if not p.is_file():
        return []
    with p.open(newline="") as f:
        return [dict(r) for r in csv.DictReader(f)]


class ResultSink:
    """The results CSV, appended and flushed row by row."""

    def __init__(self, path: Path, columns: list[str], resume: bool) -> None:
        self.columns = columns
        old: list[dict[str, Any]] = []
        if resume and path.is_file():
            with path.open(newline="") as f:
                old = [dict(r) for r in csv.DictReader(f)]
        # finished: a known final status and every field present (a row cut short by a killed run is not)
        kept = {
            r["key"]: r
            for r in old
            if r.get("key")
            and r.get("status") in ("OPTIMAL", "FEASIBLE", "INFEASIBLE")
            and None not in r.values()
            and None not in r
        }
        self.done = set(kept)
        # start from a clean file holding the finished rows under today's columns, replaced atomically
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", newline="") as f:
            w = csv.DictWriter(f, columns, extrasaction="ignore")
            w.writeheader()
            w.writerows(kept.values())
        os.replace(tmp, path)
        self.file = path.open("a", newline="")
        self.writer = csv.DictWriter(self.file, columns, extrasaction="ignore")

    def write(self, row: Mapping[str, str]) -> None:
        self.writer.writerow(row)
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def fold_unknown(out: dict[str, str], columns: set[str]) -> dict[str, str]:
    """Tier or label columns the header does not have go to tier_other_s (the header is fixed up front)."""
    other = 0.0
    for k in [k for k in out if k not in columns]:
        if k.startswith(("tier_", "label_")):
            if k.startswith("tier_"):
                other += float(out[k])
            del out[k]
    if other:
        out["tier_other_s"] = fmt(other)
    return out
