"""The registry's database backends, SQLite (embedded) and PostgreSQL (replicas), and `open_store(url)` that
picks one by URL; `default_url()` is the embedded default."""

from __future__ import annotations

import os
from pathlib import Path

from placement.registry.backends.postgres import PostgresStore
from placement.registry.backends.sqlite import SqliteStore
from placement.registry.store import Store

__all__ = ["DEFAULT_SQLITE_PATH", "PostgresStore", "SqliteStore", "default_url", "open_store"]

DEFAULT_SQLITE_PATH = Path("~/.local/state/placement/registry.db")


def default_url() -> str:
    """The embedded default: an SQLite file under ~/.local/state/placement (XDG_STATE_HOME if set)."""
    base = os.environ.get("XDG_STATE_HOME")
    path = Path(base) / "placement" / "registry.db" if base else DEFAULT_SQLITE_PATH.expanduser()
    return f"sqlite://{path}"


def open_store(url: str) -> Store:
    """A store for `url`: ``sqlite:///abs/path.db`` (``sqlite://rel.db``: relative to the working directory),
    or ``postgresql://user@host:port/db[?pool_size=16&pool_timeout_s=5&lock_timeout_s=5]``. Migrations are
    applied on open. ValueError for anything else."""
    if url.startswith("sqlite://"):
        path = url.removeprefix(
            "sqlite://"
        )  # sqlite:///abs/file.db -> /abs/file.db; sqlite://rel.db -> rel.db
        if not path or path.endswith("/"):
            raise ValueError(
                f"registry url {url!r}: give a file, e.g. sqlite:///var/lib/placement/registry.db"
            )
        return SqliteStore(path)
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresStore(url)
    raise ValueError(f"registry url {url!r}: expected sqlite:///PATH or postgresql://USER@HOST:PORT/DB")
