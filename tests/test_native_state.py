"""placement.io.native state and mapping files, read against a cluster: every state entry kind, the cluster's
fault domains merged in, each accepted mapping shape, and their error messages verbatim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placement.errors import InputError
from placement.io.native import cluster_from_dict, load_mapping, load_state, mapping_from_obj, state_from_dict
from placement.model.state import Uplink
from placement.model.topology import Topology
from tests.support_native import LEVELS2, LEVELS3, error_of, write


def small() -> Topology:
    topo, _ = cluster_from_dict(
        {"levels": LEVELS2, "generate": {"nodes": 2, "devices": 4, "fanout": {"leaf": 2}}}
    )
    return topo


# ---- state --------------------------------------------------------------------------------------------------------


def test_state_file_with_every_entry_kind(tmp_path: Path) -> None:
    topo = cluster_from_dict(
        {"levels": LEVELS3, "generate": {"nodes": 4, "devices": 4, "fanout": {"leaf": 2, "spine": 2}}}
    )[0]
    state = write(
        tmp_path,
        "state.yaml",
        """\
        description: a cluster with a bit of everything
        occupied:
          - {job: train-a, devices: [node01]}
          - {job: train-b, devices: [node02/gpu0, node02/gpu1]}
        failed: [node03/gpu3]
        degraded:
          - {device: node04/gpu0, slowdown: 1.5}
          - {device: node04, slowdown: 1.2}
        links:
          - {between: [node03/gpu1, node03/gpu0], failed: true}
          - {between: [node03/gpu2, node03/gpu1], slowdown: 2}
          - {uplink: node02, failed: true}
          - {uplink: leaf:leaf02, slowdown: 3}
        fault_domains:
          - {kind: pdu, name: p1, members: [leaf01]}
    """,
    )
    st = load_state(state, topo)
    assert st.occupied == {0: "train-a", 1: "train-a", 2: "train-a", 3: "train-a", 4: "train-b", 5: "train-b"}
    assert st.failed == frozenset({11})
    assert st.device_slowdown == {12: 1.5, 13: 1.2, 14: 1.2, 15: 1.2}  # the larger factor wins on node04/gpu0
    assert st.failed_pairs == frozenset({(8, 9)}) and st.pair_slowdown == {(9, 10): 2.0}
    assert st.failed_uplinks == frozenset({Uplink(0, 1)}) and st.uplink_slowdown == {Uplink(1, 1): 3.0}
    assert st.fault_domains == {"pdu": {"p1": frozenset(range(8))}}
    assert st.has_link_faults


def test_state_merges_the_cluster_fault_domains(tmp_path: Path) -> None:
    cluster = {
        "levels": LEVELS2,
        "generate": {"nodes": 2, "devices": 2, "fanout": {"leaf": 2}},
        "fault_domains": [{"kind": "power", "name": "a", "members": ["node01"]}],
    }
    topo, static = cluster_from_dict(cluster)
    st = load_state(write(tmp_path, "s.yaml", "occupied: [{job: x, devices: [node02/gpu1]}]\n"), topo, static)
    assert st.occupied == {3: "x"} and st.fault_domains == {"power": {"a": frozenset({0, 1})}}


def test_error_device_occupied_by_two_jobs() -> None:
    doc = {
        "occupied": [
            {"job": "a", "devices": ["node01"]},
            {"job": "b", "devices": ["node02/gpu0", "node01/gpu3"]},
        ]
    }
    assert error_of(state_from_dict, doc, small(), "s.yaml") == (
        "s.yaml: occupied[1].devices[1]: node01/gpu3 is already occupied by job 'a'"
    )


def test_state_errors_are_reported_together() -> None:
    doc = {
        "failed": ["node09", 3],
        "degraded": [{"device": "node01/gpu0", "slowdown": 0.5}],
        "links": [
            {"between": ["node01/gpu0", "node02/gpu0"], "failed": True},
            {"uplink": "leaf", "slowdown": 2},
            {"uplink": "node01"},
        ],
        "running": [],
    }
    with pytest.raises(InputError) as info:
        state_from_dict(doc, small(), "s.yaml")
    assert [str(p) for p in info.value.problems] == [
        "running: unknown field; expected one of ['degraded', 'description', 'failed', 'fault_domains', 'links', 'occupied']",
        "failed[0]: unknown device, host or domain 'node09'",
        "failed[1]: must be a device, host or domain name, got 3",
        "degraded[0].slowdown: must be >= 1, got 0.5",
        "links[0].between: ['node01/gpu0', 'node02/gpu0'] is not a link between two devices of one host; use uplink: for network links",
        "links[1].uplink: 'leaf' is the top domain; it has no uplink",
        "links[2]: a link entry needs failed: true, a slowdown >= 1 or a load_gbps >= 0",
    ]


# ---- mappings -----------------------------------------------------------------------------------------------------


def test_mapping_in_each_accepted_shape(tmp_path: Path) -> None:
    topo = small()
    as_list = ["node02/gpu0", "node01/gpu3", "node01/gpu0"]
    as_dict = {"2": "node01/gpu0", "0": "node02/gpu0", "1": "node01/gpu3"}
    as_result = {
        "job": "j",
        "mapping": [
            {"rank": 1, "device": "node01/gpu3"},
            {"rank": 0, "device": "node02/gpu0"},
            {"rank": 2, "device": "node01/gpu0", "host": "node01"},
        ],
    }
    for i, doc in enumerate((as_list, as_dict, as_result)):
        assert mapping_from_obj(doc, topo) == [4, 3, 0]
        path = tmp_path / f"m{i}.json"
        path.write_text(json.dumps(doc))
        assert load_mapping(path, topo) == [4, 3, 0]
    assert mapping_from_obj({"mapping": {"0": "node01/gpu1"}}, topo) == [1]


def test_error_mapping_names_an_unknown_device() -> None:
    assert error_of(mapping_from_obj, ["node01/gpu0", "node07/gpu1"], small(), "m.json") == (
        "m.json: [1]: unknown device 'node07/gpu1'; devices are named host/gpuK, e.g. node01/gpu0"
    )
    assert error_of(
        mapping_from_obj, {"mapping": [{"rank": 0, "device": "node01/gpu9"}]}, small(), "m.json"
    ) == (
        "m.json: mapping[0].device: unknown device 'node01/gpu9'; devices are named host/gpuK, e.g. node01/gpu0"
    )


def test_mapping_errors_are_reported_together() -> None:
    doc = {"0": "node01/gpu0", "0 ": "node01/gpu1", "2": 7, "4": "node02/gpu1", "x": "node01/gpu2"}
    with pytest.raises(InputError) as info:
        mapping_from_obj(doc, small(), "m.yaml")
    assert [str(p) for p in info.value.problems] == ["x: keys are rank numbers"]
    doc.pop("x")
    with pytest.raises(InputError) as info:
        mapping_from_obj(doc, small(), "m.yaml")
    assert [str(p) for p in info.value.problems] == [
        "0 : rank 0 is mapped twice (also at 0)",
        "2: unknown device 7; devices are named host/gpuK, e.g. node01/gpu0",
        "ranks [1, 3] have no device; a mapping names a device for every rank 0..4",
    ]
    assert error_of(mapping_from_obj, "node01/gpu0", small(), "m.yaml") == (
        "m.yaml: a mapping is a list of device ids, {rank: device}, or [{rank, device}]"
    )
