"""The stateful registry: clusters and live state in SQLite or PostgreSQL, and reservations with leases.

`open_store(url)` picks the backend; `Registry` holds the rules (reserve, commit, release, renew, expiry).
"""

from placement.registry.model import (
    Aborted,
    NotFound,
    Refused,
    Reservation,
    ReservationStatus,
    StaleGeneration,
)
from placement.registry.registry import Registry, ReserveOutcome, StateView, request_hash
from placement.registry.store import Store, default_url, open_store

__all__ = [
    "Aborted",
    "NotFound",
    "Refused",
    "Registry",
    "Reservation",
    "ReservationStatus",
    "ReserveOutcome",
    "StaleGeneration",
    "StateView",
    "Store",
    "default_url",
    "open_store",
    "request_hash",
]
