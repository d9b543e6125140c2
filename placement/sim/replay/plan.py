"""What a replay run asks for, checked once for every caller: the policies, seeds and simulation options (named
as the command line spells them), as one `SimConfig` per seed and policy; every problem reported at once."""

from __future__ import annotations

from dataclasses import dataclass

from placement.errors import InputError, Problem
from placement.sim.replay.sim import POLICIES, SimConfig

__all__ = ["ReplayPlan"]


@dataclass(frozen=True)
class ReplayPlan:
    """The replays to run: `policies` (empty: every one of `POLICIES`) x `seeds`, with the options of
    `SimConfig` (`checkpoint_minutes` is its `checkpoint_s` in minutes; `wall_time` its ``deterministic=False``),
    and how the trace is read (`jobs`: the first N arrivals, None: all; `load`: acme-summary's offered load).
    `contention`: running jobs share the fabric (`SimConfig.contention`); ``cpsat-cluster`` needs it (without
    other jobs' traffic it is cpsat-wait), and is in the default policies only with it."""

    policies: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0,)
    backfill: int = 0
    time_limit_s: float = 0.5
    wall_time: bool = False
    failure_rate: float = 0.0
    failure_mode: str = "kill"
    repair_hours: float = 4.0
    arrival_scale: float = 1.0
    max_slowdown: float = 0.0
    checkpoint_minutes: float = 30.0
    restart_s: float = 60.0
    jobs: int | None = None
    load: float = 0.9
    contention: bool = False

    @property
    def policy_names(self) -> tuple[str, ...]:
        return self.policies or tuple(p for p in POLICIES if self.contention or p != "cpsat-cluster")

    def problems(self) -> list[Problem]:
        """Every option outside its range, named by its flag (``--failure-mode``)."""
        checks = [
            (
                "--failure-mode",
                self.failure_mode in ("kill", "repair"),
                f"must be kill or repair, got {self.failure_mode!r}",
            ),
            ("--failure-rate", self.failure_rate >= 0, f"must be >= 0, got {self.failure_rate:g}"),
            ("--repair-hours", self.repair_hours > 0, f"must be > 0, got {self.repair_hours:g}"),
            ("--arrival-scale", self.arrival_scale > 0, f"must be > 0, got {self.arrival_scale:g}"),
            ("--time-limit", self.time_limit_s > 0, f"must be > 0, got {self.time_limit_s:g}"),
            ("--backfill", self.backfill >= 0, f"must be >= 0, got {self.backfill}"),
            (
                "--max-slowdown",
                self.max_slowdown == 0 or self.max_slowdown >= 1,
                f"must be 0 (off) or >= 1, got {self.max_slowdown:g}",
            ),
            ("--jobs", self.jobs is None or self.jobs >= 1, f"must be >= 1, got {self.jobs}"),
            ("--load", 0 < self.load <= 10, f"must be in (0, 10], got {self.load:g}"),
            (
                "--checkpoint-minutes",
                self.checkpoint_minutes > 0,
                f"must be > 0, got {self.checkpoint_minutes:g}",
            ),
            ("--restart-s", self.restart_s >= 0, f"must be >= 0, got {self.restart_s:g}"),
        ]
        out = [Problem(flag, msg) for flag, ok, msg in checks if not ok]
        out += [
            Problem("--policy", f"{p!r} is not one of {list(POLICIES)}")
            for p in self.policies
            if p not in POLICIES
        ]
        if "cpsat-cluster" in self.policies and not self.contention:
            out.append(
                Problem(
                    "--policy",
                    "cpsat-cluster weighs the harm to running jobs' traffic, which only --contention models "
                    "(without it, it is cpsat-wait)",
                )
            )
        return out

    def configs(self) -> list[SimConfig]:
        """One `SimConfig` per seed and policy (seeds outer); InputError naming every problem first."""
        problems = self.problems()
        if problems:
            raise InputError("replay", problems)
        return [
            SimConfig(
                p,
                seed=s,
                backfill=self.backfill,
                time_limit_s=self.time_limit_s,
                deterministic=not self.wall_time,
                failure_rate=self.failure_rate,
                failure_mode=self.failure_mode,
                repair_hours=self.repair_hours,
                arrival_scale=self.arrival_scale,
                max_slowdown=self.max_slowdown,
                checkpoint_s=self.checkpoint_minutes * 60.0,
                restart_s=self.restart_s,
                contention=self.contention,
            )
            for s in self.seeds
            for p in self.policy_names
        ]
