"""Serving sweeps (`placement whatif` with a serving job): decode TP x EP x replicas, each point's job shaped as
written by hand and placed as `place_serving` places it, shapes the rules refuse kept with their reason, axis
problems named, and the CLI's ranked table."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any

import pytest

from placement.errors import InputError
from placement.io.native import cluster_from_dict
from placement.io.native.serving import serving_job_from_dict
from placement.model.state import ClusterState
from placement.sim.whatif.run import run_serving_sweep
from placement.sim.whatif.spec import is_serving_sweep, serving_sweep_from_dict
from placement.solve.serving import place_serving
from placement.solve.types import SolveOptions
from tests.support_cli import run, write
from tests.support_serving import serving_cluster_doc, serving_job_doc

CLUSTER: dict[str, Any] = serving_cluster_doc()

JOB: dict[str, Any] = serving_job_doc()


def _sweep(**axes: Any) -> dict[str, Any]:
    return {
        "name": "moe-sweep",
        "cluster": CLUSTER,
        "job": JOB,
        "solver": {"workers": 1, "deterministic": True, "time_limit_s": 2},
        "batch_per_decode_gpu": 16,
        "axes": axes,
    }


def _by_hand(tp: int, ep: int, replicas: int) -> dict[str, Any]:
    """The job of one point written out: the decode pool's tp, ep and replicas, attention-DP ep / tp (EP spans a
    stage), the batch 16 per decode GPU."""
    doc = copy.deepcopy(JOB)
    adp = ep // tp if ep >= tp else 1
    doc["pools"][1] = {"role": "decode", "tp": tp, "ep": ep, "attention_dp": adp, "replicas": replicas}
    doc["load"]["batch"] = 16 * tp * adp
    return doc


def test_each_point_is_the_job_written_by_hand_placed_as_place_serving_places_it(tmp_path: Path) -> None:
    sweep = serving_sweep_from_dict(_sweep(decode_tp=[1, 2], decode_ep=[4, 8], decode_replicas=[1]))
    assert is_serving_sweep(_sweep())
    res = run_serving_sweep(sweep, tmp_path, workers=0)
    assert [(r["decode_tp"], r["decode_ep"]) for r in res.rows] == [
        ("1", "4"),
        ("1", "8"),
        ("2", "4"),
        ("2", "8"),
    ]
    topo, _ = cluster_from_dict(CLUSTER)
    opts = SolveOptions(time_limit_s=2, workers=1, deterministic=True)
    for row in res.rows:
        tp, ep = int(row["decode_tp"]), int(row["decode_ep"])
        job = serving_job_from_dict(_by_hand(tp, ep, 1))
        assert int(row["ranks"]) == 4 + max(tp, ep) == job.ranks
        assert row["status"] in ("OPTIMAL", "FEASIBLE"), row
        want = place_serving(topo, ClusterState(), job, opts)
        assert float(row["tpot_ms"]) == pytest.approx(want.report.tpot_seconds * 1e3, rel=1e-6)
        assert float(row["ttft_ms"]) == pytest.approx(want.report.ttft_seconds * 1e3, rel=1e-6)
        assert float(row["tokens_per_s_per_gpu"]) == pytest.approx(want.report.tokens_per_s_per_gpu, rel=1e-6)
        assert row["chosen"] == want.chosen
        assert set(row["baselines_breaking"].split()) == set(want.broken) - {"solver", "serving-packed"}
        # the decode ranks' hosts, counted on the answer's mapping
        first = job.pool_offset("decode")
        hosts = {topo.devices[d].host for d in want.mapping[first:]}
        assert int(row["decode_nodes"]) == len(hosts)
    assert (tmp_path / "results.csv").read_text().count("\n") == 1 + len(res.rows)


def test_a_shape_the_rules_refuse_is_kept_with_its_reason(tmp_path: Path) -> None:
    sweep = serving_sweep_from_dict(_sweep(decode_tp=[3], decode_ep=[4, 6]))
    res = run_serving_sweep(sweep, tmp_path, workers=0)
    # 3 and 4: neither divides the other; 3 and 6: a stage of 3 x 2 ranks, EP 6 over it, runs
    assert res.rows[0]["status"] == "INVALID"
    assert "one must divide the other" in res.rows[0]["error"]
    assert res.rows[1]["decode_attention_dp"] == "2" and res.rows[1]["ranks"] == str(4 + 6)
    assert res.rows[1]["status"] in ("OPTIMAL", "FEASIBLE")


def test_too_many_ranks_for_the_cluster_is_infeasible_not_an_error(tmp_path: Path) -> None:
    # 4 prefill + 2 x 8 decode ranks on 16 devices
    res = run_serving_sweep(serving_sweep_from_dict(_sweep(decode_replicas=[2])), tmp_path, workers=0)
    assert res.rows[0]["status"] == "INFEASIBLE" and res.rows[0]["ranks"] == "20"


def test_axis_problems_are_named() -> None:
    with pytest.raises(InputError) as info:
        serving_sweep_from_dict(_sweep(decode_tp=[0], decode_pp=[2]))
    paths = {p.path for p in info.value.problems}
    assert {"axes.decode_tp[0]", "axes.decode_pp"} <= paths


def test_cli_whatif_ranks_a_serving_sweep_by_tokens_per_gpu(tmp_path: Path) -> None:
    sweep = write(tmp_path, "sweep.json", json.dumps(_sweep(decode_ep=[4, 8])))
    out = tmp_path / "out"
    res = run("whatif", sweep, "--workers", "1", "--out", out, "--wide")
    assert res.exit_code == 0, res.output
    with (out / "results.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    # each point's tokens/s per GPU is printed, the higher one first
    shown = [f"{float(r['tokens_per_s_per_gpu']):.1f}" for r in rows]
    at = [res.output.index(v) for v in shown]
    best = max(range(2), key=lambda k: float(rows[k]["tokens_per_s_per_gpu"]))
    assert at[best] == min(at)
