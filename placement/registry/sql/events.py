"""The change log of a cluster in SQL: `append_event` (every write appends one, bumping last_seq and generation)
and `read_events`, what WatchState streams."""

from __future__ import annotations

import json
from typing import Any

from placement.registry.model import Event
from placement.registry.sql.tx import Tx

__all__ = ["append_event", "read_events"]


def append_event(
    tx: Tx, cluster_id: str, kind: str, generation: int, payload: dict[str, Any], now: float
) -> int:
    """Append the next event of the cluster; `generation` is the cluster's generation after the change."""
    seq = int(
        tx.q(
            "UPDATE clusters SET last_seq = last_seq + 1, updated_at = ?, generation = ? WHERE id = ? "
            "RETURNING last_seq",
            (now, generation, cluster_id),
        )[0][0]
    )
    tx.x(
        "INSERT INTO events (cluster_id, seq, kind, generation, payload, at) VALUES (?, ?, ?, ?, ?, ?)",
        (cluster_id, seq, kind, generation, json.dumps(payload, separators=(",", ":")), now),
    )
    return seq


def read_events(tx: Tx, cluster_id: str, after_seq: int, limit: int) -> list[Event]:
    """The cluster's events after `after_seq`, oldest first, at most `limit`."""
    rows = tx.q(
        "SELECT seq, kind, generation, payload, at FROM events WHERE cluster_id = ? AND seq > ? "
        "ORDER BY seq LIMIT ?",
        (cluster_id, after_seq, limit),
    )
    return [Event(cluster_id, int(s), str(k), int(g), json.loads(p), float(a)) for s, k, g, p, a in rows]
