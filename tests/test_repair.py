"""Repair: brute-force optimality on tiny clusters (least moves, best surrogate per move count), validity of every
answer, spares, drains, budgets and the input errors."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from placement.cost.surrogate import surrogate_seconds
from placement.decide.repair.input import RepairBudget, resolve_current
from placement.decide.repair.run import repair
from placement.errors import InfeasibleError, InputError
from placement.model.job import Constraints, Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.model.validate import validate
from placement.sim.scenarios import fat_tree, megatron_job, occupy
from placement.solve import SolveOptions, place
from tests.conftest import model, spec, tree

OPTS = SolveOptions(time_limit_s=5.0, workers=1, seed=0)


def _job(tp: int = 2, dp: int = 2, require: bool = False) -> Job:
    cons = Constraints(require={"tp": "node"}) if require else Constraints()
    return Job("run", tp * dp, None, spec(tp=tp, dp=dp), model(), constraints=cons)


def _running(
    topo: Topology, job: Job, ids: list[str], failed: list[str], other: dict[str, str] | None = None
) -> tuple[ClusterState, list[int]]:
    cur = [topo.device_index(i) for i in ids]
    assert all(d is not None for d in cur)
    occ = {topo.device_index(k): v for k, v in (other or {}).items()}
    occ.update({d: job.name for d in cur})
    st = ClusterState(occupied=occ, failed=frozenset(topo.device_index(f) for f in failed))  # type: ignore[misc]
    return st, cur  # type: ignore[return-value]


def _brute(topo: Topology, st: ClusterState, job: Job, cur: list[int]) -> dict[int, float]:
    """Least surrogate per exact number of moved ranks, over every valid mapping."""
    traffic = job_traffic(job)
    usable = [d for d in range(topo.num_devices) if st.usable(d, job.name)]
    best: dict[int, float] = {}
    for mp in itertools.permutations(usable, job.ranks):
        if validate(topo, st, job, list(mp), traffic=traffic):
            continue
        k = sum(1 for r, d in enumerate(mp) if d != cur[r])
        s = surrogate_seconds(topo, st, list(mp), traffic)
        best[k] = min(best.get(k, float("inf")), s)
    return best


CASES = [
    # (hosts per leaf, leaves, gpus, current, failed, other jobs)
    (2, 2, 2, ["h0/gpu0", "h0/gpu1", "h1/gpu0", "h1/gpu1"], ["h0/gpu1"], {}),
    (2, 2, 2, ["h0/gpu0", "h0/gpu1", "h2/gpu0", "h2/gpu1"], ["h2/gpu0"], {"h1/gpu0": "x"}),
    (2, 2, 2, ["h0/gpu0", "h1/gpu0", "h2/gpu0", "h3/gpu0"], ["h3/gpu0", "h1/gpu0"], {"h0/gpu1": "x"}),
    (1, 3, 3, ["h0/gpu0", "h0/gpu1", "h1/gpu0", "h1/gpu1"], ["h1/gpu1"], {"h2/gpu2": "x"}),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_least_moves_and_best_per_move_count_match_brute_force(case: int) -> None:
    hpl, leaves, gpus, ids, failed, other = CASES[case]
    topo = tree(hpl, leaves, gpus)
    job = _job()
    st, cur = _running(topo, job, ids, failed, other)
    res = repair(topo, st, job, cur, options=OPTS)
    brute = _brute(topo, st, job, cur)
    assert res.min_moves == min(brute)
    assert res.stats["min_moves_proven"] == 1
    for a in res.answers:
        assert not validate(topo, st, job, a.mapping)
        assert all(m.src == cur[m.rank] and m.dst == a.mapping[m.rank] for m in a.moves)
        assert all(a.mapping[r] != cur[r] for r in res.forced)
        if a.optimal:
            least = min(v for k, v in brute.items() if k <= a.moved_ranks)
            assert a.report.surrogate_seconds == pytest.approx(least, rel=1e-9)
    # the set is a Pareto front: more moves only for a faster step
    steps = [a.report.step_seconds for a in res.answers]
    moves = [a.moved_ranks for a in res.answers]
    assert moves == sorted(moves) and steps == sorted(steps, reverse=True)
    assert len(set(moves)) == len(moves)


def test_required_tp_moves_whole_groups_and_drain_forces_moves() -> None:
    topo = tree(2, 2, 4)
    job = _job(tp=4, dp=2, require=True)
    ids = [f"h0/gpu{i}" for i in range(4)] + [f"h1/gpu{i}" for i in range(4)]
    st, cur = _running(topo, job, ids, [])
    res = repair(topo, st, job, cur, drain=["h1"], options=OPTS)
    assert res.min_moves == 4 and sorted(res.forced) == [4, 5, 6, 7]
    least = res.answers[0]
    assert least.moved_ranks == 4 and {m.rank for m in least.moves} == {4, 5, 6, 7}
    dst_hosts = {topo.devices[m.dst].host_index for m in least.moves}
    assert len(dst_hosts) == 1 and topo.host_names[dst_hosts.pop()] != "h1"


def test_spares_win_ties() -> None:
    topo = tree(4, 1, 2)  # one leaf: h1, h2, h3 are equally good targets
    job = _job(tp=2, dp=1)
    st, cur = _running(topo, job, ["h0/gpu0", "h0/gpu1"], ["h0/gpu0"])
    res = repair(topo, st, job, cur, spares=["h3"], options=OPTS)
    least = res.answers[0]
    assert least.moved_ranks >= 1
    assert all(topo.devices[m.dst].host_index == topo.host_names.index("h3") for m in least.moves)
    only = repair(topo, st, job, cur, spares=["h2/gpu0", "h2/gpu1"], spares_only=True, options=OPTS)
    for a in only.answers:
        assert {topo.devices[d].host_index for d in a.mapping} <= {
            topo.host_names.index("h2"),
            topo.host_names.index("h0"),
        }


def test_budget_too_small_says_why_with_numbers() -> None:
    topo = tree(2, 2, 4)
    job = _job(tp=4, dp=2, require=True)
    ids = [f"h0/gpu{i}" for i in range(4)] + [f"h1/gpu{i}" for i in range(4)]
    st, cur = _running(topo, job, ids, ["h1/gpu2"])
    with pytest.raises(InfeasibleError) as e:
        repair(topo, st, job, cur, budget=RepairBudget(max_moved_ranks=2), options=OPTS)
    msg = str(e.value)
    assert "h1/gpu2" in msg and "moves 4 ranks" in msg and "allows 2" in msg
    res = repair(topo, st, job, cur, budget=RepairBudget(max_moved_ranks=4), options=OPTS)
    assert all(a.moved_ranks <= 4 for a in res.answers if a.within_budget)
    assert res.answers[res.recommended].within_budget


def test_move_cost_picks_the_least_repair() -> None:
    topo = tree(2, 2, 2)
    job = _job()
    st, cur = _running(topo, job, CASES[1][3], CASES[1][4], CASES[1][5])
    cheap = repair(topo, st, job, cur, budget=RepairBudget(move_cost_s=0.0), options=OPTS)
    dear = repair(topo, st, job, cur, budget=RepairBudget(move_cost_s=1e6), options=OPTS)
    assert cheap.answers[cheap.recommended].report.step_seconds == min(
        a.report.step_seconds for a in cheap.answers
    )
    assert dear.answers[dear.recommended].moved_ranks == dear.min_moves


def test_bad_input_names_the_field() -> None:
    topo = tree(2, 2, 2)
    job = _job()
    with pytest.raises(InputError) as e:
        resolve_current(topo, job, {"0": "h0/gpu0", "1": "h0/gpu1", "2": "h9/gpu0", "7": "h1/gpu0"})
    text = str(e.value)
    assert "current.2" in text and "h9/gpu0" in text and "current.7" in text and "unknown rank 7" in text
    assert "ranks 3 have no device" in text
    with pytest.raises(InputError) as e:
        resolve_current(topo, job, ["h0/gpu0", "h0/gpu0", "h1/gpu0", "h1/gpu1"])
    assert "current[1]" in str(e.value) and "also holds rank 0" in str(e.value)
    st, cur = _running(topo, job, ["h0/gpu0", "h0/gpu1", "h1/gpu0", "h1/gpu1"], [], {})
    st = dataclasses.replace(st, occupied={**st.occupied, cur[2]: "someone"})
    with pytest.raises(InputError) as e:
        repair(topo, st, job, cur, drain=["nowhere"], options=OPTS)
    text = str(e.value)
    assert "drain[0]" in text and "nowhere" in text
    with pytest.raises(InputError) as e:
        repair(topo, st, job, cur, options=OPTS)
    assert "current[2]" in str(e.value) and "someone" in str(e.value)


def test_tp8_job_on_a_fragmented_cluster_moves_one_node() -> None:
    topo = fat_tree(512)
    base = occupy(topo, 0.3, seed=1, mode="mixed-random")
    job = megatron_job("run", tp=8, pp=2, dp=4)
    first = place(topo, base, job, SolveOptions(time_limit_s=2.0, workers=1))
    assert first.mapping is not None
    cur = first.mapping
    st = dataclasses.replace(
        base, occupied={**base.occupied, **{d: job.name for d in cur}}, failed=frozenset({cur[3]})
    )
    res = repair(topo, st, job, cur, spares=[], options=SolveOptions(time_limit_s=3.0, workers=1))
    assert res.forced == [3]
    assert res.min_moves == 8
    least = res.answers[0]
    assert least.moved_ranks == 8 and least.moved_hosts == 1
    assert not validate(topo, st, job, least.mapping)
    assert res.replace is not None and res.replace.moved_ranks > least.moved_ranks


# ---- gRPC and CLI -------------------------------------------------------------------------------------------


def _repair_request(current: list[str], failed: list[str], **extra: object) -> object:
    from placement.messages.files import request_from_dict
    from placement.v1 import placement_pb2 as pb
    from tests.support_server import cluster_doc, job_doc

    doc: dict[str, object] = {
        "cluster": cluster_doc(4),
        "job": job_doc(8, 2, name="run"),
        "state": {"occupied": [{"job": "run", "devices": ["node01", "node02"]}], "failed": failed},
        "current": [{"device": d} for d in current],
        "options": {"time_limit_s": 3.0},
        **extra,
    }
    return request_from_dict(doc, pb.RepairRequest)


def test_repair_over_grpc_and_its_errors() -> None:
    import grpc

    from tests.support_server import field_violations, rpc_error, running

    cur = [f"node01/gpu{i}" for i in range(8)] + [f"node02/gpu{i}" for i in range(8)]
    with running(max_time_limit_s=10.0) as r:
        resp = r.stub.Repair(_repair_request(cur, ["node02/gpu5"], spares=["node04"]), timeout=60)
        assert resp.min_moves == 8 and list(resp.forced_ranks) == [13]
        least = resp.answers[0]
        assert least.moved_ranks == 8 and {m.rank for m in least.moves} == set(range(8, 16))
        assert all(m.to_device.startswith(("node03", "node04")) for m in least.moves)
        assert len(least.mapping) == 16 and least.cost.step_seconds > 0
        assert resp.before.step_seconds > 0 and resp.replace.moved_ranks >= 8
        bad = [*cur[:15], "node09/gpu0"]
        err = rpc_error(lambda: r.stub.Repair(_repair_request(bad, []), timeout=60))
        v = field_violations(err)
        assert "current[15]" in v and "node09/gpu0" in v["current[15]"]
        err = rpc_error(
            lambda: r.stub.Repair(
                _repair_request(cur, ["node02/gpu5"], budget={"max_moved_ranks": 4}), timeout=60
            )
        )
        assert err.code() is grpc.StatusCode.FAILED_PRECONDITION and "allows 4" in (err.details() or "")


def test_cli_repair_and_whatif_defrag(tmp_path: object) -> None:
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from placement.cli.app import app

    root = Path(__file__).resolve().parents[1] / "examples"
    tmp = Path(str(tmp_path))
    (tmp / "state.yaml").write_text(
        "occupied:\n- job: tp8-dp4\n  devices: [node01, node02, node03, node04]\n"
        "- job: other\n  devices: [node05, node06/gpu0]\nfailed: [node02/gpu3]\n"
    )
    res = CliRunner().invoke(
        app,
        [
            "repair",
            str(root / "h100-256.yaml"),
            str(root / "tp8-dp4.yaml"),
            str(root / "mapping-tp8-contiguous.json"),
            "--state",
            str(tmp / "state.yaml"),
            "--time-limit",
            "3",
            "--output",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)  # the RepairResponse JSON mapping
    assert doc["min_moves"] == 8 and doc["forced_ranks"] == [11]
    assert {m["from_device"] for m in doc["answers"][0]["moves"]} == {f"node02/gpu{i}" for i in range(8)}
    # the current mapping may be what `placement place --out` wrote (a PlaceResponse)
    placed = tmp / "placed.json"
    res = CliRunner().invoke(
        app,
        [
            "place",
            str(root / "h100-256.yaml"),
            str(root / "tp8-dp4.yaml"),
            "--strategy",
            "kueue-tas",
            "--out",
            str(placed),
        ],
    )
    assert res.exit_code == 0, res.output
    (tmp / "failed.yaml").write_text(
        f"failed: [{json.loads(placed.read_text())['result']['mapping'][5]['device']}]\n"
    )
    res = CliRunner().invoke(
        app,
        [
            "repair",
            str(root / "h100-256.yaml"),
            str(root / "tp8-dp4.yaml"),
            str(placed),
            "--state",
            str(tmp / "failed.yaml"),
            "--time-limit",
            "3",
            "--output",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["forced_ranks"] == [5]
    res = CliRunner().invoke(
        app,
        [
            "repair",
            str(root / "h100-256.yaml"),
            str(root / "tp8-dp4.yaml"),
            str(root / "mapping-tp8-contiguous.json"),
            "--state",
            str(tmp / "state.yaml"),
            "--drain",
            "nowhere",
        ],
    )
    assert res.exit_code == 2 and "drain[0]" in res.output
    res = CliRunner().invoke(
        app,
        [
            "whatif",
            "defrag",
            str(root / "h100-256.yaml"),
            "--state",
            str(root / "h100-256-busy.yaml"),
            "--level",
            "leaf",
            "--hosts",
            "8",
            "--output",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert not d["fits_today"] and d["answers"][0]["moved_ranks"] == sum(d["answers"][0]["jobs"].values())


def test_moves_off_a_slow_device_when_it_pays() -> None:
    topo = tree(2, 2, 2)
    job = _job(tp=2, dp=1)
    st, cur = _running(topo, job, ["h0/gpu0", "h0/gpu1"], [])
    st = dataclasses.replace(st, device_slowdown={topo.device_index("h0/gpu1"): 50.0})  # type: ignore[dict-item]
    res = repair(topo, st, job, cur, options=OPTS)
    assert res.forced == [] and res.min_moves == 0
    assert res.answers[0].moved_ranks == 0
    faster = [a for a in res.answers if a.moved_ranks > 0]
    assert faster and faster[-1].report.step_seconds < res.answers[0].report.step_seconds
    assert res.answers[res.recommended].moved_ranks > 0  # no move cost: the faster answer
    dear = repair(topo, st, job, cur, budget=RepairBudget(move_cost_s=1e9), options=OPTS)
    assert dear.answers[dear.recommended].moved_ranks == 0


def test_relabel_keeps_ranks_where_symmetry_allows() -> None:
    from placement.decide.repair.model import relabel_keeping

    topo = tree(2, 2, 2)
    job = _job(tp=2, dp=4)
    cur = list(range(8))
    swapped = [cur[(r + 2) % 8] for r in range(8)]  # every dp replica moved to the next one's host
    assert relabel_keeping(topo, job, swapped, cur) == cur
    inside = [1, 0, 3, 2, 5, 4, 7, 6]  # the same hosts, devices swapped inside each
    assert relabel_keeping(topo, job, inside, cur) == cur


def test_repair_derives_the_job_traffic_once(job_traffic_calls: list[str]) -> None:
    # the repair, its full re-place and every answer scored use one derivation of the job's traffic
    topo = tree(2, 2, 2)
    job = _job()
    st, cur = _running(topo, job, ["h0/gpu0", "h0/gpu1", "h2/gpu0", "h2/gpu1"], ["h2/gpu0"], {"h1/gpu0": "x"})
    res = repair(topo, st, job, cur, options=OPTS)
    assert res.answers
    assert job_traffic_calls == [job.name]
