"""`placement registry` as a person reads it: numbers as numbers in the stored state, an update-state summary in
words (the JSON behind --json), a stale generation that exits as a conflict, and a WAIT that says what is
missing to give a start time."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import yaml
from typer.testing import CliRunner

from placement.cli.app import app
from placement.cli.errors import CONFLICT_EXIT, WAIT_EXIT
from server.main import create_server
from server.settings import Settings
from tests.registry_util import cluster_doc, job_dict


@contextlib.contextmanager
def _server(tmp_path: Path) -> Iterator[str]:
    settings = Settings(
        host="127.0.0.1",
        port=0,
        metrics_port=None,
        workers=2,
        registry=f"sqlite://{tmp_path / 'registry.db'}",
    )
    server, port = create_server(settings)
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None).wait(10)


def test_registry_output_reads_as_numbers_and_sentences(tmp_path: Path) -> None:
    cluster_file, diff_file = tmp_path / "c.yaml", tmp_path / "d.yaml"
    cluster_file.write_text(yaml.safe_dump(cluster_doc(2)))
    busy = [f"node01/gpu{g}" for g in range(4)]
    diff_file.write_text(
        yaml.safe_dump({"occupy": [{"job": "ext", "devices": busy}], "fail": ["node02/gpu7"]})
    )
    runner = CliRunner()
    with _server(tmp_path) as s:

        def run(*args: str, code: int = 0) -> str:
            res = runner.invoke(app, ["registry", *args, "--server", s])
            assert res.exit_code == code, res.output
            return str(res.stdout)

        run("put-cluster", str(cluster_file), "--cluster", "c")
        update = ["update-state", "--cluster", "c", "--diff", str(diff_file)]
        said = run(*update, "--generation", "1")
        lines = said.splitlines()
        assert lines[0] == "cluster c: now at generation 1"
        assert "  occupied by ext: 4 devices node01/gpu[0-3]" in lines
        assert "  failed: 1 device node02/gpu7" in lines
        assert not any(line.lstrip().startswith(("{", "changes:")) for line in lines)  # no raw JSON line
        answer = json.loads(run(*update, "--generation", "2", "--json"))
        assert answer["cluster_id"] == "c" and answer["generation"] == "2"  # the RPC's JSON mapping, as is
        stale = runner.invoke(app, ["registry", *update, "--generation", "2", "--server", s])
        assert stale.exit_code == CONFLICT_EXIT and "stale" in stale.output
        state = yaml.safe_load(run("state", "--cluster", "c"))
        assert state["generation"] == 2 and isinstance(state["generation"], int)
        assert isinstance(state["seq"], int) and isinstance(state["cluster_version"], int)


def test_a_wait_on_a_registry_cluster_says_what_is_missing_for_a_start_time(tmp_path: Path) -> None:
    cluster_file, job_file, diff_file = tmp_path / "c.yaml", tmp_path / "j.yaml", tmp_path / "d.yaml"
    cluster_file.write_text(yaml.safe_dump(cluster_doc(2)))
    job = {k: v for k, v in job_dict(8, "train").items() if k != "constraints"}  # TP may span hosts, slowly
    job_file.write_text(yaml.safe_dump(job))
    # every host half busy with an outside job (no expected end): the 8 ranks must span two hosts
    busy = [f"node0{h}/gpu{g}" for h in (1, 2) for g in range(4)]
    diff_file.write_text(yaml.safe_dump({"occupy": [{"job": "ext", "devices": busy}]}))
    runner = CliRunner()
    with _server(tmp_path) as s:
        base = ["--server", s]
        assert (
            runner.invoke(
                app, ["registry", "put-cluster", str(cluster_file), "--cluster", "c", *base]
            ).exit_code
            == 0
        )
        upd = [
            "registry",
            "update-state",
            "--cluster",
            "c",
            "--generation",
            "1",
            "--diff",
            str(diff_file),
            *base,
        ]
        assert runner.invoke(app, upd).exit_code == 0
        res = runner.invoke(
            app, ["registry", "reserve", str(job_file), "--cluster", "c", "--max-slowdown", "1.0001", *base]
        )
    assert res.exit_code == WAIT_EXIT, res.output
    flat = " ".join(res.stdout.split())
    assert "no expected ends known" not in flat and "leases give them)" not in flat
    assert "no device in use has an expected end" in flat
