"""Shared paths, skip helpers and small hand-checkable clusters and jobs for the domain-core tests."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from placement.model import traffic as traffic_module
from placement.model.devices import HostSpec, NodeType
from placement.model.job import Job, ModelShape, ParallelSpec
from placement.model.links import Level, RailPolicy, Tier
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic

# Shared test helpers assert too: pytest rewrites their asserts as it does the test files' (detailed failures).
pytest.register_assert_rewrite(
    "tests.support_cli",
    "tests.support_export",
    "tests.support_native",
    "tests.support_nvidia_smi",
    "tests.support_server",
    "tests.support_serving",
    "tests.support_slurm",
    "tests.support_solve",
    "tests.support_whatif",
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TOPOLOGIES = DATA / "topologies"

# Tiers of the small trees below: node 400 GB/s 1 us, leaf 40 GB/s 4 us, spine 10 GB/s 10 us.
NODE_TIER = Tier(400.0, 1.0)
LEAF_TIER = Tier(40.0, 4.0)
SPINE_TIER = Tier(10.0, 10.0)


@pytest.fixture(autouse=True)
def _process_limits_reset() -> Iterator[None]:
    """The CLI run in process (typer's CliRunner) sets this process's input limits (`--limits`): each test starts
    and ends with the defaults, so no test depends on the order it runs in."""
    from placement.limits import set_process_limits

    set_process_limits(None)
    yield
    set_process_limits(None)


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """A server started in process (`server.main.main`) points the root logger at the stderr of that moment,
    which pytest closes after the test: each test ends with the root logger's handlers and level as it began,
    so no later test's output carries "Logging error" lines."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def job_traffic_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts `job_traffic`: wrapped in every loaded placement module that holds it (each imports the function
    itself), so the list gets the job's name at every call, wherever it comes from."""
    calls: list[str] = []
    original = traffic_module.job_traffic

    def counted(job: Job) -> Traffic:
        calls.append(job.name)
        return original(job)

    for name, module in list(sys.modules.items()):
        if name.startswith("placement.") and getattr(module, "job_traffic", None) is original:
            monkeypatch.setattr(module, "job_traffic", counted)
    return calls


def shared_file(relative: str) -> Path:
    """A file under /work/shared/data, or skip the test saying which file is missing."""
    path = DATA / relative
    if not path.is_file():
        pytest.skip(f"shared data file {path} is not available in this checkout")
    return path


def tree(
    hosts_per_leaf: int = 2,
    leaves: int = 2,
    gpus: int = 4,
    *,
    kind: str = "gpu",
    matrix: Sequence[str] | None = None,
    rails: Sequence[int | None] | None = None,
    rail_policy: RailPolicy | None = None,
    node_tier: Tier = NODE_TIER,
    leaf_tier: Tier = LEAF_TIER,
    spine_tier: Tier = SPINE_TIER,
) -> Topology:
    """node < leaf < spine; hosts ``h0``, ``h1``... in leaves ``l0``, ``l1``...; devices ``hK/gpuJ``."""
    nt = NodeType(
        "t",
        gpus,
        kind,
        tuple(tuple(r.split()) for r in matrix) if matrix else None,
        tuple(rails) if rails is not None else None,
    )
    hosts = [
        HostSpec(f"h{h}", {"leaf": f"l{h // hosts_per_leaf}"}, nt) for h in range(hosts_per_leaf * leaves)
    ]
    levels = [Level("node", node_tier), Level("leaf", leaf_tier), Level("spine", spine_tier)]
    return Topology.build("tree", levels, hosts, rail_policy=rail_policy)


def model(**kw: float) -> ModelShape:
    """A small model whose volumes are easy to compute by hand (defaults: h=1024, L=4, s=2048, B=2)."""
    base: dict[str, float] = {
        "parameters": 1e9,
        "hidden": 1024,
        "layers": 4,
        "seq_len": 2048,
        "micro_batch": 1,
        "micro_batches": 2,
        "bytes_per_element": 2,
    }
    base.update(kw)
    return ModelShape(**base)  # type: ignore[arg-type]


def spec(**kw: int | str) -> ParallelSpec:
    return ParallelSpec(**kw)  # type: ignore[arg-type]


@pytest.fixture
def small_tree() -> Topology:
    """4 hosts x 4 GPUs, 2 per leaf, one spine: 16 devices ``h0/gpu0`` .. ``h3/gpu3``."""
    return tree()


@pytest.fixture
def empty_state() -> ClusterState:
    return ClusterState()


@pytest.fixture
def example() -> tuple[Path, Path]:
    """The 4-node DGX H100 cluster and the TP8 x DP4 job of examples/ (the CLI tests of evaluate and errors)."""
    cluster, job = EXAMPLES / "dgx-h100-4node.yaml", EXAMPLES / "tp8-dp4.yaml"
    if not (cluster.is_file() and job.is_file()):
        pytest.skip("examples/dgx-h100-4node.yaml or examples/tp8-dp4.yaml is not in this checkout")
    return cluster, job
