"""The storage interface of the registry, and `open_store(url)`: sqlite:///path (embedded) or postgresql://...

Every write is one transaction that first takes the cluster's write lock (SQLite BEGIN IMMEDIATE, PostgreSQL
SELECT ... FOR UPDATE of the cluster row), so writes to one cluster are serialized by the database itself.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from placement.registry.model import ClusterRecord, DeviceRow, Event, Reservation, Snapshot

__all__ = ["DEFAULT_SQLITE_PATH", "Store", "default_url", "open_store"]

DEFAULT_SQLITE_PATH = Path("~/.local/state/placement/registry.db")


class Store(abc.ABC):
    """What the registry needs from a database. `now` is the caller's clock (unix seconds) everywhere, so that
    lease expiry is testable; replicas must share a synchronized clock (NTP)."""

    url: str

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def schema_version(self) -> int: ...

    # ---- clusters and state --------------------------------------------------------------------------------

    @abc.abstractmethod
    def put_cluster(self, cluster_id: str, doc: dict[str, Any], now: float) -> tuple[int, bool]:
        """Store the cluster document; a changed document gets version + 1. Returns (version, changed)."""

    @abc.abstractmethod
    def cluster(self, cluster_id: str) -> ClusterRecord | None: ...

    @abc.abstractmethod
    def cluster_ids(self) -> list[str]: ...

    @abc.abstractmethod
    def last_seq(self, cluster_id: str) -> int | None:
        """The cluster's change counter (its last event), cheap: a cached snapshot is fresh while it holds."""

    @abc.abstractmethod
    def snapshot(self, cluster_id: str, now: float) -> Snapshot | None:
        """Cluster, device rows, live holds and extras, read in one transaction."""

    @abc.abstractmethod
    def update_state(
        self,
        cluster_id: str,
        generation: int,
        change: Callable[[Mapping[str, DeviceRow]], Mapping[str, DeviceRow | None]],
        touched: Sequence[str],
        replace: bool,
        extras: dict[str, Any] | None,
        event: dict[str, Any],
        now: float,
    ) -> int:
        """If `generation` is above the stored one (else StaleGeneration): read the rows of `touched` under the
        write lock, write `change(rows)` (None deletes a row; `replace` first clears every row and passes {}),
        and record an event. Returns the event's seq."""

    # ---- reservations --------------------------------------------------------------------------------------

    @abc.abstractmethod
    def insert_reservation(
        self, res: Reservation, expected_generation: int, expected_version: int, now: float
    ) -> tuple[Reservation, bool]:
        """Hold `res.devices` if the state is still at `expected_generation` and none of them is occupied,
        failed or held (else Conflict). A reservation with the same idempotency key wins: (it, False)."""

    @abc.abstractmethod
    def by_key(self, cluster_id: str, key: str) -> Reservation | None: ...

    @abc.abstractmethod
    def reservation(self, reservation_id: str) -> Reservation | None: ...

    @abc.abstractmethod
    def reservations(self, cluster_id: str | None, statuses: Sequence[str] | None) -> list[Reservation]: ...

    @abc.abstractmethod
    def transition(
        self, reservation_id: str, action: str, now: float, ttl_s: float | None = None
    ) -> Reservation:
        """commit, release or renew one reservation (rules in placement.registry.sql.reservations); returns it after."""

    @abc.abstractmethod
    def sweep(self, now: float) -> list[Reservation]:
        """Mark every held reservation whose lease ran out EXPIRED and free its devices; returns them."""

    def solve_turn(self, cluster_id: str) -> AbstractContextManager[None]:
        """Held while a Reserve of `cluster_id` solves: replicas sharing the database take turns (PostgreSQL: a
        session advisory lock, released by the database if the replica dies). Default: no lock (one process)."""
        return nullcontext()

    # ---- events ------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def events(self, cluster_id: str, after_seq: int, limit: int = 1000) -> list[Event]: ...


def default_url() -> str:
    """The embedded default: an SQLite file under ~/.local/state/placement (XDG_STATE_HOME if set)."""
    import os

    base = os.environ.get("XDG_STATE_HOME")
    path = Path(base) / "placement" / "registry.db" if base else DEFAULT_SQLITE_PATH.expanduser()
    return f"sqlite://{path}"


def open_store(url: str) -> Store:
    """A store for `url`: ``sqlite:///abs/path.db`` (``sqlite://rel.db``: relative to the working directory),
    or ``postgresql://user@host:port/db``. Migrations are applied on open. ValueError for anything else."""
    if url.startswith("sqlite://"):
        from placement.registry.backends.sqlite import SqliteStore

        path = url.removeprefix(
            "sqlite://"
        )  # sqlite:///abs/file.db -> /abs/file.db; sqlite://rel.db -> rel.db
        if not path or path.endswith("/"):
            raise ValueError(
                f"registry url {url!r}: give a file, e.g. sqlite:///var/lib/placement/registry.db"
            )
        return SqliteStore(path)
    if url.startswith(("postgresql://", "postgres://")):
        from placement.registry.backends.postgres import PostgresStore

        return PostgresStore(url)
    raise ValueError(f"registry url {url!r}: expected sqlite:///PATH or postgresql://USER@HOST:PORT/DB")
