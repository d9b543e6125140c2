"""Shared by the registry tests: store URLs (SQLite in tmp_path, PostgreSQL from .ci/postgres.sh), a fresh
database per test, a PostgreSQL server of a test's own (to stop and restart), a small tmpfs (to fill), small
clusters and jobs, and a settable clock."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
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


def _skip_or_fail(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(why + "; CI=true, so this fails instead of skipping")
    pytest.skip(why)


def _pg_bin() -> Path | None:
    """PostgreSQL's server programs: PLACEMENT_TEST_PG_BIN (set by .ci/postgres.sh), else Debian's newest."""
    given = os.environ.get("PLACEMENT_TEST_PG_BIN")
    found = (
        [given]
        if given
        else sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    )
    for d in reversed(found):
        if d and (Path(d) / "initdb").exists():
            return Path(d)
    return None


class OwnPostgres:
    """A PostgreSQL server of one test (its own data directory and port), which the test may stop, start and
    restart with `pg_ctl` (a fault the shared test server must not suffer)."""

    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.bin, self.root, self.data = bin_dir, root, root / "data"
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()

    def _run(self, prog: str, *args: str) -> None:
        cmd = [str(self.bin / prog), *args]
        if os.geteuid() == 0:  # initdb and pg_ctl refuse root
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def pg_ctl(self, action: str, *args: str) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "60",
            "-o",
            opts,
            *args,
            action,
        )

    def start(self) -> None:
        self.pg_ctl("start")

    def stop(self) -> None:
        self.pg_ctl("stop", "-m", "fast")

    def restart_immediate(self) -> None:
        """`pg_ctl restart -m immediate`: the server quits without a checkpoint and recovers from its WAL."""
        self.pg_ctl("restart", "-m", "immediate")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def own_postgres() -> Iterator[OwnPostgres]:
    """A PostgreSQL server for one test, or skip (locally) / fail (CI=true) when PostgreSQL is not installed."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        _skip_or_fail("this test needs PostgreSQL's programs (initdb, pg_ctl): `.ci/postgres.sh install`")
    assert bin_dir is not None
    root = Path(tempfile.mkdtemp(prefix="placement-own-pg."))
    root.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    server = OwnPostgres(bin_dir, root)
    try:
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (a real filesystem that fills), or skip (locally) / fail (CI=true)
    when this is not root or the mount is refused (a container without CAP_SYS_ADMIN)."""
    sudo: list[str] = []
    if os.geteuid() != 0:  # a CI runner's passwordless sudo will do
        if (
            shutil.which("sudo") is None
            or subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode
        ):
            _skip_or_fail("mounting a small tmpfs needs root (or passwordless sudo)")
        sudo = ["sudo", "-n"]
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [*sudo, "mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        _skip_or_fail(f"mount -t tmpfs refused: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run([*sudo, "umount", "-l", str(where)], capture_output=True)


def fill(directory: Path) -> Path:
    """Write a file in `directory` until its filesystem is full; returns it (delete it to free the space)."""
    filler = directory / "filler"
    chunk = b"\0" * 4096
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
    return filler


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
