"""Ring orders inside one host, searched as NCCL does: the best single ring and packed NVLink rings over an
intra-node matrix, and whether NV# codes are links or an NVSwitch's bandwidth (model: `placement.cost.collectives`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from placement.model.links import Tier, intra_node_tier

__all__ = ["MAX_NVLINKS", "best_ring", "matrix_ring", "nvswitch"]

_SEARCH_BUDGET = 200_000  # DFS nodes per ring search; exact for any host NCCL sees (<= 16 devices, pruned)


def best_ring(cap: Sequence[Sequence[float]]) -> tuple[float, tuple[int, ...]]:
    """The directed Hamiltonian cycle over ``0..k-1`` whose weakest hop ``cap[a][b]`` is largest, and that hop.

    Exact branch and bound (candidates tried strongest first; a branch whose bottleneck cannot beat the best
    ring found is cut). Returns ``(0.0, ())`` when no cycle has positive capacity on every hop.
    """
    k = len(cap)
    if k < 2:
        return math.inf, tuple(range(k))
    if k == 2:
        b = min(cap[0][1], cap[1][0])
        return (b, (0, 1)) if b > 0 else (0.0, ())
    order_of = [
        sorted((j for j in range(k) if j != i), key=cap[i].__getitem__, reverse=True) for i in range(k)
    ]
    best_b = 0.0
    best_order: tuple[int, ...] = ()
    path, used = [0], [False] * k
    used[0] = True
    budget = _SEARCH_BUDGET

    def dfs(cur: int, bott: float) -> None:
        nonlocal best_b, best_order, budget
        budget -= 1
        if budget < 0:
            return
        if len(path) == k:
            b = min(bott, cap[cur][0])
            if b > best_b:
                best_b, best_order = b, tuple(path)
            return
        for nxt in order_of[cur]:
            if used[nxt]:
                continue
            b = min(bott, cap[cur][nxt])
            if b <= best_b:
                break
            used[nxt] = True
            path.append(nxt)
            dfs(nxt, b)
            path.pop()
            used[nxt] = False

    dfs(0, math.inf)
    return best_b, best_order


def _hops(order: Sequence[int]) -> list[tuple[int, int]]:
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


@lru_cache(maxsize=4096)
def matrix_ring(
    matrix: tuple[tuple[str, ...], ...],
    tiers: tuple[tuple[str, float, float], ...],
    members: tuple[int, ...],
    slow: tuple[tuple[int, int, float], ...] = (),
) -> tuple[float, float, str]:
    """Ring bandwidth (GB/s), per-step latency (µs) and bottleneck code of `members` (local indices) of a host.

    `tiers` are ``(code, bandwidth, latency)`` of the cluster's intra-node table, `slow` degraded pairs
    ``(i, j, factor)`` by position in `members`. See the module docstring (packed NVLink rings vs best ring).
    """
    table = {c: Tier(bw, lat) for c, bw, lat in tiers}
    k = len(members)
    codes = [[matrix[a][b] for b in members] for a in members]
    tier = [
        [intra_node_tier(codes[i][j], table) if i != j else Tier(math.inf, 0.0) for j in range(k)]
        for i in range(k)
    ]
    cap = [[tier[i][j].bandwidth_gbps for j in range(k)] for i in range(k)]
    for i, j, f in slow:
        cap[i][j] /= f
        cap[j][i] /= f
    single, order = best_ring(cap)
    nv = [[cap[i][j] if i != j and codes[i][j].startswith("NV") else 0.0 for j in range(k)] for i in range(k)]
    packed, rings = 0.0, []
    for _ in range(0 if nvswitch(matrix) else 4 * k):
        b, ring = best_ring(nv)
        if b <= 0 or not ring:
            break
        packed += b
        rings.append(ring)
        for a, c in _hops(ring):
            nv[a][c] -= b
    use = rings if packed > single else [order]
    hops = [h for r in use for h in _hops(r)]
    weakest = min(hops, key=lambda h: (cap[h[0]][h[1]], h))
    lat = max(tier[a][c].latency_us for a, c in hops)
    return max(packed, single), lat, codes[weakest[0]][weakest[1]]


MAX_NVLINKS = 18
"""NVLinks of one GPU at most (H100, B200): a matrix row adding up to more is a view through an NVSwitch."""


@lru_cache(maxsize=256)
def nvswitch(matrix: tuple[tuple[str, ...], ...]) -> bool:
    """True when the NV# codes are per-device bandwidth through an NVSwitch, not direct links.

    ``nvidia-smi topo -m`` prints NV18 for every pair of an HGX H100 (NV12 on A100, NV6 on DGX-2): each GPU's
    links go to the switches, and a ring gets one device's bandwidth. Direct meshes (DGX-1 NV1/NV2, 4 x V100 NV2,
    NVLink bridges) add up to at most `MAX_NVLINKS` per device.
    """
    for a, row in enumerate(matrix):
        total = sum(
            int(c[2:]) for b, c in enumerate(row) if b != a and c.startswith("NV") and c[2:].isdigit()
        )
        if total > MAX_NVLINKS:
            return True
    return False
