"""Tests of placement.io.slurm on the real topology.conf/topology.yaml examples and on synthetic broken "
"inputs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.errors import InputError
from placement.io.slurm import parse_topology_conf, parse_topology_yaml, read_slurm

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SLURM = DATA / "topologies" / "slurm"
TOPOGRAPH_CI = DATA / "topologies" / "cluster_fabric" / "nvidia_topograph" / "tests" / "ci"


def _data_files() -> list[Path]:
    if not SLURM.is_dir():
        return []
    return sorted(SLURM.iterdir()) + sorted(TOPOGRAPH_CI.glob("*.conf"))


def _need_data() -> None:
    if not SLURM.is_dir():
        pytest.skip(
            f"shared topology data not found at {SLURM} (expected next to the repo, /work/shared/data)"
        )


def _level_names(cluster: dict[str, Any]) -> list[str]:
    return [level["name"] for level in cluster["levels"]]


def _domains(cluster: dict[str, Any], level: str) -> Counter[str]:
    """Host count per domain of one level."""
    return Counter(host["domains"][level] for host in cluster["hosts"])


def _host(cluster: dict[str, Any], name: str) -> dict[str, Any]:
    return next(h for h in cluster["hosts"] if h["name"] == name)


def _problems(err: pytest.ExceptionInfo[InputError]) -> list[str]:
    return [str(p) for p in err.value.problems]


def _check_common(cluster: dict[str, Any]) -> None:
    """Invariants of every importer result: node first, each host once, a domain on every level, one top."""
    names = _level_names(cluster)
    assert names[0] == "node"
    assert len(set(names)) == len(names)
    hosts = [h["name"] for h in cluster["hosts"]]
    assert len(set(hosts)) == len(hosts)
    for host in cluster["hosts"]:
        assert list(host["domains"]) == names[1:]
    assert len(_domains(cluster, names[-1])) == 1


# ------------------------------------------------------------------------------------------ real files


def _expect_tree_3tier(cluster: dict[str, Any], warnings: list[str]) -> None:
    assert _level_names(cluster) == ["node", "switch1", "switch2", "switch3"]
    assert len(cluster["hosts"]) == 96
    leaves, spines, cores = (_domains(cluster, f"switch{i}") for i in (1, 2, 3))
    assert len(leaves) == 12 and set(leaves.values()) == {8}
    assert len(spines) == 6 and set(spines.values()) == {16}
    assert cores == Counter({"switch.3.1": 96})
    assert _host(cluster, "srv1101")["domains"] == {
        "switch1": "switch.1.1",
        "switch2": "switch.2.1",
        "switch3": "switch.3.1",
    }
    assert _host(cluster, "srv6208")["domains"]["switch1"] == "switch.1.12"
    assert _host(cluster, "srv6208")["domains"]["switch2"] == "switch.2.6"
    # leaf-2-1 (switch.1.3) hangs off spine-2 (switch.2.2)
    assert _host(cluster, "srv2101")["domains"]["switch2"] == "switch.2.2"
    assert cluster["hosts"][0]["name"] == "srv1101" and cluster["hosts"][-1]["name"] == "srv6208"
    assert warnings == []


def _expect_nvl_blocks(cluster: dict[str, Any], warnings: list[str]) -> None:
    assert _level_names(cluster) == ["node", "block", "block_x2", "block_x4", "cluster"]
    assert len(cluster["hosts"]) == 96
    blocks = _domains(cluster, "block")
    assert len(blocks) == 12 and set(blocks.values()) == {8}
    assert _domains(cluster, "block_x2") == Counter({f"rack[{r}1-{r}2]": 16 for r in range(1, 7)})
    assert _domains(cluster, "block_x4") == Counter(
        {"rack[11-12,21-22]": 32, "rack[31-32,41-42]": 32, "rack[51-52,61-62]": 32}
    )
    assert _host(cluster, "srv3205")["domains"] == {
        "block": "rack32",
        "block_x2": "rack[31-32]",
        "block_x4": "rack[31-32,41-42]",
        "cluster": "cluster",
    }
    assert warnings == []


def _expect_man5_tree(cluster: dict[str, Any], warnings: list[str]) -> None:
    assert _level_names(cluster) == ["node", "switch1", "switch2"]
    assert [h["name"] for h in cluster["hosts"]] == [f"dev{i}" for i in range(18)]
    assert _domains(cluster, "switch1") == Counter({"s0": 6, "s1": 6, "s2": 6})
    assert _domains(cluster, "switch2") == Counter({"s3": 18})
    assert _host(cluster, "dev11")["domains"] == {"switch1": "s1", "switch2": "s3"}
    assert warnings == []


def _expect_man5_block(cluster: dict[str, Any], warnings: list[str]) -> None:
    # BlockSizes=30,120: base 30, 120 = 4 x 30, so one aggregate of 4 blocks spans all 4 blocks.
    assert _level_names(cluster) == ["node", "block", "block_x4"]
    assert len(cluster["hosts"]) == 128
    assert _domains(cluster, "block") == Counter({"block1": 32, "block2": 32, "block3": 32, "block4": 32})
    assert _domains(cluster, "block_x4") == Counter({"block[1-4]": 128})
    assert _host(cluster, "node65")["domains"] == {"block": "block3", "block_x4": "block[1-4]"}
    assert warnings == [
        "4 block(s) have more nodes than the base block size 30 (block1: 32, block2: 32, block3: 32, "
        "block4: 32); all their nodes are imported, Slurm plans with the base size"
    ]


def _expect_man5_ring(cluster: dict[str, Any], warnings: list[str]) -> None:
    assert _level_names(cluster) == ["node", "ring", "cluster"]
    assert [h["name"] for h in cluster["hosts"]] == [f"node{i:02d}" for i in range(1, 17)]
    assert _domains(cluster, "ring") == Counter({"ring0": 8, "ring1": 8})
    assert _host(cluster, "node09")["domains"] == {"ring": "ring1", "cluster": "cluster"}
    assert warnings == []


def _expect_man5_yaml(cluster: dict[str, Any], warnings: list[str]) -> None:
    # cluster_default: True picks topo1, a single switch over node[01-04].
    assert cluster["name"] == "topo1"
    assert _level_names(cluster) == ["node", "switch1"]
    assert [h["name"] for h in cluster["hosts"]] == ["node01", "node02", "node03", "node04"]
    assert _domains(cluster, "switch1") == Counter({"sw_root": 4})
    assert warnings == []


EXPECTED = {
    "topology.conf.tree.3tier__nvidia_topograph_expected.conf": _expect_tree_3tier,
    "expected.slinky-oci-sim-tree.conf": _expect_tree_3tier,
    "topology.conf.block.nvl-racks__nvidia_topograph_expected.conf": _expect_nvl_blocks,
    "expected.slinky-dra-block.conf": _expect_nvl_blocks,
    "topology.conf.tree.example__slurm_man5.conf": _expect_man5_tree,
    "topology.conf.block.example__slurm_man5.conf": _expect_man5_block,
    "topology.conf.ring.example__slurm_man5.conf": _expect_man5_ring,
    "topology.yaml.example__slurm_man5.yaml": _expect_man5_yaml,
}


def test_every_data_file_has_expected_facts() -> None:
    _need_data()
    assert {p.name for p in _data_files()} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_file(name: str) -> None:
    _need_data()
    path = next(p for p in _data_files() if p.name == name)
    cluster, warnings = read_slurm(path)
    _check_common(cluster)
    EXPECTED[name](cluster, warnings)
    assert cluster == read_slurm(path)[0]  # deterministic


def test_cluster_name_defaults_to_the_file_stem() -> None:
    _need_data()
    cluster, _ = read_slurm(SLURM / "topology.conf.tree.example__slurm_man5.conf")
    assert cluster["name"] == "topology.conf.tree.example__slurm_man5"
    cluster, _ = read_slurm(SLURM / "topology.conf.tree.example__slurm_man5.conf", name="lab")
    assert cluster["name"] == "lab"


def test_3tier_level_names() -> None:
    _need_data()
    cluster, _ = read_slurm(
        SLURM / "topology.conf.tree.3tier__nvidia_topograph_expected.conf",
        level_names=["leaf", "spine", "core"],
    )
    assert _level_names(cluster) == ["node", "leaf", "spine", "core"]
    assert _host(cluster, "srv4203")["domains"] == {
        "leaf": "switch.1.8",
        "spine": "switch.2.4",
        "core": "switch.3.1",
    }


def test_3tier_level_names_count_mismatch_names_both_counts() -> None:
    _need_data()
    with pytest.raises(InputError) as info:
        read_slurm(
            SLURM / "topology.conf.tree.3tier__nvidia_topograph_expected.conf", level_names=["leaf", "spine"]
        )
    assert _problems(info) == [
        "level_names: has 2 name(s) (leaf, spine) but the topology has 3 level(s) above the hosts "
        "(switch1, switch2, switch3), named bottom-up"
    ]


def test_yaml_block_topology() -> None:
    _need_data()
    cluster, warnings = read_slurm(SLURM / "topology.yaml.example__slurm_man5.yaml", topology="topo2")
    _check_common(cluster)
    assert cluster["name"] == "topo2"
    assert _level_names(cluster) == ["node", "block", "block_x4"]
    assert _domains(cluster, "block") == Counter({"b1": 4, "b2": 4, "b3": 4, "b4": 4})
    assert _domains(cluster, "block_x4") == Counter({"b[1-4]": 16})
    assert warnings == []


def test_yaml_flat_and_unknown_topologies_are_errors() -> None:
    _need_data()
    text = (SLURM / "topology.yaml.example__slurm_man5.yaml").read_text()
    with pytest.raises(InputError) as info:
        parse_topology_yaml(text, "topology.yaml", topology="topo3")
    assert _problems(info) == [
        '[2].flat (line 24): topology "topo3" is flat: it lists no switches, blocks or nodes, so there is '
        "nothing to import; pick a tree or block topology with topology="
    ]
    with pytest.raises(InputError) as info:
        parse_topology_yaml(text, "topology.yaml", topology="topo9")
    assert _problems(info) == [
        'topology: "topo9" is not defined here; the topologies are "topo1", "topo2", "topo3"'
    ]


def test_read_slurm_sniffs_the_format_without_a_known_suffix(tmp_path: Path) -> None:
    _need_data()
    yaml_copy = tmp_path / "topology"
    yaml_copy.write_text((SLURM / "topology.yaml.example__slurm_man5.yaml").read_text())
    assert read_slurm(yaml_copy)[0]["name"] == "topo1"
    conf_copy = tmp_path / "topo.txt"
    conf_copy.write_text((SLURM / "topology.conf.ring.example__slurm_man5.conf").read_text())
    assert len(read_slurm(conf_copy)[0]["hosts"]) == 16


def test_read_slurm_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the file"):
        read_slurm(tmp_path / "nope.conf")
    bad = tmp_path / "bad.conf"
    bad.write_bytes(b"SwitchName=s0 Nodes=n1\n\xff\xfe\n")
    with pytest.raises(InputError) as info:
        read_slurm(bad)
    assert _problems(info) == [
        "byte 23 (line 2, column 1): not UTF-8 text: byte 0xff (invalid start byte); save the file as UTF-8"
    ]


# ------------------------------------------------------------------------------------ synthetic inputs


def _conf_error(text: str, **kw: Any) -> list[str]:
    with pytest.raises(InputError) as info:
        parse_topology_conf(text, "t.conf", **kw)
    assert info.value.source == "t.conf"
    return _problems(info)


def test_node_under_two_switches() -> None:
    assert _conf_error("SwitchName=s0 Nodes=dev[0-5]\nSwitchName=s1 Nodes=dev[5-8]\n") == [
        'line 2, column 21: node "dev5" is under switch "s1" but already under switch "s0" (line 1, column '
        "21); "
        "a node hangs off exactly one leaf switch"
    ]
    assert _conf_error("SwitchName=s0 Nodes=dev[0-5]\nSwitchName=s1 Nodes=dev[3-8]\n") == [
        'line 2, column 21: 3 nodes (dev[3-5]) are under switch "s1" but already under switch "s0" '
        "(line 1, column 21); a node hangs off exactly one leaf switch"
    ]


def test_undefined_switch() -> None:
    assert _conf_error("SwitchName=s0 Nodes=dev[0-5]\nSwitchName=s3 Switches=s[0,9]\n") == [
        'line 2, column 24: switch "s9" is listed in Switches= of "s3" but never defined; '
        'add a "SwitchName=s9 ..." line'
    ]


def test_bad_hostlist_range() -> None:
    assert _conf_error("SwitchName=s0 Nodes=node[5-3]\n") == [
        'line 1, column 21: hostlist "node[5-3]": range "5-3" at character 6 runs backwards; '
        'write the lower bound first ("3-5")'
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "SwitchName=a Switches=b\nSwitchName=b Switches=a,c\nSwitchName=c Nodes=n1\n",
            ['line 1, column 12: switches form a cycle: "a" -> "b" -> "a"; each lists the next as a child'],
            id="cycle",
        ),
        pytest.param(
            "SwitchName=a Switches=a\n",
            ['line 1, column 12: switches form a cycle: "a" -> "a"; each lists the next as a child'],
            id="self-cycle",
        ),
        pytest.param(
            "SwitchName=s0 Nodes=n1 Foo=3\nFrob=1\nNodes=n2\nInclude /etc/slurm/more.conf\n",
            [
                'line 1, column 24: unknown key "Foo"; a SwitchName= line takes Switches=, Nodes=, LinkSpeed=',
                'line 2, column 1: unknown key "Frob"; a line starts with SwitchName=, BlockName=, RingName= or '
                "BlockSizes=",
                'line 3, column 1: "Nodes=" must follow SwitchName=, BlockName= or RingName= on the same line',
                "line 4, column 1: Include lines are not supported; paste the included lines here",
            ],
            id="unknown-keys",
        ),
        pytest.param(
            "BlockName=b1 Switches=s1 Nodes=n1\n",
            ['line 1, column 14: unknown key "Switches"; a BlockName= line takes Nodes='],
            id="wrong-key-for-kind",
        ),
        pytest.param(
            'SwitchName=s0 Nodes= LinkSpeed=100\nSwitchName=s1 Nodes=""\n',
            [
                'line 1, column 21: Nodes= is empty for switch "s0"; list its nodes as a hostlist, e.g. '
                "Nodes=node[01-08]",
                'line 2, column 21: Nodes= is empty for switch "s1"; list its nodes as a hostlist, e.g. '
                "Nodes=node[01-08]",
            ],
            id="empty-nodes",
        ),
        pytest.param(
            "SwitchName=s0 Nodes=n1\nSwitchName=s1\n",
            ['line 2, column 12: switch "s1" has no children; give Nodes= or Switches='],
            id="no-children",
        ),
        pytest.param(
            "SwitchName=s0 Nodes=n1 Switches=s1\nSwitchName=s1 Nodes=n2\n",
            [
                'line 1, column 12: switch "s0" has both Nodes= and Switches=; a switch holds either nodes or '
                "switches"
            ],
            id="both-children",
        ),
        pytest.param(
            "SwitchName=s0 Nodes=n1\nSwitchName=s0 Nodes=n2\n",
            [
                'line 2, column 12: switch "s0" is defined twice (first at line 1, column 12); each switch name '
                "must be unique"
            ],
            id="duplicate-switch",
        ),
        pytest.param(
            "SwitchName=l Nodes=n1\nSwitchName=a Switches=l\nSwitchName=b Switches=l\n",
            [
                'line 3, column 23: switch "l" is under switch "b" but already under switch "a" (line 2, '
                "column 23); "
                "a switch has one parent"
            ],
            id="two-parents",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[1-8]\nBlockName=b2 Nodes=n[9-16]\nBlockSizes=8,20\n",
            [
                "line 3, column 12: BlockSizes entry 20 is not a multiple of the base block size 8 (the first "
                "entry)"
            ],
            id="blocksize-not-multiple",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[1-8]\nBlockName=b2 Nodes=n[9-16]\nBlockSizes=8,24\n",
            [
                "line 3, column 12: BlockSizes entry 24 is 3 x the base block size 8; each later size must be "
                "the "
                "base size times 2, 4, 8, ... (e.g. 16, 32)"
            ],
            id="blocksize-not-power-of-two",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[1-8]\nBlockName=b2 Nodes=n[9-14]\nBlockSizes=8,16\n",
            [
                'line 2, column 11: block "b2" has 6 nodes, fewer than the base block size 8 (the first '
                "BlockSizes "
                "entry); every block needs at least that many"
            ],
            id="block-smaller-than-base",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[1-8]\nBlockName=b2 Nodes=n[8-15]\n",
            [
                'line 2, column 20: node "n8" is under block "b2" but already under block "b1" (line 1, column '
                "20); "
                "a node belongs to one block"
            ],
            id="node-in-two-blocks",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[1-8]\nBlockSizes=8,x\n",
            ['line 2, column 12: BlockSizes entry "x" is not a positive whole number of nodes'],
            id="blocksize-not-a-number",
        ),
        pytest.param(
            "BlockName=b1 Nodes=n[1-4]\nBlockSizes=4\nBlockSizes=4,8\n",
            ["line 3, column 12: BlockSizes= is given again (first at line 2, column 12); give it once"],
            id="blocksizes-twice",
        ),
        pytest.param(
            "RingName=r0 Nodes=n[1-4]\nRingName=r1 Nodes=n[4-5]\n",
            [
                'line 2, column 19: node "n4" is under ring "r1" but already under ring "r0" (line 1, column '
                "19); "
                "a node belongs to one ring"
            ],
            id="node-in-two-rings",
        ),
        pytest.param(
            "SwitchName=s0 Nodes=n1\nBlockName=b Nodes=n1\n",
            [
                'the file mixes tree (line 1) and block (line 2) definitions; pass topology="tree" or '
                'topology="block"'
            ],
            id="mixed-kinds",
        ),
        pytest.param(
            "# only a comment\n\n",
            ["no SwitchName=, BlockName= or RingName= lines: nothing to import"],
            id="empty",
        ),
        pytest.param(
            'SwitchName=s0 Nodes="n1\n',
            ['line 1, column 21: the quote opened after "Nodes=" is never closed'],
            id="open-quote",
        ),
    ],
)
def test_conf_errors(text: str, expected: list[str]) -> None:
    assert _conf_error(text) == expected


def test_all_problems_are_collected() -> None:
    text = (
        "SwitchName=s0 Nodes=dev[0-5]\n"
        "SwitchName=s1 Nodes=dev[5-3]\n"  # bad range
        "SwitchName=s2 Nodes=dev[4-6]\n"  # dev4, dev5 under two switches
        "SwitchName=top Switches=s[0-3]\n"  # s3 undefined
        "SwitchName=x Bogus=1\n"  # unknown key
    )
    problems = _conf_error(text)
    assert len(problems) == 4
    assert problems[0].startswith('line 5, column 14: unknown key "Bogus"')
    assert problems[1].startswith('line 2, column 21: hostlist "dev[5-3]"')
    assert problems[2].startswith('line 3, column 21: 2 nodes (dev[4-5]) are under switch "s2"')
    assert problems[3].startswith('line 4, column 25: switch "s3" is listed in Switches= of "top"')


def test_conf_syntax_oddities() -> None:
    text = (
        "\ufeff# header comment\r\n"
        "switchname=s0 \\\r\n"
        "   NODES=n[1-2,\\\n"
        "3-4]   # trailing comment\n"
        "  SwitchName = s1   nodes = m1 LinkSpeed=garbage\n"
        '\tSwitchName=top\tSwitches="s[0-1]"\n'
        "SwitchName=s2 Nodes=x\\#1\n"
        "SwitchName=s2top Switches=s2 linkspeed=100\n"
    )
    cluster, warnings = parse_topology_conf(text, "odd.conf")
    _check_common(cluster)
    assert [h["name"] for h in cluster["hosts"]] == ["n1", "n2", "n3", "n4", "m1", "x#1"]
    assert _domains(cluster, "switch1") == Counter({"s0": 4, "s1": 1, "s2": 1})
    assert _domains(cluster, "switch2") == Counter({"top": 5, "s2top": 1})
    assert _level_names(cluster) == ["node", "switch1", "switch2", "cluster"]
    assert warnings == [
        '2 top switches ("top", "s2top") are not connected to each other; added the level "cluster" above '
        "them "
        "(Slurm never spans one job across unconnected switches)"
    ]


def test_skipped_levels_are_filled_by_the_lower_switch() -> None:
    text = (
        "SwitchName=l1 Nodes=a[1-2]\n"
        "SwitchName=l2 Nodes=b[1-2]\n"
        "SwitchName=sp Switches=l1\n"
        "SwitchName=core Switches=sp,l2\n"
    )
    cluster, warnings = parse_topology_conf(text, "gap.conf", level_names=["leaf", "spine", "core"])
    _check_common(cluster)
    assert _host(cluster, "a1")["domains"] == {"leaf": "l1", "spine": "sp", "core": "core"}
    assert _host(cluster, "b1")["domains"] == {"leaf": "l2", "spine": "l2", "core": "core"}
    assert warnings == [
        'switch "l2" (level leaf) hangs directly off "core" (level core); its hosts use "l2" as their domain '
        "at spine"
    ]


def test_mixed_file_with_topology_choice() -> None:
    text = "SwitchName=s0 Nodes=n[1-2]\nBlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[3-4]\n"
    cluster, warnings = parse_topology_conf(text, "mixed.conf", topology="block")
    assert _level_names(cluster) == ["node", "block", "block_x2"]
    assert _domains(cluster, "block_x2") == Counter({"b[1-2]": 4})
    assert warnings == ["ignored the tree definitions; imported the block ones"]
    cluster, _ = parse_topology_conf(text, "mixed.conf", topology="topology/tree")
    assert _level_names(cluster) == ["node", "switch1"]
    assert _conf_error(text, topology="ring") == [
        'topology: "ring" was asked for but the file has no ring definitions (it has: tree, block)'
    ]
    assert _conf_error(text, topology="torus") == ['topology: "torus" is not one of "tree", "block", "ring"']


def test_blocks_without_blocksizes_use_slurm_defaults() -> None:
    text = "".join(f"BlockName=b{i} Nodes=n[{4 * i + 1}-{4 * i + 4}]\n" for i in range(5))
    cluster, warnings = parse_topology_conf(text, "b.conf")
    _check_common(cluster)
    assert _level_names(cluster) == ["node", "block", "block_x2", "block_x4", "block_x8"]
    assert _domains(cluster, "block_x2") == Counter({"b[0-1]": 8, "b[2-3]": 8, "b4": 4})
    assert _domains(cluster, "block_x4") == Counter({"b[0-3]": 16, "b4": 4})
    assert _domains(cluster, "block_x8") == Counter({"b[0-4]": 20})
    assert warnings == [
        'the last block_x2 domain "b4" has only 1 of 2 blocks',
        'the last block_x4 domain "b4" has only 1 of 4 blocks',
        'the last block_x8 domain "b[0-4]" has only 5 of 8 blocks',
    ]


def test_blocksizes_larger_than_the_cluster_are_dropped() -> None:
    text = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4,8,16,32\n"
    cluster, warnings = parse_topology_conf(text, "b.conf")
    assert _level_names(cluster) == ["node", "block", "block_x2"]
    assert warnings == ["BlockSizes 16, 32 ignored: 8 nodes (2 x the base block) already span all 2 blocks"]


def test_level_names_rules() -> None:
    text = "SwitchName=s0 Nodes=n1\nSwitchName=s1 Nodes=n2\n"
    assert _conf_error(text, level_names=["node"]) == [
        'level_names[0]: "node" is the host level; choose another name'
    ]
    with pytest.raises(InputError, match='the name "cluster" is taken'):
        parse_topology_conf(text, "t.conf", level_names=["cluster"])
    cluster, _ = parse_topology_conf(text, "t.conf", level_names=["tor"])
    assert _level_names(cluster) == ["node", "tor", "cluster"]


def test_ring_longer_than_slurm_allows_is_a_warning() -> None:
    cluster, warnings = parse_topology_conf("RingName=r Nodes=n[1-17]\n", "r.conf")
    assert _level_names(cluster) == ["node", "ring"]
    assert warnings == ['ring "r" has 17 nodes; Slurm accepts at most 16 per ring']


# ------------------------------------------------------------------------------------------------- yaml


def _yaml_error(text: str, **kw: Any) -> list[str]:
    with pytest.raises(InputError) as info:
        parse_topology_yaml(text, "t.yaml", **kw)
    return _problems(info)


def test_yaml_tree_with_children() -> None:
    text = """
- topology: fabric
  cluster_default: true
  tree:
    switches:
      - switch: leaf1
        nodes: gpu[001-004]
      - switch: leaf2
        nodes: [gpu005, gpu006]
      - switch: spine
        children: leaf[1-2]
        link_speed: 400
"""
    cluster, warnings = parse_topology_yaml(text, "t.yaml", level_names=["leaf", "spine"])
    _check_common(cluster)
    assert cluster["name"] == "fabric"
    assert _domains(cluster, "leaf") == Counter({"leaf1": 4, "leaf2": 2})
    assert _domains(cluster, "spine") == Counter({"spine": 6})
    assert warnings == []


def test_yaml_errors_name_path_and_line() -> None:
    text = """
- topology: a
  tree:
    switches:
      - switch: s0
        nodes: n[1-4]
      - switch: s1
        nodes: n[4-5]
        color: red
      - switch: top
        children: s[0-2]
- topology: b
  block:
    block_sizes: [4, 12]
    blocks:
      - block: b1
        nodes: n[1-4]
"""
    assert _yaml_error(text) == [
        'topology: no entry has cluster_default: true; pass topology= one of "a", "b"'
    ]
    assert _yaml_error(text, topology="a") == [
        '[0].tree.switches[1].color (line 9): unknown key "color"; expected switch, children, nodes',
        '[0].tree.switches[1].nodes (line 8): node "n4" is under switch "s1" but already under switch "s0" '
        "([0].tree.switches[0].nodes (line 6)); a node hangs off exactly one leaf switch",
        '[0].tree.switches[2].children (line 11): switch "s2" is listed in children of "top" but never '
        "defined; "
        'add a "- switch: s2" entry',
    ]
    assert _yaml_error(text, topology="b") == [
        "[1].block.block_sizes[1] (line 14): BlockSizes entry 12 is 3 x the base block size 4; each later "
        "size "
        "must be the base size times 2, 4, 8, ... (e.g. 8, 16)"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ["is empty; expected a list of topologies (- topology: NAME ...)"]),
        ("topology: a\n", ["line 1: expected a list of topologies (- topology: NAME ...), got a mapping"]),
        (
            "- topology: [\n",
            ["line 2, column 1: is not valid YAML: expected the node content, but found '<stream end>'"],
        ),
        (
            "- topology: a\n  tree: {switches: []}\n",
            ["[0].tree.switches (line 2): switches must be a non-empty list, got a list"],
        ),
        (
            "- topology: a\n  flat: true\n  block: {}\n",
            [
                '[0] (line 1): topology "a" must define exactly one '
                "of "
                "tree, block, flat: true (got block, flat)"
            ],
        ),
        (
            "- topology: a\n  tree: {switches: [{switch: s, nodes: n1}]}\n- topology: a\n  flat: true\n",
            ['[1].topology (line 3): topology "a" is defined twice (first at [0].topology (line 1))'],
        ),
        (
            "- topology: a\n  cluster_default: yes please\n  tree: {switches: [{switch: s, nodes: n1}]}\n",
            ['[0].cluster_default (line 2): must be true or false, got the string "yes please"'],
        ),
        (
            "- topology: d\n  when: 2024-02-30\n  flat: true\n",
            ["is not valid YAML: day is out of range for month"],
        ),
    ],
)
def test_yaml_structure_errors(text: str, expected: list[str]) -> None:
    assert _yaml_error(text) == expected


# --------------------------------------------------------------------------------- no raw exceptions


_conf_alphabet = st.sampled_from(
    [
        "SwitchName=",
        "Switches=",
        "Nodes=",
        "BlockName=",
        "BlockSizes=",
        "RingName=",
        "LinkSpeed=",
        "s0",
        "s1",
        "n[1-4]",
        "n[4-1]",
        "[",
        "]",
        ",",
        " ",
        "\n",
        "#",
        "\\",
        '"',
        "8",
        "16",
        "=",
        "x",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_conf_alphabet, max_size=40).map("".join))
def test_conf_never_leaks_a_raw_exception(text: str) -> None:
    try:
        cluster, _ = parse_topology_conf(text, "fuzz.conf")
    except InputError as err:
        assert err.problems
    else:
        _check_common(cluster)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-3, 40)
        | st.sampled_from(["n[1-4]", "s0", "tree", "block", ""]),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "topology",
                        "cluster_default",
                        "tree",
                        "block",
                        "flat",
                        "switches",
                        "switch",
                        "children",
                        "nodes",
                        "blocks",
                        "block_sizes",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_yaml_never_leaks_a_raw_exception(doc: Any) -> None:
    import yaml

    try:
        cluster, _ = parse_topology_yaml(yaml.safe_dump(doc), "fuzz.yaml")
    except InputError as err:
        assert err.problems
    else:
        _check_common(cluster)
