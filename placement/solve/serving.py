"""Placement of serving jobs: the serving job as ranks and weighted groups the solver knows, `place()`, and the
answer chosen by the serving objective among the solver's mapping and the scheduler baselines'.

Owns `serving_traffic_job` (the explicit job) and `place_serving` / `evaluate_serving`.

**Groups** (labels, per output token: the solver's step model sums them): ``tp`` (each decode TP group, an
all-reduce of ``b h`` activations, ``L + (L - Lr)`` per token), ``ep`` (each decode EP group, all-to-all of the
dispatch and combine bytes a member sends, ``Lr`` per token), ``pp`` edges between a replica's stages, and the
prefill pool's ``prefill_tp`` / ``prefill_ep`` groups and the ``kv`` handoff edges (prefill replica -> the decode
replica it feeds) once per request, so weighted by ``1 / output_tokens`` per token.

**Rules.** Each EP group prefers the lowest level whose domains can hold it (an NVLink domain where it fits,
else a leaf: the fewest leaves), and TP groups the lowest level that holds them (`ServingPlacement.ep_level`
overrides; `require_ep` makes it hard). Replicas spread over fault domains (`ServingPlacement.spread`, on by
default): the job covers at least as many domains of the kind as it has replicas (or all there are).

**Objective.** Time per output token, then time to first token; with ``load.tpot_bound_ms``, the most tokens/s
among the mappings within the bound (then the least TPOT). The answer is the best of the solver's mapping
(`placement.solve.run.place` on the explicit job) and every scheduler baseline's, each priced by
`placement.cost.serving.model_serving`, so it is never worse than a baseline's row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from placement.cost.report import InvalidMappingError
from placement.cost.serving import ServingReport, dispatch_token_bytes, model_serving
from placement.errors import InfeasibleError, InputError, Problem
from placement.model.job import CollectiveKind, Constraints, Edge, Group, Job, SpreadRule
from placement.model.serving import DTYPE_BYTES, ServingJob, pool_ranks
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic
from placement.model.validate import excluded_devices, validate
from placement.solve.baselines import BASELINES, why_none
from placement.solve.run import place
from placement.solve.types import SolveOptions

__all__ = [
    "ServingResult",
    "compare_serving",
    "evaluate_serving",
    "explicit_shape",
    "fitting_level",
    "objective_key",
    "packed_replicas",
    "place_serving",
    "serving_rule_problems",
    "serving_traffic_job",
]


@dataclass
class ServingResult:
    """A placed serving job: the mapping chosen (`chosen`: ``solver`` or a baseline's name), its serving report,
    every candidate's report (None: it found no valid mapping), the explicit job the solver placed and its notes."""

    mapping: list[int]
    report: ServingReport
    chosen: str
    candidates: dict[str, ServingReport | None] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)
    """Candidates whose mapping breaks a rule of the job (a baseline that does not spread): the first broken rule;
    they are priced, not chosen. For a candidate with no mapping (no report): why it found none."""
    job: Job | None = None
    status: str = ""
    notes: list[str] = field(default_factory=list)


def fitting_level(topology: Topology, size: int) -> str:
    """The lowest level of `topology` with a domain of at least `size` devices (the top level if none)."""
    for li in range(len(topology.levels)):
        if max((len(d) for d in topology.devices_in_domain[li]), default=0) >= size:
            return topology.levels[li].name
    return topology.levels[-1].name


def _spread_kind(topology: Topology, state: ClusterState, job: ServingJob) -> str | None:
    if job.placement.spread_kind:
        return job.placement.spread_kind
    if state.fault_domains:
        return sorted(state.fault_domains)[0]
    return topology.levels[1].name if len(topology.levels) > 1 else None


def serving_rule_problems(
    topology: Topology, state: ClusterState, job: ServingJob, rules: str = "placement"
) -> list[Problem]:
    """The names `job`'s placement rules give, checked against the cluster: ``ep_level`` a level of `topology`,
    ``spread_kind`` a fault domain kind of `state` or a level. Paths under `rules` (``placement`` in a serving job
    file, ``rules`` in the message)."""
    out: list[Problem] = []
    r = job.placement
    if r.ep_level and r.ep_level not in topology.level_names:
        out.append(
            Problem(
                f"{rules}.ep_level",
                f"unknown level {r.ep_level!r}; levels are {list(topology.level_names)}",
            )
        )
    kinds = state.fault_kinds(topology)
    if r.spread_kind and r.spread_kind not in kinds:
        out.append(
            Problem(
                f"{rules}.spread_kind",
                f"unknown fault domain kind {r.spread_kind!r}; kinds are {list(kinds)} (the state's fault "
                "domains and the cluster's levels)",
            )
        )
    return out


def serving_traffic_job(topology: Topology, state: ClusterState, job: ServingJob) -> Job:
    """The explicit job the solver places for `job` (module doc). Raises `InputError` naming the rule when
    `job`'s rules name a level or a fault domain kind the cluster does not have (`serving_rule_problems`)."""
    bad = serving_rule_problems(topology, state, job)
    if bad:
        raise InputError(f"serving job {job.name!r}", bad)
    m, load = job.model, job.load
    act = DTYPE_BYTES[m.activation_dtype]
    groups: list[Group] = []
    edges: list[Edge] = []
    per_request = 1.0 / load.output_tokens
    for role in [p.role for p in job.pools]:
        pool = next(p for p in job.pools if p.role == role)
        decode = role != "prefill"
        pre = "" if decode else "prefill_"
        tokens = load.batch / pool.pp if decode else load.prefill_batch * load.prompt_tokens
        weight = 1.0 if decode else per_request
        for rep in range(pool.replicas):
            for st in range(pool.pp):
                stage = pool_ranks(job, role, rep, st)
                if pool.tp > 1:
                    size = tokens / pool.attention_dp * m.hidden * act
                    count = (2 * m.layers - m.routed_layers) / pool.pp * weight * (pool.pp if decode else 1)
                    for dp in range(pool.attention_dp):
                        members = pool_ranks(job, role, rep, st, dp)
                        groups.append(Group(f"{pre}tp", CollectiveKind.ALL_REDUCE, members, size, count))
                if m.moe and pool.ep > 1:
                    per = tokens / pool.ep * m.top_k
                    size = per * (dispatch_token_bytes(job) + m.hidden * act)
                    count = m.routed_layers / pool.pp * weight * (pool.pp if decode else 1)
                    for j in range(pool.moe_tp):
                        groups.append(
                            Group(f"{pre}ep", CollectiveKind.ALL_TO_ALL, stage[j :: pool.moe_tp], size, count)
                        )
                if st + 1 < pool.pp:
                    nxt = pool_ranks(job, role, rep, st + 1)
                    size = tokens * m.hidden * act / pool.stage_ranks
                    for a, b in zip(stage, nxt, strict=True):
                        edges.append(Edge(f"{pre}pp", a, b, size, weight * (pool.pp if decode else 1)))
    if job.disaggregated:
        pre_pool, dec_pool = job.prefill_pool, job.decode_pool
        kv = load.prompt_tokens * m.kv_bytes_per_token / pre_pool.pp
        for rep in range(pre_pool.replicas):
            for st in range(pre_pool.pp):
                a = pool_ranks(job, "prefill", rep, st, 0)[0]
                b = pool_ranks(job, "decode", rep % dec_pool.replicas, st * dec_pool.pp // pre_pool.pp, 0)[0]
                edges.append(Edge("kv", a, b, kv, per_request))
    prefer: dict[str, str] = {}
    require: dict[str, str] = {}
    for role in [p.role for p in job.pools]:
        pool = next(p for p in job.pools if p.role == role)
        pre = "prefill_" if role == "prefill" else ""
        if pool.tp > 1:
            prefer[f"{pre}tp"] = fitting_level(topology, pool.tp)
        if m.moe and pool.ep > 1:
            level = job.placement.ep_level or fitting_level(topology, pool.ep)
            (require if job.placement.require_ep else prefer)[f"{pre}ep"] = level
    spread: tuple[SpreadRule, ...] = ()
    replicas = sum(p.replicas for p in job.pools)
    kind = _spread_kind(topology, state, job) if job.placement.spread and replicas > 1 else None
    if kind is not None:
        domains = len(set(state.fault_domain_of(kind, topology).values()))
        spread = (SpreadRule(kind, "job", min_domains=min(replicas, domains)),)
    return Job(
        job.name,
        job.ranks,
        device_kind=job.device_kind,
        groups=tuple(groups),
        edges=tuple(edges),
        constraints=Constraints(require=require, prefer=prefer, spread=spread),
    )


def explicit_shape(job: Job, description: str = "") -> dict[str, object]:
    """`job` (an explicit job: a serving job's `serving_traffic_job`) as a native job document of its traffic
    alone: ranks, device kind, groups and edges, no rules. The form a state's ``occupied[].shape`` takes, so a
    serving deployment's per-token flows are read back as any running job's (`placement.io.native.job`)."""
    doc: dict[str, object] = {"ranks": job.ranks}
    if description:
        doc["description"] = description
    if job.device_kind:
        doc["device_kind"] = job.device_kind
    doc["groups"] = [
        {
            "label": g.label,
            "kind": g.kind.value,
            "members": list(g.members),
            "bytes": g.bytes,
            "count": g.count,
        }
        | ({"exposed": g.exposed} if g.exposed != 1.0 else {})
        for g in job.groups
    ]
    doc["edges"] = [
        {"label": e.label, "src": e.src, "dst": e.dst, "bytes": e.bytes, "count": e.count}
        | ({"exposed": e.exposed} if e.exposed != 1.0 else {})
        for e in job.edges
    ]
    return doc


def packed_replicas(
    topology: Topology, state: ClusterState, job: ServingJob, explicit: Job
) -> list[int] | None:
    """A serving-aware candidate: each replica (decode first, then prefill) whole inside one domain of the level
    that fits its EP group (or its replica), best fit, preferring a domain no replica uses yet (spread) and, for a
    prefill replica, the domain of the decode replica it feeds (near); devices in index order (hosts whole).
    None when some replica fits in no domain."""
    excluded, _ = excluded_devices(topology, explicit)
    free = [
        d
        for d in range(topology.num_devices)
        if state.usable(d)
        and d not in excluded
        and (job.device_kind is None or topology.devices[d].kind == job.device_kind or _unknown(topology, d))
    ]
    order = sorted(job.pools, key=lambda p: p.role != "decode")
    mapping = [-1] * job.ranks
    used_domains: set[int] = set()
    home: dict[int, int] = {}
    left = set(free)
    for pool in order:
        size = pool.replica_ranks
        level = topology.level_index(fitting_level(topology, size))
        domains = topology.devices_in_domain[level]
        for rep in range(pool.replicas):
            fits = [k for k, devs in enumerate(domains) if sum(1 for d in devs if d in left) >= size]
            if not fits:
                return None
            feeds = home.get(rep % max(1, job.decode_pool.replicas)) if pool.role == "prefill" else None

            room = {x: sum(1 for d in domains[x] if d in left) for x in fits}
            k = min(fits, key=lambda x: (x != feeds, x in used_domains, room[x], x))
            devs = [d for d in domains[k] if d in left][:size]
            base = job.pool_offset(pool.role) + rep * size
            for i, d in enumerate(devs):
                mapping[base + i] = d
                left.discard(d)
            used_domains.add(k)
            if pool.role != "prefill":
                home[rep] = k
    return mapping


def _unknown(topology: Topology, d: int) -> bool:
    return topology.devices[d].kind in ("", "gpu")


def objective_key(job: ServingJob, r: ServingReport) -> tuple[float, ...]:
    """The serving objective as a sort key (smaller is better): TPOT then TTFT, or with ``load.tpot_bound_ms`` the
    mappings within the bound first, by most tokens/s."""
    bound = job.load.tpot_bound_ms
    if bound is not None:
        within = r.tpot_seconds * 1e3 <= bound
        return (0.0 if within else 1.0, -r.tokens_per_s if within else r.tpot_seconds, r.tpot_seconds)
    return (r.tpot_seconds, r.ttft_seconds)


def evaluate_serving(
    topology: Topology, state: ClusterState, job: ServingJob, mapping: Sequence[int], *, check: bool = True
) -> ServingReport:
    """The serving report of `job` on `mapping` (`placement.cost.serving.model_serving`). With `check` (the default)
    the mapping is first validated against the job's rules (`serving_traffic_job`) and refused with
    `InvalidMappingError` if it breaks any, as `placement.cost.evaluate.evaluate` does for training jobs."""
    if check:
        explicit = serving_traffic_job(topology, state, job)
        violations = validate(topology, state, explicit, mapping, traffic=job_traffic(explicit))
        if violations:
            raise InvalidMappingError(violations)
    return model_serving(topology, state, job, mapping)


def place_serving(
    topology: Topology,
    state: ClusterState,
    job: ServingJob,
    options: SolveOptions | None = None,
    *,
    baselines: Mapping[str, object] | None = None,
) -> ServingResult:
    """Place `job` (module doc). Raises `InfeasibleError` when neither the solver nor a baseline finds a mapping."""
    explicit = serving_traffic_job(topology, state, job)
    traffic = job_traffic(explicit)
    candidates: dict[str, ServingReport | None] = {}
    mappings: dict[str, list[int]] = {}
    missing: dict[str, str] = {}  # a baseline with no mapping: why (`broken` carries it, beside no report)
    notes: list[str] = []
    status = ""
    try:
        res = place(topology, state, explicit, options, traffic=traffic)
        if res.mapping is not None:
            mappings["solver"] = list(res.mapping)
        status = res.status.name if hasattr(res.status, "name") else str(res.status)
    except InfeasibleError as e:
        notes.append(f"solver: {e}")
    for name, fn in (baselines if baselines is not None else BASELINES).items():
        try:
            got = fn(topology, state, explicit, traffic)  # type: ignore[operator]
        except InfeasibleError:
            got = None
        if got is None:
            candidates[name] = None
            missing[name] = why_none(topology, state, explicit, traffic, name)
        else:
            mappings[name] = list(got)
    packed = packed_replicas(topology, state, job, explicit)
    if packed is not None:
        mappings["serving-packed"] = packed
    broken: dict[str, str] = dict(missing)
    for name, mp in mappings.items():
        violations = validate(topology, state, explicit, mp, traffic=traffic)
        if violations:
            broken[name] = str(violations[0])
        candidates[name] = model_serving(topology, state, job, mp)
    scored = [(n, r) for n, r in candidates.items() if r is not None and n not in broken]
    if not scored:
        raise InfeasibleError(
            [f"no placement of the serving job {job.name!r} ({job.ranks} ranks) satisfies the rules", *notes]
        )
    best_name, best = min(scored, key=lambda nr: (objective_key(job, nr[1]), nr[0] != "solver", nr[0]))
    kinds = explicit.constraints.spread
    if kinds:
        notes.append(
            f"replicas spread over >= {kinds[0].min_domains} {kinds[0].kind} domains (placement.spread: false turns it off)"
        )
    return ServingResult(
        mappings[best_name], best, best_name, candidates, broken, explicit, status or "FEASIBLE", notes
    )


def compare_serving(
    topology: Topology, state: ClusterState, jobs: Sequence[ServingJob], options: SolveOptions | None = None
) -> list[tuple[ServingJob, ServingResult | None, str | None]]:
    """Place each serving job alone on the same state (`place_serving`); ranked by the serving objective
    (`objective_key`: TPOT then TTFT, or the most tokens/s within the TPOT bound when every job has the same bound;
    TPOT then TTFT when their bounds differ), then name; infeasible ones last, with the reason."""
    rows: list[tuple[ServingJob, ServingResult | None, str | None]] = []
    for job in jobs:
        try:
            rows.append((job, place_serving(topology, state, job, options), None))
        except InfeasibleError as e:
            rows.append((job, None, "; ".join(e.reasons)))

    one_bound = len({j.load.tpot_bound_ms for j in jobs}) <= 1

    def key(row: tuple[ServingJob, ServingResult | None, str | None]) -> tuple[bool, tuple[float, ...], str]:
        res = row[1]
        if res is None:
            return (True, (), row[0].name)
        r = res.report
        return (
            False,
            objective_key(row[0], r) if one_bound else (r.tpot_seconds, r.ttft_seconds),
            row[0].name,
        )

    rows.sort(key=key)
    return rows
