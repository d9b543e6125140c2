"""placement.io.native clusters: compact, explicit and mixed hosts, node types, nvidia-smi references, fault
domains, the YAML/JSON document reader, and their error messages verbatim."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from placement.errors import InputError
from placement.io.native import cluster_from_dict, load_cluster, load_document
from placement.model.links import RailPolicy, Tier
from placement.sim.scenarios import A100_PCIE_PAIRS
from tests.support_native import LEVELS2, LEVELS3, error_of, write

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
