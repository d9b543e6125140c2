"""`placement place CLUSTER SERVING_JOB`: a serving job placed here and shown as TTFT, TPOT, tokens/s per GPU, the
phase table and the baselines' rows; `place` dispatches to `place_serving_file` when the job file is a serving job,
`evaluate` to `evaluate_serving_file`, and `whatif sweep` to `whatif_serving_file` when the sweep's job is one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml
from rich.table import Table

from placement.cli.commands.remote import place_remote
from placement.cli.errors import escape, fail
from placement.cli.inputs import load_cluster_state, write_output
from placement.cli.tables import out, print_wrapped, table_console
from placement.cost.serving import ServingReport
from placement.errors import PlacementError
from placement.io.native import load_document, load_mapping
from placement.io.native.serving import is_serving_document, serving_job_from_dict
from placement.messages.files import request_from_dict
from placement.messages.serving import serving_place_inputs, serving_result_from_proto, serving_to_proto
from placement.model.job import Job
from placement.model.serving import ServingJob
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.sim.whatif.run import run_serving_sweep
from placement.sim.whatif.spec import is_serving_sweep, load_serving_sweep
from placement.solve.serving import ServingResult, evaluate_serving, place_serving, serving_traffic_job
from placement.solve.types import SolveOptions
from placement.v1 import placement_pb2 as pb

__all__ = [
    "evaluate_serving_file",
    "is_serving_file",
    "is_serving_sweep_file",
    "place_serving_file",
    "place_serving_request",
    "print_serving",
    "print_serving_report",
    "serving_request",
    "serving_shape_job",
    "serving_shape_message",
    "whatif_serving_file",
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


def print_serving(
    topology: Topology, result: ServingResult, name: str, ranks: int, wide: bool = False
) -> None:
    """The answer's headline, its phase table and the candidates' rows: 80 columns when piped (the headline and
    notes wrapped at spaces, the tables' cells wrapped), or with `wide` one line each and tables at full width."""
    r = result.report
    con = table_console(wide)
    head = [
        f"{name}: {ranks} ranks on {topology.name} ({r.device_kind})",
        f"chosen: {result.chosen} ({result.status})",
    ]
    for line in ["; ".join(head)] if wide else head:
        print_wrapped(con, line, wide, indent=0)
    print_serving_report(r, wide)
    b = Table(title="against the baselines on the same state (serving model)", title_justify="left")
    for c in ("mapping", "TTFT ms", "TPOT ms", "tokens/s per GPU", "breaks"):
        b.add_column(c, justify="left" if c in ("mapping", "breaks") else "right")
    # the answer first, then every other candidate in the order they were tried
    order = [result.chosen, *(n for n in result.candidates if n != result.chosen)]
    for n in order:
        rep = result.candidates[n]
        why = escape(result.broken.get(n, ""))
        label = f"{n} (answer)" if n == result.chosen else n
        if rep is None:
            b.add_row(label, "no mapping", "", "", why)
        else:
            b.add_row(
                label, _ms(rep.ttft_seconds), _ms(rep.tpot_seconds), f"{rep.tokens_per_s_per_gpu:.1f}", why
            )
    con.print(b)
    for note in result.notes:
        print_wrapped(con, f"note: {note}", wide, indent=0)


def serving_headline(r: ServingReport) -> list[str]:
    """The lines that head a serving report: TTFT with its parts; TPOT and tokens/s per GPU; the deployment's
    tokens/s, the pool that bounds it and the bottleneck tier."""
    return [
        f"TTFT {_ms(r.ttft_seconds)} ms (prefill {_ms(r.prefill_seconds)} + KV handoff {_ms(r.handoff_seconds)})",
        f"TPOT {_ms(r.tpot_seconds)} ms   tokens/s per GPU {r.tokens_per_s_per_gpu:.1f}",
        f"{r.tokens_per_s:.0f} tokens/s over {r.gpus} GPUs, bound by {r.bound_by}; "
        f"bottleneck tier {r.bottleneck_tier}",
    ]


def print_serving_report(r: ServingReport, wide: bool = False) -> None:
    """TTFT, TPOT, tokens/s per GPU and the phase table of one serving report (80 columns when piped, or `wide`)."""
    con = table_console(wide)
    lines = serving_headline(r)
    for line in ["   ".join(lines)] if wide else lines:
        print_wrapped(con, line, wide, indent=0)
    t = Table(
        title="phases (decode: per output token; prefill and handoff: per request)", title_justify="left"
    )
    for c in ("stage", "phase", "tier", "algorithm", "critical group", "count", "ms"):
        t.add_column(c, justify="right" if c in ("count", "ms") else "left")
    for p in r.phases:
        t.add_row(p.stage, p.phase, p.tier, p.algorithm, escape(p.critical), f"{p.count:g}", _ms(p.seconds))
    con.print(t)
    for note in r.notes:
        print_wrapped(con, f"note: {note}", wide, indent=0)


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
    token: str | None = None,
    wide: bool = False,
) -> None:
    """`placement place` for a serving job (module doc), here or by a placement-server (`server`: the same
    conversion both ways, so the same tables and document): tables, or ``--output json``/``yaml``."""
    if output not in ("table", "json", "yaml"):
        fail(f"--output: a serving job prints table, json or yaml, got {output!r}", 2)
    topo, st = load_cluster_state(cluster, state)
    sjob = serving_job_from_dict(load_document(job), str(job))
    if server is not None:
        result = serving_result_from_proto(
            place_remote(serving_request(cluster, state, sjob, options), server, token), topo
        )
    else:
        result = place_serving(topo, st, sjob, options)
    show_serving(topo, sjob, result, output, out_file, wide)


def place_serving_request(
    req: pb.PlaceRequest,
    server: str | None,
    token: str | None,
    output: str,
    out_file: Path | None,
    wide: bool = False,
) -> None:
    """`placement place --request FILE` whose job is a serving job (inline, or its ``job_file`` a serving job
    file): read as the server reads it (`serving_place_inputs`), placed here or by `server`, shown as
    `place_serving_file` shows it."""
    if output not in ("table", "json", "yaml"):
        fail(f"--output: a serving job prints table, json or yaml, got {output!r}", 2)
    if req.cluster_id and not req.HasField("cluster"):
        why = (
            "the command does not fetch a registry cluster to show a serving answer on"
            if server is not None
            else "a cluster_id names a registry cluster, which only a server holds"
        )
        fail(
            f"--request: cluster_id {req.cluster_id!r} with a serving job: give the cluster (cluster or "
            f"cluster_file) so the answer's devices can be shown ({why})",
            2,
        )
    inputs = serving_place_inputs(req)
    if server is not None:
        result = serving_result_from_proto(place_remote(req, server, token), inputs.topology)
    else:
        result = place_serving(inputs.topology, inputs.state, inputs.job, inputs.options)
    show_serving(inputs.topology, inputs.job, result, output, out_file, wide)


def show_serving(
    topo: Topology, sjob: ServingJob, result: ServingResult, output: str, out_file: Path | None, wide: bool
) -> None:
    """A serving answer as `output` asks: the tables (and the JSON document with `out_file`), or the document as
    JSON or YAML."""
    if output == "table":
        print_serving(topo, result, sjob.name, sjob.ranks, wide)
        if out_file is not None:
            write_output(json.dumps(_document(topo, result), indent=2) + "\n", out_file)
        return
    doc = _document(topo, result)
    if output == "json":
        write_output(json.dumps(doc, indent=2) + "\n", out_file)
    else:
        write_output(yaml.safe_dump(doc, sort_keys=False), out_file)


def serving_request(
    cluster: Path, state: Path | None, job: ServingJob, options: SolveOptions
) -> pb.PlaceRequest:
    """The PlaceRequest of `place --server` for a serving job: the cluster and state files, the job as its
    message (`placement.messages.serving.serving_to_proto`), the options."""
    doc: dict[str, object] = {
        "cluster_file": str(cluster),
        "options": {
            "strategy": options.strategy.value,
            "time_limit_s": options.time_limit_s,
            "relative_gap": options.relative_gap,
            "seed": options.seed,
            "deterministic": options.deterministic,
        },
    }
    if state is not None:
        doc["state_file"] = str(state)
    req = request_from_dict(doc, pb.PlaceRequest, "<place>", Path.cwd())
    req.job.CopyFrom(serving_to_proto(job))
    return req


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


def serving_shape_job(path: Path, topology: Topology, state: ClusterState) -> Job:
    """`placement capacity --job` of a serving job file: the job Capacity counts (its ranks and the rules Place
    places it with, `serving_traffic_job`), as the Capacity RPC reads a serving shape."""
    return serving_traffic_job(topology, state, serving_job_from_dict(load_document(path), str(path)))


def serving_shape_message(path: Path) -> pb.Job:
    """`placement capacity --server --job` of a serving job file: its Job message."""
    return serving_to_proto(serving_job_from_dict(load_document(path), str(path)))


def is_serving_sweep_file(path: Path) -> bool:
    """True when `path` is a sweep file whose job is a serving job (a serving sweep); False otherwise, including a
    file the sweep reader will report on."""
    try:
        return is_serving_sweep(load_document(path), path.parent)
    except (PlacementError, OSError):
        return False


def _rank(row: dict[str, str]) -> tuple[int, float, float]:
    """Answered points first (within the TPOT bound before the others), by most tokens/s per GPU, then TPOT."""
    if not row.get("tpot_ms"):
        return (2, 0.0, 0.0)
    return (
        1 if row.get("within_tpot_bound") == "false" else 0,
        -float(row["tokens_per_s_per_gpu"]),
        float(row["tpot_ms"]),
    )


def whatif_serving_file(
    sweep_file: Path, out_dir: Path | None, workers: int | None, top: int, wide: bool = False
) -> None:
    """`placement whatif sweep` for a serving sweep: decode TP x EP x replicas x nodes, each point placed and
    priced (`placement.sim.whatif.run.run_serving_sweep`), ranked by tokens/s per GPU; the CSV beside. With `wide`
    also attention-DP, ranks, the limiting pool and first-fit's TPOT."""
    sw = load_serving_sweep(sweep_file)
    path = out_dir if out_dir is not None else Path(f"whatif-{sw.name}")
    run = run_serving_sweep(sw, path, workers=workers)
    t = Table(
        title=f"{escape(sw.name)}: {len(run.rows)} points, by tokens/s per GPU"
        + (f" (TPOT bound {sw.tpot_bound_ms:g} ms first)" if sw.tpot_bound_ms is not None else ""),
        title_justify="left",
    )
    many = len(sw.variants) > 1
    extra = ("attn dp", "ranks", "bound by", "first-fit TPOT ms")
    cols = (["variant"] if many else []) + [
        "tp", "ep", "attn dp", "replicas", "decode nodes", "ranks", "TTFT ms", "TPOT ms", "tok/s/GPU",
        "bound by", "chosen", "first-fit TPOT ms",
    ]  # fmt: skip
    keep = [c for c in cols if wide or c not in extra]
    for c in keep:
        t.add_column(c, justify="left" if c in ("variant", "bound by", "chosen") else "right")
    ranked = sorted(run.rows, key=_rank)
    for r in [r for r in ranked if r.get("tpot_ms")][:top]:
        cells = {
            "variant": escape(r["variant"]),
            "tp": r["decode_tp"],
            "ep": r["decode_ep"],
            "attn dp": r["decode_attention_dp"],
            "replicas": r["decode_replicas"],
            "decode nodes": r.get("decode_nodes", ""),
            "ranks": r["ranks"],
            "TTFT ms": f"{float(r['ttft_ms']):.3f}",
            "TPOT ms": f"{float(r['tpot_ms']):.3f}",
            "tok/s/GPU": f"{float(r['tokens_per_s_per_gpu']):.1f}",
            "bound by": r.get("bound_by", ""),
            "chosen": r.get("chosen", ""),
            "first-fit TPOT ms": (
                f"{float(r['first_fit_tpot_ms']):.3f}"
                + ("*" if "first-fit" in r.get("baselines_breaking", "").split() else "")
                if r.get("first_fit_tpot_ms")
                else "-"
            ),
        }
        t.add_row(*(cells[c] for c in keep))
    table_console(wide).print(t)
    if wide:
        out.print("* first-fit's mapping breaks a rule of the job (the spread): priced, not chosen")
    for r in ranked:
        if not r.get("tpot_ms"):
            shape = f"tp{r['decode_tp']}-ep{r['decode_ep']}-x{r['decode_replicas']}"
            where = f" [{r['variant']}]" if many else ""
            out.print(
                f"{r.get('status', '')}: {shape}{escape(where)}: {escape(r.get('error', ''))}", soft_wrap=True
            )
    out.print(f"wrote {escape(str(run.csv_path))}", soft_wrap=True, highlight=False)
