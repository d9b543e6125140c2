"""placement.io.native job files: structured (parallel sizes, model, constraints) and explicit (groups and
edges), and their error messages verbatim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placement.errors import InputError
from placement.io.native import job_from_dict, load_job
from placement.model.job import CollectiveKind
from tests.support_native import error_of, write

MODEL = {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096}


# ---- jobs ---------------------------------------------------------------------------------------------------------


def test_structured_job_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "moe.yaml",
        """\
        name: moe
        device_kind: H100
        parallel: {tp: 2, ep: 4, dp: 2, pp: 2, order: tp-ep-dp-pp-cp}
        model: {parameters: 1.2e10, hidden: 2048, layers: 16, seq_len: 8192, micro_batches: 4,
                experts: 8, top_k: 2, expert_parameters: 8e9, grad_bytes_per_element: 4, kv_fraction: 0.125}
        exposure: {dp: 0.3}
        constraints:
          require: {tp: node}
          prefer: {ep: leaf}
          spread: [{kind: power, scope: dp, min_domains: 2}, {kind: leaf, max_ranks_per_domain: 16}]
          pins: {0: node01/gpu0}
          exclude: [node04, leaf:leaf02]
    """,
    )
    j = load_job(path)
    assert (j.name, j.ranks, j.device_kind, j.structured) == ("moe", 32, "H100", True)
    assert j.parallel is not None and j.model is not None
    assert (j.parallel.tp, j.parallel.ep, j.parallel.dp, j.parallel.pp, j.parallel.cp) == (2, 4, 2, 2, 1)
    assert j.parallel.order == "tp-ep-dp-pp-cp"
    assert (
        j.model.parameters == 1.2e10
        and j.model.expert_parameters == 8e9
        and j.model.grad_bytes_per_element == 4
    )
    assert (j.model.micro_batch, j.model.bytes_per_element, j.model.kv_fraction) == (1, 2, 0.125)
    assert j.exposure == {"dp": 0.3}
    c = j.constraints
    assert c.require == {"tp": "node"} and c.prefer == {"ep": "leaf"} and c.pins == {0: "node01/gpu0"}
    assert [(s.kind, s.scope, s.min_domains, s.max_ranks_per_domain) for s in c.spread] == [
        ("power", "dp", 2, None),
        ("leaf", "job", None, 16),
    ]
    assert c.exclude == ("node04", "leaf:leaf02")


def test_explicit_job_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "ex.json",
        json.dumps(
            {
                "ranks": 16,
                "groups": [
                    {"label": "tp", "kind": "all_reduce", "members": "0-3,8-11", "bytes": 1e8, "count": 4},
                    {"kind": "all_to_all", "members": [4, 5, 6, 7], "bytes": "2e6", "exposed": 0.5},
                ],
                "edges": [
                    {"src": 3, "dst": 12, "bytes": 5e5},
                    {"label": "kv", "src": 1, "dst": 2, "bytes": 1, "count": 8},
                ],
            }
        ),
    )
    j = load_job(path)
    assert (j.name, j.ranks, j.structured) == ("ex", 16, False)
    g0, g1 = j.groups
    assert (g0.label, g0.kind, g0.members, g0.bytes, g0.count, g0.exposed) == (
        "tp",
        CollectiveKind.ALL_REDUCE,
        (0, 1, 2, 3, 8, 9, 10, 11),
        1e8,
        4.0,
        1.0,
    )
    assert (g1.label, g1.kind, g1.members, g1.bytes, g1.count, g1.exposed) == (
        "all_to_all",
        CollectiveKind.ALL_TO_ALL,
        (4, 5, 6, 7),
        2e6,
        1.0,
        0.5,
    )
    assert [(e.label, e.src, e.dst, e.bytes, e.count) for e in j.edges] == [
        ("p2p", 3, 12, 5e5, 1.0),
        ("kv", 1, 2, 1.0, 8.0),
    ]


def test_error_rank_count_differs_from_the_parallel_sizes() -> None:
    doc = {"ranks": 16, "parallel": {"tp": 8, "dp": 4}, "model": MODEL}
    assert (
        error_of(job_from_dict, doc, "j.yaml")
        == "j.yaml: ranks: 16 does not equal tp*cp*ep*dp*pp = 8*1*1*4*1 = 32"
    )


def test_error_order_misses_a_dimension() -> None:
    doc = {"parallel": {"tp": 8, "dp": 4, "order": "tp-cp-dp-pp"}, "model": MODEL}
    assert error_of(job_from_dict, doc, "j.yaml") == (
        "j.yaml: parallel.order: 'tp-cp-dp-pp' misses ep; it must name each of tp, cp, ep, dp, pp once, e.g. 'tp-cp-ep-dp-pp'"
    )
    doc = {"parallel": {"tp": 2, "order": "tp-tp-cp-ep-dp-xp"}, "model": MODEL}
    assert error_of(job_from_dict, doc, "j.yaml") == (
        "j.yaml: parallel.order: 'tp-tp-cp-ep-dp-xp' misses pp and has unknown 'xp' and repeats tp; it must name each "
        "of tp, cp, ep, dp, pp once, e.g. 'tp-cp-ep-dp-pp'"
    )


def test_job_errors_are_reported_together() -> None:
    doc = {
        "parallel": {"tp": 0, "ep": 2, "pp": 3},
        "model": {"parameters": 1e9, "hidden": 1024, "layers": 32},
        "exposure": {"dp": 1.5},
        "constraints": {"pins": {"x": "node01/gpu0", "99": "node01/gpu1"}, "spread": [{"kind": "power"}]},
    }
    with pytest.raises(InputError) as info:
        job_from_dict(doc, "j.yaml")
    assert [str(p) for p in info.value.problems] == [
        "parallel.tp: must be >= 1, got 0",
        "model.seq_len: is required",
        "model.layers: 32 layers do not split evenly over pp=3 stages",
        "model.experts: ep=2 needs experts >= ep and top_k >= 1, got experts=0, top_k=0",
        "exposure.dp: an exposed fraction is in [0, 1], got 1.5",
        "constraints.spread[0]: give min_domains and/or max_ranks_per_domain",
        "constraints.pins.x: keys are rank numbers",
        "constraints.pins.99: rank 99 outside 0..5",
    ]


def test_explicit_job_errors() -> None:
    doc = {
        "ranks": 4,
        "groups": [{"kind": "broadcast", "members": [0, 4, 4], "bytes": 1}, {"members": "3-1", "bytes": 1}],
        "edges": [{"src": 2, "dst": 2, "bytes": 1}],
    }
    with pytest.raises(InputError) as info:
        job_from_dict(doc, "j.yaml")
    assert [str(p) for p in info.value.problems] == [
        "groups[0].kind: unknown collective 'broadcast'; known: ['all_gather', 'all_reduce', 'all_to_all', 'reduce_scatter']",
        "groups[0].members: rank(s) [4, 4] outside 0..3",
        "groups[0].members: lists a rank twice",
        "groups[1].members: bad rank range '3-1': 1 < 3",
        "groups[1].members: a group needs >= 2 members, got 0",
        "edges[0]: an edge joins two different ranks, got 2->2",
    ]


def test_exposed_fraction_of_explicit_groups_and_edges_is_bounded() -> None:
    doc = {
        "ranks": 2,
        "groups": [{"members": [0, 1], "bytes": 1, "exposed": 2}],
        "edges": [{"src": 0, "dst": 1, "bytes": 1, "exposed": 1.5}],
    }
    with pytest.raises(InputError) as info:
        job_from_dict(doc, "j.yaml")
    assert [str(p) for p in info.value.problems] == [
        "groups[0].exposed: an exposed fraction is in [0, 1], got 2",
        "edges[0].exposed: an exposed fraction is in [0, 1], got 1.5",
    ]
    ok = job_from_dict({"ranks": 2, "groups": [{"members": [0, 1], "bytes": 1, "exposed": 0}]})
    assert ok.groups[0].exposed == 0.0
