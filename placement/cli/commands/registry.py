"""`placement registry ...`: the ClusterRegistry from the command line (put-cluster, update-state, reserve, commit,
release, renew, list, state, watch). Every call goes over gRPC through placement.cli.commands.remote, except
`store`, which reads a store on this machine (its size and what it holds).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from rich.table import Table

from placement.cli.commands.remote import registry_call, registry_watch
from placement.cli.errors import WAIT_EXIT, fail, guard
from placement.cli.help import Command, command_app
from placement.cli.options import JsonOpt, RequiredServerOpt, TokenOpt, WideOpt, json_output
from placement.cli.tables import out, print_result, print_verdict, table_console
from placement.io.hostlist import compress_hostlist
from placement.io.native import load_document
from placement.messages.files import dump_message, request_from_dict
from placement.registry import default_url, open_store
from placement.v1 import registry_pb2 as rpb
from placement.v1.placement_pb2 import SOLVE_STATUS_WAIT

__all__ = ["app"]

app = command_app(
    name="registry",
    no_args_is_help=True,
    help="Clusters, live state and reservations held by a placement server.",
)

Server = RequiredServerOpt
Token = TokenOpt
ClusterId = Annotated[str, typer.Option("--cluster", "-c", help="the cluster id in the registry")]
Output = Annotated[str, typer.Option("--output", "-o", help="table, json or yaml")]


def _message(doc: dict[str, Any], kind: str) -> Any:
    return request_from_dict(doc, getattr(rpb, kind), f"<{kind}>", Path(os.getcwd()))


def _call(server: str, token: str | None, method: str, request: Any) -> Any:
    return registry_call(server, token, method, request)


def _dump(msg: Any, output: str) -> None:
    """`msg` as JSON (the protobuf JSON mapping, as the RPC answers it) or YAML (the same, 64-bit integers as
    numbers: ``generation: 1``, not ``'1'``)."""
    if output not in ("json", "yaml"):
        fail(f"--output: unknown value {output!r}; use table, json or yaml", 2)
    if output == "json":
        text = dump_message(msg, "json")
    else:
        data = json_format.MessageToDict(
            msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        text = yaml.safe_dump(int64_numbers(msg.DESCRIPTOR, data), sort_keys=False, default_flow_style=None)
    out.print(text, end="", markup=False, highlight=False, soft_wrap=True)


_INT64 = (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64)


def int64_numbers(desc: Any, data: Any) -> Any:
    """`data` (the JSON mapping of a message of type `desc`) with its 64-bit integers as numbers again (the
    JSON mapping writes them as strings)."""
    if isinstance(data, list):
        return [int64_numbers(desc, d) for d in data]
    if not isinstance(data, dict):
        return data
    for f in desc.fields:
        if f.name not in data:
            continue
        v = data[f.name]
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            value = f.message_type.fields_by_name["value"]
            data[f.name] = {k: _field_value(value, x) for k, x in v.items()}
        else:
            data[f.name] = _field_value(f, v)
    return data


def _field_value(f: Any, v: Any) -> Any:
    if isinstance(v, list):
        return [_field_value(f, x) for x in v]
    if f.message_type is not None:
        return int64_numbers(f.message_type, v) if not f.message_type.full_name.startswith("google.") else v
    if f.cpp_type in _INT64 and isinstance(v, str):
        return int(v)
    return v


def _when(unix_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix_s)) if unix_s else "-"


def _status(res: Any) -> str:
    return str(rpb.ReservationStatus.Name(res.status)).removeprefix("RESERVATION_STATUS_")


def _clock(unix_s: float) -> str:
    """A lease's end in 8 columns when it is within a day (the 80-column table), else the date too."""
    if not unix_s:
        return "-"
    return time.strftime(
        "%H:%M:%S" if abs(unix_s - time.time()) < 86400 else "%m-%d %H:%M", time.localtime(unix_s)
    )


def _table(reservations: Any, title: str, wide: bool) -> None:
    """The reservations: id, job, status, devices and lease end in 80 columns (every column but the job at its
    full width; a longer job name cut with an ellipsis, never folded); `wide`: with the cluster and idempotency
    key, every cell whole."""
    cols = [
        "id",
        *(["cluster"] if wide else []),
        "job",
        "status",
        "devices",
        "expires",
        *(["key", "reason"] if wide else []),
    ]
    rows: list[list[str]] = []
    for r in reservations:
        held = _status(r) == "HELD"
        ends = (_when if wide else _clock)(r.expires_unix_s) if held else "-"
        cells = {
            "id": r.id,
            "cluster": r.cluster_id,
            "job": r.job,
            "status": _status(r),
            "devices": str(len(r.devices)),
            "expires": ends,
            "key": r.idempotency_key or "-",
            "reason": r.reason or "-",
        }
        rows.append([cells[c] for c in cols])
    t = Table(title=title, title_justify="left", box=None, pad_edge=False, header_style="bold underline")
    for i, c in enumerate(cols):
        natural = max([len(c), *(len(row[i]) for row in rows)])
        t.add_column(
            c,
            justify="right" if c == "devices" else "left",
            no_wrap=c != "job" or wide,  # only the job name may give way: cut with an ellipsis
            overflow="ellipsis",
            min_width=None if c == "job" and not wide else natural,
        )
    for row in rows:
        t.add_row(*row)
    table_console(wide).print(t)


@app.command(cls=Command, name="put-cluster")
@guard
def put_cluster(
    cluster_file: Annotated[Path, typer.Argument(help="native cluster file (YAML/JSON)")],
    cluster: ClusterId,
    server: Server,
    token: Token = None,
) -> None:
    """Store a cluster; a changed cluster gets a new version."""
    resp = _call(
        server,
        token,
        "PutCluster",
        _message({"cluster_id": cluster, "cluster_file": str(cluster_file)}, "PutClusterRequest"),
    )
    out.print(
        f"cluster {resp.cluster_id}: version {resp.version} ({'changed' if resp.changed else 'unchanged'}), "
        f"{resp.devices} devices",
        markup=False,
        soft_wrap=True,
    )


@app.command(cls=Command, name="update-state")
@guard
def update_state(
    cluster: ClusterId,
    server: Server,
    generation: Annotated[int, typer.Option(help="must be above the stored generation")],
    state: Annotated[Path | None, typer.Option(help="a full native state file")] = None,
    diff: Annotated[
        Path | None, typer.Option(help="a diff file: occupy, free, fail, recover, degrade")
    ] = None,
    revoke: Annotated[
        bool,
        typer.Option(
            "--revoke",
            help="revoke the reservations whose devices the update occupies or fails (default: refuse it)",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="say what the update would do; write nothing")
    ] = False,
    reason: Annotated[str, typer.Option(help="recorded on each revoked reservation")] = "",
    token: Token = None,
    output: Output = "table",
    json_: JsonOpt = False,
) -> None:
    """Replace the state (--state) or change it (--diff) as a new generation.

    An update that occupies or fails a device of a held or committed reservation is refused (exit 6, a conflict, naming the
    devices and reservations) unless --revoke; --dry-run answers the same without writing.
    """
    output = json_output(output, json_)
    if (state is None) == (diff is None):
        fail("give exactly one of --state FILE or --diff FILE", 2)
    doc: dict[str, Any] = {
        "cluster_id": cluster,
        "generation": generation,
        "revoke": revoke,
        "dry_run": dry_run,
        "reason": reason,
    }
    if state is not None:
        doc["state_file"] = str(state)
    elif diff is not None:
        doc["diff"] = load_document(diff)
    resp = _call(server, token, "UpdateState", _message(doc, "UpdateStateRequest"))
    if output != "table":
        _dump(resp, output)
        return
    for line in update_summary(resp):
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def _devices(ids: Any) -> str:
    """Device ids as a count and a hostlist expression (``8 devices node01/gpu[0-7]``)."""
    names = list(ids)
    try:
        shown = compress_hostlist(names, sort=True)
    except ValueError:  # an id a hostlist cannot write: list them
        shown = ",".join(names)
    return f"{len(names)} device{'s' if len(names) != 1 else ''} {shown}"


def update_summary(resp: Any) -> list[str]:
    """An UpdateStateResponse as lines a person reads: the generation, what changed (per kind of change, device
    ids as hostlist expressions), the reservations revoked and kept."""
    head = "dry run, nothing written: would be" if resp.dry_run else "now at"
    lines = [f"cluster {resp.cluster_id}: {head} generation {resp.generation}"]
    c = resp.changes
    changes = [f"occupied by {o.job}: {_devices(o.devices)}" for o in c.occupy]
    changes += [f"{what}: {_devices(ids)}" for what, ids in (("freed", c.free), ("failed", c.fail)) if ids]
    if c.recover:
        changes.append(f"healthy again: {_devices(c.recover)}")
    changes += [f"degraded: {d.device} (slowdown {d.slowdown:g}x)" for d in c.degrade]
    lines += [f"  {x}" for x in changes] or ["  no device changed"]
    verb = "would revoke" if resp.dry_run else "revoked"
    lines += [
        f"  {verb} reservation {r.id} ({r.job}, {len(r.devices)} devices): {r.reason or '-'}"
        for r in resp.revoked
    ]
    lines += [f"  kept: reservation {r.id} ({r.job}) keeps its {len(r.devices)} devices" for r in resp.kept]
    return lines


@app.command(cls=Command, name="reserve")
@guard
def reserve(
    job_file: Annotated[Path, typer.Argument(help="native job file")],
    cluster: ClusterId,
    server: Server,
    ttl: Annotated[float, typer.Option(help="lease seconds")] = 60.0,
    key: Annotated[str, typer.Option(help="idempotency key: a retry returns the same reservation")] = "",
    time_limit: Annotated[float | None, typer.Option(help="solver seconds")] = None,
    output: Output = "table",
    json_: JsonOpt = False,
    token: Token = None,
    max_slowdown: Annotated[
        float | None,
        typer.Option(
            help="place or wait: above this step / ideal step the answer is WAIT, nothing reserved (exit 5)"
        ),
    ] = None,
) -> None:
    """Place a job on the registry's current state and hold its devices for --ttl seconds.

    The reservation id (what commit, release and renew take) comes first, then the placement's tables. With
    --max-slowdown a placement slower than that x the job's ideal step is not held: the answer is WAIT, with the
    earliest time a placement within the bound is expected (from the leases' ends), and the command exits 5.
    """
    output = json_output(output, json_)
    doc: dict[str, Any] = {
        "cluster_id": cluster,
        "job_file": str(job_file),
        "ttl_s": ttl,
        "idempotency_key": key,
    }
    if time_limit is not None:
        doc["options"] = {"time_limit_s": time_limit}
    if max_slowdown is not None:
        doc["max_slowdown"] = max_slowdown
    resp = _call(server, token, "Reserve", _message(doc, "ReserveRequest"))
    waits = resp.result.status == SOLVE_STATUS_WAIT
    if output != "table":
        _dump(resp, output)
        if waits:
            raise typer.Exit(WAIT_EXIT)
        return
    if waits:
        out.print("WAIT: nothing reserved", markup=False, highlight=False)
        print_result(resp.result, cluster)
        print_verdict(resp.result)
        raise typer.Exit(WAIT_EXIT)
    again = " (replayed: the key was used before)" if resp.replayed else ""
    out.print(
        f"reservation {resp.reservation_id}: {_status(resp.reservation)} until {_when(resp.expires_unix_s)}"
        f"{again}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    print_result(resp.result, cluster)
    print_verdict(resp.result)


def _transition(
    method: str, reservation_id: str, server: str, token: str | None, ttl: float | None = None
) -> None:
    doc: dict[str, Any] = {"reservation_id": reservation_id}
    if ttl is not None:
        doc["ttl_s"] = ttl
    res = _call(server, token, method, _message(doc, "ReservationRequest")).reservation
    status = _status(res)
    until = ""
    if status == "HELD" or (status == "COMMITTED" and res.HasField("heartbeat_s")):
        until = f" until {_when(res.expires_unix_s)}"
        if status == "COMMITTED":
            until += f" (heartbeat {res.heartbeat_s:g} s: renew before then)"
    out.print(
        f"reservation {res.id}: {status}{until}" + (f" ({res.reason})" if res.reason else ""),
        markup=False,
        soft_wrap=True,
    )


@app.command(cls=Command, name="commit")
@guard
def commit(
    reservation_id: str,
    server: Server,
    ttl: Annotated[
        float | None,
        typer.Option(
            "--ttl",
            help="a heartbeat: the committed reservation expires unless renewed within this many seconds "
            "(default: it never expires)",
        ),
    ] = None,
    token: Token = None,
) -> None:
    """The job started: its devices become occupancy."""
    _transition("Commit", reservation_id, server, token, ttl)


@app.command(cls=Command, name="release")
@guard
def release(reservation_id: str, server: Server, token: Token = None) -> None:
    """Give the devices back."""
    _transition("Release", reservation_id, server, token)


@app.command(cls=Command, name="renew")
@guard
def renew(
    reservation_id: str,
    server: Server,
    ttl: Annotated[
        float | None,
        typer.Option(
            help="seconds from now (default: 60 for a held lease, the heartbeat for a committed one)"
        ),
    ] = None,
    token: Token = None,
) -> None:
    """Extend a held reservation's lease, or a committed one's heartbeat."""
    _transition("Renew", reservation_id, server, token, ttl)


@app.command(cls=Command, name="list")
@guard
def list_reservations(
    server: Server,
    cluster: Annotated[str, typer.Option("--cluster", "-c")] = "",
    live: Annotated[bool, typer.Option(help="only held and committed")] = False,
    output: Output = "table",
    json_: JsonOpt = False,
    token: Token = None,
    wide: WideOpt = False,
) -> None:
    """Reservations, oldest first."""
    output = json_output(output, json_)
    resp = _call(
        server,
        token,
        "ListReservations",
        _message({"cluster_id": cluster, "live_only": live}, "ListReservationsRequest"),
    )
    if output != "table":
        _dump(resp, output)
    else:
        _table(resp.reservations, f"{len(resp.reservations)} reservation(s)", wide)


@app.command(cls=Command, name="state")
@guard
def state(
    cluster: ClusterId,
    server: Server,
    output: Annotated[
        str, typer.Option("--output", "-o", help="yaml, json, or table: jobs with their shapes, link loads")
    ] = "yaml",
    json_: JsonOpt = False,
    token: Token = None,
) -> None:
    """The stored state (a native state document), its generation and the live holds; with the shape of each
    running job the registry knows and the average load of their traffic per uplink (-o table: in brief)."""
    output = json_output(output, json_)
    resp = _call(server, token, "GetState", _message({"cluster_id": cluster}, "GetStateRequest"))
    if output != "table":
        _dump(resp, output)
        return
    _state_tables(resp)


def _shape(job: Any) -> str:
    """A running job's shape in brief: its parallel sizes and parameters, or its groups and edges."""
    if job.HasField("parallel"):
        par = job.parallel
        sizes = [f"{k}{getattr(par, k)}" for k in ("tp", "cp", "ep", "dp", "pp") if getattr(par, k) > 1]
        params = job.model.parameters if job.HasField("model") else 0.0
        return " ".join(sizes or ["tp1"]) + (f", {params / 1e9:g}B params" if params else "")
    return f"{len(job.groups)} group(s), {len(job.edges)} edge(s)"


def _state_tables(resp: Any) -> None:
    """GetState in brief, in 80 columns: the occupied entries (job, devices, shape) and the link loads."""
    out.print(
        f"cluster {resp.cluster_id}: version {resp.cluster_version}, generation {resp.generation}, "
        f"seq {resp.seq}, {len(resp.holds)} hold(s), {len(resp.state.failed)} failed",
        markup=False,
        highlight=False,
    )
    jobs = Table(title="running jobs", title_justify="left", box=None, pad_edge=False)
    jobs.add_column("job", overflow="ellipsis", no_wrap=True, max_width=36)
    jobs.add_column("devices", justify="right", no_wrap=True)
    jobs.add_column("shape", overflow="ellipsis", no_wrap=True)
    for o in resp.state.occupied:
        jobs.add_row(o.job, str(len(o.devices)), _shape(o.shape) if o.HasField("shape") else "-")
    table_console(False).print(jobs)
    loads = Table(title="average link loads (GB/s)", title_justify="left", box=None, pad_edge=False)
    for c in ("uplink", "up", "down", "capacity", "busiest"):
        loads.add_column(c, justify="left" if c == "uplink" else "right", no_wrap=True, overflow="ellipsis")
    for x in resp.link_loads:
        busiest = max(x.up_gbps, x.down_gbps) / x.capacity_gbps if x.capacity_gbps > 0 else 0.0
        loads.add_row(
            x.uplink, f"{x.up_gbps:.1f}", f"{x.down_gbps:.1f}", f"{x.capacity_gbps:.0f}", f"{busiest:.0%}"
        )
    if resp.link_loads:
        table_console(False).print(loads)
    else:
        out.print("no link loaded by a job with a known shape", markup=False, highlight=False)


@app.command(cls=Command, name="watch")
@guard
def watch(
    cluster: ClusterId,
    server: Server,
    seconds: Annotated[
        float | None, typer.Option(help="stop after this long (default: until Ctrl-C)")
    ] = None,
    after: Annotated[int, typer.Option(help="resume after this event seq (no snapshot first)")] = 0,
    token: Token = None,
) -> None:
    """Print state changes as they happen, one JSON line per event."""
    req = _message({"cluster_id": cluster, "after_seq": after}, "WatchStateRequest")
    for ev in registry_watch(server, token, req, seconds):
        print(" ".join(dump_message(ev, "json").split()), flush=True)


@app.command(cls=Command, name="store")
@guard
def store(
    registry: Annotated[
        str,
        typer.Option(
            "--registry",
            envvar="PLACEMENT_REGISTRY",
            help="the store, as the server's --registry (default: the embedded SQLite file)",
        ),
    ] = "",
) -> None:
    """The registry's store on this machine: its size on disk, reservations per status, events and clusters
    (what retention bounds: --registry-keep-ended-s, --registry-event-max-age-s, --registry-event-max-count)."""
    opened = open_store(registry or default_url())
    try:
        stats = opened.stats()
    finally:
        opened.close()
    size = stats.pop("size_bytes")
    print(f"store {opened.url.split('@')[-1]}: {size:,} bytes ({size / 2**20:.2f} MiB)")
    for name, n in stats.items():
        print(f"  {name}: {n:,}")
