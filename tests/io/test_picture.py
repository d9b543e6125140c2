"""placement.io.export.picture: SVG/PNG placement pictures for 8 and 1,024 ranks, one identifiable cell per rank, collapsed
idle domains, and clean errors; and `render_picture`, the CLI's helper."""

from __future__ import annotations

import warnings
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from placement.cost.evaluate import evaluate
from placement.errors import InputError
from placement.io.export.picture import render
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.sim.scenarios import fat_tree, megatron_job, occupy
from placement.solve.baselines import first_fit
from placement.solve.units import candidate_devices

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"'click\.\w+(\.\w+)*' is deprecated", DeprecationWarning)
    from placement.cli.picture import render_picture


def rank_ids(svg: Path) -> list[str]:
    root = ET.parse(svg).getroot()  # a parse error fails the test: the file must be well-formed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return [i for e in root.iter() if (i := e.get("id") or "").startswith("rank-")]


def svg_text(svg: Path) -> str:
    root = ET.parse(svg).getroot()
    return " ".join(t for e in root.iter() if e.tag.endswith("text") for t in e.itertext())


def placed(topo: Topology, state: ClusterState, *, tp: int, pp: int, dp: int) -> tuple[Job, list[int]]:
    job = megatron_job("job", tp=tp, pp=pp, dp=dp)
    mapping = candidate_devices(topo, state, job)[: job.ranks]  # ranks in order onto free devices
    assert len(mapping) == job.ranks
    return job, mapping


def test_small_picture_has_one_cell_per_rank(tmp_path: Path) -> None:
    topo = fat_tree(64, nodes_per_leaf=4, leaves_per_spine=2)  # 8 nodes, 2 leaves
    state = ClusterState(occupied={0: "other", 1: "other"}, failed=frozenset({2}))
    job = megatron_job("small", tp=4, pp=2, dp=1)
    mapping = first_fit(topo, state, job)
    assert mapping is not None
    report = evaluate(topo, state, job, mapping)
    out = render(topo, state, job, mapping, report, tmp_path / "small.svg")
    assert out == tmp_path / "small.svg"
    ids = rank_ids(out)
    assert sorted(ids) == sorted(f"rank-{r}" for r in range(8))
    text = svg_text(out)
    # the legend names the colours and the cost per group kind; untouched nodes collapse into one box per parent
    assert "pipeline stage 0" in text and "pipeline stage 1" in text
    assert f"step {report.step_seconds:.4f} s" in text and "tp:" in text and "pp:" in text
    assert f"exposed comm {report.comm_seconds:.4f} s (of {report.comm_seconds_total:.4f} s)" in text
    assert "s/step" not in text and "seconds per step" not in text
    # n2 and n3 collapse inside the first leaf, the whole second leaf (4 nodes) inside the spine
    assert "2 idle nodes" in text and "4 idle nodes" in text and "n2" not in text.split()
    assert "held by another job" in text and "failed" in text


def test_large_picture_1024_ranks(tmp_path: Path) -> None:
    topo = fat_tree(1536, nodes_per_leaf=8, leaves_per_spine=4)
    state = occupy(topo, 0.25, seed=3, mode="mixed")
    job, mapping = placed(topo, state, tp=8, pp=8, dp=16)
    out = render(topo, state, job, mapping, None, tmp_path / "large.svg")
    ids = rank_ids(out)
    assert len(ids) == 1024 and len(set(ids)) == 1024
    assert "idle node" in svg_text(out)


def test_png_by_suffix_and_dp_colouring(tmp_path: Path) -> None:
    topo = fat_tree(64, nodes_per_leaf=4, leaves_per_spine=2)
    job, mapping = placed(topo, ClusterState(), tp=2, pp=1, dp=4)
    out = render(topo, ClusterState(), job, mapping, None, tmp_path / "p.png", color_by="dp")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = render(topo, ClusterState(), job, mapping, None, tmp_path / "p.svg", color_by="dp")
    assert "DP replica 3" in svg_text(svg)


def test_degraded_and_split_tp_groups_are_marked(tmp_path: Path) -> None:
    topo = fat_tree(32, nodes_per_leaf=2, leaves_per_spine=2)
    job = megatron_job("split", tp=4, pp=1, dp=2)
    mapping = [0, 1, 2, 8, 4, 5, 6, 7]  # the first TP group spans two nodes, the second sits in n0
    state = replace(ClusterState(), device_slowdown={1: 2.0})
    out = render(topo, state, job, mapping, evaluate(topo, state, job, mapping), tmp_path / "s.svg")
    text = svg_text(out)
    assert "TP group split across nodes" in text and "TP group (one node)" in text and "degraded" in text
    assert len(rank_ids(out)) == 8


def test_errors(tmp_path: Path) -> None:
    topo = fat_tree(16, nodes_per_leaf=2, leaves_per_spine=1)
    job, mapping = placed(topo, ClusterState(), tp=2, pp=1, dp=2)
    with pytest.raises(InputError) as ei:
        render(topo, ClusterState(), job, mapping, None, tmp_path / "p.jpg", color_by="colour")
    got = {p.path: p.message for p in ei.value.problems}
    assert got["path"] == "unknown picture format '.jpg'; use .svg, .png, .pdf"
    assert got["color_by"].startswith("unknown value 'colour'")
    with pytest.raises(InputError, match="has 3 devices for 4 ranks"):
        render(topo, ClusterState(), job, mapping[:3], None, tmp_path / "p.svg")


def test_render_picture_helper(tmp_path: Path) -> None:
    from rich.console import Console

    topo = fat_tree(16, nodes_per_leaf=2, leaves_per_spine=1)
    job, mapping = placed(topo, ClusterState(), tp=2, pp=2, dp=2)
    con = Console(record=True, width=200)
    out = render_picture(topo, ClusterState(), job, mapping, None, tmp_path / "x" / "pic.svg", console=con)
    assert out.is_file() and len(rank_ids(out)) == 8
    assert f"wrote {out}" in con.export_text()
    with pytest.raises(InputError) as ei:
        render_picture(topo, ClusterState(), job, mapping, None, tmp_path / "pic.txt")
    assert ei.value.source == "--picture"
