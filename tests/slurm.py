"""A real Slurm on this machine for the tests: Debian's munged, slurmctld and slurmd started on
localhost with a generated slurm.conf (no cgroups: proctrack/linuxproc, task/none).

``local_slurm(folder)`` starts the daemons and returns the environment that points sbatch,
squeue and scontrol at them, or a line saying why it cannot (not root, packages missing), which
the fixture skips with. ``.ci/run`` installs the packages (slurmctld, slurmd, slurm-client,
munge) where apt-get works.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.bounds import hang_limit

DAEMONS = ("munged", "slurmctld", "slurmd")
START_S = 5.0
"""The idle time from starting slurmctld and slurmd to an idle node, on the development VM."""


def local_slurm(folder: Path) -> dict[str, str] | str:
    missing = [d for d in (*DAEMONS, "sbatch") if not shutil.which(d) and
               not Path(f"/usr/sbin/{d}").exists()]
    if missing:
        return (f"no Slurm here ({', '.join(missing)} missing): apt-get install slurmctld slurmd "
                "slurm-client munge")
    if os.geteuid() != 0:
        return "Slurm's daemons start only as root here"
    host = socket.gethostname().split(".")[0]
    for sub in ("state", "spool", "log"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    cpus = os.cpu_count() or 1
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=datetest", f"SlurmctldHost={host}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", f"StateSaveLocation={folder}/state",
        f"SlurmdSpoolDir={folder}/spool", f"SlurmctldPidFile={folder}/slurmctld.pid",
        f"SlurmdPidFile={folder}/slurmd.pid", f"SlurmctldLogFile={folder}/log/slurmctld.log",
        f"SlurmdLogFile={folder}/log/slurmd.log", "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "ReturnToService=2", "MpiDefault=none", "KillWait=30", "SlurmctldPort=16817",
        # a requeued job starts within 2 s of its begin time (default: the next 60 s pass)
        "SchedulerParameters=sched_interval=2",
        "SlurmdPort=16818", f"NodeName={host} CPUs={cpus} State=UNKNOWN",
        f"PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP "
        "OverSubscribe=YES", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    if subprocess.run(["munge", "-n"], capture_output=True).returncode != 0:
        Path("/run/munge").mkdir(exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"], check=True)
    for daemon in ("slurmctld", "slurmd"):
        subprocess.run([f"/usr/sbin/{daemon}"], env=env, check=True)
    deadline = time.monotonic() + hang_limit(START_S)
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                               text=True).stdout.strip()
        if state.startswith("idle"):
            return env
        time.sleep(0.5)
    stop_slurm(folder)
    return f"Slurm did not bring its node up (see {folder}/log)"


def stop_slurm(folder: Path) -> None:
    """Stop the daemons and wait until they are gone (their ports free for the next start)."""
    pids = []
    for daemon in ("slurmd", "slurmctld"):
        pid = folder / f"{daemon}.pid"
        if pid.exists():
            try:
                pids.append(int(pid.read_text()))
                os.kill(pids[-1], 15)
            except (ProcessLookupError, ValueError):
                pass
    deadline = time.monotonic() + hang_limit(START_S)
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)


def wait_for(job: str, env: dict[str, str], idle_s: float) -> str:
    """Wait until ``job`` has left the queue; its final state (sacct-free: from scontrol)."""
    deadline = time.monotonic() + hang_limit(idle_s)
    while time.monotonic() < deadline:
        shown = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True,
                               text=True).stdout
        state = next((w.split("=")[1] for w in shown.split() if w.startswith("JobState=")), "")
        if state and state not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING",
                                   "REQUEUED", "SUSPENDED"):
            return state
        time.sleep(1)
    raise AssertionError(f"job {job} still running after {hang_limit(idle_s):.0f} s")
