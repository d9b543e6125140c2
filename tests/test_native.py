"""placement.io.native: cluster (compact, explicit, mixed, node types, nvidia-smi references, fault domains),
state, job and mapping files, and their error messages verbatim."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from placement.errors import InputError
from placement.io.native import (
    cluster_from_dict,
    job_from_dict,
    load_cluster,
    load_document,
    load_job,
    load_mapping,
    load_state,
    mapping_from_obj,
    state_from_dict,
)
from placement.job import CollectiveKind
from placement.scenarios import A100_PCIE_PAIRS
from placement.state import Uplink
from placement.topology import RailPolicy, Tier, Topology

LEVELS2 = [
    {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
    {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
]
LEVELS3 = [*LEVELS2, {"name": "spine", "bandwidth_gbps": 25, "latency_us": 7}]
MODEL = {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096}

SMI = """\
        GPU0    GPU1    GPU2    GPU3    NIC0    NIC1    CPU Affinity    NUMA Affinity
GPU0     X      NV4     SYS     SYS     PIX     SYS     0-15            0
GPU1    NV4      X      SYS     SYS     PIX     SYS     0-15            0
GPU2    SYS     SYS      X      NV4     SYS     PIX     16-31           1
GPU3    SYS     SYS     NV4      X      SYS     PIX     16-31           1
NIC0    PIX     PIX     SYS     SYS      X      SYS
NIC1    SYS     SYS     PIX     PIX     SYS      X

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def error_of(fn: Any, *args: Any) -> str:
    with pytest.raises(InputError) as info:
        fn(*args)
    return str(info.value)


def small() -> Topology:
    topo, _ = cluster_from_dict(
        {"levels": LEVELS2, "generate": {"nodes": 2, "devices": 4, "fanout": {"leaf": 2}}}
    )
    return topo


# ---- clusters -----------------------------------------------------------------------------------------------------


def test_compact_generator_512_nodes() -> None:
    doc = {
        "name": "big",
        "levels": [*LEVELS3, {"name": "core", "bandwidth_gbps": 12.5, "latency_us": 10}],
        "generate": {"nodes": 512, "devices": 8, "kind": "H100", "fanout": {"leaf": 16, "spine": 8}},
    }
    topo, fault = cluster_from_dict(doc, "big.yaml")
    assert fault is None
    assert topo.name == "big" and topo.num_devices == 4096
    assert [len(n) for n in topo.domain_names] == [512, 32, 4, 1]
    assert topo.devices[3].id == "node001/gpu3" and topo.devices[-1].id == "node512/gpu7"
    assert topo.devices[8 * 17].id == "node018/gpu0"
    assert topo.domain_names[1][:2] == ("leaf01", "leaf02") and topo.domain_names[2] == (
        "spine01",
        "spine02",
        "spine03",
        "spine04",
    )
    assert topo.domain_names[3] == ("core",)
    assert Counter(topo.domain_column(1)) == Counter(
        {k: 128 for k in range(32)}
    )  # 16 nodes x 8 GPUs per leaf
    assert Counter(topo.parent[1]) == Counter({k: 8 for k in range(4)})  # 8 leaves per spine
    assert topo.kinds() == ("H100",)
    assert (
        topo.lca_level(0, 8 * 15) == 1 and topo.lca_level(0, 8 * 16) == 2 and topo.lca_level(0, 8 * 128) == 3
    )


def test_generator_prefix_and_host_format() -> None:
    doc = {
        "levels": LEVELS2,
        "generate": [
            {"nodes": 2, "devices": 2, "prefix": "a-", "fanout": {"leaf": 2}},
            {"nodes": 2, "devices": 2, "host_format": "gpu-b{:03d}", "fanout": {"leaf": 2}},
        ],
    }
    topo, _ = cluster_from_dict(doc)
    assert topo.host_names == ("a-node01", "a-node02", "gpu-b001", "gpu-b002")
    assert topo.domain_names[1] == ("leaf",)  # the top domain is shared by both generators


def test_explicit_hosts_with_real_hostnames() -> None:
    doc = {
        "name": "lab",
        "levels": LEVELS3,
        "hosts": [
            {
                "name": "dgx-a100-017.cluster.local",
                "devices": 8,
                "kind": "A100",
                "domains": {"leaf": "ib-leaf-3"},
            },
            {
                "name": "dgx-a100-018.cluster.local",
                "devices": 8,
                "kind": "A100",
                "domains": {"leaf": "ib-leaf-3"},
            },
            {"name": "l40s-node-2", "devices": 4, "kind": "L40S", "domains": {"leaf": "eth-leaf-1"}},
        ],
    }
    topo, _ = cluster_from_dict(doc)
    assert topo.num_devices == 20
    assert (
        topo.devices[8].id == "dgx-a100-018.cluster.local/gpu0" and topo.devices[16].id == "l40s-node-2/gpu0"
    )
    assert topo.kinds() == ("A100", "L40S")
    assert topo.domain_names[1] == ("ib-leaf-3", "eth-leaf-1")
    assert topo.domain_names[2] == ("spine",)  # the single top domain may stay implicit
    assert topo.lca_level(0, 8) == 1 and topo.lca_level(0, 16) == 2


def test_mixed_generate_and_hosts() -> None:
    doc = {
        "levels": LEVELS2,
        "generate": {"nodes": 2, "devices": 8, "fanout": {"leaf": 4}},
        "hosts": [
            {"name": "spare-7", "devices": 8},
            {"name": "spare-8", "devices": 4, "domains": {"leaf": "leaf"}},
        ],
    }
    topo, _ = cluster_from_dict(doc)
    assert topo.host_names == ("node01", "node02", "spare-7", "spare-8")
    assert topo.num_devices == 28 and topo.domain_names[1] == ("leaf",)
    assert topo.lca_level(0, 16) == 1


def test_node_types_with_matrix_rails_tiers_and_rail_policy() -> None:
    doc = {
        "levels": LEVELS2,
        "intra_node_tiers": {
            "SYS": {"bandwidth_gbps": 8, "latency_us": 6},
            "NV": {"bandwidth_gbps": 20, "latency_us": 1},
        },
        "rail_policy": {"extra_latency_us": 3, "bandwidth_factor": 0.5},
        "node_types": [
            {
                "name": "a100-pcie",
                "kind": "A100",
                "matrix": list(A100_PCIE_PAIRS),
                "rails": [0, 0, 1, 1, 2, 2, 3, None],
            },
            {"name": "pair", "devices": 2, "matrix": [["X", "PIX"], ["PIX", "X"]]},
        ],
        "hosts": [{"name": "a", "node_type": "a100-pcie"}, {"name": "b", "node_type": "pair"}],
    }
    topo, _ = cluster_from_dict(doc)
    assert topo.num_devices == 10  # 8 from the matrix, 2 declared
    assert [d.rail for d in topo.devices[:8]] == [0, 0, 1, 1, 2, 2, 3, None]
    assert topo.host_types[0].matrix is not None and topo.host_types[0].matrix[0][1] == "NV12"
    assert topo.pair_tier(0, 1) == (Tier(240.0, 1.0), "node:NV12")  # 12 x the overridden 20 GB/s per link
    assert topo.pair_tier(0, 4) == (Tier(8.0, 6.0), "node:SYS")
    assert topo.pair_tier(8, 9)[1] == "node:PIX"
    assert topo.rail_policy == RailPolicy(3.0, 0.5)


def test_node_type_from_an_nvidia_smi_file(tmp_path: Path) -> None:
    (tmp_path / "topo").mkdir()
    write(tmp_path / "topo", "node.txt", SMI)
    cluster = write(
        tmp_path,
        "c.yaml",
        """\
        levels: [{name: node, bandwidth_gbps: 450}, {name: leaf, bandwidth_gbps: 50, latency_us: 5}]
        node_types: [{name: box, kind: V100, nvidia_smi: topo/node.txt}]
        generate: {nodes: 2, node_type: box, fanout: {leaf: 2}}
    """,
    )
    topo, _ = load_cluster(cluster)
    assert topo.num_devices == 8 and topo.kinds() == ("V100",)
    assert topo.host_types[0].matrix == (
        ("X", "NV4", "SYS", "SYS"),
        ("NV4", "X", "SYS", "SYS"),
        ("SYS", "SYS", "X", "NV4"),
        ("SYS", "SYS", "NV4", "X"),
    )
    assert [d.rail for d in topo.devices[:4]] == [0, 0, 1, 1]  # GPU0/1 behind mlx5_0, GPU2/3 behind mlx5_1
    assert topo.pair_tier(0, 1) == (Tier(100.0, 1.0), "node:NV4")


def test_node_type_nvidia_smi_file_missing(tmp_path: Path) -> None:
    cluster = write(
        tmp_path,
        "c.yaml",
        """\
        levels: [{name: node, bandwidth_gbps: 450}, {name: leaf, bandwidth_gbps: 50}]
        node_types: [{name: box, nvidia_smi: nope.txt}]
        hosts: [{name: a, node_type: box}]
    """,
    )
    msg = error_of(load_cluster, cluster)
    assert msg.startswith(
        f"{cluster}: node_types[0].nvidia_smi ({tmp_path / 'nope.txt'}): cannot read the file"
    )


def test_fault_domains_in_the_cluster_file() -> None:
    doc = {
        "levels": LEVELS2,
        "generate": {"nodes": 4, "devices": 2, "fanout": {"leaf": 4}},
        "fault_domains": [
            {"kind": "power", "name": "pdu-a", "members": ["node01", "node03"]},
            {"kind": "power", "name": "pdu-b", "members": ["node02", "node04/gpu0", "node04/gpu1"]},
            {"kind": "cooling", "name": "row1", "members": ["leaf"]},
        ],
    }
    topo, st = cluster_from_dict(doc)
    assert st is not None
    assert st.fault_domains["power"] == {"pdu-a": frozenset({0, 1, 4, 5}), "pdu-b": frozenset({2, 3, 6, 7})}
    assert st.fault_domains["cooling"]["row1"] == frozenset(range(8))
    assert st.fault_domain_of("power", topo)[5] == "pdu-a"


def test_fault_domains_must_not_overlap() -> None:
    doc = {
        "levels": LEVELS2,
        "generate": {"nodes": 2, "devices": 2, "fanout": {"leaf": 2}},
        "fault_domains": [
            {"kind": "power", "name": "a", "members": ["node01"]},
            {"kind": "power", "name": "b", "members": ["node01/gpu1", "node02"]},
        ],
    }
    assert error_of(cluster_from_dict, doc, "c.yaml") == (
        "c.yaml: fault_domains[1].members: power domains 'a' and 'b' share 1 device(s), e.g. node01/gpu1; "
        "a device is in one domain of a kind"
    )


# ---- cluster errors, verbatim -------------------------------------------------------------------------------------


def test_error_fanout_zero() -> None:
    doc = {"levels": LEVELS2, "generate": {"nodes": 4, "devices": 8, "fanout": {"leaf": 0}}}
    assert error_of(cluster_from_dict, doc, "c.yaml") == "c.yaml: generate.fanout.leaf: must be >= 1, got 0"


def test_error_negative_bandwidth() -> None:
    doc = {
        "levels": [LEVELS2[0], {"name": "leaf", "bandwidth_gbps": -50}],
        "hosts": [{"name": "a", "devices": 8}],
    }
    assert (
        error_of(cluster_from_dict, doc, "c.yaml") == "c.yaml: levels[1].bandwidth_gbps: must be > 0, got -50"
    )


def test_error_host_listed_twice() -> None:
    doc = {
        "levels": LEVELS2,
        "hosts": [{"name": "a", "devices": 8}, {"name": "b", "devices": 8}, {"name": "a", "devices": 8}],
    }
    assert (
        error_of(cluster_from_dict, doc, "c.yaml")
        == "c.yaml: hosts[2].name: host 'a' is listed twice (first at hosts[0])"
    )


def test_error_host_listed_twice_after_generated_hosts_names_the_file_entries() -> None:
    doc = {
        "levels": LEVELS2,
        "generate": {"nodes": 2, "devices": 8, "fanout": {"leaf": 2}},
        "hosts": [{"name": "x", "devices": 8}, {"name": "node02", "devices": 8}],
    }
    assert error_of(cluster_from_dict, doc, "c.yaml") == (
        "c.yaml: hosts[1].name: host 'node02' is listed twice (first at generate (host 'node02'))"
    )


def test_error_top_level_of_a_generator() -> None:
    doc = {"levels": LEVELS3, "generate": {"nodes": 64, "devices": 8, "fanout": {"leaf": 16, "spine": 2}}}
    assert error_of(cluster_from_dict, doc, "c.yaml") == (
        "c.yaml: generate.fanout.spine: gives 2 spine domains; the top level must be one domain: raise it to >= 4 "
        "or add a level above"
    )


def test_several_errors_of_one_file_are_reported_together(tmp_path: Path) -> None:
    cluster = write(
        tmp_path,
        "cluster.yaml",
        """\
        levels:
          - {name: node, bandwidth_gbps: 450, latency_us: -1}
          - {name: leaf, bandwidth_gbps: -5}
          - {name: spine, bandwidth_gbps: 25}
        node_types: [{name: t, devices: 8, colour: red}]
        generate: {nodes: 8, node_type: t, fanout: {leaf: 0}}
        hosts:
          - {name: extra, node_type: u, domains: {leaf: l9}}
          - {name: extra, devices: 8, domains: {leaf: l9}}
    """,
    )
    with pytest.raises(InputError) as info:
        load_cluster(cluster)
    assert [str(p) for p in info.value.problems] == [
        "levels[0].latency_us: must be >= 0, got -1",
        "levels[1].bandwidth_gbps: must be > 0, got -5",
        "node_types[0].colour: unknown field; expected one of ['cpu_affinity', 'devices', 'kind', 'matrix', "
        "'mesh_link_gbps', 'name', 'nic_gbps', 'nics', 'numa_affinity', 'nvidia_smi', 'nvidia_smi_table', 'rails']",
        "generate.fanout.leaf: must be >= 1, got 0",
        "hosts[0].node_type: unknown node type 'u'; defined: ['t']",
    ]
    assert str(info.value).startswith(f"{cluster}: 5 error(s)\n  - levels[0].latency_us")


def test_structural_errors_join_the_reader_errors() -> None:
    doc = {
        "levels": [LEVELS2[0], {"name": "leaf", "bandwidth_gbps": -5}],
        "hosts": [{"name": "a", "devices": 8}, {"name": "a", "devices": 8}],
    }
    assert error_of(cluster_from_dict, doc, "c.yaml") == (
        "c.yaml: 2 error(s)\n"
        "  - levels[1].bandwidth_gbps: must be > 0, got -5\n"
        "  - hosts[1].name: host 'a' is listed twice (first at hosts[0])"
    )


def test_cluster_without_hosts_or_levels() -> None:
    assert error_of(cluster_from_dict, {"levels": LEVELS2}, "c.yaml") == (
        "c.yaml: the cluster names no hosts: give `generate` (compact) and/or `hosts` (explicit)"
    )
    assert error_of(cluster_from_dict, {"hosts": [{"name": "a", "devices": 1}]}, "c.yaml") == (
        "c.yaml: levels: is required: the domain levels bottom up, e.g. [{name: node, ...}, {name: leaf, ...}]"
    )


def test_load_document_syntax_errors(tmp_path: Path) -> None:
    bad_yaml = write(tmp_path, "c.yaml", "levels: [a, b\nhosts: 1\n")
    assert error_of(load_document, bad_yaml).startswith(f"{bad_yaml}: line 2, column 6: invalid YAML: ")
    bad_json = write(tmp_path, "c.json", '{"levels": [1,]}')
    assert (
        error_of(load_document, bad_json) == f"{bad_json}: line 1, column 15: invalid JSON: Expecting value"
    )
    assert error_of(load_document, tmp_path / "none.yaml") == (
        f"{tmp_path / 'none.yaml'}: cannot read the file: No such file or directory"
    )
    good = write(tmp_path, "c.json", json.dumps({"levels": LEVELS2}))
    assert load_document(good) == {"levels": LEVELS2}


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
        "links[2]: a link entry needs failed: true or a slowdown >= 1",
    ]


# ---- jobs ---------------------------------------------------------------------------------------------------------


def test_structured_job_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "moe.yaml",
        """\
        name: moe
        device_kind: H100
        parallel: {tp: 2, ep: 4, dp: 2, pp: 2, order: tp-ep-dp-pp-cp}
        model: {parameters: 1.2e10, hidden: 2048, layers: 16, seq_len: 8192, micro_batches: 4,
                experts: 8, top_k: 2, expert_parameters: 8e9, grad_bytes_per_element: 4, kv_fraction: 0.125}
        exposure: {dp: 0.3}
        constraints:
          require: {tp: node}
          prefer: {ep: leaf}
          spread: [{kind: power, scope: dp, min_domains: 2}, {kind: leaf, max_ranks_per_domain: 16}]
          pins: {0: node01/gpu0}
          exclude: [node04, leaf:leaf02]
    """,
    )
    j = load_job(path)
    assert (j.name, j.ranks, j.device_kind, j.structured) == ("moe", 32, "H100", True)
    assert j.parallel is not None and j.model is not None
    assert (j.parallel.tp, j.parallel.ep, j.parallel.dp, j.parallel.pp, j.parallel.cp) == (2, 4, 2, 2, 1)
    assert j.parallel.order == "tp-ep-dp-pp-cp"
    assert (
        j.model.parameters == 1.2e10
        and j.model.expert_parameters == 8e9
        and j.model.grad_bytes_per_element == 4
    )
    assert (j.model.micro_batch, j.model.bytes_per_element, j.model.kv_fraction) == (1, 2, 0.125)
    assert j.exposure == {"dp": 0.3}
    c = j.constraints
    assert c.require == {"tp": "node"} and c.prefer == {"ep": "leaf"} and c.pins == {0: "node01/gpu0"}
    assert [(s.kind, s.scope, s.min_domains, s.max_ranks_per_domain) for s in c.spread] == [
        ("power", "dp", 2, None),
        ("leaf", "job", None, 16),
    ]
    assert c.exclude == ("node04", "leaf:leaf02")


def test_explicit_job_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "ex.json",
        json.dumps(
            {
                "ranks": 16,
                "groups": [
                    {"label": "tp", "kind": "all_reduce", "members": "0-3,8-11", "bytes": 1e8, "count": 4},
                    {"kind": "all_to_all", "members": [4, 5, 6, 7], "bytes": "2e6", "exposed": 0.5},
                ],
                "edges": [
                    {"src": 3, "dst": 12, "bytes": 5e5},
                    {"label": "kv", "src": 1, "dst": 2, "bytes": 1, "count": 8},
                ],
            }
        ),
    )
    j = load_job(path)
    assert (j.name, j.ranks, j.structured) == ("ex", 16, False)
    g0, g1 = j.groups
    assert (g0.label, g0.kind, g0.members, g0.bytes, g0.count, g0.exposed) == (
        "tp",
        CollectiveKind.ALL_REDUCE,
        (0, 1, 2, 3, 8, 9, 10, 11),
        1e8,
        4.0,
        1.0,
    )
    assert (g1.label, g1.kind, g1.members, g1.bytes, g1.count, g1.exposed) == (
        "all_to_all",
        CollectiveKind.ALL_TO_ALL,
        (4, 5, 6, 7),
        2e6,
        1.0,
        0.5,
    )
    assert [(e.label, e.src, e.dst, e.bytes, e.count) for e in j.edges] == [
        ("p2p", 3, 12, 5e5, 1.0),
        ("kv", 1, 2, 1.0, 8.0),
    ]


def test_error_rank_count_differs_from_the_parallel_sizes() -> None:
    doc = {"ranks": 16, "parallel": {"tp": 8, "dp": 4}, "model": MODEL}
    assert (
        error_of(job_from_dict, doc, "j.yaml")
        == "j.yaml: ranks: 16 does not equal tp*cp*ep*dp*pp = 8*1*1*4*1 = 32"
    )


def test_error_order_misses_a_dimension() -> None:
    doc = {"parallel": {"tp": 8, "dp": 4, "order": "tp-cp-dp-pp"}, "model": MODEL}
    assert error_of(job_from_dict, doc, "j.yaml") == (
        "j.yaml: parallel.order: 'tp-cp-dp-pp' misses ep; it must name each of tp, cp, ep, dp, pp once, e.g. 'tp-cp-ep-dp-pp'"
    )
    doc = {"parallel": {"tp": 2, "order": "tp-tp-cp-ep-dp-xp"}, "model": MODEL}
    assert error_of(job_from_dict, doc, "j.yaml") == (
        "j.yaml: parallel.order: 'tp-tp-cp-ep-dp-xp' misses pp and has unknown 'xp' and repeats tp; it must name each "
        "of tp, cp, ep, dp, pp once, e.g. 'tp-cp-ep-dp-pp'"
    )


def test_job_errors_are_reported_together() -> None:
    doc = {
        "parallel": {"tp": 0, "ep": 2, "pp": 3},
        "model": {"parameters": 1e9, "hidden": 1024, "layers": 32},
        "exposure": {"dp": 1.5},
        "constraints": {"pins": {"x": "node01/gpu0", "99": "node01/gpu1"}, "spread": [{"kind": "power"}]},
    }
    with pytest.raises(InputError) as info:
        job_from_dict(doc, "j.yaml")
    assert [str(p) for p in info.value.problems] == [
        "parallel.tp: must be >= 1, got 0",
        "model.seq_len: is required",
        "model.layers: 32 layers do not split evenly over pp=3 stages",
        "model.experts: ep=2 needs experts >= ep and top_k >= 1, got experts=0, top_k=0",
        "exposure.dp: an exposed fraction is in [0, 1], got 1.5",
        "constraints.spread[0]: give min_domains and/or max_ranks_per_domain",
        "constraints.pins.x: keys are rank numbers",
        "constraints.pins.99: rank 99 outside 0..5",
    ]


def test_explicit_job_errors() -> None:
    doc = {
        "ranks": 4,
        "groups": [{"kind": "broadcast", "members": [0, 4, 4], "bytes": 1}, {"members": "3-1", "bytes": 1}],
        "edges": [{"src": 2, "dst": 2, "bytes": 1}],
    }
    with pytest.raises(InputError) as info:
        job_from_dict(doc, "j.yaml")
    assert [str(p) for p in info.value.problems] == [
        "groups[0].kind: unknown collective 'broadcast'; known: ['all_gather', 'all_reduce', 'all_to_all', 'reduce_scatter']",
        "groups[0].members: rank(s) [4, 4] outside 0..3",
        "groups[0].members: lists a rank twice",
        "groups[1].members: bad rank range '3-1': 1 < 3",
        "groups[1].members: a group needs >= 2 members, got 0",
        "edges[0]: an edge joins two different ranks, got 2->2",
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


def test_malformed_values_are_input_errors_not_exceptions() -> None:
    # each of these used to escape as ZeroDivisionError, TypeError or KeyError
    doc = {"levels": LEVELS2, "generate": {"nodes": "many", "devices": 8}}
    assert (
        error_of(cluster_from_dict, doc, "c.yaml") == "c.yaml: generate.nodes: must be an integer, got 'many'"
    )
    doc = {"levels": LEVELS2, "hosts": [{"name": "a", "node_type": ["t"]}]}
    assert (
        error_of(cluster_from_dict, doc, "c.yaml")
        == "c.yaml: hosts[0].node_type: unknown node type ['t']; defined: []"
    )
    doc = {"levels": LEVELS2, "generate": {"nodes": 2, "devices": 8, "host_format": "gpu-{name}"}}
    assert error_of(cluster_from_dict, doc, "c.yaml") == (
        "c.yaml: generate.host_format: 'gpu-{name}' is not a format with one positional field like 'gpu-{:03d}': 'name'"
    )


def test_exposed_fraction_of_explicit_groups_and_edges_is_bounded() -> None:
    doc = {
        "ranks": 2,
        "groups": [{"members": [0, 1], "bytes": 1, "exposed": 2}],
        "edges": [{"src": 0, "dst": 1, "bytes": 1, "exposed": 1.5}],
    }
    with pytest.raises(InputError) as info:
        job_from_dict(doc, "j.yaml")
    assert [str(p) for p in info.value.problems] == [
        "groups[0].exposed: an exposed fraction is in [0, 1], got 2",
        "edges[0].exposed: an exposed fraction is in [0, 1], got 1.5",
    ]
    ok = job_from_dict({"ranks": 2, "groups": [{"members": [0, 1], "bytes": 1, "exposed": 0}]})
    assert ok.groups[0].exposed == 0.0
