"""The change log of a cluster in SQL: `append_event` (every write appends one, bumping last_seq and generation),
`read_events`, what WatchState streams, and `prune_events` by age or count (recording the pruned horizon)."""

from __future__ import annotations

import json
from typing import Any

from placement.registry.model import Event
from placement.registry.sql.tx import Tx

__all__ = ["append_event", "prune_events", "read_events"]


def append_event(
    tx: Tx, cluster_id: str, kind: str, generation: int, payload: dict[str, Any], now: float
) -> int:
    """Append the next event of the cluster; `generation` is the cluster's generation after the change. The event
    is stamped `now` (the database's clock, read under the cluster's lock), or the cluster's last stamp if that is
    later: stamps never run backwards in commit order, even when the clock steps back."""
    row = tx.q(
        "UPDATE clusters SET last_seq = last_seq + 1, generation = ?, "
        "updated_at = CASE WHEN updated_at > ? THEN updated_at ELSE ? END WHERE id = ? "
        "RETURNING last_seq, updated_at",
        (generation, now, now, cluster_id),
    )[0]
    seq, at = int(row[0]), float(row[1])
    tx.x(
        "INSERT INTO events (cluster_id, seq, kind, generation, payload, at) VALUES (?, ?, ?, ?, ?, ?)",
        (cluster_id, seq, kind, generation, json.dumps(payload, separators=(",", ":")), at),
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


def prune_events(tx: Tx, cluster_id: str, now: float, max_age_s: float | None, max_count: int | None) -> int:
    """Delete the cluster's events older than `max_age_s` or beyond the newest `max_count`, never the last one;
    clusters.pruned_seq records the horizon (a watcher resuming below it starts over with a snapshot)."""
    head = tx.q("SELECT last_seq, pruned_seq FROM clusters WHERE id = ?", (cluster_id,))
    if not head:
        return 0
    last, pruned = int(head[0][0]), int(head[0][1])
    cut = pruned
    if max_count is not None:
        cut = max(cut, last - max(1, max_count))
    if max_age_s is not None:
        old = tx.q(
            "SELECT MAX(seq) FROM events WHERE cluster_id = ? AND at < ?", (cluster_id, now - max_age_s)
        )[0][0]
        if old is not None:
            cut = max(cut, min(int(old), last - 1))
    if cut <= pruned:
        return 0
    n = tx.x("DELETE FROM events WHERE cluster_id = ? AND seq <= ?", (cluster_id, cut))
    tx.x("UPDATE clusters SET pruned_seq = ? WHERE id = ?", (cut, cluster_id))
    return n
