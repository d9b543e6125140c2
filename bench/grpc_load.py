"""Bounded gRPC load on loopback: N clients for T seconds against a placement server, a 64-rank Place request.

Prints the overhead of a call over the same work in process (paired, alternating calls) and a load table
(throughput, p50/p99). Bounded in time and calls; stops by itself. Run: ``python bench/grpc_load.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from placement.requests import request_from_dict  # noqa: E402
from placement.solve import place  # noqa: E402
from placement.v1 import placement_pb2 as pb  # noqa: E402
from placement.v1 import placement_pb2_grpc as pb_grpc  # noqa: E402
from server import convert  # noqa: E402

__all__ = ["in_process_once", "main", "request_64_ranks"]


def request_64_ranks() -> pb.PlaceRequest:
    """TP=8 x DP=4 x PP=2 (64 ranks) on 16 DGX-like nodes (128 GPUs, 4 per leaf), 2 nodes partly busy."""
    cluster = {
        "name": "bench-128",
        "levels": [{"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
                   {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
                   {"name": "spine", "bandwidth_gbps": 25, "latency_us": 10}],
        "generate": [{"nodes": 16, "devices": 8, "kind": "H100", "fanout": {"leaf": 4}}],
    }
    job = {"name": "tp8-dp4-pp2", "device_kind": "H100", "parallel": {"tp": 8, "dp": 4, "pp": 2},
           "model": {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096, "micro_batches": 8},
           "constraints": {"require": {"tp": "node"}}}
    state = {"occupied": [{"job": "other", "devices": ["node03/gpu0", "node03/gpu1", "node09/gpu7"]}]}
    return request_from_dict({"cluster": cluster, "state": state, "job": job,
                              "options": {"time_limit_s": 10, "seed": 0}}, pb.PlaceRequest)


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def in_process_once(req: pb.PlaceRequest) -> float:
    """Seconds of the server's work without gRPC: request -> domain -> place -> serialized result message."""
    t0 = time.perf_counter()
    inputs = convert.place_inputs(req)
    res = place(inputs.topology, inputs.state, inputs.job, inputs.options)
    pb.PlaceResponse(result=convert.result_to_proto(inputs.topology, inputs.job, res,
                                                   time_limit_s=inputs.options.time_limit_s,
                                                   deadline_limited=False)).SerializeToString()
    return time.perf_counter() - t0


def paired(target: str, req: pb.PlaceRequest, pairs: int) -> tuple[list[float], list[float]]:
    """Alternate one in-process solve and one call (one client), so both see the same background load."""
    local, remote = [], []
    with grpc.insecure_channel(target) as ch:
        stub = pb_grpc.PlacementServiceStub(ch)
        for _ in range(pairs):
            local.append(in_process_once(req))
            t0 = time.perf_counter()
            stub.Place(req, timeout=60)
            remote.append(time.perf_counter() - t0)
    return local, remote


def load(target: str, req: pb.PlaceRequest, clients: int, seconds: float, max_calls: int) -> tuple[list[float], int, float]:
    """`clients` threads, each with its own channel, calling Place back to back until the time or call budget
    is spent. Returns latencies, errors and the wall time."""
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
                t0 = time.perf_counter()
                try:
                    stub.Place(req, timeout=60)
                except grpc.RpcError:
                    with lock:
                        errors[0] += 1
                    continue
                with lock:
                    latencies.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, errors[0], time.monotonic() - t0


def start_server(workers: int | None) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PLACEMENT_PORT": "0", "PLACEMENT_METRICS_PORT": "-1", "PLACEMENT_LOG_LEVEL": "WARNING"}
    if workers:
        env["PLACEMENT_WORKERS"] = str(workers)
    proc = subprocess.Popen([sys.executable, "-m", "server.main", "--host", "127.0.0.1", "--log-level", "INFO"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        rec = json.loads(line)
        if rec.get("msg") == "serving":
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep draining the pipe
            return proc, f"127.0.0.1:{rec['port']}"
    raise SystemExit("the server did not start")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--clients", type=int, default=4, help="concurrent clients of the load run (default 4)")
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each load run (default 5, max 60)")
    ap.add_argument("--max-calls", type=int, default=2000, help="call budget of each load run (default 2000)")
    ap.add_argument("--pairs", type=int, default=40, help="alternating in-process/gRPC pairs for the overhead")
    ap.add_argument("--target", help="an already running server (default: start one on loopback)")
    ap.add_argument("--workers", type=int, help="PLACEMENT_WORKERS of the started server (default: cores)")
    args = ap.parse_args(argv)
    seconds = min(args.seconds, 60.0)
    req = request_64_ranks()
    proc = None
    target = args.target
    if target is None:
        proc, target = start_server(args.workers)
    try:
        paired(target, req, 5)  # warm up both sides
        local, remote = paired(target, req, args.pairs)
        rows = []
        for clients in sorted({1, args.clients}):
            lat, errors, wall = load(target, req, clients, seconds, args.max_calls)
            rows.append((clients, len(lat), errors, len(lat) / wall, _pct(lat, 0.5), _pct(lat, 0.99)))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    overhead = statistics.median([r - loc for loc, r in zip(local, remote, strict=True)])
    print(f"64-rank Place (tp8-dp4-pp2 on 128 GPUs), loopback, {os.cpu_count()} cores, {seconds:g} s per load run")
    print()
    print("| path | calls | p50 (ms) | p99 (ms) |")
    print("|------|------:|---------:|---------:|")
    print(f"| in-process (convert, place, result message) | {len(local)} | {_pct(local, 0.5) * 1e3:.1f} | "
          f"{_pct(local, 0.99) * 1e3:.1f} |")
    print(f"| gRPC, 1 client, alternating with the above | {len(remote)} | {_pct(remote, 0.5) * 1e3:.1f} | "
          f"{_pct(remote, 0.99) * 1e3:.1f} |")
    print(f"| **overhead of gRPC, p50 of paired differences** | {len(local)} | **{overhead * 1e3:+.1f}** | |")
    print()
    print("| clients | calls | errors | throughput (calls/s) | p50 (ms) | p99 (ms) |")
    print("|--------:|------:|-------:|---------------------:|---------:|---------:|")
    for clients, calls, errors, tput, p50, p99 in rows:
        print(f"| {clients} | {calls} | {errors} | {tput:.1f} | {p50 * 1e3:.1f} | {p99 * 1e3:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
