"""placement.io.export reading the one result schema (the PlaceResponse JSON) back: `seats_from_document` and
`launch_seats` (kind, affinity, plain mappings and their errors), baseline costs, the json/yaml and retired
formats, and the `placement export` command."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import typing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from placement.cli.commands.export import export_cmd
from placement.cost.report import CostReport
from placement.errors import InputError
from placement.io.export import (
    FORMATS,
    MULTI_FILE,
    RETIRED,
    Seat,
    baseline_costs,
    export,
    export_files,
    launch_seats,
    seats_from_document,
)
from placement.io.native import cluster_from_dict, job_from_dict
from placement.messages.domain import assignments, result_to_proto
from placement.messages.files import dump_message
from placement.solve.types import PlacementResult, SolveStatus, Strategy
from placement.v1 import placement_pb2 as pb
from tests.conftest import ROOT
from tests.support_export import OPTS, S0, S1, SEATS, affinity_topology

# ---- the result schema read back as seats ------------------------------------------------------------------------


def test_the_result_schema_carries_kind_and_affinity_and_round_trips() -> None:
    """The one result schema (docs/results.md: the PlaceResponse JSON) carries each rank's kind and affinity, and
    `seats_from_document` / `launch_seats` read them back."""
    topo = affinity_topology()
    job = job_from_dict({"name": "job", "ranks": 3, "groups": [{"members": [0, 1, 2], "bytes": 1e6}]})
    mapping = [7, 1, 6]
    response = pb.PlaceResponse(result=pb.PlacementResult(job=job.name, mapping=assignments(topo, mapping)))
    doc = json.loads(dump_message(response))
    assert doc["result"]["mapping"] == [  # b/gpu3 has no known affinity: the keys are left out, not guessed
        {"rank": 0, "device": "b/gpu3", "host": "b", "kind": "H100"},
        {"rank": 1, "device": "a/gpu1", "host": "a", "kind": "H100", "cpus": "0-3", "numa_node": 0},
        {"rank": 2, "device": "b/gpu2", "host": "b", "kind": "H100", "cpus": "4-7", "numa_node": 1},
    ]
    back = doc
    assert seats_from_document(back) == [("b", 3), ("a", 1), ("b", 2)]
    assert launch_seats(seats_from_document(back), back) == [
        Seat(0, "b", 3, "H100"),
        Seat(1, "a", 1, "H100", "0-3", 0),
        Seat(2, "b", 2, "H100", "4-7", 1),
    ]
    # a plain mapping gains kind and affinity from the cluster
    assert launch_seats([("b", 2)], None, topo) == [Seat(0, "b", 2, "H100", "4-7", 1)]


def test_cluster_affinity_lists_are_checked() -> None:
    base = {"levels": [{"name": "node", "bandwidth_gbps": 450}], "hosts": [{"name": "a", "node_type": "t"}]}
    with pytest.raises(InputError) as e:
        cluster_from_dict(
            {
                **base,
                "node_types": [
                    {"name": "t", "devices": 2, "cpu_affinity": ["0-3", "x"], "numa_affinity": [0, -2, 2]}
                ],
            },
            "c.yaml",
        )
    text = str(e.value)
    assert "node_types[0].cpu_affinity[1]: 'x' is not a CPU list like 0-47,96-143" in text
    assert (
        "node_types[0].numa_affinity: must be NUMA node numbers (>= 0), or null / -1 for unknown, got [0, -2, 2]"
        in text
    )


def test_baseline_costs_add_the_answers_compute_to_each_baselines_exposed_comm() -> None:
    rep = CostReport(step_seconds=2.0, comm_seconds=0.5, comm_seconds_total=0.9, compute_seconds=1.5)
    costs = baseline_costs(rep, {"first-fit": 0.8, "kueue-tas": None})
    assert costs == {
        "first-fit": {"step_seconds": pytest.approx(2.3), "comm_seconds": 0.8},
        "kueue-tas": {"step_seconds": None, "comm_seconds": None},
    }
    own = CostReport(step_seconds=2.6, comm_seconds=0.8)
    assert baseline_costs(rep, {"first-fit": 0.8}, {"first-fit": own}) == {
        "first-fit": {"step_seconds": 2.6, "comm_seconds": 0.8}
    }
    res = PlacementResult(
        SolveStatus.FEASIBLE,
        Strategy.CPSAT,
        mapping=[0],
        report=rep,
        baselines={"first-fit": 0.8, "kueue-tas": 0.9},
        baseline_reports={"first-fit": own},
    )
    wire = result_to_proto(
        affinity_topology(),
        job_from_dict({"name": "j", "ranks": 2, "edges": [{"src": 0, "dst": 1, "bytes": 1.0}]}),
        res,
        time_limit_s=1.0,
        deadline_limited=False,
    )
    steps = {b.strategy: (b.step_seconds, b.comm_seconds) for b in wire.baselines}
    assert steps["first-fit"] == (2.6, 0.8)  # its own report's step
    assert steps["kueue-tas"] == (pytest.approx(2.0 - 0.5 + 0.9), 0.9)  # the answer's compute plus its comm


def test_seats_from_plain_mappings() -> None:
    assert seats_from_document(["x/gpu1", "y.example.com/gpu12"]) == [("x", 1), ("y.example.com", 12)]
    assert seats_from_document({"1": "x/gpu0", "0": "x/gpu1"}) == [("x", 1), ("x", 0)]
    assert seats_from_document(
        {"mapping": [{"rank": 1, "device": "x/gpu0"}, {"rank": 0, "device": "x/gpu1"}]}
    ) == [("x", 1), ("x", 0)]


def _seat_errors(doc: Any) -> str:
    with pytest.raises(InputError) as info:
        seats_from_document(doc, "r.json")
    return str(info.value)


def test_seats_from_document_errors() -> None:
    assert _seat_errors("x/gpu0") == (
        "r.json: a mapping is a list of device ids, {rank: device}, or [{rank, device}]"
    )
    assert _seat_errors(["x/gpu0", "x/cpu1", "gpu2", 7]) == (
        "r.json: 3 error(s)\n"
        "  - [1]: 'x/cpu1' is not a device id of the form host/gpuK\n"
        "  - [2]: 'gpu2' is not a device id of the form host/gpuK\n"
        "  - [3]: '7' is not a device id of the form host/gpuK"
    )
    assert _seat_errors({"0": "x/gpu0", "2": "x/gpu1"}) == (
        "r.json: ranks [1] have no device; a mapping names a device for every rank 0..2"
    )
    assert _seat_errors({"mapping": [{"rank": "first", "device": "x/gpu0"}]}) == (
        "r.json: mapping[0].rank: must be an integer, got 'first'"
    )
    assert _seat_errors([{"rank": 0, "device": "x/gpu0"}, {"rank": 0, "device": "x/gpu1"}]) == (
        "r.json: [1].device: rank 0 is mapped twice (also at [0].device)"
    )
    assert _seat_errors(["x/gpu0", "x/gpu1", "x/gpu0"]) == (
        "r.json: [2]: x/gpu0 holds ranks 0 and 2; one rank per device"
    )


def _help_formats() -> set[str]:
    """The formats `placement export --help` names for --format (written by hand in the command)."""
    hint = typing.get_type_hints(export_cmd, include_extras=True)["format"]
    return set(re.findall(r"[a-z0-9]+", hint.__metadata__[0].help)) - {"or"}


def test_json_yaml_and_retired_formats() -> None:
    assert json.loads(export("json", [("b", 3), ("b", 1)])) == ["b/gpu3", "b/gpu1"]
    assert yaml.safe_load(export("yaml", [("b", 3)])) == ["b/gpu3"]
    assert json.loads(export("json", SEATS, document={"job": "x"})) == {"job": "x"}
    # the formats the exporter takes are those the command's help offers, and each renders this placement
    assert set(FORMATS) == _help_formats() and len(FORMATS) == len(set(FORMATS))
    opts = replace(OPTS, image="registry/train:1", command=("python", "train.py"))
    for fmt in FORMATS:  # each names both hosts of the placement
        text = export(fmt, SEATS, options=opts)
        assert "node02" in text and "node07" in text, fmt
        if fmt in MULTI_FILE:
            assert len(export_files(fmt, SEATS, options=opts)) == len(SEATS), fmt
    for fmt in RETIRED:  # a retired format says what to use instead, in the library and on the command line
        assert fmt not in FORMATS and fmt not in _help_formats()
    with pytest.raises(ValueError, match="--format env wrote lines no tool reads; use --format dotenv"):
        export("env", SEATS)
    with pytest.raises(
        ValueError, match="--format kueue wrote a status field Kueue sets itself; use --format k8s"
    ):
        export("kueue", SEATS)
    with pytest.raises(ValueError, match="unknown format 'mpi'"):
        export("mpi", SEATS)


# ---- the command line ---------------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "placement.cli.app", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_export_command_writes_dotenv_directories_and_executable_scripts(tmp_path: Path) -> None:
    result = tmp_path / "r.json"
    result.write_text(
        json.dumps(
            {
                "job": "x",
                "mapping": [{"rank": 0, "device": "node02/gpu1"}, {"rank": 1, "device": "node01/gpu3"}],
            }
        )
    )
    res = _cli("export", str(result), "--format", "dotenv", "--out", str(tmp_path / "env"))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (tmp_path / "env").iterdir()) == ["rank-0.env", "rank-1.env"]
    res = _cli("export", str(result), "--format", "slurm", "--out", str(tmp_path / "job.sh"))
    assert res.returncode == 0 and os.access(tmp_path / "job.sh", os.X_OK)
    # the result relative to the directory the export ran in (where sbatch runs), the placement that wrote it
    rel = os.path.relpath(result, Path.cwd())
    assert f"bind --placement {shlex.quote(rel)} --" in (tmp_path / "job.sh").read_text()
    # the python that ran the export, relative to the working directory when it lies inside it (a venv in the
    # checkout), so that the script runs wherever the checkout is
    python = Path(sys.executable).absolute()
    shown = os.path.relpath(python, Path.cwd()) if python.is_relative_to(Path.cwd()) else str(python)
    assert f"{shlex.quote(shown)} -m placement.cli.app bind" in (tmp_path / "job.sh").read_text()
    res = _cli("export", str(result), "--format", "rankfile")
    assert (
        res.returncode == 2
        and "CPU affinity of node01/gpu3, node02/gpu1" in res.stderr
        and "Traceback" not in res.stderr
    )
    res = _cli("export", str(result), "--format", "env")
    assert res.returncode == 2 and "use --format dotenv" in res.stderr


def test_nvidia_smi_affinity_reaches_the_rankfile(tmp_path: Path) -> None:
    """`import nvidia-smi` keeps the CPU/NUMA Affinity columns; a placement on that node carries them to the
    result and the rankfile."""
    from tests.conftest import shared_file

    topo_txt = shared_file("topologies/nvidia_smi_topo/hgx_h100_8gpu_8nic_rail_pix__sglang_issue30401.txt")
    cluster = tmp_path / "node.yaml"
    res = _cli(
        "import", "nvidia-smi", str(topo_txt), "--host", "node02", "--kind", "H100", "--out", str(cluster)
    )
    assert res.returncode == 0, res.stderr
    nt = yaml.safe_load(cluster.read_text())["node_types"][0]
    assert nt["cpu_affinity"] == [S0] * 4 + [S1] * 4 and nt["numa_affinity"] == [0, 0, 0, 0, 1, 1, 1, 1]
    result = tmp_path / "r.json"
    result.write_text(json.dumps(["node02/gpu0", "node02/gpu4", "node02/gpu5"]))
    res = _cli("export", str(result), "--format", "rankfile", "--cluster", str(cluster))
    assert res.returncode == 0, res.stderr
    assert [line for line in res.stdout.splitlines() if line.startswith("rank")] == [
        f"rank 0=node02 slot={S0}",
        f"rank 1=node02 slot={S1}",
        f"rank 2=node02 slot={S1}",
    ]
