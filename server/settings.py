"""Server settings: one frozen dataclass, read from flags and PLACEMENT_* environment variables (flags win).

Owns the defaults and limits of the gRPC server, and where each value came from; nothing here talks to the network.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from placement import __version__
from placement.limits import Limits, parse_limit_overrides

__all__ = ["ENV_PREFIX", "Settings", "env_name", "parse_settings"]

ENV_PREFIX = "PLACEMENT_"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Settings:
    """Everything the server needs to start. Every field has a flag ``--a-b`` and a variable ``PLACEMENT_A_B``,
    except `host`: its variable is PLACEMENT_SERVER_HOST (PLACEMENT_HOST is a node's name, for `placement bind`
    and the exported launch scripts). `origin` says where each value set came from (`source_of`)."""

    host: str = field(
        default="[::]",
        metadata={"help": "address to listen on (a name or IP of this machine)", "env": "SERVER_HOST"},
    )
    port: int = field(default=50051, metadata={"help": "gRPC port (0: pick a free one)"})
    workers: int = field(default_factory=_cores, metadata={"help": "concurrent solves (default: the cores)"})
    solve_mode: str = field(
        default="process",
        metadata={
            "help": "where solves run: process (a worker process per solve slot, past the GIL) or thread "
            "(in the server's process)"
        },
    )
    solver_threads: int = field(
        default=0, metadata={"help": "CP-SAT threads per solve (0: cores / workers, at least 2)"}
    )
    answer_memo: int = field(
        default=256,
        metadata={
            "help": "Place answers kept for repeated requests (per process: each solve worker has its own), by "
            "a digest of the whole request (cluster, state, job, options; for a cluster_id, the registry state "
            "it resolves to); 0: off"
        },
    )
    queue_limit: int = field(default=64, metadata={"help": "requests waiting for a solver beyond `workers`"})
    max_message_bytes: int = field(default=32 * 1024 * 1024, metadata={"help": "largest request accepted"})
    max_queued_bytes: int = field(
        default=256 * 1024 * 1024,
        metadata={"help": "request bytes the running and waiting calls may hold together (memory bound)"},
    )
    max_devices: int = field(default=200_000, metadata={"help": "largest cluster (devices) accepted"})
    max_ranks: int = field(default=32_768, metadata={"help": "largest job (ranks) accepted"})
    max_jobs: int = field(default=64, metadata={"help": "most jobs in one Compare"})
    default_time_limit_s: float = field(default=10.0, metadata={"help": "solver time limit when unset"})
    max_time_limit_s: float = field(default=120.0, metadata={"help": "cap on a request's time limit"})
    deadline_margin_s: float = field(
        default=0.05, metadata={"help": "kept free before a deadline (plus 10%%)"}
    )
    grace_s: float = field(default=10.0, metadata={"help": "SIGTERM: time for in-flight calls to finish"})
    drain_s: float = field(default=0.0, metadata={"help": "SIGTERM: NOT_SERVING this long before closing"})
    log_level: str = field(default="INFO", metadata={"help": "DEBUG, INFO, WARNING or ERROR"})
    tls_cert: str | None = field(default=None, metadata={"help": "PEM certificate chain file (enables TLS)"})
    tls_key: str | None = field(default=None, metadata={"help": "PEM private key file"})
    token: str | None = field(
        default=None, metadata={"help": "bearer token callers must send (prefer the env)"}
    )
    token_file: str | None = field(default=None, metadata={"help": "file holding the bearer token"})
    tls_client_ca: str | None = field(
        default=None,
        metadata={"help": "PEM CA bundle: require client certificates signed by it (mTLS; needs TLS)"},
    )
    metrics_port: int | None = field(
        default=9464, metadata={"help": "Prometheus port (0: free one, -1: off)"}
    )
    metrics_host: str = field(
        default="127.0.0.1", metadata={"help": "Prometheus address (default: localhost only)"}
    )
    metrics_require_token: bool = field(
        default=False,
        metadata={"help": "metrics also require the bearer token"},
    )
    limits: str = field(
        default="",
        metadata={
            "help": "request limits, e.g. max_pins=65536,max_hosts=100000 (see placement.limits.Limits)"
        },
    )
    registry: str = field(
        default="",
        metadata={
            "help": "ClusterRegistry store: sqlite:///PATH, postgresql://USER@HOST:PORT/DB, or off "
            "(default: an SQLite file under ~/.local/state/placement)"
        },
    )
    lease_sweep_s: float = field(
        default=1.0, metadata={"help": "how often expired reservation leases are swept"}
    )
    registry_probe_s: float = field(
        default=1.0,
        metadata={
            "help": "how often the registry's store is probed (SELECT 1, timeout the same); health of "
            "placement.v1.ClusterRegistry and of the server follows it"
        },
    )
    registry_keep_ended_s: float = field(
        default=7 * 24 * 3600.0,
        metadata={
            "help": "ended reservations (and their idempotency keys) are deleted this long after they ended "
            "(0: at the next compaction)"
        },
    )
    registry_event_max_age_s: float = field(
        default=7 * 24 * 3600.0, metadata={"help": "registry events older than this are deleted"}
    )
    registry_event_max_count: int = field(
        default=100_000, metadata={"help": "registry events kept per cluster at most"}
    )
    registry_compact_s: float = field(
        default=60.0, metadata={"help": "how often ended reservations and old events are compacted"}
    )
    registry_reply_margin_s: float = field(
        default=0.02,
        metadata={
            "help": "a Reserve commits only with at least this much of its caller's deadline left (time to "
            "send the answer); else it is rolled back"
        },
    )
    origin: tuple[tuple[str, str], ...] = field(
        default=(), compare=False, repr=False, metadata={"flag": False}
    )
    """(field, "--flag" or "PLACEMENT_VAR") for the values parse_settings read; not a setting itself."""

    def __post_init__(self) -> None:
        problems: list[str] = []
        for name in (
            "workers",
            "queue_limit",
            "max_message_bytes",
            "max_devices",
            "max_ranks",
            "max_jobs",
            "max_queued_bytes",
        ):
            if getattr(self, name) < (0 if name == "queue_limit" else 1):
                problems.append(
                    f"{name} must be >= {0 if name == 'queue_limit' else 1}, got {getattr(self, name)}"
                )
        if self.solve_mode not in ("process", "thread"):
            problems.append(f"solve_mode must be process or thread, got {self.solve_mode!r}")
        if not 0 <= self.port <= 65535:
            problems.append(f"port must be in 0..65535, got {self.port}")
        for name in ("default_time_limit_s", "max_time_limit_s"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("lease_sweep_s", "registry_probe_s", "registry_compact_s"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("registry_keep_ended_s", "registry_event_max_age_s", "registry_reply_margin_s"):
            if not getattr(self, name) >= 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.registry_event_max_count < 1:
            problems.append(f"registry_event_max_count must be >= 1, got {self.registry_event_max_count}")
        if (
            self.registry
            and self.registry != "off"
            and not self.registry.startswith(("sqlite://", "postgresql://", "postgres://"))
        ):
            problems.append(
                f"registry must be sqlite:///PATH, postgresql://... or off, got {self.registry!r}"
            )
        for name in ("deadline_margin_s", "grace_s", "drain_s", "solver_threads", "answer_memo"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.log_level.upper() not in _LOG_LEVELS:
            problems.append(f"log_level must be one of {', '.join(_LOG_LEVELS)}, got {self.log_level!r}")
        for name in ("tls_cert", "tls_key", "tls_client_ca", "token_file"):
            if getattr(self, name) == "":
                problems.append(f"{name} is empty: give a file, or leave it unset")
        if (self.tls_cert is None) != (self.tls_key is None):
            problems.append("tls_cert and tls_key go together")
        if self.token is not None and self.token_file is not None:
            problems.append("give token or token_file, not both")
        if self.token is not None and not self.token.strip():
            problems.append("token is empty: give a token, or leave it unset to run without auth")
        if self.tls_client_ca is not None and self.tls_cert is None:
            problems.append("tls_client_ca (mTLS) needs tls_cert and tls_key")
        if self.metrics_require_token and self.token is None and self.token_file is None:
            problems.append("metrics_require_token needs a token or token_file")
        try:
            self.request_limits()
        except ValueError as e:
            problems.append(f"limits: {e}")
        if problems:
            raise ValueError("invalid settings: " + "; ".join(problems))

    @property
    def threads_per_solve(self) -> int:
        """CP-SAT workers per solve: the cores shared by the concurrent solves unless set, and at least 2. With
        one worker CP-SAT interleaves its whole portfolio in that thread: on `make run`'s request that costs
        about 100 ms of CPU a solve, against 55 ms for two threads (same answer), so two threads per solve answer
        more calls a second even where solves outnumber the cores."""
        return self.solver_threads or max(2, _cores() // self.workers)

    def bearer_token(self) -> str | None:
        """The token callers must present, from `token` or `token_file` (stripped); None: auth off.

        Fails closed: an unreadable or empty token file raises ValueError naming it (the server refuses to start).
        """
        if self.token_file is not None:
            try:
                text = Path(self.token_file).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as e:
                raise ValueError(
                    f"token_file {self.token_file}: cannot read it ({getattr(e, 'strerror', None) or e})"
                    "; the server does not start without the token it was told to require"
                ) from None
            if not text:
                raise ValueError(
                    f"token_file {self.token_file} is empty; the server does not start without the "
                    "token it was told to require"
                )
            return text
        if self.token is not None:
            if not self.token.strip():
                raise ValueError(
                    "token is empty; the server does not start without the token it was told to require"
                )
            return self.token.strip()
        return None

    def request_limits(self) -> Limits:
        """The per-request limits: the defaults, max_devices and max_ranks, then the `limits` overrides."""
        base = Limits().replace(
            max_devices=self.max_devices,
            max_ranks=self.max_ranks,
            max_pins=min(Limits().max_pins, self.max_ranks),
            max_mapping_entries=max(Limits().max_mapping_entries, self.max_ranks),
        )
        return parse_limit_overrides(self.limits, base) if self.limits else base

    def replace(self, **changes: object) -> Settings:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def source_of(self, name: str) -> str:
        """Where the value of field `name` came from: its flag, its variable, or "the default" (or "the caller")."""
        for key, where in self.origin:
            if key == name:
                return where
        value = getattr(self, name)
        f = next(f for f in dataclasses.fields(self) if f.name == name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        return "the default" if value == default else "the caller"


def env_name(name: str) -> str:
    """The environment variable of setting `name`: PLACEMENT_<NAME>, or the one its field names (host)."""
    f = {f.name: f for f in dataclasses.fields(Settings)}[name]
    return ENV_PREFIX + str(f.metadata.get("env", name.upper()))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _convert(f: dataclasses.Field[object], raw: str) -> object:
    kind = str(f.type)
    if f.name in ("token", "token_file", "tls_cert", "tls_key", "tls_client_ca"):
        return raw  # an empty value is an error (checked by Settings), never a silent "off"
    if raw == "" and "None" in kind:
        return None
    if kind.startswith("bool"):
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise ValueError(raw)
    if kind.startswith("int"):
        return int(raw)
    if kind.startswith("float"):
        return float(raw)
    return raw


def _legacy_bools(argv: Sequence[str], names: Sequence[str]) -> list[str]:
    """``--metrics-require-token true`` (how the flag was written before it was a flag) as ``--metrics-require-token``
    / ``--no-metrics-require-token``, with a note on stderr."""
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        flag, eq, value = a.partition("=")
        if flag in names and not eq and i + 1 < len(args) and args[i + 1].lower() in _TRUE + _FALSE:
            value, eq = args[i + 1], "="
            i += 1
        if flag in names and eq:
            if value.lower() not in _TRUE + _FALSE:
                out.append(a)  # argparse refuses it
            else:
                new = flag if value.lower() in _TRUE else "--no-" + flag[2:]
                print(
                    f"placement-server: `{flag} {value}` is deprecated; write {new}",
                    file=sys.stderr,
                    flush=True,
                )
                out.append(new)
        else:
            out.append(a)
        i += 1
    return out


def parse_settings(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``PLACEMENT_*`` variables, overridden by flags. Raises SystemExit(2) on bad values."""
    env = os.environ if environ is None else environ
    fields = {f.name: f for f in dataclasses.fields(Settings) if f.metadata.get("flag", True)}
    ap = argparse.ArgumentParser(
        prog="placement-server",
        description="The placement gRPC server. Every flag also reads PLACEMENT_<FLAG> from the environment "
        "(--host: PLACEMENT_SERVER_HOST).",
    )
    ap.add_argument("--version", action="version", version=f"placement-server {__version__}")
    bools = [_flag(n) for n, f in fields.items() if str(f.type).startswith("bool")]
    for name, f in fields.items():
        help_text = f"{f.metadata.get('help', '')} [env {env_name(name)}]"
        if _flag(name) in bools:
            help_text = f"{f.metadata.get('help', '')} [env {env_name(name)}=true|false]"
            ap.add_argument(
                _flag(name), dest=name, default=None, action=argparse.BooleanOptionalAction, help=help_text
            )
            continue
        ap.add_argument(
            _flag(name), dest=name, default=None, metavar=name.split("_")[-1].upper(), help=help_text
        )
    args = vars(ap.parse_args(_legacy_bools(sys.argv[1:] if argv is None else argv, bools)))
    values: dict[str, object] = {}
    origin: list[tuple[str, str]] = []
    for name, f in fields.items():
        if isinstance(args[name], bool):
            values[name] = args[name]
            origin.append((name, _flag(name) if args[name] else "--no-" + _flag(name)[2:]))
            continue
        where = _flag(name) if args[name] is not None else env_name(name)
        raw = args[name] if args[name] is not None else env.get(env_name(name))
        if raw is None:
            continue
        try:
            values[name] = _convert(f, raw)
        except ValueError:
            ap.error(f"{where}: {raw!r} is not a valid {str(f.type).split(' ')[0]}")
        origin.append((name, where))
    if values.get("metrics_port") == -1:
        values["metrics_port"] = None
    try:
        return Settings(**values, origin=tuple(origin))  # type: ignore[arg-type]
    except ValueError as e:
        ap.error(str(e))
    raise AssertionError("unreachable")  # ap.error exits
