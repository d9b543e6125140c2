"""Bounded gRPC load on loopback: N clients for T seconds against a placement server, a 64-rank Place request.

Prints the overhead of a call over the same solve in process, and a load table (throughput, p50/p99).
Bounded in time and calls; stops by itself. Run: ``python bench/grpc_load.py [--clients 4 --seconds 5]``.

``--scenario scheduler-loop`` (issue 23): `make run`'s request (llama-13b TP8 x PP2 x DP4 on h100-256 with its busy
state, deterministic CP-SAT) repeated as a scheduler sends it, by value and by `cluster_id` (registry), in process
and thread solve mode, 1, 4 and 16 clients; the first call of a fresh server (cold) and load runs after a
warm-up. ``--requests repeated``: the same request every call, every answer checked against `make run`'s
answer solved in process (mapping, status, numbers; timings aside): after the first call a solve worker answers
from its answer memo (`server.memo`; the memo hits column counts them). ``--requests distinct``: every call
another state (one or two more busy devices, never the same request twice: every call a real solve), each answer
checked against that request's own answer solved in process.
``--scenario modes-ab``: the same request on a thread-mode and a process-mode server side by side, short runs
alternating between them (the fair comparison on a shared machine).

Overhead is measured two ways, because other processes share the cores:
- per call: its latency at the client minus the time the server spent in `place` for it (from the server's
  JSON log, matched by x-request-id): what gRPC, conversion and the pool hand-off add to that very solve;
- paired: one in-process solve (same options as the server), then one call, alternating; p50 of differences.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
import yaml  # noqa: E402

from placement.decide.wait import decide  # noqa: E402
from placement.messages import domain as convert  # noqa: E402
from placement.messages.files import request_from_dict  # noqa: E402
from placement.solve.units import candidate_devices  # noqa: E402
from placement.v1 import placement_pb2 as pb  # noqa: E402
from placement.v1 import placement_pb2_grpc as pb_grpc  # noqa: E402
from placement.v1 import registry_pb2 as rpb  # noqa: E402
from placement.v1 import registry_pb2_grpc as rpb_grpc  # noqa: E402
from server.settings import Settings  # noqa: E402

__all__ = ["in_process_once", "main", "request_64_ranks"]


def request_64_ranks() -> pb.PlaceRequest:
    """TP=8 x DP=4 x PP=2 (64 ranks) on 16 DGX-like nodes (128 GPUs, 4 per leaf), 2 nodes partly busy."""
    cluster = {
        "name": "bench-128",
        "levels": [
            {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
            {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
            {"name": "spine", "bandwidth_gbps": 25, "latency_us": 10},
        ],
        "generate": [{"nodes": 16, "devices": 8, "kind": "H100", "fanout": {"leaf": 4}}],
    }
    job = {
        "name": "tp8-dp4-pp2",
        "device_kind": "H100",
        "parallel": {"tp": 8, "dp": 4, "pp": 2},
        "model": {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096, "micro_batches": 8},
        "constraints": {"require": {"tp": "node"}},
    }
    state = {"occupied": [{"job": "other", "devices": ["node03/gpu0", "node03/gpu1", "node09/gpu7"]}]}
    return request_from_dict(
        {"cluster": cluster, "state": state, "job": job, "options": {"time_limit_s": 10, "seed": 0}},
        pb.PlaceRequest,
    )


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def in_process_once(req: pb.PlaceRequest, workers: int) -> float:
    """Seconds of the server's work without gRPC: request -> domain -> place and verdict -> serialized result message."""
    t0 = time.perf_counter()
    inputs = convert.place_inputs(req)
    inputs.options.workers = workers
    res = decide(inputs.topology, inputs.state, inputs.job, inputs.options, max_slowdown=inputs.max_slowdown)
    pb.PlaceResponse(
        result=convert.result_to_proto(
            inputs.topology, inputs.job, res, time_limit_s=inputs.options.time_limit_s, deadline_limited=False
        )
    ).SerializeToString()
    return time.perf_counter() - t0


def in_process_answer(req: pb.PlaceRequest, workers: int) -> bytes:
    """The answer the server gives `req` (no deadline, `workers` CP-SAT threads), solved here: `answer_bytes`."""
    inputs = convert.place_inputs(req, Settings().default_time_limit_s)
    inputs.options.workers = workers
    # the servicer's call: place, then the verdict against the job's ideal (`placement.decide.wait.decide`)
    res = decide(inputs.topology, inputs.state, inputs.job, inputs.options, max_slowdown=inputs.max_slowdown)
    result = convert.result_to_proto(
        inputs.topology, inputs.job, res, time_limit_s=inputs.options.time_limit_s, deadline_limited=False
    )
    return answer_bytes(pb.PlaceResponse(result=result))


def distinct_requests(base: pb.PlaceRequest, count: int, workers: int) -> list[tuple[pb.PlaceRequest, bytes]]:
    """`count` requests that differ from `base` by one or two more busy devices (free devices the job may use:
    first each alone, then pairs), each with its answer solved in process: no two are the same request, so a
    server answers every one with a real solve."""
    inputs = convert.place_inputs(base, Settings().default_time_limit_s)
    topo = inputs.topology
    free = [topo.devices[d].id for d in candidate_devices(topo, inputs.state, inputs.job)]
    picks: list[tuple[str, ...]] = [(d,) for d in free] + list(combinations(free, 2))
    out = []
    for devs in picks[:count]:
        req = pb.PlaceRequest()
        req.CopyFrom(base)
        req.state.occupied.add(job="bench-other", devices=list(devs))
        out.append((req, in_process_answer(req, workers)))
    return out


class Server:
    """A `python -m server.main` child on a free loopback port; its `placed` log lines give solve_s per request id."""

    def __init__(
        self, workers: int | None, solve_mode: str | None = None, registry: str | None = None
    ) -> None:
        env = {**os.environ, "PLACEMENT_PORT": "0", "PLACEMENT_METRICS_PORT": "-1"}
        if workers:
            env["PLACEMENT_WORKERS"] = str(workers)
        if solve_mode:
            env["PLACEMENT_SOLVE_MODE"] = solve_mode
        env["PLACEMENT_REGISTRY"] = registry or "off"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.main", "--host", "127.0.0.1"],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.solve_s: dict[str, float] = {}
        self.solve_log: list[float] = []  # solve_s of every placed call, in log order
        self.statuses: dict[str, int] = {}
        self.memo_log: list[bool] = []  # per placed call: answered from the worker's answer memo
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            rec = json.loads(line)
            if rec.get("msg") == "serving":
                self.target = f"127.0.0.1:{rec['port']}"
                self.workers = int(rec["workers"])
                break
        else:
            raise SystemExit("the server did not start")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            rec = json.loads(line)
            if rec.get("msg") == "placed":
                self.solve_s[rec["request_id"]] = float(rec["solve_s"])
                self.solve_log.append(float(rec["solve_s"]))
                self.memo_log.append(bool(rec.get("memo")))
                self.statuses[rec["status"]] = self.statuses.get(rec["status"], 0) + 1

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=5)


def paired(
    target: str, req: pb.PlaceRequest, pairs: int, workers: int
) -> tuple[list[float], list[tuple[str, float]]]:
    """Alternate one in-process solve and one call (one client), so both see the same background load."""
    local: list[float] = []
    remote: list[tuple[str, float]] = []
    with grpc.insecure_channel(target) as ch:
        stub = pb_grpc.PlacementServiceStub(ch)
        for _ in range(pairs):
            local.append(in_process_once(req, workers))
            rid = uuid.uuid4().hex
            t0 = time.perf_counter()
            stub.Place(req, timeout=60, metadata=[("x-request-id", rid)])
            remote.append((rid, time.perf_counter() - t0))
    return local, remote


def answer_bytes(resp: pb.PlaceResponse) -> bytes:
    """An answer without its timings (wall seconds, solver statistics): what must not change between calls."""
    out = pb.PlaceResponse()
    out.CopyFrom(resp)
    out.result.ClearField("stats")
    return out.SerializeToString(deterministic=True)


def load(
    target: str,
    req: pb.PlaceRequest,
    clients: int,
    seconds: float,
    max_calls: int,
    expected: bytes | None = None,
    mismatches: list[int] | None = None,
    distinct: Iterator[tuple[pb.PlaceRequest, bytes]] | None = None,
) -> tuple[list[float], int, float]:
    """`clients` threads, each with its own channel, calling Place back to back until the time or call budget
    is spent. Returns latencies, errors and the wall time; an answer other than `expected` (timings aside)
    counts in `mismatches[0]`. With `distinct`, every call takes the next (request, its expected answer) from it
    instead (and stops when it runs out)."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    budget = [max_calls]
    stop_at = time.monotonic() + seconds

    def worker() -> None:
        with grpc.insecure_channel(target) as ch:
            stub = pb_grpc.PlacementServiceStub(ch)
            while time.monotonic() < stop_at:
                with lock:
                    if budget[0] <= 0:
                        return
                    budget[0] -= 1
                    this, want = req, expected
                    if distinct is not None:
                        nxt = next(distinct, None)
                        if nxt is None:
                            return
                        this, want = nxt
                t0 = time.perf_counter()
                try:
                    resp = stub.Place(this, timeout=60)
                except grpc.RpcError:
                    with lock:
                        errors[0] += 1
                    continue
                dt = time.perf_counter() - t0
                with lock:
                    latencies.append(dt)
                    if want is not None and mismatches is not None and answer_bytes(resp) != want:
                        mismatches[0] += 1

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, errors[0], time.monotonic() - t0


def _ms(x: float) -> str:
    return f"{x * 1e3:.1f}"


def make_run_request() -> pb.PlaceRequest:
    """`make run`'s request: examples/h100-256.yaml, h100-256-busy.yaml, llama-13b-tp8-pp2-dp4.yaml; deterministic
    CP-SAT, time limit 5 s."""
    ex = ROOT / "examples"
    return request_from_dict(
        {
            "cluster": yaml.safe_load((ex / "h100-256.yaml").read_text()),
            "state": yaml.safe_load((ex / "h100-256-busy.yaml").read_text()),
            "job": yaml.safe_load((ex / "llama-13b-tp8-pp2-dp4.yaml").read_text()),
            "options": {"time_limit_s": 5, "deterministic": True, "strategy": "cpsat"},
        },
        pb.PlaceRequest,
    )


def by_cluster_id(target: str, req: pb.PlaceRequest) -> pb.PlaceRequest:
    """Put the request's cluster and state in the server's registry; the same request naming it by id."""
    with grpc.insecure_channel(target) as ch:
        reg = rpb_grpc.ClusterRegistryStub(ch)
        reg.PutCluster(rpb.PutClusterRequest(cluster_id="bench", cluster=req.cluster), timeout=60)
        reg.UpdateState(rpb.UpdateStateRequest(cluster_id="bench", generation=1, state=req.state), timeout=60)
    return pb.PlaceRequest(cluster_id="bench", job=req.job, options=req.options)


def scheduler_loop(args: argparse.Namespace) -> int:
    """The scheduler-loop scenario (module docstring)."""
    seconds = min(args.seconds, 60.0)
    load_before = os.getloadavg()
    base = make_run_request()
    first: bytes | None = None
    rows: list[tuple[str, str, str, int, int, int, int, int, float, float, float, float]] = []
    modes = [m for m in args.modes.split(",") if m]
    ways = [w for w in args.by.split(",") if w]
    kinds = [k for k in args.requests.split(",") if k]
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            for way in ways:
                for kind in kinds:
                    if kind == "distinct" and way != "value":
                        continue  # distinct states are sent by value
                    server = Server(args.workers, mode, f"sqlite:///{tmp}/{mode}-{way}-{kind}.db")
                    try:
                        rows += _loop_rows(args, server, mode, way, kind, base, seconds, first)
                        first = first if first is not None else in_process_answer(base, _threads(server))
                    finally:
                        server.stop()
    print(
        f"scheduler loop: make run's Place (64 ranks, h100-256 + busy state, deterministic cpsat), loopback, "
        f"{os.cpu_count()} cores, server workers {args.workers or 'cores'}, warm runs of {seconds:g} s; "
        f"load average before: {' '.join(f'{x:.2f}' for x in load_before)}"
    )
    print()
    print(
        "| solve mode | request | requests | run | clients | calls | errors | answers != expected | memo hits | "
        "calls/s | p50 (ms) | p99 (ms) | server-side place p50 (ms) |"
    )
    print("|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for mode, way, kind, run, n, calls, errors, mism, hits, tput, p50, p99, solve in rows:
        tp = f"{tput:.1f}" if tput else "-"
        print(
            f"| {mode} | {way} | {kind} | {run} | {n} | {calls} | {errors} | {mism} | {hits} | {tp} | {_ms(p50)} | "
            f"{_ms(p99)} | {_ms(solve)} |"
        )
    print()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def _threads(server: Server) -> int:
    """CP-SAT threads per solve of `server` (as it computes them)."""
    return Settings(workers=server.workers).threads_per_solve


def _loop_rows(
    args: argparse.Namespace,
    server: Server,
    mode: str,
    way: str,
    kind: str,
    base: pb.PlaceRequest,
    seconds: float,
    first: bytes | None,
) -> list[tuple[str, str, str, str, int, int, int, int, int, float, float, float, float]]:
    """A cold call and warm runs with 1, 4 and 16 clients on `server`. ``repeated``: `base` again and again,
    every answer checked against `base`'s answer; ``distinct``: every call another state (one or two more busy
    devices, never the same request twice), every answer checked against its own request's answer solved in
    process."""
    threads = _threads(server)
    expected = first if first is not None else in_process_answer(base, threads)
    stream: Iterator[tuple[pb.PlaceRequest, bytes]] | None = None
    if kind == "distinct":
        need = 1 + 2 * server.workers + 3 * args.max_calls
        stream = iter(distinct_requests(base, need, threads))
        req, expected = next(stream)
    else:
        req = by_cluster_id(server.target, base) if way == "cluster_id" else base
    out = []
    with grpc.insecure_channel(server.target) as ch:
        stub = pb_grpc.PlacementServiceStub(ch)
        t0 = time.perf_counter()
        resp = stub.Place(req, timeout=120)  # cold: the server's first call
        cold = time.perf_counter() - t0
    time.sleep(0.2)  # its log line
    solve0 = server.solve_log[0] if server.solve_log else math.nan
    mism0 = int(answer_bytes(resp) != expected)
    out.append(
        (mode, way, kind, "cold (first call)", 1, 1, 0, mism0, sum(server.memo_log), 0.0, cold, cold, solve0)
    )
    # warm-up: every worker has solved once (repeated: the memo holds the answer from here on)
    load(server.target, req, server.workers, 60.0, 2 * server.workers, distinct=stream)
    for n in (1, 4, 16):
        mism = [0]
        k = len(server.solve_log)
        lat, errors, wall = load(
            server.target, req, n, seconds, args.max_calls, expected, mism, distinct=stream
        )
        time.sleep(0.2)  # the last log lines
        solve = server.solve_log[k:]
        hits = sum(server.memo_log[k:])
        out.append(
            (mode, way, kind, "warm", n, len(lat), errors, mism[0], hits, len(lat) / wall,
             _pct(lat, 0.5), _pct(lat, 0.99), _pct(solve, 0.5) if solve else math.nan)
        )  # fmt: skip
    return out


def modes_ab(args: argparse.Namespace) -> int:
    """Thread and process mode side by side: both servers up, short load runs alternating between them, so that
    both see the same background load; medians over the rounds."""
    seconds = min(args.seconds, 60.0)
    req = make_run_request()
    servers = {mode: Server(args.workers, mode, "off") for mode in ("thread", "process")}
    got: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    first: bytes | None = None
    bad = 0
    try:
        for server in servers.values():  # warm-up, and the reference answer
            with grpc.insecure_channel(server.target) as ch:
                answer = answer_bytes(pb_grpc.PlacementServiceStub(ch).Place(req, timeout=120))
            first = first if first is not None else answer
            bad += answer != first
            load(server.target, req, server.workers, 60.0, 2 * server.workers)
        for _ in range(args.rounds):
            for n in (1, 4):
                for mode, server in servers.items():
                    mism = [0]
                    lat, _, wall = load(server.target, req, n, seconds, args.max_calls, first, mism)
                    bad += mism[0]
                    got.setdefault((mode, n), []).append((len(lat) / wall, _pct(lat, 0.5), _pct(lat, 0.99)))
    finally:
        for server in servers.values():
            server.stop()
    print(
        f"thread vs process, alternating runs of {seconds:g} s, {args.rounds} rounds, make run's request; "
        f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; answers != first: {bad}"
    )
    print()
    print("| solve mode | clients | calls/s per round | median calls/s | median p50 (ms) | median p99 (ms) |")
    print("|---|--:|---|--:|--:|--:|")
    for (mode, n), runs in sorted(got.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        tputs = ", ".join(f"{t:.1f}" for t, _, _ in runs)
        med = [statistics.median(r[i] for r in runs) for i in range(3)]
        print(f"| {mode} | {n} | {tputs} | {med[0]:.1f} | {_ms(med[1])} | {_ms(med[2])} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--scenario", choices=["overhead", "scheduler-loop", "modes-ab"], default="overhead")
    ap.add_argument("--rounds", type=int, default=4, help="modes-ab: alternating rounds (default 4)")
    ap.add_argument("--modes", default="process,thread", help="scheduler-loop: solve modes (process,thread)")
    ap.add_argument(
        "--requests",
        default="repeated,distinct",
        help="scheduler-loop: the same request again (memo hits) and/or distinct states (every call a solve)",
    )
    ap.add_argument(
        "--by", default="value,cluster_id", help="scheduler-loop: requests by value and/or cluster_id"
    )
    ap.add_argument(
        "--clients", type=int, default=4, help="concurrent clients of the load run (default 4, max 64)"
    )
    ap.add_argument(
        "--seconds", type=float, default=5.0, help="duration of each load run (default 5, max 60)"
    )
    ap.add_argument("--max-calls", type=int, default=2000, help="call budget of each load run (default 2000)")
    ap.add_argument(
        "--pairs", type=int, default=40, help="alternating in-process/gRPC pairs (default 40, max 500)"
    )
    ap.add_argument("--workers", type=int, help="PLACEMENT_WORKERS of the server (default: the cores)")
    args = ap.parse_args(argv)
    if args.scenario == "scheduler-loop":
        return scheduler_loop(args)
    if args.scenario == "modes-ab":
        return modes_ab(args)
    seconds, clients, pairs = (
        min(args.seconds, 60.0),
        max(1, min(args.clients, 64)),
        max(1, min(args.pairs, 500)),
    )
    req = request_64_ranks()
    server = Server(args.workers)
    threads = Settings(workers=server.workers).threads_per_solve  # CP-SAT threads per solve, as in the server
    try:
        paired(server.target, req, 5, threads)  # warm up both sides
        local, remote = paired(server.target, req, pairs, threads)
        rows = []
        for n in sorted({1, clients}):
            lat, errors, wall = load(server.target, req, n, seconds, args.max_calls)
            rows.append((n, len(lat), errors, len(lat) / wall, _pct(lat, 0.5), _pct(lat, 0.99)))
    finally:
        server.stop()
    remote_s = [s for _, s in remote]
    solve_s = [server.solve_s[rid] for rid, _ in remote if rid in server.solve_s]
    per_call = [s - server.solve_s[rid] for rid, s in remote if rid in server.solve_s]
    diffs = [r - loc for loc, r in zip(local, remote_s, strict=True)]
    print(
        f"64-rank Place (tp8-dp4-pp2 on 128 GPUs), loopback, {os.cpu_count()} cores, server workers "
        f"{server.workers} x {threads} CP-SAT thread(s), load runs of {seconds:g} s"
    )
    print()
    print("| measure | calls | p50 (ms) | p99 (ms) |")
    print("|---------|------:|---------:|---------:|")
    print(
        f"| in-process: convert, place, result message | {len(local)} | {_ms(_pct(local, 0.5))} | "
        f"{_ms(_pct(local, 0.99))} |"
    )
    print(
        f"| gRPC call, 1 client (alternating with the row above) | {len(remote_s)} | {_ms(_pct(remote_s, 0.5))} | "
        f"{_ms(_pct(remote_s, 0.99))} |"
    )
    print(
        f"| server-side `place` of those calls | {len(solve_s)} | {_ms(_pct(solve_s, 0.5))} | "
        f"{_ms(_pct(solve_s, 0.99))} |"
    )
    print(
        f"| **overhead per call: latency - its server-side place** | {len(per_call)} | "
        f"**{_ms(statistics.median(per_call))}** | {_ms(_pct(per_call, 0.99))} |"
    )
    print(
        f"| overhead paired: call - in-process (noisier) | {len(diffs)} | {_ms(statistics.median(diffs))} | "
        f"{_ms(_pct(diffs, 0.99))} |"
    )
    print()
    print("| clients | calls | errors | throughput (calls/s) | p50 (ms) | p99 (ms) |")
    print("|--------:|------:|-------:|---------------------:|---------:|---------:|")
    for n, calls, errors, tput, p50, p99 in rows:
        print(f"| {n} | {calls} | {errors} | {tput:.1f} | {_ms(p50)} | {_ms(p99)} |")
    print()
    print("solve status of every answered call:", dict(sorted(server.statuses.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
