"""Proto <-> registry: reservations, state documents and events as messages, and `resolve_cluster`, the one place
that turns a request's `cluster_id` into the (topology, state) a solve runs on.

It imports no grpc; request field paths prefix every input problem as in placement.messages.domain.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from placement.cost.shared import link_loads
from placement.errors import InputError, Problem
from placement.messages.files import message_to_dict
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.registry import Registry, Reservation, ReservationStatus, UpdateOutcome
from placement.registry.model import Event
from placement.registry.registry import MAX_TTL_S
from placement.v1 import placement_pb2 as pb
from placement.v1 import registry_pb2 as rpb

__all__ = [
    "diff_message",
    "event_to_proto",
    "job_shape",
    "prefixed",
    "reservation_to_proto",
    "resolve_cluster",
    "state_message",
    "update_response",
    "uplink_loads",
]

_STATUS = {
    ReservationStatus.HELD: rpb.RESERVATION_STATUS_HELD,
    ReservationStatus.COMMITTED: rpb.RESERVATION_STATUS_COMMITTED,
    ReservationStatus.RELEASED: rpb.RESERVATION_STATUS_RELEASED,
    ReservationStatus.EXPIRED: rpb.RESERVATION_STATUS_EXPIRED,
    ReservationStatus.REVOKED: rpb.RESERVATION_STATUS_REVOKED,
}


DEFAULT_TTL_S = 60.0
"""A reservation's lease when the Reserve request names none."""


def reserve_request(request: rpb.ReserveRequest) -> tuple[pb.PlaceRequest, float]:
    """A Reserve request checked (a cluster id, a job, a lease in (0, MAX_TTL_S]) as the PlaceRequest it solves
    and its lease in seconds; every problem at once, each naming its field."""
    probs: list[Problem] = []
    if not request.cluster_id:
        probs.append(Problem("cluster_id", "is required"))
    if not request.HasField("job"):
        probs.append(Problem("job", "is required"))
    ttl = request.ttl_s if request.HasField("ttl_s") else DEFAULT_TTL_S
    if not (0 < ttl <= MAX_TTL_S):
        probs.append(Problem("ttl_s", f"must be in (0, {MAX_TTL_S:g}] seconds, got {ttl}"))
    if probs:
        raise InputError("request", probs)
    place_req = pb.PlaceRequest(cluster_id=request.cluster_id, job=request.job, options=request.options)
    if request.HasField("max_slowdown"):
        place_req.max_slowdown = request.max_slowdown
    return place_req, ttl


def job_shape(job: pb.Job) -> dict[str, Any]:
    """The job of a Reserve as the registry keeps it: the message as the request gave it, as a native job
    document (the form a state file's `occupied[].shape` takes)."""
    doc = message_to_dict(job)
    for g in doc.get("groups", []):
        g.setdefault("members", [])  # an empty repeated field is absent in the dict
    return doc


def uplink_loads(topology: Topology, state: ClusterState) -> list[rpb.UplinkLoad]:
    """The running jobs' average load per loaded uplink (`placement.cost.shared.link_loads`), named
    "level:name", lowest level first."""
    out = []
    for up, (load, cap) in sorted(
        link_loads(topology, state).items(), key=lambda kv: (kv[0].level, kv[0].domain)
    ):
        name = f"{topology.level_names[up.level]}:{topology.domain_names[up.level][up.domain]}"
        out.append(rpb.UplinkLoad(uplink=name, up_gbps=load.up, down_gbps=load.down, capacity_gbps=cap))
    return out


def resolve_cluster(request: Any, registry: Registry | None) -> tuple[Topology, ClusterState] | None:
    """The registry cluster a request names by `cluster_id` (None when it names none: inline cluster and
    state). INVALID_ARGUMENT when it names one and also carries a cluster or state, or the server has no
    registry; NotFound for an unknown id. Any request message with `cluster_id` (Place, Compare, ...) works."""
    cid = getattr(request, "cluster_id", "")
    if not cid:
        return None
    both = [f for f in ("cluster", "state") if request.HasField(f)]
    if both:
        raise InputError(
            "request", [Problem("cluster_id", f"give cluster_id or an inline {' and '.join(both)}, not both")]
        )
    if registry is None:
        raise InputError(
            "request", [Problem("cluster_id", "this server runs without a registry (--registry off)")]
        )
    return registry.resolve(cid)


def prefixed(e: InputError, prefix: str) -> InputError:
    """The same problems under a request field (``cluster.levels[0]...``, ``diff.occupy[1]...``)."""

    def join(path: str) -> str:
        return prefix if not path else prefix + path if path.startswith("[") else f"{prefix}.{path}"

    return InputError("request", [Problem(join(p.path), p.message) for p in e.problems])


def reservation_to_proto(res: Reservation) -> rpb.Reservation:
    out = rpb.Reservation(
        id=res.id,
        cluster_id=res.cluster_id,
        job=res.job,
        status=_STATUS[res.status],
        devices=list(res.devices),
        idempotency_key=res.idempotency_key or "",
        created_unix_s=res.created_at,
        expires_unix_s=res.expires_at,
        generation=res.generation,
        cluster_version=res.cluster_version,
        reason=res.reason,
    )
    if res.ended_at is not None:
        out.ended_unix_s = res.ended_at
    if res.heartbeat_s is not None:
        out.heartbeat_s = res.heartbeat_s
    if res.shape is not None:
        shape = pb.Job()
        try:
            json_format.ParseDict(res.shape, shape)
        except json_format.ParseError:
            pass  # a shape stored from a native document the message cannot hold: kept, not shown
        else:
            out.shape.CopyFrom(shape)
    return out


def _reservation_from_payload(cluster_id: str, p: dict[str, Any]) -> rpb.Reservation:
    return reservation_to_proto(
        Reservation(
            id=p["id"],
            cluster_id=cluster_id,
            job=p["job"],
            status=ReservationStatus(p["status"]),
            devices=tuple(p["devices"]),
            idempotency_key=p.get("idempotency_key"),
            request_hash="",
            created_at=p["created_at"],
            expires_at=p["expires_at"],
            ended_at=p.get("ended_at"),
            generation=p["generation"],
            cluster_version=p["cluster_version"],
            reason=p.get("reason", ""),
            heartbeat_s=p.get("heartbeat_s"),
            shape=p.get("shape"),
        )
    )


def state_message(doc: dict[str, Any]) -> pb.State:
    """A native state document as a State message (the formats share their key names)."""
    msg = pb.State()
    json_format.ParseDict(doc, msg)
    return msg


def diff_message(doc: dict[str, Any]) -> rpb.StateDiff:
    """A diff document (device ids) as a StateDiff message."""
    msg = rpb.StateDiff()
    json_format.ParseDict(doc, msg)
    return msg


def update_response(cluster_id: str, out: UpdateOutcome) -> rpb.UpdateStateResponse:
    """An UpdateState's answer: generation, the change as stored, revoked and kept reservations."""
    return rpb.UpdateStateResponse(
        cluster_id=cluster_id,
        generation=out.generation,
        revoked=[reservation_to_proto(r) for r in out.revoked],
        changes=diff_message(out.changes),
        kept=[reservation_to_proto(r) for r in out.kept],
        dry_run=out.dry_run,
        seq=out.seq,
    )


def event_to_proto(ev: Event) -> rpb.StateEvent:
    out = rpb.StateEvent(
        cluster_id=ev.cluster_id,
        seq=ev.seq,
        kind=rpb.StateEventKind.Value(f"STATE_EVENT_KIND_{ev.kind}"),
        generation=ev.generation,
        at_unix_s=ev.at,
    )
    p = ev.payload
    if ev.kind == "STATE_REPLACED":
        out.state.CopyFrom(state_message(p["state"]))
    elif ev.kind == "STATE_DIFF":
        json_format.ParseDict(p["diff"], out.diff)
    elif ev.kind == "CLUSTER_PUT":
        out.cluster_version = int(p["version"])
    else:
        out.reservation.CopyFrom(_reservation_from_payload(ev.cluster_id, p))
    return out
