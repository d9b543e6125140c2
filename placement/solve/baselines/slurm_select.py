"""What both Slurm baselines share: the request a job makes, node usability and weights, the node count it
holds to, and the retries of ``select/cons_tres`` around a topology plugin's node choice.

Read against SchedMD/slurm 22.05 ``src/plugins/select/cons_tres/job_test.c`` (``choose_nodes``,
``_cpus_to_use``, ``can_job_run_on_node``) and ``src/plugins/select/cons_common/dist_tasks.c``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.baselines.common import Prepared, prepare

__all__ = ["Allocation", "SlurmRequest", "SlurmStart", "choose_nodes", "slurm_request", "slurm_start"]


@dataclass(frozen=True)
class SlurmRequest:
    """The job as an ``sbatch``/``salloc`` request: ``--nodes=<nodes> --ntasks=<tasks> --gpus-per-task=<gpus>``.

    One task per slice, each with the slice's devices, so Slurm never splits a slice over nodes (one task per
    rank with ``--gpus-per-task=1`` when slices are single ranks). The node count is the one a user asks for
    when the job wants whole nodes: the fewest hosts of the job's kind that hold every slice on an empty
    cluster, ``ceil(tasks / floor(devices per host / gpus))``; ``--nodes=N`` is both Slurm's minimum and
    maximum, so Slurm allocates exactly N nodes or keeps the job pending.
    """

    nodes: int
    tasks: int
    gpus: int

    @property
    def options(self) -> tuple[str, ...]:
        """The request as command-line options."""
        return (f"--nodes={self.nodes}", f"--ntasks={self.tasks}", f"--gpus-per-task={self.gpus}")


def slurm_request(topology: Topology, job: Job, prep: Prepared) -> SlurmRequest | None:
    """The request of `SlurmRequest` for the slices still to place; None when no host holds one slice."""
    kind = job.device_kind
    per_node = max(
        (nt.devices // prep.size for nt in topology.host_types if kind is None or nt.kind == kind), default=0
    )
    if per_node == 0 or not prep.slices:
        return None
    tasks = len(prep.slices)
    return SlurmRequest(-(-tasks // per_node), tasks, prep.size)


@dataclass(frozen=True)
class SlurmStart:
    """Where both Slurm baselines begin: the prepared slices and the request, or an answer already (`done`:
    pins only, or None when Slurm would not start the job)."""

    prep: Prepared | None
    request: SlurmRequest | None = None
    done: bool = False
    answer: list[int] | None = None

    def free(self, host: int) -> int:
        """Free devices of `host` the job may use (Slurm's ``avail_gpus``)."""
        return len(self.prep.free.get(host, ())) if self.prep is not None else 0

    def tasks_on(self, host: int) -> int:
        """Tasks `host` can run: whole slices (``gres_select_filter_sock_core``), and one when the job asks for
        as many tasks as nodes (``_select_cores``: one task per node)."""
        if self.prep is None or self.request is None:
            return 0
        cap = self.prep.capacity(host)
        return min(cap, 1) if self.request.tasks == self.request.nodes else cap


def slurm_start(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> SlurmStart:
    prep = prepare(topology, state, job, traffic)
    if prep is None:
        return SlurmStart(None, done=True)
    if not prep.slices:
        return SlurmStart(prep, done=True, answer=prep.fill([]))
    req = slurm_request(topology, job, prep)
    if req is None:
        return SlurmStart(prep, done=True)
    return SlurmStart(prep, req)


@dataclass
class Allocation:
    """One pass of a topology plugin's node choice: what is still wanted and the nodes taken so far.

    `take` is Slurm's per-node step (``rem_nodes--``, ``max_nodes--``, ``rem_cpus -= avail``) with
    ``_cpus_to_use``: a node gives at most what leaves one task for each node still wanted, so the tasks
    per node add up to the request exactly. `clipped` records nodes whose count was cut that way (Slurm
    writes the cut count back into the node's ``avail_res``, which the retries of `choose_nodes` see).
    """

    nodes: int
    tasks: int
    cap: dict[int, int]
    max_nodes: int = 0
    min_nodes: int = 0
    rem_max: int = 0
    taken: dict[int, int] = field(default_factory=dict)
    clipped: dict[int, int] = field(default_factory=dict)
    ok: bool = False

    def __post_init__(self) -> None:
        self.max_nodes = self.min_nodes = self.nodes
        self.rem_max = self.tasks

    def take(self, host: int) -> None:
        avail = self.cap[host]
        limit = self.rem_max - max(self.min_nodes - 1, 0)
        if avail > limit:
            avail = max(limit, 1)
            self.clipped[host] = avail
        self.taken[host] = avail
        self.nodes -= 1
        self.min_nodes -= 1
        self.max_nodes -= 1
        self.tasks -= avail
        self.rem_max -= avail

    @property
    def done(self) -> bool:
        """Slurm's ``(rem_nodes <= 0) && (rem_cpus <= 0)``."""
        return self.nodes <= 0 and self.tasks <= 0

    @property
    def satisfied(self) -> bool:
        """The end-of-pass test: ``(min_rem_nodes <= 0) && (rem_cpus <= 0)``."""
        return self.min_nodes <= 0 and self.tasks <= 0


Evaluate = Callable[[Sequence[int], dict[int, int]], Allocation]
"""A topology plugin's pass: (usable hosts in node order, tasks per host) -> its allocation (`Allocation.ok`)."""


def choose_nodes(
    usable: Sequence[int], cap: dict[int, int], free: dict[int, int], nodes: int, evaluate: Evaluate
) -> Allocation | None:
    """``choose_nodes``: one pass on every usable node; when it fails, passes on ever fewer nodes, dropping
    the nodes with the fewest resources first ("to avoid a possible knapsack problem").

    Slurm ranks nodes by ``avail_res_cnt``, free CPUs plus free GPUs, and raises a threshold one by one,
    dropping (in node order) every node at or below it until no more than ``--nodes`` are left; the nodes
    with the most resources always stay. With CPUs allocated in proportion to GPUs (one per device, as in
    the golden tests) that is the free-device order. A pass that cuts a node's count (`Allocation.clipped`)
    writes the cut count back as the node's CPUs, so that node has fewer tasks in later passes and is
    dropped first.
    """
    cap = dict(cap)
    big = 1 << 20  # stands for the free CPUs of a node no pass has cut
    rank = {h: big + free[h] for h in usable}

    def run(hosts: Sequence[int]) -> Allocation:
        alloc = evaluate(hosts, cap)
        for h, n in alloc.clipped.items():
            cap[h] = n
            rank[h] = n + free[h]
        return alloc

    alloc = run(usable)
    if alloc.ok:
        return alloc
    left = list(usable)
    if len(left) <= nodes:  # nothing to drop: one more pass (Slurm's second, with non-local GRES allowed)
        alloc = run(left)
        return alloc if alloc.ok else None
    most = max(rank.values())
    count = 1
    while count < most:
        removed = False
        for h in list(left):
            if rank[h] <= count:
                left.remove(h)
                removed = True
                if len(left) <= nodes:
                    break
        if removed or count == 1:
            alloc = run(left)
            if alloc.ok:
                return alloc
            if len(left) <= nodes:
                return None
        count = max(count + 1, min(rank[h] for h in left))
    return None
