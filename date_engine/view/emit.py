"""``date plan --emit``: the plan as settings for another trainer, ready to paste."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from date_engine.errors import DateError
from date_engine.integrations import (
    CANNOT_EXPRESS,
    EMIT_TARGETS,
    JOB_TARGETS,
    STACK_TARGETS,
    hf_arguments,
    hf_caveat,
    hf_flags,
    lightning_settings,
    split_settings,
)
from date_engine.runplan import RunPlan

__all__ = ["emitted", "plan_call", "print_emitted", "scale_args", "stack_emitted"]


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


def stack_emitted(target: str, run: RunPlan) -> tuple[str, list[str]]:
    """The plan as a stack's own configuration (``--emit nanogpt``, ``megatron``,
    ``megatron-rampup``, ``megatron-bridge``) and what that stack cannot express."""
    if target == "nanogpt":
        from date_engine.stacks.nanogpt import emit_nanogpt

        return emit_nanogpt(run)
    from date_engine.stacks import megatron

    if target == "megatron-bridge":
        return megatron.emit_megatron_bridge(run)
    return megatron.emit_megatron(run, rampup=target == "megatron-rampup")


def scale_args(spec: str, batch: str, micro_batch: int | None, overrides: list[str] | None,
               probe: Path | None, budget: str | None, parallel: str | None) -> list[str]:
    """The ``date scale`` arguments that train the plan ``date plan`` was given."""
    args = [_shipped_name(spec), "--batch", batch]
    for name, value in (("--micro-batch", micro_batch), ("--probe", probe and probe.absolute()),
                        ("--budget", budget), ("--parallel", parallel)):
        if value is not None:
            args += [name, str(value)]
    for override in overrides or ():
        args += ["--set", override]
    return args


def _shipped_name(spec: str) -> str:
    """``spec`` as the shipped baseline's name where it is the path of one (recipes/x.yaml in a
    checkout: the name works wherever date_engine is installed, the path only there)."""
    from date_engine.spec import shipped_specs

    try:
        resolved = Path(spec).resolve()
    except (OSError, RuntimeError):
        return spec
    return next((name for name, path in shipped_specs().items()
                 if Path(path).resolve() == resolved), spec)


def _imports(call: str, names: str) -> str:
    return f"baseline_from_file, {names}" if call.startswith("plan_for(baseline_from_file") \
        else names


def print_emitted(target: str, run: RunPlan, call: str, job: list[str] | bool, nodes: int,
                  recipe: Any, command: str | None = None, typed: str = "",
                  cpus_per_process: int = 1) -> None:
    """``date plan --emit TARGET``: the settings on stdout, ready to paste; on stderr, in one
    line, what they cannot carry. A job (slurm, k8s) trains ``date scale job`` on ``nodes`` nodes,
    a run of ``recipe`` (``job`` False: the baseline came from another trainer's configuration,
    whose script ``command`` runs, followed by the hf-args flags); ``typed`` is the command line
    that asked for it; ``cpus_per_process``: the cores each process of a job gets."""
    import sys

    if target not in EMIT_TARGETS:
        raise DateError(f"--emit: must be one of {', '.join(EMIT_TARGETS)}; got {target!r}.")
    if target in JOB_TARGETS:
        from date_engine.view.jobs import job_for, k8s_manifest, slurm_script

        flags = hf_flags(run) if command is not None and job is False else []
        scale = job if job and recipe is not None else None
        planned = job_for(run, target, nodes, typed or f"date plan --emit {target}",
                          recipe.name if recipe is not None else "run", scale, command, flags,
                          cpus_per_process)
        print((slurm_script if target.startswith("slurm") else k8s_manifest)(planned))
        return
    if command is not None:
        raise DateError(f"--command goes with a job: --emit {' or '.join(JOB_TARGETS)}.")
    if target in STACK_TARGETS:
        text, lost = stack_emitted(target, run)
        print(text, end="", flush=True)
        if lost:
            print(f"note: {target} cannot express {'; '.join(lost)}.", file=sys.stderr)
        return
    print(emitted(target, run, call))
    if target != "json":
        caveat = hf_caveat(run) if target == "hf-args" else CANNOT_EXPRESS
        print(f"note: {caveat}", file=sys.stderr)
