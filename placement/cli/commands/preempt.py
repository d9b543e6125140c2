"""`placement preempt`: the running jobs to stop so that a job fits within a step bound, at the least cost
(`placement.decide.preempt`): a Pareto table of victims and GPU-hours against the job's step, or the PreemptResponse.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from placement.cli.commands.remote import decision_remote
from placement.cli.errors import escape, fail, guard
from placement.cli.help import Command, command_app
from placement.cli.inputs import load_cluster_state, load_inputs
from placement.cli.options import JsonOpt, ServerOpt, TokenOpt, WideOpt, json_output
from placement.cli.serving import is_serving_file
from placement.cli.tables import print_wrapped, table_console
from placement.decide.preempt import Objective, RunningJob
from placement.decide.preempt import preempt as run_preempt
from placement.errors import Problems
from placement.io.native import load_document
from placement.io.native.serving import load_serving_job
from placement.messages import dump_message
from placement.messages.decisions import preempt_response
from placement.messages.files import request_from_dict
from placement.solve import SolveOptions, Strategy
from placement.solve.serving import serving_traffic_job
from placement.v1 import placement_pb2 as pb

__all__ = ["app", "load_running", "preempt", "print_preempt"]

app = command_app()

_KEYS = ("job", "priority", "checkpoint_age_s", "gpu_hours")


def load_running(path: Path) -> list[RunningJob]:
    """A running-jobs file: a list (or ``running:`` a list) of ``{job, priority, checkpoint_age_s, gpu_hours}``,
    the shape of PreemptRequest.running. Every problem is reported at once, with its field path."""
    doc = load_document(path)
    ps = Problems(str(path))
    if isinstance(doc, dict) and set(doc) <= {"running", "description"} and "running" in doc:
        doc, prefix = doc["running"], "running"
    else:
        prefix = ""
    if not isinstance(doc, list):
        ps.add(prefix, "a running-jobs file is a list of {job, priority, checkpoint_age_s, gpu_hours}")
        ps.raise_if_any()
    outl: list[RunningJob] = []
    for i, entry in enumerate(doc):
        at = f"{prefix}[{i}]"
        if not isinstance(entry, dict):
            ps.add(at, f"must be a mapping of {', '.join(_KEYS)}; got {type(entry).__name__}")
            continue
        for key in sorted(set(entry) - set(_KEYS)):
            ps.add(f"{at}.{key}", f"unknown field; expected one of {list(_KEYS)}")
        name = entry.get("job")
        if not isinstance(name, str) or not name:
            ps.add(f"{at}.job", f"is required: the job's name in the state's occupancy, got {name!r}")
            continue
        nums: dict[str, float | None] = {}
        for key in _KEYS[1:]:
            v: Any = entry.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                ps.add(f"{at}.{key}", f"must be a number, got {v!r}")
                v = None
            nums[key] = None if v is None else float(v)
        outl.append(RunningJob(name, nums["priority"] or 0.0, nums["checkpoint_age_s"], nums["gpu_hours"]))
    ps.raise_if_any()
    return outl


RunningOpt = Annotated[
    Path,
    typer.Option(help="running jobs: a list of {job, priority, checkpoint_age_s, gpu_hours} (YAML or JSON)"),
]
PriorityOpt = Annotated[
    float, typer.Option(help="the incoming job's priority; only lower-priority jobs are preempted")
]
MaxSlowdownOpt = Annotated[
    float | None, typer.Option(help="the job's step at most this x its ideal step (the empty cluster)")
]
ObjectiveOpt = Annotated[
    str, typer.Option(help="fewest (victims, then GPU-hours) or gpu-hours (then victims)")
]
StrategyOpt = Annotated[
    str, typer.Option(help="how each check places the job: cpsat or a baseline (kueue-tas, first-fit, ...)")
]
DeterministicOpt = Annotated[
    bool, typer.Option(help="budget each check in deterministic time: the same answer on every run")
]


def _check(output: str, objective: str, time_limit: float, strategy: str, max_checks: int) -> None:
    """The options' own rules (exit 2)."""
    if output not in ("table", "json"):
        fail(f"--output: unknown value {output!r}; use table or json", 2)
    if objective not in [o.value for o in Objective]:
        fail(f"--objective: unknown value {objective!r}; use one of {[o.value for o in Objective]}", 2)
    if not (math.isfinite(time_limit) and time_limit > 0):
        fail(f"--time-limit: must be > 0, got {time_limit:g}", 2)
    if strategy not in [s.value for s in Strategy]:
        fail(f"--strategy: unknown value {strategy!r}; use one of {[s.value for s in Strategy]}", 2)
    if max_checks < 1:
        fail(f"--max-checks: must be >= 1, got {max_checks}", 2)


@dataclass(frozen=True)
class PreemptAsk:
    """What `preempt` asks, whoever answers it: the incoming job's priority and step bound, the objective, the
    budget of checks and how each check places the job."""

    priority: float
    max_step_seconds: float | None
    max_slowdown: float | None
    objective: str
    max_checks: int
    options: SolveOptions


def _served(
    cluster: Path,
    job: Path,
    state: Path | None,
    rjobs: list[RunningJob],
    ask: PreemptAsk,
    server: str,
    token: str | None,
) -> tuple[Any, str]:
    """The PreemptResponse a server answers for the same request, and the job's name."""
    o = ask.options
    doc: dict[str, Any] = {
        "cluster_file": str(cluster),
        "job_file": str(job),
        "priority": ask.priority,
        "running": [{k: v for k, v in dataclasses.asdict(rj).items() if v is not None} for rj in rjobs],
        "objective": ask.objective,
        "max_checks": ask.max_checks,
        "options": {
            "strategy": o.strategy.value,
            "time_limit_s": o.time_limit_s,
            "seed": o.seed,
            "deterministic": o.deterministic,
        },
    }
    if state is not None:
        doc["state_file"] = str(state)
    if ask.max_step_seconds is not None:
        doc["max_step_seconds"] = ask.max_step_seconds
    if ask.max_slowdown is not None:
        doc["max_slowdown"] = ask.max_slowdown
    req = request_from_dict(doc, pb.PreemptRequest, "<preempt>", Path.cwd())
    return decision_remote("preempt", req, server, token), req.job.name


def _here(
    cluster: Path, job: Path, state: Path | None, rjobs: list[RunningJob], ask: PreemptAsk
) -> tuple[Any, str]:
    """The PreemptResponse solved here, and the job's name."""
    sj = None
    if is_serving_file(job):  # an incoming serving deployment: placed by the serving objective, bound on TPOT
        topo, st = load_cluster_state(cluster, state)
        sj = load_serving_job(job)
        jb = serving_traffic_job(topo, st, sj)
    else:
        topo, st, jb = load_inputs(cluster, job, state)
    res = run_preempt(
        topo,
        st,
        jb,
        rjobs,
        job_priority=ask.priority,
        max_step_seconds=ask.max_step_seconds,
        max_slowdown=ask.max_slowdown,
        objective=ask.objective,
        options=ask.options,
        max_checks=ask.max_checks,
        serving=sj,
    )
    return preempt_response(topo, res, time_limit_s=ask.options.time_limit_s, deadline_limited=False), jb.name


@app.command("preempt", cls=Command)
@guard
def preempt(
    cluster: Annotated[Path, typer.Argument(help="cluster file")],
    job: Annotated[
        Path,
        typer.Argument(help="job file of the incoming job (a training job, or a serving job: kind: serving)"),
    ],
    running: RunningOpt,
    state: Annotated[Path | None, typer.Option(help="state file: occupancy by job name, failures")] = None,
    priority: PriorityOpt = 0.0,
    max_step_seconds: Annotated[
        float | None, typer.Option(help="the job's step must be at most this")
    ] = None,
    max_slowdown: MaxSlowdownOpt = None,
    objective: ObjectiveOpt = "fewest",
    max_checks: Annotated[int, typer.Option(help="feasibility checks (placements) at most")] = 64,
    strategy: StrategyOpt = "cpsat",
    time_limit: Annotated[float, typer.Option(help="seconds for the whole search")] = 10.0,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    deterministic: DeterministicOpt = False,
    output: Annotated[str, typer.Option(help="table or json")] = "table",
    json_: JsonOpt = False,
    wide: WideOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Preempt the fewest or cheapest lower-priority jobs so that a job fits.

    A Pareto table of victims (and GPU-hours lost) against the job's step; the recommended row is the least cost
    within the bound (--max-step-seconds, --max-slowdown x the ideal step, or any step). Each victim is explained.
    With --server (or PLACEMENT_SERVER) a placement-server answers (the Preempt RPC).
    """
    output = json_output(output, json_)
    _check(output, objective, time_limit, strategy, max_checks)
    rjobs = load_running(running)
    options = SolveOptions(
        strategy=Strategy(strategy),
        time_limit_s=time_limit,
        seed=seed,
        deterministic=deterministic,
        workers=1,
    )
    ask = PreemptAsk(priority, max_step_seconds, max_slowdown, objective, max_checks, options)
    if server is not None:  # the same request, solved by the server
        response, name = _served(cluster, job, state, rjobs, ask, server, token)
    else:
        response, name = _here(cluster, job, state, rjobs, ask)
    if output == "json":  # the PreemptResponse JSON mapping, as the Preempt RPC answers
        sys.stdout.write(dump_message(response))
        return
    print_preempt(response, name, priority, wide)


def print_preempt(response: Any, name: str, priority: float, wide: bool = False) -> None:
    """The Pareto table of a PreemptResponse (solved here or by a server), its victims and the protected jobs:
    in the terminal's width (80 columns when piped), every cell whole (folded, never cut), the explanations
    wrapped; with `wide` every line at its full length."""
    ideal = response.ideal.step_seconds if response.HasField("ideal") else None
    bound = (
        f"bound {response.bound_step_seconds:.4f} s"
        if response.HasField("bound_step_seconds")
        else "no bound"
    )
    checks = int(response.stats.values.get("checks", 0))
    title = (
        f"{name} (priority {priority:g}): {bound}; ideal step "
        + (f"{ideal:.4f} s" if ideal else "-")
        + f"; {checks} checks; {'proven least' if response.proven else 'not proven least'}"
    )
    t = Table(title=title, title_justify="left")
    for c in ("", "answer", "victims", "GPU-hours", "step s", "slowdown", "within", "domain"):
        t.add_column(c, justify="left" if c in ("", "answer", "domain") else "right", overflow="fold")
    for i, a in enumerate(response.answers):
        t.add_row(
            "*" if i == response.recommended else "",
            escape(a.name),
            str(len(a.victims)),
            f"{a.gpu_hours:.3f}",
            f"{a.cost.step_seconds:.4f}",
            f"{a.cost.step_seconds / ideal:.3f}" if ideal else "-",
            "yes" if a.within_bound else "no",
            escape(a.domain),
        )
    con = table_console(wide)
    con.print(t)
    lines = (
        [v.explanation for v in response.answers[response.recommended].victims] if response.answers else []
    )
    if response.protected:
        shown = ", ".join(response.protected[:10]) + (" ..." if len(response.protected) > 10 else "")
        lines.append(f"never preempted (priority >= {priority:g} or not listed): {shown}")
    if response.answers and response.answers[response.recommended].HasField("serving"):
        sv = response.answers[response.recommended].serving  # a serving job: its step is its TPOT
        lines.insert(
            0,
            f"recommended: TTFT {sv.ttft_s * 1e3:.3f} ms, TPOT {sv.tpot_s * 1e3:.3f} ms, tokens/s per GPU "
            f"{sv.tokens_per_s_per_gpu:.1f} (the step s above is the TPOT)",
        )
    for line in lines:
        print_wrapped(con, line, wide)
