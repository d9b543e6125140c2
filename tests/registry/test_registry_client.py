"""RegistryClient retries ABORTED (the registry answers it only when it wrote nothing): a Reserve that lost every
claim to a moving state succeeds on the client's next attempt, and gives up after its retries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from placement.registry import Registry
from placement.solve import place
from placement.v1 import placement_pb2 as pb
from placement.v1 import registry_pb2 as rpb
from server.client import PlacementRpcError
from server.main import create_server
from server.registry_client import RegistryClient
from server.settings import Settings
from tests.registry_util import cluster_doc, job_dict


def test_the_client_retries_aborted_and_gives_up_after_its_retries(tmp_path: Path) -> None:
    settings = Settings(
        host="127.0.0.1", port=0, metrics_port=None, workers=2, registry=f"sqlite://{tmp_path / 'r.db'}"
    )
    server, port = create_server(settings)
    server.start()
    try:
        registry: Registry | None = server.registry.open()
        assert registry is not None
        registry.max_attempts = 2
        gens = iter(range(1, 1000))
        moving = {"solves": 0, "until": 2}  # the state moves under the first `until` solves

        def solve(*args: Any) -> Any:
            res = place(*args)
            moving["solves"] += 1
            if moving["solves"] <= moving["until"]:
                assert registry is not None
                registry.update_state(
                    "c", next(gens), diff={"degrade": [{"device": "node02/gpu7", "slowdown": 2}]}
                )
            return res

        registry._solve = solve
        with RegistryClient(f"127.0.0.1:{port}", retries=3, backoff_s=0.01) as client:
            cluster = json_format.ParseDict(cluster_doc(2), pb.Cluster())
            client.call("PutCluster", rpb.PutClusterRequest(cluster_id="c", cluster=cluster))
            job = json_format.ParseDict(job_dict(8, "a"), pb.Job())
            out = client.call("Reserve", rpb.ReserveRequest(cluster_id="c", job=job, idempotency_key="k1"))
            assert len(out.reservation.devices) == 8 and moving["solves"] == 3  # 2 lost, 1 won on the retry
            moving.update(solves=0, until=10**6)
            with pytest.raises(PlacementRpcError) as e:
                client.call("Reserve", rpb.ReserveRequest(cluster_id="c", job=job, idempotency_key="k2"))
            assert e.value.code is grpc.StatusCode.ABORTED and moving["solves"] == 2 * 4  # 1 + 3 retries
    finally:
        server.stop(None).wait(10)
