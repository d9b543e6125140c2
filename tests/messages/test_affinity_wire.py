"""Per-node-type CPU/NUMA affinity over the wire: NodeType.cpu_affinity / numa_affinity ("" / -1 = unknown, null
in native files). A cluster file with affinity (examples/h100-256.yaml) works through request files offline, the
server's Place, and the registry's PutCluster/GetState/Place by cluster_id, and every assignment carries its
device's `cpus` and `numa_node`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf import json_format
from typer.testing import CliRunner

from placement.cli.app import app
from placement.errors import InputError
from placement.io.affinity import MAX_CPU
from placement.io.export.document import device_affinity
from placement.io.native import cluster_from_dict, load_cluster
from placement.messages.domain import place_inputs
from placement.messages.files import message_to_dict, normalize_cluster, read_request, request_from_dict
from placement.model.topology import Topology
from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from placement.v1 import registry_pb2 as rpb
from placement.v1 import registry_pb2_grpc as rpb_grpc
from server.main import create_server
from server.settings import Settings
from tests.conftest import EXAMPLES
from tests.support_server import running

H100 = EXAMPLES / "h100-256.yaml"
SOCKET0, SOCKET1 = "0-47,96-143", "48-95,144-191"
SMI = Path("/work/shared/data/topologies/nvidia_smi_topo/hgx_h100_8gpu_8nic_rail_pix__sglang_issue30401.txt")


def _job(ranks: int = 16) -> dict[str, Any]:
    return {
        "name": "aff",
        "ranks": ranks,
        "groups": [{"kind": "all_reduce", "members": f"0-{ranks - 1}", "bytes": 1e8}],
    }


def _affinity(topo: Topology) -> list[tuple[Any, Any]]:
    return [(nt.cpu_affinity, nt.numa_affinity) for nt in topo.host_types]


def _check_assignments(topo: Topology, mapping: Any, ranks: int) -> None:
    assert len(mapping) == ranks
    index = {d.id: i for i, d in enumerate(topo.devices)}
    for a in mapping:
        cpus, numa = device_affinity(topo, index[a.device])
        assert a.HasField("cpus") and a.cpus == cpus and a.cpus in (SOCKET0, SOCKET1)
        assert a.HasField("numa_node") and a.numa_node == numa
        assert (a.numa_node == 0) == (a.cpus == SOCKET0)


def _request_file(tmp_path: Path) -> Path:
    f = tmp_path / "req.yaml"
    f.write_text(
        yaml.safe_dump({"cluster_file": str(H100), "job": _job(), "options": {"time_limit_s": 5, "seed": 0}})
    )
    return f


# ---- messages -----------------------------------------------------------------------------------------------


def test_a_request_file_naming_a_cluster_with_affinity_reads_into_node_type_fields(tmp_path: Path) -> None:
    req = read_request(_request_file(tmp_path), pb.PlaceRequest)
    nt = req.cluster.node_types[0]
    assert list(nt.cpu_affinity) == [SOCKET0] * 4 + [SOCKET1] * 4
    assert list(nt.numa_affinity) == [0] * 4 + [1] * 4


def test_a_place_request_with_affinity_reads_to_load_clusters_topology(tmp_path: Path) -> None:
    native, _ = load_cluster(H100)
    req = read_request(_request_file(tmp_path), pb.PlaceRequest)
    topo = place_inputs(req).topology
    assert _affinity(topo) == _affinity(native)
    assert topo.host_types[0].cpu_affinity == (SOCKET0,) * 4 + (SOCKET1,) * 4
    assert topo.host_types[0].numa_affinity == (0,) * 4 + (1,) * 4
    # the message as a dict (what the registry stores and GetState parses back) reads to the same affinity
    back, _ = cluster_from_dict(message_to_dict(req.cluster), "back")
    assert _affinity(back) == _affinity(native)


def test_null_entries_become_empty_and_minus_one_and_read_back_as_unknown() -> None:
    doc = {
        "name": "n",
        "levels": [{"name": "node", "bandwidth_gbps": 450}],
        "node_types": [
            {
                "name": "t",
                "devices": 4,
                "cpu_affinity": ["0-3", None, "8-11", None],
                "numa_affinity": [0, None, 1, None],
            }
        ],
        "hosts": [{"name": "a", "node_type": "t"}],
    }
    native, _ = cluster_from_dict(doc, "n.yaml")
    req = request_from_dict({"cluster": normalize_cluster(doc), "job": _job(4)}, pb.PlaceRequest)
    nt = req.cluster.node_types[0]
    assert list(nt.cpu_affinity) == ["0-3", "", "8-11", ""] and list(nt.numa_affinity) == [0, -1, 1, -1]
    topo = place_inputs(req).topology
    assert _affinity(topo) == _affinity(native) == [(("0-3", None, "8-11", None), (0, None, 1, None))]


def test_a_cluster_without_affinity_leaves_the_fields_empty() -> None:
    req = request_from_dict(
        {"cluster_file": "dgx-h100-4node.yaml", "job_file": "tp8-dp4.yaml"},
        pb.PlaceRequest,
        base_dir=EXAMPLES,
    )
    assert all(not nt.cpu_affinity and not nt.numa_affinity for nt in req.cluster.node_types)


def test_affinity_errors_still_name_the_field() -> None:
    doc = {
        "name": "n",
        "levels": [{"name": "node", "bandwidth_gbps": 450}],
        "node_types": [{"name": "t", "devices": 2, "cpu_affinity": ["0-3"], "numa_affinity": [0, -2]}],
        "hosts": [{"name": "a", "node_type": "t"}],
    }
    req = request_from_dict({"cluster": normalize_cluster(doc), "job": _job(2)}, pb.PlaceRequest)
    with pytest.raises(InputError) as e:
        place_inputs(req)
    text = str(e.value)
    assert "node_types[0].cpu_affinity: has 1 entries for 2 devices" in text
    assert "node_types[0].numa_affinity: must be NUMA node numbers" in text


# ---- offline and over the wire ------------------------------------------------------------------------------


def test_place_request_offline_gives_each_assignment_its_cpus_and_numa_node(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["place", "--request", str(_request_file(tmp_path)), "--output", "json"])
    assert out.exit_code == 0, out.output
    resp = json_format.Parse(out.stdout, pb.PlaceResponse(), ignore_unknown_fields=True)
    _check_assignments(load_cluster(H100)[0], resp.result.mapping, 16)


def test_place_over_a_live_server_answers_with_cpus(tmp_path: Path) -> None:
    req = read_request(_request_file(tmp_path), pb.PlaceRequest)
    with running() as live:
        resp = live.stub.Place(req, timeout=60)
    _check_assignments(load_cluster(H100)[0], resp.result.mapping, 16)


# ---- the registry -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _registry_server(
    tmp_path: Path,
) -> Iterator[tuple[rpb_grpc.ClusterRegistryStub, pb_grpc.PlacementServiceStub, int]]:
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
        yield rpb_grpc.ClusterRegistryStub(channel), pb_grpc.PlacementServiceStub(channel), port
    finally:
        channel.close()
        server.stop(None).wait(10)


def test_registry_put_cluster_get_state_and_place_by_cluster_id_keep_the_affinity(tmp_path: Path) -> None:
    cluster = read_request(_request_file(tmp_path), pb.PlaceRequest).cluster
    with _registry_server(tmp_path) as (reg, placement, _port):
        put = reg.PutCluster(rpb.PutClusterRequest(cluster_id="h100", cluster=cluster), timeout=30)
        assert put.version == 1 and put.devices == 256
        again = reg.PutCluster(rpb.PutClusterRequest(cluster_id="h100", cluster=cluster), timeout=30)
        assert again.version == 1 and not again.changed
        state = reg.GetState(rpb.GetStateRequest(cluster_id="h100", include_cluster=True), timeout=30)
        assert list(state.cluster.node_types[0].cpu_affinity) == list(cluster.node_types[0].cpu_affinity)
        assert list(state.cluster.node_types[0].numa_affinity) == [0] * 4 + [1] * 4
        job = request_from_dict({"job": _job()}, pb.PlaceRequest).job
        placed = placement.Place(pb.PlaceRequest(cluster_id="h100", job=job), timeout=60)
    _check_assignments(load_cluster(H100)[0], placed.result.mapping, 16)


def test_cli_registry_put_cluster_of_a_cluster_file_with_affinity(tmp_path: Path) -> None:
    with _registry_server(tmp_path) as (_reg, _placement, port):
        out = CliRunner().invoke(
            app, ["registry", "put-cluster", str(H100), "-c", "h100", "-s", f"127.0.0.1:{port}"]
        )
    assert out.exit_code == 0, out.output
    assert "cluster h100: version 1 (changed), 256 devices" in out.output


@pytest.mark.skipif(not SMI.exists(), reason="the shared nvidia-smi tables are not on this machine")
def test_an_nvidia_smi_file_inlines_its_affinity_too() -> None:
    doc = {
        "name": "s",
        "levels": [{"name": "node", "bandwidth_gbps": 450}],
        "node_types": [{"name": "t", "nvidia_smi": str(SMI)}],
        "hosts": [{"name": "a", "node_type": "t"}],
    }
    req = request_from_dict({"cluster": doc, "job": _job(8)}, pb.PlaceRequest)
    assert list(req.cluster.node_types[0].cpu_affinity) == [SOCKET0] * 4 + [SOCKET1] * 4
    assert list(req.cluster.node_types[0].numa_affinity) == [0] * 4 + [1] * 4
    assert _affinity(place_inputs(req).topology) == _affinity(cluster_from_dict(doc, "s.yaml")[0])


def test_a_server_rejects_cpu_lists_beyond_max_cpu_and_reads_long_ones_in_linear_time() -> None:
    doc = {
        "name": "n",
        "levels": [{"name": "node", "bandwidth_gbps": 450}],
        "node_types": [
            {"name": "t", "devices": 2, "cpu_affinity": ["0-4000000000", ",".join(["0-65535"] * 20000)]}
        ],
        "hosts": [{"name": "a", "node_type": "t"}],
    }
    req = request_from_dict({"cluster": normalize_cluster(doc), "job": _job(2)}, pb.PlaceRequest)
    with running() as live, pytest.raises(grpc.RpcError) as e:
        live.stub.Place(req, timeout=30)
    assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "cpu_affinity[0]" in (e.value.details() or "") and f"above {MAX_CPU}" in (e.value.details() or "")
    doc["node_types"][0]["cpu_affinity"][0] = "0-3"
    topo, _ = cluster_from_dict(doc, "n.yaml")
    assert topo.host_types[0].cpu_affinity == ("0-3", f"0-{MAX_CPU}")
