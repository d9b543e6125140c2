"""`placement place-batch`: a queue of jobs placed jointly on one state (`placement.decide.batch.joint`), here or by a
placement-server, and its batch file (jobs with weight and priority).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from placement.cli.commands.remote import place_batch_remote
from placement.cli.errors import escape, fail, guard
from placement.cli.help import Command, command_app
from placement.cli.inputs import load_cluster_state, write_output
from placement.cli.options import JsonOpt, ServerOpt, TokenOpt, WideOpt, json_output
from placement.cli.tables import print_wrapped, table_console
from placement.decide.batch.joint import place_batch
from placement.decide.batch.types import BatchJob, BatchPlan, BatchResult
from placement.errors import InputError, Problem, Problems
from placement.io.native import job_from_dict, load_document
from placement.io.native.serving import is_serving_document, serving_job_from_dict
from placement.messages.files import message_to_dict, normalize_cluster, normalize_job
from placement.messages.serving_job import serving_cost, serving_to_proto
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.solve import SolveOptions
from placement.solve.serving import serving_traffic_job

__all__ = ["app", "batch_document", "load_batch", "place_batch_cmd"]

app = command_app()


def load_batch(
    path: Path, topology: Topology | None = None, state: ClusterState | None = None
) -> list[BatchJob]:
    """A batch file: ``jobs:`` a list of ``{job: {...} | job_file: PATH, weight: 1, priority: 0}`` (the shape of
    PlaceBatchRequest.jobs; job files relative to the batch file). Every problem is reported at once. A serving
    job (``kind: serving``) joins as its explicit job on `topology` and `state` (needed then), its serving job
    beside."""
    return [bj for bj, _ in _read_batch(path, topology, state)]


def _read_batch(
    path: Path, topology: Topology | None = None, state: ClusterState | None = None
) -> list[tuple[BatchJob, Any]]:
    """The jobs of a batch file, each with its job document (job files inlined)."""
    doc = load_document(path)
    ps = Problems(str(path))
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        ps.add("jobs", "a batch file is a mapping with `jobs`: a list of {job or job_file, weight, priority}")
        ps.raise_if_any()
    unknown = sorted(set(doc) - {"jobs", "description"})
    if unknown:
        ps.add(unknown[0], "unknown field; expected one of ['description', 'jobs']")
    out: list[tuple[BatchJob, Any]] = []
    for i, entry in enumerate(doc["jobs"]):
        at = f"jobs[{i}]"
        if not isinstance(entry, dict):
            ps.add(
                at, f"must be a mapping of job (or job_file), weight, priority; got {type(entry).__name__}"
            )
            continue
        for key in sorted(set(entry) - {"job", "job_file", "weight", "priority"}):
            ps.add(f"{at}.{key}", "unknown field; expected one of ['job', 'job_file', 'priority', 'weight']")
        if ("job" in entry) == ("job_file" in entry):
            ps.add(at, "give exactly one of job and job_file")
            continue
        jdoc: Any = entry.get("job")
        source = f"{at}.job"
        if "job_file" in entry:
            ref = Path(str(entry["job_file"]))
            ref = ref if ref.is_absolute() else path.parent / ref
            try:
                jdoc = load_document(ref)
            except InputError as e:
                ps.extend(
                    Problem(f"{at}.job_file ({e.source})" + (f" {p.path}" if p.path else ""), p.message)
                    for p in e.problems
                )
                continue
            source = f"{at}.job_file ({ref})"
        numbers: dict[str, float] = {}
        for key, default in (("weight", 1.0), ("priority", 0.0)):
            v = entry.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int | float):
                ps.add(f"{at}.{key}", f"must be a number, got {v!r}")
                v = default
            numbers[key] = float(v)
        try:
            if is_serving_document(jdoc):
                if topology is None:
                    ps.add(source, "is a serving job: reading it needs the cluster (load_batch's topology)")
                    continue
                sj = serving_job_from_dict(jdoc, source)
                explicit = serving_traffic_job(topology, state or ClusterState(), sj)
                out.append((BatchJob(explicit, numbers["weight"], numbers["priority"], sj), jdoc))
                continue
            job = job_from_dict(jdoc, source)
        except InputError as e:
            ps.extend(Problem(f"{source}.{p.path}" if p.path else source, p.message) for p in e.problems)
            continue
        out.append((BatchJob(job, numbers["weight"], numbers["priority"]), jdoc))
    ps.raise_if_any()
    return out


def _plan_doc(topology: Topology, plan: BatchPlan, mappings: bool) -> dict[str, Any]:
    jobs: list[dict[str, Any]] = []
    for o in plan.outcomes:
        d: dict[str, Any] = {"job_index": o.index, "job": o.name, "admitted": o.admitted}
        if o.report is not None:
            d["cost"] = {"step_seconds": o.report.step_seconds, "comm_seconds": o.report.comm_seconds}
        if o.serving is not None:  # the field names of ServingCost, as a served answer has them
            d["serving"] = message_to_dict(serving_cost(o.serving))
        if mappings and o.mapping is not None:
            devs = topology.devices
            d["mapping"] = [
                {"rank": r, "device": devs[x].id, "host": devs[x].host} for r, x in enumerate(o.mapping)
            ]
        if not o.admitted:
            d.update(reason=o.reason, explanation=list(o.explanation))
            if o.conflicts_with:
                d["conflicts_with"] = list(o.conflicts_with)
        jobs.append(d)
    return {
        "strategy": plan.strategy,
        "admitted": len(plan.admitted),
        "admitted_weight": plan.admitted_weight,
        "weighted_step_seconds": plan.weighted_step_seconds,
        "weighted_comm_seconds": plan.weighted_comm_seconds,
        "jobs": jobs,
    }


def batch_document(topology: Topology, res: BatchResult) -> dict[str, Any]:
    """The answer as plain data, with the field names of PlaceBatchResponse."""
    doc: dict[str, Any] = {
        "plan": _plan_doc(topology, res.plan, True),
        "baselines": [_plan_doc(topology, p, False) for p in res.baselines.values()],
        "admission_optimal": res.admission_optimal,
    }
    if res.weight_bound is not None:
        doc["admitted_weight_bound"] = res.weight_bound
    doc["stats"] = {k: v for k, v in res.stats.items() if not isinstance(v, float) or math.isfinite(v)}
    return doc


def _print(jobs: list[BatchJob], doc: dict[str, Any], where: str, wide: bool) -> None:
    """The answer's tables from its document (local, or a PlaceBatchResponse as a dict: unset fields absent). In 80
    columns the reasons a job is not admitted follow the jobs table, one line each; `wide` puts them in it."""
    con = table_console(wide)
    plan = doc.get("plan", {})
    bound = doc.get("admitted_weight_bound")
    t = Table(
        title=f"{len(jobs)} queued jobs on {where}: {plan.get('strategy', '-')} admits {plan.get('admitted', 0)} "
        f"(weight {plan.get('admitted_weight', 0):g}"
        + (f" of at most {bound:g}" if bound is not None else "")
        + (", optimal" if doc.get("admission_optimal") else "")
        + ")",
        title_justify="left",
    )
    t.add_column("answer", no_wrap=True)
    for name in ("admitted", "weight", "weighted step s", "weighted comm s"):
        t.add_column(name, justify="right")
    for i, p in enumerate([plan, *doc.get("baselines", [])]):
        t.add_row(
            p.get("strategy", "-") + (" (chosen)" if i == 0 else ""),
            str(p.get("admitted", 0)),
            f"{p.get('admitted_weight', 0):g}",
            f"{p.get('weighted_step_seconds', 0.0):.4f}",
            f"{p.get('weighted_comm_seconds', 0.0):.4f}",
        )
    con.print(t)
    jt = Table(title=f"jobs in the {plan.get('strategy', '-')} answer", title_justify="left")
    jt.add_column("job", no_wrap=True)  # whole: names are read back
    for name in ("ranks", "weight", "priority", "step s", "comm s"):
        jt.add_column(name, justify="right")
    if wide:
        jt.add_column("why not admitted", no_wrap=True)
    reasons: list[tuple[str, str]] = []
    for o in plan.get("jobs", []):
        bj = jobs[int(o.get("job_index", 0))]
        cost = o.get("cost")
        why = "" if o.get("admitted") else f"{o.get('reason', '')}: " + "; ".join(o.get("explanation", []))
        row = [
            str(o.get("job", "")),
            str(bj.job.ranks),
            f"{bj.weight:g}",
            f"{bj.priority:g}",
            f"{cost.get('step_seconds', 0.0):.4f}" if cost else "-",
            f"{cost.get('comm_seconds', 0.0):.4f}" if cost else "-",
        ]
        jt.add_row(*row, *([why] if wide else []))
        if why:
            reasons.append((row[0], why))
    con.print(jt)
    served = [o for o in plan.get("jobs", []) if o.get("serving")]
    if served:
        con.print("serving jobs (their step s is the time per output token):", highlight=False)
        for o in served:
            sv = o["serving"]
            print_wrapped(
                con,
                f"{o.get('job', '')}: TTFT {1e3 * sv.get('ttft_s', 0.0):.3f} ms, TPOT "
                f"{1e3 * sv.get('tpot_s', 0.0):.3f} ms, tokens/s per GPU {sv.get('tokens_per_s_per_gpu', 0.0):.1f}"
                f" ({sv.get('gpus', 0)} GPUs, bound by {sv.get('bound_by', '')})",
                wide,
            )
    if reasons and not wide:
        con.print("why not admitted:", highlight=False)
        for name, why in reasons:
            con.print(f"  {escape(name)}: {escape(why)}", highlight=False, soft_wrap=True)


def _request_doc(
    cluster: Path, state: Path | None, entries: list[tuple[BatchJob, Any]], options: dict[str, Any]
) -> dict[str, Any]:
    """A PlaceBatchRequest in the protobuf JSON mapping, from the native files (shorthands normalized)."""
    ps = Problems(str(cluster))
    doc: dict[str, Any] = {"cluster": normalize_cluster(load_document(cluster), cluster.parent, ps)}
    ps.raise_if_any()
    if state is not None:
        doc["state"] = load_document(state)
    doc["jobs"] = [
        {
            "job": message_to_dict(serving_to_proto(bj.serving))
            if bj.serving is not None
            else {**normalize_job(jdoc), "name": bj.job.name},
            "weight": bj.weight,
            "priority": bj.priority,
        }
        for bj, jdoc in entries
    ]
    doc["options"] = options
    return doc


@app.command("place-batch", cls=Command)
@guard
def place_batch_cmd(
    cluster: Annotated[Path, typer.Argument(help="cluster file")],
    batch: Annotated[Path, typer.Argument(help="batch file: jobs with job (or job_file), weight, priority")],
    state: Annotated[Path | None, typer.Option(help="state file")] = None,
    time_limit: Annotated[
        float,
        typer.Option(
            help="seconds for the whole batch: a wall-clock limit, or a deterministic budget with --deterministic"
        ),
    ] = 10.0,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    workers: Annotated[int, typer.Option(help="CP-SAT workers (<= cores)")] = 2,
    deterministic: Annotated[bool, typer.Option(help="budget each search in deterministic time")] = False,
    output: Annotated[str, typer.Option(help="table, json or yaml")] = "table",
    json_: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="write the JSON/YAML answer here")] = None,
    wide: WideOpt = False,
) -> None:
    """Place a queue of jobs jointly, next to FIFO kueue-tas and priority-ordered cpsat.

    The admitted subset (most admitted weight, then fewest weighted step seconds) with no device shared, and why
    each other job is not admitted. With --server (or PLACEMENT_SERVER) the same files are sent as a
    PlaceBatchRequest (the answer is the PlaceBatchResponse).
    """
    output = json_output(output, json_)
    if output not in ("table", "json", "yaml"):
        fail(f"--output: unknown value {output!r}; use table, json or yaml", 2)
    if not (math.isfinite(time_limit) and time_limit > 0):
        fail(f"--time-limit: must be > 0, got {time_limit:g}", 2)
    if not 0 <= seed < 2**31:
        fail(f"--seed: must be in 0..{2**31 - 1}, got {seed}", 2)
    if not 1 <= workers <= 64:
        fail(f"--workers: must be in 1..64, got {workers}", 2)
    topo, st = load_cluster_state(cluster, state)
    entries = _read_batch(batch, topo, st)
    jobs = [bj for bj, _ in entries]
    if server is not None:
        options = {"time_limit_s": time_limit, "seed": seed, "deterministic": deterministic}
        doc = place_batch_remote(_request_doc(cluster, state, entries, options), server, token)
        where = server
    else:
        res = place_batch(
            topo,
            st,
            jobs,
            SolveOptions(time_limit_s=time_limit, seed=seed, workers=workers, deterministic=deterministic),
        )
        doc = batch_document(topo, res)
        where = topo.name
    if output == "table":
        _print(jobs, doc, where, wide)
        if out_file is not None:
            write_output(json.dumps(doc, indent=2) + "\n", out_file)
        return
    text = json.dumps(doc, indent=2) + "\n" if output == "json" else str(yaml.safe_dump(doc, sort_keys=False))
    write_output(text, out_file)
