"""`placement place`: one job placed on a cluster state, here or by a placement-server (--server), from CLUSTER JOB
files or a PlaceRequest file (--request); the answer as tables next to the baselines, a result or a launcher file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from placement.cli.commands.remote import place_remote
from placement.cli.errors import WAIT_EXIT, err, escape, fail, guard
from placement.cli.help import Command, command_app
from placement.cli.inputs import load_inputs, write_output
from placement.cli.options import ServerOpt, TokenOpt
from placement.cli.picture import render_picture
from placement.cli.serving import is_serving_file, place_serving_file
from placement.cli.tables import out, place_title, print_report, print_result, print_verdict
from placement.cli.usage import INPUTS
from placement.cost.report import CostReport
from placement.cost.shared import OBJECTIVES
from placement.errors import InternalError
from placement.io.export import baseline_costs, export
from placement.io.native import job_from_dict, load_document
from placement.messages import domain, dump_message, message_to_dict
from placement.messages.files import read_request, request_from_dict
from placement.solve import SolveOptions, Strategy
from placement.solve.wait import decide
from placement.v1 import placement_pb2 as pb

__all__ = ["PLACE_OUTPUTS", "app", "place"]

PLACE_OUTPUTS = ("table", "json", "yaml", "rankfile", "hostfile", "slurm", "torchrun")

app = command_app()


def _check_options(strategy: str, time_limit: float, gap: float, seed: int, workers: int) -> Strategy:
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
    return strat


def _slice_rules(balance: str | None, segment: str | None) -> dict[str, Any]:
    """`--balance LEVEL[:SLICE]` and `--segment NODES:LEVEL` as the job document's constraints."""
    out_rules: dict[str, Any] = {}
    if balance is not None:
        level, _, size = balance.partition(":")
        if not level or (size and not size.isdigit()):
            fail(f"--balance: write LEVEL or LEVEL:SLICE (e.g. leaf or leaf:8), got {balance!r}", 2)
        out_rules["balance"] = {"level": level, **({"slice": int(size)} if size else {})}
    if segment is not None:
        nodes, _, level = segment.partition(":")
        if not nodes.isdigit() or not level:
            fail(f"--segment: write NODES:LEVEL (e.g. 2:leaf), got {segment!r}", 2)
        out_rules["segment"] = {"nodes": int(nodes), "level": level}
    return out_rules


def _waiting(result: Any) -> None:
    """A WAIT answer ends the command with `WAIT_EXIT` (after its output)."""
    if result.status == pb.SOLVE_STATUS_WAIT:
        raise typer.Exit(WAIT_EXIT)


def _answer(result: Any, cluster: str, output: str, out_file: Path | None) -> None:
    """A PlacementResult (from a server, or a request solved here) as `--output` asks."""
    response = pb.PlaceResponse(result=result)
    if output in ("json", "yaml"):
        write_output(dump_message(response, output), out_file)
        _waiting(result)
        return
    if output == "table":
        print_result(result, cluster)
        print_verdict(result)
        if out_file is not None:
            write_output(dump_message(response, "json"), out_file)
        _waiting(result)
        return
    if result.status == pb.SOLVE_STATUS_WAIT:  # no launch file for a placement not to be started
        print_verdict(result, err)
        _waiting(result)
    seats = [(a.host, int(a.device.rpartition("/gpu")[2])) for a in result.mapping]
    write_output(export(output, seats), out_file)


def _place_request(
    req: pb.PlaceRequest, server: str | None, token: str | None, output: str, out_file: Path | None
) -> None:
    """A PlaceRequest solved by `server`, or here through the same conversion the server uses."""
    if server is not None:
        cluster = req.cluster.name if req.HasField("cluster") else req.cluster_id
        _answer(place_remote(req, server, token), cluster, output, out_file)
        return
    inputs = domain.place_inputs(req)
    res = decide(inputs.topology, inputs.state, inputs.job, inputs.options, max_slowdown=inputs.max_slowdown)
    result = domain.result_to_proto(
        inputs.topology, inputs.job, res, time_limit_s=inputs.options.time_limit_s, deadline_limited=False
    )
    _answer(result, inputs.topology.name, output, out_file)


@app.command("place", cls=Command)
@guard
def place(
    cluster: Annotated[Path | None, typer.Argument(help="cluster file")] = None,
    job: Annotated[Path | None, typer.Argument(help="job file")] = None,
    state: Annotated[Path | None, typer.Option(help="state file")] = None,
    request: Annotated[
        Path | None,
        typer.Option(help="a PlaceRequest file (YAML/JSON, protobuf JSON mapping) instead of CLUSTER JOB"),
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    strategy: Annotated[
        str,
        typer.Option(
            help="cpsat (the optimizer), or a baseline: first-fit, kueue-tas, slurm-tree, slurm-block"
        ),
    ] = "cpsat",
    time_limit: Annotated[float, typer.Option(help="solver time limit in seconds")] = 10.0,
    gap: Annotated[float, typer.Option(help="stop at this relative gap")] = 0.0,
    seed: Annotated[int, typer.Option(help="random seed (same seed and workers: same answer)")] = 0,
    workers: Annotated[int, typer.Option(help="CP-SAT workers (<= cores; not sent to a server)")] = 2,
    deterministic: Annotated[
        bool,
        typer.Option(
            help="budget the search in deterministic time: the same answer whatever the machine's load"
        ),
    ] = False,
    objective: Annotated[
        str,
        typer.Option(
            help="own (the job's step) or cluster (its step plus the harm to running jobs, when the state "
            "carries their traffic)"
        ),
    ] = "own",
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
    max_slowdown: Annotated[
        float | None,
        typer.Option(
            help="place or wait: above this step / ideal step (>= 1) the answer is WAIT (exit 5, no launch file)"
        ),
    ] = None,
    balance: Annotated[
        str | None,
        typer.Option(
            help="balanced slices: LEVEL or LEVEL:SLICE, the job's slices (of SLICE ranks) spread evenly over the "
            "domains of LEVEL it uses (the job's constraints.balance)"
        ),
    ] = None,
    segment: Annotated[
        str | None,
        typer.Option(
            help="segments: NODES:LEVEL, the ranks in blocks of NODES hosts' worth, each inside one domain of "
            "LEVEL (Slurm --segment; the job's constraints.segment)"
        ),
    ] = None,
) -> None:
    """Place a job on a cluster state and show what it costs, next to the baselines.

    Give CLUSTER JOB [--state], or --request FILE; with --server (or PLACEMENT_SERVER) a placement-server solves
    it.
    """
    problem = INPUTS["place"].problem({"cluster": cluster, "job": job, "request": request})
    if problem is not None:
        fail(problem, 2)
    if output not in PLACE_OUTPUTS:
        fail(f"--output: unknown value {output!r}; use one of {', '.join(PLACE_OUTPUTS)}", 2)
    if request is not None:
        _place_request(read_request(request, pb.PlaceRequest), server, token, output, out_file)
        return
    if cluster is None or job is None:
        raise InternalError("the inputs rule lets CLUSTER and JOB through only together")
    strat = _check_options(strategy, time_limit, gap, seed, workers)
    if objective not in OBJECTIVES:
        fail(f"--objective: unknown value {objective!r}; use one of {', '.join(OBJECTIVES)}", 2)
    if is_serving_file(job):  # a serving job (kind: serving): placement.cli.serving
        opts = SolveOptions(
            strategy=strat, time_limit_s=time_limit, relative_gap=gap, seed=seed, workers=workers,
            deterministic=deterministic,
        )  # fmt: skip
        return place_serving_file(cluster, job, state, opts, output, out_file, server, token)
    if max_slowdown is not None and not (math.isfinite(max_slowdown) and max_slowdown >= 1):
        fail(f"--max-slowdown: must be a number >= 1 (1: the ideal step), got {max_slowdown:g}", 2)
    rules = _slice_rules(balance, segment)
    job_doc: dict[str, Any] | None = None
    if rules:  # the job file with the flags' rules in its constraints
        loaded = load_document(job)
        if not isinstance(loaded, dict):
            fail(f"{escape(str(job))}: a job file is a mapping", 2)
        job_doc = {**loaded, "constraints": {**(loaded.get("constraints") or {}), **rules}}
    if server is not None:
        doc: dict[str, Any] = {
            "cluster_file": str(cluster),
            **({"job": job_doc} if job_doc is not None else {"job_file": str(job)}),
            "options": {
                "strategy": strat.value,
                "time_limit_s": time_limit,
                "relative_gap": gap,
                "seed": seed,
                "deterministic": deterministic,
                **({"objective": objective} if objective != "own" else {}),
            },
        }
        if state is not None:
            doc["state_file"] = str(state)
        if max_slowdown is not None:
            doc["max_slowdown"] = max_slowdown
        req = request_from_dict(doc, pb.PlaceRequest, "<place>", Path.cwd())
        _place_request(req, server, token, output, out_file)
        return
    topo, st, jb = load_inputs(cluster, job, state)
    if job_doc is not None:
        jb = job_from_dict(job_doc, str(job))
    res = decide(
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
            objective=objective,
        ),
        max_slowdown=max_slowdown,
    )
    rep = res.report
    if res.mapping is None or not isinstance(rep, CostReport):  # `place` raises InfeasibleError instead
        fail(f"{escape(jb.name)}: the solver returned no mapping ({res.status.value})", 3)
    # the one result schema: the protobuf JSON mapping of PlaceResponse, as `place --request [--server]` writes it
    response = pb.PlaceResponse(
        result=domain.result_to_proto(topo, jb, res, time_limit_s=time_limit, deadline_limited=False)
    )
    if picture is not None:
        render_picture(topo, st, jb, res.mapping, rep, picture)
        err.print(f"wrote {escape(str(picture))}", highlight=False, soft_wrap=True)
    if output == "table":
        source = res.stats.get("bound_source")
        title = place_title(
            jb.name,
            jb.ranks,
            topo.name,
            res.status.value,
            rep,
            res.lower_bound,
            str(source) if source is not None else None,
            res.gap,
            float(res.stats.get("wall_s", 0)),
            str(res.stats["stop_reason"]) if "stop_reason" in res.stats else None,
        )
        print_report(title, rep, res.strategy.value, baseline_costs(rep, res.baselines, res.baseline_reports))
        if res.stats.get("launcher") == "torchrun":  # the price of contiguous host blocks
            free = float(res.stats["launcher_free_step_seconds"])
            out.print(
                f"launcher torchrun (each host's ranks one contiguous block): step {rep.step_seconds:.4f} s "
                f"against {free:.4f} s for the free mapping ({100 * (rep.step_seconds / free - 1):+.2f}%)",
                soft_wrap=True,
            )
        print_verdict(response.result)
        if out_file is not None:
            write_output(dump_message(response, "json"), out_file)
        _waiting(response.result)
        return
    if output in ("json", "yaml"):
        write_output(dump_message(response, output), out_file)
        _waiting(response.result)
        return
    if response.result.status == pb.SOLVE_STATUS_WAIT:  # no launch file for a placement not to be started
        print_verdict(response.result, err)
        _waiting(response.result)
    seats = [(topo.devices[d].host, topo.devices[d].local_index) for d in res.mapping]
    write_output(export(output, seats, document=message_to_dict(response), topology=topo), out_file)
