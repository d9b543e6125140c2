"""The registry's schema migrations: the ``migrations/<dialect>/NNNN_name.sql`` files, and applying those above
the recorded version inside one transaction (`SqlStore.migrate` calls `apply_migrations`)."""

from __future__ import annotations

import time
from pathlib import Path

from placement.registry.sql.tx import Tx

__all__ = ["MIGRATIONS", "apply_migrations", "migration_files"]

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def migration_files(dialect: str) -> list[tuple[int, Path]]:
    """(version, file) of every ``NNNN_name.sql`` of a dialect, in order."""
    out = []
    for p in sorted((MIGRATIONS / dialect).glob("*.sql")):
        out.append((int(p.name.split("_", 1)[0]), p))
    return out


def _statements(sql: str) -> list[str]:
    """The statements of a migration: split at `;`, except inside a `$$ ... $$` body (a PL/pgSQL function)."""
    lines = [ln for ln in sql.splitlines() if not ln.lstrip().startswith("--")]
    out, part = [], []
    for i, chunk in enumerate("\n".join(lines).split("$$")):
        if i % 2:  # inside a dollar-quoted body: kept whole
            part.append(f"$${chunk}$$")
            continue
        pieces = chunk.split(";")
        part.append(pieces[0])
        for piece in pieces[1:]:
            out.append("".join(part))
            part = [piece]
    out.append("".join(part))
    return [s.strip() for s in out if s.strip()]


def apply_migrations(tx: Tx, dialect: str) -> None:
    """Create schema_version if needed, then run and record each migration above the recorded ones, in `tx`."""
    tx.x("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
    done = {int(r[0]) for r in tx.q("SELECT version FROM schema_version")}
    for version, path in migration_files(dialect):
        if version in done:
            continue
        for stmt in _statements(path.read_text()):
            tx.x(stmt)
        tx.x("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, time.time()))
