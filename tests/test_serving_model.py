"""The serving step model (placement.cost.serving) on tiny cases computed by hand: the decode roofline, the TP
all-reduce at NCCL's LL protocol, DeepEP low-latency dispatch and combine over the hosts' NICs, the KV handoff, and
the ranks' layout."""

from __future__ import annotations

import math

import pytest

from placement.cost.serving import DEEPEP_LL_LATENCY_US, MEMORY_EFFICIENCY, model_serving
from placement.model.devices import HostSpec, NodeType
from placement.model.links import Level, Tier
from placement.model.serving import ServingJob, ServingLoad, ServingModel, ServingPool, pool_ranks
from placement.model.state import ClusterState
from placement.model.topology import Topology

H100_TFLOPS, H100_HBM = 989e12, 3350e9


def _cluster(hosts: int, per_host: int, node_gbps: float = 100.0, nic_gbps: float = 50.0) -> Topology:
    nt = NodeType("h", per_host, "H100", nics=per_host, nic_gbps=nic_gbps)
    return Topology.build(
        "tiny",
        [Level("node", Tier(node_gbps, 1.0)), Level("leaf", Tier(nic_gbps, 5.0))],
        [HostSpec(f"n{i}", {"leaf": "l0"}, nt) for i in range(hosts)],
    )


DENSE = ServingModel(1e9, 1024, 4, 8, 8, 128)


def test_dense_decode_by_hand() -> None:
    """TP 2 on one host, 4 requests of 100 + 11 tokens: memory bound, 8 TP all-reduces of 8 KiB at LL."""
    job = ServingJob("d", DENSE, (ServingPool("aggregated", tp=2),), ServingLoad(4, 100, 11), "H100")
    rep = model_serving(_cluster(1, 2), ClusterState(), job, [0, 1])
    ctx = 100 + (11 - 1) / 2
    weights = 1e9 / 2 * 2  # half the weights per rank, bf16
    kv = 4 * ctx * 4 * (2 * (8 / 2) * 128) * 2  # b ctx L x K and V of 4 heads x 128, bf16
    mem = (weights + kv) / (H100_HBM * MEMORY_EFFICIENCY)
    flops = 2 * 4 * 1e9 / 2 + 4 * 4 * ctx * (8 / 2) * 128 * 4
    eff = 0.6 * 512 / (512 + 384)  # H100's GEMM efficiency at shards 1024/2 wide
    assert flops / (H100_TFLOPS * eff) < mem  # memory bound
    compute = rep.phases[0]
    assert (compute.phase, compute.tier) == ("compute", "hbm")
    assert compute.seconds == pytest.approx(mem, rel=1e-9)
    # LL: NCCL's ring latency 2 (n-1) steps x 1 µs scaled by 0.6/3.4, half the link's 100 GB/s
    size = 4 * 1024 * 2
    ll = 2 * 1e-6 * 0.6 / 3.4 + 2 * (1 / 2) * size / (0.5 * 100e9)
    tp = next(p for p in rep.phases if p.phase == "tp all-reduce")
    assert tp.algorithm == "ring/LL"
    assert tp.count == 8
    assert tp.seconds == pytest.approx(8 * ll, rel=1e-9)
    assert rep.tpot_seconds == pytest.approx(mem + 8 * ll, rel=1e-9)
    assert rep.bottleneck_tier == "hbm"


def _moe_job(pools: tuple[ServingPool, ...], batch: int = 64) -> ServingJob:
    model = ServingModel(
        2e9,
        1024,
        2,
        8,
        1,
        576,
        attention="mla",
        experts=8,
        top_k=2,
        expert_parameters=1.6e9,
        weight_dtype="fp8",
    )
    return ServingJob("m", model, pools, ServingLoad(batch, 1000, 101), "H100")


def test_ep_low_latency_dispatch_and_combine_by_hand() -> None:
    """EP 8 over 2 hosts of 4 GPUs, one 50 GB/s NIC per GPU: each host sends half of every member's bytes."""
    job = _moe_job((ServingPool("aggregated", ep=8, attention_dp=8),))
    rep = model_serving(_cluster(2, 4), ClusterState(), job, list(range(8)))
    per_member_tokens = 64 / 8 * 2  # batch / ep x top-k
    dispatch = per_member_tokens * (1024 + 1024 / 128 * 4)  # FP8 with an fp32 scale per 128
    combine = per_member_tokens * 1024 * 2
    host_out = 4 * (8 - 4) / 8  # members on the host x the share of bytes bound elsewhere
    for phase, size in (("ep dispatch", dispatch), ("ep combine", combine)):
        p = next(x for x in rep.phases if x.phase == phase)
        expected = DEEPEP_LL_LATENCY_US * 1e-6 + host_out * size / (4 * 50e9)
        assert p.algorithm == "deepep-ll"
        assert p.count == 2
        assert p.seconds == pytest.approx(2 * expected, rel=1e-9)


def test_ep_inside_one_host_is_cheaper_than_across_hosts() -> None:
    job = _moe_job((ServingPool("aggregated", ep=4, attention_dp=4),))
    topo = _cluster(2, 4)
    inside = model_serving(topo, ClusterState(), job, [0, 1, 2, 3])
    across = model_serving(topo, ClusterState(), job, [0, 1, 4, 5])
    assert inside.tpot_seconds < across.tpot_seconds


def test_expert_weights_read_are_those_the_batch_visits() -> None:
    """One token visits top_k of E experts: with 1 request a rank reads 1 - (1 - k/E) of the experts it holds."""
    one = _moe_job((ServingPool("aggregated", ep=8, attention_dp=8),), batch=1)
    rep = model_serving(_cluster(2, 4), ClusterState(), one, list(range(8)))
    dense = (2e9 - 1.6e9) * 1.0
    experts = 1.6e9 / 8 * (1 - (1 - 2 / 8) ** 1)
    kv = (1 / 8) * (1000 + 50) * 2 * 576 * 2  # b = 1/8 request per rank, MLA latent, bf16
    assert rep.phases[0].seconds == pytest.approx(
        (dense + experts + kv) / (H100_HBM * MEMORY_EFFICIENCY), rel=1e-9
    )


def test_kv_handoff_by_hand() -> None:
    """Prefill on host 0, decode on host 1: the prompt's MLA cache from one prefill rank over the NIC."""
    job = _moe_job(
        (ServingPool("prefill", ep=4, attention_dp=4), ServingPool("decode", ep=4, attention_dp=4))
    )
    rep = model_serving(_cluster(2, 4), ClusterState(), job, list(range(8)))
    kv = 1000 * 576 * 2 * 2  # prompt x latent x layers x bf16
    handoff = next(p for p in rep.phases if p.phase == "kv handoff")
    assert handoff.seconds == pytest.approx(5e-6 + kv / 50e9, rel=1e-9)
    assert rep.ttft_seconds == pytest.approx(rep.prefill_seconds + handoff.seconds, rel=1e-12)
    # the deployment emits what its slower pool allows
    assert rep.tokens_per_s == pytest.approx(min(rep.decode_tokens_per_s, rep.prefill_tokens_per_s))
    assert rep.tokens_per_s_per_gpu == pytest.approx(rep.tokens_per_s / 8)


def test_pipeline_stages_pass_activations_and_tpot_sums_the_phases() -> None:
    job = ServingJob("p", DENSE, (ServingPool("aggregated", tp=2, pp=2),), ServingLoad(8, 100, 11), "H100")
    rep = model_serving(_cluster(2, 2), ClusterState(), job, [0, 1, 2, 3])
    pp = next(p for p in rep.phases if p.phase == "pp send")
    size = 8 / 2 * 1024 * 2 / 2  # a micro-batch's activations over the stage's 2 ranks
    assert pp.seconds == pytest.approx(5e-6 + size / 50e9, rel=1e-9)
    decode = [p for p in rep.phases if p.stage == "decode"]
    assert rep.tpot_seconds == pytest.approx(math.fsum(p.seconds for p in decode), rel=1e-12)


def test_pool_ranks_layout() -> None:
    m = DENSE
    job = ServingJob(
        "l",
        m,
        (ServingPool("prefill", tp=2, replicas=2), ServingPool("decode", tp=2, attention_dp=2)),
        ServingLoad(4, 10, 10),
    )
    assert job.ranks == 8
    assert pool_ranks(job, "prefill", 1) == (2, 3)
    assert pool_ranks(job, "decode", 0) == (4, 5, 6, 7)
    assert pool_ranks(job, "decode", 0, dp=1) == (6, 7)


def test_memory_over_the_device_is_a_note() -> None:
    big = ServingJob("b", DENSE, (ServingPool("aggregated", tp=2),), ServingLoad(100_000, 4000, 1000), "H100")
    rep = model_serving(_cluster(1, 2), ClusterState(), big, [0, 1])
    assert any("more than the H100's 80 GB" in n for n in rep.notes)


def _racks(racks: int) -> Topology:
    """GB200 NVL72-like racks: 18 trays of 4 GPUs, one NVLink domain per rack, 4 NICs of 48 GB/s per tray."""
    tray = NodeType("tray", 4, "GB200", nics=4, nic_gbps=48.0)
    node = Tier(18 * 40.1, 1.0)
    hosts = [
        HostSpec(f"r{r}t{t}", {"rack": f"r{r}", "leaf": "ib"}, tray) for r in range(racks) for t in range(18)
    ]
    return Topology.build(
        "nvl", [Level("node", node), Level("rack", node, nvlink=True), Level("leaf", Tier(48.0, 5.0))], hosts
    )


def test_ep_inside_an_nvlink_rack_rides_nvlink_not_the_nics() -> None:
    """EP 32 over 8 trays of one rack: the bytes go over NVLink (18 x 40.1 GB/s per GPU); split over two racks the
    half bound for the other rack leaves through the trays' NICs (4 x 48 GB/s per tray)."""
    job = _moe_job((ServingPool("aggregated", ep=32, attention_dp=32),), batch=32 * 64)
    topo = _racks(2)
    inside = model_serving(topo, ClusterState(), job, list(range(32)))
    split = model_serving(topo, ClusterState(), job, [*range(16), *range(72, 88)])
    size = 64 * 2 * (1024 + 32)  # tokens per member x top-k x FP8 bytes with scales
    d_in = next(p for p in inside.phases if p.phase == "ep dispatch")
    assert d_in.seconds == pytest.approx(
        2 * (DEEPEP_LL_LATENCY_US * 1e-6 + 31 / 32 * size / (18 * 40.1e9)), rel=1e-9
    )
    d_split = next(p for p in split.phases if p.phase == "ep dispatch")
    # a tray holds 4 members and sends 4 x 16/32 of each member's bytes to the other rack over its 4 NICs
    assert d_split.seconds == pytest.approx(
        2 * (DEEPEP_LL_LATENCY_US * 1e-6 + 4 * 16 / 32 * size / (4 * 48e9)), rel=1e-9
    )
    assert split.tpot_seconds > inside.tpot_seconds


def test_an_aggregated_pool_shares_its_time_between_prefill_and_decode() -> None:
    job = ServingJob(
        "a", DENSE, (ServingPool("aggregated", tp=2),), ServingLoad(16, 500, 50, prefill_batch=4), "H100"
    )
    rep = model_serving(_cluster(1, 2), ClusterState(), job, [0, 1])
    # per second: f decodes 16 / TPOT tokens; each request (50 tokens) costs prefill_seconds / 4 of the rest
    f = 1 / (1 + 16 * rep.prefill_seconds / (rep.tpot_seconds * 50 * 4))
    assert 0 < f < 1
    assert rep.tokens_per_s == pytest.approx(16 / rep.tpot_seconds * f)
    decoded = rep.tokens_per_s / 50 * rep.prefill_seconds / 4 + rep.tokens_per_s * rep.tpot_seconds / 16
    assert decoded == pytest.approx(1.0)  # the two shares fill the second
    assert rep.ttft_seconds == rep.prefill_seconds and rep.handoff_seconds == 0
