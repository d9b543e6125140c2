"""Shared checks of `placement.io.importers.nvidia_smi` results, used by the nvidia-smi test files: the invariants every
parsed table satisfies (square symmetric matrix, X on the diagonal, one rail and affinity per GPU)."""

from __future__ import annotations

from placement.io.importers.nvidia_smi import NvidiaSmiTopology


def assert_well_formed(t: NvidiaSmiTopology) -> None:
    n = len(t.gpus)
    assert t.gpus == tuple(f"GPU{i}" for i in range(n))
    assert len(t.matrix) == n and all(len(r) == n for r in t.matrix)
    for i in range(n):
        assert t.matrix[i][i] == "X"
        for j in range(n):
            assert t.matrix[i][j] == t.matrix[j][i]
            assert t.matrix[i][j] != "SOC"
    assert len(t.gpu_nic) == n and all(len(r) == len(t.nics) for r in t.gpu_nic)
    assert len(t.rails) == len(t.cpu_affinity) == len(t.numa_affinity) == n
    assert all(r is None or 0 <= r < len(t.nics) for r in t.rails)
