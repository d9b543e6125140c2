"""Serving jobs in the decisions (`placement.decide.serving`): PlaceBatch admits a serving deployment next to
training jobs, priced by its time per output token; Repair replaces the ranks of a failed replica keeping its EP
group inside its domain; Preempt frees room for a serving job. Each serving number is checked against the serving
model recomputed on the answer's mapping, and the repair against every single-device replacement (brute force).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml

from placement.cost.serving import model_serving
from placement.decide.batch.joint import place_batch
from placement.decide.batch.types import BatchJob
from placement.decide.preempt import RunningJob, freed_state, preempt
from placement.decide.repair.serving import repair_serving
from placement.errors import InfeasibleError, InputError
from placement.io.native import cluster_from_dict
from placement.io.native.serving import serving_job_from_dict
from placement.messages.batch import batch_inputs
from placement.messages.decisions import preempt_inputs
from placement.messages.files import read_request, request_from_dict
from placement.messages.repair import repair_inputs
from placement.messages.serving import serving_place_inputs
from placement.messages.serving_job import serving_to_proto
from placement.model.serving import ServingJob, pool_ranks
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.validate import validate
from placement.sim.scenarios import megatron_job
from placement.solve.serving import place_serving, serving_traffic_job
from placement.solve.types import SolveOptions
from placement.v1 import placement_pb2 as pb
from tests.support_cli import run
from tests.support_server import running
from tests.support_serving import serving_job_doc, write_serving_cluster

OPTS = SolveOptions(time_limit_s=2.0, workers=1, deterministic=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Topology]:
    return write_serving_cluster(tmp_path_factory.mktemp("serving-decisions"))


def serving(name: str = "moe") -> ServingJob:
    """12 ranks: a prefill replica of EP 4 and a decode replica of EP 8 (module `serving_job_doc`)."""
    return serving_job_from_dict(serving_job_doc(name=name))


def leaves_of(topo: Topology, devices: list[int]) -> set[int]:
    return {topo.domain_of(d, topo.level_index("leaf")) for d in devices}


def test_batch_admits_a_serving_job_beside_a_training_job_priced_by_its_tpot(
    cluster: tuple[Path, Topology],
) -> None:
    """16 GPUs: the serving job's 12 ranks and a 4-rank TP job fill them. Its step seconds are the TPOT that the
    serving model gives on its mapping, its decode EP 8 sits in one leaf (8 GPUs: the lowest level that holds it),
    and it decodes as fast as when placed alone on the empty cluster (the TP job fits on the host left)."""
    _, topo = cluster
    sj = serving()
    state = ClusterState()
    queue = [
        BatchJob(megatron_job("train", tp=4, dp=1, pp=1, hidden=1024, layers=4, micro_batches=2), 1.0, 0.0),
        BatchJob(serving_traffic_job(topo, state, sj), 1.0, 0.0, sj),
    ]
    res = place_batch(topo, state, queue, OPTS)
    plan = res.plan
    assert [o.admitted for o in plan.outcomes] == [True, True]
    train, served = plan.outcomes
    assert served.mapping is not None and train.mapping is not None and served.report is not None
    assert not set(served.mapping) & set(train.mapping)
    again = model_serving(topo, state, sj, served.mapping)
    assert served.serving is not None
    assert served.serving.tpot_seconds == pytest.approx(again.tpot_seconds)
    assert served.report.step_seconds == pytest.approx(again.tpot_seconds)
    assert served.serving.ttft_seconds == pytest.approx(again.ttft_seconds)
    assert train.serving is None and train.report is not None
    decode = [served.mapping[r] for r in pool_ranks(sj, "decode", 0)]
    assert len(leaves_of(topo, decode)) == 1
    alone = place_serving(topo, state, sj, OPTS)
    assert again.tpot_seconds == pytest.approx(alone.report.tpot_seconds)
    # the plan's weighted step is the training step plus the serving job's TPOT
    assert plan.weighted_step_seconds == pytest.approx(train.report.step_seconds + again.tpot_seconds)


SIX_HOSTS = """\
name: three-per-leaf
levels:
  - {name: node, bandwidth_gbps: 400, latency_us: 1}
  - {name: leaf, bandwidth_gbps: 50, latency_us: 5}
  - {name: spine, bandwidth_gbps: 12.5, latency_us: 8}
generate: {nodes: 6, devices: 4, kind: H100, fanout: {leaf: 3}}
"""
"""6 hosts of 4 H100s, 3 per leaf (12 GPUs a leaf): a decode EP 8 group leaves a free host in its leaf."""


def six_hosts() -> Topology:
    return cluster_from_dict(yaml.safe_load(SIX_HOSTS), "six")[0]


def running_deployment(topo: Topology, sj: ServingJob) -> list[int]:
    """The deployment as it runs: prefill (ranks 0-3) on host 3 (leaf 1, spread from the decode replica),
    decode (ranks 4-11) on hosts 0 and 1 (leaf 0)."""
    return [*range(12, 16), *range(0, 8)]


def test_repair_replaces_the_failed_rank_inside_its_ep_groups_leaf_as_brute_force_does() -> None:
    """Device 0 (decode rank 4) fails. Brute force: every free device as its replacement, each mapping checked
    against the job's rules and priced by the serving model; the least repair (one move) reaches the best TPOT
    of them, on host 2, the free host of the EP group's leaf (a device of leaf 1 would put the group's
    dispatch and combine on the spine)."""
    topo = six_hosts()
    sj = serving()
    current = running_deployment(topo, sj)
    state = ClusterState(failed=frozenset({0}))
    explicit = serving_traffic_job(topo, state, sj)
    assert not validate(topo, ClusterState(), explicit, current)
    rank = current.index(0)
    brute: dict[int, float] = {}
    for d in range(topo.num_devices):
        if d in current or d in state.failed:
            continue
        trial = list(current)
        trial[rank] = d
        if validate(topo, state, explicit, trial):
            continue
        brute[d] = model_serving(topo, state, sj, trial).tpot_seconds
    best = min(brute.values())
    assert {d for d, t in brute.items() if t <= best * (1 + 1e-9)} == {8, 9, 10, 11}  # host 2: leaf 0
    res = repair_serving(topo, state, sj, current, options=OPTS)
    least = res.answers[0]
    assert least.moved_ranks == 1 and least.moves[0].rank == rank
    assert least.mapping[rank] in {8, 9, 10, 11}
    assert least.serving is not None
    assert least.serving.tpot_seconds == pytest.approx(best)
    assert least.report.step_seconds == pytest.approx(best)
    # the front: fewer moves first, each later answer faster by TPOT; the recommended one is on it
    tpots = [a.report.step_seconds for a in res.answers]
    assert all(b < a for a, b in itertools.pairwise(tpots))
    assert 0 <= res.recommended < len(res.answers)
    assert res.before_serving is not None
    assert res.before_serving.tpot_seconds == pytest.approx(
        model_serving(topo, state, sj, current).tpot_seconds
    )


def test_repair_command_and_rpc_take_a_serving_job(tmp_path: Path) -> None:
    """`placement repair CLUSTER SERVING_JOB CURRENT --state` prints the front by TPOT, and its --json (the
    RepairResponse the RPC answers) carries each answer's serving report, the TPOT the serving model gives on
    its mapping; over gRPC the same request is answered the same way."""
    topo = six_hosts()
    sj = serving()
    current = running_deployment(topo, sj)
    cluster = tmp_path / "c.yaml"
    cluster.write_text(SIX_HOSTS)
    job_file = tmp_path / "s.yaml"
    job_file.write_text(json.dumps(serving_job_doc()))
    cur = tmp_path / "current.yaml"
    cur.write_text(yaml.safe_dump([topo.devices[d].id for d in current]))
    st = tmp_path / "state.yaml"
    st.write_text(f"failed: [{topo.devices[0].id}]\n")
    args = ["repair", cluster, job_file, cur, "--state", st, "--time-limit", "2", "--deterministic"]
    table = run(*args)
    assert table.exit_code == 0, table.output
    assert "TPOT before" in table.output and "recommended: TTFT" in table.output
    assert max(len(ln) for ln in table.output.splitlines()) <= 80
    res = run(*args, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    state = ClusterState(failed=frozenset({0}))
    for a in doc["answers"]:
        mapping = [topo.device_index(x["device"]) for x in a["mapping"]]
        again = model_serving(topo, state, sj, [d for d in mapping if d is not None])
        assert a["serving"]["tpot_s"] == pytest.approx(again.tpot_seconds)
        assert a["cost"]["step_seconds"] == pytest.approx(again.tpot_seconds)
    req = request_from_dict(
        {
            "cluster_file": str(cluster),
            "state": {"failed": [topo.devices[0].id]},
            "current": [{"device": topo.devices[d].id} for d in current],
            "options": {"time_limit_s": 2, "deterministic": True},
        },
        pb.RepairRequest,
    )
    req.job.CopyFrom(serving_to_proto(sj))
    with running() as r:
        got = r.stub.Repair(req, timeout=60)
    least = got.answers[0]
    assert least.moved_ranks == 1 and least.moves[0].to_device in {topo.devices[d].id for d in (8, 9, 10, 11)}
    assert least.serving.tpot_s == pytest.approx(doc["answers"][0]["serving"]["tpot_s"])
    assert got.before_serving.tpot_s == pytest.approx(model_serving(topo, state, sj, current).tpot_seconds)


def occupied_six(topo: Topology) -> ClusterState:
    """low-a on hosts 0-1 and low-b on host 2 (leaf 0), low-c on host 4 (leaf 1); hosts 3 and 5 free."""
    occ = {d: "low-a" for d in range(0, 8)}
    occ.update({d: "low-b" for d in range(8, 12)})
    occ.update({d: "low-c" for d in range(16, 20)})
    return ClusterState(occupied=occ)


RUNNING = [RunningJob("low-a", 0.0, gpu_hours=10.0), RunningJob("low-b", 0.0, gpu_hours=1.0)]
RUNNING += [RunningJob("low-c", 0.0, gpu_hours=5.0)]


def test_preempt_frees_room_for_a_serving_job_as_brute_force_over_victim_sets_does() -> None:
    """The serving job (12 ranks, its two replicas spread over the two leaves) fits nowhere on the 8 free GPUs.
    Brute force: every set of victims freed, the job placed by the serving objective (or refused); the least set
    (fewest victims, then GPU-hours) that places it is preempt's answer: low-b alone (low-c alone frees a host
    in leaf 1 only, where the spread cannot hold). The answer's step is its TPOT on its mapping."""
    topo = six_hosts()
    state = occupied_six(topo)
    sj = serving()
    costs = {rj.job: rj.gpu_hours or 0.0 for rj in RUNNING}
    feasible: list[tuple[int, float, frozenset[str]]] = []
    for k in range(len(RUNNING) + 1):
        for victims in itertools.combinations(sorted(costs), k):
            try:
                place_serving(topo, freed_state(state, set(victims)), sj, OPTS)
            except InfeasibleError:
                continue
            feasible.append((k, sum(costs[v] for v in victims), frozenset(victims)))
    best = min(feasible, key=lambda f: (f[0], f[1]))
    assert best[2] == {"low-b"}
    res = preempt(
        topo, state, serving_traffic_job(topo, state, sj), RUNNING, job_priority=1.0, options=OPTS, serving=sj
    )
    chosen = res.chosen
    assert {v.job for v in chosen.victims} == best[2]
    assert chosen.serving is not None and res.ideal_serving is not None
    again = model_serving(topo, freed_state(state, {"low-b"}), sj, chosen.mapping)
    assert chosen.serving.tpot_seconds == pytest.approx(again.tpot_seconds)
    assert chosen.report.step_seconds == pytest.approx(again.tpot_seconds)
    # a bound on the TPOT below the ideal's admits no answer
    with pytest.raises(InfeasibleError, match="time per output token of at most"):
        preempt(
            topo,
            state,
            serving_traffic_job(topo, state, sj),
            RUNNING,
            job_priority=1.0,
            options=OPTS,
            serving=sj,
            max_step_seconds=0.5 * res.ideal_serving.tpot_seconds,
        )


def test_preempt_rpc_and_a_request_file_whose_job_file_is_a_serving_job(tmp_path: Path) -> None:
    """A PreemptRequest file whose job_file is a `kind: serving` file: read into the Job message carrying
    `serving` (named after the file, as the serving reader names it), answered over gRPC with the same victims
    as offline, each answer with its serving report."""
    topo = six_hosts()
    (tmp_path / "c.yaml").write_text(SIX_HOSTS)
    (tmp_path / "deploy.yaml").write_text(
        json.dumps({k: v for k, v in serving_job_doc().items() if k != "name"})
    )
    occupied = [
        {"job": j, "devices": [topo.devices[d].id for d, o in occupied_six(topo).occupied.items() if o == j]}
        for j in ("low-a", "low-b", "low-c")
    ]
    doc = {
        "cluster_file": "c.yaml",
        "state": {"occupied": occupied},
        "job_file": "deploy.yaml",
        "priority": 1.0,
        "running": [{"job": rj.job, "gpu_hours": rj.gpu_hours} for rj in RUNNING],
        "options": {"time_limit_s": 2, "deterministic": True},
    }
    (tmp_path / "req.yaml").write_text(yaml.safe_dump(doc))
    req = read_request(tmp_path / "req.yaml", pb.PreemptRequest)
    want = serving_to_proto(serving_job_from_dict(serving_job_doc(name="deploy")))
    assert req.job == want
    with running() as r:
        got = r.stub.Preempt(req, timeout=120)
    chosen = got.answers[got.recommended]
    assert [v.job for v in chosen.victims] == ["low-b"]
    mapping = [topo.device_index(a.device) for a in chosen.mapping]
    again = model_serving(
        topo, freed_state(occupied_six(topo), {"low-b"}), serving(), [d for d in mapping if d is not None]
    )
    assert chosen.serving.tpot_s == pytest.approx(again.tpot_seconds)
    assert got.ideal_serving.tpot_s > 0


def test_place_batch_command_takes_a_serving_job_file_here_and_by_a_server(tmp_path: Path) -> None:
    """A batch file with a training job and a `kind: serving` job file: both admitted, here and by a server
    (the same files sent as a PlaceBatchRequest); the serving job's line gives the TPOT that the serving model
    gives on its mapping (the --json document's), and the tables fit 80 columns."""
    path, topo = write_serving_cluster(tmp_path)
    (tmp_path / "moe.yaml").write_text(json.dumps(serving_job_doc(name="moe")))
    train = {"name": "train", "ranks": 4, "groups": [{"label": "tp", "members": "0-3", "bytes": 1e8}]}
    batch = {"jobs": [{"job": train}, {"job_file": "moe.yaml", "weight": 2}]}
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump(batch))
    args = [
        "place-batch",
        path,
        tmp_path / "batch.yaml",
        "--time-limit",
        "3",
        "--deterministic",
        "--workers",
        "1",
    ]
    doc = json.loads(run(*args, "--json").output)
    jobs = doc["plan"]["jobs"]
    assert [j["admitted"] for j in jobs] == [True, True]
    moe = jobs[1]
    mapping = [topo.device_index(m["device"]) for m in moe["mapping"]]
    again = model_serving(topo, ClusterState(), serving(), [d for d in mapping if d is not None])
    assert moe["serving"]["tpot_s"] == pytest.approx(again.tpot_seconds)
    assert moe["cost"]["step_seconds"] == pytest.approx(again.tpot_seconds)
    assert "serving" not in jobs[0]
    table = run(*args)
    assert table.exit_code == 0, table.output
    assert f"TPOT {again.tpot_seconds * 1e3:.3f} ms" in table.output
    assert max(len(ln) for ln in table.output.splitlines()) <= 80
    with running() as r:
        served = run(*args, "--json", "--server", f"127.0.0.1:{r.port}")
    assert served.exit_code == 0, served.output
    got = json.loads(served.output)
    assert [j["admitted"] for j in got["plan"]["jobs"]] == [True, True]
    assert got["plan"]["jobs"][1]["serving"]["tpot_s"] > 0


def test_batch_places_a_spread_deployment_before_a_packed_one_so_both_fit(
    cluster: tuple[Path, Topology],
) -> None:
    """Two 8-rank deployments (EP 4 prefill and decode replicas, a host each) on 2 leaves of 2 hosts: one must
    spread its replicas over both leaves, the other need not. By hand: the spread one takes a host in each leaf and
    the other the two hosts left, so both fit whatever the queue's order; placed in queue order with the packed
    one first, it would fill one leaf and leave the spread one no room."""
    _, topo = cluster
    state = ClusterState()

    def small(name: str, spread: bool) -> ServingJob:
        doc = serving_job_doc(name=name, spread=spread)
        doc["pools"][1] = {"role": "decode", "ep": 4, "attention_dp": 4}
        return serving_job_from_dict(doc)

    packed, spread = small("packed", False), small("spread", True)
    queue = [BatchJob(serving_traffic_job(topo, state, j), 1.0, 0.0, j) for j in (packed, spread)]
    res = place_batch(topo, state, queue, OPTS)
    assert [o.admitted for o in res.plan.outcomes] == [True, True]
    m = res.plan.outcomes[1].mapping
    assert m is not None and len(leaves_of(topo, m)) == 2


def test_preempt_command_takes_a_serving_job_file_here_and_by_a_server(tmp_path: Path) -> None:
    """`placement preempt CLUSTER SERVING_JOB --running R --state S`: the same victims here and by a server (the
    job sent through the request's job_file), the recommended answer's TTFT and TPOT printed in 80 columns."""
    topo = six_hosts()
    (tmp_path / "c.yaml").write_text(SIX_HOSTS)
    (tmp_path / "moe.yaml").write_text(json.dumps(serving_job_doc(name="moe")))
    occ = occupied_six(topo).occupied
    state = {
        "occupied": [
            {"job": j, "devices": [topo.devices[d].id for d, o in occ.items() if o == j]}
            for j in ("low-a", "low-b", "low-c")
        ]
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(state))
    (tmp_path / "r.yaml").write_text(
        yaml.safe_dump([{"job": rj.job, "gpu_hours": rj.gpu_hours} for rj in RUNNING])
    )
    args = [
        "preempt", tmp_path / "c.yaml", tmp_path / "moe.yaml", "--running", tmp_path / "r.yaml",
        "--state", tmp_path / "s.yaml", "--priority", "1", "--time-limit", "4", "--deterministic",
    ]  # fmt: skip
    table = run(*args)
    assert table.exit_code == 0, table.output
    assert "recommended: TTFT" in table.output and "low-b" in table.output
    assert max(len(ln) for ln in table.output.splitlines()) <= 80
    here = json.loads(run(*args, "--json").output)
    with running() as r:
        served = run(*args, "--json", "--server", f"127.0.0.1:{r.port}")
    assert served.exit_code == 0, served.output
    there = json.loads(served.output)
    freed = freed_state(occupied_six(topo), {"low-b"})
    for doc in (here, there):
        chosen = doc["answers"][doc.get("recommended", 0)]
        assert [v["job"] for v in chosen["victims"]] == ["low-b"]
        mapping = [topo.device_index(a["device"]) for a in chosen["mapping"]]
        assert None not in mapping
        again = model_serving(topo, freed, serving("moe"), mapping)  # type: ignore[arg-type]
        assert chosen["serving"]["tpot_s"] == pytest.approx(again.tpot_seconds)
        assert chosen["cost"]["step_seconds"] == pytest.approx(again.tpot_seconds)


@pytest.mark.parametrize(
    ("rules", "field", "words"),
    [
        (
            {"spread_kind": "rack"},
            "rules.spread_kind",
            "unknown fault domain kind 'rack'; kinds are ['leaf', 'node', 'spine']",
        ),
        ({"ep_level": "nvl"}, "rules.ep_level", "unknown level 'nvl'; levels are ['node', 'leaf', 'spine']"),
    ],
)
def test_a_rule_naming_what_the_cluster_lacks_is_refused_at_its_field_by_every_decision(
    tmp_path: Path, rules: dict[str, str], field: str, words: str
) -> None:
    """A serving job whose rules name a fault domain kind or a level the cluster lacks (the kinds are its levels:
    its state has no fault domains): PlaceBatch, Repair, Preempt and Place refuse it with the request's field,
    the value and the names there are (no KeyError out of the explicit job), and so does `placement repair`."""
    topo = six_hosts()
    doc = serving_job_doc()
    doc["placement"] = rules
    msg = serving_to_proto(serving_job_from_dict(doc))
    cluster = request_from_dict({"cluster": yaml.safe_load(SIX_HOSTS)}, pb.PlaceRequest).cluster
    batch = pb.PlaceBatchRequest(cluster=cluster)
    batch.jobs.add(job=msg)
    repair_req = pb.RepairRequest(cluster=cluster, job=msg)
    for r, d in enumerate(running_deployment(topo, serving())):
        repair_req.current.add(rank=r, device=topo.devices[d].id)
    for convert, req, path in (
        (batch_inputs, batch, f"jobs[0].job.serving.{field}"),
        (repair_inputs, repair_req, f"job.serving.{field}"),
        (preempt_inputs, pb.PreemptRequest(cluster=cluster, job=msg), f"job.serving.{field}"),
        (serving_place_inputs, pb.PlaceRequest(cluster=cluster, job=msg), f"job.serving.{field}"),
    ):
        with pytest.raises(InputError) as info:
            convert(req)  # type: ignore[operator]
        (problem,) = info.value.problems
        assert problem.path == path and problem.message.startswith(words), problem
    (tmp_path / "c.yaml").write_text(SIX_HOSTS)
    (tmp_path / "s.yaml").write_text(json.dumps(doc))
    cur = tmp_path / "current.yaml"
    cur.write_text(yaml.safe_dump([topo.devices[d].id for d in running_deployment(topo, serving())]))
    res = run("repair", tmp_path / "c.yaml", tmp_path / "s.yaml", cur, "--time-limit", "1")
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert f"placement.{field.removeprefix('rules.')}: {words}" in " ".join(res.stderr.split())


def test_a_bad_serving_field_is_named_by_its_path_in_the_request() -> None:
    """A decode pool's `tp` of 0 and a `load.batch` of 0, sent in a Job message: every request names them where
    they are in the message (``job.serving.pools[1].tp``; ``jobs[0].job.serving...`` in a batch), not as paths
    of the serving file with the message's ``serving`` left out."""
    msg = serving_to_proto(serving())
    msg.serving.pools[1].tp = 0
    msg.serving.load.batch = 0
    cluster = request_from_dict({"cluster": yaml.safe_load(SIX_HOSTS)}, pb.PlaceRequest).cluster
    batch = pb.PlaceBatchRequest(cluster=cluster)
    batch.jobs.add(job=msg)
    for convert, req, prefix in (
        (batch_inputs, batch, "jobs[0].job"),
        (preempt_inputs, pb.PreemptRequest(cluster=cluster, job=msg), "job"),
        (serving_place_inputs, pb.PlaceRequest(cluster=cluster, job=msg), "job"),
    ):
        with pytest.raises(InputError) as info:
            convert(req)  # type: ignore[operator]
        paths = {p.path for p in info.value.problems}
        assert {f"{prefix}.serving.pools[1].tp", f"{prefix}.serving.load.batch"} <= paths, paths


def test_repair_of_a_one_token_deployment_reaches_the_brute_force_tpot() -> None:
    """With one output token per request the prefill pool's collectives and the KV handoff weigh as much per
    token as the decode step in the explicit job, so its step and the TPOT rank replacements differently. Device
    0 (decode rank 4) fails; brute force over every free device as its replacement, each mapping checked against
    the job's rules and priced by the serving model: the least repair (one move) reaches the best TPOT of them,
    as every answer is priced by TPOT before the front is chosen (not only those the explicit job's step kept)."""
    topo = six_hosts()
    doc = serving_job_doc()
    doc["load"]["output_tokens"] = 1
    sj = serving_job_from_dict(doc)
    current = running_deployment(topo, sj)
    state = ClusterState(failed=frozenset({0}))
    explicit = serving_traffic_job(topo, state, sj)
    rank = current.index(0)
    brute: list[float] = []
    for d in range(topo.num_devices):
        if d in current or d in state.failed:
            continue
        trial = list(current)
        trial[rank] = d
        if not validate(topo, state, explicit, trial):
            brute.append(model_serving(topo, state, sj, trial).tpot_seconds)
    res = repair_serving(topo, state, sj, current, options=OPTS)
    least = res.answers[0]
    assert least.moved_ranks == 1
    assert least.report.step_seconds == pytest.approx(min(brute))
    assert least.serving is not None and least.serving.tpot_seconds == pytest.approx(min(brute))
    assert res.before_serving is not None
    assert res.before_serving.tpot_seconds == pytest.approx(
        model_serving(topo, state, sj, current).tpot_seconds
    )
