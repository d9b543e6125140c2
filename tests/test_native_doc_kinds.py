"""A wrong kind of file, or a mistyped key, gets one clear error from the native readers: "is a job file, expected a
cluster file" instead of one "unknown field" per key, "did you mean parallel?" for `paralel:`, and no follow-on
errors that the typo alone caused (`ranks: is required`, a world size of 1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from placement.errors import InputError
from placement.io.export import seats_from_document
from placement.io.native import (
    cluster_from_dict,
    job_from_dict,
    load_cluster,
    load_job,
    load_mapping,
    load_state,
    mapping_from_obj,
    state_from_dict,
)
from placement.io.native.doc_kinds import KIND_KEYS, document_kind
from placement.messages.files import read_request
from placement.v1 import placement_pb2 as pb
from tests.support_native import LEVELS2

ROOT = Path(__file__).resolve().parents[1]

CLUSTER: dict[str, Any] = {
    "name": "two-nodes",
    "levels": LEVELS2,
    "generate": {"nodes": 2, "devices": 4, "fanout": {"leaf": 2}},
}
STATE: dict[str, Any] = {
    "occupied": [{"job": "other", "devices": ["node01/gpu0"]}],
    "failed": ["node02/gpu3"],
}
JOB: dict[str, Any] = {
    "name": "tp2-dp2",
    "device_kind": "gpu",
    "parallel": {"tp": 2, "dp": 2},
    "model": {"parameters": 1e9, "hidden": 2048, "layers": 8, "seq_len": 2048},
}
EXPLICIT_JOB: dict[str, Any] = {"ranks": 2, "groups": [{"members": [0, 1], "bytes": 1e6}]}
RESULT: dict[str, Any] = {"result": {"job": "tp2-dp2", "mapping": [{"rank": 0, "device": "node01/gpu1"}]}}
REQUEST: dict[str, Any] = {"cluster": CLUSTER, "job": JOB, "options": {"time_limit_s": 1}}


def problems(fn: Any, *args: Any) -> list[tuple[str, str]]:
    with pytest.raises(InputError) as info:
        fn(*args)
    return [(p.path, p.message) for p in info.value.problems]


def test_the_documents_themselves_read() -> None:
    """The fixtures are valid: every error below comes from the change made to them, nothing else."""
    topo, _ = cluster_from_dict(CLUSTER, "c.yaml")
    state_from_dict(STATE, topo, "s.yaml")
    assert job_from_dict(JOB, "j.yaml").ranks == 4
    job_from_dict(EXPLICIT_JOB, "e.yaml")
    assert mapping_from_obj(RESULT, topo, "r.json") == [topo.device_index("node01/gpu1")]


@pytest.mark.parametrize(
    ("doc", "kind"),
    [
        (CLUSTER, "cluster"),
        (STATE, "state"),
        (JOB, "job"),
        (EXPLICIT_JOB, "job"),
        (RESULT, "result"),
        ({"job": "j", "cluster": "c", "mapping": ["node01/gpu0"]}, "result"),  # a result of earlier releases
        (["node01/gpu0", "node01/gpu1"], "result"),
        ({0: "node01/gpu0", 1: "node01/gpu1"}, "result"),
        (REQUEST, "request"),
        ({"cluster_file": "c.yaml", "job_file": "j.yaml"}, "request"),
        ({"name": "x", "description": "only shared keys"}, None),
        ({}, None),
    ],
)
def test_document_kind(doc: Any, kind: str | None) -> None:
    assert document_kind(doc) == kind


# The file handed to each reader, and the kind the error must name. The expected kind's reader.
SWAPS = [
    (JOB, "job", "cluster"),
    (STATE, "state", "cluster"),
    (REQUEST, "request", "cluster"),
    (CLUSTER, "cluster", "job"),
    (RESULT, "result or mapping", "job"),
    (JOB, "job", "state"),
    (CLUSTER, "cluster", "state"),
    (JOB, "job", "result or mapping"),
    (CLUSTER, "cluster", "result or mapping"),
]


def _read(tmp_path: Path, expected: str, path: Path) -> None:
    topo, _ = cluster_from_dict(CLUSTER, "c.yaml")
    if expected == "cluster":
        load_cluster(path)
    elif expected == "job":
        load_job(path)
    elif expected == "state":
        load_state(path, topo)
    else:
        load_mapping(path, topo)


@pytest.mark.parametrize(("doc", "is_", "expected"), SWAPS)
def test_a_file_of_another_kind_is_one_error_naming_both_kinds(
    tmp_path: Path, doc: Any, is_: str, expected: str
) -> None:
    path = tmp_path / "given.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError) as info:
        _read(tmp_path, expected, path)
    assert info.value.source == str(path)
    assert len(info.value.problems) == 1, info.value.render()
    message = info.value.problems[0].message
    assert message.startswith(f"is a {is_} file"), message
    assert message.endswith(f"expected a {expected} file"), message
    # it names the keys that told the kind: keys of the document that only that kind has
    if isinstance(doc, dict) and is_ != "request":
        own = KIND_KEYS["result" if is_.startswith("result") else is_]
        named = message.split("(it has ")[1].split(")")[0].split(", ")
        assert named and set(named) <= set(doc) & own


def test_export_of_a_job_file_says_it_is_a_job_file() -> None:
    with pytest.raises(InputError) as info:
        seats_from_document(JOB, "job.yaml")
    assert [(p.path, p.message.split(" (")[0]) for p in info.value.problems] == [("", "is a job file")]
    assert "rank numbers" not in info.value.render()


def test_a_cluster_file_with_one_stray_key_is_still_a_cluster_file() -> None:
    """One job key in a cluster file is an unknown field of the cluster, not a reason to call it a job file."""
    got = problems(cluster_from_dict, {**CLUSTER, "model": {"layers": 8}}, "c.yaml")
    assert [path for path, _ in got] == ["model"]
    assert got[0][1].startswith("unknown field")


def test_a_mistyped_top_level_key_gets_did_you_mean_and_no_follow_on_error() -> None:
    doc = dict(JOB)
    doc["paralel"] = doc.pop("parallel")
    # without `parallel` the job would be explicit, and `ranks` "is required": not reported
    assert problems(job_from_dict, doc, "j.yaml") == [("paralel", "unknown field; did you mean parallel?")]


@pytest.mark.parametrize("key", sorted(k for k in JOB["model"] if len(k) >= 5))
def test_a_mistyped_model_key_is_not_also_missing(key: str) -> None:
    """Drop one letter of each required model key: the error names the typo and the key, and nothing is "required"."""
    typo = key[:2] + key[3:]
    doc = {**JOB, "model": {**JOB["model"]}}
    doc["model"][typo] = doc["model"].pop(key)
    assert problems(job_from_dict, doc, "j.yaml") == [
        (f"model.{typo}", f"unknown field; did you mean {key}?")
    ]


def test_a_mistyped_parallel_size_is_not_also_a_wrong_world_size() -> None:
    doc = {**JOB, "ranks": 4, "parallel": {"tp": 2, "dpp": 2}}
    # with dp unset the world would be 2, not the 4 ranks given: that follows from the typo and is not reported.
    # dpp is as close to dp as to pp: both are named
    assert problems(job_from_dict, doc, "j.yaml") == [
        ("parallel.dpp", "unknown field; did you mean dp or pp?")
    ]
    doc = {**JOB, "ranks": 4, "parallel": {"tp": 2, "dp": 2, "ordr": "tp-cp-ep-dp-pp"}}
    assert problems(job_from_dict, doc, "j.yaml") == [("parallel.ordr", "unknown field; did you mean order?")]


def test_a_mistyped_group_key() -> None:
    doc = {"ranks": 2, "groups": [{"membres": [0, 1], "bytse": 1e6}]}
    assert problems(job_from_dict, doc, "j.yaml") == [
        ("groups[0].membres", "unknown field; did you mean members?"),
        ("groups[0].bytse", "unknown field; did you mean bytes?"),
    ]


def test_cluster_and_state_keys_get_did_you_mean() -> None:
    doc = {**CLUSTER, "level": CLUSTER["levels"]}
    del doc["levels"]
    assert problems(cluster_from_dict, doc, "c.yaml") == [("level", "unknown field; did you mean levels?")]
    topo, _ = cluster_from_dict(CLUSTER, "c.yaml")
    assert problems(state_from_dict, {"ocupied": STATE["occupied"]}, topo, "s.yaml") == [
        ("ocupied", "unknown field; did you mean occupied?")
    ]


def test_no_guess_when_nothing_is_close_or_the_key_is_there() -> None:
    """A key like no known one keeps the list of known keys; so does a typo of a key that is present too."""
    got = problems(job_from_dict, {**JOB, "colour": "red"}, "j.yaml")
    assert got == [
        ("colour", f"unknown field; expected one of {sorted(KIND_KEYS['job'] | {'name', 'description'})}")
    ]
    got = problems(job_from_dict, {**JOB, "paralel": {"tp": 2}}, "j.yaml")
    assert [p for p, _ in got] == ["paralel"] and "did you mean" not in got[0][1]


def test_other_errors_are_still_reported_together() -> None:
    """The did-you-mean changes nothing else: a typo in the model and an independent bad value, both reported."""
    doc = {**JOB, "model": {**JOB["model"], "layres": 8}, "parallel": {"tp": 0, "dp": 2}}
    del doc["model"]["layers"]
    assert problems(job_from_dict, doc, "j.yaml") == [
        ("parallel.tp", "must be >= 1, got 0"),
        ("model.layres", "unknown field; did you mean layers?"),
    ]


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "placement.cli.app", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "300"},
        check=False,
    )


def test_cli_place_with_swapped_files_and_export_of_a_job(tmp_path: Path) -> None:
    cluster, job = tmp_path / "cluster.yaml", tmp_path / "job.yaml"
    cluster.write_text(yaml.safe_dump(CLUSTER))
    job.write_text(yaml.safe_dump(JOB))
    done = _cli("place", job, cluster)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {job}: is a job file ("), done.stderr
    assert lines[0].endswith("expected a cluster file")
    done = _cli("export", job, "--format", "hostfile")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[0].endswith("expected a result or mapping file"), done.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump({("paralel" if k == "parallel" else k): v for k, v in JOB.items()}))
    done = _cli("place", cluster, typo)
    assert done.returncode == 2
    assert done.stderr == f"error: {typo}: paralel: unknown field; did you mean parallel?\n"


def test_a_request_file_suggests_the_closest_key_for_a_typo(tmp_path: Path) -> None:
    """Request files (protobuf JSON mapping) get the same did-you-mean as native files; a key close to none
    still lists what is allowed."""
    root = Path(__file__).resolve().parents[1] / "examples"
    base = {"cluster_file": str(root / "h100-256.yaml"), "job_file": str(root / "llama-13b-tp8-pp2-dp4.yaml")}
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump({**base, "options": {"time_limt_s": 5}}))
    with pytest.raises(InputError) as e:
        read_request(typo, pb.PlaceRequest)
    assert "options.time_limt_s: unknown field; did you mean time_limit_s?" in str(e.value)
    far = tmp_path / "far.yaml"
    far.write_text(yaml.safe_dump({**base, "options": {"zzzz": 5}}))
    with pytest.raises(InputError) as e:
        read_request(far, pb.PlaceRequest)
    assert "options.zzzz: unknown field; expected one of [" in str(e.value)
