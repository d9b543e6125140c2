"""Repair benchmark: failed devices under a running job on the fragmented benchmark clusters; moves and step
seconds of the repair's answers against a full re-place. Prints a Markdown table.

Clusters: issue 8's 4,096-GPU fat tree with mixed-random occupancy (30% and 60%, seed 1). Running jobs: 13B-shaped
Megatron jobs of 64 ranks (tp8 pp2 dp4) and 1,024 ranks (tp8 pp4 dp32), placed by `place` (cpsat, seed 0) on the
cluster before the failure. Then 1, 4 or 16 of the job's devices fail (seeded); `spares` marks whole free nodes as
spares (1 + the failed hosts, the first free ones in cluster order) or none. Run:
`python bench/repair.py [--quick] [--only TEXT] [--time-limit 5] [--write bench/REPAIR_RESULTS.md]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from placement.decide.repair.run import RepairAnswer, RepairResult, repair
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.sim.scenarios import fat_tree, megatron_job, occupy
from placement.solve import SolveOptions, place

SHAPES = {64: (8, 2, 4), 1024: (8, 4, 32)}
TARGET_STEP = 1.05  # within 5% of the re-place's step seconds
TARGET_MOVES = 0.25  # with at most 1/4 of its moves


@dataclass
class Row:
    name: str
    ranks: int
    failed: int
    spares: int
    forced: int
    least: RepairAnswer
    close: RepairAnswer | None  # fewest moves within 5% of the re-place
    replace: RepairAnswer | None
    points: int
    wall: float
    model: str

    @property
    def met(self) -> bool | None:
        if self.replace is None or self.close is None:
            return None
        return self.close.moved_ranks <= TARGET_MOVES * self.replace.moved_ranks


_PLACED: dict[tuple[float, int], tuple[Topology, ClusterState, Job, list[int]]] = {}


def running_job(occ: float, ranks: int) -> tuple[Topology, ClusterState, Job, list[int]]:
    """The cluster and the job running on it (placed once per cluster and size)."""
    key = (occ, ranks)
    if key not in _PLACED:
        topo = fat_tree(4096)
        st = occupy(topo, occ, seed=1, mode="mixed-random")
        tp, pp, dp = SHAPES[ranks]
        job = megatron_job(f"run-{ranks}", tp=tp, pp=pp, dp=dp, hidden=5120, layers=40)
        res = place(topo, st, job, SolveOptions(time_limit_s=4.0 if ranks > 64 else 2.0, seed=0, workers=2))
        assert res.mapping is not None
        st = dataclasses.replace(st, occupied={**st.occupied, **{d: job.name for d in res.mapping}})
        _PLACED[key] = (topo, st, job, list(res.mapping))
    return _PLACED[key]


def run_row(
    occ: float, ranks: int, n_failed: int, with_spares: bool, limit: float, workers: int
) -> Row | None:
    """One row; None for a row with spares when no whole node is free to be one (it would repeat the row without)."""
    topo, st, job, cur = running_job(occ, ranks)
    rng = random.Random(1000 * ranks + n_failed)
    failed = set(rng.sample(cur, n_failed))
    state = dataclasses.replace(st, failed=frozenset(st.failed | failed))
    spares: list[str] = []
    if with_spares:
        failed_hosts = {topo.devices[d].host_index for d in failed}
        free_hosts = [
            h
            for h, devs in enumerate(topo.devices_in_domain[0])
            if all(d not in state.occupied and d not in state.failed for d in devs)
        ]
        spares = [topo.host_names[h] for h in free_hosts[: 1 + len(failed_hosts)]]
        if not spares:
            return None
    t0 = time.perf_counter()
    res: RepairResult = repair(
        topo,
        state,
        job,
        cur,
        spares=spares,
        options=SolveOptions(time_limit_s=limit, seed=0, workers=workers),
    )
    wall = time.perf_counter() - t0
    rep = res.replace
    close = None
    if rep is not None:
        ok = [a for a in res.answers if a.report.step_seconds <= TARGET_STEP * rep.report.step_seconds]
        close = min(ok, key=lambda a: (a.moved_ranks, a.report.step_seconds)) if ok else None
    name = f"4096 GPUs {round(100 * occ)}% mixed-random, tp{SHAPES[ranks][0]} pp{SHAPES[ranks][1]} dp{SHAPES[ranks][2]}"
    return Row(
        name,
        ranks,
        n_failed,
        len(spares),
        len(res.forced),
        res.answers[0],
        close,
        rep,
        len(res.answers),
        wall,
        str(res.stats.get("model", "")),
    )


def _cell(a: RepairAnswer | None) -> str:
    return "-" if a is None else f"{a.moved_ranks} / {a.report.step_seconds:.4f}"


def table(rows: Sequence[Row]) -> list[str]:
    out = [
        "| scenario | ranks | failed | spares | forced | least repair (moves / step s) | "
        "fewest moves within 5% (moves / step s) | re-place (moves / step s) | step vs re-place | "
        "moves vs re-place | target | answers | model | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---|---:|",
    ]
    for r in rows:
        ratio = (
            "-"
            if r.close is None or r.replace is None
            else f"{r.close.report.step_seconds / r.replace.report.step_seconds:.3f}"
        )
        mv = (
            "-"
            if r.close is None or r.replace is None or r.replace.moved_ranks == 0
            else f"{r.close.moved_ranks / r.replace.moved_ranks:.3f}"
        )
        met = "-" if r.met is None else ("yes" if r.met else "no")
        out.append(
            f"| {r.name} | {r.ranks} | {r.failed} | {r.spares} | {r.forced} | {_cell(r.least)} | {_cell(r.close)} | "
            f"{_cell(r.replace)} | {ratio} | {mv} | {met} | {r.points} | {r.model} | {r.wall:.2f} |"
        )
    return out


def summary(rows: Sequence[Row]) -> list[str]:
    with_sp = [r for r in rows if r.spares]
    met = sum(1 for r in with_sp if r.met)
    big = [r.wall for r in rows if r.ranks >= 1024]
    ratios = [
        r.close.moved_ranks / r.replace.moved_ranks
        for r in rows
        if r.close and r.replace and r.replace.moved_ranks
    ]
    gm = math.exp(sum(math.log(max(x, 1e-9)) for x in ratios) / len(ratios)) if ratios else float("nan")
    return [
        f"Target (within 5% of the re-place's step seconds with at most 1/4 of its moves) met on {met} of "
        f"{len(with_sp)} rows with spares; on {sum(1 for r in rows if r.met)} of {len(rows)} rows in all.",
        f"Moves of the fewest-moves answer within 5% over the re-place's moves, geometric mean: {gm:.3f}.",
        f"1,024-rank repairs: wall time max {max(big):.2f} s, mean {sum(big) / len(big):.2f} s (target <= 5 s)."
        if big
        else "No 1,024-rank rows.",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="64-rank rows only")
    ap.add_argument("--only", help="rows whose scenario name contains this text")
    ap.add_argument("--time-limit", type=float, default=5.0, help="repair time limit in seconds (default 5)")
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT workers (default 2)")
    ap.add_argument("--write", type=Path, help="also write the table to this Markdown file")
    args = ap.parse_args(argv)
    rows: list[Row] = []
    plan = [
        (occ, ranks, nf, sp)
        for occ in (0.3, 0.6)
        for ranks in (64, 1024)
        for nf in (1, 4, 16)
        for sp in (False, True)
        if not (args.quick and ranks > 64)
    ]
    for i, (occ, ranks, nf, sp) in enumerate(plan, 1):
        r = run_row(occ, ranks, nf, sp, args.time_limit, args.workers)
        if r is None:
            print(
                f"[{i}/{len(plan)}] {round(100 * occ)}% occupancy, {ranks} ranks, {nf} failed: no whole node is free "
                "to be a spare; the row with spares is left out",
                file=sys.stderr,
                flush=True,
            )
            continue
        if args.only and args.only not in r.name:
            continue
        rows.append(r)
        print(
            f"[{i}/{len(plan)}] {r.name}, {nf} failed, spares {r.spares}: least {_cell(r.least)}, "
            f"re-place {_cell(r.replace)}, {r.wall:.2f} s",
            file=sys.stderr,
            flush=True,
        )
    lines, summ = table(rows), summary(rows)
    print("\n".join(lines))
    print("\n" + "\n\n".join(summ))
    if args.write:
        flags = (
            (" --quick" if args.quick else "")
            + (f" --only '{args.only}'" if args.only else "")
            + (f" --time-limit {args.time_limit:g}" if args.time_limit != 5.0 else "")
            + (f" --workers {args.workers}" if args.workers != 2 else "")
        )
        text = [
            "# Repair benchmark",
            "",
            f"Command: `nice -n 10 python bench/repair.py{flags} --write {args.write}`  ",
            f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d')}. Solver: {args.workers} CP-SAT worker(s), seed 0, wall-clock limits. "
            "The machine is shared with other jobs: wall times are noisy, and answers cut by the time limit vary "
            "with the load.",
            "",
            "Each row: the running job (placed by `place` before the failure) loses `failed` of its devices "
            "(seeded). `forced`: its ranks on failed devices. Every answer is the evaluator's modeled step "
            "seconds (`CostReport.step_seconds`) of a mapping that passes `validate`; moves are ranks whose "
            "device changes. `least repair`: the first Pareto answer (fewest moves); `fewest moves within 5%`: "
            "the answer with the fewest moves whose step is within 5% of the re-place's; `re-place`: `place` on "
            "the new state (the job's own devices usable), the answer a scheduler would give. `target`: that "
            "answer moves at most 1/4 of the re-place's ranks. `model`: `whole` (one program over every unit, "
            "minimum moves proven) or `neighbourhoods` (large jobs). `wall s`: the whole `repair` call, re-place "
            "included.",
            "",
            *lines,
            "",
            *[x for line in summ for x in (line, "")],
        ]
        args.write.write_text("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
