"""The serving job file (placement.io.native.serving): the example reads, both forms (kind: serving and a serving:
key) agree, every problem is reported at once with field, value and rule, and the job reader says what the file is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from placement.errors import InputError
from placement.io.native import job_from_dict
from placement.io.native.doc_kinds import document_kind
from placement.io.native.serving import load_serving_job, serving_job_from_dict
from placement.messages import domain
from placement.messages.serving import is_serving_message, serving_from_proto, serving_to_proto
from placement.v1 import placement_pb2 as pb
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "deepseek-v3-serving.yaml"

MINI: dict[str, Any] = {
    "kind": "serving",
    "name": "mini",
    "model": {"parameters": 8e9, "hidden": 4096, "layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128},
    "pools": [{"role": "aggregated", "tp": 4, "replicas": 2}],
    "load": {"batch": 32, "prompt_tokens": 1000, "output_tokens": 200},
}


def _problems(doc: Any) -> list[tuple[str, str]]:
    with pytest.raises(InputError) as info:
        serving_job_from_dict(doc, "s.yaml")
    return [(p.path, p.message) for p in info.value.problems]


def test_the_example_reads() -> None:
    job = load_serving_job(EXAMPLE)
    assert job.disaggregated
    assert [p.role for p in job.pools] == ["prefill", "decode"]
    assert job.ranks == 3 * 32 + 2 * 64
    assert job.model.moe and job.model.routed_layers == 58
    # 671B with 654B in routed experts: 8 of 256 active, plus the 17B every token reads
    assert job.model.active_parameters == pytest.approx(671e9 - 653.9e9 + 653.9e9 * 8 / 256)
    assert job.model.kv_bytes_per_token == 576 * 61 * 2


def test_a_serving_key_reads_the_same_job() -> None:
    inner = {k: v for k, v in MINI.items() if k != "kind"}
    assert serving_job_from_dict({"serving": inner}) == serving_job_from_dict(MINI)
    assert document_kind(MINI) == "serving"
    assert document_kind({"serving": inner}) == "serving"


def test_concurrency_splits_over_the_decode_replicas() -> None:
    doc = {**MINI, "load": {"concurrency": 64, "prompt_tokens": 10, "output_tokens": 10}}
    assert serving_job_from_dict(doc).load.batch == 32


def test_every_problem_at_once_with_field_value_and_rule() -> None:
    doc = {
        **MINI,
        "model": {**MINI["model"], "kv_heads": 5, "weight_dtype": "fp6"},
        "pools": [{"role": "decode", "tp": 2, "attention_dp": 3, "ep": 4}, {"role": "decode"}],
        "load": {"batch": 8, "concurrency": 8, "prompt_tokens": 0, "output_tokens": 1},
    }
    got = dict(_problems(doc))
    assert "fp6" in got["model.weight_dtype"] and "fp8" in got["model.weight_dtype"]
    assert got["model.kv_heads"] == "5 must divide heads 32 (grouped-query attention)"
    assert got["pools[0].ep"].startswith("4 must divide tp x attention_dp = 6")
    assert "one prefill and one decode pool" in got["pools"]
    assert got["load"].startswith("give batch (8, per decode replica) or concurrency (8, the deployment)")
    assert got["load.prompt_tokens"] == "must be >= 1, got 0"


def test_a_mistyped_key_gets_did_you_mean() -> None:
    doc = {**MINI, "pools": [{"role": "aggregated", "tp": 4, "replica": 2}]}
    assert _problems(doc) == [("pools[0].replica", "unknown field; did you mean replicas?")]
    top = {**{k: v for k, v in MINI.items() if k != "load"}, "laod": MINI["load"]}
    assert _problems(top) == [("laod", "unknown field; did you mean load?")]


def test_moe_fields_are_checked_together() -> None:
    doc = {**MINI, "model": {**MINI["model"], "experts": 8, "top_k": 9}}
    got = dict(_problems(doc))
    assert got["model.expert_parameters"].startswith("is required with experts 8")
    assert got["model.top_k"] == "must be in 1..experts (8) for a MoE model, got 9"


def test_the_job_reader_says_it_is_a_serving_job(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        job_from_dict(yaml.safe_load(EXAMPLE.read_text()), "s.yaml")
    assert next(p.message for p in info.value.problems).startswith("is a serving job file")


def test_the_wire_round_trips_the_example() -> None:
    job = load_serving_job(EXAMPLE)
    msg = serving_to_proto(job)
    assert is_serving_message(msg)
    back = serving_from_proto(pb.Job.FromString(msg.SerializeToString()))
    assert back == job


def test_the_wire_reports_problems_with_field_paths() -> None:
    msg = serving_to_proto(serving_job_from_dict(MINI))
    msg.serving.pools[0].ep = 3
    with pytest.raises(InputError) as info:
        serving_from_proto(msg)
    assert [p.path for p in info.value.problems] == ["serving.pools[0].ep"]  # msg.serving.pools[0].ep


def test_the_services_refuse_a_serving_job_by_its_field() -> None:
    req = pb.PlaceRequest(job=serving_to_proto(serving_job_from_dict(MINI)))
    req.cluster.CopyFrom(pb.Cluster(name="c"))
    with pytest.raises(InputError) as info:
        domain.place_inputs(req)
    assert "job.serving" in [p.path for p in info.value.problems]
