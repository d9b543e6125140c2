"""The solver benchmark's scenarios (`scenarios`): generated clusters, occupancy and jobs, fixed seeds, with
issue 8's 4,096-GPU rows in three forms (structured, explicit twin, p2p ring) and issue 21's rows with rank orders
that are not tp-first and deep pipelines; used by solver.py, limits.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.sim.scenarios import (
    A100_PCIE_PAIRS,
    dgx1_node,
    explicit_twin,
    fat_tree,
    megatron_job,
    nvl72,
    occupy,
    p2p_ring_job,
    rail_optimized,
)

Build = Callable[[], tuple[Topology, ClusterState, Job]]


@dataclass
class Scenario:
    name: str
    build: Build
    time_limit: float
    fragmented: bool
    explicit: bool = False
    """An explicit job: Scotch maps it too."""
    big: bool = False
    """Skipped by --quick."""


def ft(gpus: int, occ: float, mode: str, tp: int, pp: int, dp: int, seed: int = 1) -> Build:
    def build() -> tuple[Topology, ClusterState, Job]:
        t = fat_tree(gpus)
        s = occupy(t, occ, seed=seed, mode=mode) if occ else ClusterState()
        return t, s, megatron_job(f"tp{tp}-pp{pp}-dp{dp}", tp=tp, pp=pp, dp=dp)

    return build


FORMS: dict[str, Callable[[Job], Job]] = {
    "structured": lambda j: j,
    "explicit": explicit_twin,
    "p2p-ring": p2p_ring_job,
}
"""Issue 8's three forms of one job: structured, its explicit twin (same traffic), p2p ring edges only."""
ISSUE8_SHAPES = ((8, 4, 4), (4, 4, 8), (2, 4, 16), (8, 4, 32), (4, 4, 64), (2, 8, 64))
"""(tp, pp, dp): tp8, tp4 and tp2 shapes at 128 and at 1,024 ranks."""


def issue8(occ: float, tp: int, pp: int, dp: int, form: str) -> Build:
    """4,096 GPUs (8/node, 16 nodes/leaf, 8 leaves/spine, 4 spines; 450/50/25/12.5 GB/s), mixed-random
    occupancy (seed 1), a 13B-shaped Megatron job (h 5120, 40 layers) in the given form."""

    def build() -> tuple[Topology, ClusterState, Job]:
        t = fat_tree(4096)
        s = occupy(t, occ, seed=1, mode="mixed-random")
        job = megatron_job(f"tp{tp}-pp{pp}-dp{dp}", tp=tp, pp=pp, dp=dp, hidden=5120, layers=40)
        return t, s, FORMS[form](job)

    return build


def ordered(occ: float, tp: int, pp: int, dp: int, order: str) -> Build:
    """Issue 21's rows: as `issue8`, structured, with a rank order that is not tp-first or a deep pipeline."""

    def build() -> tuple[Topology, ClusterState, Job]:
        t = fat_tree(4096)
        s = occupy(t, occ, seed=1, mode="mixed-random")
        job = megatron_job(f"tp{tp}-pp{pp}-dp{dp}", tp=tp, pp=pp, dp=dp, hidden=5120, layers=40)
        if job.parallel is None:
            raise ValueError(f"{job.name}: a structured job has a parallel spec")
        return t, s, dataclasses.replace(job, parallel=dataclasses.replace(job.parallel, order=order))

    return build


def scenarios() -> list[Scenario]:
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
        Scenario(
            "rail-optimized 512, 30% partial, tp4 pp2 dp16", _rail(64, 0.3, "partial", 4, 2, 16), 2.0, True
        ),
        Scenario("DGX-1 cube mesh x2, 0%, tp4 dp2", _dgx1(2, 0.0, 4, 1, 2), 1.0, False),
        Scenario("DGX-1 cube mesh x2, 30% partial, tp2 dp4", _dgx1(2, 0.3, 2, 1, 4), 1.0, True),
        Scenario(
            "A100 PCIe pairs x2, 0%, tp2 dp4",
            _dgx1(2, 0.0, 2, 1, 4, matrix=A100_PCIE_PAIRS, kind="A100"),
            1.0,
            False,
        ),
    ]
    for occ in (0.3, 0.6):
        for tp, pp, dp in ISSUE8_SHAPES:
            ranks = tp * pp * dp
            for form in FORMS:
                name = f"fat-tree 4096, {round(100 * occ)}% mixed-random, tp{tp} pp{pp} dp{dp}, {form}"
                out.append(
                    Scenario(
                        name,
                        issue8(occ, tp, pp, dp, form),
                        2.0 if ranks <= 128 else 4.0,
                        True,
                        explicit=form != "structured",
                    )
                )
    for occ, (tp, pp, dp), order in (
        (0.45, (4, 8, 8), "dp-tp-pp-cp-ep"),
        (0.3, (8, 16, 4), "tp-dp-pp-cp-ep"),
        (0.6, (2, 8, 64), "tp-pp-dp-cp-ep"),
        (0.45, (4, 4, 64), "dp-tp-pp-cp-ep"),
        (0.3, (8, 8, 2), "pp-dp-tp-cp-ep"),
    ):
        ranks = tp * pp * dp
        out.append(
            Scenario(
                f"fat-tree 4096, {round(100 * occ)}% mixed-random, tp{tp} pp{pp} dp{dp}, order {order[:8]}",
                ordered(occ, tp, pp, dp, order),
                2.0 if ranks <= 256 else 4.0,
                True,
            )
        )
    out += [
        Scenario(
            "fat-tree 32768, 0%, tp8 pp8 dp256", ft(32768, 0.0, "whole", 8, 8, 256), 10.0, False, big=True
        ),
        Scenario(
            "fat-tree 32768, 30% whole, tp8 pp8 dp256",
            ft(32768, 0.3, "whole", 8, 8, 256),
            10.0,
            True,
            big=True,
        ),
        Scenario(
            "fat-tree 32768, 30% partial, tp8 pp4 dp256",
            ft(32768, 0.3, "partial", 8, 4, 256),
            10.0,
            True,
            big=True,
        ),
    ]
    return out


def _nvl72(racks: int, occ: float, mode: str, tp: int, pp: int, dp: int) -> Build:
    def build() -> tuple[Topology, ClusterState, Job]:
        t = nvl72(racks)
        return t, occupy(t, occ, seed=1, mode=mode), megatron_job("nvl", tp=tp, pp=pp, dp=dp, kind="GB200")

    return build


def _rail(nodes: int, occ: float, mode: str, tp: int, pp: int, dp: int) -> Build:
    def build() -> tuple[Topology, ClusterState, Job]:
        t = rail_optimized(nodes)
        return t, occupy(t, occ, seed=1, mode=mode), megatron_job("rail", tp=tp, pp=pp, dp=dp)

    return build


def _dgx1(
    nodes: int,
    occ: float,
    tp: int,
    pp: int,
    dp: int,
    matrix: tuple[str, ...] | None = None,
    kind: str = "V100",
) -> Build:
    def build() -> tuple[Topology, ClusterState, Job]:
        t = dgx1_node(nodes, matrix, kind) if matrix else dgx1_node(nodes, kind=kind)
        s = occupy(t, occ, seed=3, mode="partial") if occ else ClusterState()
        return t, s, megatron_job("small", tp=tp, pp=pp, dp=dp, kind=kind, hidden=4096, layers=32)

    return build
