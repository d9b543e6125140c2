"""Tests of placement.io.importers.slurm on the real topology.conf/topology.yaml examples (the shared topology data).
Synthetic inputs: tests/io/test_io_slurm_conf.py (topology.conf), tests/io/test_io_slurm_yaml.py (topology.yaml)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from placement.errors import InputError
from placement.io.importers.slurm import parse_topology_yaml, read_slurm
from tests.conftest import DATA
from tests.support_slurm import check_common, domain_sizes, host_of, level_names_of, problem_texts

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


# ------------------------------------------------------------------------------------------ real files


def _expect_tree_3tier(cluster: dict[str, Any], warnings: list[str]) -> None:
    assert level_names_of(cluster) == ["node", "switch1", "switch2", "switch3"]
    assert len(cluster["hosts"]) == 96
    leaves, spines, cores = (domain_sizes(cluster, f"switch{i}") for i in (1, 2, 3))
    assert len(leaves) == 12 and set(leaves.values()) == {8}
    assert len(spines) == 6 and set(spines.values()) == {16}
    assert cores == Counter({"switch.3.1": 96})
    assert host_of(cluster, "srv1101")["domains"] == {
        "switch1": "switch.1.1",
        "switch2": "switch.2.1",
        "switch3": "switch.3.1",
    }
    assert host_of(cluster, "srv6208")["domains"]["switch1"] == "switch.1.12"
    assert host_of(cluster, "srv6208")["domains"]["switch2"] == "switch.2.6"
    # leaf-2-1 (switch.1.3) hangs off spine-2 (switch.2.2)
    assert host_of(cluster, "srv2101")["domains"]["switch2"] == "switch.2.2"
    assert cluster["hosts"][0]["name"] == "srv1101" and cluster["hosts"][-1]["name"] == "srv6208"
    assert warnings == []


def _expect_nvl_blocks(cluster: dict[str, Any], warnings: list[str]) -> None:
    assert level_names_of(cluster) == ["node", "block", "block_x2", "block_x4", "cluster"]
    assert len(cluster["hosts"]) == 96
    blocks = domain_sizes(cluster, "block")
    assert len(blocks) == 12 and set(blocks.values()) == {8}
    assert domain_sizes(cluster, "block_x2") == Counter({f"rack[{r}1-{r}2]": 16 for r in range(1, 7)})
    assert domain_sizes(cluster, "block_x4") == Counter(
        {"rack[11-12,21-22]": 32, "rack[31-32,41-42]": 32, "rack[51-52,61-62]": 32}
    )
    assert host_of(cluster, "srv3205")["domains"] == {
        "block": "rack32",
        "block_x2": "rack[31-32]",
        "block_x4": "rack[31-32,41-42]",
        "cluster": "cluster",
    }
    assert warnings == []


def _expect_man5_tree(cluster: dict[str, Any], warnings: list[str]) -> None:
    assert level_names_of(cluster) == ["node", "switch1", "switch2"]
    assert [h["name"] for h in cluster["hosts"]] == [f"dev{i}" for i in range(18)]
    assert domain_sizes(cluster, "switch1") == Counter({"s0": 6, "s1": 6, "s2": 6})
    assert domain_sizes(cluster, "switch2") == Counter({"s3": 18})
    assert host_of(cluster, "dev11")["domains"] == {"switch1": "s1", "switch2": "s3"}
    assert warnings == []


def _expect_man5_block(cluster: dict[str, Any], warnings: list[str]) -> None:
    # BlockSizes=30,120: base 30, 120 = 4 x 30, so one aggregate of 4 blocks spans all 4 blocks.
    assert level_names_of(cluster) == ["node", "block", "block_x4"]
    assert len(cluster["hosts"]) == 128
    assert domain_sizes(cluster, "block") == Counter({"block1": 32, "block2": 32, "block3": 32, "block4": 32})
    assert domain_sizes(cluster, "block_x4") == Counter({"block[1-4]": 128})
    assert host_of(cluster, "node65")["domains"] == {"block": "block3", "block_x4": "block[1-4]"}
    assert warnings == [
        "4 block(s) have more nodes than the base block size 30 (block1: 32, block2: 32, block3: 32, "
        "block4: 32); all their nodes are imported, Slurm plans with the base size"
    ]


def _expect_man5_ring(cluster: dict[str, Any], warnings: list[str]) -> None:
    assert level_names_of(cluster) == ["node", "ring", "cluster"]
    assert [h["name"] for h in cluster["hosts"]] == [f"node{i:02d}" for i in range(1, 17)]
    assert domain_sizes(cluster, "ring") == Counter({"ring0": 8, "ring1": 8})
    assert host_of(cluster, "node09")["domains"] == {"ring": "ring1", "cluster": "cluster"}
    assert warnings == []


def _expect_man5_yaml(cluster: dict[str, Any], warnings: list[str]) -> None:
    # cluster_default: True picks topo1, a single switch over node[01-04].
    assert cluster["name"] == "topo1"
    assert level_names_of(cluster) == ["node", "switch1"]
    assert [h["name"] for h in cluster["hosts"]] == ["node01", "node02", "node03", "node04"]
    assert domain_sizes(cluster, "switch1") == Counter({"sw_root": 4})
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
    check_common(cluster)
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
    assert level_names_of(cluster) == ["node", "leaf", "spine", "core"]
    assert host_of(cluster, "srv4203")["domains"] == {
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
    assert problem_texts(info) == [
        "level_names: has 2 name(s) (leaf, spine) but the topology has 3 level(s) above the hosts "
        "(switch1, switch2, switch3), named bottom-up"
    ]


def test_yaml_block_topology() -> None:
    _need_data()
    cluster, warnings = read_slurm(SLURM / "topology.yaml.example__slurm_man5.yaml", topology="topo2")
    check_common(cluster)
    assert cluster["name"] == "topo2"
    assert level_names_of(cluster) == ["node", "block", "block_x4"]
    assert domain_sizes(cluster, "block") == Counter({"b1": 4, "b2": 4, "b3": 4, "b4": 4})
    assert domain_sizes(cluster, "block_x4") == Counter({"b[1-4]": 16})
    assert warnings == []


def test_yaml_flat_and_unknown_topologies_are_errors() -> None:
    _need_data()
    text = (SLURM / "topology.yaml.example__slurm_man5.yaml").read_text()
    with pytest.raises(InputError) as info:
        parse_topology_yaml(text, "topology.yaml", topology="topo3")
    assert problem_texts(info) == [
        '[2].flat (line 24): topology "topo3" is flat: it lists no switches, blocks or nodes, so there is '
        "nothing to import; pick a tree or block topology with topology="
    ]
    with pytest.raises(InputError) as info:
        parse_topology_yaml(text, "topology.yaml", topology="topo9")
    assert problem_texts(info) == [
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
    assert problem_texts(info) == [
        "byte 23 (line 2, column 1): not UTF-8 text: byte 0xff (invalid start byte); save the file as UTF-8"
    ]
