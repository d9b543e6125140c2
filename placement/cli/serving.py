"""`placement place CLUSTER SERVING_JOB`: a serving job placed here and shown as TTFT, TPOT, tokens/s per GPU, the
phase table and the baselines' rows; `place` dispatches to `place_serving_file` when the job file is a serving job.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml
from rich.table import Table

from placement.cli.errors import escape, fail
from placement.cli.inputs import load_cluster_state, write_output
from placement.cli.tables import out
from placement.cost.serving import ServingReport
from placement.errors import PlacementError
from placement.io.native import load_document, load_mapping
from placement.io.native.serving import is_serving_document, serving_job_from_dict
from placement.model.topology import Topology
from placement.solve.serving import ServingResult, evaluate_serving, place_serving
from placement.solve.types import SolveOptions

__all__ = [
    "evaluate_serving_file",
    "is_serving_file",
    "place_serving_file",
    "print_serving",
    "print_serving_report",
]


def is_serving_file(path: Path) -> bool:
    """True when `path` holds a serving job (``kind: serving`` or a ``serving:`` key); False for anything else,
    including a file the job reader will report on."""
    try:
        return is_serving_document(load_document(path))
    except (PlacementError, OSError):  # the job reader reports an unreadable file with its own errors
        return False


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f}" if math.isfinite(s) else "-"


def print_serving(topology: Topology, result: ServingResult, name: str, ranks: int) -> None:
    """The answer's headline, its phase table and the candidates' rows."""
    r = result.report
    out.print(
        f"[bold]{escape(name)}[/bold]: {ranks} ranks on {escape(topology.name)} ({r.device_kind}); chosen: "
        f"{result.chosen} ({result.status})",
        soft_wrap=True,
    )
    print_serving_report(r)
    b = Table(title="against the baselines on the same state (serving model)", title_justify="left")
    for c in ("mapping", "TTFT ms", "TPOT ms", "tokens/s per GPU", "breaks"):
        b.add_column(c, justify="left" if c in ("mapping", "breaks") else "right")
    for n, rep in result.candidates.items():
        why = escape(result.broken.get(n, ""))
        if rep is None:
            b.add_row(n, "no mapping", "", "", why)
        else:
            b.add_row(n, _ms(rep.ttft_seconds), _ms(rep.tpot_seconds), f"{rep.tokens_per_s_per_gpu:.1f}", why)
    out.print(b)
    for note in result.notes:
        out.print(f"note: {escape(note)}", soft_wrap=True)


def print_serving_report(r: ServingReport) -> None:
    """TTFT, TPOT, tokens/s per GPU and the phase table of one serving report."""
    out.print(
        f"TTFT {_ms(r.ttft_seconds)} ms (prefill {_ms(r.prefill_seconds)} + KV handoff {_ms(r.handoff_seconds)})   "
        f"TPOT {_ms(r.tpot_seconds)} ms   tokens/s per GPU {r.tokens_per_s_per_gpu:.1f} "
        f"({r.tokens_per_s:.0f} tokens/s over {r.gpus} GPUs, bound by {r.bound_by})   bottleneck tier {r.bottleneck_tier}",
        soft_wrap=True,
    )
    t = Table(
        title="phases (decode: per output token; prefill and handoff: per request)", title_justify="left"
    )
    for c in ("stage", "phase", "tier", "algorithm", "critical group", "count", "ms"):
        t.add_column(c, justify="right" if c in ("count", "ms") else "left")
    for p in r.phases:
        t.add_row(p.stage, p.phase, p.tier, p.algorithm, escape(p.critical), f"{p.count:g}", _ms(p.seconds))
    out.print(t)
    for note in r.notes:
        out.print(f"note: {escape(note)}", soft_wrap=True)


def _document(topology: Topology, result: ServingResult) -> dict[str, object]:
    rep: ServingReport = result.report
    return {
        "chosen": result.chosen,
        "status": result.status,
        "mapping": [topology.devices[d].id for d in result.mapping],
        "report": rep.to_dict(),
        "baselines": {n: (None if x is None else x.to_dict()) for n, x in result.candidates.items()},
        "broken": dict(result.broken),
        "notes": list(result.notes),
    }


def place_serving_file(
    cluster: Path,
    job: Path,
    state: Path | None,
    options: SolveOptions,
    output: str,
    out_file: Path | None,
    server: str | None,
) -> None:
    """`placement place` for a serving job (module doc): tables, or ``--output json``/``yaml``."""
    if server is not None:
        fail(
            "--server: serving jobs are placed here only so far (the PlaceRequest has no serving job yet)", 2
        )
    if output not in ("table", "json", "yaml"):
        fail(f"--output: a serving job prints table, json or yaml, got {output!r}", 2)
    topo, st = load_cluster_state(cluster, state)
    sjob = serving_job_from_dict(load_document(job), str(job))
    result = place_serving(topo, st, sjob, options)
    if output == "table":
        print_serving(topo, result, sjob.name, sjob.ranks)
        if out_file is not None:
            write_output(json.dumps(_document(topo, result), indent=2) + "\n", out_file)
        return
    doc = _document(topo, result)
    if output == "json":
        write_output(json.dumps(doc, indent=2) + "\n", out_file)
    else:
        write_output(yaml.safe_dump(doc, sort_keys=False), out_file)


def evaluate_serving_file(cluster: Path, job: Path, mapping: Path, state: Path | None, output: str) -> None:
    """`placement evaluate` for a serving job: the serving report of the given mapping (validated first)."""
    if output not in ("table", "json"):
        fail(f"--output: unknown value {output!r}; use table or json", 2)
    topo, st = load_cluster_state(cluster, state)
    sjob = serving_job_from_dict(load_document(job), str(job))
    mp = load_mapping(mapping, topo)
    if len(mp) != sjob.ranks:
        fail(f"{escape(str(mapping))}: {len(mp)} devices for the serving job's {sjob.ranks} ranks", 2)
    rep = evaluate_serving(topo, st, sjob, mp)
    if output == "json":
        write_output(json.dumps({"report": rep.to_dict()}, indent=2) + "\n", None)
        return
    out.print(f"[bold]{escape(sjob.name)}[/bold] on {escape(topo.name)} ({rep.device_kind})", soft_wrap=True)
    print_serving_report(rep)
