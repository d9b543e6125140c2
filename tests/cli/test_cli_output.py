"""What `placement` prints for a person: the mapping per host in 80 columns, the baseline table (the schedulers and
the best heuristic, each missing mapping with its reason, one row order offline and served), `--json` on every
command with `--output`, a stop reason that agrees with the gap, and the WAIT reasons as plain sentences."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from placement.cli.app import app
from placement.cli.tables import mapping_rows
from placement.io.hostlist import expand_hostlist
from placement.io.native import load_cluster, load_state
from placement.solve.baselines import BASELINES
from tests.cli.test_cli_app import every_command
from tests.conftest import EXAMPLES
from tests.support_server import running

DGX = [str(EXAMPLES / "dgx-h100-4node.yaml"), str(EXAMPLES / "tp8-dp4.yaml")]


def _run(*args: str) -> str:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return str(res.stdout)


def _expand(runs: str) -> set[tuple[int, int]]:
    """The (GPU, rank) pairs a mapping cell names, read back from its words (`gpu0-7: ranks 0-7`, `gpu3: rank 9`,
    `gpu0-3: ranks 0..24 by 8`, `gpu0-1: ranks 3,9`)."""
    pairs: set[tuple[int, int]] = set()
    for part in re.findall(r"gpu[^:]+: ranks? [^g]+", runs):
        gpus_s, ranks_s = part.rstrip(", ").split(": ")
        lo, _, hi = gpus_s.removeprefix("gpu").partition("-")
        gpus = list(range(int(lo), int(hi or lo) + 1))
        words = ranks_s.split(" ", 1)[1]
        if " by " in words:
            span, step = words.split(" by ")
            a, b = span.split("..")
            ranks = list(range(int(a), int(b) + (1 if int(step) > 0 else -1), int(step)))
        elif "," in words:
            ranks = [int(x) for x in words.split(",")]
        else:
            a, _, b = words.partition("-")
            ranks = list(range(int(a), int(b or a) + 1))
        assert len(gpus) == len(ranks), part
        pairs |= set(zip(gpus, ranks, strict=True))
    return pairs


def _read_rows(rows: list[tuple[str, str]]) -> dict[str, set[tuple[int, int]]]:
    """The (GPU, rank) pairs per host that mapping rows name, read back from their words."""
    got: dict[str, set[tuple[int, int]]] = {}
    for host_cell, runs in rows:
        hosts = expand_hostlist(host_cell)
        block = re.fullmatch(r"gpu(\d+)-(\d+): ranks (\d+)-(\d+), (\d+) a host in host order", runs)
        if block is None:
            (host,) = hosts
            got[host] = _expand(runs)
            continue
        g0, g1, r0, r1, k = (int(x) for x in block.groups())
        assert g1 - g0 + 1 == k and r1 - r0 + 1 == k * len(hosts)
        for i, host in enumerate(hosts):  # the i-th host holds the i-th block of k ranks
            got[host] = {(g0 + j, r0 + i * k + j) for j in range(k)}
    return got


def test_mapping_rows_read_back_to_the_mapping() -> None:
    rng = random.Random(5)
    for _ in range(200):
        hosts = [f"node{h:02d}" for h in rng.sample(range(1, 20), rng.randint(1, 6))]
        seats = [(h, g) for h in hosts for g in range(8)]
        if rng.random() < 0.7:
            rng.shuffle(seats)  # any order, strides and all
        seats = seats[: rng.randint(1, len(seats))]
        want: dict[str, set[tuple[int, int]]] = {}
        for rank, (h, g) in enumerate(seats):
            want.setdefault(h, set()).add((g, rank))
        assert _read_rows(mapping_rows(seats)) == want, seats


def test_place_shows_the_mapping_per_host_in_80_columns_and_how_to_get_it_as_a_file() -> None:
    table = _run("place", *DGX, "--deterministic", "--time-limit", "5")
    answer = json.loads(_run("place", *DGX, "--deterministic", "--time-limit", "5", "--output", "json"))
    want: dict[str, set[tuple[int, int]]] = {}
    for rank, a in enumerate(answer["result"]["mapping"]):
        want.setdefault(a["host"], set()).add((int(a["device"].rpartition("/gpu")[2]), rank))
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("the mapping:"))
    assert lines[start] == f"the mapping: 32 ranks on {len(want)} hosts"
    rows = []
    for line in lines[start:]:
        cells = [c.strip() for c in line.strip("│").split("│")]
        if len(cells) == 2 and cells[0] and cells[0] != "host":
            rows.append((cells[0], cells[1]))
    got = _read_rows(rows)
    assert got == want
    assert any("--out result.json" in line for line in lines[start:])
    table_lines = [line for line in lines if line[:1] in "┏┃┡│├└"]
    assert table_lines and max(len(line) for line in table_lines) <= 80


def _baseline_rows(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("against the baselines"))
    rows = []
    for line in lines[start + 4 :]:
        if line.startswith("└"):
            break
        if line.startswith("│"):
            rows.append(line.strip("│").split("│")[0].strip())
    return rows


def test_the_baseline_table_shows_the_schedulers_and_the_best_heuristic_with_reasons() -> None:
    args = [*DGX, "--deterministic", "--time-limit", "5"]
    text = _run("place", *args)
    answer = json.loads(_run("place", *args, "--json"))["result"]
    steps = {b["strategy"]: b.get("step_seconds") for b in answer["baselines"]}
    heuristics = {n: s for n, s in steps.items() if n not in BASELINES}
    best = min((s, n) for n, s in heuristics.items() if s is not None)[1]
    assert _baseline_rows(text) == ["cpsat (answer)", *BASELINES, best]
    # the cluster has no block level: slurm-block has no mapping, and the table says why
    assert steps["slurm-block"] is None
    assert "slurm-block: no block level in the cluster" in " ".join(text.split())
    everything = _baseline_rows(_run("place", *args, "--all-candidates"))
    assert sorted(everything[1:]) == sorted(steps) and everything[1:5] == list(BASELINES)
    missing = [n for n, s in steps.items() if s is None]
    flat = " ".join(_run("place", *args, "--all-candidates").split())
    assert all(f"{n}: " in flat for n in missing), missing  # every "no valid mapping" has its line


def test_offline_and_served_answers_list_the_baselines_in_one_order() -> None:
    args = [*DGX, "--deterministic", "--time-limit", "5", "--all-candidates"]
    here = _baseline_rows(_run("place", *args))
    with running() as r:
        served = _baseline_rows(_run("place", *args, "--server", f"127.0.0.1:{r.port}"))
    assert here == served and len(here) > 6


def test_json_is_an_alias_of_output_json_on_every_command_that_has_output() -> None:
    runner = CliRunner()
    for path, cmd in every_command():
        names = {o for p in cmd.params for o in getattr(p, "opts", [])}
        if "--output" in names:
            assert "--json" in names, path
    args = [*DGX, "--deterministic", "--time-limit", "5"]
    a = json.loads(_run("place", *args, "--json"))
    b = json.loads(_run("place", *args, "--output", "json"))
    assert a["result"]["mapping"] == b["result"]["mapping"] and a["result"]["job"] == "tp8-dp4"
    res = runner.invoke(app, ["evaluate", *DGX, str(EXAMPLES / "mapping-tp8-contiguous.json"), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)


def test_the_stop_reason_never_contradicts_the_gap() -> None:
    text = _run(
        "place",
        str(EXAMPLES / "h100-256.yaml"),
        str(EXAMPLES / "tp2-pp4-dp4-torchrun.yaml"),
        "--state",
        str(EXAMPLES / "h100-256-busy.yaml"),
        "--time-limit",
        "5",
        "--deterministic",
    )
    head = text.splitlines()[0]
    gap = float(re.search(r"gap ([0-9.]+)%", head).group(1))  # type: ignore[union-attr]
    stopped = re.search(r"\(stopped: (.*)\)$", head).group(1)  # type: ignore[union-attr]
    if gap > 0.005:
        assert stopped != "gap closed", head
    assert (
        gap > 1 and "launcher" in stopped
    )  # torchrun's contiguous host blocks, not the search, left the gap


def _half_busy(tmp_path: Path) -> list[str]:
    """4 hosts of 8 GPUs; hosts 1-3 have 4 GPUs busy: a TP8 x DP2 job cannot keep its TP groups whole."""
    cluster = yaml.safe_load((EXAMPLES / "dgx-h100-4node.yaml").read_text())
    busy = [f"node0{h}/gpu{g}" for h in (2, 3, 4) for g in range(4)]
    state = {"occupied": [{"job": "other", "devices": busy}]}
    job = {
        "name": "j",
        "parallel": {"tp": 8, "dp": 2},
        "model": {"parameters": 7e9, "hidden": 4096, "layers": 32, "seq_len": 4096},
    }
    paths = []
    for name, doc in (("c.yaml", cluster), ("s.yaml", state), ("j.yaml", job)):
        (tmp_path / name).write_text(yaml.safe_dump(doc))
        paths.append(str(tmp_path / name))
    return paths


def test_a_wait_reason_says_what_is_needed_what_is_free_and_what_would_fit(tmp_path: Path) -> None:
    c, s, j = _half_busy(tmp_path)
    topo, static = load_cluster(Path(c))
    st = load_state(Path(s), topo, static)
    free_per_host = [
        sum(1 for d in topo.devices if d.host == h and topo.device_index(d.id) not in st.occupied)
        for h in topo.host_names
    ]
    holders = sum(1 for f in free_per_host if f >= 8)
    res = CliRunner().invoke(
        app, ["place", c, j, "--state", s, "--time-limit", "3", "--max-slowdown", "1.01"]
    )
    assert res.exit_code == 5, res.output
    flat = " ".join(res.stdout.split())
    assert "tp groups are split across" in flat, flat
    reason = flat[flat.index("of the 2 tp groups are split") - 2 :]
    assert f"every group needs a node with 8 free devices; {holders} node(s) have them now" in reason
    assert f"room for {holders} group(s); {2 - holders} more node(s) with 8 free devices would let" in reason
    assert "span more than one" not in flat


def test_preempt_piped_keeps_every_cell_whole_in_80_columns(capsys: pytest.CaptureFixture[str]) -> None:
    from placement.cli.commands.preempt import print_preempt
    from placement.v1 import placement_pb2 as pb

    name, domain = "leaf:leaf-rack-017-row-b-hall-3", "leaf:leaf-rack-017-row-b-hall-3"
    victim = pb.Victim(job="train-16", explanation="train-16 (priority 1 < the job's): " + "word " * 40)
    answer = pb.PreemptAnswer(
        name=name,
        victims=[victim],
        gpu_hours=0.25,
        within_bound=True,
        domain=domain,
        cost=pb.StepCost(step_seconds=1.0),
    )
    response = pb.PreemptResponse(
        answers=[answer], recommended=0, proven=True, ideal=pb.StepCost(step_seconds=0.9)
    )
    print_preempt(response, "job", 3.0)
    text = capsys.readouterr().out
    assert "…" not in text
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    # the folded cells read back whole: the answer column's pieces, row by row, join into the name
    start = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    cells = [line.split("│")[2].strip() for line in lines[start + 1 :] if line.startswith("│")]
    assert "".join(cells) == name
    assert " ".join(text.split()).count("word") == 40  # the explanation wrapped, not cut
    print_preempt(response, "job", 3.0, wide=True)
    assert any(len(line) > 80 for line in capsys.readouterr().out.splitlines())  # --wide: one line each


TABLE_COMMANDS = [
    ("place",),
    ("evaluate",),
    ("place-batch",),
    ("preempt",),
    ("repair",),
    ("replay",),
    ("whatif", "sweep"),
    ("whatif", "defrag"),
    ("registry", "list"),
    ("capacity",),
]
"""The commands that print tables."""


def test_every_command_that_prints_a_table_takes_wide() -> None:
    commands = dict(every_command())
    for path in TABLE_COMMANDS:
        cmd = commands[path]
        names = {o for p in cmd.params for o in getattr(p, "opts", [])}  # type: ignore[attr-defined]
        assert "--wide" in names, path


def test_capacity_takes_json_and_fits_80_columns_unless_wide() -> None:
    args = ["capacity", str(EXAMPLES / "h100-256.yaml"), "--state", str(EXAMPLES / "h100-256-busy.yaml")]
    args += ["--shape", "tp8x4", "--shape", "tp8xpp2x16", "--shape", "tp4x2"]
    a = json.loads(_run(*args, "--json"))
    b = json.loads(_run(*args, "--output", "json"))
    for d in (a, b):
        d.pop("stats", None)
    assert a == b and [s["job"] for s in a["shapes"]] == ["tp8x4", "tp8xpp2x16", "tp4x2"]
    narrow = _run(*args).splitlines()
    assert max(len(line) for line in narrow) <= 80
    # the same rows at full width: the per-domain lines on one line each
    wide = _run(*args, "--wide").splitlines()
    assert any("per domain:" in line for line in wide)
    assert len(wide) <= len(narrow)
