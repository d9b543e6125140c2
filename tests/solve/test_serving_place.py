"""Placing serving jobs (placement.solve.serving) and `placement place CLUSTER SERVING_JOB`: EP kept inside the
lowest domain that holds it, prefill next to its decode, replicas spread (a rule that turns off), never worse than a
baseline, and the CLI's TTFT / TPOT / tokens/s per GPU and phase table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placement.cost.report import InvalidMappingError
from placement.cost.serving import model_serving
from placement.io.native.serving import serving_job_from_dict
from placement.model.serving import pool_ranks
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.solve.serving import evaluate_serving, fitting_level, place_serving, serving_traffic_job
from placement.solve.types import SolveOptions
from tests.support_cli import run, write
from tests.support_serving import serving_job_doc, write_serving_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Topology]:
    return write_serving_cluster(tmp_path_factory.mktemp("serving"))


OPTS = SolveOptions(time_limit_s=3, workers=1, deterministic=True)


def test_fitting_level(cluster: tuple[Path, Topology]) -> None:
    _, topo = cluster
    assert [fitting_level(topo, n) for n in (4, 5, 8, 9, 16)] == ["node", "leaf", "leaf", "spine", "spine"]


def test_ep_in_one_leaf_prefill_beside_decode_and_never_worse_than_a_baseline(
    cluster: tuple[Path, Topology],
) -> None:
    _, topo = cluster
    job = serving_job_from_dict(serving_job_doc())
    res = place_serving(topo, ClusterState(), job, OPTS)
    leaf = topo.domain_column(1)
    host = topo.domain_column(0)
    decode = [res.mapping[r] for r in pool_ranks(job, "decode", 0)]
    prefill = [res.mapping[r] for r in pool_ranks(job, "prefill", 0)]
    assert len({leaf[d] for d in decode}) == 1  # the EP 8 group in one leaf (2 hosts), not over the spine
    assert len({host[d] for d in prefill}) == 1  # EP 4 fits one host
    # the answer's report is the serving model's on its mapping, and no valid candidate does better
    again = model_serving(topo, ClusterState(), job, res.mapping)
    assert res.report.tpot_seconds == again.tpot_seconds
    for name, rep in res.candidates.items():
        if rep is not None and name not in res.broken:
            assert res.report.tpot_seconds <= rep.tpot_seconds, name
    # an EP group split over the two leaves is slower: the spine carries half of every dispatch
    split = list(res.mapping)
    decode_ranks = pool_ranks(job, "decode", 0)
    other = [d for d in range(16) if leaf[d] != leaf[decode[0]]][:4]
    for r, d in zip(decode_ranks[4:], other, strict=True):
        moved = split.index(d) if d in split else None
        if moved is not None:
            split[moved] = split[r]
        split[r] = d
    assert model_serving(topo, ClusterState(), job, split).tpot_seconds > res.report.tpot_seconds


def test_replicas_spread_by_default_and_the_rule_turns_off(cluster: tuple[Path, Topology]) -> None:
    _, topo = cluster
    on = serving_traffic_job(topo, ClusterState(), serving_job_from_dict(serving_job_doc(decode_replicas=2)))
    assert [(s.kind, s.min_domains) for s in on.constraints.spread] == [("leaf", 2)]
    assert on.constraints.prefer["ep"] == "node"  # EP 4 fits one host
    off = serving_traffic_job(
        topo, ClusterState(), serving_job_from_dict(serving_job_doc(decode_replicas=2, spread=False))
    )
    assert off.constraints.spread == ()
    job = serving_job_from_dict(serving_job_doc(decode_replicas=2))
    res = place_serving(topo, ClusterState(), job, OPTS)
    leaf = topo.domain_column(1)
    assert len({leaf[d] for d in res.mapping}) == 2


def test_cli_prints_ttft_tpot_tokens_per_gpu_and_phases(
    tmp_path: Path, cluster: tuple[Path, Topology]
) -> None:
    path, topo = cluster
    job_file = write(tmp_path, "s.yaml", json.dumps(serving_job_doc()))
    res = run("place", path, job_file, "--time-limit", "3", "--workers", "1", "--deterministic")
    assert res.exit_code == 0, res.output
    for word in ("TTFT", "TPOT", "tokens/s per GPU", "ep dispatch", "ep combine", "kv handoff", "deepep-ll"):
        assert word in res.output, word
    # the answer's row comes first, marked; a baseline with no mapping says why (this tree has no block level)
    table = res.output.split("against the baselines", 1)[1]
    rows = [ln for ln in table.splitlines() if ln.startswith("│")]
    assert "(answer)" in rows[0] or "(answer)" in rows[1]
    block = next(i for i, ln in enumerate(rows) if "slurm-block" in ln)
    assert (
        "no mapping" in rows[block] and "block" in " ".join(rows[block : block + 3]).split("no mapping", 1)[1]
    )
    res = run(
        "place", path, job_file, "--output", "json", "--time-limit", "3", "--workers", "1", "--deterministic"
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    mapping = [topo.device_index(d) for d in doc["mapping"]]
    assert None not in mapping
    again = model_serving(
        topo,
        ClusterState(),
        serving_job_from_dict(serving_job_doc()),
        [int(d) for d in mapping if d is not None],
    )
    assert doc["report"]["tpot_seconds"] == pytest.approx(again.tpot_seconds)
    assert doc["report"]["ttft_seconds"] == pytest.approx(again.ttft_seconds)


def test_cli_evaluate_prices_a_given_mapping(tmp_path: Path, cluster: tuple[Path, Topology]) -> None:
    path, _ = cluster
    job_file = write(tmp_path, "s.yaml", json.dumps(serving_job_doc()))
    answer = tmp_path / "answer.json"
    res = run(
        "place", path, job_file, "--output", "json", "--out", answer, "--time-limit", "3", "--workers", "1"
    )
    assert res.exit_code == 0, res.output
    res = run("evaluate", path, job_file, answer, "--output", "json")
    assert res.exit_code == 0, res.output
    placed = json.loads(answer.read_text())["report"]
    assert json.loads(res.output)["report"]["tpot_seconds"] == pytest.approx(placed["tpot_seconds"])
    res = run("evaluate", path, job_file, answer)
    assert res.exit_code == 0 and "TPOT" in res.output and "ep combine" in res.output


def test_evaluate_refuses_a_mapping_that_breaks_the_spread(cluster: tuple[Path, Topology]) -> None:
    """Two power domains in the state: the default spread kind. 3 replicas must cover both."""
    _, topo = cluster
    state = ClusterState(fault_domains={"power": {"a": frozenset(range(12)), "b": frozenset(range(12, 16))}})
    job = serving_job_from_dict(serving_job_doc(decode_replicas=2))
    assert [s.kind for s in serving_traffic_job(topo, state, job).constraints.spread] == ["power"]
    both = [*range(8), 12, 13, 14, 15]
    assert evaluate_serving(topo, state, job, both).tpot_seconds > 0
    with pytest.raises(InvalidMappingError, match="power"):
        evaluate_serving(topo, state, job, list(range(12)))
    off = serving_job_from_dict({**serving_job_doc(decode_replicas=2), "placement": {"spread": False}})
    assert evaluate_serving(topo, state, off, list(range(12))).tpot_seconds > 0


def test_a_tpot_bound_makes_tokens_per_s_the_objective(cluster: tuple[Path, Topology]) -> None:
    """Within a bound every valid candidate meets, the answer has the most tokens/s among them; under a bound none
    meets, the least TPOT."""
    _, topo = cluster
    for bound, within in ((1e6, True), (1e-6, False)):
        doc = serving_job_doc()
        doc["load"] = {**doc["load"], "tpot_bound_ms": bound}  # type: ignore[dict-item]
        res = place_serving(topo, ClusterState(), serving_job_from_dict(doc), OPTS)
        valid = [r for n, r in res.candidates.items() if r is not None and n not in res.broken]
        if within:
            assert res.report.tokens_per_s == max(r.tokens_per_s for r in valid)
        else:
            assert res.report.tpot_seconds == min(r.tpot_seconds for r in valid)


def test_cli_serving_tables_fit_80_columns_when_piped_and_wide_keeps_lines_whole(
    tmp_path: Path, cluster: tuple[Path, Topology]
) -> None:
    """Piped, every line of the serving answer fits 80 columns; --wide prints the headline on one line. Both
    carry the TPOT that --output json gives (to the printed 3 decimals of a millisecond)."""
    path, _ = cluster
    job_file = write(tmp_path, "s.yaml", json.dumps(serving_job_doc()))
    args = ("place", path, job_file, "--time-limit", "3", "--workers", "1", "--deterministic")
    doc = json.loads(run(*args, "--output", "json").output)
    tpot = f"TPOT {doc['report']['tpot_seconds'] * 1e3:.3f} ms"
    narrow = run(*args)
    assert narrow.exit_code == 0, narrow.output
    assert max(len(ln) for ln in narrow.output.splitlines()) <= 80
    assert tpot in narrow.output
    wide = run(*args, "--wide")
    assert wide.exit_code == 0, wide.output
    head = next(ln for ln in wide.output.splitlines() if ln.startswith("TTFT"))
    assert tpot in head and "bottleneck tier" in head and len(head) > 80


def test_a_serving_request_by_cluster_id_asks_for_the_cluster_without_advising_the_flag_in_use(
    tmp_path: Path,
) -> None:
    """`placement place --request FILE --server ADDR` with a cluster_id and a serving job: refused before any call
    (exit 2), naming the cluster_id and what to give (the cluster), not advising --server, which is given."""
    write(tmp_path, "s.yaml", json.dumps(serving_job_doc()))
    req = write(tmp_path, "r.yaml", json.dumps({"cluster_id": "prod", "job_file": "s.yaml"}))
    res = run("place", "--request", req, "--server", "127.0.0.1:9")
    assert res.exit_code == 2, res.output
    said = " ".join(res.stderr.split())
    assert "cluster_id 'prod' with a serving job: give the cluster (cluster or cluster_file)" in said
    assert "--server" not in said
