"""``date plan --emit slurm|slurm-cpu|k8s|k8s-cpu``: a job that trains the plan on a scheduler and
continues by itself after a preemption, a time limit or a requeue.

Each node runs one command: ``date scale ... --auto-resume`` (it starts the run, or continues it
from the newest checkpoint in its folder), or the user's own script under torchrun
(``--command``). A stop signal reaches every training process, which finishes its step and
checkpoints; what a scheduler does on each signal is in docs/training.md."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from date_engine.errors import DateError
from date_engine.runplan import RunPlan

__all__ = ["Job", "job_for", "k8s_manifest", "slurm_script"]

GRACE_S = 180
"""Seconds between the stop signal and the end of the job: Slurm's signal before the time limit
and Kubernetes' terminationGracePeriodSeconds. A step and a checkpoint must fit in them."""

RUNS = "/runs"
"""Where the TrainJob mounts the volume that keeps the run folder across restarted pods."""


@dataclass(frozen=True)
class Job:
    """What runs where: ``per_node`` processes on each of ``nodes`` nodes (one GPU each with
    ``gpus``); ``scale`` holds ``date scale``'s arguments, or ``command`` the user's own."""

    typed: str
    name: str
    nodes: int
    per_node: int
    gpus: bool
    scale: tuple[str, ...] | None
    command: tuple[str, ...] | None


def job_for(run: RunPlan, target: str, nodes: int, typed: str, name: str,
            scale: list[str] | None, command: str | None, flags: list[str]) -> Job:
    """The job ``--emit target`` writes for ``run``: ``scale`` (date scale's arguments) unless
    ``command`` (a shell command line) is given, which ``flags`` then follow."""
    world = run.split.world_size
    if world % nodes:
        raise DateError(f"--devices {world} over --nnodes {nodes} is not a whole number of "
                        f"processes a node; give a device count that {nodes} divides.")
    if command is not None:
        argv = shlex.split(command) + [word for flag in flags for word in shlex.split(flag)]
        if not argv:
            raise DateError("--command is empty; give the command that trains, e.g. --command "
                            "'python train.py'.")
        scale = None
    elif scale is None:
        raise DateError(f"--emit {target} trains the plan with date scale, which needs a recipe "
                        "spec; for your own script add --command 'python train.py'.")
    return Job(typed, f"{name}-B{run.plan.target_batch}", nodes, world // nodes,
               not target.endswith("-cpu"), scale and tuple(scale),
               None if command is None else tuple(argv))


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
    lines += ["#SBATCH --ntasks-per-node=1", f"#SBATCH --cpus-per-task={job.per_node}"] \
        if one_task else [f"#SBATCH --ntasks-per-node={job.per_node}"]
    lines += [f"#SBATCH --gpus-per-node={job.per_node}"] if job.gpus else []
    if job.scale is not None:
        signal = f"B:USR1@{GRACE_S}"
        scale = (f"python -m date_engine scale {quoted(job.scale)} -o runs/{job.name} "
                 "--auto-resume")
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
    amount = {"nvidia.com/gpu": job.per_node} if job.gpus else {"cpu": job.per_node}
    pod = {"terminationGracePeriodSeconds": GRACE_S,
           "volumes": [{"name": "runs", "persistentVolumeClaim": {"claimName": "date-runs"}}],
           "containers": [{"name": "node", "volumeMounts": [{"name": "runs",
                                                              "mountPath": RUNS}]}]}
    manifest = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": f"date-{job.name}".lower()},
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
