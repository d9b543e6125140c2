"""A level's stated oversubscription: a flow alone crosses at the tier's rate, and flows that cross one uplink at
the same time share what it carries (max-min), with the numbers worked out by hand; the importers' `--tier
LEVEL=GBPS:US:OVERSUBSCRIPTION` writes it on the level below."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from placement.cost.collectives import fabric_for, max_min_phase_seconds
from placement.io.native.cluster import cluster_from_dict
from placement.model.state import ClusterState

ROOT = Path(__file__).resolve().parents[2]
S = 1e9  # bytes of each transfer


def _cluster(spine_gbps: float, leaf_oversubscription: float) -> dict:
    # 2 leaves of 2 one-GPU hosts: host h holds device h; hosts 0-1 under leaf0, 2-3 under leaf1
    return {
        "name": "two-leaves",
        "levels": [
            {"name": "node", "bandwidth_gbps": 450, "latency_us": 0},
            {
                "name": "leaf",
                "bandwidth_gbps": 50,
                "latency_us": 0,
                "oversubscription": leaf_oversubscription,
            },
            {"name": "spine", "bandwidth_gbps": spine_gbps, "latency_us": 0},
        ],
        "node_types": [{"name": "one", "devices": 1}],
        "generate": [{"nodes": 4, "node_type": "one", "fanout": {"leaf": 2}}],
    }


def _seconds(doc: dict, pairs: list[tuple[int, int]]) -> list[float]:
    topo, _ = cluster_from_dict(doc, "test")
    fabric = fabric_for(topo, ClusterState())
    plans = [fabric.plan_edge(a, b, S) for a, b in pairs]
    return [t - p.latency for (t, _tier), p in zip(max_min_phase_seconds(fabric, plans), plans, strict=True)]


def test_a_flow_alone_crosses_at_the_tier_rate_two_share_the_uplink() -> None:
    physical = _cluster(
        spine_gbps=50, leaf_oversubscription=2
    )  # each leaf's uplink: 2 GPUs x 50 / 2 = 50 GB/s
    (alone,) = _seconds(physical, [(0, 2)])
    assert alone == pytest.approx(S / 50e9)  # the uplink has room: the NIC's 50 GB/s
    both = _seconds(physical, [(0, 2), (1, 3)])
    assert both == pytest.approx([S / 25e9, S / 25e9])  # 50 GB/s of uplink shared by two flows
    # the same fabric stated as a per-GPU share (25 GB/s at the spine, no oversubscription) charges a lone flow the
    # share it gets only when every GPU of the leaf sends
    static = _cluster(spine_gbps=25, leaf_oversubscription=1)
    assert _seconds(static, [(0, 2)]) == pytest.approx([S / 25e9])
    assert _seconds(static, [(0, 2), (1, 3)]) == pytest.approx([S / 25e9, S / 25e9])


def _import(tmp_path: Path, *tiers: str) -> subprocess.CompletedProcess[str]:
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=l0 Nodes=n[1-2]\nSwitchName=l1 Nodes=n[3-4]\nSwitchName=s0 Switches=l[0-1]\n")
    args = [sys.executable, "-m", "placement.cli.app", "import", "slurm", str(conf), "--levels", "leaf,spine"]
    for t in tiers:
        args += ["--tier", t]
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT)


def test_import_writes_the_oversubscription_on_the_level_below(tmp_path: Path) -> None:
    res = _import(tmp_path, "leaf=50:5", "spine=50:7:2")
    assert res.returncode == 0, res.stderr
    levels = {lv["name"]: lv for lv in yaml.safe_load(res.stdout)["levels"]}
    assert levels["leaf"]["oversubscription"] == 2.0
    assert levels["spine"]["bandwidth_gbps"] == 50.0 and "oversubscription" not in levels["spine"]


@pytest.mark.parametrize(
    ("spec", "rule"),
    [
        ("node=450:2:2", "the lowest level 'node' has no links into it to oversubscribe"),
        ("spine=50:7:0", "oversubscription 0 must be > 0 and <= 1,000"),
        ("spine=-5:7", "bandwidth -5 must be > 0 and latency 7 must be >= 0"),
        ("spine=50:7:x", "write LEVEL=BANDWIDTH_GBPS:LATENCY_US[:OVERSUBSCRIPTION]"),
    ],
)
def test_a_bad_oversubscription_is_named(tmp_path: Path, spec: str, rule: str) -> None:
    res = _import(tmp_path, spec)
    assert res.returncode != 0
    assert f"--tier {spec!r}" in res.stderr and rule in " ".join(res.stderr.split())
