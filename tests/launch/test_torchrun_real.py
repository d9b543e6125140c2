"""The torchrun recipe run for real: a 4-rank placement on two hosts, exported with `--format torchrun`, and both
hosts' torchrun lines started at once on this machine (torch's own torchrun, static rendezvous on 127.0.0.1). Each
worker runs `placement bind`, which must give it its planned GPU, LOCAL_RANK=0 and WORLD_SIZE=4.

Skips when torch is not importable, except under CI=true (the dev extra installs torch 2.13.0, a CPU build)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# the PlaceResponse JSON mapping that `placement place --out` writes (docs/results.md), cut to what export reads:
# host A holds ranks 0-1 on GPUs 5 and 2 (not in index order), host B ranks 2-3 on GPUs 0 and 7
MAPPING = [("A", 5), ("A", 2), ("B", 0), ("B", 7)]
RESULT = {
    "result": {
        "job": "pair2",
        "mapping": [
            {"rank": r, "device": f"{h}/gpu{k}", "host": h, "kind": "H100"}
            for r, (h, k) in enumerate(MAPPING)
        ],
    }
}
PROBE = "echo rank=$RANK cvd=$CUDA_VISIBLE_DEVICES local=$LOCAL_RANK world=$WORLD_SIZE node=$GROUP_RANK"


def _need_torch() -> None:
    try:
        import torch.distributed.run  # noqa: F401

        return
    except ImportError as e:
        why = f"torch is not importable ({e}); `pip install torch==2.13.0` (the dev extra) installs the CPU build"
    if os.environ.get("CI") == "true":
        pytest.fail(why + "; CI=true, so this fails instead of skipping", pytrace=False)
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wrapper(path: Path, module: str) -> None:
    """`path` execs `python -m module` with this interpreter (the `torchrun` and `placement` console scripts)."""
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {module} "$@"\n')
    path.chmod(0o755)


def test_exported_torchrun_lines_run_under_real_torchrun(tmp_path: Path) -> None:
    _need_torch()
    result = tmp_path / "result.json"
    result.write_text(json.dumps(RESULT))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _wrapper(bin_dir / "torchrun", "torch.distributed.run")
    _wrapper(bin_dir / "placement", "placement.cli.app")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    for var in (
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
        "PLACEMENT_FILE",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "SLURM_PROCID",
    ):
        env.pop(var, None)

    port = _free_port()
    script = tmp_path / "torchrun.sh"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "placement.cli.app",
            "export",
            str(result),
            "--format",
            "torchrun",
            "--out",
            str(script),
            "--master-port",
            str(port),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    text = script.read_text()
    assert "--nnodes=2 --node-rank=0 --nproc-per-node=2 --master-addr=A" in text
    assert "--nnodes=2 --node-rank=1 --nproc-per-node=2 --master-addr=A" in text
    # A and B are both this machine: the master (rank 0's host, A) is reached at 127.0.0.1
    assert text.count("--master-addr=A ") == 2
    script.write_text(text.replace("--master-addr=A ", "--master-addr=127.0.0.1 "))

    procs = {
        host: subprocess.Popen(
            ["sh", str(script), "sh", "-c", PROBE],
            env={**env, "PLACEMENT_HOST": host},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for host in ("A", "B")
    }
    outs: dict[str, tuple[int, str, str]] = {}
    try:
        for host, p in procs.items():
            out, err = p.communicate(timeout=180)
            outs[host] = (p.returncode, out, err)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(
                    p.pid, signal.SIGKILL
                )  # the session of the torchrun started above, with its workers
                p.wait()

    for node, (host, (rc, out, err)) in enumerate(outs.items()):
        assert rc == 0, f"torchrun on {host} exited {rc}:\n{err}"
        got = sorted(out.splitlines())
        want = [
            f"rank={r} cvd={k} local=0 world=4 node={node}" for r, (h, k) in enumerate(MAPPING) if h == host
        ]
        assert got == want, err
