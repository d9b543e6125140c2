"""Soak: mixed valid and hostile gRPC traffic from many clients against a placement-server subprocess.

Records latency p50/p99 per kind, status codes, how far calls run past their deadline, the server's RSS over
time, the conversion time of 16,384 pins, and whether a valid Place answers correctly at the end; writes
bench/SOAK_RESULTS.md. Run: ``nice -n 10 python bench/soak.py --seconds 600 --clients 64``.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from google.rpc import error_details_pb2  # noqa: E402
from grpc_status import rpc_status  # noqa: E402

from placement.messages import domain as convert  # noqa: E402
from placement.messages.files import request_from_dict  # noqa: E402
from placement.v1 import placement_pb2 as pb  # noqa: E402
from placement.v1 import placement_pb2_grpc as pb_grpc  # noqa: E402

__all__ = ["main"]


def _cluster(nodes: int, gpus: int = 8) -> dict[str, Any]:
    return {
        "name": f"c{nodes}",
        "levels": [
            {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
            {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
            {"name": "spine", "bandwidth_gbps": 25, "latency_us": 10},
        ],
        "generate": [{"nodes": nodes, "devices": gpus, "kind": "H100", "fanout": {"leaf": 4}}],
    }


def _job(tp: int, dp: int) -> dict[str, Any]:
    return {
        "name": f"tp{tp}-dp{dp}",
        "device_kind": "H100",
        "parallel": {"tp": tp, "dp": dp},
        "model": {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096, "micro_batches": 8},
        "constraints": {"require": {"tp": "node"}},
    }


def valid_place() -> pb.PlaceRequest:
    return request_from_dict(
        {"cluster": _cluster(4), "job": _job(4, 2), "options": {"time_limit_s": 1.0}}, pb.PlaceRequest
    )


def pins_place(n: int = 16_384) -> pb.PlaceRequest:
    req = request_from_dict(
        {"cluster": _cluster(n // 8), "job": _job(8, n // 8), "options": {"time_limit_s": 1.0}},
        pb.PlaceRequest,
    )
    for r in range(n):
        req.job.constraints.pins[r] = f"node{r // 8 + 1:04d}/gpu{r % 8}"
    return req


def hostile() -> dict[str, Any]:
    """Request builders by kind: (method, request or raw bytes, deadline s, cancel after s or None)."""
    base = valid_place()
    ev = pb.EvaluateRequest(
        cluster=base.cluster, job=base.job, mapping=[pb.Assignment(rank=30_000_000, device="node01/gpu0")]
    )
    big_rank = pb.PlaceRequest()
    big_rank.CopyFrom(base)
    big_rank.job.parallel.dp = 2**31 - 1
    fds = pb.PlaceRequest()
    fds.CopyFrom(pins_place(4096))
    fds.job.constraints.ClearField("pins")
    for i in range(12_000):
        fds.state.fault_domains.add(kind="power", name=f"p{i}", members=[f"node{i % 512 + 1:04d}/gpu{i % 8}"])
    matrix = pb.PlaceRequest()
    matrix.CopyFrom(base)
    row = " ".join(["NV4"] * 700)
    nt = matrix.cluster.node_types.add(name="big", matrix=[row.replace("NV4", "QQQ", 1)] + [row] * 699)
    matrix.cluster.generate[0].node_type = nt.name
    matrix.cluster.generate[0].ClearField("devices")
    violations = request_from_dict(
        {
            "cluster": _cluster(4),
            "job": {
                "name": "v",
                "ranks": 8,
                "groups": [
                    {"label": f"g{i}", "kind": "nope", "members": [0, 1], "bytes": -1} for i in range(3000)
                ],
            },
        },
        pb.PlaceRequest,
    )
    nan = pb.PlaceRequest()
    nan.CopyFrom(base)
    nan.job.model.parameters = float("nan")
    nan.options.time_limit_s = float("inf")
    heavy = request_from_dict(
        {"cluster": _cluster(64), "job": _job(8, 32), "options": {"time_limit_s": 30.0}}, pb.PlaceRequest
    )
    return {
        "valid_place": ("Place", base, 10.0, None),
        "valid_evaluate_bad_rank": ("Evaluate", ev, 5.0, None),
        "huge_parallel": ("Place", big_rank, 5.0, None),
        "pins_16384": ("Place", pins_place(), 3.0, None),
        "fault_domains_12000": ("Place", fds, 2.0, None),
        "matrix_700_bad_code": ("Place", matrix, 2.0, None),
        "violations_3000": ("Place", violations, 5.0, None),
        "nan_values": ("Place", nan, 5.0, None),
        "garbage_bytes": ("Place", os.urandom(300), 5.0, None),
        "heavy_short_deadline": ("Place", heavy, 0.5, None),
        "heavy_cancelled": ("Place", heavy, 10.0, 0.2),
    }


MIX = {
    "valid_place": 30,
    "valid_evaluate_bad_rank": 6,
    "huge_parallel": 6,
    "pins_16384": 4,
    "fault_domains_12000": 3,
    "matrix_700_bad_code": 3,
    "violations_3000": 6,
    "nan_values": 6,
    "garbage_bytes": 6,
    "heavy_short_deadline": 10,
    "heavy_cancelled": 10,
}


def quota_subject(err: grpc.RpcError) -> str:
    """The QuotaFailure subject of a RESOURCE_EXHAUSTED (the limit: queue, ranks, pins...), or grpc's own."""
    try:
        st = rpc_status.from_call(err)  # type: ignore[arg-type]
    except ValueError:
        st = None
    for d in st.details if st is not None else ():
        qf = error_details_pb2.QuotaFailure()
        if d.Unpack(qf) and qf.violations:
            return str(qf.violations[0].subject)
    return "grpc"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def conversion_seconds() -> list[tuple[str, float]]:
    """Time to convert the hostile-but-legal requests in process (the server's conversion step)."""
    out = []
    req = pins_place()
    t = time.perf_counter()
    try:
        convert.place_inputs(req)
    except Exception as e:
        print("pins conversion:", type(e).__name__)
    out.append(("16,384 pins (Place, 2,048 nodes)", time.perf_counter() - t))
    fds = hostile()["fault_domains_12000"][1]
    t = time.perf_counter()
    try:
        convert.place_inputs(fds)
    except Exception as e:
        print("fault domains conversion:", type(e).__name__)
    out.append(("12,000 fault domains (Place, 512 nodes)", time.perf_counter() - t))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "SOAK_RESULTS.md")
    args = ap.parse_args(argv)

    conv = conversion_seconds()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = open(os.devnull, "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "server.main",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(args.workers),
            "--metrics-port",
            "-1",
            "--log-level",
            "WARNING",
        ],
        env=env,
        stdout=log,
        stderr=log,
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])
    grpc.channel_ready_future(channel).result(timeout=60)
    stub = pb_grpc.PlacementServiceStub(channel)
    stub.Place(valid_place(), timeout=60)  # warm up (imports, first solve)
    base_rss = rss_mb(proc.pid)
    kinds = hostile()
    names = list(MIX)
    weights = [MIX[n] for n in names]
    records: list[tuple[str, str, float, float]] = []  # kind, code, latency, deadline
    lock = threading.Lock()
    stop_at = time.monotonic() + args.seconds
    rss: list[tuple[float, float]] = [(0.0, base_rss)]
    t_start = time.monotonic()

    def client(seed: int) -> None:
        rnd = random.Random(seed)
        raw = channel.unary_unary("/placement.v1.PlacementService/Place")
        while time.monotonic() < stop_at:
            kind = rnd.choices(names, weights)[0]
            method, req, deadline, cancel_after = kinds[kind]
            t0 = time.monotonic()
            code = "OK"
            try:
                if isinstance(req, bytes):
                    raw(req, timeout=deadline)
                else:
                    call = getattr(stub, method)
                    if cancel_after is None:
                        call(req, timeout=deadline)
                    else:
                        fut = call.future(req, timeout=deadline)
                        time.sleep(cancel_after)
                        fut.cancel()
                        try:
                            fut.result()
                        except grpc.FutureCancelledError:
                            code = "CANCELLED"
            except grpc.RpcError as e:
                code = e.code().name
                if e.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
                    code += f" ({quota_subject(e)})"
            with lock:
                records.append((kind, code, time.monotonic() - t0, deadline))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
    for t in threads:
        t.start()
    while time.monotonic() < stop_at:
        time.sleep(min(10.0, max(0.0, stop_at - time.monotonic())))
        rss.append((time.monotonic() - t_start, rss_mb(proc.pid)))
    for t in threads:
        t.join(timeout=60)
    time.sleep(2)
    rss.append((time.monotonic() - t_start, rss_mb(proc.pid)))
    final = stub.Place(valid_place(), timeout=60).result
    devices = [a.device for a in final.mapping]
    final_ok = (
        len(devices) == 8
        and len(set(devices)) == 8
        and final.status in (pb.SOLVE_STATUS_OPTIMAL, pb.SOLVE_STATUS_FEASIBLE)
    )
    channel.close()
    proc.terminate()
    rc = proc.wait(timeout=60)
    log.close()

    codes = Counter(c for _, c, _, _ in records)
    by_kind: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for k, c, lat, dl in records:
        by_kind[k].append((c, lat, dl))
    over = [lat - dl for _, _, lat, dl in records]
    worst = max(over, default=0.0)
    bad = codes.get("INTERNAL", 0) + codes.get("UNKNOWN", 0)
    peak = max(r for _, r in rss)
    from server.settings import Settings

    budget_mb = Settings().max_queued_bytes / 2**20
    bound = base_rss + budget_mb
    load = os.getloadavg()
    lines = [
        "# Soak: mixed valid and hostile gRPC traffic",
        "",
        f"Command: `.venv/bin/python bench/soak.py --seconds {args.seconds:g} --clients {args.clients} "
        f"--workers {args.workers}`. Server: `python -m server.main` (a subprocess) with the default limits, "
        f"{args.workers} workers, queue limit 64. Machine: {os.cpu_count()} cores, load average at the end "
        f"{load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f} (the clients share it with the server), so latencies are "
        "noisy; codes, overruns and RSS are what this run checks.",
        "",
        f"Calls: {len(records)} in {args.seconds:g} s from {args.clients} clients; the server exited with code {rc}.",
        "",
        "## Goals",
        "",
        "| goal | result |",
        "|---|---|",
        f"| 0 INTERNAL and 0 UNKNOWN | {bad} ({'met' if bad == 0 else 'NOT met'}) |",
        f"| no call waits > 1 s beyond its deadline | worst {worst:+.3f} s ({'met' if worst <= 1.0 else 'NOT met'}) |",
        f"| RSS bounded | start {base_rss:.0f} MB, peak {peak:.0f} MB, end {rss[-1][1]:.0f} MB; bound: base + the "
        f"request-byte budget of the running and waiting calls ({budget_mb:.0f} MiB, `max_queued_bytes`) = "
        f"{bound:.0f} MB: {'met' if peak <= bound else 'NOT met'} |",
        f"| a valid Place answers correctly at the end | {'yes' if final_ok else 'NO'} "
        f"({len(devices)} ranks on {len(set(devices))} distinct devices) |",
        "",
        "## Status codes",
        "",
        "RESOURCE_EXHAUSTED is split by its QuotaFailure subject: `queue` and `queued bytes` are the solve pool "
        f"refusing work beyond {args.workers} running + 64 waiting calls ({args.clients} clients keep it full), the "
        "others are "
        "request limits.",
        "",
        "| code | calls |",
        "|---|---:|",
        *[f"| {c} | {n} |" for c, n in codes.most_common()],
        "",
        "## Per kind (latency at the client, seconds)",
        "",
        "| kind | calls | deadline s | codes | p50 | p99 | max past deadline |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for k in names:
        rows = by_kind.get(k, [])
        lats = [lat for _, lat, _ in rows]
        kc = Counter(c for c, _, _ in rows)
        past = max((lat - dl for _, lat, dl in rows), default=0.0)
        lines.append(
            f"| {k} | {len(rows)} | {kinds[k][2]:g} | "
            + ", ".join(f"{c} {n}" for c, n in kc.most_common())
            + f" | {pct(lats, 0.5):.3f} | {pct(lats, 0.99):.3f} | {past:+.3f} |"
        )
    lines += ["", "## Server RSS over time", "", "| t (s) | RSS (MB) |", "|---:|---:|"]
    step = max(1, len(rss) // 20)
    lines += [f"| {t:.0f} | {r:.0f} |" for t, r in rss[::step]]
    if rss[-1] not in rss[::step]:
        lines.append(f"| {rss[-1][0]:.0f} | {rss[-1][1]:.0f} |")
    lines += [
        "",
        "## Conversion in process (before the soak, same machine)",
        "",
        "| request | seconds |",
        "|---|---:|",
        *[f"| {n} | {s:.3f} |" for n, s in conv],
        "",
    ]
    text = "\n".join(lines)
    print(text)
    args.out.write_text(text)
    print(
        f"wrote {args.out}; mean latency {statistics.fmean([r[2] for r in records]):.3f} s" if records else ""
    )
    return 0 if bad == 0 and worst <= 1.0 and final_ok else 1


if __name__ == "__main__":
    sys.exit(main())
