"""Placement pictures: the cluster as nested domain boxes, devices as cells, ranks coloured by pipeline stage.

Owns `layout` (where boxes, cells and outlines go: pure) and `render` (draws a layout: SVG, PNG or PDF by suffix,
matplotlib without pyplot); domains without a rank of the job collapse into one "N idle nodes" box per parent. Each rank's cell carries the SVG id ``rank-<r>``. See docs/whatif.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placement.cost.report import CostReport
from placement.errors import InputError, Problem
from placement.model.job import DIMENSIONS, Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic

__all__ = ["COLOR_BY", "FORMATS", "Layout", "layout", "render"]

FORMATS: tuple[str, ...] = (".svg", ".png", ".pdf")
"""File suffixes `render` writes."""
COLOR_BY: tuple[str, ...] = (*DIMENSIONS, "none")
"""What rank cells may be coloured by: a parallel dimension's coordinate (``pp``: pipeline stage, ``dp``: data
parallel replica...) or ``none`` (one colour)."""

CELL = 1.0
GAP = 0.14
PAD = 0.35
HOST_LABEL = 0.6
DOMAIN_LABEL = 0.9
IDLE_W, IDLE_H = 5.4, 1.9
ASPECT = 1.7  # target width / height of every domain box
FREE, BUSY, FAILED_C = "#ffffff", "#c9c9c9", "#9a9a9a"
LEVEL_FILLS = ("#f7f7f7", "#eef3f8", "#f4f0f8", "#f1f6ee", "#f8f3ea")


@dataclass
class _Box:
    """A laid-out box: a domain (level > 0), a host (level 0) or a collapsed run of idle domains."""

    kind: str  # "domain", "host" or "idle"
    level: int
    index: int
    label: str
    children: list[_Box] = field(default_factory=list)
    w: float = 0.0
    h: float = 0.0
    x: float = 0.0
    y: float = 0.0  # top-left corner, y growing downwards
    cols: int = 1
    idle_nodes: int = 0
    idle_busy: int = 0
    idle_failed: int = 0


def _shelf(children: Sequence[_Box], cols: int) -> tuple[float, float, list[tuple[float, float]]]:
    """Rows of `cols` children: the content width, height and each child's offset."""
    offs: list[tuple[float, float]] = []
    width = height = 0.0
    for r in range(0, len(children), cols):
        row = children[r : r + cols]
        x = 0.0
        for c in row:
            offs.append((x, height))
            x += c.w + GAP * 2
        width = max(width, x - GAP * 2)
        height += max(c.h for c in row) + GAP * 2
    return width, height - GAP * 2, offs


def _pack(box: _Box, label_h: float) -> None:
    """Size `box` from its (sized) children, choosing the column count whose aspect is nearest `ASPECT`."""
    n = len(box.children)
    best: tuple[float, int] | None = None
    for cols in range(1, n + 1):
        w, h, _ = _shelf(box.children, cols)
        score = abs(math.log((w + 2 * PAD) / (h + label_h + 2 * PAD) / ASPECT))
        if best is None or score < best[0] - 1e-9:
            best = (score, cols)
    cols = best[1] if best else 1
    w, h, offs = _shelf(box.children, cols)
    box.w, box.h = w + 2 * PAD, h + label_h + 2 * PAD
    for c, (ox, oy) in zip(box.children, offs, strict=True):
        _move(c, PAD + ox, label_h + PAD + oy)


def _move(box: _Box, dx: float, dy: float) -> None:
    box.x += dx
    box.y += dy
    for c in box.children:
        _move(c, dx, dy)


def _build(topo: Topology, state: ClusterState, level: int, index: int, used_hosts: set[int]) -> _Box:
    lname = topo.levels[level].name
    if level == 0:
        n = topo.host_types[index].devices
        cols = min(n, 8)
        rows = math.ceil(n / cols)
        box = _Box("host", 0, index, topo.host_names[index], cols=cols)
        box.w = 2 * PAD + cols * CELL + (cols - 1) * GAP
        box.h = HOST_LABEL + PAD + rows * CELL + (rows - 1) * GAP + PAD * 0.7
        return box
    dname = topo.domain_names[level][index]
    box = _Box("domain", level, index, dname if dname == lname else f"{lname} {dname}")
    idle_hosts: list[int] = []
    for child in topo.children[level][index]:
        hosts = sorted({topo.devices[d].host_index for d in topo.devices_in_domain[level - 1][child]})
        if any(h in used_hosts for h in hosts):
            box.children.append(_build(topo, state, level - 1, child, used_hosts))
        else:
            idle_hosts.extend(hosts)
    if idle_hosts:
        devs = [d for h in idle_hosts for d in topo.devices_in_domain[0][h]]
        n = len(idle_hosts)
        idle = _Box(
            "idle",
            level - 1,
            -1,
            f"{n} idle node{'s' if n != 1 else ''}",
            w=IDLE_W,
            h=IDLE_H,
            idle_nodes=n,
            idle_busy=sum(1 for d in devs if d in state.occupied and d not in state.failed),
            idle_failed=sum(1 for d in devs if d in state.failed),
        )
        box.children.append(idle)
    _pack(box, DOMAIN_LABEL)
    return box


def _walk(box: _Box) -> list[_Box]:
    out = [box]
    for c in box.children:
        out.extend(_walk(c))
    return out


def _palette(n: int) -> list[Any]:
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    cmap = colormaps["turbo"]
    return [cmap(0.08 + 0.84 * i / (n - 1)) for i in range(n)]


def _check(topology: Topology, job: Job, mapping: Sequence[int], path: Path, color_by: str | None) -> str:
    problems: list[Problem] = []
    if path.suffix.lower() not in FORMATS:
        problems.append(
            Problem("path", f"unknown picture format {path.suffix or '(none)'!r}; use {', '.join(FORMATS)}")
        )
    if len(mapping) != job.ranks:
        problems.append(Problem("mapping", f"has {len(mapping)} devices for {job.ranks} ranks"))
    bad = [d for d in mapping if not 0 <= d < topology.num_devices]
    if bad:
        problems.append(
            Problem("mapping", f"device indices {bad[:5]} are outside 0..{topology.num_devices - 1}")
        )
    if len(set(mapping)) != len(mapping):
        problems.append(Problem("mapping", "maps two ranks to one device"))
    if color_by is not None and color_by not in COLOR_BY:
        problems.append(Problem("color_by", f"unknown value {color_by!r}; use one of {', '.join(COLOR_BY)}"))
    if problems:
        raise InputError(str(path), problems)
    par = job.parallel
    if color_by is None:  # pipeline stage, else the first dimension that varies
        color_by = next(
            (d for d in ("pp", "dp", "tp", "cp", "ep") if par is not None and par.size(d) > 1), "none"
        )
    return color_by if par is not None else "none"


def _cost_lines(report: CostReport) -> list[str]:
    """The legend's cost lines: the modeled step, its exposed communication, then each group kind's exposed
    seconds with its main tiers."""
    lines = [
        f"step {report.step_seconds:.4f} s"
        + ("" if report.mfu is None else f" (MFU {100 * report.mfu:.0f}%)"),
        f"exposed comm {report.comm_seconds:.4f} s (of {report.comm_seconds_total:.4f} s)",
    ]
    for label, s in sorted(report.by_label.items(), key=lambda kv: -kv[1]):
        tiers = sorted(
            ((t, v) for (lab, t), v in report.by_label_tier.items() if lab == label), key=lambda tv: -tv[1]
        )
        where = ", ".join(f"{t} {100 * v / s:.0f}%" for t, v in tiers[:2] if s > 0)
        lines.append(f"{label}: {s:.4f} s" + (f" ({where})" if where else ""))
    return lines


@dataclass(frozen=True)
class _Cell:
    """A device's cell: its lower-left corner (plot coordinates, y up), its rank (None: not the job's) and its
    state (``rank``, ``failed``, ``busy`` or ``free``; `slow`: degraded)."""

    device: int
    x: float
    y: float
    rank: int | None
    state: str
    slow: bool


@dataclass(frozen=True)
class _Outline:
    """A TP group's outline around a run of adjacent members on one host (`split`: the group spans hosts)."""

    x: float
    y: float
    w: float
    h: float
    split: bool


@dataclass
class Layout:
    """Where everything goes, in layout units (y up): the boxes (with their plot y), each host's cells, the TP
    outlines, the rank colour indices and what the legend lists. Computed by `layout`, drawn by `render`."""

    width: float
    height: float
    scale: float  # inches per layout unit
    boxes: list[tuple[_Box, float]]
    cells: dict[int, list[_Cell]]  # per host index, in device order
    outlines: list[_Outline]
    dim: str
    n_colors: int
    color_of: dict[int, int]  # rank -> colour index
    legend_colors: list[tuple[int, str]]  # (colour index, label)
    present: dict[str, bool]  # device states shown outside the job's ranks (and degraded ones of the job)

    @property
    def tp_inside(self) -> bool:
        return any(not o.split for o in self.outlines)

    @property
    def tp_split(self) -> bool:
        return any(o.split for o in self.outlines)


_DIM_NAMES = {"pp": "pipeline stage", "dp": "DP replica", "tp": "TP rank", "cp": "CP rank", "ep": "EP rank"}


def layout(topology: Topology, state: ClusterState, job: Job, mapping: Sequence[int], dim: str) -> Layout:
    """The picture's layout (no drawing): nested domain boxes sized and packed, cells placed, TP groups outlined,
    ranks coloured by `dim` (a dimension of `COLOR_BY`, checked by the caller)."""
    rank_of = {d: r for r, d in enumerate(mapping)}
    used_hosts = {topology.devices[d].host_index for d in mapping}
    root = _build(topology, state, len(topology.levels) - 1, 0, used_hosts)
    W, H = root.w, root.h
    par = job.parallel
    n_col = par.size(dim) if par is not None and dim != "none" else 1
    boxes = [(b, H - b.y - b.h) for b in _walk(root)]
    cells: dict[int, list[_Cell]] = {}
    for b, y in boxes:
        if b.kind == "host":
            cells[b.index] = _host_cells(topology, state, b, y, rank_of)
    cell_xy = {c.device: (c.x, c.y) for row in cells.values() for c in row}
    if par is not None and dim != "none":
        shown = (
            list(range(n_col))
            if n_col <= 16
            else sorted({*range(0, n_col, math.ceil(n_col / 12)), n_col - 1})
        )
        legend_colors = [(v, f"{_DIM_NAMES[dim]} {v}") for v in shown]
    else:
        legend_colors = [(0, f"{job.name} rank")]
    return Layout(
        W,
        H,
        min(0.42, 34.0 / max(W, H)),
        boxes,
        cells,
        _tp_outlines(topology, job, mapping, cell_xy),
        dim,
        max(1, n_col),
        {r: 0 if par is None or dim == "none" else par.coords(r)[dim] for r in range(len(mapping))},
        legend_colors,
        _present(state, cell_xy, rank_of),
    )


def _host_cells(
    topology: Topology, state: ClusterState, b: _Box, y: float, rank_of: dict[int, int]
) -> list[_Cell]:
    out: list[_Cell] = []
    for k, d in enumerate(topology.devices_in_domain[0][b.index]):
        row, col = divmod(k, b.cols)
        cx = b.x + PAD + col * (CELL + GAP)
        cy = y + b.h - HOST_LABEL - (row + 1) * CELL - row * GAP
        r = rank_of.get(d)
        slow = state.device_slowdown.get(d, 1.0) > 1.0
        kind = (
            "rank"
            if r is not None
            else "failed"
            if d in state.failed
            else "busy"
            if d in state.occupied
            else "free"
        )
        out.append(_Cell(d, cx, cy, r, kind, slow))
    return out


def _tp_outlines(
    topology: Topology, job: Job, mapping: Sequence[int], cell_xy: dict[int, tuple[float, float]]
) -> list[_Outline]:
    """TP groups: one outline per run of adjacent members on one host."""
    out: list[_Outline] = []
    for g in job_traffic(job).groups:
        if g.label != "tp":
            continue
        by_host: dict[int, list[int]] = {}
        for d in (mapping[m] for m in g.members):
            by_host.setdefault(topology.devices[d].host_index, []).append(d)
        split = len(by_host) > 1
        for hdevs in by_host.values():
            pos = sorted(cell_xy[d] for d in hdevs)
            runs: list[list[tuple[float, float]]] = []
            for p in sorted(pos, key=lambda q: (-q[1], q[0])):
                last = runs[-1][-1] if runs else None
                if (
                    last is not None
                    and abs(last[1] - p[1]) < 1e-9
                    and abs(p[0] - last[0] - CELL - GAP) < 1e-9
                ):
                    runs[-1].append(p)
                else:
                    runs.append([p])
            for run in runs:
                x0, y0 = run[0]
                out.append(
                    _Outline(
                        x0 - GAP * 0.4,
                        y0 - GAP * 0.4,
                        run[-1][0] - x0 + CELL + GAP * 0.8,
                        CELL + GAP * 0.8,
                        split,
                    )
                )
    return out


def _present(
    state: ClusterState, cell_xy: dict[int, tuple[float, float]], rank_of: dict[int, int]
) -> dict[str, bool]:
    present = {"free": False, "busy": False, "failed": False, "degraded": False}
    for d in cell_xy:
        if d in rank_of:
            present["degraded"] |= state.device_slowdown.get(d, 1.0) > 1.0
            continue
        present["failed"] |= d in state.failed
        present["busy"] |= d in state.occupied and d not in state.failed
        present["free"] |= d not in state.failed and d not in state.occupied
        present["degraded"] |= state.device_slowdown.get(d, 1.0) > 1.0
    return present


def render(
    topology: Topology,
    state: ClusterState,
    job: Job,
    mapping: Sequence[int],
    report: CostReport | None,
    path: str | Path,
    *,
    color_by: str | None = None,
    title: str | None = None,
) -> Path:
    """Draw `job` placed by `mapping` (rank -> device index) on `topology` / `state` to `path`.

    Ranks are coloured by `color_by` (a dimension of `COLOR_BY`; default: pipeline stage, or the first dimension
    larger than 1), TP groups are outlined, and the legend lists colours, device states and, when `report` is
    given, the modeled step, its exposed communication and that of each group kind with its main tiers. Returns
    the path written.
    Raises `InputError` for an unknown suffix or colour option, or a mapping that does not fit the job.
    """
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    out = Path(path)
    lay = layout(topology, state, job, mapping, _check(topology, job, mapping, out, color_by))
    colors = _palette(lay.n_colors)
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "placement", "hatch.linewidth": 0.6}):
        fig = Figure(figsize=(max(3.0, lay.width * lay.scale), max(1.5, lay.height * lay.scale)))
        ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
        ax.set_xlim(-0.1, lay.width + 0.1)
        ax.set_ylim(-0.1, lay.height + 0.1)
        ax.set_aspect("equal")
        ax.axis("off")
        _draw_boxes(ax, lay, colors, job.ranks)
        _draw_outlines(ax, lay)
        _draw_legend(ax, lay, colors, report)
        head = title or f"{job.name}: {job.ranks} ranks on {topology.name}"
        if report is not None and title is None:
            head += f" | step {report.step_seconds:.4f} s, exposed comm {report.comm_seconds:.4f} s"
        ax.set_title(head, fontsize=10, loc="left")
        out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"Date": None} if out.suffix.lower() == ".svg" else None
        fig.savefig(out, dpi=120 if out.suffix.lower() == ".png" else 72, bbox_inches="tight", metadata=meta)
    return out


def _draw_boxes(ax: Any, lay: Layout, colors: list[Any], ranks: int) -> None:
    """Domain, idle and host boxes with their labels, and each host's cells with their ranks."""
    from matplotlib.patches import Rectangle

    cell_pt = lay.scale * 72 * CELL
    fs_dom = max(4.0, min(11.0, cell_pt * 0.42))
    fs_host = max(3.0, min(8.0, cell_pt * 0.3))
    digits = len(str(max(ranks - 1, 0)))
    fs_rank = min(9.0, cell_pt * 0.8 / (0.6 * max(digits, 2)), cell_pt * 0.5)
    for b, y in lay.boxes:
        if b.kind == "domain":
            fill = LEVEL_FILLS[b.level % len(LEVEL_FILLS)]
            ax.add_artist(Rectangle((b.x, y), b.w, b.h, facecolor=fill, edgecolor="#7a7a7a", lw=0.8))
            ax.text(
                b.x + PAD * 0.6,
                y + b.h - DOMAIN_LABEL * 0.55,
                b.label,
                fontsize=fs_dom,
                va="center",
                ha="left",
                color="#333333",
                clip_on=False,
            )
        elif b.kind == "idle":
            ax.add_artist(
                Rectangle(
                    (b.x, y),
                    b.w,
                    b.h,
                    facecolor="#fafafa",
                    edgecolor="#9a9a9a",
                    lw=0.6,
                    linestyle=(0, (3, 2)),
                )
            )
            extra = []
            if b.idle_busy:
                extra.append(f"{b.idle_busy} GPUs busy")
            if b.idle_failed:
                extra.append(f"{b.idle_failed} failed")
            text = b.label + ("\n" + ", ".join(extra) if extra else "")
            ax.text(
                b.x + b.w / 2,
                y + b.h / 2,
                text,
                fontsize=fs_host * 1.1,
                ha="center",
                va="center",
                color="#555555",
            )
        else:
            ax.add_artist(Rectangle((b.x, y), b.w, b.h, facecolor="#ffffff", edgecolor="#555555", lw=0.7))
            ax.text(
                b.x + PAD * 0.5,
                y + b.h - HOST_LABEL * 0.5,
                b.label,
                fontsize=fs_host,
                va="center",
                ha="left",
                color="#333333",
            )
            for c in lay.cells[b.index]:
                _draw_cell(ax, c, colors[lay.color_of[c.rank]] if c.rank is not None else None, fs_rank)


_CELL_FACES = {"failed": (FAILED_C, "xxxx"), "busy": (BUSY, None)}


def _draw_cell(ax: Any, c: _Cell, rank_color: Any, fs_rank: float) -> None:
    from matplotlib.patches import Rectangle

    if c.rank is not None:
        face, hatch = rank_color, ("...." if c.slow else None)
    elif c.state in _CELL_FACES:
        face, hatch = _CELL_FACES[c.state]
    else:
        face, hatch = FREE, ("...." if c.slow else None)
    patch = Rectangle((c.x, c.y), CELL, CELL, facecolor=face, edgecolor="#444444", lw=0.4, hatch=hatch)
    if c.rank is not None:
        patch.set_gid(f"rank-{c.rank}")
    ax.add_artist(patch)
    if c.rank is not None and fs_rank >= 2.5:
        rgb = face[:3] if isinstance(face, tuple) else (1.0, 1.0, 1.0)
        dark = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] < 0.55
        ax.text(
            c.x + CELL / 2,
            c.y + CELL / 2,
            str(c.rank),
            fontsize=fs_rank,
            ha="center",
            va="center",
            color="white" if dark else "black",
        )


def _draw_outlines(ax: Any, lay: Layout) -> None:
    from matplotlib.patches import Rectangle

    lw = max(0.8, 2.2 * lay.scale / 0.42)
    for o in lay.outlines:
        style: Mapping[str, Any] = (
            {"edgecolor": "#d62728", "linestyle": (0, (2, 1.2))} if o.split else {"edgecolor": "black"}
        )
        ax.add_artist(Rectangle((o.x, o.y), o.w, o.h, facecolor="none", lw=lw, zorder=3, **style))


def _draw_legend(ax: Any, lay: Layout, colors: list[Any], report: CostReport | None) -> None:
    """Colours, device states, outlines, cost per group kind."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = []
    labels: list[str] = []
    for v, lab in lay.legend_colors:
        handles.append(Patch(facecolor=colors[v], edgecolor="#444444"))
        labels.append(lab)
    for key, h, lab in (
        ("free", Patch(facecolor=FREE, edgecolor="#444444"), "free device"),
        ("busy", Patch(facecolor=BUSY, edgecolor="#444444"), "held by another job"),
        ("failed", Patch(facecolor=FAILED_C, edgecolor="#444444", hatch="xxxx"), "failed"),
        ("degraded", Patch(facecolor=FREE, edgecolor="#444444", hatch="...."), "degraded"),
    ):
        if lay.present[key]:
            handles.append(h)
            labels.append(lab)
    if lay.tp_inside:
        handles.append(Patch(facecolor="none", edgecolor="black", lw=1.5))
        labels.append("TP group (one node)")
    if lay.tp_split:
        handles.append(Patch(facecolor="none", edgecolor="#d62728", lw=1.5, linestyle=(0, (2, 1.2))))
        labels.append("TP group split across nodes")
    if report is not None:
        handles.append(Line2D([], [], linestyle="none"))
        labels.append("modeled step (exposed comm per group kind):")
        for line in _cost_lines(report):
            handles.append(Line2D([], [], linestyle="none"))
            labels.append("  " + line)
    ax.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8,
        frameon=False,
        handlelength=1.4,
        borderaxespad=0.0,
    )
