"""The step model against published measurements (shared/data/published_tables.md, sections 2c, 2d, 2e, and more).

Prints the comparison table of docs/model.md: `python bench/model_validation.py [--data ../shared/data] [--timing]`
(``--timing``: also the seconds of one `evaluate` at 65,536 ranks). Every row is computed in two readings of its
cluster: as the cluster states its NICs (``nics``, ``nic_gbps``), and as a file that leaves them out (the model's
default: one NIC per device at the level-1 tier). ``--sensitivity`` moves each fitted constant by +-50% and prints
how the rows move and how the rankings of example placements move (Kendall tau).
One set of link constants (CONSTANTS below) serves every row; nothing is tuned per row. Rows 9a/9b are the
ratios issue 9 states for held-out measurements (GPT and BERT on 4 nodes of 8 V100 with one EDR NIC each); the
model shapes behind them are public facts or stated choices, and the held-out tables themselves are not used.
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from placement.cost import step as step_model
from placement.cost.collectives import fabric_for
from placement.cost.evaluate import evaluate
from placement.cost.serving import ep_exchange, model_serving
from placement.cost.step import dp_exposed, straggler_seconds
from placement.io.importers.nvidia_smi import read_nvidia_smi
from placement.io.native.cluster import load_cluster
from placement.io.native.job import load_job
from placement.io.native.state import load_state
from placement.model.devices import HostSpec, NodeType
from placement.model.job import CollectiveKind, Group, Job, ModelShape, ParallelSpec
from placement.model.links import Level, Tier
from placement.model.serving import ServingJob, ServingLoad, ServingModel, ServingPool
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.sim.scenarios import fat_tree, megatron_job, occupy
from placement.solve.baselines import BASELINES
from placement.solve.run import place
from placement.solve.types import SolveOptions

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
DGX1_FILE = "topologies/nvidia_smi_topo/dgx1_v100_8gpu_4nic__pytorch_ddp_readme.txt"
DGX1_1NIC_FILE = "topologies/nvidia_smi_topo/dgx1like_v100_8gpu_1nic__oneflow_dlperf.txt"
A100_PAIRS_FILE = "topologies/nvidia_smi_topo/a100_pcie_8gpu_nvlink_bridge_pairs__nccl-tests_issue178.txt"
H100_FILE = "topologies/nvidia_smi_topo/hgx_h100_8gpu_8nic_rail_pix__sglang_issue30401.txt"

# The one set of link constants (GB/s per direction, latency µs), each a property of a link technology:
CONSTANTS: dict[str, Tier] = {
    "nvlink": Tier(
        20.0, 1.0
    ),  # per NVLink (V100 NVLink2 and A100 NVLink3): NCCL src/graph/topo.h SM70/SM80_NVLINK_BW
    "pcie4": Tier(24.0, 3.5),  # PCIe Gen4 x16 path inside a socket (PIX..NODE): ~24 of 31.5 GB/s raw
    "nvlink4": Tier(20.6, 1.0),  # per H100 NVLink: NCCL src/graph/topo.h SM90_NVLINK_BW
    "nvlink5": Tier(40.1, 1.0),  # per GB200 NVLink: NCCL src/graph/topo.h SM100_NVLINK_BW
    "ib400": Tier(
        48.0, 5.0
    ),  # one 400 Gb/s NIC (NDR / CX-7): NCCL's 0.96 of line rate, as NET_BW's 12.0 for 100G
    "sys": Tier(10.0, 4.0),  # across the socket interconnect (placement's default SYS tier)
    "xgmi": Tier(64.0, 1.0),  # AMD MI300X XGMI, per peer link (stas00/ml-engineering peer-to-peer table)
    "ib100": Tier(
        12.0, 5.0
    ),  # one 100 Gb/s InfiniBand NIC (EDR): NCCL src/graph/topo.h NET_BW 12.0 ("100 Gbit")
}


@dataclass(frozen=True)
class Row:
    """One comparison: what was measured, its value, the model's value and, when computed, the model's value on
    the same cluster with its NICs left unstated (`unstated`)."""

    case: str
    setup: str
    metric: str
    measured: float
    modeled: float
    unstated: float | None = None

    @property
    def ratio(self) -> float:
        return self.modeled / self.measured

    @property
    def unstated_ratio(self) -> float | None:
        return None if self.unstated is None else self.unstated / self.measured


# Whether the cluster builders below state the hosts' NICs (`nics`, `nic_gbps`); `all_rows(..., nics_stated=False)`
# builds every cluster as a file that leaves them out would read (one NIC per device at the level-1 tier).
_NICS_STATED = [True]


def _nics(nics: int | None, gbps: float | None) -> dict[str, int | float | None]:
    """The NodeType NIC fields as the current reading states them (`_NICS_STATED`)."""
    return {"nics": nics, "nic_gbps": gbps} if _NICS_STATED[0] else {"nics": None, "nic_gbps": None}


def _intra_tiers() -> dict[str, Tier]:
    c = CONSTANTS
    return {
        "NV": c["nvlink"],
        "PIX": c["pcie4"],
        "PXB": c["pcie4"],
        "PHB": c["pcie4"],
        "NODE": c["pcie4"],
        "SYS": c["sys"],
    }


def _one_host(name: str, nt: NodeType, node_tier: Tier) -> Topology:
    return Topology.build(
        name,
        [Level("node", node_tier), Level("leaf", CONSTANTS["ib100"])],
        [HostSpec("h0", {}, nt)],
        intra_node_tiers=_intra_tiers(),
    )


def all_reduce_seconds(topology: Topology, devices: Sequence[int], size: float) -> float:
    """Modeled seconds of one all-reduce of `size` bytes over `devices` (an explicit one-group job)."""
    n = len(devices)
    job = Job("ar", n, groups=(Group("ar", CollectiveKind.ALL_REDUCE, tuple(range(n)), size, 1.0),))
    return evaluate(topology, ClusterState(), job, list(devices)).step_seconds


def bus_bandwidth(topology: Topology, devices: Sequence[int], size: float) -> float:
    """nccl-tests bus bandwidth GB/s: ``size / time * 2(n-1)/n`` (NCCL's PERFORMANCE.md)."""
    n = len(devices)
    return size / all_reduce_seconds(topology, devices, size) * 2 * (n - 1) / n / 1e9


def a100_pairs(data: Path) -> Topology:
    smi = read_nvidia_smi(data / A100_PAIRS_FILE)
    nt = NodeType("a100-pcie", 8, "A100", tuple(tuple(r) for r in smi.matrix))
    return _one_host("a100-pcie-pairs", nt, CONSTANTS["pcie4"])


def hgx_h100(data: Path) -> Topology:
    """One HGX H100 (NV18 to the NVSwitches, `H100_FILE`): NVLink SHARP, so NCCL runs NVLS for all-reduce."""
    smi = read_nvidia_smi(data / H100_FILE)
    nt = NodeType("hgx-h100", 8, "H100", tuple(tuple(r) for r in smi.matrix), **_nics(len(smi.nics), 48.0))  # type: ignore[arg-type]
    tiers = {**_intra_tiers(), "NV": CONSTANTS["nvlink4"]}
    return Topology.build(
        "hgx-h100",
        [Level("node", Tier(18 * CONSTANTS["nvlink4"].bandwidth_gbps, 1.0)), Level("leaf", Tier(48.0, 5.0))],
        [HostSpec("h0", {}, nt)],
        intra_node_tiers=tiers,
    )


def gb200_racks(racks: int) -> Topology:
    """GB200 NVL72 racks: 18 trays x 4 GPUs, one NVLink domain per rack (18 NVLinks of NCCL's 40.1 GB/s per GPU,
    NVLink SHARP), 4 x 400G NICs per tray, the racks on one non-blocking leaf."""
    nv, ib = CONSTANTS["nvlink5"], CONSTANTS["ib400"]
    tray = NodeType("gb200-tray", 4, "GB200", **_nics(4, ib.bandwidth_gbps))  # type: ignore[arg-type]
    node = Tier(18 * nv.bandwidth_gbps, nv.latency_us)
    hosts = [
        HostSpec(f"r{r}t{t}", {"rack": f"r{r}", "leaf": "ib"}, tray) for r in range(racks) for t in range(18)
    ]
    return Topology.build(
        f"gb200-x{racks}", [Level("node", node), Level("rack", node, nvlink=True), Level("leaf", ib)], hosts
    )


# CoreWeave's published nccl-tests all_reduce_perf on GB200 NVL72 (NCCL 2.26.2; github.com/coreweave/nccl-tests
# README, "Results", @ cb86553): (racks, largest size, out-of-place bus bandwidth GB/s at it).
GB200_MEASURED = ((1, 8 * 2**30, 834.57), (2, 16 * 2**30, 810.41), (20, 16 * 2**30, 405.74))


def rows_gb200() -> list[Row]:
    """NVLS across the 18 trays of a rack (NCCL sees the rack as one node), and NVLSTree between racks (NVLS
    inside each, the racks' NICs together between them)."""
    out = []
    for racks, size, busbw in GB200_MEASURED:
        what = "NVLS across 18 trays" if racks == 1 else "NVLSTree between the racks"
        n = 72 * racks
        out.append(
            Row(
                "gb200",
                f"GB200 NVL72, {racks} rack{'s' if racks > 1 else ''} ({n} GPUs) all-reduce {size >> 30} GiB ({what})",
                "busbw GB/s",
                busbw,
                collective_bus_bandwidth(gb200_racks(racks), CollectiveKind.ALL_REDUCE, n, float(size)),
            )
        )
    return out


def collective_bus_bandwidth(topology: Topology, kind: CollectiveKind, n: int, size: float) -> float:
    """nccl-tests bus bandwidth GB/s of `kind` over the first `n` devices (all_gather_perf's size is the gathered
    buffer, as `Group.bytes`: ``busbw = size / time * (n-1)/n``)."""
    job = Job("c", n, groups=(Group("c", kind, tuple(range(n)), size, 1.0),))
    secs = evaluate(topology, ClusterState(), job, list(range(n))).step_seconds
    factor = 2 * (n - 1) / n if kind is CollectiveKind.ALL_REDUCE else (n - 1) / n
    return size / secs * factor / 1e9


def rows_h100(data: Path) -> list[Row]:
    """NVIDIA's nccl-tests figures for one HGX H100 (S. Jeaugey, NCCL team, github.com/NVIDIA/nccl-tests/issues/212:
    all-reduce with NVLS peaks at ~480 GB/s bus bandwidth; other collectives ~370; A. Laddy, issues/290: 476)."""
    t = hgx_h100(data)
    return [
        Row(
            "h100",
            "HGX H100, 8 GPUs all-reduce 8 GiB (NVLS)",
            "busbw GB/s",
            480.0,
            collective_bus_bandwidth(t, CollectiveKind.ALL_REDUCE, 8, 8 * GIB),
        ),
        Row(
            "h100",
            "HGX H100, 8 GPUs all-gather 8 GiB (ring)",
            "busbw GB/s",
            370.0,
            collective_bus_bandwidth(t, CollectiveKind.ALL_GATHER, 8, 8 * GIB),
        ),
    ]


def mi300x() -> Topology:
    x = CONSTANTS["xgmi"]
    nt = NodeType("mi300x", 8, "MI300X", mesh_link_gbps=x.bandwidth_gbps)
    return _one_host("mi300x", nt, Tier(7 * x.bandwidth_gbps, x.latency_us))


def dgx1_cluster(
    data: Path, nodes: int = 8, *, file: str = DGX1_FILE, nic_gbps: float | None = None
) -> Topology:
    """`nodes` DGX-1 V100 hosts of the `nvidia-smi topo -m` `file` (its NICs, EDR unless `nic_gbps`) on one switch."""
    smi = read_nvidia_smi(data / file)
    ib = CONSTANTS["ib100"]
    nt = NodeType(
        "dgx1",
        8,
        "V100",
        tuple(tuple(r) for r in smi.matrix),
        **_nics(len(smi.nics), nic_gbps or ib.bandwidth_gbps),  # type: ignore[arg-type]
    )
    hosts = [HostSpec(f"dgx{h}", {"leaf": "ib"}, nt) for h in range(nodes)]
    return Topology.build(
        "dgx1-x8",
        [Level("node", CONSTANTS["nvlink"]), Level("leaf", ib)],
        hosts,
        intra_node_tiers=_intra_tiers(),
    )


# ---- the rows ---------------------------------------------------------------------------------------------------

GIB = float(1 << 30)
# PyTorch DDP README (2e): p50 sec/iter with DDP on 1, 2, 4, 8, 16 GPUs; gradients are fp32.
DDP = {
    "resnet50": (25.557e6, {1: 0.100, 2: 0.103, 4: 0.103, 8: 0.104, 16: 0.104}),
    "resnet101": (44.549e6, {1: 0.171, 2: 0.176, 4: 0.176, 8: 0.179, 16: 0.179}),
}


def rows_2c(data: Path) -> list[Row]:
    t = a100_pairs(data)
    return [
        Row(
            "2c",
            "A100 PCIe, 2 ranks on an NVLink pair (GPU0-1)",
            "busbw GB/s",
            208.0,
            bus_bandwidth(t, [0, 1], GIB),
        ),
        Row(
            "2c", "A100 PCIe, 3 ranks: the pair + GPU2", "busbw GB/s", 20.0, bus_bandwidth(t, [0, 1, 2], GIB)
        ),
    ]


def rows_2d() -> list[Row]:
    t = mi300x()
    two, eight = bus_bandwidth(t, [0, 1], 4 * GIB), bus_bandwidth(t, list(range(8)), 4 * GIB)
    return [
        Row("2d", "MI300X, 2 GPUs, 4 GiB", "busbw GB/s", 47.671, two),
        Row("2d", "MI300X, 8 GPUs, 4 GiB", "busbw GB/s", 312.912, eight),
        Row("2d", "MI300X, 8 vs 2 GPUs", "busbw ratio", 312.912 / 47.671, eight / two),
    ]


def rows_2e(data: Path) -> list[Row]:
    """DDP overhead: the modeled fp32 all-reduce, exposed behind the backward as the step model does
    (`placement.cost.step.dp_exposed`: 25 MiB buckets); the backward is 2/3 of the measured no-DDP 1-GPU step
    (0.097 s and 0.162 s), as the model has no convolution FLOPs."""
    t = dgx1_cluster(data)
    out = []
    no_ddp = {"resnet50": 0.097, "resnet101": 0.162}
    for model, (params, p50) in DDP.items():
        for n in (2, 4, 8, 16):
            reduce = all_reduce_seconds(t, list(range(n)), 4 * params)
            modeled = dp_exposed(reduce, 2 / 3 * no_ddp[model], 4 * params) + straggler_seconds(
                no_ddp[model], n
            )
            where = f"{n} GPUs" + (" (2 machines)" if n > 8 else "")
            out.append(
                Row(
                    "2e",
                    f"DDP {model}, {where}",
                    "overhead ms vs 1 GPU",
                    (p50[n] - p50[1]) * 1e3,
                    modeled * 1e3,
                )
            )
    return out


# Issue 9's held-out cluster: 4 nodes of 8 V100-SXM2 (DGX-1 cube mesh) with one EDR NIC each (the DLPerf topology).
# GPT as the model author used it: hidden 1536, 16 layers, 16 heads, GPT-2 vocabulary (50,257) and positions,
# sequence 2048, micro-batch 8, one micro-batch. BERT-large (Devlin et al. 2019): 24 layers, hidden 1024,
# 16 heads, 336 M parameters; phase-1 sequence 128, 32 sequences per GPU (V100 16 GB), fp32 gradients (AMP keeps
# fp32 master gradients; PyTorch DDP reduces them while the backward runs).
GPT = {"hidden": 1536, "layers": 16, "heads": 16, "seq_len": 2048, "micro_batch": 8, "vocab": 50257}
BERT_LARGE = {
    "parameters": 336e6,
    "hidden": 1024,
    "layers": 24,
    "heads": 16,
    "seq_len": 128,
    "micro_batch": 32,
}
CLIFF_MEASURED = 7.5  # issue 9: TP8 in one node -> TP16 across the NIC, step time
BERT_MEASURED = 144.0  # issue 9: BERT 1 node -> 2 nodes, +% overhead


def gpt_step(
    topology: Topology,
    tp: int,
    dp: int = 1,
    pp: int = 1,
    grad_bytes: int | None = None,
    *,
    batch_scale: int = 1,
    recompute: bool = False,
) -> float:
    """Modeled step seconds of the GPT shape above under tp x dp x pp on the first ranks of `topology`
    (`grad_bytes` per gradient element; default the 16-bit parameters' 2), at `batch_scale` times its
    micro-batch, with full recomputation if `recompute`."""
    g = GPT
    h, layers = g["hidden"], g["layers"]
    params = 12.0 * h * h * layers + (g["vocab"] + g["seq_len"]) * h
    model = ModelShape(
        parameters=params,
        hidden=h,
        layers=layers,
        seq_len=g["seq_len"],
        micro_batch=g["micro_batch"] * batch_scale,
        heads=g["heads"],
        grad_bytes_per_element=grad_bytes,
        recompute=recompute,
    )
    par = ParallelSpec(tp=tp, dp=dp, pp=pp)
    job = Job("gpt", par.world_size, "V100", par, model)
    return evaluate(topology, ClusterState(), job, list(range(par.world_size))).step_seconds


def bert_step(topology: Topology, dp: int) -> float:
    """Modeled step seconds of BERT-large pretraining (phase 1) data parallel over `dp` GPUs."""
    b = BERT_LARGE
    model = ModelShape(
        parameters=b["parameters"],
        hidden=int(b["hidden"]),
        layers=int(b["layers"]),
        seq_len=int(b["seq_len"]),
        micro_batch=int(b["micro_batch"]),
        heads=int(b["heads"]),
        grad_bytes_per_element=4,
    )
    job = Job("bert", dp, "V100", ParallelSpec(dp=dp), model)
    return evaluate(topology, ClusterState(), job, list(range(dp))).step_seconds


# Issue 25's held-out DP rows on the same cluster. BERT-base (Devlin et al. 2019): 110 M parameters, 12 layers,
# hidden 768, 12 heads, sequence 128, fp32 gradients, PyTorch DDP; per-GPU batch 64 and 160.
BERT_BASE = {"parameters": 110e6, "hidden": 768, "layers": 12, "heads": 12, "seq_len": 128}
BERT_BASE_MEASURED = {64: 67.0, 160: 37.0}  # ms per step over one GPU at 32 GPUs (issue 25)
GPT_DP_MEASURED = 22.0  # issue 25: per-GPU throughput falls 22% from 1 to 32 GPUs, GPT DP only


def bert_base_step(topology: Topology, dp: int, batch: int, grad_bytes: int = 4) -> float:
    """Modeled step seconds of BERT-base data parallel over `dp` GPUs at per-GPU `batch` (default DP overlap),
    `grad_bytes` per gradient element (4: fp32 gradients; 2: an fp16 reduce, apex's
    ``allreduce_post_accumulation_fp16``)."""
    b = BERT_BASE
    model = ModelShape(
        parameters=b["parameters"],
        hidden=int(b["hidden"]),
        layers=int(b["layers"]),
        seq_len=int(b["seq_len"]),
        micro_batch=batch,
        heads=int(b["heads"]),
        grad_bytes_per_element=grad_bytes,
    )
    job = Job("bert-base", dp, "V100", ParallelSpec(dp=dp), model)
    return evaluate(topology, ClusterState(), job, list(range(dp))).step_seconds


def gpt_dp_fall(topology: Topology, dp: int = 32) -> float:
    """% per-GPU throughput lost by the GPT shape above, data parallel over `dp` GPUs against one; fp32
    gradients (mixed precision keeps fp32 main gradients and reduces them: PyTorch AMP, Megatron-LM's
    ``accumulate_allreduce_grads_in_fp32``)."""
    return (1 - gpt_step(topology, 1, 1, grad_bytes=4) / gpt_step(topology, 1, dp, grad_bytes=4)) * 100


def rows_25(data: Path) -> list[Row]:
    t = dgx1_cluster(data, 4, file=DGX1_1NIC_FILE)
    out = [
        Row(
            "25",
            f"BERT-base DDP, 32 GPUs vs 1, batch {b} (1 EDR NIC/node)",
            "overhead ms",
            ms,
            (bert_base_step(t, 32, b) - bert_base_step(t, 1, b)) * 1e3,
        )
        for b, ms in BERT_BASE_MEASURED.items()
    ]
    out.append(
        Row(
            "25",
            "GPT h1536 L16 DP only, 32 GPUs vs 1 (1 EDR NIC/node)",
            "per-GPU loss %",
            GPT_DP_MEASURED,
            gpt_dp_fall(t),
        )
    )
    return out


def cliff(topology: Topology) -> float:
    """Step of TP16 across two hosts over TP8 inside one."""
    return gpt_step(topology, 16) / gpt_step(topology, 8)


def bert_overhead(topology: Topology) -> float:
    """+% step time of BERT-large data parallel on 16 GPUs (2 hosts) against 8 (1 host)."""
    return (bert_step(topology, 16) / bert_step(topology, 8) - 1) * 100


def rows_9(data: Path) -> list[Row]:
    t = dgx1_cluster(data, 4, file=DGX1_1NIC_FILE)
    return [
        Row(
            "9a",
            "GPT h1536 L16, TP16 over 2 nodes vs TP8 in 1 (1 EDR NIC/node)",
            "step ratio",
            CLIFF_MEASURED,
            cliff(t),
        ),
        Row(
            "9b",
            "BERT-large DP, 2 nodes vs 1 (1 EDR NIC/node)",
            "step overhead %",
            BERT_MEASURED,
            bert_overhead(t),
        ),
    ]


def nic_for(data: Path, metric: Callable[[Topology], float], target: float) -> float:
    """NIC GB/s at which `metric` of the 1-NIC cluster reaches `target` (bisection; a diagnostic, not a constant)."""
    lo, hi = 0.05, CONSTANTS["ib100"].bandwidth_gbps
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        if metric(dgx1_cluster(data, 4, file=DGX1_1NIC_FILE, nic_gbps=mid)) > target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


# ---- serving: DeepEP's kernels and a published decode (placement.cost.serving) ----------------------------------
# deepseek-ai/DeepEP docs/legacy.md @ dd758ca ("Performance"): H800 (~160 GB/s NVLink) with one CX7 InfiniBand
# 400 Gb/s NIC per GPU (~50 GB/s). Normal kernels: 4096 tokens per batch, hidden 7168, top-8, FP8 dispatch, BF16
# combine: (EP, dispatch GB/s, combine GB/s, bottleneck). Low-latency kernels: 128 tokens per batch, the same
# model: (EP, dispatch µs, combine µs).
DEEPEP_NORMAL = (
    (8, 153.0, 158.0, "NVLink"),
    (16, 43.0, 43.0, "RDMA"),
    (32, 58.0, 57.0, "RDMA"),
    (64, 51.0, 50.0, "RDMA"),
)
DEEPEP_LOW_LATENCY = (
    (8, 77.0, 114.0),
    (16, 118.0, 195.0),
    (32, 155.0, 273.0),
    (64, 173.0, 314.0),
    (128, 192.0, 369.0),
    (256, 194.0, 360.0),
)
# deepseek-ai/open-infra-index 202502OpenSourceWeek/day_6_one_more_thing_deepseekV3R1_inference_system_overview.md
# @ 56d8685: decode "Routed Expert EP144, MLA/Shared Expert DP144", 18 nodes of 8 H800; over 24 hours "the average
# output speed was 20-22 tokens per second, and the average kvcache length per output token was 4,989 tokens";
# "each H800 node delivers ... ~14.8k tokens/s output during decoding".
DEEPSEEK_DECODE_TPS_PER_USER = 21.0
DEEPSEEK_DECODE_TOKENS_PER_NODE = 14_800.0
DEEPSEEK_DECODE_CONTEXT = 4989
DEEPSEEK_EP = 144


def h800_nodes(nodes: int) -> Topology:
    """HGX H800 nodes: 8 NVLink 4 links per GPU (the H100's 18 cut to 8: 8 x NCCL's 20.6 GB/s) and one 400G NIC
    per GPU, the nodes on one non-blocking fabric."""
    nv, ib = CONSTANTS["nvlink4"], CONSTANTS["ib400"]
    nt = NodeType("hgx-h800", 8, "H800", **_nics(8, ib.bandwidth_gbps))  # type: ignore[arg-type]
    hosts = [HostSpec(f"n{i}", {"leaf": "ib"}, nt) for i in range(nodes)]
    return Topology.build(
        f"h800-x{nodes}",
        [Level("node", Tier(8 * nv.bandwidth_gbps, nv.latency_us)), Level("leaf", ib)],
        hosts,
    )


def deepseek_v3(attention_dp: int, batch: int, context: int) -> ServingJob:
    """DeepSeek-V3 (671B; 58 of 61 layers route to 8 of 256 experts of 3 x 7168 x 2048; MLA latent 512 + 64), FP8
    weights, BF16 KV cache, decoded by one replica of EP = attention-DP = `attention_dp`."""
    model = ServingModel(
        671e9,
        7168,
        61,
        128,
        1,
        576,
        attention="mla",
        experts=256,
        top_k=8,
        shared_experts=1,
        expert_parameters=58 * 256 * 3 * 7168 * 2048,
        moe_layers=58,
        weight_dtype="fp8",
        qk_head_dim=192,
    )
    pool = ServingPool("aggregated", ep=attention_dp, attention_dp=attention_dp)
    return ServingJob("deepseek-v3", model, (pool,), ServingLoad(batch, context, 1), "H800")


def _ep_seconds(ep: int, tokens: int, token_bytes: float, low_latency: bool) -> tuple[float, float]:
    """(seconds, bytes each rank sends beyond its own NVLink domain or, inside one node, to its peers) of one
    DeepEP exchange of `tokens` per rank to 8 experts each over EP `ep` ranks on H800 nodes."""
    topo = h800_nodes(max(1, ep // 8))
    size = tokens * 8 * token_bytes
    secs, _, _, _ = ep_exchange(
        fabric_for(topo, ClusterState()), [list(range(ep))], size, low_latency=low_latency
    )
    g = min(ep, 8)
    remote = (ep - 1) / ep * size if ep <= 8 else (ep - g) / ep * size
    return secs, remote


def rows_serving() -> list[Row]:
    """DeepEP's normal kernels (bottleneck GB/s), its low-latency kernels (µs; `DEEPEP_LL_LATENCY_US` is the
    intercept of these same rows, so they check the bytes term), and DeepSeek's production decode TPOT."""
    fp8 = 7168 + 7168 / 128 * 4
    bf16 = 7168 * 2.0
    out: list[Row] = []
    for ep, d_meas, c_meas, where in DEEPEP_NORMAL:
        for what, token_bytes, meas in (("dispatch", fp8, d_meas), ("combine", bf16, c_meas)):
            secs, remote = _ep_seconds(ep, 4096, token_bytes, False)
            scope = "1 node" if ep <= 8 else f"{ep // 8} nodes"
            out.append(
                Row(
                    "deepep",
                    f"DeepEP normal {what}, H800 EP {ep} ({scope}), 4096 tokens",
                    f"{where} GB/s",
                    meas,
                    remote / secs / 1e9,
                )
            )
    for ep, d_meas, c_meas in DEEPEP_LOW_LATENCY:
        for what, token_bytes, meas in (("dispatch", fp8, d_meas), ("combine", bf16, c_meas)):
            secs, _ = _ep_seconds(ep, 128, token_bytes, True)
            out.append(
                Row(
                    "deepep-ll",
                    f"DeepEP low-latency {what}, H800 EP {ep}, 128 tokens",
                    "latency µs",
                    meas,
                    secs * 1e6,
                )
            )
    # the batch per GPU behind the published figures, by Little's law: tokens/s per GPU x seconds per token
    tpot = 1.0 / DEEPSEEK_DECODE_TPS_PER_USER
    per_gpu = round(DEEPSEEK_DECODE_TOKENS_PER_NODE / 8 * tpot)
    job = deepseek_v3(DEEPSEEK_EP, per_gpu * DEEPSEEK_EP, DEEPSEEK_DECODE_CONTEXT)
    topo = h800_nodes(DEEPSEEK_EP // 8)
    rep = model_serving(topo, ClusterState(), job, list(range(DEEPSEEK_EP)))
    out.append(
        Row(
            "serving",
            f"DeepSeek-V3 decode, EP/DP {DEEPSEEK_EP} on 18 H800 nodes, {per_gpu} requests per GPU, KV {DEEPSEEK_DECODE_CONTEXT}",
            "TPOT ms",
            tpot * 1e3,
            rep.tpot_seconds * 1e3,
        )
    )
    return out


def all_rows(data: Path, *, nics_stated: bool = True, both: bool = False) -> list[Row]:
    """Every row, its clusters stating their NICs or not (`nics_stated`); `both`: each row with the other
    reading's value in `Row.unstated`."""
    if both:
        stated = all_rows(data)
        unstated = all_rows(data, nics_stated=False)
        return [replace(a, unstated=b.modeled) for a, b in zip(stated, unstated, strict=True)]
    saved = _NICS_STATED[0]
    _NICS_STATED[0] = nics_stated
    try:
        return _rows(data)
    finally:
        _NICS_STATED[0] = saved


def _rows(data: Path) -> list[Row]:
    rows = [*rows_2c(data), *rows_2d(), *rows_2e(data)]
    if (data / H100_FILE).is_file():
        rows += rows_h100(data)
    rows += rows_gb200()
    if (data / DGX1_1NIC_FILE).is_file():
        rows += rows_9(data) + rows_25(data)
    rows += rows_serving()
    return rows


def table(rows: Sequence[Row]) -> str:
    """The comparison table; with the second reading (`Row.unstated`) its two columns, '=' where it is the same."""
    second = any(r.unstated is not None for r in rows)
    head = "| case | setup | metric | measured | modeled | modeled/measured |"
    rule = "|---|---|---|---:|---:|---:|"
    if second:
        head += " NICs not stated | its ratio |"
        rule += "---:|---:|"
    lines = [head, rule]
    for r in rows:
        line = f"| {r.case} | {r.setup} | {r.metric} | {r.measured:.3g} | {r.modeled:.3g} | {r.ratio:.2f} |"
        if second:
            u = r.unstated
            same = u is not None and math.isclose(u, r.modeled, rel_tol=1e-9)
            line += " = | |" if same or u is None else f" {u:.3g} | {u / r.measured:.2f} |"
        lines.append(line)
    return "\n".join(lines)


def timing(repeat: int = 3) -> str:
    """Seconds of one `evaluate` at 65,536 ranks: tp8 pp8 dp1024 on the 131,072-GPU fat tree (best of `repeat`)."""
    from placement.cost.step import model_step
    from placement.cost.surrogate import surrogate_seconds

    topo, job, state = fat_tree(131072), megatron_job("tp8-pp8-dp1024", tp=8, pp=8, dp=1024), ClusterState()
    mapping = list(range(job.ranks))
    start = time.perf_counter()
    traffic = job_traffic(job)
    rows = [("job_traffic (once per request)", time.perf_counter() - start)]
    parts: dict[str, Callable[[], object]] = {
        "step model (model_step)": lambda: model_step(topo, state, job, mapping, traffic),
        "v1 surrogate (surrogate_seconds)": lambda: surrogate_seconds(topo, state, mapping, traffic),
        "evaluate(check=False)": lambda: evaluate(topo, state, job, mapping, traffic=traffic, check=False),
        "evaluate() with validation": lambda: evaluate(topo, state, job, mapping, traffic=traffic),
    }
    for name, fn in parts.items():
        best = math.inf
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        rows.append((name, best))
    return "\n".join(["| part | seconds |", "|---|---:|", *(f"| {n} | {t:.2f} |" for n, t in rows)])


def _ranks(xs: Sequence[float]) -> list[float]:
    """Ranks of `xs` from 1, ties given their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson's on average ranks, so ties count as they should)."""
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / math.sqrt(vx * vy) if vx > 0 and vy > 0 else 1.0


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Kendall's tau-b of two scorings of the same items (1: the same order; ties in either are not counted as
    agreeing or disagreeing)."""
    conc = disc = tx = ty = 0
    n = len(xs)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    den = math.sqrt((conc + disc + tx) * (conc + disc + ty))
    return (conc - disc) / den if den > 0 else 1.0


def ddp_efficiency(data: Path) -> tuple[list[str], list[float], list[float]]:
    """Per-GPU throughput of the published DDP table (2e: 1, 2, 4, 8, 16 GPUs of resnet50 and resnet101 at
    batch 32 per GPU), measured (32 / p50) and modeled (32 / (1-GPU p50 + the modeled overhead of row 2e))."""
    overhead = {r.setup: r.modeled / 1e3 for r in rows_2e(data)}
    names, measured, modeled = [], [], []
    for model, (_, p50) in DDP.items():
        for n, secs in sorted(p50.items()):
            where = f"{n} GPUs" + (" (2 machines)" if n > 8 else "")
            names.append(f"{model} x{n}")
            measured.append(32 / secs)
            modeled.append(32 / (p50[1] + (overhead[f"DDP {model}, {where}"] if n > 1 else 0.0)))
    return names, measured, modeled


def efficiency_spearman(data: Path) -> str:
    """The per-GPU efficiency ordering of the published DDP table (2e), modeled against measured, both readings."""
    out = []
    for stated in (True, False):
        saved = _NICS_STATED[0]
        _NICS_STATED[0] = stated
        try:
            _, meas, mod = ddp_efficiency(data)
        finally:
            _NICS_STATED[0] = saved
        what = "NICs stated" if stated else "NICs not stated"
        out.append(f"{spearman(meas, mod):.3f} ({what})")
    return "Per-GPU efficiency ordering, published DDP table (2e, 10 configurations), Spearman: " + "; ".join(
        out
    )


# ---- sensitivity: the fitted constants at +-50% -------------------------------------------------------------------

# The constants of the model that were fitted rather than read from a source (docs/model.md, "Phases"): the two
# interference constants and the straggler spread (placement.cost.step), and the DDP bucket the overlap assumes.
FITTED = ("OVERLAP_RATE", "COMPUTE_INTERFERENCE", "STRAGGLER_CV", "DDP_BUCKET_BYTES")
SENSITIVITY_FACTORS = (0.5, 1.5)
SENSITIVE_CASES = ("2e", "9a", "9b", "25")  # the rows whose jobs have compute and a DP phase or many ranks
# Example jobs of examples/ on their clusters (cluster, state or None, job) whose placements are ranked, and
# fragmented fat trees (`placement.sim.scenarios`: 50% mixed-random occupancy, seed 1) with 13B-shaped jobs,
# where the answer beats the schedulers.
RANKING_CASES = (
    ("dgx-h100-4node.yaml", None, "tp8-dp4.yaml"),
    ("h100-256.yaml", "h100-256-busy.yaml", "tp2-pp4-dp4-torchrun.yaml"),
    ("h100-256.yaml", None, "tp8-dp16-urgent.yaml"),
    ("h100-256.yaml", None, "tp2-pp4-dp4-torchrun.yaml"),
)
FRAGMENTED_CASES = ((8, 2, 8), (2, 4, 16), (4, 2, 8))  # (tp, pp, dp) on a 50%-busy 512-GPU fat tree
SWAPPED = 6


@contextmanager
def constant(name: str, value: float) -> Iterator[None]:
    """`placement.cost.step.<name>` set to `value` for the block (restored after)."""
    saved = getattr(step_model, name)
    setattr(step_model, name, value)
    try:
        yield
    finally:
        setattr(step_model, name, saved)


def _settings() -> list[tuple[str, str | None, float]]:
    """(label, constant or None for the model's own, value) of every setting the sensitivity tables price."""
    out: list[tuple[str, str | None, float]] = [("model", None, 0.0)]
    for name in FITTED:
        base = float(getattr(step_model, name))
        for f in SENSITIVITY_FACTORS:
            out.append((f"{name} x{f:g}", name, base * f))
    return out


def sensitivity_rows(data: Path) -> str:
    """modeled/measured of the rows that move (`SENSITIVE_CASES`) at each fitted constant x0.5 and x1.5."""
    settings = _settings()
    cols: list[list[Row]] = []
    for _, name, value in settings:
        if name is None:
            cols.append(all_rows(data))
        else:
            with constant(name, value):
                cols.append(all_rows(data))
    keep = [i for i, r in enumerate(cols[0]) if r.case in SENSITIVE_CASES]
    head = "| case | setup | " + " | ".join(label for label, _, _ in settings) + " |"
    lines = [head, "|---|---|" + "---:|" * len(settings)]
    for i in keep:
        r = cols[0][i]
        cells = " | ".join(f"{c[i].ratio:.2f}" for c in cols)
        lines.append(f"| {r.case} | {r.setup} | {cells} |")
    fitted = [i for i in keep if cols[0][i].case in DP_CASES]
    worst = " | ".join(f"{max(max(c[i].ratio, 1 / c[i].ratio) for i in fitted):.2f}" for c in cols)
    lines.append(f"| | worst factor of the rows fitted ({', '.join(DP_CASES)}) | {worst} |")
    return "\n".join(lines)


def _example(
    root: Path, cluster: str, state: str | None, job_file: str
) -> tuple[Topology, ClusterState, Job]:
    topo, st = load_cluster(root / cluster)
    cs = st or ClusterState()
    if state is not None:
        cs = load_state(root / state, topo, cs)
    return topo, cs, load_job(root / job_file)


def _fragmented(tp: int, pp: int, dp: int) -> tuple[Topology, ClusterState, Job]:
    topo = fat_tree(512)
    job = megatron_job(f"tp{tp}-pp{pp}-dp{dp}", tp=tp, pp=pp, dp=dp, hidden=5120, layers=40)
    return topo, occupy(topo, 0.5, seed=1, mode="mixed-random"), job


def _placements(topo: Topology, cs: ClusterState, job: Job, seed: int) -> list[tuple[str, list[int]]]:
    """The mappings of one job: every scheduler baseline that places it, the cpsat answer, the answer with 1, 2,
    4, ... `2**(SWAPPED - 1)` random pairs of ranks swapped, and a random mapping over the devices the others use
    (a spread of placements from the best to the worst)."""
    traffic = job_traffic(job)
    found: list[tuple[str, list[int]]] = []
    for name, fn in BASELINES.items():
        m = fn(topo, cs, job, traffic)
        if m is not None:
            found.append((name, m))
    res = place(topo, cs, job, SolveOptions(time_limit_s=8.0, deterministic=True), traffic=traffic)
    assert res.mapping is not None
    answer = list(res.mapping)
    found.append(("cpsat", answer))
    rng = random.Random(seed)
    for k in range(SWAPPED):
        m = list(answer)
        for _ in range(2**k):
            i, j = rng.sample(range(job.ranks), 2)
            m[i], m[j] = m[j], m[i]
        found.append((f"cpsat, {2**k} swaps", m))
    pool = sorted({d for _, m in found for d in m})
    found.append(("random", rng.sample(pool, job.ranks)))
    return found


def _steps(topo: Topology, cs: ClusterState, job: Job, found: Sequence[tuple[str, list[int]]]) -> list[float]:
    """Step seconds of each mapping, to 9 significant digits (equal placements tie, whatever the float noise)."""
    return [float(f"{evaluate(topo, cs, job, m, check=False).step_seconds:.9g}") for _, m in found]


def _gain(names: Sequence[str], steps: Sequence[float]) -> float:
    """The answer's step over the best scheduler baseline's."""
    best_baseline = min(x for n, x in zip(names, steps, strict=True) if n in BASELINES)
    return steps[names.index("cpsat")] / best_baseline


def ranking_robustness(root: Path = ROOT / "examples") -> str:
    """Kendall tau between the model's ranking of each example job's placements (`_placements`, by step) and the
    ranking at each fitted constant x0.5 and x1.5, whether the best placement stays the best, and the answer's
    step over the best scheduler baseline's (at the model's constants, and its range over the settings)."""
    settings = _settings()[1:]
    head = (
        "| job on cluster | placements | answer / best baseline | "
        + " | ".join(label for label, _, _ in settings)
        + " |"
    )
    lines = [head, "|---|---:|---:|" + "---:|" * len(settings)]
    cases = [
        (
            f"{job_file} on {cluster}" + (f" ({state})" if state else ""),
            _example(root, cluster, state, job_file),
        )
        for cluster, state, job_file in RANKING_CASES
    ]
    cases += [
        (f"tp{tp} pp{pp} dp{dp} (13B) on fat-tree 512, 50% mixed-random", _fragmented(tp, pp, dp))
        for tp, pp, dp in FRAGMENTED_CASES
    ]
    for seed, (where, (topo, cs, job)) in enumerate(cases):
        found = _placements(topo, cs, job, seed)
        names = [n for n, _ in found]

        base = _steps(topo, cs, job, found)
        best = min(range(len(base)), key=base.__getitem__)
        cells, gains = [], []
        for _, name, value in settings:
            assert name is not None
            with constant(name, value):
                moved = _steps(topo, cs, job, found)
            gains.append(_gain(names, moved))
            same_best = min(range(len(moved)), key=moved.__getitem__) == best
            cells.append(f"{kendall_tau(base, moved):.2f}{'' if same_best else ' *'}")
        ratio = f"{_gain(names, base):.3f} ({min(gains):.3f}-{max(gains):.3f})"
        lines.append(f"| {where} | {len(found)} | {ratio} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "Kendall tau of the step ranking against the model's own; * where the best placement changes. The answer "
        "(cpsat) over the best scheduler baseline, by step: at the model's constants (over the settings)."
    )
    return "\n".join(lines)


# The grid `--fit` searches for the three data-parallel constants of placement.cost.step.
FIT_GRID = {
    "OVERLAP_RATE": (0.3, 0.35, 0.4, 0.5, 0.6, 0.7),
    "COMPUTE_INTERFERENCE": (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.45),
    "STRAGGLER_CV": (0.0, 0.005, 0.01, 0.015, 0.02, 0.03),
}
DP_CASES = ("2e", "25")


def fit(data: Path, top: int = 8) -> str:
    """The grid of `FIT_GRID` over the data-parallel rows (2e and 25): for each setting the worst
    modeled/measured factor (max over rows of max(r, 1/r)) and the sum of squared log ratios; the best `top`
    settings, best first, and where the model's own constants rank. Restores the constants afterwards."""
    names = list(FIT_GRID)
    saved = {n: getattr(step_model, n) for n in names}
    scored = []
    try:
        for values in itertools.product(*FIT_GRID.values()):
            for n, v in zip(names, values, strict=True):
                setattr(step_model, n, v)
            logs = [abs(math.log(r.ratio)) for r in all_rows(data) if r.case in DP_CASES]
            scored.append((max(logs), sum(x * x for x in logs), values))
    finally:
        for n, v in saved.items():
            setattr(step_model, n, v)
    scored.sort()
    current = tuple(saved[n] for n in names)
    rank = next((i for i, s in enumerate(scored) if s[2] == current), None)
    head = " | ".join(names)
    lines = [f"| rank | {head} | worst factor | sum of log^2 |", "|---:|" + "---:|" * (len(names) + 2)]
    for i, (worst, sq, values) in enumerate(scored[:top]):
        mark = " (the model's)" if values == current else ""
        cells = " | ".join(f"{v:g}" for v in values)
        lines.append(f"| {i + 1}{mark} | {cells} | {math.exp(worst):.2f} | {sq:.3f} |")
    where = f"{rank + 1} of {len(scored)}" if rank is not None else "not on the grid"
    lines.append("")
    lines.append(f"The model's constants ({', '.join(f'{n} {saved[n]:g}' for n in names)}) rank {where}.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="the shared data folder (default: %(default)s)")
    ap.add_argument("--timing", action="store_true", help="also time one evaluate at 65,536 ranks")
    ap.add_argument("--nic", action="store_true", help="also the NIC speed at which rows 9a/9b would match")
    ap.add_argument(
        "--fit", action="store_true", help="also the grid the data-parallel constants were chosen on"
    )
    ap.add_argument(
        "--sensitivity",
        action="store_true",
        help="also the rows and the rankings of example placements at each fitted constant x0.5 and x1.5",
    )
    args = ap.parse_args(argv)
    if not (args.data / DGX1_FILE).is_file() or not (args.data / A100_PAIRS_FILE).is_file():
        print(f"the shared data folder {args.data} lacks {DGX1_FILE} or {A100_PAIRS_FILE}", file=sys.stderr)
        return 2
    print(table(all_rows(args.data, both=True)))
    print()
    print(efficiency_spearman(args.data))
    if args.nic and (args.data / DGX1_1NIC_FILE).is_file():
        print()
        print("NIC GB/s at which the model meets issue 9's ratios (diagnostic; EDR line rate is 12.5):")
        print(
            f"- cliff {CLIFF_MEASURED}x: {nic_for(args.data, cliff, CLIFF_MEASURED):.2f}; "
            f"2x short of it ({CLIFF_MEASURED / 2}x): {nic_for(args.data, cliff, CLIFF_MEASURED / 2):.2f}"
        )
        print(
            f"- BERT +{BERT_MEASURED:.0f}%: {nic_for(args.data, bert_overhead, BERT_MEASURED):.2f}; "
            f"half of it: {nic_for(args.data, bert_overhead, BERT_MEASURED / 2):.2f}"
        )
    if args.nic and (args.data / DGX1_1NIC_FILE).is_file():
        slow = dgx1_cluster(args.data, 4, file=DGX1_1NIC_FILE, nic_gbps=3.45)
        at = [
            (bert_base_step(slow, 32, b) - bert_base_step(slow, 1, b)) * 1e3 / ms
            for b, ms in BERT_BASE_MEASURED.items()
        ]
        print(
            "- rows 25 with the NIC at 3.45 GB/s (where the cliff is 3.75x): BERT-base "
            + ", ".join(f"batch {b} {r:.2f}" for b, r in zip(BERT_BASE_MEASURED, at, strict=True))
            + f" of the measurement; GPT DP-only loss {gpt_dp_fall(slow) / GPT_DP_MEASURED:.2f}"
        )
        t = dgx1_cluster(args.data, 4, file=DGX1_1NIC_FILE, nic_gbps=12.5)
        doubled = [
            gpt_step(t, 16, batch_scale=2, recompute=rc) / gpt_step(t, 8, recompute=rc)
            for rc in (False, True)
        ]
        print(
            f"- cliff with the NIC at 12.5 GB/s: {cliff(t):.2f}x; with TP16 at twice TP8's micro-batch: "
            f"{doubled[0]:.2f}x ({doubled[1]:.2f}x with full recomputation); with the NIC at 6 GB/s (staged "
            f"through host memory without GPUDirect RDMA): "
            f"{cliff(dgx1_cluster(args.data, 4, file=DGX1_1NIC_FILE, nic_gbps=6.0)):.2f}x"
        )
        fp16 = [(bert_base_step(t, 32, b, 2) - bert_base_step(t, 1, b, 2)) * 1e3 for b in BERT_BASE_MEASURED]
        print(
            "- BERT-base at 32 GPUs with an fp16 gradient reduce and the NIC at 12.5 GB/s: "
            + ", ".join(
                f"batch {b} {m:.1f} ms ({m / BERT_BASE_MEASURED[b]:.2f})"
                for b, m in zip(BERT_BASE_MEASURED, fp16, strict=True)
            )
        )
    if args.fit:
        print()
        print(fit(args.data))
    if args.sensitivity:
        print()
        print(sensitivity_rows(args.data))
        print()
        print(ranking_robustness(ROOT / "examples"))
    if args.timing:
        print()
        print(timing())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
