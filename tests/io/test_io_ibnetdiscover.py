"""ibnetdiscover importer: the shared NDR fabric dump (topograph's example.out), checked by hand against the dump,
refusals, and a non-tree fabric through the pair-path graph."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from placement.cli.app import app
from placement.errors import InputError
from placement.io.importers.graph import topology_from_graph
from placement.io.importers.ibnetdiscover import fabric_graph, parse_ibnetdiscover, read_ibnetdiscover
from placement.io.importers.slurm import read_slurm
from placement.io.native import load_cluster
from tests.conftest import shared_file

DUMP = "topologies/cluster_fabric/nvidia_topograph/tests/output/ibnetdiscover"


def test_shared_dump_tree_hosts_and_rails() -> None:
    fab, raw = read_ibnetdiscover(shared_file(f"{DUMP}/example.out"))
    assert sum(n.kind == "Switch" for n in raw.nodes.values()) == 40
    assert [lv["name"] for lv in fab.doc["levels"]] == ["node", "leaf", "spine"]
    hosts = {h["name"]: h["domains"] for h in fab.doc["hosts"]}
    assert len(hosts) == 122
    # line 11: "a08-p1-dgx-04-c01 mlx5_5" on IBLEAF-04-04; its unit's four rail leaves IBLEAF-01..04-04
    assert hosts["a08-p1-dgx-04-c01"] == {"leaf": "A09-P1-IBLEAF-01-04+3", "spine": "A10-P1-IBSPINE-01+8"}
    units = Counter(d["leaf"] for d in hosts.values())
    assert units["A09-P1-IBLEAF-01-04+3"] == 17 and len(units) == 8
    assert len({d["spine"] for d in hosts.values()}) == 1  # 9 spines reach every leaf: one domain
    # HCA-1/2/5/6 and mlx5_0/1/4/5: rails 0, 1, 4, 5; 4xNDR = 50 GB/s
    assert fab.host_nics["a08-p1-dgx-04-c01"] == [(0, 50.0), (1, 50.0), (4, 50.0), (5, 50.0)]
    assert fab.host_nics["a06-p1-dgx-02-c01"] == [(0, 50.0), (1, 50.0), (4, 50.0), (5, 50.0)]
    assert fab.rail_optimized
    assert any("MT4129 ConnectX7" in w and "Aggregation Node" in w for w in fab.warnings)


def test_bad_dump_and_other_importers() -> None:
    with pytest.raises(InputError) as e:
        read_ibnetdiscover(shared_file(f"{DUMP}/example-bad.out"))
    assert len(e.value.problems) == 1 and "no switch" in e.value.render()
    with pytest.raises(InputError) as e:
        read_slurm(shared_file(f"{DUMP}/example.out"))
    assert len(e.value.problems) == 1 and "placement import ibnetdiscover" in e.value.render()


NON_TREE = """Switch\t4 "S-01"\t\t# "leafA" enhanced port 0 lid 1 lmc 0
[1]\t"H-a1"[1](a1) \t\t# "hostA mlx5_0" lid 3 4xHDR
[2]\t"S-02"[2]\t\t# "leafB" lid 2 4xHDR

Switch\t4 "S-02"\t\t# "leafB" enhanced port 0 lid 2 lmc 0
[1]\t"H-b1"[1](b1) \t\t# "hostB mlx5_0" lid 4 4xHDR
[2]\t"S-01"[2]\t\t# "leafA" lid 1 4xHDR

Ca\t1 "H-a1"\t\t# "hostA mlx5_0"
[1](a1) \t"S-01"[1]\t\t# lid 3 lmc 0 "leafA" lid 1 4xHDR

Ca\t1 "H-b1"\t\t# "hostB mlx5_0"
[1](b1) \t"S-02"[1]\t\t# lid 4 lmc 0 "leafB" lid 2 4xHDR
"""


def test_non_tree_fabric_warns_and_gives_a_pair_path_graph() -> None:
    fab, raw = parse_ibnetdiscover(NON_TREE, "x.out")
    assert any(w.startswith("not a tree: 1 link(s)") for w in fab.warnings)
    topo = topology_from_graph(fabric_graph(raw))
    assert topo.num_devices == 2 and topo.pair_paths is not None
    assert topo.pair_paths[0][1].bandwidth_gbps == 25.0  # 4xHDR = 200 Gb/s


def test_syntax_errors_name_the_line() -> None:
    with pytest.raises(InputError, match="line 2: unexpected line"):
        parse_ibnetdiscover('Switch\t4 "S-01"\t\t# "leafA"\nnonsense here\n', "x.out")


def test_cli_with_per_host_node_files(tmp_path: Path) -> None:
    dump = shared_file(f"{DUMP}/example.out")
    ndv5 = shared_file("topologies/nccl_xml/azure/ndv5-topo.xml")
    p5 = shared_file("topologies/nccl_xml/aws/p5.48xl-topo.xml")
    out = tmp_path / "c.yaml"
    res = CliRunner().invoke(
        app,
        [
            "import",
            "ibnetdiscover",
            str(dump),
            "--node-topo",
            f"a0*={ndv5}",
            "--node-topo",
            str(p5),
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    topo, _ = load_cluster(out)
    types = {topo.host_names[i]: t for i, t in enumerate(topo.host_types)}
    assert (
        types["a05-p1-dgx-01-c01"].name == "ndv5-topo" and types["b05-p1-dgx-05-c01"].name == "p5.48xl-topo"
    )
    assert types["a05-p1-dgx-01-c01"].nic_gbps == 50.0  # the XML has no NIC speed: the dump's 4xNDR
    assert (
        types["b05-p1-dgx-05-c01"].nic_gbps == 12.5 and types["b05-p1-dgx-05-c01"].nics == 32
    )  # the XML's EFA
    assert topo.rail_policy is not None and topo.levels[1].tier.bandwidth_gbps == 50.0
    plain = CliRunner().invoke(
        app, ["import", "ibnetdiscover", str(dump), "--no-rail-policy", "--out", str(out)]
    )
    assert plain.exit_code == 0 and load_cluster(out)[0].rail_policy is None
    # without a node file, device k sits on the fabric's rail k * 4 // 8 of rails (0, 1, 4, 5)
    assert load_cluster(out)[0].host_types[0].rails == (0, 0, 1, 1, 4, 4, 5, 5)
