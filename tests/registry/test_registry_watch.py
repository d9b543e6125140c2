"""WatchState when the events a watcher would resume from were pruned: the stream starts over with a SNAPSHOT
(a server with an SQLite registry; the registry's pruning limits lowered in place)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

from placement.registry import Registry
from placement.v1 import placement_pb2 as pb
from placement.v1 import registry_pb2 as rpb
from placement.v1 import registry_pb2_grpc as rpb_grpc
from server.main import create_server
from server.settings import Settings
from tests.registry_util import cluster_doc


def _cluster(nodes: int) -> pb.Cluster:
    return json_format.ParseDict(cluster_doc(nodes), pb.Cluster())


@contextlib.contextmanager
def _server(tmp_path: Path) -> Iterator[tuple[Any, rpb_grpc.ClusterRegistryStub, None, int]]:
    settings = Settings(
        host="127.0.0.1",
        port=0,
        metrics_port=None,
        workers=2,
        registry=f"sqlite://{tmp_path / 'registry.db'}",
    )
    server, port = create_server(settings)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield server, rpb_grpc.ClusterRegistryStub(channel), None, port
    finally:
        channel.close()
        server.stop(None).wait(10)


def test_a_watch_resuming_below_pruned_events_starts_over_with_a_snapshot(tmp_path: Path) -> None:
    with _server(tmp_path) as (server, reg, _p, _port):
        reg.PutCluster(rpb.PutClusterRequest(cluster_id="c", cluster=_cluster(2)), timeout=30)
        for g in range(1, 6):
            reg.UpdateState(
                rpb.UpdateStateRequest(
                    cluster_id="c", generation=g, diff=rpb.StateDiff(fail=[f"node01/gpu{g}"])
                ),
                timeout=30,
            )
        registry: Registry | None = server.registry.open()
        assert registry is not None
        registry.event_max_count = 2  # keep the last 2 events (seq 5, 6)
        registry._pruned_at = float("-inf")
        registry.sweep()
        assert [e.seq for e in registry.events("c", 0)] == [5, 6]

        def first(after: int) -> rpb.StateEvent:
            stream = reg.WatchState(rpb.WatchStateRequest(cluster_id="c", after_seq=after), timeout=10)
            ev = next(iter(stream))
            stream.cancel()
            return ev

        gone = first(2)  # events 3 and 4 are pruned: the watcher gets the state again, as of seq 6
        assert gone.kind == rpb.STATE_EVENT_KIND_SNAPSHOT and gone.seq == 6
        assert sorted(gone.state.failed) == [f"node01/gpu{g}" for g in range(1, 6)]
        kept = first(4)  # everything after 4 is still there
        assert kept.kind == rpb.STATE_EVENT_KIND_STATE_DIFF and kept.seq == 5
