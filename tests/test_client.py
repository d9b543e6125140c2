"""server.client.PlacementClient (typed calls, decoded errors, retry on UNAVAILABLE only) and placement.messages.files
(request files in, results out)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf import json_format

from placement.errors import InputError
from placement.messages.files import dump_message, read_request, request_from_dict, write_message
from placement.v1 import placement_pb2 as pb
from server.client import PlacementClient, PlacementRpcError
from tests.conftest import EXAMPLES
from tests.support_server import Running, cluster_doc, example_request, job_doc, place_request, running

SMI = Path("/work/shared/data/topologies/nvidia_smi_topo/hgx_h100_8gpu_8nic_rail_pix__sglang_issue30401.txt")


@pytest.fixture(scope="module")
def live() -> Iterator[Running]:
    with running(token="tok") as r:
        yield r


@pytest.fixture
def client(live: Running) -> Iterator[PlacementClient]:
    with PlacementClient(f"127.0.0.1:{live.port}", token="tok", timeout_s=30) as c:
        yield c


# ---- the client ---------------------------------------------------------------------------------------------


def test_place_evaluate_compare_and_health(client: PlacementClient) -> None:
    placed = client.place(example_request()).result
    assert placed.status in (pb.SOLVE_STATUS_OPTIMAL, pb.SOLVE_STATUS_FEASIBLE) and len(placed.mapping) == 32
    req = example_request()
    ev = client.evaluate(pb.EvaluateRequest(cluster=req.cluster, job=req.job, mapping=placed.mapping))
    assert ev.seconds_per_step == pytest.approx(placed.seconds_per_step)
    assert ev.cost.step_seconds == pytest.approx(placed.cost.step_seconds) and ev.cost.step_seconds > 0
    assert len(ev.cost.phases) == len(placed.cost.phases)
    cmp = client.compare(
        pb.CompareRequest(cluster=req.cluster, jobs=[req.job, place_request(nodes=4, dp=2).job])
    )
    assert len(cmp.ranking) == 2
    keys = [(e.result.cost.step_seconds, e.result.cost.comm_seconds) for e in cmp.ranking]
    assert keys == sorted(keys)  # ranked by modeled step, then exposed comm
    assert client.health() == "SERVING"


def test_errors_carry_the_code_the_decoded_details_and_the_request_id(client: PlacementClient) -> None:
    job = job_doc(8, 2)
    job["parallel"]["order"] = "tp-dp"
    bad = request_from_dict({"cluster": cluster_doc(4), "job": job}, pb.PlaceRequest)
    with pytest.raises(PlacementRpcError) as info:
        client.place(bad, request_id="rid-client-1")
    err = info.value
    assert err.code is grpc.StatusCode.INVALID_ARGUMENT and err.request_id == "rid-client-1"
    assert [f for f, _ in err.field_violations] == ["job.parallel.order"]
    assert "INVALID_ARGUMENT" in str(err)

    with pytest.raises(PlacementRpcError) as info:
        client.place(place_request(nodes=4, dp=4, occupied=("node01/gpu0",)))
    assert info.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.precondition_violations[0][:2] == ("infeasible", "job")


def test_a_call_without_the_token_is_unauthenticated(live: Running) -> None:
    with PlacementClient(f"127.0.0.1:{live.port}") as anonymous:
        with pytest.raises(PlacementRpcError) as info:
            anonymous.place(place_request())
        assert info.value.code is grpc.StatusCode.UNAUTHENTICATED
        assert anonymous.health() == "SERVING"


class _Flaky:
    """A PlacementService whose Place answers `codes` in turn, then OK."""

    def __init__(self, codes: list[grpc.StatusCode]) -> None:
        self.codes = codes
        self.calls = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        handler = grpc.unary_unary_rpc_method_handler(
            self._place,
            request_deserializer=pb.PlaceRequest.FromString,
            response_serializer=pb.PlaceResponse.SerializeToString,
        )
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("placement.v1.PlacementService", {"Place": handler}),)
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _place(self, request: pb.PlaceRequest, context: Any) -> pb.PlaceResponse:
        self.calls += 1
        if self.calls <= len(self.codes):
            context.abort(self.codes[self.calls - 1], "try again")
        return pb.PlaceResponse(result=pb.PlacementResult(job="ok"))


@pytest.fixture
def flaky() -> Iterator[Callable[[list[grpc.StatusCode]], _Flaky]]:
    made: list[_Flaky] = []

    def make(codes: list[grpc.StatusCode]) -> _Flaky:
        made.append(_Flaky(codes))
        return made[-1]

    yield make
    for f in made:
        f.server.stop(None)


def test_unavailable_is_retried_with_backoff(flaky: Callable[[list[grpc.StatusCode]], _Flaky]) -> None:
    f = flaky([grpc.StatusCode.UNAVAILABLE] * 3)
    with PlacementClient(f"127.0.0.1:{f.port}", retries=4, backoff_s=0.02) as c:
        assert c.place(pb.PlaceRequest(), timeout_s=10).result.job == "ok"
    assert f.calls == 4


def test_other_codes_are_not_retried(flaky: Callable[[list[grpc.StatusCode]], _Flaky]) -> None:
    for code in (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.INTERNAL,
    ):
        f = flaky([code] * 3)
        with (
            PlacementClient(f"127.0.0.1:{f.port}", retries=4, backoff_s=0.02) as c,
            pytest.raises(PlacementRpcError) as info,
        ):
            c.place(pb.PlaceRequest(), timeout_s=10)
        assert info.value.code is code and f.calls == 1


def test_retries_stop_at_the_retry_count_and_the_deadline(
    flaky: Callable[[list[grpc.StatusCode]], _Flaky],
) -> None:
    f = flaky([grpc.StatusCode.UNAVAILABLE] * 100)
    with (
        PlacementClient(f"127.0.0.1:{f.port}", retries=2, backoff_s=0.01) as c,
        pytest.raises(PlacementRpcError) as info,
    ):
        c.place(pb.PlaceRequest(), timeout_s=10)
    assert info.value.code is grpc.StatusCode.UNAVAILABLE and f.calls == 3
    f2 = flaky([grpc.StatusCode.UNAVAILABLE] * 100)
    with PlacementClient(f"127.0.0.1:{f2.port}", retries=1000, backoff_s=0.05, max_backoff_s=0.2) as c:
        t0 = time.monotonic()
        with pytest.raises(PlacementRpcError):
            c.place(pb.PlaceRequest(), timeout_s=0.6)
    assert time.monotonic() - t0 < 1.5


def test_a_server_that_starts_late_is_reached_by_retries() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started: list[Any] = []

    def start_later() -> None:
        time.sleep(0.4)
        started.append(running(port=port))
        started[0].__enter__()

    t = threading.Thread(target=start_later)
    t.start()
    try:
        with PlacementClient(f"127.0.0.1:{port}", retries=20, backoff_s=0.1, max_backoff_s=0.3) as c:
            assert c.place(place_request(), timeout_s=30).result.mapping
    finally:
        t.join()
        if started:
            started[0].__exit__(None, None, None)


# ---- request files ------------------------------------------------------------------------------------------


def test_the_example_request_file_reads_native_files_and_works_offline_and_over_the_wire(
    client: PlacementClient,
) -> None:
    req = read_request(EXAMPLES / "request-place.yaml", pb.PlaceRequest)
    assert req.cluster.name == "dgx-h100-4node" and len(req.cluster.generate) == 1
    assert req.job.name == "tp8-dp4" and req.state.occupied[0].job == "tp8-dp4"
    assert req.options.time_limit_s == 5
    res = client.place(req).result
    assert len(res.mapping) == 32


def test_cli_place_request_prints_the_same_step_tables_offline_and_over_the_wire(live: Running) -> None:
    from typer.testing import CliRunner

    from placement.cli.app import app
    from placement.messages.domain import report_from_proto

    request = EXAMPLES / "request-place.yaml"
    runner = CliRunner()
    remote = runner.invoke(
        app,
        [
            "place",
            "--request",
            str(request),
            "--server",
            f"127.0.0.1:{live.port}",
            "--token",
            "tok",
            "--all-candidates",
        ],
    )
    offline = runner.invoke(app, ["place", "--request", str(request), "--all-candidates"])
    placed = json_format.Parse(
        runner.invoke(app, ["place", "--request", str(request), "--output", "json"]).stdout,
        pb.PlaceResponse(),
    ).result
    rep = report_from_proto(placed.cost, placed.breakdown)
    for res in (remote, offline):
        assert res.exit_code == 0, res.output
        head = res.stdout.splitlines()[0]  # the local `place` headline: job, ranks, cluster ... solve time
        assert (
            head.startswith("tp8-dp4 (32 ranks) on dgx-h100-4node: ")
            and f"step {rep.step_seconds:.4f} s" in head
        )
        assert re.search(r", comm bound [^,]+, gap [^,]+, \d+\.\d\d s( \(stopped: [a-z ]+\))?$", head), head
        assert f"exposed comm {rep.comm_seconds:.4f} s" in head
        lines = [line.strip("│ ") for line in res.stdout.splitlines()]
        assert any(line.startswith("MFU") for line in lines) and "critical group" in res.stdout
        for p in rep.phases:
            assert any(line.startswith(p.name + " ") and p.algorithm in line for line in lines)
        for b in placed.baselines:  # one row per baseline (--all-candidates): its step, or why it has none
            row = next(line for line in lines if line.startswith(b.strategy + " "))
            assert f"{b.step_seconds:.4f}" in row if b.HasField("step_seconds") else "no valid mapping" in row


def test_request_file_errors_name_the_file_and_the_field(tmp_path: Path) -> None:
    cases = {
        "typo.yaml": ({"cluster": {"levls": []}}, "cluster", "levls"),
        "type.yaml": ({"job": {"model": {"parameters": "lots"}}}, "job.model.parameters", "lots"),
        "range.yaml": ({"job": {"parallel": {"tp": 2**40}}}, "job.parallel.tp", "out of range"),
        "both.yaml": ({"cluster": {}, "cluster_file": "x.yaml"}, "cluster_file", "not both"),
        "missing.yaml": ({"job_file": "nope.yaml"}, "job_file", "cannot read"),
        "ranks.yaml": ({"job": {"groups": [{"members": "3-1"}]}}, "job.groups[0].members", "bad rank range"),
    }
    for name, (doc, path, words) in cases.items():
        f = tmp_path / name
        f.write_text(yaml.safe_dump(doc))
        with pytest.raises(InputError) as info:
            read_request(f, pb.PlaceRequest)
        err = info.value
        assert err.source == str(f), name
        assert any(p.path.startswith(path) and words in p.message + p.path for p in err.problems), (
            name,
            err.problems,
        )
    broken = tmp_path / "broken.json"
    broken.write_text('{"cluster": ')
    with pytest.raises(InputError, match="line 1"):
        read_request(broken, pb.PlaceRequest)


def test_native_shorthands_become_message_fields(tmp_path: Path) -> None:
    cluster = {
        "name": "m",
        "levels": [{"name": "node", "bandwidth_gbps": 100}],
        "node_types": [{"name": "t", "matrix": [["X", "NV4"], ["NV4", "X"]], "rails": [0, None]}],
        "generate": {"nodes": 1, "node_type": "t"},
    }
    job = {"ranks": 2, "groups": [{"members": "0-1", "bytes": 1e6}]}
    req = request_from_dict({"cluster": cluster, "job": job}, pb.PlaceRequest)
    assert list(req.cluster.node_types[0].matrix) == ["X NV4", "NV4 X"]
    assert list(req.cluster.node_types[0].rails) == [0, -1]
    assert len(req.cluster.generate) == 1 and list(req.job.groups[0].members) == [0, 1]


@pytest.mark.skipif(not SMI.exists(), reason="shared nvidia-smi samples are absent (../shared/data)")
def test_an_nvidia_smi_file_in_a_cluster_file_is_inlined(tmp_path: Path) -> None:
    (tmp_path / "topo.txt").write_text(SMI.read_text())
    (tmp_path / "cluster.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "hgx",
                "levels": [{"name": "node", "bandwidth_gbps": 450}, {"name": "leaf", "bandwidth_gbps": 50}],
                "node_types": [{"name": "hgx", "nvidia_smi": "topo.txt"}],
                "generate": {"nodes": 2, "node_type": "hgx"},
            }
        )
    )
    (tmp_path / "req.yaml").write_text(yaml.safe_dump({"cluster_file": "cluster.yaml"}))
    req = read_request(tmp_path / "req.yaml", pb.PlaceRequest)
    nt = req.cluster.node_types[0]
    assert len(nt.matrix) == 8 and nt.matrix[0].split()[0] == "X" and len(nt.rails) == 8


def test_compare_job_files_and_evaluate_mapping_file_from_a_written_result(
    tmp_path: Path, client: PlacementClient
) -> None:
    (tmp_path / "cmp.yaml").write_text(
        yaml.safe_dump(
            {
                "cluster_file": str(EXAMPLES / "dgx-h100-4node.yaml"),
                "job_files": [str(EXAMPLES / "tp8-dp4.yaml")],
                "jobs": [job_doc(8, 2)],
            }
        )
    )
    creq = read_request(tmp_path / "cmp.yaml", pb.CompareRequest)
    assert [j.name for j in creq.jobs] == ["tp8-dp2-pp1", "tp8-dp4"]

    placed = client.place(example_request())
    write_message(placed, tmp_path / "placed.yaml")
    write_message(placed, tmp_path / "placed.json")
    assert json.loads((tmp_path / "placed.json").read_text())["result"]["job"] == "tp8-dp4"
    for name in ("placed.yaml", "placed.json"):
        (tmp_path / "ev.yaml").write_text(
            yaml.safe_dump(
                {
                    "cluster_file": str(EXAMPLES / "dgx-h100-4node.yaml"),
                    "job_file": str(EXAMPLES / "tp8-dp4.yaml"),
                    "mapping_file": name,
                }
            )
        )
        ereq = read_request(tmp_path / "ev.yaml", pb.EvaluateRequest)
        assert client.evaluate(ereq).seconds_per_step == pytest.approx(placed.result.seconds_per_step)
    # a plain list of devices is a mapping too
    ereq = request_from_dict(
        {
            "cluster_file": "dgx-h100-4node.yaml",
            "job_file": "tp8-dp4.yaml",
            "mapping": [a.device for a in placed.result.mapping],
        },
        pb.EvaluateRequest,
        base_dir=EXAMPLES,
    )
    assert client.evaluate(ereq).seconds_per_step == pytest.approx(placed.result.seconds_per_step)


def test_results_round_trip_through_json_and_yaml(client: PlacementClient) -> None:
    placed = client.place(place_request())
    assert placed.result.HasField("cost")
    for fmt in ("json", "yaml"):
        text = dump_message(placed, fmt)
        parsed = json_format.ParseDict(yaml.safe_load(text), pb.PlaceResponse())
        assert parsed == placed
        assert (
            "step_seconds" in text and "comm_seconds_total" in text
        )  # the protobuf JSON names, as in the proto
    with pytest.raises(ValueError):
        dump_message(placed, "xml")


@pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl command to make a test certificate"
)
def test_tls_with_a_token(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    with running(tls_cert=str(cert), tls_key=str(key), token="tok") as r:
        with PlacementClient(f"localhost:{r.port}", root_certificates=cert.read_bytes(), token="tok") as c:
            assert c.place(place_request()).result.mapping
        with (
            PlacementClient(f"localhost:{r.port}", token="tok", retries=0) as plain,
            pytest.raises(PlacementRpcError) as info,
        ):
            plain.place(place_request(), timeout_s=5)
        assert info.value.code is grpc.StatusCode.UNAVAILABLE  # a plaintext client cannot talk to it


def test_place_json_is_one_schema_offline_from_files_from_a_request_and_over_the_wire(
    live: Running, tmp_path: Path
) -> None:
    """`place --output json` writes the PlaceResponse JSON mapping whichever way the job arrives: native files,
    a request file offline, or the same request over the wire. Deterministic time: the same answer each way."""
    from typer.testing import CliRunner

    from placement.cli.app import app

    state = {
        "occupied": [{"job": "tp8-dp4", "devices": ["node01", "node02"]}],
        "degraded": [{"device": "node02/gpu3", "slowdown": 1.5}],
    }
    (tmp_path / "state.yaml").write_text(yaml.safe_dump(state))
    request = tmp_path / "request.yaml"
    request.write_text(
        yaml.safe_dump(
            {
                "cluster_file": str(EXAMPLES / "dgx-h100-4node.yaml"),
                "job_file": str(EXAMPLES / "tp8-dp4.yaml"),
                "state": state,
                "options": {"time_limit_s": 2, "seed": 0, "deterministic": True},
            }
        )
    )
    runner = CliRunner()
    outputs = {
        "files": runner.invoke(
            app,
            [
                "place",
                str(EXAMPLES / "dgx-h100-4node.yaml"),
                str(EXAMPLES / "tp8-dp4.yaml"),
                "--state",
                str(tmp_path / "state.yaml"),
                "--time-limit",
                "2",
                "--seed",
                "0",
                "--deterministic",
                "--output",
                "json",
            ],
        ),
        "request": runner.invoke(app, ["place", "--request", str(request), "--output", "json"]),
        "remote": runner.invoke(
            app,
            [
                "place",
                "--request",
                str(request),
                "--server",
                f"127.0.0.1:{live.port}",
                "--token",
                "tok",
                "--output",
                "json",
            ],
        ),
        # CLUSTER JOB sent to the server named by PLACEMENT_SERVER (as `-s` and --server would)
        "remote files": runner.invoke(
            app,
            [
                "place",
                str(EXAMPLES / "dgx-h100-4node.yaml"),
                str(EXAMPLES / "tp8-dp4.yaml"),
                "--state",
                str(tmp_path / "state.yaml"),
                "--time-limit",
                "2",
                "--seed",
                "0",
                "--deterministic",
                "--output",
                "json",
            ],
            env={"PLACEMENT_SERVER": f"127.0.0.1:{live.port}", "PLACEMENT_TOKEN": "tok"},
        ),
    }
    docs = {}
    for how, res in outputs.items():
        assert res.exit_code == 0, (how, res.output)
        doc = json.loads(res.stdout)
        json_format.ParseDict(doc, pb.PlaceResponse())  # the schema: it parses back as a PlaceResponse
        assert set(doc) == {"result"}, how
        stats = doc["result"][
            "stats"
        ]  # wall times measure the machine, not the answer: the only fields left out
        stats.pop("wall_s")
        stats["values"] = {k: v for k, v in stats["values"].items() if not k.endswith("wall_s")}
        docs[how] = doc
    assert docs["files"]["result"]["mapping"] and docs["files"]["result"]["cost"]["step_seconds"] > 0
    assert docs["files"] == docs["request"] == docs["remote"] == docs["remote files"]
    # the files went to the server: with a wrong token it refuses them (exit code 4: the call failed)
    refused = runner.invoke(
        app,
        [
            "place",
            str(EXAMPLES / "dgx-h100-4node.yaml"),
            str(EXAMPLES / "tp8-dp4.yaml"),
            "-s",
            f"127.0.0.1:{live.port}",
        ],
        env={"PLACEMENT_TOKEN": "wrong"},
    )
    assert refused.exit_code == 4 and "UNAUTHENTICATED" in refused.stderr, refused.output
