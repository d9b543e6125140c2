"""placement.sim.whatif sweep files: parsing and defaults, cluster variants, the grid and its stable keys, and every
problem reported at once with its field path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from placement.errors import InputError
from placement.sim.whatif import Shape, factorizations, known_strategies, load_sweep, sweep_from_dict
from tests.conftest import EXAMPLES
from tests.support_whatif import CLUSTER, GREEDY, JOB, problems, sweep_doc


def test_parse_grid_and_defaults() -> None:
    sw = sweep_from_dict(sweep_doc(), "sweep.yaml")
    # 2 shapes x 2 occupancy x (first-fit + topology-greedy + cpsat at one time limit)
    assert len(sw.points) == 12 and len(sw.keys) == 12
    assert GREEDY == "kueue-tas" and {p.strategy for p in sw.points} == {"first-fit", GREEDY, "cpsat"}
    assert {p.time_limit_s for p in sw.points if p.strategy != "cpsat"} == {None}
    assert {p.shape for p in sw.points} == {Shape(tp=4, dp=2), Shape(tp=2, pp=2, dp=2)}
    # no shapes axis: the base job's own shape; default strategies are every one the solver knows
    doc = sweep_doc()
    del doc["axes"]["shapes"], doc["axes"]["strategies"]
    sw = sweep_from_dict(doc, "sweep.yaml")
    assert {p.shape for p in sw.points} == {Shape(tp=4, dp=2)}
    assert {p.strategy for p in sw.points} == set(known_strategies()) >= {"first-fit", GREEDY, "cpsat"}
    assert sw.baselines == tuple(s for s in known_strategies() if s != "cpsat")
    # an alias and its name are one strategy
    assert "axes.strategies" in problems(sweep_doc(strategies=["topology-greedy", GREEDY]))


def test_parse_generated_shapes_depend_on_the_variant() -> None:
    doc = sweep_doc(
        shapes={"cp": [1], "ep": [1]}, gpus_per_node=[2, 4], occupancy=[0], strategies=["first-fit"]
    )
    sw = sweep_from_dict(doc, "sweep.yaml")
    per_variant = {
        sw.variants[i].gpus_per_node: {p.shape.tp for p in sw.points if p.variant == i and p.shape}
        for i in range(len(sw.variants))
    }
    assert per_variant == {2: {1, 2}, 4: {1, 2, 4}}  # tp stays inside a node of each variant
    assert [info["gpus_per_node"] for info in sw.variant_info] == ["2", "4"]


def test_cluster_variants_apply_overrides() -> None:
    doc = sweep_doc(
        nodes=[4, 8],
        nodes_per_leaf=[2, 4],
        tiers={"leaf": [{"bandwidth_gbps": 40}, {"bandwidth_gbps": 80, "latency_us": 2}]},
        occupancy=[0],
        strategies=["first-fit"],
        shapes=[{"tp": 4, "dp": 2}],
    )
    sw = sweep_from_dict(doc, "sweep.yaml")
    assert len(sw.variants) == 8
    infos = {
        (i["nodes"], i["nodes_per_leaf"], i["leaf_bandwidth_gbps"], i["leaf_latency_us"])
        for i in sw.variant_info
    }
    assert ("8", "4", "80", "2") in infos and ("4", "2", "40", "4") in infos
    assert len({p.key for p in sw.points}) == 8  # every variant is a different input


def test_keys_are_stable_and_follow_the_inputs() -> None:
    a = sweep_from_dict(sweep_doc(), "sweep.yaml")
    b = sweep_from_dict(sweep_doc(), "other-name.yaml")
    assert a.keys == b.keys
    doc = sweep_doc()
    doc["cluster"]["levels"][1]["bandwidth_gbps"] = 41
    assert not set(a.keys) & set(sweep_from_dict(doc, "sweep.yaml").keys)
    # the seed and mode of an empty, healthy cluster cannot matter: those points share a key (and run once)
    sw = sweep_from_dict(
        sweep_doc(seeds=[0, 1], modes=["whole", "partial"], strategies=["first-fit"]), "sweep.yaml"
    )
    empty = {p.key for p in sw.points if p.occupancy == 0}
    busy = {p.key for p in sw.points if p.occupancy > 0}
    assert len(empty) == 2 and len(busy) == 2 * 2 * 2


def test_error_unknown_axis() -> None:
    got = problems(sweep_doc(colours=["red"]))
    assert "axes.colours" in got and "unknown axis" in got["axes.colours"]


def test_error_empty_grid() -> None:
    got = problems(sweep_doc(occupancy=[]))
    assert got == {
        "axes.occupancy": "is empty: the grid would have no points; give at least one value or drop the axis"
    }
    assert "axes.shapes" in problems(sweep_doc(shapes=[]))
    # filters that leave no shape
    got = problems(sweep_doc(shapes={"tp": [8], "cp": [1], "ep": [1]}))
    assert got["axes.shapes"].startswith(
        "no factorization of 8 GPUs passes the filters: tp <= 4 GPUs per node"
    )


def test_error_shapes_that_do_not_multiply_to_the_gpu_count() -> None:
    got = problems(sweep_doc(shapes=[{"tp": 4, "dp": 4}, {"tp": 3}, {"tp": 2, "pp": 3, "dp": 1}]))
    assert got["axes.shapes[0]"] == "tp*cp*ep*dp*pp = 4*1*1*4*1 = 16, not the sweep's 8 GPUs"
    assert got["axes.shapes[1]"] == "tp*cp*ep*pp = 3 does not divide the sweep's 8 GPUs, so no dp fits"
    assert got["axes.shapes[2]"] == "tp*cp*ep*dp*pp = 2*1*1*1*3 = 6, not the sweep's 8 GPUs"


def test_error_shape_breaking_the_model_names_the_field() -> None:
    got = problems(sweep_doc(shapes=[{"tp": 1, "pp": 8}]))  # 4 layers over 8 stages
    assert got == {"axes.shapes[0] (model.layers)": "4 layers do not split evenly over pp=8 stages"}


def test_errors_are_all_reported_at_once() -> None:
    doc = sweep_doc(
        strategies=["cpsat", "greedy"],
        occupancy=[0, 1.5],
        modes=["scattered"],
        time_limits=[0],
        tiers={"rack": [{"bandwidth_gbps": 10}]},
    )
    doc["colour"] = "red"
    got = problems(doc)
    assert got["axes.strategies[1]"] == f"unknown strategy 'greedy'; known: {', '.join(known_strategies())}"
    assert got["axes.occupancy[1]"] == "must be a fraction in [0, 1), got 1.5"
    assert got["axes.modes[0]"].startswith("unknown mode 'scattered'")
    assert got["axes.time_limits[0]"] == "must be a number of seconds > 0, got 0"
    assert got["axes.tiers.rack"] == "unknown level; the cluster's levels are ['node', 'leaf', 'spine']"
    assert got["colour"].startswith("unknown field")


def test_error_in_the_base_documents_has_field_paths(tmp_path: Path) -> None:
    doc = sweep_doc()
    doc["cluster"]["levels"][1]["bandwidth_gbps"] = -1
    doc["job"]["model"]["layers"] = 0
    got = problems(doc)
    assert got["cluster.levels[1].bandwidth_gbps"] == "must be > 0, got -1"
    assert "job.model.layers" in got
    # files relative to the sweep file; their problems name the file
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(CLUSTER))
    (tmp_path / "j.yaml").write_text(yaml.safe_dump({**JOB, "parallel": {"tp": 4, "dp": 2, "xp": 2}}))
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"cluster": "c.yaml", "job": "j.yaml", "axes": {"occupancy": [0]}}))
    with pytest.raises(InputError) as ei:
        load_sweep(sweep)
    assert [(p.path, p.message) for p in ei.value.problems] == [
        ("job (j.yaml) parallel.xp", "unknown field; expected one of ['cp', 'dp', 'ep', 'order', 'pp', 'tp']")
    ]


def test_variant_axes_need_a_generated_cluster() -> None:
    doc = sweep_doc(nodes=[2])
    doc["cluster"] = {
        "levels": CLUSTER["levels"][:2],
        "hosts": [
            {"name": "a", "devices": 4, "domains": {"leaf": "l"}},
            {"name": "b", "devices": 4, "domains": {"leaf": "l"}},
        ],
    }
    got = problems(doc)
    assert got == {
        "axes.nodes": "needs a cluster made by exactly one `generate` entry (hosts listed one by one are not resized)"
    }


def test_example_sweep_parses() -> None:
    sw = load_sweep(EXAMPLES / "sweep-70b.yaml")
    filters = yaml.safe_load((EXAMPLES / "sweep-70b.yaml").read_text())["axes"]["shapes"]
    fit = factorizations(
        256,
        filters,
        gpus_per_node=8,
        hidden=8192,
        layers=80,
        seq_len=4096,
        parameters=70e9,
        device_memory_gb=80.0,
        global_micro_batches=8 * 16,  # the base job's dp8 x 16
        recompute=True,
    )  # the example keeps only each layer's input (full recomputation)
    n_strategies = len(set(sw.strategies))
    assert (
        fit and len(sw.points) == len(fit) * 3 * n_strategies
    )  # the shapes whose memory fits, 3 occupancies
    shapes = {p.shape for p in sw.points}
    assert {s.tp for s in shapes if s} <= {1, 2, 4, 8} and all(
        s is not None and s.cp == s.ep == 1 for s in shapes
    )
    assert all(s is not None and s.world_size == 256 and 80 % s.pp == 0 for s in shapes)
