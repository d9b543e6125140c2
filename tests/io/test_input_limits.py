"""Input limits of the readers: bounded work per input (ranks, hosts, devices, matrices checked before anything is
built), linear checks that stop at the checkpoint of an ended call, decode, depth and alias limits, error texts
that never expand a document, and value ranges. The CLI's side: tests/cli/test_cli_limits.py; the server's:
tests/server/test_resource_limits.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from placement.errors import InputError, Problem, Problems
from placement.io.native import cluster_from_dict, job_from_dict, mapping_from_obj, state_from_dict
from placement.io.native.document import load_document, parse_document, read_text
from placement.limits import (
    Call,
    Interrupted,
    LimitError,
    Limits,
    checkpoint,
    current_limits,
    parse_limit_overrides,
    use_call,
    use_limits,
)
from tests.support_native import job_doc, yaml_bomb


def cluster(nodes: int = 4, gpus: int = 8) -> dict[str, Any]:
    return {
        "name": "c",
        "levels": [
            {"name": "node", "bandwidth_gbps": 450},
            {"name": "leaf", "bandwidth_gbps": 50},
            {"name": "spine", "bandwidth_gbps": 25},
        ],
        "generate": [{"nodes": nodes, "devices": gpus, "kind": "H100", "fanout": {"leaf": 4}}],
    }


def problems_of(fn: Any, *args: Any) -> dict[str, str]:
    with pytest.raises(InputError) as ei:
        fn(*args)
    out: dict[str, str] = {}
    for p in ei.value.problems:
        out[p.path] = f"{out[p.path]} | {p.message}" if p.path in out else p.message
    return out


# ---- a tiny input cannot make the reader allocate without bound ------------------------------------------


def test_a_huge_rank_in_a_mapping_is_refused_without_allocating() -> None:
    topo, _ = cluster_from_dict(cluster(), "c")
    got = problems_of(mapping_from_obj, [{"rank": 30_000_000, "device": "node01/gpu0"}], topo, "m")
    assert "max_index" in got["[0].rank"]
    got = problems_of(mapping_from_obj, {str(2**31 - 1): "node01/gpu0"}, topo, "m")
    assert "max_index" in next(iter(got.values()))
    # a gap below the largest rank is named without a rank-sized list
    got = problems_of(mapping_from_obj, {"0": "node01/gpu0", "999999": "node01/gpu1"}, topo, "m")
    assert "ranks [1, 2, 3, 4, 5, 6, 7, 8] have no device" in got[""]


def test_rank_ranges_and_parallel_sizes_are_bounded_before_expansion() -> None:
    doc = {"name": "j", "ranks": 4, "groups": [{"members": "0-100000000000", "bytes": 1}]}
    assert "max_index" in problems_of(job_from_dict, doc, "j")["groups[0].members"]
    with pytest.raises(LimitError, match="max_ranks"):
        job_from_dict(job_doc(parallel={"tp": 8, "dp": 32_768}), "j")
    assert "<=" in problems_of(job_from_dict, job_doc(parallel={"tp": 1e9}), "j")["parallel.tp"]
    with pytest.raises(LimitError, match="max_group_members"), use_limits(Limits(max_group_members=100)):
        job_from_dict({"name": "j", "ranks": 1000, "groups": [{"members": "0-999", "bytes": 1}]}, "j")


def test_hosts_and_devices_are_bounded_before_hosts_are_built() -> None:
    with pytest.raises(LimitError, match="max_hosts"):
        cluster_from_dict(cluster(nodes=1_000_000_000), "c")
    with pytest.raises(LimitError, match="max_devices"):
        cluster_from_dict(cluster(nodes=40_000, gpus=8), "c")
    doc = cluster()
    doc["hosts"] = [{"name": "x", "devices": 10**20, "domains": {"leaf": "leaf01"}}]
    with pytest.raises(LimitError, match="max_devices"):
        cluster_from_dict(doc, "c")


def test_ranks_1e29_is_a_clear_error_not_an_overflow() -> None:
    with pytest.raises(LimitError, match=r"ranks: 1e\+29 is above the limit max_ranks=32768"):
        job_from_dict({"name": "j", "ranks": 1e29, "groups": [{"members": [0, 1], "bytes": 1}]}, "j")
    msgs = problems_of(
        job_from_dict, job_doc(model={"parameters": 1, "hidden": 1e29, "layers": 1, "seq_len": 1}), "j"
    )
    assert "must be <=" in msgs["model.hidden"]


def test_limits_are_configurable_and_named() -> None:
    lim = parse_limit_overrides("ranks=65536, max_devices=400000")
    assert (lim.max_ranks, lim.max_devices) == (65536, 400000)
    for bad in ("nope=3", "max_ranks=0", "max_ranks=x", "max_ranks"):
        with pytest.raises(ValueError):
            parse_limit_overrides(bad)
    with use_limits(Limits(max_hosts=3)):
        assert current_limits().max_hosts == 3
        with pytest.raises(LimitError) as ei:
            cluster_from_dict(cluster(nodes=4), "c")
        assert ei.value.field == "generate[0].nodes" and ei.value.limit == 3
    assert current_limits().max_hosts == Limits().max_hosts


# ---- conversion is linear and checks the deadline --------------------------------------------------------


def test_duplicate_pins_are_found_among_16384_pins() -> None:
    pins = {str(r): f"node{r // 8 + 1:04d}/gpu{r % 8}" for r in range(16_384)}
    pins["16383"] = pins["0"]
    doc = job_doc(parallel={"tp": 8, "dp": 2048}, constraints={"pins": pins})
    got = problems_of(job_from_dict, doc, "j")
    assert "node0001/gpu0" in got["constraints.pins"] and "more than one rank" in got["constraints.pins"]


def test_overlapping_fault_domains_are_found_among_12000() -> None:
    topo, _ = cluster_from_dict(cluster(nodes=1500), "c")
    fds = [{"kind": "power", "name": f"p{i}", "members": [topo.devices[i].id]} for i in range(12_000)]
    fds.append({"kind": "power", "name": "dup", "members": [topo.devices[5].id]})
    got = problems_of(state_from_dict, {"fault_domains": fds}, topo, "s")
    assert "'p5' and 'dup' share 1 device(s)" in got["fault_domains[12000].members"]


def test_readers_stop_at_the_checkpoint_of_an_ended_call() -> None:
    pins = {str(r): f"node{r // 8 + 1:04d}/gpu{r % 8}" for r in range(16_384)}
    doc = job_doc(parallel={"tp": 8, "dp": 2048}, constraints={"pins": pins})
    ended = Call(deadline=time.monotonic() - 1)
    with use_call(ended), pytest.raises(Interrupted) as ei:
        job_from_dict(doc, "j")
    assert ei.value.reason == "deadline"
    cancelled = Call()
    cancelled.cancel()
    with use_call(cancelled), pytest.raises(Interrupted) as ei:
        cluster_from_dict(cluster(nodes=2000), "c")
    assert ei.value.reason == "cancelled"
    checkpoint()  # no call: a no-op (the CLI)


def test_a_big_matrix_is_bounded() -> None:
    row = " ".join(["NV4"] * 2000)
    doc = cluster(nodes=1)
    doc["node_types"] = [{"name": "big", "matrix": [row] * 2000}]
    doc["generate"] = [{"nodes": 1, "node_type": "big"}]
    with pytest.raises(LimitError, match="max_matrix_side"):
        cluster_from_dict(doc, "c")


# ---- documents: decoding, depth, aliases, error texts --------------------------------------------------


def test_a_latin1_file_names_the_byte_offset(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_bytes("name: c\n# 5 µs latency\n".encode("latin-1"))
    with pytest.raises(InputError) as ei:
        load_document(p)
    (prob,) = ei.value.problems
    assert (
        prob.path == "byte 12 (line 2, column 5)" and "0xb5" in prob.message and str(p) in ei.value.render()
    )
    p.write_bytes(b"\x00\x01binary")
    with pytest.raises(InputError, match="NUL byte"):
        read_text(p)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_deep_documents_are_refused(tmp_path: Path, suffix: str) -> None:
    p = tmp_path / f"deep{suffix}"
    p.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(InputError, match="nested deeper than 64"):
        load_document(p)


def test_yaml_bombs_are_refused_before_expansion() -> None:
    with pytest.raises(InputError, match="expands to"):
        parse_document(yaml_bomb(), "bomb.yaml")
    with pytest.raises(InputError, match="more than 3 YAML aliases"), use_limits(Limits(max_aliases=3)):
        parse_document("a: &x 1\nb: [*x, *x, *x, *x]\n", "x.yaml")
    assert parse_document("a: &x {b: 1}\nc: *x\n", "ok.yaml") == {"a": {"b": 1}, "c": {"b": 1}}


def test_error_texts_never_expand_a_document() -> None:
    with use_limits(Limits(max_nodes=10**9)):
        doc = parse_document(yaml_bomb(6), "b.yaml")  # 9**7 values expanded; a repr would be ~40 MB
    doc = {"name": "c", "levels": doc["g"]}
    with pytest.raises(InputError) as ei:
        cluster_from_dict(doc, "c")
    assert len(ei.value.render()) < 20_000
    with pytest.raises(InputError) as ei:
        job_from_dict(
            {"name": doc["levels"], "ranks": 2, "groups": [{"members": doc["levels"], "bytes": 1}]}, "j"
        )
    assert len(ei.value.render()) < 20_000


def test_input_error_prints_20_problems_then_a_count() -> None:
    ps = Problems("x")
    for i in range(1500):
        ps.add(f"f[{i}]", "bad")
    with pytest.raises(InputError) as ei:
        ps.raise_if_any()
    e = ei.value
    assert e.total == 1500 and len(e.problems) == 1000 and e.omitted == 500
    text = e.render()
    assert (
        text.count("\n  - ") == 20
        and text.endswith("... and 1480 more")
        and text.startswith("x: 1500 error(s)")
    )
    assert InputError("y", [Problem("a", "b")]).render() == "y: a: b"


# ---- value ranges -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("parameters", 1e308),
        ("parameters", 2e15),
        ("kv_fraction", 1e308),
        ("kv_fraction", 1.5),
        ("expert_parameters", 1e300),
    ],
)
def test_model_values_have_ranges(field: str, value: float) -> None:
    doc = job_doc()
    doc["model"][field] = value
    got = problems_of(job_from_dict, doc, "j")
    assert f"model.{field}" in got and "<=" in got[f"model.{field}"]


def test_slowdowns_and_factors_have_ranges() -> None:
    topo, _ = cluster_from_dict(cluster(), "c")
    got = problems_of(
        state_from_dict,
        {
            "degraded": [{"device": "node01/gpu0", "slowdown": 1e308}],
            "links": [{"uplink": "node01", "slowdown": 2e6}],
        },
        topo,
        "s",
    )
    assert "<= 1e+06" in got["degraded[0].slowdown"] and "<= 1e+06" in got["links[0].slowdown"]
    doc = cluster()
    doc["rail_policy"] = {"bandwidth_factor": 1e-300}
    assert "rail_policy.bandwidth_factor" in problems_of(cluster_from_dict, doc, "c")
    doc["rail_policy"] = {"bandwidth_factor": 2.0}
    assert "<= 1" in problems_of(cluster_from_dict, doc, "c")["rail_policy.bandwidth_factor"]
