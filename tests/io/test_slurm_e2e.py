"""End to end on a real Slurm (.ci/slurm.sh: Debian's 22.05 packages, two slurmd in network namespaces, 8 gres GPUs
per node): busy GPUs -> `placement import slurm-live` -> `place` -> sbatch/srun with the exported SLURM_HOSTFILE and
`placement bind` -> every rank ran on its host with its GPU. Skips without Slurm or root, fails instead under CI=true.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from placement.io.hostlist import expand_hostlist
from placement.io.importers.slurm_live import parse_gres
from tests.conftest import ROOT

SLURM_SH = ROOT / ".ci" / "slurm.sh"
CI = os.environ.get("CI", "").lower() == "true"
NODES = int(os.environ.get("PLC_SLURM_NODES", "2"))


def _unavailable(reason: str) -> None:
    if CI:
        pytest.fail(f"CI=true, so the Slurm end-to-end test must run: {reason}")
    pytest.skip(reason)


def _free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("", 0))
            port = a.getsockname()[1]
        if port + 1 >= 65535:
            continue
        try:
            with socket.socket() as b:
                b.bind(("", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no two free neighbouring TCP ports")


@dataclass
class Cluster:
    dir: Path
    env: dict[str, str]
    mode: str
    nodes: list[str]

    def run(self, *argv: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            list(argv),
            env=self.env,
            cwd=self.dir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} -> exit {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done

    def placement(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The worktree's CLI in a subprocess (PYTHONPATH is the repo root, so this checkout's code runs)."""
        return self.run(sys.executable, "-m", "placement.cli.app", *args, timeout=timeout)

    def submit(self, *args: str) -> str:
        out = self.run("sbatch", "--parsable", *args).stdout.strip()
        return out.split(";")[0]

    def job_state(self, job_id: str) -> str:
        return self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()

    def wait(self, what: str, test: object, limit: float = 60) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if test():  # type: ignore[operator]
                return
            time.sleep(0.5)
        log = (self.dir / "log" / "slurmctld.log").read_text()[-3000:]
        raise AssertionError(f"timed out waiting for {what}; slurmctld.log ends:\n{log}")

    def gres_used(self) -> dict[str, frozenset[int]]:
        text = self.run("scontrol", "-d", "show", "node").stdout
        used: dict[str, frozenset[int]] = {}
        for name, spec in re.findall(r"NodeName=(\S+).*?GresUsed=(\S+)", text, re.S):
            used[name] = frozenset().union(*(e.indices or frozenset() for e in parse_gres(spec)))
        return used


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not SLURM_SH.is_file():
        pytest.fail(f"{SLURM_SH} is missing")
    missing = [
        c
        for c in ("slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "munged")
        if shutil.which(c) is None
    ]
    if missing:
        _unavailable(
            f"Slurm is not installed ({', '.join(missing)} not on PATH); `.ci/slurm.sh install` as root "
            "installs Debian's slurmctld slurmd slurm-client munge"
        )
    if os.geteuid() != 0:
        _unavailable("the local Slurm runs its daemons (and network namespaces) as root; this is not root")
    base = tmp_path_factory.mktemp("slurm")
    tag = os.getpid() % 100000
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        PLC_SLURM_PORT=str(_free_port_pair()),
        PLC_SLURM_PREFIX=f"pt{tag}",
        PLC_SLURM_NET=f"10.{200 + tag % 50}.{tag % 250}",
    )
    start = subprocess.run(
        [str(SLURM_SH), "start", str(base), str(NODES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    try:
        assert start.returncode == 0, f".ci/slurm.sh start failed:\n{start.stdout}\n{start.stderr}"
        env["SLURM_CONF"] = str(base / "slurm.conf")
        mode, *names = (base / "nodes").read_text().split()
        yield Cluster(base, env, mode, names)
    finally:
        pids = (
            [int(line.split()[1]) for line in (base / "pids").read_text().splitlines()]
            if (base / "pids").is_file()
            else []
        )
        stop = subprocess.run(
            [str(SLURM_SH), "stop", str(base)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        alive = [p for p in pids if _alive(p)]
        assert stop.returncode == 0 and not alive, f"stop left {alive} running:\n{stop.stderr}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of ours counts as stopped
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.is_file() and stat.read_text().split(")")[-1].split()[0] == "Z")


def _occupy(c: Cluster, node: str, first: int, keep: int) -> str:
    """Leave GPUs first..first+keep-1 of `node` busy with a sleeping job, the ones below free again."""
    hole = ""
    if first:
        hole = c.submit("-w", node, f"--gres=gpu:{first}", "-o", "/dev/null", "--wrap", "sleep 600")
        c.wait(f"job {hole} to run", lambda: c.job_state(hole) == "RUNNING")
    busy = c.submit("-w", node, f"--gres=gpu:{keep}", "-o", "/dev/null", "--wrap", "sleep 600")
    c.wait(f"job {busy} to run", lambda: c.job_state(busy) == "RUNNING")
    if hole:
        c.run("scancel", hole)
        c.wait(f"job {hole} to end", lambda: c.job_state(hole) in ("", "COMPLETED", "CANCELLED"))
    return busy


PROBE = (
    "import os, socket; e = os.environ; print('RANK', e['SLURM_PROCID'], e['SLURMD_NODENAME'], "
    "socket.gethostname().split('.')[0], e['CUDA_VISIBLE_DEVICES'], e['LOCAL_RANK'], e['PLACEMENT_DEVICE'], flush=True)"
)


@dataclass
class Placed:
    work: Path
    busy_jobs: dict[str, str]  # node -> id of the job sleeping on its busy GPUs
    busy: dict[str, frozenset[int]]
    result: Path
    seats: list[tuple[str, int]]  # rank -> (host, GPU index)


@pytest.fixture(scope="module")
def busy(cluster: Cluster) -> tuple[dict[str, str], dict[str, frozenset[int]]]:
    """Fragment the GPUs: node 1 keeps 2-3 busy, node 2 keeps 5-6 busy (6 free each, not the lowest ones)."""
    c = cluster
    layout = [(c.nodes[0], 2, 2)] + ([(c.nodes[1], 5, 2)] if len(c.nodes) > 1 else [])
    jobs = {node: _occupy(c, node, first, keep) for node, first, keep in layout}
    expected = {node: frozenset(range(first, first + keep)) for node, first, keep in layout}
    c.wait("GresUsed to show the busy GPUs", lambda: c.gres_used() == expected)
    return jobs, expected


def _import_and_place(
    c: Cluster, busy: tuple[dict[str, str], dict[str, frozenset[int]]], name: str
) -> Placed:
    busy_jobs, expected_busy = busy
    work = c.dir / name
    work.mkdir()
    # 1. live cluster and state, from the running Slurm
    cluster_yaml, state_yaml = work / "cluster.yaml", work / "state.yaml"
    c.placement(
        "import",
        "slurm-live",
        "--levels",
        "leaf,spine",
        "--out",
        str(cluster_yaml),
        "--state-out",
        str(state_yaml),
        "--save",
        str(work / "saved"),
    )
    doc = yaml.safe_load(cluster_yaml.read_text())
    assert [h["name"] for h in doc["hosts"]] == c.nodes
    assert [lv["name"] for lv in doc["levels"]][:3] == ["node", "leaf", "spine"]
    state = yaml.safe_load(state_yaml.read_text())
    occupied = {o["job"]: sorted(o["devices"]) for o in state["occupied"]}
    assert occupied == {
        f"slurm-{busy_jobs[node]}": sorted(f"{node}/gpu{k}" for k in expected_busy[node])
        for node in busy_jobs
    }
    assert "failed" not in state

    # 2. place a job on more GPUs than one node has free
    free = sum(8 - len(b) for b in expected_busy.values())
    ranks = 10 if len(c.nodes) > 1 else 6
    assert ranks <= free
    job_yaml = work / "job.yaml"
    job_yaml.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "device_kind": "H100",
                "parallel": {"tp": 2, "dp": ranks // 2},
                "model": {
                    "parameters": 1.0e9,
                    "hidden": 2048,
                    "layers": 8,
                    "seq_len": 2048,
                    "micro_batch": 1,
                    "micro_batches": 4,
                    "bytes_per_element": 2,
                },
            }
        )
    )
    result = work / "result.json"
    c.placement(
        "place",
        str(cluster_yaml),
        str(job_yaml),
        "--state",
        str(state_yaml),
        "--out",
        str(result),
        "--time-limit",
        "5",
    )
    mapping = json.loads(result.read_text())["result"]["mapping"]
    assert [m["rank"] for m in mapping] == list(range(ranks))
    seats = [(m["host"], int(m["device"].rpartition("/gpu")[2])) for m in mapping]
    assert not {(n, k) for n, ks in expected_busy.items() for k in ks} & set(seats), "placed on a busy GPU"
    return Placed(work, busy_jobs, expected_busy, result, seats)


def _run_job(c: Cluster, out: Path, *sbatch_args: str, must_succeed: bool = True) -> list[str]:
    """Submit and wait by polling `scontrol show job` (sbatch --wait polls at growing intervals, up to half a
    minute after the job ended); the job must complete with exit 0 unless not `must_succeed`. Returns the
    output lines."""
    job = c.submit("-o", str(out), *sbatch_args)
    final: dict[str, str] = {}

    def finished() -> bool:
        text = c.run("scontrol", "show", "job", job).stdout
        final.update(re.findall(r"\b(JobState|ExitCode)=(\S+)", text))
        return final.get("JobState") not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")

    c.wait(f"job {job} to finish", finished, limit=180)
    text = out.read_text() if out.is_file() else "(no output)"
    if must_succeed:
        assert (final["JobState"], final["ExitCode"]) == ("COMPLETED", "0:0"), text
    return text.splitlines()


def _check_ranks(lines: list[str], p: Placed) -> None:
    """Every rank printed once, on its placed host (Slurm's node name and the node's hostname), with its GPU."""
    rows = [line.split()[1:] for line in lines if line.startswith("RANK ")]
    assert len(rows) == len(p.seats), "\n".join(lines)
    seen = {}
    for rank_s, nodename, hostname, cvd, local_rank, device in rows:
        rank = int(rank_s)
        host, index = p.seats[rank]
        assert (nodename, hostname) == (host, host), (
            f"rank {rank} ran on {nodename}/{hostname}, placed on {host}"
        )
        assert cvd == str(index), f"rank {rank}: CUDA_VISIBLE_DEVICES={cvd}, placed on GPU {index}"
        assert local_rank == "0" and device == f"{host}/gpu{index}"
        seen[rank] = (host, index)
    assert sorted(seen) == list(range(len(p.seats)))


def test_import_place_and_run_with_hostfile_and_bind(
    cluster: Cluster, busy: tuple[dict[str, str], dict[str, frozenset[int]]]
) -> None:
    c = cluster
    p = _import_and_place(c, busy, "hostfile")
    # 3. the launch file: SLURM_HOSTFILE (line i = host of rank i)
    hostfile = p.work / "hostfile"
    c.placement("export", str(p.result), "--format", "hostfile", "--out", str(hostfile))
    assert hostfile.read_text().split() == [h for h, _ in p.seats]

    # 4. sbatch + srun --distribution=arbitrary + placement bind. The allocation asks every free GPU of each
    # node (--gres=gpu:6), so Slurm's own accounting holds exactly the GPUs the placement may use.
    per_node = {h: sum(1 for x, _ in p.seats if x == h) for h in c.nodes}
    used_nodes = [h for h in c.nodes if per_node[h]]
    script = p.work / "job.sh"
    script.write_text(
        "\n".join(
            [
                "#!/bin/bash",
                "set -euo pipefail",
                f"export SLURM_HOSTFILE={hostfile}",
                f"export PLACEMENT_FILE={p.result}",
                'scontrol -d show job "$SLURM_JOB_ID" | grep -o "Nodes=[^ ]* CPU_IDs=.*GRES=[^ ]*" | sed "s/^/ALLOC /"',
                f"srun --ntasks={len(p.seats)} --distribution=arbitrary {sys.executable} -m placement.cli.app bind -- "
                f'{sys.executable} -c "{PROBE}"',
                "",
            ]
        )
    )
    lines = _run_job(
        c,
        p.work / "job.out",
        f"--nodes={len(used_nodes)}",
        f"--nodelist={','.join(used_nodes)}",
        f"--ntasks-per-node={max(per_node.values())}",
        f"--gres=gpu:{min(8 - len(p.busy[h]) for h in used_nodes)}",
        str(script),
    )
    _check_ranks(lines, p)

    # Slurm's allocation for the job held every GPU a rank used (none of the sleeping jobs' GPUs)
    alloc: dict[str, frozenset[int]] = {}
    for line in lines:
        if line.startswith("ALLOC "):
            m = re.search(r"Nodes=(\S+) .*GRES=(\S+)", line)
            assert m is not None, line
            idx = frozenset().union(*(e.indices or frozenset() for e in parse_gres(m.group(2))))
            for name in expand_hostlist(m.group(1)):
                alloc[name] = idx
    for host, index in p.seats:
        assert index in alloc.get(host, frozenset()), (
            f"{host}/gpu{index} is not in the job's allocation {alloc}"
        )
    # the sleeping jobs still run: nothing was taken from them
    assert all(c.job_state(j) == "RUNNING" for j in p.busy_jobs.values())


def test_exported_slurm_script_runs_as_is(
    cluster: Cluster, busy: tuple[dict[str, str], dict[str, frozenset[int]]]
) -> None:
    """`placement export --format slurm` writes a script for `sbatch SCRIPT CMD...`; run it unchanged."""
    c = cluster
    p = _import_and_place(c, busy, "script")
    script = p.work / "job.sh"
    c.placement("export", str(p.result), "--format", "slurm", "--out", str(script))
    env_bin = str(Path(sys.executable).parent)  # `placement` of this venv, running this checkout (PYTHONPATH)
    c.env["PATH"] = f"{env_bin}{os.pathsep}{c.env.get('PATH', '')}"
    lines = _run_job(c, p.work / "job.out", str(script), sys.executable, "-c", PROBE)
    _check_ranks(lines, p)
    assert all(c.job_state(j) == "RUNNING" for j in p.busy_jobs.values())


def _per_node(counts: str, nodelist: str) -> dict[str, int]:
    """Slurm's per-node counts (SLURM_JOB_CPUS_PER_NODE: ``4(x2)`` or ``7,1``) by node of SLURM_JOB_NODELIST."""
    values: list[int] = []
    for part in counts.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        assert m is not None, counts
        values += [int(m.group(1))] * int(m.group(2) or 1)
    nodes = expand_hostlist(nodelist)
    assert len(nodes) == len(values), (counts, nodelist)
    return dict(zip(nodes, values, strict=True))


def test_exported_slurm_script_gives_each_node_its_planned_tasks(
    cluster: Cluster, busy: tuple[dict[str, str], dict[str, frozenset[int]]]
) -> None:
    """8 ranks, 4 on each node: the exported script's allocation holds 4 CPUs on each node and every rank runs
    where planned. The same script without `--ntasks-per-node` (what `export` wrote before) lets Slurm spread
    the 8 tasks as it likes (7 + 1 here), which the hostfile does not match."""
    c = cluster
    if len(c.nodes) < 2:
        _unavailable(f"needs two Slurm nodes, the local cluster has {c.nodes} ({c.mode})")
    busy_jobs, busy_gpus = busy
    work = c.dir / "per-node"
    work.mkdir()
    # the plan: the 4 lowest free GPUs of each node, ranks 0-3 on the first node and 4-7 on the second
    seats = [(h, k) for h in c.nodes[:2] for k in sorted(set(range(8)) - busy_gpus.get(h, frozenset()))[:4]]
    plan = {h: sum(1 for x, _ in seats if x == h) for h in c.nodes[:2]}
    assert plan == {c.nodes[0]: 4, c.nodes[1]: 4}
    mapping = work / "mapping.json"
    mapping.write_text(json.dumps([f"{h}/gpu{k}" for h, k in seats]))
    script = work / "job.sh"
    free = min(8 - len(busy_gpus.get(h, frozenset())) for h in plan)
    c.placement(
        "export", str(mapping), "--format", "slurm", "--gpus-per-node", str(free), "--out", str(script)
    )
    exported = script.read_text()
    assert "#SBATCH --ntasks-per-node=4\n" in exported
    # the job's allocation, printed by the batch script before its srun (the same line in both scripts)
    probe = 'echo "JOB $SLURM_JOB_CPUS_PER_NODE $SLURM_JOB_NODELIST"'
    script.write_text(exported.replace("set -euo pipefail\n", f"set -euo pipefail\n{probe}\n", 1))
    env_bin = str(Path(sys.executable).parent)  # `placement` of this venv, running this checkout (PYTHONPATH)
    c.env["PATH"] = f"{env_bin}{os.pathsep}{c.env.get('PATH', '')}"
    lines = _run_job(c, work / "job.out", str(script), sys.executable, "-c", PROBE)
    _check_ranks(lines, Placed(work, busy_jobs, busy_gpus, mapping, seats))
    ran = [line.split()[2] for line in lines if line.startswith("RANK ")]
    assert {h: ran.count(h) for h in plan} == plan
    (job_line,) = [line.split()[1:] for line in lines if line.startswith("JOB ")]
    assert _per_node(*job_line) == plan, f"the allocation {job_line} does not hold the planned {plan}"

    # the control: the exported script without --ntasks-per-node, as export wrote it before
    old = work / "old.sh"
    old.write_text(script.read_text().replace("#SBATCH --ntasks-per-node=4\n", "", 1))
    assert "--ntasks-per-node" not in old.read_text() and "#SBATCH --ntasks=8" in old.read_text()
    lines = _run_job(c, work / "old.out", str(old), sys.executable, "-c", PROBE, must_succeed=False)
    (job_line,) = [line.split()[1:] for line in lines if line.startswith("JOB ")]
    got = _per_node(*job_line)
    assert got != plan and min(got.values()) < 4, f"without --ntasks-per-node Slurm gave {got}, as planned"
    assert all(c.job_state(j) == "RUNNING" for j in busy_jobs.values())
