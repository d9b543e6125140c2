"""The `placement` command line: import, evaluate, place, export, whatif and serve, as thin calls into the library.

Domain errors become a message on stderr and exit code 2 (input) or 3 (infeasible), never a traceback.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml
from rich.console import Console

from placement.cli.commands.remote import place_request, serve_main
from placement.cli.errors import err, escape, fail, guard
from placement.cli.options import ClusterOutOpt, TierOpt
from placement.cli.tables import headline, print_report
from placement.io.importers.defaults import (
    DEFAULT_DEVICES_PER_NODE,
    DEFAULT_TIERS,
    TIERS_NOTE,
    apply_tier_specs,
    default_tiers,
)

if TYPE_CHECKING:
    pass

__all__ = ["app", "main"]

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Topology- and traffic-aware GPU placement."
)
import_app = typer.Typer(no_args_is_help=True, help="Read real topology descriptions into a cluster file.")
app.add_typer(import_app, name="import")
out = Console()

# Default link tiers for imported clusters whose source carries no bandwidths (Slurm, Kubernetes): an H100-class
# node (NVLink 4 through NVSwitch) on a 400G NDR fat-tree, each tier above the leaf 2:1 oversubscribed.


@app.callback()
def _options(
    limits: Annotated[
        str | None,
        typer.Option(
            "--limits",
            envvar="PLACEMENT_LIMITS",
            help="raise (or lower) input limits, e.g. max_ranks=65536,max_devices=400000 (placement.limits)",
        ),
    ] = None,
) -> None:
    """Topology- and traffic-aware GPU placement."""
    from placement.limits import parse_limit_overrides, set_process_limits

    try:
        set_process_limits(parse_limit_overrides(limits) if limits else None)
    except ValueError as e:
        fail(f"--limits: {escape(str(e))}", 2)


def _write(text: str, dest: Path | None) -> None:
    if dest is None:
        sys.stdout.write(text)
    else:
        dest.write_text(text)
        err.print(f"wrote {dest}")


def _load_all(cluster: Path, job: Path | None, state: Path | None):  # type: ignore[no-untyped-def]
    from placement.io.native import load_cluster, load_job, load_state
    from placement.model.state import ClusterState

    topo, static = load_cluster(cluster)
    st = load_state(state, topo, static) if state else (static or ClusterState())
    jb = load_job(job) if job else None
    return topo, st, jb


# ---- evaluate -----------------------------------------------------------------------------------------------


@app.command()
@guard
def evaluate(
    cluster: Annotated[Path, typer.Argument(help="cluster file (YAML/JSON)")],
    job: Annotated[Path, typer.Argument(help="job file")],
    mapping: Annotated[
        Path, typer.Argument(help="mapping: result JSON, list of device ids, or {rank: device}")
    ],
    state: Annotated[Path | None, typer.Option(help="state file: occupancy, failures, fault domains")] = None,
    output: Annotated[str, typer.Option(help="table or json")] = "table",
    picture: Annotated[
        Path | None, typer.Option(help="also draw the placement (SVG or PNG by suffix)")
    ] = None,
) -> None:
    """The modeled step of a given mapping: step, exposed and total communication, compute, MFU, tokens/s, and
    the breakdown per phase and per group kind and tier."""
    from placement.cost.evaluate import evaluate as evaluate_cost
    from placement.io.native import load_mapping
    from placement.messages import domain, dump_message

    topo, st, jb = _load_all(cluster, job, state)
    assert jb is not None
    mp = load_mapping(mapping, topo)
    rep = evaluate_cost(topo, st, jb, mp)
    if picture is not None:
        from placement.cli.commands.whatif import render_picture

        render_picture(topo, st, jb, mp, rep, picture)
        err.print(f"wrote {picture}")
    if output == "json":
        _write(dump_message(domain.evaluate_response(topo, jb, mp, rep)), None)
    elif output == "table":
        print_report(f"{jb.name} on {topo.name}: {headline(rep)}", rep)
    else:
        fail(f"--output: unknown value {output!r}; use table or json", 2)


# ---- place --------------------------------------------------------------------------------------------------

PLACE_OUTPUTS = ("table", "json", "yaml", "rankfile", "hostfile", "slurm", "torchrun")


@app.command()
@guard
def place(
    cluster: Annotated[Path | None, typer.Argument(help="cluster file")] = None,
    job: Annotated[Path | None, typer.Argument(help="job file")] = None,
    state: Annotated[Path | None, typer.Option(help="state file")] = None,
    request: Annotated[
        Path | None,
        typer.Option(help="a PlaceRequest file (YAML/JSON, protobuf JSON mapping) instead of CLUSTER JOB"),
    ] = None,
    server: Annotated[
        str | None, typer.Option(help="HOST:PORT of a placement-server: send the request there")
    ] = None,
    token: Annotated[
        str | None, typer.Option(envvar="PLACEMENT_TOKEN", help="bearer token for --server")
    ] = None,
    strategy: Annotated[
        str,
        typer.Option(
            help="cpsat (the optimizer), or a baseline: first-fit, kueue-tas, slurm-tree, slurm-block"
        ),
    ] = "cpsat",
    time_limit: Annotated[float, typer.Option(help="solver time limit in seconds")] = 10.0,
    gap: Annotated[float, typer.Option(help="stop at this relative gap")] = 0.0,
    seed: Annotated[int, typer.Option(help="random seed (same seed and workers: same answer)")] = 0,
    workers: Annotated[int, typer.Option(help="CP-SAT workers (<= cores)")] = 2,
    deterministic: Annotated[
        bool,
        typer.Option(
            help="budget the search in deterministic time: the same answer whatever the machine's load"
        ),
    ] = False,
    output: Annotated[
        str,
        typer.Option(
            help="table, json, yaml, rankfile, hostfile, slurm or torchrun (more: placement export)"
        ),
    ] = "table",
    out_file: Annotated[Path | None, typer.Option("--out", help="write the output here")] = None,
    picture: Annotated[
        Path | None, typer.Option(help="also draw the placement (SVG or PNG by suffix)")
    ] = None,
) -> None:
    """Place a job on a cluster state and show what it costs, next to the baselines.

    Give CLUSTER JOB [--state], or --request FILE; with --server the request is solved by a placement-server.
    """
    from placement.io.export import baseline_costs, export
    from placement.messages import domain, dump_message, message_to_dict
    from placement.solve import SolveOptions, Strategy
    from placement.solve import place as run_place
    from placement.v1 import placement_pb2 as pb

    if output not in PLACE_OUTPUTS:
        fail(f"--output: unknown value {output!r}; use one of {', '.join(PLACE_OUTPUTS)}", 2)
    if request is not None or server is not None:
        if request is None or cluster is not None or job is not None:
            fail("give either CLUSTER JOB or --request FILE (and --server only with --request)", 2)
        assert request is not None
        place_request(request, server, token, output, out_file, _write)
        return
    if cluster is None or job is None:
        fail("missing CLUSTER and JOB (or --request FILE)", 2)
    assert cluster is not None and job is not None
    try:
        strat = Strategy(strategy)
    except ValueError:
        fail(f"--strategy: unknown value {strategy!r}; use one of {', '.join(s.value for s in Strategy)}", 2)
    if not (math.isfinite(time_limit) and time_limit > 0):
        fail(
            f"--time-limit: must be > 0, got {time_limit:g}"
            if math.isfinite(time_limit)
            else f"--time-limit: must be a finite number > 0, got {time_limit:g}",
            2,
        )
    if not (math.isfinite(gap) and 0 <= gap < 1):
        fail(f"--gap: must be in [0, 1), got {gap:g}", 2)
    if not 0 <= seed < 2**31:
        fail(f"--seed: must be in 0..{2**31 - 1}, got {seed}", 2)
    if not 1 <= workers <= 64:
        fail(f"--workers: must be in 1..64, got {workers}", 2)
    topo, st, jb = _load_all(cluster, job, state)
    assert jb is not None
    res = run_place(
        topo,
        st,
        jb,
        SolveOptions(
            strategy=strat,
            time_limit_s=time_limit,
            relative_gap=gap,
            seed=seed,
            workers=workers,
            deterministic=deterministic,
        ),
    )
    from placement.cost.report import CostReport

    rep = res.report
    assert res.mapping is not None and isinstance(rep, CostReport)
    # the one result schema: the protobuf JSON mapping of PlaceResponse, as `place --request [--server]` writes it
    response = pb.PlaceResponse(
        result=domain.result_to_proto(topo, jb, res, time_limit_s=time_limit, deadline_limited=False)
    )
    if picture is not None:
        from placement.cli.commands.whatif import render_picture

        render_picture(topo, st, jb, res.mapping, rep, picture)
        err.print(f"wrote {picture}")
    if output == "table":
        gap_s = "-" if res.gap is None else f"{100 * res.gap:.2f}%"
        bound_s = "-" if res.lower_bound is None else f"{res.lower_bound:.4f}"
        if res.lower_bound is not None and "bound_source" in res.stats:
            bound_s += f" ({res.stats['bound_source']})"  # the bound that binds
        title = (
            f"{jb.name} ({jb.ranks} ranks) on {topo.name}: {res.status.value}, {headline(rep)}, "
            f"surrogate bound {bound_s}, gap {gap_s}, "
            f"{res.stats.get('wall_s', 0):.2f} s"
        )
        print_report(title, rep, res.strategy.value, baseline_costs(rep, res.baselines, res.baseline_reports))
        if res.stats.get("launcher") == "torchrun":  # the price of contiguous host blocks
            free = float(res.stats["launcher_free_step_seconds"])
            out.print(
                f"launcher torchrun (each host's ranks one contiguous block): step {rep.step_seconds:.4f} s "
                f"against {free:.4f} s for the free mapping ({100 * (rep.step_seconds / free - 1):+.2f}%)",
                soft_wrap=True,
            )
        if out_file is not None:
            _write(dump_message(response, "json"), out_file)
        return
    if output in ("json", "yaml"):
        _write(dump_message(response, output), out_file)
        return
    seats = [(topo.devices[d].host, topo.devices[d].local_index) for d in res.mapping]
    _write(export(output, seats, document=message_to_dict(response), topology=topo), out_file)


# ---- import -------------------------------------------------------------------------------------------------


def _parse_tiers(tiers: list[str], level_names: list[str]) -> dict[str, tuple[float, float]]:
    out = default_tiers(level_names)
    apply_tier_specs(tiers, out)
    return out


def _finish_import(
    doc: dict[str, Any],
    warnings: list[str],
    tiers: list[str],
    gpus_per_node: int | None,
    kind: str | None,
    node_topo: Path | None,
    out_file: Path | None,
) -> None:
    from placement.io.native import cluster_from_dict

    names = [lv["name"] for lv in doc["levels"]]
    tier = _parse_tiers(tiers, names)
    doc["levels"] = [{"name": n, "bandwidth_gbps": tier[n][0], "latency_us": tier[n][1]} for n in names]
    if node_topo is not None:
        from placement.io.importers.nvidia_smi import read_nvidia_smi

        nt = read_nvidia_smi(node_topo)
        warnings.extend(nt.warnings)
        from placement.io.affinity import affinity_fields

        doc["node_types"] = [
            {
                "name": node_topo.stem,
                "devices": len(nt.gpus),
                "kind": kind or "gpu",
                "matrix": [" ".join(r) for r in nt.matrix],
                "rails": list(nt.rails),
                **affinity_fields(nt.cpu_affinity, nt.numa_affinity),
            }
        ]
    for h in doc["hosts"]:
        if node_topo is not None:
            h.pop("devices", None)
            h.pop("kind", None)
            h["node_type"] = node_topo.stem
        elif "devices" not in h:
            h["devices"] = gpus_per_node or DEFAULT_DEVICES_PER_NODE
            if kind:
                h["kind"] = kind
    cluster_from_dict(doc, "<imported>")  # validate what we are about to write
    for w in warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}")
    if not tiers:
        err.print(f"[yellow]note:[/] {TIERS_NOTE}")
    _write(yaml.safe_dump(doc, sort_keys=False, default_flow_style=None), out_file)


@import_app.command("nvidia-smi")
@guard
def import_nvidia_smi(
    file: Annotated[Path, typer.Argument(help="output of `nvidia-smi topo -m`")],
    host: Annotated[str, typer.Option(help="host name for the node")] = "node0",
    kind: Annotated[str, typer.Option(help="device kind, e.g. H100")] = "gpu",
    table: Annotated[
        int | None, typer.Option(help="which table, when the file holds several (0-based)")
    ] = None,
    partial: Annotated[bool, typer.Option(help="accept a truncated table, filling missing pairs")] = False,
    out_file: ClusterOutOpt = None,
) -> None:
    """A one-node cluster file with the node's intra-node matrix and rails."""
    from placement.io.affinity import affinity_fields
    from placement.io.importers.nvidia_smi import read_nvidia_smi

    nt = read_nvidia_smi(file, table=table, allow_partial=partial)
    for w in nt.warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}")
    doc = {
        "name": host,
        "levels": [
            {"name": "node", "bandwidth_gbps": DEFAULT_TIERS[0][0], "latency_us": DEFAULT_TIERS[0][1]}
        ],
        "node_types": [
            {
                "name": file.stem,
                "devices": len(nt.gpus),
                "kind": kind,
                "matrix": [" ".join(r) for r in nt.matrix],
                "rails": list(nt.rails),
                **affinity_fields(nt.cpu_affinity, nt.numa_affinity),
            }
        ],
        "hosts": [{"name": host, "node_type": file.stem}],
    }
    from placement.io.native import cluster_from_dict

    cluster_from_dict(doc, str(file))
    _write(yaml.safe_dump(doc, sort_keys=False, default_flow_style=None), out_file)


@import_app.command("slurm")
@guard
def import_slurm(
    file: Annotated[Path, typer.Argument(help="topology.conf or topology.yaml")],
    levels: Annotated[str | None, typer.Option(help="level names bottom-up, e.g. leaf,spine,core")] = None,
    topology: Annotated[
        str | None, typer.Option(help="which topology (topology.yaml) or plugin (tree/block/ring)")
    ] = None,
    tier: TierOpt = None,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node")] = 8,
    kind: Annotated[str | None, typer.Option(help="device kind")] = None,
    node_topo: Annotated[
        Path | None, typer.Option(help="nvidia-smi topo -m of one node, applied to every node")
    ] = None,
    out_file: ClusterOutOpt = None,
) -> None:
    """A cluster file from Slurm's topology.conf (tree, block, ring) or topology.yaml."""
    from placement.io.importers.slurm import read_slurm

    doc, warnings = read_slurm(file, topology=topology, level_names=levels.split(",") if levels else None)
    _finish_import(doc, list(warnings), tier or [], gpus_per_node, kind, node_topo, out_file)


@import_app.command("k8s")
@guard
def import_k8s(
    file: Annotated[Path, typer.Argument(help="kubectl get nodes -o json")],
    levels: Annotated[str, typer.Option(help="topology label keys, coarse to fine (Kueue TAS order)")],
    level_names: Annotated[str | None, typer.Option(help="names for those levels")] = None,
    gpu_resource: Annotated[
        str, typer.Option(help="extended resource holding the GPU count")
    ] = "nvidia.com/gpu",
    tier: TierOpt = None,
    node_topo: Annotated[Path | None, typer.Option(help="nvidia-smi topo -m applied to every node")] = None,
    out_file: ClusterOutOpt = None,
) -> None:
    """A cluster file from Kubernetes node labels."""
    from placement.io.importers.k8s import parse_k8s_nodes
    from placement.io.native.document import read_text

    text = read_text(file)
    doc, warnings = parse_k8s_nodes(
        text,
        str(file),
        levels=levels.split(","),
        level_names=level_names.split(",") if level_names else None,
        gpu_resource=gpu_resource,
    )
    _finish_import(doc, list(warnings), tier or [], None, None, node_topo, out_file)


# ---- serve --------------------------------------------------------------------------------------------------


@app.command()
def serve(
    port: Annotated[int | None, typer.Option(help="gRPC port (default from PLACEMENT_PORT or 50051)")] = None,
) -> None:
    """Run the gRPC server (same as `placement-server`)."""
    argv = [] if port is None else ["--port", str(port)]
    raise typer.Exit(serve_main(argv))


from placement.cli.commands.whatif import register as _register_whatif  # noqa: E402  (adds `placement whatif`)

_register_whatif(app)
from placement.cli.commands.importers import register as _register_importers  # noqa: E402

_register_importers(import_app)  # nccl-xml, rocm-smi, ibnetdiscover, topograph
from placement.cli.commands.replay import register as _register_replay  # noqa: E402  (adds `placement replay`)

_register_replay(app)
from placement.cli.commands.batch import register as _register_batch  # noqa: E402  (adds `placement place-batch`)

_register_batch(app)
from placement.cli.commands.repair import register as _register_repair  # noqa: E402  (adds `placement repair`)

_register_repair(app)

from placement.cli.commands.bind import register as _register_bind  # noqa: E402  (adds `placement bind`)
from placement.cli.commands.export import register as _register_export  # noqa: E402  (adds `placement export`)

_register_bind(app)
_register_export(app)
from placement.cli.commands.slurm import register as _register_slurm  # noqa: E402

_register_slurm(import_app)  # adds `placement import slurm-live`
from placement.cli.commands.registry import register as _register_registry  # noqa: E402  (adds `placement registry ...`)

_register_registry(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
