"""The rules between a job's parallel sizes and its model: tp divides the hidden size (and the attention heads
when given), as pp divides the layers; each refusal names the field, the value and the rule."""

from __future__ import annotations

from typing import Any

import pytest

from placement.errors import InputError
from placement.io.native import job_from_dict


def _job(tp: int, pp: int = 1, **model: Any) -> dict[str, Any]:
    shape = {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096, **model}
    return {"name": "j", "parallel": {"tp": tp, "pp": pp, "dp": 1}, "model": shape}


def _problems(doc: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InputError) as ei:
        job_from_dict(doc, "job.yaml")
    return {p.path: p.message for p in ei.value.problems}


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_tp_dividing_hidden_and_heads_is_accepted(tp: int) -> None:
    assert job_from_dict(_job(tp, heads=32), "job.yaml").ranks == tp


def test_tp_that_does_not_divide_hidden_is_refused_like_pp_that_does_not_divide_layers() -> None:
    for tp in (3, 5, 6, 7):
        assert 4096 % tp  # the rule, checked here by hand
        got = _problems(_job(tp))
        assert set(got) == {"model.hidden"}
        assert "4096" in got["model.hidden"] and f"tp={tp}" in got["model.hidden"]
        assert "tp must divide hidden" in got["model.hidden"]
    assert "model.layers" in _problems(_job(1, pp=3))


def test_tp_that_does_not_divide_the_heads_is_refused() -> None:
    got = _problems(_job(8, hidden=4096, heads=12))  # 4096 / 8 fine; 12 heads over 8 ranks are not
    assert set(got) == {"model.heads"} and "12" in got["model.heads"] and "tp=8" in got["model.heads"]
