"""The answer memo of a solve worker: Place answers kept by a digest of the whole request, so that a scheduler
asking the same question again (same cluster, state, job and options) gets the answer without a new solve.

Bounded (entries and bytes, least recently used out first); only complete answers are kept. A request that names a
registry cluster (`cluster_id`) is keyed by the state the registry resolved for it (its content, holds included) and
answered only for the same topology object (a cluster put again is a new one).
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.v1 import placement_pb2 as pb

__all__ = ["MEMO_NOTE", "AnswerMemo", "state_text"]

MEMO_NOTE = "answered_from"
"""The stats note a memo answer carries (``memo``): the numbers are those of the solve that first answered it."""


class AnswerMemo:
    """Serialized PlaceResponses by request digest; at most `entries` answers and `max_bytes` bytes."""

    def __init__(self, entries: int, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.entries = entries
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._answers: OrderedDict[bytes, tuple[bytes, Topology | None]] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(
        request: pb.PlaceRequest,
        time_limit_s: float,
        solver_threads: int,
        resolved: tuple[Topology, ClusterState] | None = None,
    ) -> bytes | None:
        """The digest of everything the answer depends on: the request's bytes (cluster, state, job, options)
        and what the server adds (the time limit it grants, CP-SAT threads); for a request that names a registry
        cluster (`cluster_id`), also the content of the state the registry `resolved` for it (None without it)."""
        h = hashlib.sha256()
        h.update(request.SerializeToString(deterministic=True))
        h.update(f"|{time_limit_s!r}|{solver_threads}".encode())
        if request.cluster_id:
            if resolved is None:
                return None
            h.update(b"|state|")
            h.update(state_text(resolved[1]).encode())
        return h.digest()

    def get(self, key: bytes, topology: Topology | None = None) -> pb.PlaceResponse | None:
        """The kept answer for `key` (and, for a registry cluster, the same `topology` object), marked as a memo
        answer (`MEMO_NOTE`), or None."""
        with self._lock:
            entry = self._answers.get(key)
            if entry is None or entry[1] is not topology:
                self.misses += 1
                return None
            self._answers.move_to_end(key)
            self.hits += 1
        resp = pb.PlaceResponse.FromString(entry[0])
        resp.result.stats.notes[MEMO_NOTE] = "memo"
        return resp

    def put(self, key: bytes, response: pb.PlaceResponse, topology: Topology | None = None) -> None:
        data = response.SerializeToString()
        if self.entries <= 0 or len(data) > self.max_bytes:
            return
        with self._lock:
            old = self._answers.pop(key, None)
            if old is not None:
                self._bytes -= len(old[0])
            self._answers[key] = (data, topology)
            self._bytes += len(data)
            while len(self._answers) > self.entries or self._bytes > self.max_bytes:
                _, dropped = self._answers.popitem(last=False)
                self._bytes -= len(dropped[0])

    def __len__(self) -> int:
        with self._lock:
            return len(self._answers)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes


def state_text(state: ClusterState) -> str:
    """Every field of `state` in one canonical text (mappings and sets sorted): equal texts, equal states."""
    return "|".join(f"{f.name}={_canon(getattr(state, f.name))}" for f in dataclasses.fields(state))


def _canon(x: Any) -> str:
    if isinstance(x, Mapping):
        return "{" + ",".join(sorted(f"{k!r}:{_canon(v)}" for k, v in x.items())) + "}"
    if isinstance(x, frozenset | set):
        return "{" + ",".join(sorted(repr(v) for v in x)) + "}"
    return repr(x)
