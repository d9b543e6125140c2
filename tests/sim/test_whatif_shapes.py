"""placement.sim.whatif job shapes: factorizations and their filters, the memory check (model states, activations,
the device kind's memory), and shapes that keep the base job's global batch."""

from __future__ import annotations

from typing import Any

import pytest

from placement.sim.whatif import Shape, factorizations, sweep_from_dict
from tests.support_whatif import JOB, problems, sweep_doc


def test_factorizations_filters() -> None:
    shapes = factorizations(8, {"cp": [1], "ep": [1]}, gpus_per_node=4, hidden=1024, layers=4)
    assert [s.key for s in shapes] == [
        "tp1-cp1-ep1-dp8-pp1",
        "tp1-cp1-ep1-dp4-pp2",
        "tp1-cp1-ep1-dp2-pp4",
        "tp2-cp1-ep1-dp4-pp1",
        "tp2-cp1-ep1-dp2-pp2",
        "tp2-cp1-ep1-dp1-pp4",
        "tp4-cp1-ep1-dp2-pp1",
        "tp4-cp1-ep1-dp1-pp2",
    ]
    assert all(s.world_size == 8 for s in shapes)
    # heads, max_pp and the node size all cut
    assert [
        s.label for s in factorizations(8, {"cp": [1], "ep": [1], "heads": 2, "max_pp": 1}, gpus_per_node=8)
    ] == ["tp1 pp1 dp8", "tp2 pp1 dp4"]
    # ep > 1 needs experts divisible by ep
    assert all(s.ep == 1 for s in factorizations(8, {"cp": [1]}, experts=0))
    assert any(s.ep == 2 for s in factorizations(8, {"cp": [1]}, experts=8))


def test_memory_filter_drops_shapes_whose_model_states_do_not_fit() -> None:
    from placement.sim.whatif import Shape, factorizations, model_state_gb

    kw: dict[str, Any] = {
        "gpus_per_node": 8,
        "hidden": 8192,
        "layers": 80,
        "seq_len": 4096,
        "parameters": 70e9,
    }
    every = factorizations(256, {"tp": [1, 2, 4, 8], "cp": [1], "ep": [1]}, **kw)
    fits = factorizations(
        256, {"tp": [1, 2, 4, 8], "cp": [1], "ep": [1], "memory_gb": 80, "activations": False}, **kw
    )
    assert (
        Shape(1, 1, 1, 256, 1) in every and Shape(1, 1, 1, 256, 1) not in fits
    )  # 70B x 4 bytes alone is 280 GB
    assert Shape(8, 1, 1, 4, 8) in fits
    assert all(model_state_gb(70e9, s) <= 80 for s in fits)
    assert set(fits) < set(every)


def test_shapes_keep_the_base_jobs_global_batch() -> None:
    from placement.sim.whatif import global_micro_batches, shape_job_doc

    assert global_micro_batches(JOB) == 4  # dp2 x 2 micro-batches
    doc = shape_job_doc(JOB, Shape(tp=2, pp=2, dp=2))
    assert doc["model"]["micro_batches"] == 2 and doc["parallel"]["pp"] == 2
    assert shape_job_doc(JOB, Shape(tp=1, pp=2, dp=4))["model"]["micro_batches"] == 1
    assert shape_job_doc(JOB, Shape(tp=1, dp=8), keep_global_batch=False)["model"]["micro_batches"] == 2
    with pytest.raises(ValueError, match="dp=8 does not divide the global batch of 4 micro-batches"):
        shape_job_doc(JOB, Shape(tp=1, dp=8))
    # generated shapes: dp must divide the global batch; a listed shape that cannot is an error naming it
    sw = sweep_from_dict(
        sweep_doc(shapes={"cp": [1], "ep": [1]}, occupancy=[0], strategies=["first-fit"]), "s.yaml"
    )
    assert {p.shape.dp for p in sw.points if p.shape} == {1, 2, 4}
    got = problems(sweep_doc(shapes=[{"tp": 1, "dp": 8}]))
    assert got == {
        "axes.shapes[0]": "dp=8 does not divide the global batch of 4 micro-batches (the base job's dp x "
        "micro_batches); pick another dp or set keep_global_batch: false"
    }
    free = sweep_from_dict({**sweep_doc(shapes=[{"tp": 1, "dp": 8}]), "keep_global_batch": False}, "s.yaml")
    assert {p.shape for p in free.points} == {Shape(tp=1, dp=8)}
    assert problems({**sweep_doc(), "keep_global_batch": "yes"}) == {
        "keep_global_batch": "must be true or false, got 'yes'"
    }


def test_memory_check_adds_activations_and_takes_the_device_kinds_memory() -> None:
    from placement.cost.compute import activation_bytes, device_kind
    from placement.model.job import ModelShape, ParallelSpec
    from placement.sim.whatif import activation_gb, device_memory_gb, model_state_gb

    model = ModelShape(parameters=70e9, hidden=8192, layers=80, seq_len=4096, micro_batches=16, heads=64)
    kw: dict[str, Any] = {
        "gpus_per_node": 8,
        "hidden": 8192,
        "layers": 80,
        "seq_len": 4096,
        "parameters": 70e9,
        "micro_batches": 16,
        "heads": 64,
    }
    filters: dict[str, Any] = {"tp": [1, 2, 4, 8], "cp": [1], "ep": [1]}
    h100 = device_kind("H100")
    assert h100 is not None and device_memory_gb("H100") == h100.memory_gb and device_memory_gb("gpu") is None

    def need(s: Shape) -> float:
        return model_state_gb(70e9, s) + activation_gb(
            s, hidden=8192, layers=80, seq_len=4096, micro_batches=16, heads=64
        )

    every = factorizations(256, filters, **kw)
    fits = factorizations(256, filters, device_memory_gb=h100.memory_gb, **kw)
    assert fits and set(fits) < set(every)
    assert {s for s in every if need(s) <= h100.memory_gb} == set(fits)
    states_only = factorizations(
        256, {**filters, "activations": False}, device_memory_gb=h100.memory_gb, **kw
    )
    assert set(fits) < set(states_only)  # activations take shapes out that the model states alone let in
    s = fits[0]
    assert activation_gb(
        s, hidden=8192, layers=80, seq_len=4096, micro_batches=16, heads=64
    ) == pytest.approx(activation_bytes(model, ParallelSpec(s.tp, s.cp, s.ep, s.dp, s.pp)) / 1e9)
    # an explicit memory_gb overrides the kind's memory
    assert set(
        factorizations(256, {**filters, "memory_gb": 1e6}, device_memory_gb=h100.memory_gb, **kw)
    ) == set(every)
    # a sweep over H100s applies the kind's memory without a memory_gb filter
    doc = sweep_doc(shapes={"cp": [1], "ep": [1]}, occupancy=[0], strategies=["first-fit"])
    doc["job"]["model"] = {
        "parameters": 70e9,
        "hidden": 8192,
        "layers": 80,
        "seq_len": 4096,
        "micro_batches": 16,
    }
    doc["gpus"] = 16
    doc["cluster"]["generate"] = {"nodes": 4, "devices": 4, "kind": "H100", "fanout": {"leaf": 2}}
    got = problems(doc)
    assert got["axes.shapes"].startswith("no factorization of 16 GPUs passes the filters")
    assert "model states + activations <= 80 GB per device" in got["axes.shapes"]
