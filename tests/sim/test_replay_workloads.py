"""The multi-node LLM workload generator and the irregular real-tree example it is replayed on."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from placement.errors import InputError
from placement.io.native import load_cluster
from placement.sim.replay import read_trace
from placement.sim.replay.workloads import LlmWorkload, llm_workload, size_weights, write_trace
from tests.conftest import EXAMPLES, ROOT


def test_size_weights_hit_the_published_mean() -> None:
    sizes = [1 << k for k in range(11)]  # 1 .. 1024
    w = size_weights(sizes, 26.77, 0.5)
    assert math.isclose(sum(w), 1.0, rel_tol=1e-12)
    assert w[0] == pytest.approx(0.5)
    # the mean, computed here from the weights alone
    assert sum(wi * s for wi, s in zip(w, sizes, strict=True)) == pytest.approx(26.77, rel=1e-6)
    # geometric in the exponent: every ratio between neighbours beyond size 1 is the same
    ratios = [w[k + 1] / w[k] for k in range(1, len(w) - 1)]
    assert max(ratios) == pytest.approx(min(ratios), rel=1e-9)


def test_jobs_have_megatron_shapes_and_the_offered_load(tmp_path) -> None:
    spec = LlmWorkload(jobs=3000, load=1.1, seed=3)
    jobs = llm_workload(spec, 1432)
    assert jobs == llm_workload(spec, 1432)  # reproducible
    assert jobs != llm_workload(LlmWorkload(jobs=3000, load=1.1, seed=4), 1432)
    for j in jobs:
        assert j.tp * j.pp * j.dp == j.gpus
        assert j.tp == min(8, j.gpus)
        assert j.gpus <= 1024 and j.gpus & (j.gpus - 1) == 0
    assert {j.pp for j in jobs if j.gpus > 256} == {4}
    # offered load: GPU-seconds asked over the arrival span, per cluster GPU, near 1.1
    span = jobs[-1].submit - jobs[0].submit
    asked = sum(j.gpus * j.duration for j in jobs)
    assert asked / (span * 1432) == pytest.approx(1.1, rel=0.2)
    # log-normal run times: the sample median near the spec's
    durs = sorted(j.duration for j in jobs)
    assert durs[len(durs) // 2] / 3600 == pytest.approx(spec.median_hours, rel=0.15)
    # the CSV reads back as a plain trace with the same shapes and models
    trace = read_trace(write_trace(jobs, tmp_path / "llm.csv"), cluster_gpus=1432, strict=True)
    assert [(t.name, t.gpus, t.shape and t.shape.pp, t.model) for t in trace.jobs] == [
        (j.name, j.gpus, j.pp, j.model) for j in jobs
    ]


def test_bad_knobs_are_named() -> None:
    with pytest.raises(InputError) as e:
        llm_workload(LlmWorkload(jobs=0, max_gpus=100, median_hours=5, mean_hours=2, load=0), 64)
    text = str(e.value)
    for field in ("jobs", "max_gpus", "median_hours", "load"):
        assert field in text
    assert "power of two" in text and "100" in text


def test_real_tree_example_is_the_import_of_its_topology_conf(tmp_path) -> None:
    conf = EXAMPLES / "real-tree-179.conf"
    out = tmp_path / "tree.yaml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "placement.cli.app",
            "import",
            "slurm",
            str(conf),
            "--levels",
            "tor,agg,core",
            "--tier",
            "node=450:2",
            "--tier",
            "tor=50:5",
            "--tier",
            "agg=50:8:2",
            "--tier",
            "core=50:10:4",
            "--kind",
            "H100",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    shipped = [
        ln for ln in (EXAMPLES / "real-tree-179.yaml").read_text().splitlines() if not ln.startswith("#")
    ]
    assert out.read_text().splitlines() == shipped
    topo = load_cluster(EXAMPLES / "real-tree-179.yaml")[0]
    assert topo.num_devices == 1432
    tor = topo.level_index("tor")
    col = topo.domain_column(tor)
    hosts_per_tor: dict[int, int] = {}
    for d in range(0, topo.num_devices, 8):
        hosts_per_tor[col[d]] = hosts_per_tor.get(col[d], 0) + 1
    assert len(hosts_per_tor) == 29 and sum(hosts_per_tor.values()) == 179
    assert min(hosts_per_tor.values()) == 2 and max(hosts_per_tor.values()) == 8
