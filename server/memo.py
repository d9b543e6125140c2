"""The answer memo of a solve worker: Place answers kept by a digest of the whole request, so that a scheduler
asking the same question again (same cluster, state, job and options) gets the answer without a new solve.

Bounded (entries and bytes, least recently used out first); only complete answers of by-value requests are kept.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from placement.v1 import placement_pb2 as pb

__all__ = ["MEMO_NOTE", "AnswerMemo"]

MEMO_NOTE = "answered_from"
"""The stats note a memo answer carries (``memo``): the numbers are those of the solve that first answered it."""


class AnswerMemo:
    """Serialized PlaceResponses by request digest; at most `entries` answers and `max_bytes` bytes."""

    def __init__(self, entries: int, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.entries = entries
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._answers: OrderedDict[bytes, bytes] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(request: pb.PlaceRequest, time_limit_s: float, solver_threads: int) -> bytes | None:
        """The digest of everything the answer depends on: the request's bytes (cluster, state, job, options)
        and what the server adds (the time limit it grants, CP-SAT threads). None for a request that names a
        registry cluster (`cluster_id`: its state lives in the registry, not in the request)."""
        if request.cluster_id:
            return None
        h = hashlib.sha256()
        h.update(request.SerializeToString(deterministic=True))
        h.update(f"|{time_limit_s!r}|{solver_threads}".encode())
        return h.digest()

    def get(self, key: bytes) -> pb.PlaceResponse | None:
        """The kept answer for `key`, marked as a memo answer (`MEMO_NOTE`), or None."""
        with self._lock:
            data = self._answers.get(key)
            if data is None:
                self.misses += 1
                return None
            self._answers.move_to_end(key)
            self.hits += 1
        resp = pb.PlaceResponse.FromString(data)
        resp.result.stats.notes[MEMO_NOTE] = "memo"
        return resp

    def put(self, key: bytes, response: pb.PlaceResponse) -> None:
        data = response.SerializeToString()
        if self.entries <= 0 or len(data) > self.max_bytes:
            return
        with self._lock:
            old = self._answers.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
            self._answers[key] = data
            self._bytes += len(data)
            while len(self._answers) > self.entries or self._bytes > self.max_bytes:
                _, dropped = self._answers.popitem(last=False)
                self._bytes -= len(dropped)

    def __len__(self) -> int:
        with self._lock:
            return len(self._answers)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes
