"""``date plan --emit``: the plan as settings for another trainer, ready to paste."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from date_engine.errors import DateError
from date_engine.integrations import (
    CANNOT_EXPRESS,
    EMIT_TARGETS,
    hf_arguments,
    hf_caveat,
    hf_flags,
    lightning_settings,
    split_settings,
)
from date_engine.runplan import RunPlan

__all__ = ["emitted", "plan_call", "print_emitted", "scale_args", "slurm_script"]


def plan_call(spec: str, run: RunPlan, overrides: list[str], probe: str | None,
              budget: str | None) -> str:
    """The ``plan_for(...)`` call that gives ``run`` in Python; ``spec`` is its first argument's
    Python text."""
    args = [spec, f"batch={run.split.batch}", f"devices={run.split.world_size}",
            f"micro_batch={run.split.micro_batch}"]
    if overrides:
        args.append(f"overrides={overrides!r}")
    if probe is not None:
        args.append(f"probe={probe!r}")
    if budget is not None:
        args.append(f"budget={budget!r}")
    return f"plan_for({', '.join(args)})"


def emitted(target: str, run: RunPlan, call: str) -> str:
    """The text ``--emit target`` prints: hf-args (flags, one per line), lightning or accelerate
    (Python), json (everything, for scripts)."""
    if target == "hf-args":
        return " \\\n".join(hf_flags(run))
    split = split_settings(run)
    if target == "lightning":
        trainer = ", ".join(f"{k}={v!r}" for k, v in
                            lightning_settings(run)["trainer"].items())
        return "\n".join([
            f"from date_engine import {_imports(call, 'plan_for')}",
            "from date_engine.integrations.lightning import DatePlan, optimizers_for",
            "",
            f"run = {call}",
            f"trainer = L.Trainer({trainer}, callbacks=[DatePlan(run)])",
            f"loader = DataLoader(train_set, batch_size={split['per_device_batch']}, "
            "shuffle=True)",
            "# in your LightningModule:",
            "#     def configure_optimizers(self):",
            "#         return optimizers_for(self, run)",
        ])
    if target == "accelerate":
        return "\n".join([
            f"from date_engine import {_imports(call, 'optimizer_for, plan_for, scheduler_for')}",
            "",
            f"run = {call}",
            "accelerator = Accelerator(step_scheduler_with_optimizer=False, "
            f"gradient_accumulation_steps={split['accumulation_steps']})",
            f"loader = DataLoader(train_set, batch_size={split['per_device_batch']}, "
            "shuffle=True)",
            "optimizer = optimizer_for(model, run)",
            "scheduler = scheduler_for(optimizer, run)   # not prepared: step it yourself",
            "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)",
            f"# train {split['max_steps']} optimizer steps; after each, when "
            "accelerator.sync_gradients: scheduler.step()",
        ])
    return json.dumps({"split": split, "hf": hf_arguments(run),
                       "lightning": lightning_settings(run), "python": call,
                       "plan": run.to_dict()}, indent=2)


def scale_args(spec: str, batch: str, micro_batch: int | None, overrides: list[str] | None,
               probe: Path | None, budget: str | None, parallel: str | None) -> list[str]:
    """The ``date scale`` arguments that train the plan ``date plan`` was given."""
    args = [spec, "--batch", batch]
    for name, value in (("--micro-batch", micro_batch), ("--probe", probe and probe.absolute()),
                        ("--budget", budget), ("--parallel", parallel)):
        if value is not None:
            args += [name, str(value)]
    for override in overrides or ():
        args += ["--set", override]
    return args


def slurm_script(run: RunPlan, args: list[str], nodes: int, gpus: bool, name: str) -> str:
    """An sbatch script that trains ``run`` with ``date scale args`` on ``nodes`` nodes (one GPU
    a process with ``gpus``): requeued on preemption, output appended, SIGUSR1 three minutes
    before the time limit, and --auto-resume, so that it runs unchanged when requeued. On one node
    ``date scale --nproc`` starts the processes itself, so a SIGTERM to the whole job reaches its
    workers (each checkpoints after its step); across nodes srun starts a task per process, and
    forwards SIGUSR1 but answers its own SIGTERM with SIGKILL to them."""
    world = run.split.world_size
    if world % nodes:
        raise DateError(f"--devices {world} over --nnodes {nodes} is not a whole number of "
                        f"processes a node; give a device count that {nodes} divides.")
    per_node, run_name = world // nodes, f"{name}-B{run.plan.target_batch}"
    scale = ("python -m date_engine scale " + " ".join(map(shlex.quote, args))
             + f" -o runs/{run_name} --auto-resume")
    lines = ["#!/bin/bash",
             f"# date plan {' '.join(map(shlex.quote, args))} --devices {world} --nnodes "
             f"{nodes} --emit {'slurm' if gpus else 'slurm-cpu'}",
             f"#SBATCH --job-name=date-{run_name}", f"#SBATCH --nodes={nodes}"]
    lines += [f"#SBATCH --ntasks-per-node={per_node}"] if nodes > 1 else [
        "#SBATCH --ntasks-per-node=1", f"#SBATCH --cpus-per-task={per_node}"]
    lines += [f"#SBATCH --gpus-per-node={per_node}"] if gpus else []
    lines += ["#SBATCH --requeue", "#SBATCH --open-mode=append", "#SBATCH --output=%x.out",
              "#SBATCH --signal=B:USR1@180",
              "# sbatch passes this shell's environment on: activate the one with date_engine"]
    lines += ["export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}", f"exec srun {scale}"] \
        if nodes > 1 else [f"exec {scale} --nproc {per_node}"]
    return "\n".join(lines)


def _imports(call: str, names: str) -> str:
    return f"baseline_from_file, {names}" if call.startswith("plan_for(baseline_from_file") \
        else names


def print_emitted(target: str, run: RunPlan, call: str, job: list[str] | bool, nodes: int,
                  recipe: Any) -> None:
    """``date plan --emit TARGET``: the settings on stdout, ready to paste; on stderr, in one
    line, what they cannot carry. A job script trains ``date scale job`` on ``nodes`` nodes, a run
    of ``recipe`` (False: the baseline came from another trainer's configuration)."""
    import sys

    if target not in EMIT_TARGETS:
        raise DateError(f"--emit: must be one of {', '.join(EMIT_TARGETS)}; got {target!r}.")
    if target.startswith("slurm"):
        if job is False or recipe is None:
            raise DateError(f"--emit {target} trains the plan with date scale, which needs a spec "
                            "of a recipe; for your own trainer's script use --emit hf-args.")
        print(slurm_script(run, job, nodes, gpus=target == "slurm", name=recipe.name))
        return
    print(emitted(target, run, call))
    if target != "json":
        caveat = hf_caveat(run) if target == "hf-args" else CANNOT_EXPRESS
        print(f"note: {caveat}", file=sys.stderr)
