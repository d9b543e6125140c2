"""Solver benchmark: first-fit, topology-greedy and cpsat on generated scenarios; prints a Markdown table.

Every scenario comes from `placement.scenarios` with a fixed seed. Run: `python bench/solver.py [--quick]
[--write bench/RESULTS.md]`. Wall time is the whole `place` call (baselines, solve, scoring, validation).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from placement.job import Job
from placement.scenarios import (
    A100_PCIE_PAIRS,
    dgx1_node,
    fat_tree,
    megatron_job,
    nvl72,
    occupy,
    rail_optimized,
)
from placement.solve import SolveOptions, place
from placement.solve.units import candidate_devices
from placement.state import ClusterState
from placement.topology import Topology


@dataclass
class Scenario:
    name: str
    build: Callable[[], tuple[Topology, ClusterState, Job]]
    time_limit: float
    fragmented: bool


def ft(gpus: int, occ: float, mode: str, tp: int, pp: int, dp: int, seed: int = 1) -> Callable[[], tuple[Topology, ClusterState, Job]]:
    def build() -> tuple[Topology, ClusterState, Job]:
        t = fat_tree(gpus)
        s = occupy(t, occ, seed=seed, mode=mode) if occ else ClusterState()
        return t, s, megatron_job(f"tp{tp}-pp{pp}-dp{dp}", tp=tp, pp=pp, dp=dp)
    return build


def scenarios(quick: bool) -> list[Scenario]:
    out = [
        Scenario("fat-tree 256, 0%, tp8 dp4", ft(256, 0.0, "whole", 8, 1, 4), 1.0, False),
        Scenario("fat-tree 256, 30% partial, tp4 pp2 dp4", ft(256, 0.3, "partial", 4, 2, 4), 1.0, True),
        Scenario("fat-tree 256, 60% whole, tp8 pp2 dp2", ft(256, 0.6, "whole", 8, 2, 2), 1.0, True),
        Scenario("fat-tree 1024, 30% whole, tp8 pp2 dp4", ft(1024, 0.3, "whole", 8, 2, 4), 1.0, True),
        Scenario("fat-tree 1024, 30% partial, tp2 pp4 dp8", ft(1024, 0.3, "partial", 2, 4, 8), 1.0, True),
        Scenario("fat-tree 1024, 60% mixed, tp1 dp64", ft(1024, 0.6, "mixed", 1, 1, 64), 1.0, True),
        Scenario("fat-tree 1024, 0%, tp8 pp4 dp16", ft(1024, 0.0, "whole", 8, 4, 16), 2.0, False),
        Scenario("fat-tree 4096, 60% whole, tp8 pp4 dp32", ft(4096, 0.6, "whole", 8, 4, 32), 1.0, True),
        Scenario("fat-tree 4096, 60% partial, tp4 pp4 dp64", ft(4096, 0.6, "partial", 4, 4, 64), 1.0, True),
        Scenario("fat-tree 4096, 60% mixed, tp2 pp8 dp64", ft(4096, 0.6, "mixed", 2, 8, 64), 1.0, True),
        Scenario("fat-tree 4096, 30% partial, tp8 pp8 dp32", ft(4096, 0.3, "partial", 8, 8, 32), 3.0, True),
        Scenario("NVL72 x8, 30% partial, tp8 pp4 dp8", _nvl72(8, 0.3, "partial", 8, 4, 8), 2.0, True),
        Scenario("rail-optimized 512, 30% partial, tp4 pp2 dp16", _rail(64, 0.3, "partial", 4, 2, 16), 2.0, True),
        Scenario("DGX-1 cube mesh x2, 0%, tp4 dp2", _dgx1(2, 0.0, 4, 1, 2), 1.0, False),
        Scenario("DGX-1 cube mesh x2, 30% partial, tp2 dp4", _dgx1(2, 0.3, 2, 1, 4), 1.0, True),
        Scenario("A100 PCIe pairs x2, 0%, tp2 dp4", _dgx1(2, 0.0, 2, 1, 4, matrix=A100_PCIE_PAIRS, kind="A100"), 1.0, False),
    ]
    if not quick:
        out += [
            Scenario("fat-tree 32768, 0%, tp8 pp8 dp256", ft(32768, 0.0, "whole", 8, 8, 256), 10.0, False),
            Scenario("fat-tree 32768, 30% whole, tp8 pp8 dp256", ft(32768, 0.3, "whole", 8, 8, 256), 10.0, True),
            Scenario("fat-tree 32768, 30% partial, tp8 pp4 dp256", ft(32768, 0.3, "partial", 8, 4, 256), 10.0, True),
        ]
    return out


def _nvl72(racks: int, occ: float, mode: str, tp: int, pp: int, dp: int) -> Callable[[], tuple[Topology, ClusterState, Job]]:
    def build() -> tuple[Topology, ClusterState, Job]:
        t = nvl72(racks)
        return t, occupy(t, occ, seed=1, mode=mode), megatron_job("nvl", tp=tp, pp=pp, dp=dp, kind="GB200")
    return build


def _rail(nodes: int, occ: float, mode: str, tp: int, pp: int, dp: int) -> Callable[[], tuple[Topology, ClusterState, Job]]:
    def build() -> tuple[Topology, ClusterState, Job]:
        t = rail_optimized(nodes)
        return t, occupy(t, occ, seed=1, mode=mode), megatron_job("rail", tp=tp, pp=pp, dp=dp)
    return build


def _dgx1(nodes: int, occ: float, tp: int, pp: int, dp: int, matrix: tuple[str, ...] | None = None,
          kind: str = "V100") -> Callable[[], tuple[Topology, ClusterState, Job]]:
    def build() -> tuple[Topology, ClusterState, Job]:
        t = dgx1_node(nodes, matrix, kind) if matrix else dgx1_node(nodes, kind=kind)
        s = occupy(t, occ, seed=3, mode="partial") if occ else ClusterState()
        return t, s, megatron_job("small", tp=tp, pp=pp, dp=dp, kind=kind, hidden=4096, layers=32)
    return build


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="skip the 32,768-GPU scenarios")
    ap.add_argument("--write", type=Path, help="also write the table to this Markdown file")
    ap.add_argument("--only", help="run scenarios whose name contains this text")
    args = ap.parse_args()
    rows = []
    header = "| scenario | ranks | free | first-fit s/step | topology-greedy s/step | cpsat s/step | cpsat/greedy | gap | status | wall s | limit s |"
    sep = "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"
    print(header)
    print(sep)
    ratios_frag = []
    for sc in scenarios(args.quick):
        if args.only and args.only not in sc.name:
            continue
        topo, state, job = sc.build()
        free = len(candidate_devices(topo, state, job))
        t0 = time.perf_counter()
        res = place(topo, state, job, SolveOptions(time_limit_s=sc.time_limit, seed=0, workers=2))
        wall = time.perf_counter() - t0
        ff = res.baselines.get("first-fit")
        tg = res.baselines.get("topology-greedy")
        ratio = res.seconds / tg if tg and res.seconds is not None else None
        if sc.fragmented and ratio:
            ratios_frag.append(ratio)
        row = (f"| {sc.name} | {job.ranks} | {free} | {fmt(ff)} | {fmt(tg)} | {fmt(res.seconds)} | {fmt(ratio, 3)} | "
               f"{'-' if res.gap is None else f'{100 * res.gap:.2f}%'} | {res.status.value} | {wall:.2f} | {sc.time_limit:g} |")
        rows.append(row)
        print(row, flush=True)
    summary = []
    if ratios_frag:
        gm = math.exp(sum(math.log(r) for r in ratios_frag) / len(ratios_frag))
        summary.append(f"Geometric mean of cpsat/topology-greedy over the {len(ratios_frag)} fragmented scenarios: "
                       f"{gm:.3f} ({100 * (1 - gm):.1f}% less communication time).")
    for line in summary:
        print("\n" + line)
    if args.write:
        text = [
            "# Solver benchmark",
            "",
            f"Command: `python bench/solver.py{' --quick' if args.quick else ''} --write {args.write}`  ",
            f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d')}. Solver: 2 CP-SAT workers, seed 0.",
            "",
            "Seconds per step are modeled communication seconds (placement.cost). `gap` is (cpsat - bound) / cpsat.",
            "",
            header,
            sep,
            *rows,
            "",
            *summary,
            "",
        ]
        args.write.write_text("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
