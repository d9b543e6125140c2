"""placement.model.traffic and placement.model.job: groups, sizes and counts from the formulas of the traffic docstring."""

from __future__ import annotations

from collections import Counter

import pytest

from placement.io.native import load_job
from placement.model.job import CollectiveKind, Edge, Group, Job, ParallelSpec
from placement.model.traffic import Traffic, dimension_groups, job_traffic, rank_components
from tests.conftest import EXAMPLES, model, spec

ALL2 = {"tp": 2, "cp": 2, "ep": 2, "dp": 2, "pp": 2}
# P=1e9 of which 4e8 in experts, h=1024, L=4, s=2048, b=1, m=2, B=2, G=4, top_k=2, kv_fraction=1/4
MOE = model(expert_parameters=4e8, experts=4, top_k=2, kv_fraction=0.25, grad_bytes_per_element=4)


def _job(order: str = "tp-cp-ep-dp-pp", **exposure: float) -> Job:
    par = spec(order=order, **ALL2)
    return Job("moe", par.world_size, parallel=par, model=MOE, exposure=exposure)


def _by_label(t: Traffic) -> dict[str, list[Group]]:
    out: dict[str, list[Group]] = {}
    for g in t.groups:
        out.setdefault(g.label, []).append(g)
    return out


def test_parallel_spec_coords_and_rank_of() -> None:
    par = spec(order="tp-cp-ep-dp-pp", **ALL2)
    assert par.world_size == 32 and par.dims == ("tp", "cp", "ep", "dp", "pp")
    assert par.coords(0b10110) == {"tp": 0, "cp": 1, "ep": 1, "dp": 0, "pp": 1}
    for r in range(32):
        assert par.rank_of(par.coords(r)) == r
    other = spec(order="tp-dp-pp-cp-ep", **ALL2)
    assert other.coords(0b10110) == {"tp": 0, "dp": 1, "pp": 1, "cp": 0, "ep": 1}
    assert ParallelSpec(tp=2, pp=2).coords(3) == {"tp": 1, "cp": 0, "ep": 0, "dp": 0, "pp": 1}


def test_dimension_groups() -> None:
    assert dimension_groups(ParallelSpec(tp=2, dp=2), ("tp",)) == [(0, 1), (2, 3)]
    assert dimension_groups(ParallelSpec(tp=2, dp=2), ("dp",)) == [(0, 2), (1, 3)]
    assert dimension_groups(ParallelSpec(tp=2, dp=3, pp=2), ("dp", "tp")) == [
        (0, 1, 2, 3, 4, 5),
        (6, 7, 8, 9, 10, 11),
    ]


def test_group_counts_and_sizes_for_all_dimensions_two() -> None:
    t = job_traffic(_job())
    by = _by_label(t)
    assert {k: Counter(len(g.members) for g in v) for k, v in by.items()} == {
        "tp": Counter({2: 16}),
        "cp": Counter({2: 16}),
        "ep": Counter({2: 16}),
        # dense gradients over cp*ep*dp = 8 ranks (4 groups) and expert gradients over cp*dp = 4 ranks (8 groups)
        "dp": Counter({8: 4, 4: 8}),
    }
    assert len(t.edges) == 16 and {e.label for e in t.edges} == {"pp"}
    assert t.labels == ("cp", "dp", "ep", "pp", "tp")
    # each dimension partitions the ranks
    for label in ("tp", "cp", "ep"):
        assert sorted(r for g in by[label] for r in g.members) == list(range(32))


def test_bytes_and_counts_by_hand() -> None:
    t = job_traffic(_job())
    by = _by_label(t)
    tokens = 1 * 2048 / 2  # b * s / cp
    tp = by["tp"][0]
    assert (tp.kind, tp.bytes, tp.count, tp.exposed) == (
        CollectiveKind.ALL_REDUCE,
        tokens * 1024 * 2,
        4 * (4 / 2) * 2,
        1.0,
    )
    assert tp.bytes == 2_097_152 and tp.count == 16
    cp = by["cp"][0]
    # cp * 2 * b * (s/cp) * (h/tp) * kv_fraction * B
    assert (cp.kind, cp.bytes, cp.count) == (CollectiveKind.ALL_GATHER, 2 * 2 * 1024 * 512 * 0.25 * 2, 12)
    assert cp.bytes == 1_048_576
    ep = by["ep"][0]
    assert (ep.kind, ep.bytes, ep.count) == (CollectiveKind.ALL_TO_ALL, 1024 * 2 * 1024 * 2, 16)
    pp = t.edges[0]
    assert (pp.bytes, pp.count) == (1024 * 1024 * 2 / 2, 4)  # b*(s/cp)*h*B/tp, 2*m
    dense = [g for g in by["dp"] if len(g.members) == 8]
    expert = [g for g in by["dp"] if len(g.members) == 4]
    assert {g.bytes for g in dense} == {(1e9 - 4e8) / (2 * 2) * 4} == {6e8}
    assert {g.bytes for g in expert} == {4e8 / (2 * 2 * 2) * 4} == {2e8}
    assert {g.count for g in by["dp"]} == {1.0}
    assert {g.kind for g in by["dp"]} == {CollectiveKind.ALL_REDUCE}


def test_order_string_changes_group_membership() -> None:
    megatron = _by_label(job_traffic(_job("tp-cp-ep-dp-pp")))
    other_traffic = job_traffic(_job("tp-dp-pp-cp-ep"))
    other = _by_label(other_traffic)

    def of_rank0(groups: list[Group]) -> tuple[int, ...]:
        return next(g.members for g in groups if 0 in g.members)

    # strides: tp 1, cp 2, ep 4, dp 8, pp 16  vs  tp 1, dp 2, pp 4, cp 8, ep 16
    assert of_rank0(megatron["tp"]) == of_rank0(other["tp"]) == (0, 1)
    assert of_rank0(megatron["cp"]) == (0, 2) and of_rank0(other["cp"]) == (0, 8)
    assert of_rank0(megatron["ep"]) == (0, 4) and of_rank0(other["ep"]) == (0, 16)
    dense0 = [g.members for g in megatron["dp"] if 0 in g.members and len(g.members) == 8]
    assert dense0 == [(0, 2, 4, 6, 8, 10, 12, 14)]
    dense0 = [g.members for g in other["dp"] if 0 in g.members and len(g.members) == 8]
    assert dense0 == [(0, 2, 8, 10, 16, 18, 24, 26)]
    assert [(e.src, e.dst) for e in job_traffic(_job()).edges if e.src == 0] == [(0, 16)]
    assert [(e.src, e.dst) for e in other_traffic.edges if e.src == 0] == [(0, 4)]


def test_pipeline_edges_follow_stages() -> None:
    par = spec(tp=2, pp=4)
    t = job_traffic(Job("pp", 8, parallel=par, model=model(layers=8)))
    assert [(e.src, e.dst) for e in t.edges] == [(0, 2), (2, 4), (4, 6), (1, 3), (3, 5), (5, 7)]
    assert [g.label for g in t.groups] == ["tp"] * 4  # dp = cp = ep = 1: no gradient all-reduce


def test_exposure_overrides_per_label() -> None:
    t = job_traffic(_job(dp=0.3, pp=0.5))
    assert {g.exposed for g in t.groups if g.label == "dp"} == {0.3}
    assert {g.exposed for g in t.groups if g.label == "tp"} == {1.0}
    assert {e.exposed for e in t.edges} == {0.5}


def test_no_traffic_for_sizes_of_one() -> None:
    t = job_traffic(Job("one", 1, parallel=ParallelSpec(), model=model()))
    assert t.groups == () and t.edges == ()


def test_explicit_job_passes_through_with_exposure() -> None:
    g = Group("ring", CollectiveKind.ALL_GATHER, (0, 1, 2), 1e6, 3.0, 0.5)
    e = Edge("kv", 0, 2, 2e6, 4.0)
    t = job_traffic(Job("x", 3, groups=(g,), edges=(e,), exposure={"kv": 0.25}))
    assert t.groups == (g,)
    assert t.edges == (Edge("kv", 0, 2, 2e6, 4.0, 0.25),)
    t2 = job_traffic(Job("x", 3, groups=(g,), exposure={"ring": 0.0}))
    assert t2.groups[0].exposed == 0.0


def test_tp8_dp4_example_by_hand() -> None:
    path = EXAMPLES / "tp8-dp4.yaml"
    if not path.is_file():
        pytest.skip(f"{path} is not in this checkout")
    t = job_traffic(load_job(path))
    tp = [g for g in t.groups if g.label == "tp"]
    dp = [g for g in t.groups if g.label == "dp"]
    # TP: S = b*s*h*B = 1*4096*4096*2; count = 4 * L/pp * m = 4*32*8
    assert [g.members for g in tp] == [tuple(range(8 * i, 8 * i + 8)) for i in range(4)]
    assert {(g.bytes, g.count) for g in tp} == {(33_554_432, 1024)}
    # DP: P/(tp*pp) * G = 7e9/8 * 2 bytes once per step, over ranks k, k+8, k+16, k+24
    assert [g.members for g in dp] == [(k, k + 8, k + 16, k + 24) for k in range(8)]
    assert {(g.bytes, g.count) for g in dp} == {(1.75e9, 1.0)}
    assert t.edges == ()


def test_recomputation_repeats_the_forward_traffic() -> None:
    base = job_traffic(_job())
    again = job_traffic(
        Job(
            "moe",
            32,
            parallel=spec(**ALL2),
            model=model(
                expert_parameters=4e8,
                experts=4,
                top_k=2,
                kv_fraction=0.25,
                grad_bytes_per_element=4,
                recompute=True,
            ),
        )
    )
    counts = {g.label: g.count for g in base.groups}
    counts_rc = {g.label: g.count for g in again.groups}
    # per layer and micro-batch: TP 4 -> 6 all-reduces, CP 3 -> 4 exchanges, EP 4 -> 6 all-to-alls; L/pp * m = 4
    assert (counts["tp"], counts["cp"], counts["ep"]) == (16, 12, 16)
    assert (counts_rc["tp"], counts_rc["cp"], counts_rc["ep"]) == (24, 16, 24)
    assert counts_rc["dp"] == counts["dp"] == 1.0 and again.edges == base.edges


def test_rank_components_join_the_sets_and_name_each_by_its_least_rank() -> None:
    # 0-1 and 1-4 chain into {0, 1, 4}; {2, 5} alone; 3 and 6 untouched; a one-rank set joins nothing
    comp = rank_components(7, [(4, 1), (1, 0), (5, 2), (6,)])
    assert comp == [0, 0, 2, 3, 0, 2, 6]
    assert rank_components(3, []) == [0, 1, 2]
