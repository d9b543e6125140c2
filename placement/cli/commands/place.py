"""`placement place`: one job placed on a cluster state, here or by a placement-server (--server), from CLUSTER JOB
files or a PlaceRequest file (--request); the answer as tables next to the baselines, a result or a launcher file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from placement.cli.commands.remote import place_remote
from placement.cli.errors import WAIT_EXIT, err, escape, fail, guard
from placement.cli.help import Command, command_app
from placement.cli.inputs import load_inputs, own_command, write_output
from placement.cli.options import JsonOpt, ServerOpt, TokenOpt, WideOpt, json_output
from placement.cli.picture import render_picture
from placement.cli.serving import is_serving_file, place_serving_file, place_serving_request
from placement.cli.tables import print_result, print_verdict, seats_of
from placement.cli.usage import INPUTS
from placement.cost.report import CostReport
from placement.cost.shared import OBJECTIVES
from placement.decide.wait import decide
from placement.errors import InternalError
from placement.io.export import ExportOptions, export
from placement.io.native import job_from_dict, load_document
from placement.messages import domain, dump_message, message_to_dict
from placement.messages.files import read_request, request_from_dict
from placement.model.topology import Topology
from placement.solve import SolveOptions, Strategy
from placement.v1 import placement_pb2 as pb

__all__ = ["PLACE_OUTPUTS", "Show", "app", "place", "show_answer"]

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


@dataclass(frozen=True)
class Show:
    """How `place` shows its answer: `output` (`PLACE_OUTPUTS`), written to `out_file` (None: stdout), every
    candidate in the baseline table or only the schedulers and the best heuristic, the tables in 80 columns when
    piped or every column at full width (`wide`)."""

    output: str
    out_file: Path | None = None
    all_candidates: bool = False
    wide: bool = False


def show_answer(result: Any, cluster: str, show: Show, topology: Topology | None = None) -> None:
    """A PlacementResult (solved here or by a server) as `show` asks: the tables (and the result JSON with
    --out), the PlaceResponse as JSON or YAML, or a launcher file (none for a WAIT). `topology` (when solved
    here) adds the devices' kind and affinity to a launcher file."""
    response = pb.PlaceResponse(result=result)
    if show.output in ("json", "yaml"):
        write_output(dump_message(response, show.output), show.out_file)
    elif show.output == "table":
        print_result(result, cluster, show.all_candidates, show.wide)
        print_verdict(result)
        if show.out_file is not None:
            write_output(dump_message(response, "json"), show.out_file)
    elif result.status == pb.SOLVE_STATUS_WAIT:  # no launch file for a placement not to be started
        print_verdict(result, err)
    else:
        document = message_to_dict(response) if topology is not None else None
        opts = ExportOptions(job=result.job, bind=own_command())
        text = export(show.output, seats_of(result), document=document, topology=topology, options=opts)
        write_output(text, show.out_file)
    _waiting(result)


def _place_request(req: pb.PlaceRequest, server: str | None, token: str | None, show: Show) -> None:
    """A PlaceRequest solved by `server`, or here through the same conversion the server uses (a serving job's:
    `place_serving_request`)."""
    if req.HasField("job") and req.job.HasField("serving"):
        place_serving_request(req, server, token, show.output, show.out_file, show.wide)
        return
    if server is not None:
        cluster = req.cluster.name if req.HasField("cluster") else req.cluster_id
        show_answer(place_remote(req, server, token), cluster, show)
        return
    inputs = domain.place_inputs(req)
    res = decide(inputs.topology, inputs.state, inputs.job, inputs.options, max_slowdown=inputs.max_slowdown)
    result = domain.result_to_proto(
        inputs.topology, inputs.job, res, time_limit_s=inputs.options.time_limit_s, deadline_limited=False
    )
    show_answer(result, inputs.topology.name, show, inputs.topology)


def _server_request(
    cluster: Path,
    job: Path,
    job_doc: dict[str, Any] | None,
    state: Path | None,
    opts: SolveOptions,
    max_slowdown: float | None,
) -> pb.PlaceRequest:
    """CLUSTER JOB [--state] and the options as the PlaceRequest `--server` sends (files read here)."""
    doc: dict[str, Any] = {
        "cluster_file": str(cluster),
        **({"job": job_doc} if job_doc is not None else {"job_file": str(job)}),
        "options": {
            "strategy": opts.strategy.value,
            "time_limit_s": opts.time_limit_s,
            "relative_gap": opts.relative_gap,
            "seed": opts.seed,
            "deterministic": opts.deterministic,
            **({"objective": opts.objective} if opts.objective != "own" else {}),
        },
    }
    if state is not None:
        doc["state_file"] = str(state)
    if max_slowdown is not None:
        doc["max_slowdown"] = max_slowdown
    return request_from_dict(doc, pb.PlaceRequest, "<place>", Path.cwd())


def _job_with_rules(job: Path, balance: str | None, segment: str | None) -> dict[str, Any] | None:
    """The job document with `--balance` and `--segment` in its constraints (None: neither flag given)."""
    rules = _slice_rules(balance, segment)
    if not rules:
        return None
    loaded = load_document(job)
    if not isinstance(loaded, dict):
        fail(f"{escape(str(job))}: a job file is a mapping", 2)
    return {**loaded, "constraints": {**(loaded.get("constraints") or {}), **rules}}


def _place_here(
    cluster: Path,
    job: Path,
    job_doc: dict[str, Any] | None,
    state: Path | None,
    opts: SolveOptions,
    max_slowdown: float | None,
    picture: Path | None,
    show: Show,
) -> None:
    """Solve CLUSTER JOB here and show the answer (and draw it with --picture)."""
    topo, st, jb = load_inputs(cluster, job, state)
    if job_doc is not None:
        jb = job_from_dict(job_doc, str(job))
    res = decide(topo, st, jb, opts, max_slowdown=max_slowdown)
    if res.mapping is None or not isinstance(
        res.report, CostReport
    ):  # `place` raises InfeasibleError instead
        fail(f"{escape(jb.name)}: the solver returned no mapping ({res.status.value})", 3)
    # the one result schema: the protobuf JSON mapping of PlaceResponse, as `place --request [--server]` writes it
    result = domain.result_to_proto(topo, jb, res, time_limit_s=opts.time_limit_s, deadline_limited=False)
    if picture is not None:
        render_picture(topo, st, jb, res.mapping, res.report, picture)
        err.print(f"wrote {escape(str(picture))}", highlight=False, soft_wrap=True)
    show_answer(result, topo.name, show, topo)


StrategyOpt = Annotated[
    str,
    typer.Option(help="cpsat (the optimizer), or a baseline: first-fit, kueue-tas, slurm-tree, slurm-block"),
]
OutputOpt = Annotated[
    str,
    typer.Option(help="table, json, yaml, rankfile, hostfile, slurm or torchrun (more: placement export)"),
]
DeterministicOpt = Annotated[
    bool,
    typer.Option(help="budget the search in deterministic time: the same answer whatever the machine's load"),
]
ObjectiveOpt = Annotated[
    str,
    typer.Option(
        help="own (the job's step) or cluster (its step plus the harm to running jobs, when the state carries "
        "their traffic)"
    ),
]
MaxSlowdownOpt = Annotated[
    float | None,
    typer.Option(
        help="place or wait: above this step / ideal step (>= 1) the answer is WAIT (exit 5, no launch file)"
    ),
]
BalanceOpt = Annotated[
    str | None,
    typer.Option(
        help="balanced slices: LEVEL or LEVEL:SLICE, the job's slices (of SLICE ranks) spread evenly over the "
        "domains of LEVEL it uses (the job's constraints.balance)"
    ),
]
SegmentOpt = Annotated[
    str | None,
    typer.Option(
        help="segments: NODES:LEVEL, the ranks in blocks of NODES hosts' worth, each inside one domain of "
        "LEVEL (Slurm --segment; the job's constraints.segment)"
    ),
]
AllCandidatesOpt = Annotated[
    bool,
    typer.Option(
        "--all-candidates",
        help="the baseline table lists every heuristic the optimizer scored (default: the schedulers and the "
        "best heuristic)",
    ),
]


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
    strategy: StrategyOpt = "cpsat",
    time_limit: Annotated[float, typer.Option(help="solver time limit in seconds")] = 10.0,
    gap: Annotated[float, typer.Option(help="stop at this relative gap")] = 0.0,
    seed: Annotated[int, typer.Option(help="random seed (same seed and workers: same answer)")] = 0,
    workers: Annotated[int, typer.Option(help="CP-SAT workers (<= cores; not sent to a server)")] = 2,
    deterministic: DeterministicOpt = False,
    objective: ObjectiveOpt = "own",
    output: OutputOpt = "table",
    json_: JsonOpt = False,
    out_file: Annotated[Path | None, typer.Option("--out", help="write the output here")] = None,
    picture: Annotated[
        Path | None, typer.Option(help="also draw the placement (SVG or PNG by suffix)")
    ] = None,
    max_slowdown: MaxSlowdownOpt = None,
    balance: BalanceOpt = None,
    segment: SegmentOpt = None,
    all_candidates: AllCandidatesOpt = False,
    wide: WideOpt = False,
) -> None:
    """Place a job on a cluster state and show what it costs, next to the baselines.

    Give CLUSTER JOB [--state], or --request FILE; with --server (or PLACEMENT_SERVER) a placement-server solves
    it. The table ends with the mapping (ranks per host); --out FILE writes the result, --output a launcher file.
    """
    output = json_output(output, json_)
    problem = INPUTS["place"].problem({"cluster": cluster, "job": job, "request": request})
    if problem is not None:
        fail(problem, 2)
    if output not in PLACE_OUTPUTS:
        fail(f"--output: unknown value {output!r}; use one of {', '.join(PLACE_OUTPUTS)}", 2)
    show = Show(output, out_file, all_candidates, wide)
    if request is not None:
        _place_request(read_request(request, pb.PlaceRequest), server, token, show)
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
        return place_serving_file(cluster, job, state, opts, output, out_file, server, token, wide)
    if max_slowdown is not None and not (math.isfinite(max_slowdown) and max_slowdown >= 1):
        fail(f"--max-slowdown: must be a number >= 1 (1: the ideal step), got {max_slowdown:g}", 2)
    opts = SolveOptions(
        strategy=strat,
        time_limit_s=time_limit,
        relative_gap=gap,
        seed=seed,
        workers=workers,
        deterministic=deterministic,
        objective=objective,
    )
    job_doc = _job_with_rules(job, balance, segment)
    if server is not None:
        req = _server_request(cluster, job, job_doc, state, opts, max_slowdown)
        _place_request(req, server, token, show)
        return
    _place_here(cluster, job, job_doc, state, opts, max_slowdown, picture, show)
