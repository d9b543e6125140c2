"""Import Slurm topology descriptions (topology.conf tree/block/ring, topology.yaml) as native cluster dicts.

Owns reading Slurm's files only; `placement.io.native` validates and loads the dict these functions return.

Every parser returns ``(cluster, warnings)``: ``cluster`` is the explicit-hosts native dict (``name``,
``levels`` bottom-up starting with ``{"name": "node"}``, ``hosts`` with a ``domains`` map covering every
level above ``node``); ``warnings`` are plain sentences about things that were imported but deserve a
look. Tier bandwidths are never invented: the levels carry names only. Hosts keep the order in which
the file first names them. Bad input raises `InputError` listing every problem with its
``line L, column C`` (topology.conf) or field path and line (topology.yaml).

topology.conf syntax follows Slurm's config parser: keys are case-insensitive, ``#`` starts a comment
(``\\#`` is a literal ``#``), a trailing ``\\`` joins the next line (directly, so a hostlist may be split),
spaces around ``=`` and ``"quoted"`` values are accepted, CRLF and a BOM are tolerated. Unknown keys and
``Include`` lines are errors.

How Slurm's plugins map onto levels:

* **tree** (``SwitchName= Switches= Nodes= [LinkSpeed=]``): a switch's level is its height. Switches with
  ``Nodes=`` are height 1 (``switch1``), a switch is one above its highest child (``switch2``, ...), like
  Slurm's own ``level``. ``level_names`` renames ``switch1``, ``switch2``, ... bottom-up. A switch whose
  parent sits more than one level higher (or a top switch lower than the tallest one) stands in for itself
  at the skipped levels, so its hosts share nothing more there; a warning says so. ``LinkSpeed=`` is
  read and ignored (Slurm does not use it either). Stricter than Slurm, which only warns or keeps the
  last parent: a node under two leaf switches, a switch under two parents, a switch with both or neither
  of ``Nodes=``/``Switches=`` are errors, since the native model is a strict tree.
* **block** (``BlockName= Nodes=`` plus ``BlockSizes=``), following ``topology.conf(5)`` and Slurm's
  ``block_record.c``: the first BlockSizes entry is the *planning base block size*; every block must
  have *at least* that many nodes (fewer is an error; more is imported whole, with a warning, since
  Slurm plans with the base size). Each later entry must be the base size times a power of two, and
  strictly increasing (``8,16,32``; the man page's ``30,120`` is 30 x 4). Defined blocks are the level
  ``block``; an entry that is ``k`` times the base size is the level ``block_xk``, whose domains are
  runs of ``k`` consecutive blocks in file order (Slurm pairs contiguous blocks the same way), named
  like Slurm names aggregated blocks: the compressed hostlist of the member block names, e.g.
  ``rack[11-12]``. As in Slurm, levels stop at the first size that spans all blocks (larger entries
  are dropped with a warning), and without ``BlockSizes=`` the base size is the first block's node
  count and the aggregate levels are Slurm's default x2, x4, x8, x16. A trailing group with fewer
  than ``k`` blocks is still a domain (warning), so every host has a domain on every level.
* **ring** (``RingName= Nodes=``): each ring is a domain of the level ``ring``; the position of a node
  in its ring is kept only as host order. Rings longer than Slurm's 16 nodes are imported with a warning.

A file mixing kinds (e.g. SwitchName= and BlockName= lines, as some generators write) needs
``topology="tree"``/``"block"``/``"ring"`` to pick one; the other lines are ignored. For topology.yaml,
``topology=`` names an entry, else the first ``cluster_default: true`` one is used (or the only one); only
the chosen entry is checked in depth, and a ``flat`` entry is an error since it lists no nodes.

If the top level has several domains (several top switches, several blocks or rings without a common
aggregate), a level ``cluster`` with the single domain ``cluster`` is added on top. ``level_names``
covers the levels read from the file, not that added one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from placement.errors import Problems
from placement.io.importers.detect import refuse_other_format
from placement.io.importers.slurm.block import _build_blocks
from placement.io.importers.slurm.common import (
    _KINDS,
    Result,
    _finish,
    _Group,
    _Layout,
    _looks_like_yaml,
    _stem,
    _Style,
    _Value,
)
from placement.io.importers.slurm.conf import _conf_block_sizes, _conf_statements, _pick_kind
from placement.io.importers.slurm.ring import _build_rings
from placement.io.importers.slurm.tree import _build_tree
from placement.io.importers.slurm.yaml import _yaml_block, _yaml_pick, _yaml_tree, _YamlDoc
from placement.io.text import read_text

# ---------------------------------------------------------------------------------------------------------
# Public API


def parse_topology_conf(
    text: str,
    source: str,
    *,
    level_names: Sequence[str] | None = None,
    topology: str | None = None,
    name: str | None = None,
) -> Result:
    """Read a Slurm ``topology.conf`` (tree, block or ring plugin) into ``(cluster, warnings)``.

    `source` names the input in errors; `name` is the cluster name (default: the file name without its
    suffix). `topology` picks the plugin (``"tree"``, ``"block"``, ``"ring"``) when a file holds several.
    """
    refuse_other_format(text, source, ("slurm-conf", "slurm-yaml"))  # e.g. an ibnetdiscover dump: one line
    problems = Problems(source)
    warnings: list[str] = []
    statements = _conf_statements(text, problems)

    groups: dict[str, list[_Group]] = {kind: [] for kind in _KINDS}
    first_line: dict[str, int] = {}
    sizes: list[_Value] = []
    for line, stated, group, size in statements:
        first_line.setdefault(stated, line)
        if group is not None:
            groups[stated].append(group)
        if size is not None:
            sizes.append(size)

    kind = _pick_kind(topology, first_line, problems, warnings)
    layout: _Layout | None = None
    if kind == "tree":
        layout = _build_tree(groups["tree"], _Style.conf(), problems)
    elif kind == "block":
        if len(sizes) > 1:
            for extra in sizes[1:]:
                problems.add(
                    extra.where, f"BlockSizes= is given again (first at {sizes[0].where}); give it once"
                )
        size_entries = _conf_block_sizes(sizes[0], problems) if sizes else None
        layout = _build_blocks(
            groups["block"],
            size_entries,
            "Nodes=",
            problems,
            warnings,
            sizes_ok=not sizes or size_entries is not None,
        )
    elif kind == "ring":
        layout = _build_rings(groups["ring"], "Nodes=", problems, warnings)
    return _finish(layout, name or _stem(source), level_names, problems, warnings)


def parse_topology_yaml(
    text: str,
    source: str,
    *,
    topology: str | None = None,
    level_names: Sequence[str] | None = None,
    name: str | None = None,
) -> Result:
    """Read a Slurm ``topology.yaml`` into ``(cluster, warnings)``.

    Picks the entry named `topology`, else the first with ``cluster_default: true`` (or the only entry).
    `name` is the cluster name (default: the chosen topology's name).
    """
    refuse_other_format(text, source, ("slurm-yaml", "slurm-conf"))
    problems = Problems(source)
    warnings: list[str] = []
    doc = _YamlDoc.load(text, problems)
    if doc is None:
        problems.raise_if_any()
        raise AssertionError("unreachable")  # pragma: no cover
    entry = _yaml_pick(doc, topology, problems)
    layout: _Layout | None = None
    chosen = ""
    if entry is not None:
        index, chosen, kind = entry
        body = doc.data[index][kind]
        path: tuple[str | int, ...] = (index, kind)
        if kind == "tree":
            switches = _yaml_tree(doc, body, path, problems)
            layout = _build_tree(switches, _Style.yaml(), problems)
        elif kind == "block":
            blocks, size_entries, sizes_ok = _yaml_block(doc, body, path, problems)
            layout = _build_blocks(blocks, size_entries, "nodes", problems, warnings, sizes_ok=sizes_ok)
        elif kind == "flat":
            problems.add(
                doc.where((index, "flat")),
                f'topology "{chosen}" is flat: it lists no switches, '
                "blocks or nodes, so there is nothing to import; "
                "pick a tree or block topology with topology=",
            )
        else:
            problems.add(
                doc.where((index, kind)),
                f'topology "{chosen}" uses the {kind} plugin, which this '
                "importer does not read; pick a tree or block topology",
            )
    return _finish(layout, name or chosen or _stem(source), level_names, problems, warnings)


def read_slurm(
    path: str | os.PathLike[str],
    *,
    topology: str | None = None,
    level_names: Sequence[str] | None = None,
    name: str | None = None,
) -> Result:
    """Read a topology.conf or topology.yaml file, chosen by suffix (.yaml, .yml, .conf) or by content."""
    source = str(path)
    text = read_text(path, source)
    suffix = Path(path).suffix.lower()
    if suffix in (".yaml", ".yml") or (suffix != ".conf" and _looks_like_yaml(text)):
        return parse_topology_yaml(text, source, topology=topology, level_names=level_names, name=name)
    return parse_topology_conf(text, source, topology=topology, level_names=level_names, name=name)
