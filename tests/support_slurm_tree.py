"""A throwaway Slurm with many nodes on one machine for the golden tests of the slurm-tree baseline: Debian's
build has multiple-slurmd support, so each node is its own slurmd on 127.0.0.1 with its own port
(``NodeName=... NodeHostname=localhost Port=...``), with 8 gres GPUs (empty device files) and 64 CPUs each,
``TopologyPlugin=topology/tree`` with a generated topology.conf. Busy GPUs are real allocations
(``salloc --no-shell``, nothing runs), busy nodes are drained. Every daemon is stopped by its own PID.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from placement.io.hostlist import expand_hostlist

GPUS = 8
CPUS = 64
COMMANDS = ("slurmctld", "slurmd", "salloc", "scontrol", "squeue", "scancel", "sinfo", "munged")


def missing_commands() -> list[str]:
    return [c for c in COMMANDS if shutil.which(c) is None]


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' ports (Linux), which a listening daemon must stay out of."""
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(count: int) -> list[int]:
    """`count` TCP ports free right now, in one run (slurmd ports are the controller's + 1, + 2, ...), below the
    ephemeral range: a port picked from it (bind to port 0) can be taken by any client's outgoing connection
    (scontrol, sinfo, a slurmd's own RPCs) before the daemon binds it ("Unable to bind listen port")."""
    lo = _ephemeral_range()[0]
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(10000, max(10001, lo - count - 1))
        try:
            for p in range(base, base + count):
                with socket.socket() as t:
                    t.bind(("", p))
        except OSError:
            continue
        return list(range(base, base + count))
    raise RuntimeError(f"no {count} free neighbouring TCP ports")


@dataclass
class Placement:
    """What Slurm allocated: GPUs per node (nodes in node order); None when it kept the job pending."""

    gpus: dict[str, int] | None


@dataclass
class LocalSlurm:
    """One slurmctld and one slurmd per node in `dir`; `topology` is the topology.conf text."""

    dir: Path
    nodes: Sequence[str]
    topology: str
    env: dict[str, str] = field(default_factory=dict)
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} -> exit {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done

    def _spawn(self, name: str, argv: Sequence[str]) -> None:
        log = open(self.dir / "log" / f"{name}.out", "w")  # noqa: SIM115 - the daemon keeps it
        proc = subprocess.Popen(
            list(argv),
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self.procs.append((name, proc))

    def _wait(self, what: str, test: object, limit: float = 60) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if test():  # type: ignore[operator]
                return
            time.sleep(0.2)
        tail = ""
        log = self.dir / "log" / "slurmctld.log"
        if log.is_file():
            tail = log.read_text()[-3000:]
        raise AssertionError(f"timed out waiting for {what}; slurmctld.log ends:\n{tail}")

    def start(self) -> None:
        d = self.dir
        for sub in ("state", "spool", "run", "log", "munge", "dev"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        for k in range(GPUS):
            (d / "dev" / f"nvidia{k}").touch()
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        ports = free_ports(len(self.nodes) + 1)
        nodes = "\n".join(
            f"NodeName={n} NodeAddr=127.0.0.1 NodeHostname=localhost Port={ports[i + 1]} CPUs={CPUS} "
            f"Gres=gpu:h100:{GPUS} State=UNKNOWN"
            for i, n in enumerate(self.nodes)
        )
        debug = "DebugFlags=SelectType\n" if os.environ.get("PLC_GOLDEN_DEBUG") else ""
        (d / "slurm.conf").write_text(
            f"""# Written by tests/support_slurm_tree.py for a throwaway test cluster.
ClusterName=golden
SlurmctldHost={socket.gethostname().split(".")[0]}(127.0.0.1)
SlurmctldPort={ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SlurmctldDebug=info
{debug}SlurmdDebug=error
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=5
TopologyPlugin=topology/tree
{nodes}
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        )
        (d / "topology.conf").write_text(self.topology)
        (d / "gres.conf").write_text(f"Name=gpu Type=h100 File={d}/dev/nvidia[0-{GPUS - 1}]\n")
        self.env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"))
        self._spawn(
            "munged",
            [
                "munged",
                "--force",
                "--foreground",
                f"--key-file={key}",
                f"--socket={d}/munge/munge.socket",
                f"--pid-file={d}/munge/munged.pid",
                f"--log-file={d}/log/munged.log",
                f"--seed-file={d}/munge/seed",
            ],
        )
        self._wait("munged", lambda: (d / "munge" / "munge.socket").exists(), 20)
        self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", str(d / "slurm.conf")])
        self._wait("slurmctld", lambda: self.run("scontrol", "ping", check=False).returncode == 0, 30)
        for n in self.nodes:
            (d / "spool" / n).mkdir(exist_ok=True)
            self._spawn(f"slurmd-{n}", ["slurmd", "-D", "-N", n, "-f", str(d / "slurm.conf")])
        self._wait(f"{len(self.nodes)} idle nodes", self._all_idle, 90)

    def _all_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split("\n")
        states = dict(line.split() for line in out if line.strip())
        return len(states) == len(self.nodes) and all(s == "idle" for s in states.values())

    def stop(self) -> None:
        if self.env and self.run("scontrol", "ping", check=False).returncode == 0:
            self.run("scancel", "--user", "root", check=False)
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=20)
        self.procs.clear()

    # ---- one case -------------------------------------------------------------------------------------

    def reset(self) -> None:
        """No jobs, every node idle (drained nodes resumed)."""
        self.run("scancel", "--user", "root", check=False)
        self._wait(
            "the jobs to end", lambda: not self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip()
        )
        drained = self.run(
            "sinfo", "-h", "-N", "-t", "drain,drained,draining", "-o", "%N", check=False
        ).stdout.split()
        if drained:
            self.run("scontrol", "update", f"nodename={','.join(sorted(set(drained)))}", "state=resume")
        self._wait("every node idle", self._all_idle)

    def occupy(self, busy: dict[str, int], drained: Sequence[str]) -> None:
        """`busy[node]` GPUs allocated on `node` (one task and one CPU per GPU); `drained` nodes drained."""
        for node, k in busy.items():
            if k > 0:
                self.run(
                    "salloc",
                    "--no-shell",
                    "-I",
                    "-J",
                    "busy",
                    "-w",
                    node,
                    f"--ntasks={k}",
                    "--gpus-per-task=1",
                )
        if drained:
            self.run("scontrol", "update", f"nodename={','.join(drained)}", "state=drain", "reason=golden")

    def place(self, options: Sequence[str]) -> Placement:
        """Submit the job as an allocation with nothing to run; Slurm's nodes, or None when it would wait."""
        done = self.run("salloc", "--no-shell", "-I", "-J", "golden", *options, check=False, timeout=60)
        m = re.search(r"Granted job allocation (\d+)", done.stderr + done.stdout)
        if m is None:
            return Placement(None)
        text = self.run("scontrol", "-d", "show", "job", m.group(1)).stdout
        gpus: dict[str, int] = {}
        for nodes, count in re.findall(r"\bNodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=gpu:h100:(\d+)", text):
            for n in expand_hostlist(nodes):
                gpus[n] = int(count)
        self.run("scancel", m.group(1), check=False)
        return Placement(gpus)
