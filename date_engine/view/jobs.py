"""``date plan --emit slurm|slurm-cpu|k8s|k8s-cpu``: a job that trains the plan on a scheduler and
continues by itself after a preemption, a time limit or a requeue.

Each node runs one command: ``date scale ... --auto-resume`` (it starts the run, or continues it
from the newest checkpoint in its folder), or the user's own script under torchrun
(``--command``). A stop signal reaches every training process, which finishes its step and
checkpoints; what a scheduler does on each signal is in docs/training.md."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from date_engine.errors import DateError
from date_engine.runplan import RunPlan

__all__ = ["Job", "dns_name", "job_for", "job_name", "k8s_manifest", "plain_text", "slurm_script"]

GRACE_S = 180
"""Seconds between the stop signal and the end of the job: Slurm's signal before the time limit
and Kubernetes' terminationGracePeriodSeconds. A step and a checkpoint must fit in them."""

RUNS = "/runs"
"""Where the TrainJob mounts the volume that keeps the run folder across restarted pods."""


_LINE_BREAKING = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")
"""Characters that end a shell comment or a YAML line (control characters, NEL and Unicode's
line and paragraph separators), or that no file can hold (NUL)."""


def plain_text(value: str, where: str) -> str:
    """``value`` unchanged, or a DateError naming ``where`` if it holds a character that would end
    a comment or a line of the job file: what a job writes stays data, never code."""
    bad = _LINE_BREAKING.search(value)
    if bad is not None:
        raise DateError(f"{where} holds the control character {bad.group()!r}, which a job file "
                        f"cannot carry as data; give it on one line without control characters.")
    return value


def job_name(name: str) -> str:
    """``name`` as a Slurm job name and a run folder's name: letters, digits, '.', '_' and '-'
    (every other run of characters becomes one '-')."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "run"


def dns_name(name: str, limit: int = 63) -> str:
    """``name`` as a Kubernetes object name (an RFC 1035 label, which is also a DNS-1123 one):
    lowercase letters, digits and '-', starting with a letter and ending with a letter or digit,
    at most ``limit`` characters."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower())
    label = re.sub(r"-{2,}", "-", label).strip("-")
    if not label[:1].isalpha():
        label = f"x-{label}"
    return label[:limit].rstrip("-")


@dataclass(frozen=True)
class Job:
    """What runs where: ``per_node`` processes on each of ``nodes`` nodes (one GPU each with
    ``gpus``); ``scale`` holds ``date scale``'s arguments, or ``command`` the user's own. ``name``
    is safe as a job name and a folder name (:func:`job_name`); ``shown`` is the recipe's own
    name, written only in a comment. No field holds a line-breaking character."""

    typed: str
    name: str
    nodes: int
    per_node: int
    gpus: bool
    scale: tuple[str, ...] | None
    command: tuple[str, ...] | None
    shown: str = ""
    cpus_per_process: int = 1


def job_for(run: RunPlan, target: str, nodes: int, typed: str, name: str,
            scale: list[str] | None, command: str | None, flags: list[str],
            cpus_per_process: int = 1) -> Job:
    """The job ``--emit target`` writes for ``run``: ``scale`` (date scale's arguments) unless
    ``command`` (a shell command line) is given, which ``flags`` then follow (and an
    ``--output_dir`` in the run's folder where neither gives one: HF's scripts continue from the
    newest checkpoint there when the job is requeued). Every value is checked to be one line:
    :func:`plain_text`."""
    world = run.split.world_size
    if world % nodes:
        raise DateError(f"--devices {world} over --nnodes {nodes} is not a whole number of "
                        f"processes a node; give a device count that {nodes} divides.")
    for i, word in enumerate(scale or ()):
        plain_text(word, "the spec path" if i == 0 else f"the argument {word[:40]!r}")
    plain_text(name, "the recipe's name")
    safe = f"{job_name(name)}-B{run.plan.target_batch}"
    argv = None
    if command is not None:
        plain_text(command, "--command")
        try:
            argv = shlex.split(command) + [word for flag in flags for word in shlex.split(flag)]
        except ValueError as e:  # an unclosed quote
            raise DateError(f"--command {command!r} does not parse as a shell command line "
                            f"({e}); close its quotes.") from None
        if not argv:
            raise DateError("--command is empty; give the command that trains, e.g. --command "
                            "'python train.py'.")
        if flags and not any(w == "--output_dir" or w.startswith("--output_dir=")
                             for w in argv):
            argv += ["--output_dir", f"runs/{safe}"]
        scale = None
    elif scale is None:
        raise DateError(f"--emit {target} trains the plan with date scale, which needs a recipe "
                        "spec; for your own script add --command 'python train.py'.")
    return Job(plain_text(typed, "the command line"), safe, nodes, world // nodes,
               not target.endswith("-cpu"), scale and tuple(scale),
               None if argv is None else tuple(argv), name, cpus_per_process)


def _torchrun_target(argv: tuple[str, ...]) -> list[str]:
    """The user's command as torchrun's script part: ``python x.py`` → ``x.py``, ``python -m m``
    → ``-m m``, anything else → ``--no-python cmd``."""
    if argv[0] in ("python", "python3") and len(argv) > 1:
        return list(argv[1:])
    return ["--no-python", *argv]


def slurm_script(job: Job) -> str:
    """An sbatch script: requeued on preemption, output appended, a stop signal three minutes
    before the time limit. ``date scale`` on one node starts its processes itself (--nproc), so a
    SIGTERM to the whole job reaches them; across nodes srun starts a task a process and forwards
    SIGUSR1 (its own SIGTERM it answers with SIGKILL to the tasks). A user's command runs under
    torchrun, one a node, which passes SIGTERM on to its workers."""
    name, quoted = f"date-{job.name}", lambda argv: " ".join(map(shlex.quote, argv))
    lines = ["#!/bin/bash", f"# {job.typed}", f"#SBATCH --job-name={name}",
             f"#SBATCH --nodes={job.nodes}"]
    one_task = job.nodes == 1 or job.command is not None
    cpus = job.cpus_per_process
    lines += ["#SBATCH --ntasks-per-node=1", f"#SBATCH --cpus-per-task={job.per_node * cpus}"] \
        if one_task else [f"#SBATCH --ntasks-per-node={job.per_node}",
                          f"#SBATCH --cpus-per-task={cpus}"]
    lines += [f"#SBATCH --gpus-per-node={job.per_node}"] if job.gpus else []
    if job.scale is not None:
        signal = f"B:USR1@{GRACE_S}"
        scale = (f"python -m date_engine scale {quoted(job.scale)} -o "
                 f"{shlex.quote('runs/' + job.name)} --auto-resume")
        run = [f"exec {scale} --nproc {job.per_node}"] if job.nodes == 1 else [
            "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}", f"exec srun {scale}"]
    else:
        signal = f"B:TERM@{GRACE_S}" if job.nodes == 1 else f"TERM@{GRACE_S}"
        target = quoted(_torchrun_target(job.command))
        run = [f"exec torchrun --standalone --nproc-per-node {job.per_node} {target}"] \
            if job.nodes == 1 else [
            'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            f"exec srun torchrun --nnodes {job.nodes} --nproc-per-node {job.per_node} "
            '--rdzv-backend c10d --rdzv-endpoint "$head:29500" --rdzv-id "$SLURM_JOB_ID" '
            f"{target}"]
    lines += ["#SBATCH --requeue", "#SBATCH --open-mode=append", "#SBATCH --output=%x.out",
              f"#SBATCH --signal={signal}",
              "# sbatch passes this shell's environment on: activate the one with date_engine"]
    if job.shown and job_name(job.shown) != job.shown:
        lines.insert(2, f"# recipe: {job.shown}")
    return "\n".join(lines + run)


def k8s_manifest(job: Job) -> str:
    """A Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1) on the torch-distributed
    runtime, which starts torchrun's environment (PET_NNODES, PET_NODE_RANK, ...) on every node:
    each node's torchrun starts its processes. A deleted or preempted pod gets SIGTERM and
    ``GRACE_S`` seconds; torchrun passes the signal to the processes, which checkpoint into the
    volume at ``RUNS``, and the pod the runtime starts again continues from there."""
    import yaml

    if job.scale is not None:
        command = ["torchrun", "-m", "date_engine", "scale", *job.scale, "-o",
                   f"{RUNS}/{job.name}", "--auto-resume"]
    else:
        command = ["torchrun", *_torchrun_target(job.command)]
    amount = {"nvidia.com/gpu": job.per_node} if job.gpus else \
        {"cpu": job.per_node * job.cpus_per_process}
    pod = {"terminationGracePeriodSeconds": GRACE_S,
           "volumes": [{"name": "runs", "persistentVolumeClaim": {"claimName": "date-runs"}}],
           "containers": [{"name": "node", "volumeMounts": [{"name": "runs",
                                                              "mountPath": RUNS}]}]}
    manifest = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": dns_name(f"date-{job.name}")},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": job.nodes, "numProcPerNode": job.per_node,
                        "resourcesPerNode": {"requests": amount, "limits": dict(amount)},
                        "command": command},
            "runtimePatches": [{"manager": "date-engine", "trainingRuntimeSpec": {"template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
                    "template": {"spec": pod}}}}]}}}}]}}
    return "\n".join([
        f"# {job.typed}",
        "# Set spec.trainer.image to an image with date_engine installed (the runtime's own has",
        "# torch only) and create the PersistentVolumeClaim date-runs (ReadWriteMany across",
        "# nodes): the run folder lives there, so a restarted pod continues the run.",
        yaml.safe_dump(manifest, sort_keys=False, width=1000).rstrip()])
