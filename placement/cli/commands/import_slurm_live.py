"""The `placement import slurm-live` command: the cluster file and its state from a running Slurm (or from saved
outputs of the same commands).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Annotated, Any

import typer

from placement.cli.commands.import_common import cluster_yaml, finish_import
from placement.cli.errors import err, escape, fail, guard
from placement.cli.help import Command, command_app
from placement.cli.options import ClusterOutOpt, TierOpt
from placement.io.importers.slurm import read_slurm
from placement.io.importers.slurm_live import parse_jobs, parse_nodes, topology_from_scontrol
from placement.io.importers.slurm_live_state import build_live
from placement.io.native import cluster_from_dict, state_from_dict
from placement.io.text import read_text

__all__ = ["app", "slurm_live"]

app = command_app()

_TIMEOUT_S = 60.0


def _run(argv: list[str]) -> tuple[int, str, str]:
    if shutil.which(argv[0]) is None:
        fail(
            f"`{argv[0]}` is not on PATH: run this on a Slurm login node, or pass saved outputs with --nodes "
            "(and --jobs, --topology-file)",
            2,
        )
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        fail(f"`{' '.join(argv)}` did not answer within {_TIMEOUT_S:.0f} s; is slurmctld up?", 2)
        raise AssertionError("unreachable") from None  # pragma: no cover
    return done.returncode, done.stdout, done.stderr


def _live_nodes() -> tuple[str, str]:
    """`scontrol --json` where it exists (23.02+), else the text form (22.05 and older); -d for GPU indices."""
    rc, out, errtext = _run(["scontrol", "-d", "--json", "show", "node"])
    if rc == 0 and out.lstrip().startswith("{"):
        return out, "json"
    rc, out, errtext2 = _run(["scontrol", "-d", "show", "node"])
    if rc != 0:
        fail(f"`scontrol -d show node` failed (exit {rc}): {escape((errtext2 or errtext).strip())}", 2)
    return out, "txt"


def _live_jobs() -> str:
    rc, out, errtext = _run(["squeue", "--json"])
    if rc != 0 or not out.lstrip().startswith("{"):
        fail(
            f"`squeue --json` failed (exit {rc}): {escape(errtext.strip())}; Slurm 21.08 or newer with its "
            "openapi/data_parser plugins is needed, or pass --jobs with a saved output",
            2,
        )
    return out


def _live_topology() -> str:
    rc, out, _ = _run(["scontrol", "show", "topology"])
    return out if rc == 0 else ""


def _read(path: Path) -> str:
    return read_text(path)


def _looks_like_scontrol_topology(text: str) -> bool:
    """`scontrol show topology` lines carry Level=/BlockIndex=/RingSize=, which topology.conf does not have."""
    return any(
        ("SwitchName=" in ln and " Level=" in ln) or "BlockIndex=" in ln or "RingSize=" in ln
        for ln in text.splitlines()
    )


NodesOpt = Annotated[
    Path | None,
    typer.Option(
        help="saved `scontrol -d show node` (text or --json) or `sinfo --json`; without it the commands run here"
    ),
]
JobsOpt = Annotated[
    Path | None, typer.Option(help="saved `squeue --json` (with --nodes; names each GPU's job)")
]
TopologyFileOpt = Annotated[
    Path | None,
    typer.Option(
        help="topology.conf, topology.yaml or saved `scontrol show topology`; default: `scontrol show topology`"
    ),
]
TopologyOpt = Annotated[
    str | None, typer.Option(help="which topology (topology.yaml) or plugin (tree/block/ring)")
]
KindOpt = Annotated[str | None, typer.Option(help="device kind (default: the gres type, e.g. h100 -> H100)")]
NodeTopoOpt = Annotated[
    Path | None, typer.Option(help="nvidia-smi topo -m of one node, applied to every node")
]
SaveOpt = Annotated[Path | None, typer.Option(help="also write the raw command outputs to this folder")]
StateOutOpt = Annotated[Path | None, typer.Option(help="write the state YAML (occupied, failed) here")]


def _outputs(
    nodes: Path | None, jobs: Path | None, saved: dict[str, str]
) -> tuple[str, str, str | None, str]:
    """(nodes text, its source, jobs text or None, its source): the saved files, or Slurm asked here (whose
    outputs go to `saved`)."""
    if nodes is not None:
        return _read(nodes), str(nodes), *((_read(jobs), str(jobs)) if jobs is not None else (None, ""))
    if jobs is not None:
        fail("--jobs needs --nodes: saved outputs are read together, or everything is asked from Slurm", 2)
    nodes_text, form = _live_nodes()
    jobs_text = _live_jobs()
    saved[f"nodes.{form}"] = nodes_text
    saved["squeue.json"] = jobs_text
    return (
        nodes_text,
        "scontrol -d show node" + (" --json" if form == "json" else ""),
        jobs_text,
        "squeue --json",
    )


def _topology(
    topology_file: Path | None,
    asked_live: bool,
    topology: str | None,
    level_names: list[str] | None,
    name: str,
    saved: dict[str, str],
) -> tuple[dict[str, Any], list[str]] | None:
    """The switch topology: from the file (topology.conf, topology.yaml, or a saved `scontrol show topology`),
    from Slurm when it was asked live, else none (a flat cluster)."""
    if topology_file is not None:
        text = _read(topology_file)
        if not _looks_like_scontrol_topology(text):
            return read_slurm(topology_file, topology=topology, level_names=level_names, name=name)
        topo = topology_from_scontrol(
            text, str(topology_file), level_names=level_names, topology=topology, name=name
        )
        if topo is None:
            fail(f"{escape(str(topology_file))}: no SwitchName=, BlockName= or RingName= lines", 2)
        return topo
    if not asked_live:
        return None
    text = _live_topology()
    saved["topology.txt"] = text
    return topology_from_scontrol(
        text, "scontrol show topology", level_names=level_names, topology=topology, name=name
    )


def _save(save: Path | None, saved: dict[str, str]) -> None:
    if save is None:
        return
    save.mkdir(parents=True, exist_ok=True)
    for fname, content in saved.items():
        (save / fname).write_text(content)
    if saved:
        err.print(f"saved {', '.join(sorted(saved))} to {escape(str(save))}", soft_wrap=True)


def _write_state(
    cluster: dict[str, Any], state: dict[str, Any], out_file: Path | None, state_out: Path | None
) -> None:
    """Check the state against the cluster, write it (stdout after the cluster, or `state_out`), and count it."""
    topology_obj, _ = cluster_from_dict(cluster, "<imported>")
    state_from_dict(state, topology_obj, "<imported state>")  # every reference resolves before we write it
    text = cluster_yaml(state)
    if state_out is None:
        if out_file is None:
            typer.echo("---")
        typer.echo(text, nl=False)
    else:
        state_out.write_text(text)
        err.print(f"wrote {escape(str(state_out))}", soft_wrap=True)
    busy = sum(len(o["devices"]) for o in state["occupied"])
    total = sum(h.get("devices", 0) for h in cluster["hosts"])
    err.print(
        f"{len(cluster['hosts'])} node(s), {total or '?'} GPU(s): {busy} occupied by "
        f"{len(state['occupied'])} job(s), {len(state.get('failed', []))} node(s) failed",
        soft_wrap=True,
    )


@app.command("slurm-live", cls=Command)
@guard
def slurm_live(
    nodes: NodesOpt = None,
    jobs: JobsOpt = None,
    topology_file: TopologyFileOpt = None,
    topology: TopologyOpt = None,
    levels: Annotated[str | None, typer.Option(help="level names bottom-up, e.g. leaf,spine,core")] = None,
    tier: TierOpt = None,
    gres: Annotated[str, typer.Option(help="the gres name of the GPUs")] = "gpu",
    partition: Annotated[str | None, typer.Option(help="only nodes of this partition")] = None,
    kind: KindOpt = None,
    node_topo: NodeTopoOpt = None,
    name: Annotated[str, typer.Option(help="cluster name")] = "slurm",
    save: SaveOpt = None,
    out_file: ClusterOutOpt = None,
    state_out: StateOutOpt = None,
) -> None:
    """The cluster and its live state from Slurm: nodes and GPU occupancy from scontrol, jobs from squeue.

    Per-GPU occupancy comes from GresUsed=gpu:...(IDX:...) and each job's gres_detail; DOWN, DRAIN, FAIL (and
    INVALID, NOT_RESPONDING, FUTURE) nodes count as failed. Run with --out and --state-out, then
    `placement place cluster.yaml job.yaml --state state.yaml`.
    """
    level_names = levels.split(",") if levels else None
    saved: dict[str, str] = {}
    nodes_text, nodes_src, jobs_text, jobs_src = _outputs(nodes, jobs, saved)
    topo = _topology(topology_file, nodes is None, topology, level_names, name, saved)
    _save(save, saved)
    parsed_nodes = parse_nodes(nodes_text, nodes_src)
    parsed_jobs = parse_jobs(jobs_text, jobs_src) if jobs_text is not None else []
    cluster, state, warnings = build_live(
        parsed_nodes, parsed_jobs, topo, gres_name=gres, partition=partition, kind=kind, name=name
    )
    if level_names is not None and topo is None:
        fail(
            "--levels renames the levels of a topology; Slurm gave none (flat cluster): drop --levels or give "
            "--topology-file",
            2,
        )
    gres_counts = {h["name"]: h["devices"] for h in cluster["hosts"]}
    kinds = {h["kind"] for h in cluster["hosts"]}
    finish_import(
        cluster,
        warnings,
        tier or [],
        None,
        kind or (kinds.pop() if len(kinds) == 1 else None),
        node_topo,
        out_file,
    )
    if node_topo is not None:
        per_node = cluster["node_types"][0]["devices"]
        other = sorted(n for n, c in gres_counts.items() if c != per_node)
        if other:
            err.print(
                f"[yellow]warning:[/] {escape(str(node_topo))} has {per_node} GPUs but Slurm's gres gives "
                f"another count on {len(other)} node(s): {escape(', '.join(other[:8]))}",
                soft_wrap=True,
            )
    _write_state(cluster, state, out_file, state_out)
