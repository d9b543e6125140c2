"""The CLI's side of the gRPC contract: `place --request FILE [--server HOST:PORT]` and `serve`.

The one module of `placement/` that reaches into `server/` (the client, the proto conversion, the server's main);
the rest of the CLI and the library never do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from placement.cli.errors import escape, fail
from placement.cli.tables import headline, print_report

__all__ = [
    "place_batch_remote",
    "place_request",
    "print_result",
    "registry_call",
    "registry_watch",
    "serve_main",
]


def place_request(
    request: Path,
    server: str | None,
    token: str | None,
    output: str,
    out_file: Path | None,
    write: Callable[[str, Path | None], None],
) -> None:
    """`place --request`: offline through the same conversion the server uses, or over the wire."""
    from placement.io.export import export
    from placement.messages.files import dump_message, read_request
    from placement.v1 import placement_pb2 as pb

    req = read_request(request, pb.PlaceRequest)
    if server is not None:
        from server.client import PlacementClient, PlacementRpcError

        try:
            with PlacementClient(server, token=token) as client:
                result = client.place(req).result
        except PlacementRpcError as e:
            lines = [f"{server}: {e.code.name}: {escape(e.message)}"]
            lines += [f"  - {f}: {escape(d)}" for f, d in e.field_violations]
            lines += [f"  - {escape(d)}" for _, _, d in e.precondition_violations]
            fail(
                "\n".join(lines),
                3 if e.code.name == "FAILED_PRECONDITION" else 2 if e.code.name == "INVALID_ARGUMENT" else 4,
            )
            return
    else:
        from placement.messages import domain as convert
        from placement.solve import place as run_place

        inputs = convert.place_inputs(req)
        res = run_place(inputs.topology, inputs.state, inputs.job, inputs.options)
        result = convert.result_to_proto(
            inputs.topology, inputs.job, res, time_limit_s=inputs.options.time_limit_s, deadline_limited=False
        )
    if output in ("json", "yaml"):
        write(dump_message(pb.PlaceResponse(result=result), output), out_file)
        return
    if output == "table":
        print_result(result)
        if out_file is not None:
            write(dump_message(pb.PlaceResponse(result=result), "json"), out_file)
        return
    seats = [(a.host, int(a.device.rpartition("/gpu")[2])) for a in result.mapping]
    if output == "kueue":
        fail(
            "--output kueue needs the cluster file: use `placement export RESULT --format kueue --cluster FILE`",
            2,
        )
    write(export(output, seats), out_file)


def _rpc_failure(server: str, e: Any) -> None:
    lines = [f"{server}: {e.code.name}: {escape(e.message)}"]
    lines += [f"  - {f}: {escape(d)}" for f, d in e.field_violations]
    lines += [f"  - {escape(d)}" for _, _, d in e.precondition_violations if d not in e.message]
    fail(
        "\n".join(lines),
        3 if e.code.name == "FAILED_PRECONDITION" else 2 if e.code.name == "INVALID_ARGUMENT" else 4,
    )


def registry_call(server: str, token: str | None, method: str, request: Any, timeout_s: float = 120.0) -> Any:
    """One ClusterRegistry call (`placement registry ...`); a failed call exits with its status and details."""
    from server.client import PlacementRpcError
    from server.registry_client import RegistryClient

    try:
        with RegistryClient(server, token=token) as client:
            return client.call(method, request, timeout_s=timeout_s)
    except PlacementRpcError as e:
        _rpc_failure(server, e)
    raise AssertionError("unreachable")


def registry_watch(server: str, token: str | None, request: Any, timeout_s: float | None) -> Iterator[Any]:
    """WatchState events until `timeout_s` (None: until interrupted)."""
    from server.client import PlacementRpcError
    from server.registry_client import RegistryClient

    try:
        with RegistryClient(server, token=token) as client:
            yield from client.watch(request, timeout_s=timeout_s)
    except PlacementRpcError as e:
        _rpc_failure(server, e)


def print_result(result: Any) -> None:
    """The same tables as the offline ones, from a PlacementResult message."""
    from placement.messages.domain import report_from_proto

    rep = report_from_proto(result.cost, result.breakdown)
    costs = {
        b.strategy: {
            "step_seconds": b.step_seconds if b.HasField("step_seconds") else None,
            "comm_seconds": b.comm_seconds if b.HasField("comm_seconds") else None,
        }
        for b in result.baselines
    }
    gap = f"{100 * result.gap:.2f}%" if result.HasField("gap") else "-"
    bound = f"{result.lower_bound_s:.4f}" if result.HasField("lower_bound_s") else "-"
    source = result.stats.notes.get("bound_source") if result.HasField("stats") else None
    if source and result.HasField("lower_bound_s"):
        bound += f" ({source})"
    status = (
        type(result)
        .DESCRIPTOR.fields_by_name["status"]
        .enum_type.values_by_number[result.status]
        .name.removeprefix("SOLVE_STATUS_")
    )
    title = f"{result.job} ({len(result.mapping)} ranks): {status}, {headline(rep)}, surrogate bound {bound}, gap {gap}"
    print_report(title, rep, result.strategy, costs)


def place_batch_remote(doc: dict[str, Any], server: str, token: str | None) -> dict[str, Any]:
    """`place-batch --server`: send a PlaceBatchRequest (as a dict in the protobuf JSON mapping); the response as a
    dict (proto field names; unset fields absent)."""
    from google.protobuf import json_format

    from placement.errors import InputError, Problem
    from placement.v1 import placement_pb2 as pb
    from server.client import PlacementClient, PlacementRpcError

    req = pb.PlaceBatchRequest()
    try:
        json_format.ParseDict(doc, req)
    except json_format.ParseError as e:
        raise InputError("request", [Problem("", str(e))]) from None
    try:
        with PlacementClient(server, token=token) as client:
            resp = client.place_batch(req)
    except PlacementRpcError as e:
        lines = [f"{server}: {e.code.name}: {escape(e.message)}"]
        lines += [f"  - {f}: {escape(d)}" for f, d in e.field_violations]
        fail("\n".join(lines), 2 if e.code.name == "INVALID_ARGUMENT" else 4)
        raise AssertionError("fail exits") from None
    out: dict[str, Any] = json_format.MessageToDict(resp, preserving_proto_field_name=True)
    return out


def serve_main(argv: list[str]) -> int:
    """Run the gRPC server (`placement-server`) with these arguments."""
    from server.main import main as server_main

    return int(server_main(argv))
