"""Shared by the registry tests: store URLs (SQLite in tmp_path, PostgreSQL from .ci/postgres.sh), a fresh
database per test, small clusters and jobs, and a settable clock."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from placement.io.native import job_from_dict
from placement.model.job import Job

PG_ENV = "PLACEMENT_TEST_POSTGRES"


def postgres_admin_url() -> str:
    """The test PostgreSQL server, or skip (locally) / fail (CI=true) saying how to get one."""
    url = os.environ.get(PG_ENV)
    if url:
        return url
    why = f"PostgreSQL tests need {PG_ENV} (run them through `.ci/postgres.sh exec ...`, as `make test` does)"
    if os.environ.get("CI") == "true":
        pytest.fail(why + "; CI=true, so this fails instead of skipping")
    pytest.skip(why)


def fresh_postgres_db() -> Iterator[str]:
    """A new empty database on the test server; dropped afterwards."""
    import psycopg

    admin = postgres_admin_url()
    name = f"reg_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base, _, _ = admin.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def store_url(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite://{tmp_path / 'registry.db'}"
    else:
        yield from fresh_postgres_db()


def cluster_doc(nodes: int = 8, gpus: int = 8, per_leaf: int = 4) -> dict[str, Any]:
    """`nodes` hosts of `gpus` H100s, `per_leaf` per leaf, one spine (hosts node01, node02, ...)."""
    return {
        "name": f"c{nodes}",
        "levels": [
            {"name": "node", "bandwidth_gbps": 450, "latency_us": 2},
            {"name": "leaf", "bandwidth_gbps": 50, "latency_us": 5},
            {"name": "spine", "bandwidth_gbps": 25, "latency_us": 10},
        ],
        "generate": [{"nodes": nodes, "devices": gpus, "kind": "H100", "fanout": {"leaf": per_leaf}}],
    }


def job_dict(ranks: int, name: str | None = None) -> dict[str, Any]:
    """A TP=8 job of `ranks` ranks (a multiple of 8): each TP group must stay in one node."""
    return {
        "name": name or f"job{ranks}",
        "device_kind": "H100",
        "parallel": {"tp": 8, "dp": ranks // 8},
        "model": {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096, "micro_batches": 8},
        "constraints": {"require": {"tp": "node"}},
    }


def job(ranks: int, name: str | None = None) -> Job:
    return job_from_dict(job_dict(ranks, name))


class Clock:
    """A clock the test moves by hand (leases expire without sleeping)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
