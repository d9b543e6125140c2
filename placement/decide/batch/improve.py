"""Improvement moves on a batch answer: re-place each admitted job with the others fixed (`improve`), and give
a job a better placement seen earlier by re-placing the jobs in its way (`swap`).
"""

from __future__ import annotations

import math
import time

from placement.decide.batch.search import BatchSearch
from placement.decide.batch.types import Assign
from placement.model.validate import validate

__all__ = ["improve", "swap"]


def swap(b: BatchSearch, assign: Assign, budget_s: float) -> tuple[Assign, int]:
    """Give a job a better placement found earlier (on another state) by moving the admitted jobs that hold those
    devices: they are placed again after it. Kept when every job stays admitted and the weighted step falls.
    Jobs with the most to gain (weight x seconds above their best placement seen) first."""
    out = dict(assign)
    moves = 0
    end = time.perf_counter() + budget_s

    def gain(j: int) -> float:
        best = min((r.step_seconds for r in b.seen.get(j, {}).values()), default=math.inf)
        return b.jobs[j].weight * (out[j][1].step_seconds - best)

    for j in sorted(out, key=lambda j: -gain(j)):
        if (
            j not in out
            or gain(j) <= 1e-12
            or b.stopped()
            or (not b.options.deterministic and time.perf_counter() >= end)
        ):
            break
        cur = out[j][1]
        for mapping, rep in sorted(
            b.seen[j].items(), key=lambda kv: (kv[1].step_seconds, kv[1].comm_seconds)
        ):
            if rep.step_seconds >= cur.step_seconds - 1e-12:
                break
            owner = {d: k for k, (m, _) in out.items() if k != j for d in m}
            blockers = sorted({owner[d] for d in mapping if d in owner}, key=lambda k: -b.jobs[k].job.ranks)
            if len(blockers) > 3:
                continue
            trial: Assign = {k: v for k, v in out.items() if k != j and k not in blockers}
            if validate(b.topology, b.state_with(trial), b.jobs[j].job, list(mapping), traffic=b.traffic[j]):
                continue
            trial[j] = (list(mapping), rep)
            share = (
                (end - time.perf_counter()) / 4
                if not b.options.deterministic
                else budget_s / max(len(out), 1)
            )
            trial = b.sequential(blockers, max(0.05, share), assign=trial)
            if all(k in trial for k in blockers) and b.key(trial) < b.key(out):
                out = trial
                moves += 1
                break
    return out, moves


def improve(b: BatchSearch, assign: Assign, budget_s: float) -> tuple[Assign, int]:
    """Re-place each admitted job with the others fixed (costliest first), keeping a placement that lowers its
    weighted step; passes repeat while one improves and time is left (one pass when deterministic)."""
    out = dict(assign)
    moves = 0
    end = time.perf_counter() + budget_s
    while True:
        improved = False
        order = sorted(out, key=lambda j: -b.jobs[j].weight * out[j][1].comm_seconds)
        for j in order:
            if b.stopped() or (not b.options.deterministic and time.perf_counter() >= end - 0.05):
                return out, moves
            if out[j][1].comm_seconds <= 0:
                continue
            share = budget_s / max(len(order), 1)
            if not b.options.deterministic:
                share = min(share, end - time.perf_counter())
            got = b.place_one(j, b.state_with(out, skip=j), share)
            if got is not None:
                old, new = out[j][1], got[1]
                if (new.step_seconds, new.comm_seconds) < (
                    old.step_seconds - 1e-12,
                    old.comm_seconds,
                ) or (
                    new.step_seconds <= old.step_seconds + 1e-12
                    and new.comm_seconds < old.comm_seconds - 1e-12
                ):
                    out[j] = got
                    moves += 1
                    improved = True
        if not improved or b.options.deterministic:
            return out, moves
