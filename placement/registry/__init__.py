"""The stateful registry: clusters and live state in SQLite or PostgreSQL, claims (one live claim per device),
and reservations with leases and heartbeats.

`open_store(url)` picks the backend; `Registry` holds the rules (reserve, commit, release, renew, revoke, expiry).
"""

from placement.registry.backends import default_url, open_store
from placement.registry.model import (
    Aborted,
    Busy,
    ClaimConflict,
    InDoubt,
    NotFound,
    Refused,
    Reservation,
    ReservationStatus,
    StaleGeneration,
    StoreFull,
)
from placement.registry.registry import (
    Registry,
    ReserveOutcome,
    StateView,
    UpdateOutcome,
    request_hash,
)
from placement.registry.store import Store

__all__ = [
    "Aborted",
    "Busy",
    "ClaimConflict",
    "InDoubt",
    "NotFound",
    "Refused",
    "Registry",
    "Reservation",
    "ReservationStatus",
    "ReserveOutcome",
    "StaleGeneration",
    "StateView",
    "Store",
    "StoreFull",
    "UpdateOutcome",
    "default_url",
    "open_store",
    "request_hash",
]
