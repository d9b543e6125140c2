"""Tests of placement.io.importers.k8s on GKE- and EKS-style node lists (tests/fixtures/k8s) and on broken inputs."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.errors import InputError
from placement.io.importers.k8s import parse_k8s_nodes, short_level_name
from placement.io.native import cluster_from_dict
from tests.conftest import FIXTURES, shared_file

K8S_FIXTURES = FIXTURES / "k8s"

GKE_LEVELS = [
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
    "kubernetes.io/hostname",
]
EKS_LEVELS = [
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "kubernetes.io/hostname",
]


def _load(name: str) -> Any:
    return json.loads((K8S_FIXTURES / name).read_text())


def _levels(cluster: dict[str, Any]) -> list[str]:
    return [level["name"] for level in cluster["levels"]]


def _domains(cluster: dict[str, Any], level: str) -> Counter[str]:
    return Counter(h["domains"][level] for h in cluster["hosts"])


def _problems(err: pytest.ExceptionInfo[InputError]) -> list[str]:
    return [str(p) for p in err.value.problems]


def _error(obj: Any, **kw: Any) -> list[str]:
    kw.setdefault("levels", GKE_LEVELS)
    with pytest.raises(InputError) as info:
        parse_k8s_nodes(obj, "nodes.json", **kw)
    return _problems(info)


def _check_common(cluster: dict[str, Any]) -> None:
    names = _levels(cluster)
    assert names[0] == "node" and len(set(names)) == len(names)
    hosts = [h["name"] for h in cluster["hosts"]]
    assert len(set(hosts)) == len(hosts)
    for host in cluster["hosts"]:
        assert list(host["domains"]) == names[1:]
    assert len(_domains(cluster, names[-1])) == 1


# ------------------------------------------------------------------------------------------------ GKE


def test_gke_block_subblock_host() -> None:
    text = (K8S_FIXTURES / "gke-a3mega-nodes.json").read_text()
    cluster, warnings = parse_k8s_nodes(text, "gke-a3mega-nodes.json", levels=",".join(GKE_LEVELS))
    _check_common(cluster)
    assert cluster["name"] == "gke-a3mega-nodes"
    assert _levels(cluster) == ["node", "host", "subblock", "block", "cluster"]
    assert len(cluster["hosts"]) == 16
    assert all(h["devices"] == 8 for h in cluster["hosts"])
    assert all("kind" not in h for h in cluster["hosts"])  # GKE without the GPU Operator: no gpu.product
    blocks, subblocks, hosts = (_domains(cluster, level) for level in ("block", "subblock", "host"))
    assert len(blocks) == 2 and set(blocks.values()) == {8}
    assert len(subblocks) == 4 and set(subblocks.values()) == {4}
    assert len(hosts) == 16
    # hosts keep the items order (items[0] is the CPU node that is skipped)
    items = _load("gke-a3mega-nodes.json")["items"]
    assert [h["name"] for h in cluster["hosts"]] == [i["metadata"]["name"] for i in items[1:]]
    first = items[1]["metadata"]["labels"]
    assert cluster["hosts"][0]["domains"] == {
        "host": first["cloud.google.com/gce-topology-host"],
        "subblock": first["cloud.google.com/gce-topology-subblock"],
        "block": first["cloud.google.com/gce-topology-block"],
        "cluster": "cluster",
    }
    assert warnings == [
        'skipped 1 node(s) without "nvidia.com/gpu" and without level labels (CPU/system nodes): '
        "gke-train-default-pool-1f0e9c2a-q7rt"
    ]


def test_gke_without_hostname_key_uses_metadata_name_and_a_host_level() -> None:
    cluster, _ = parse_k8s_nodes(
        _load("gke-a3mega-nodes.json"),
        "gke",
        levels=GKE_LEVELS[:3],
        level_names=["nvl_block", "rack", "machine"],
    )
    _check_common(cluster)
    assert _levels(cluster) == ["node", "machine", "rack", "nvl_block", "cluster"]
    assert cluster["hosts"][0]["name"] == _load("gke-a3mega-nodes.json")["items"][1]["metadata"]["name"]
    assert len(_domains(cluster, "machine")) == 16


def test_gke_two_levels_only() -> None:
    cluster, _ = parse_k8s_nodes(_load("gke-a3mega-nodes.json"), "gke", levels=[GKE_LEVELS[0], GKE_LEVELS[3]])
    assert _levels(cluster) == ["node", "block", "cluster"]
    cluster, _ = parse_k8s_nodes(_load("gke-a3mega-nodes.json"), "gke", levels=[GKE_LEVELS[3]])
    assert _levels(cluster) == ["node", "cluster"]
    assert len(cluster["hosts"]) == 16


# ------------------------------------------------------------------------------------------------ EKS


def test_eks_network_node_layers() -> None:
    cluster, warnings = parse_k8s_nodes(_load("eks-p5-nodes.json"), "eks-p5-nodes.json", levels=EKS_LEVELS)
    _check_common(cluster)
    assert _levels(cluster) == ["node", "layer3", "layer2", "layer1", "cluster"]
    assert len(cluster["hosts"]) == 10
    assert {(h["devices"], h["kind"]) for h in cluster["hosts"]} == {(8, "NVIDIA-H100-80GB-HBM3")}
    assert sorted(_domains(cluster, "layer1").values()) == [4, 6]
    assert sorted(_domains(cluster, "layer2").values()) == [2, 4, 4]
    assert sorted(_domains(cluster, "layer3").values()) == [2, 2, 2, 2, 2]
    assert all(v.startswith("nn-") and len(v) == 20 for v in _domains(cluster, "layer3"))
    assert cluster["hosts"][0]["name"] == "ip-10-1-20-18.us-west-2.compute.internal"
    assert warnings == [
        'skipped 1 node(s) without "nvidia.com/gpu" and without level labels (CPU/system nodes): '
        "ip-10-1-20-11.us-west-2.compute.internal",
        'skipped 1 node(s) with 0 "nvidia.com/gpu": ip-10-1-22-88.us-west-2.compute.internal (capacity 8)',
    ]


def test_eks_level_names_follow_the_levels_order() -> None:
    cluster, _ = parse_k8s_nodes(
        _load("eks-p5-nodes.json"),
        "eks",
        levels=EKS_LEVELS,
        level_names=["spine", "aggregation", "leaf"],
        name="p5-cb",
    )
    assert cluster["name"] == "p5-cb"
    assert _levels(cluster) == ["node", "leaf", "aggregation", "spine", "cluster"]


def test_eks_one_spine_needs_no_cluster_level() -> None:
    doc = _load("eks-p5-nodes.json")
    spine = doc["items"][1]["metadata"]["labels"]["topology.k8s.aws/network-node-layer-1"]
    doc["items"] = [
        i
        for i in doc["items"]
        if i["metadata"]["labels"].get("topology.k8s.aws/network-node-layer-1") == spine
    ]
    cluster, _ = parse_k8s_nodes(doc, "eks", levels=EKS_LEVELS)
    assert _levels(cluster) == ["node", "layer3", "layer2", "layer1"]
    assert len(cluster["hosts"]) == 6


def test_gpu_count_fallbacks() -> None:
    doc = _load("eks-p5-nodes.json")
    node = doc["items"][1]
    del node["status"]["allocatable"]["nvidia.com/gpu"]
    node["status"]["capacity"]["nvidia.com/gpu"] = "4"
    other = doc["items"][2]
    del other["status"]["allocatable"]["nvidia.com/gpu"]
    del other["status"]["capacity"]["nvidia.com/gpu"]
    other["metadata"]["labels"]["nvidia.com/gpu.count"] = "2"
    cluster, _ = parse_k8s_nodes(doc, "eks", levels=EKS_LEVELS)
    assert [h["devices"] for h in cluster["hosts"][:3]] == [4, 2, 8]


def test_amd_resource_name() -> None:
    doc = _load("eks-p5-nodes.json")
    for item in doc["items"]:
        for section in ("allocatable", "capacity"):
            table = item["status"][section]
            if "nvidia.com/gpu" in table:
                table["amd.com/gpu"] = table.pop("nvidia.com/gpu")
        item["metadata"]["labels"].pop("nvidia.com/gpu.count", None)
    cluster, _ = parse_k8s_nodes(doc, "eks", levels=EKS_LEVELS, gpu_resource="amd.com/gpu")
    assert len(cluster["hosts"]) == 10
    with pytest.raises(InputError) as info:
        parse_k8s_nodes(doc, "eks", levels=EKS_LEVELS)
    assert len(info.value.problems) == 11
    assert _problems(info)[0] == (
        'items[1].status.allocatable: node "ip-10-1-20-18.us-west-2.compute.internal" has level labels but '
        "no "
        '"nvidia.com/gpu" in allocatable or capacity and no label "nvidia.com/gpu.count"; check gpu_resource'
    )


# ------------------------------------------------------------------------------------------ input forms


def test_single_node_yaml_and_bytes() -> None:
    node = _load("gke-a3mega-nodes.json")["items"][1]
    cluster, _ = parse_k8s_nodes(node, "node.json", levels=GKE_LEVELS)
    assert [h["name"] for h in cluster["hosts"]] == [node["metadata"]["name"]]
    assert _levels(cluster) == ["node", "host", "subblock", "block"]
    as_yaml = yaml.safe_dump({"apiVersion": "v1", "kind": "NodeList", "items": [node]})
    assert parse_k8s_nodes(as_yaml, "nodes.yaml", levels=GKE_LEVELS)[0]["hosts"] == cluster["hosts"]
    as_bytes = json.dumps(node).encode()
    assert parse_k8s_nodes(as_bytes, "node.json", levels=GKE_LEVELS)[0]["hosts"] == cluster["hosts"]


@pytest.mark.parametrize(
    ("key", "short"),
    [
        ("cloud.google.com/gce-topology-block", "block"),
        ("cloud.google.com/gce-topology-subblock", "subblock"),
        ("cloud.google.com/gce-topology-host", "host"),
        ("topology.k8s.aws/network-node-layer-3", "layer3"),
        ("cloud.provider.com/topology-rack", "rack"),
        ("oci.oraclecloud.com/host.rack_id", "rack"),
        ("oci.oraclecloud.com/host.network_block_id", "network_block"),
        ("fabric.topograph.run/tier-0", "tier0"),
        ("accelerator.topograph.run/sub-domain", "sub_domain"),
        ("topology.kubernetes.io/zone", "zone"),
        ("rack", "rack"),
    ],
)
def test_short_level_name(key: str, short: str) -> None:
    assert short_level_name(key) == short


# -------------------------------------------------------------------------------------------- errors


def test_broken_fixture_reports_every_problem_with_its_item_path() -> None:
    text = (K8S_FIXTURES / "broken-nodes.json").read_text()
    levels = ",".join([GKE_LEVELS[0], GKE_LEVELS[1], GKE_LEVELS[3]])
    with pytest.raises(InputError) as info:
        parse_k8s_nodes(text, "broken-nodes.json", levels=levels)
    items = _load("broken-nodes.json")["items"]
    block0 = items[0]["metadata"]["labels"]["cloud.google.com/gce-topology-block"]
    block3 = items[3]["metadata"]["labels"]["cloud.google.com/gce-topology-block"]
    sub = items[0]["metadata"]["labels"]["cloud.google.com/gce-topology-subblock"]
    sub_key = 'metadata.labels["cloud.google.com/gce-topology-subblock"]'
    assert info.value.source == "broken-nodes.json"
    assert _problems(info) == [
        f'items[1].{sub_key}: missing on node "gke-train-a3mega-pool-6b1d2e7f-bbbb"; every GPU node needs '
        f"all 2 "
        "level labels",
        "items[2].status.allocatable[\"nvidia.com/gpu\"]: 'eight' on node "
        '"gke-train-a3mega-pool-6b1d2e7f-cccc" '
        "is not a whole number of GPUs",
        f'items[3].{sub_key}: subblock "{sub}" is under block "{block3}" here but under block "{block0}" at '
        f"items[0].{sub_key}; label values must be global ids (one parent each)",
        'items[4].metadata.labels["kubernetes.io/hostname"]: host "gke-train-a3mega-pool-6b1d2e7f-aaaa" '
        "appears "
        "twice (first at items[0]); host names must be unique",
        "items[5].kind: expected \"Node\", got 'Pod'; list nodes only (kubectl get nodes -o json)",
    ]


@pytest.mark.parametrize(
    ("levels", "level_names", "expected"),
    [
        (
            ["a.example/rack", "b.example/rack", "kubernetes.io/hostname"],
            None,
            [
                'levels: "a.example/rack" and "b.example/rack" both shorten to the level name "rack"; pass '
                "level_names "
                "with 2 unique names, coarse -> fine"
            ],
        ),
        (
            ["x.example/node"],
            None,
            ['levels: "x.example/node" shortens to "node", the name of the host level; pass level_names'],
        ),
        (
            ["kubernetes.io/hostname", "cloud.google.com/gce-topology-block"],
            None,
            ['levels: "kubernetes.io/hostname" must be the finest (last) key, as in Kueue TAS'],
        ),
        (
            [],
            None,
            [
                "levels: is empty; give the topology label keys coarse -> fine, e.g. "
                "cloud.google.com/gce-topology-block,...,kubernetes.io/hostname"
            ],
        ),
        (
            GKE_LEVELS,
            ["block", "subblock"],
            [
                "level_names: has 2 name(s) but there are 3 level key(s) to name "
                "(cloud.google.com/gce-topology-block, "
                "cloud.google.com/gce-topology-subblock, cloud.google.com/gce-topology-host); give one name per "
                "key, "
                "coarse -> fine (kubernetes.io/hostname names the host and gets none)"
            ],
        ),
        (
            GKE_LEVELS,
            ["a", "a", "node"],
            [
                'level_names[1]: "a" is used twice; level names must be unique',
                'level_names[2]: "node" is the host level; choose another name',
            ],
        ),
    ],
)
def test_level_argument_errors(levels: list[str], level_names: list[str] | None, expected: list[str]) -> None:
    assert _error(_load("gke-a3mega-nodes.json"), levels=levels, level_names=level_names) == expected


def test_cluster_is_a_reserved_name_when_the_top_needs_it() -> None:
    with pytest.raises(InputError, match='the name "cluster" is taken'):
        parse_k8s_nodes(
            _load("gke-a3mega-nodes.json"),
            "gke",
            levels=GKE_LEVELS,
            level_names=["cluster", "subblock", "host"],
        )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"items": [', ["line 1, column 12: is not valid JSON: Expecting value"]),
        ("", ["is empty; expected the output of kubectl get nodes -o json"]),
        ("[1, 2]", ["expected a Node list (kubectl get nodes -o json) or one Node, got a list"]),
        ('{"kind": "Pod"}', ["kind: expected a List/NodeList with items or a Node, got kind 'Pod'"]),
        ('{"items": {}}', ["items: must be a list of Nodes, got a mapping"]),
        (
            '{"items": []}',
            ['items: no node has a "nvidia.com/gpu" count above 0 and the level labels; nothing to import'],
        ),
        (
            "items: [a: b: c]",
            ["line 1, column 13: is neither JSON nor valid YAML: expected ',' or ']', but got ':'"],
        ),
    ],
)
def test_document_errors(text: str, expected: list[str]) -> None:
    assert _error(text) == expected


def test_another_format_is_refused_in_one_line_naming_its_importer() -> None:
    """An ibnetdiscover dump is not "neither JSON nor valid YAML" but a fabric dump: one line, the right command."""
    dump = shared_file("topologies/cluster_fabric/nvidia_topograph/tests/output/ibnetdiscover/example.out")
    assert _error(dump.read_text()) == [
        "this is an `ibnetdiscover` InfiniBand fabric dump, not a Kubernetes node list (kubectl get nodes -o json); "
        "use `placement import ibnetdiscover nodes.json`"
    ]
    from typer.testing import CliRunner

    from placement.cli.app import app

    res = CliRunner().invoke(app, ["import", "k8s", str(dump), "--levels", ",".join(GKE_LEVELS)])
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "placement import ibnetdiscover" in res.output, (
        res.output
    )


def test_item_shape_errors() -> None:
    node = _load("gke-a3mega-nodes.json")["items"][1]
    no_meta = copy.deepcopy(node)
    del no_meta["metadata"]
    bad_labels = copy.deepcopy(node)
    bad_labels["metadata"]["labels"] = ["a"]
    negative = copy.deepcopy(node)
    negative["status"]["allocatable"]["nvidia.com/gpu"] = -1
    empty_label = copy.deepcopy(node)
    empty_label["metadata"]["labels"]["cloud.google.com/gce-topology-block"] = ""
    doc = {"kind": "List", "items": ["node-a", no_meta, bad_labels, negative, empty_label]}
    assert _error(doc) == [
        "items[0]: expected a Node object, got a string",
        "items[1].metadata: must be a mapping with name and labels, got nothing",
        "items[2].metadata.labels: must be a mapping of label key to value, got a list",
        f'items[3].status.allocatable["nvidia.com/gpu"]: -1 on node "{node["metadata"]["name"]}" is not a '
        f"whole "
        "number of GPUs",
        f"items[4].metadata.labels[\"cloud.google.com/gce-topology-block\"]: empty or not a string ('') on "
        f"node "
        f'"{node["metadata"]["name"]}"; every GPU node needs all 3 level labels',
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-2, 9) | st.sampled_from(["8", "Node", "List", "x", ""]),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "kind",
                        "items",
                        "metadata",
                        "name",
                        "labels",
                        "status",
                        "allocatable",
                        "capacity",
                        "nvidia.com/gpu",
                        "kubernetes.io/hostname",
                        "cloud.google.com/gce-topology-block",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=25,
    )
)
def test_never_leaks_a_raw_exception(doc: Any) -> None:
    try:
        cluster, _ = parse_k8s_nodes(
            json.dumps(doc),
            "fuzz.json",
            levels=["cloud.google.com/gce-topology-block", "kubernetes.io/hostname"],
        )
    except InputError as err:
        assert err.problems
    else:
        _check_common(cluster)


def test_nvlink_partition_labels_make_nvlink_levels() -> None:
    # two GB200 trays in one NVLink partition (the GPU Operator's clique label) under one block
    def node(name: str, clique: str) -> dict[str, Any]:
        labels = {
            "cloud.google.com/gce-topology-block": "b0",
            "nvidia.com/gpu.clique": clique,
            "kubernetes.io/hostname": name,
            "nvidia.com/gpu.product": "GB200",
        }
        return {
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}},
        }

    doc = {"kind": "NodeList", "items": [node("t0", "uuid1.1"), node("t1", "uuid1.1"), node("t2", "uuid1.2")]}
    levels = "cloud.google.com/gce-topology-block,nvidia.com/gpu.clique,kubernetes.io/hostname"
    cluster, _ = parse_k8s_nodes(json.dumps(doc), "gb200.json", levels=levels)
    assert [(lv["name"], lv.get("nvlink", False)) for lv in cluster["levels"]] == [
        ("node", False),
        ("gpu_clique", True),
        ("block", False),
    ]
    # the native reader keeps the mark (tiers as `placement import` fills them)
    for lv, gbps in zip(cluster["levels"], (900.0, 900.0, 50.0), strict=True):
        lv["bandwidth_gbps"] = gbps
    topo, _ = cluster_from_dict(cluster)
    assert [lv.nvlink for lv in topo.levels] == [False, True, False]
