"""nanoGPT: its configuration files read as the baseline, the plan written as one.

A nanoGPT run is train.py's globals overridden by a config file (``python train.py
config/x.py``), which its configurator runs. Here the file is read, not run
(:mod:`~date_engine.stacks.pyconfig`): literal assignments and arithmetic on literals, names
resolved against the file and then train.py's defaults (:data:`TRAIN_DEFAULTS`), so that what
the file leaves out is train.py's — and said so.

What train.py does with the names read:

- the global batch is ``batch_size × gradient_accumulation_steps`` sequences of ``block_size``
  tokens whatever the device count (under DDP train.py divides the accumulation steps by the
  world size);
- ``max_iters`` optimizer steps (its loop runs one more, iteration ``max_iters`` itself, which
  is passed over here);
- AdamW (β1, β2, torch's ε 1e-8, ``weight_decay`` on the parameters of two or more dimensions
  only: biases and norms spared), gradients clipped to ``grad_clip`` (0: not clipped);
- ``decay_lr``: a linear warmup over ``warmup_iters`` steps, then a cosine from
  ``learning_rate`` to ``min_lr`` at ``lr_decay_iters``; else ``learning_rate`` throughout.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from date_engine.errors import SpecError
from date_engine.fields import Fields, counts
from date_engine.spec import Spec, parse_spec
from date_engine.stacks.pyconfig import PyConfig, read_pyconfig

__all__ = ["TRAIN_DEFAULTS", "baseline_from_nanogpt", "emit_nanogpt", "nanogpt_sources",
           "read_pyconfig_text"]

TRAIN_DEFAULTS: dict[str, Any] = {
    "batch_size": 12, "block_size": 1024, "gradient_accumulation_steps": 5 * 8,
    "learning_rate": 6e-4, "max_iters": 600000, "weight_decay": 1e-1, "beta1": 0.9,
    "beta2": 0.95, "grad_clip": 1.0, "decay_lr": True, "warmup_iters": 2000,
    "lr_decay_iters": 600000, "min_lr": 6e-5}
"""train.py's defaults (karpathy/nanoGPT, master) of the names the plan reads and writes."""

_READ = tuple(TRAIN_DEFAULTS)


def read_pyconfig_text(text: str, source: str) -> PyConfig:
    """A nanoGPT config's text (``source`` its name), names resolved against train.py's
    defaults."""
    return read_pyconfig(text, source, TRAIN_DEFAULTS)


def baseline_from_nanogpt(config: PyConfig | Mapping[str, Any], train_samples: int) -> Spec:
    """The spec of the baseline a nanoGPT config (what :func:`read_pyconfig_text` read, or its
    values as a dict; a file: :func:`~date_engine.baselines.baseline_from_file`) trains on
    ``train_samples`` sequences of ``block_size`` tokens per epoch. Raises SpecError, in one
    sentence naming the file and the name, for a value it cannot read or carry."""
    counts("baseline_from_nanogpt", train_samples, 1)
    read = config if isinstance(config, PyConfig) else PyConfig("the config", dict(config))
    for name in _READ:
        if name in read.unread:
            raise SpecError(f"{read.source} line {read.unread[name]}: {name} is not a value or "
                            "arithmetic on values, which is all this reader evaluates; write "
                            "its value.")
    f = Fields({**TRAIN_DEFAULTS, **read.values}, read.source)
    batch = f.count("batch_size") * f.count("gradient_accumulation_steps")
    lr = f.number("learning_rate", high=1e6, above=True)
    steps = f.count("max_iters")
    clip = f.number("grad_clip", high=1e6)
    baseline: dict[str, Any] = {
        "batch_size": batch, "lr": lr, "iterations": steps, "dataset_size": train_samples,
        "tokens_per_sample": f.count("block_size"),
        "warmup_epochs": 0.0, "schedule": {"name": "constant"},
        "optimizer": {"name": "adamw", "betas": [f.number("beta1", high=1.0),
                                                 f.number("beta2", high=1.0)],
                      "weight_decay": f.number("weight_decay", high=1e3),
                      "decay_biases_and_norms": False}}
    if f.flag("decay_lr"):
        baseline.update(_decay(f, lr, steps, batch, train_samples))
    raw: dict[str, Any] = {"baseline": baseline, "date": {"layer_ratio": {"mode": "off"}}}
    if clip:
        raw["train"] = {"grad_clip": clip}
    return parse_spec(raw, source=read.source)


def _decay(f: Fields, lr: float, steps: int, batch: int, n: int) -> dict[str, Any]:
    warmup = f.number("warmup_iters", low=0, whole=True, high=1e9)
    decay = f.count("lr_decay_iters")
    if decay != steps:
        raise SpecError(f"{f.source}: lr_decay_iters {decay} is not max_iters {steps}: the "
                        f"cosine would {'stop short of' if decay > steps else 'end before'} "
                        "the run's end, which the plan cannot carry; set lr_decay_iters = "
                        "max_iters.")
    if warmup >= steps:
        raise SpecError(f"{f.source}: warmup_iters {warmup} is not fewer than max_iters {steps}, "
                        "so the run never trains at its peak; give a shorter warmup.")
    return {"warmup_epochs": warmup * batch / n,
            "schedule": {"name": "cosine", "final_lr": f.number("min_lr", high=lr)}}


def nanogpt_sources(read: PyConfig) -> dict[str, str]:
    """Where each baseline value came from, for the plan's "from" column: the file's names, and
    which of them were train.py's defaults."""

    def origin(*names: str) -> str:
        defaulted = [n for n in names if n not in read.values]
        said = " × ".join(names)
        if not defaulted:
            return f"{said} ({Path(read.source).name})"
        return f"{said} ({', '.join(defaulted)}: train.py's default)"

    return {"baseline.batch_size": origin("batch_size", "gradient_accumulation_steps"),
            "baseline.lr": origin("learning_rate"),
            "baseline.iterations": origin("max_iters"),
            "baseline.warmup_epochs": origin("warmup_iters") + " · B0 / n",
            "baseline.dataset_size": "--train-samples (sequences)",
            "baseline.schedule (its own end)": origin("min_lr")}


def emit_nanogpt(run) -> tuple[str, list[str]]:
    """The plan of ``run`` (a RunPlan) as nanoGPT config assignments (only names train.py has),
    and what nanoGPT cannot express, each in a few words."""
    plan, split = run.plan, run.split
    schedule = plan.schedule
    lost = []
    if plan.ramp:
        lost.append("the batch ramp (nanoGPT trains one batch)")
    if plan.optimizer.name != "adamw":
        lost.append(f"the optimizer ({plan.optimizer.name}: nanoGPT trains AdamW)")
    if plan.optimizer.layer_ratio.get("mode", "off") != "off":
        lost.append("DATE's per-layer ratios")
    eps = plan.optimizer.options.get("eps")
    if eps is not None and eps != 1e-8:
        lost.append(f"ε {eps:g} (train.py keeps torch's 1e-8)")
    if schedule.name not in ("cosine", "constant") or plan.warmup_shape != "linear":
        lost.append(f"the {schedule.name} schedule (nanoGPT: linear warmup, cosine)")
    warmup = round(plan.warmup_iterations)
    if abs(plan.warmup_iterations - warmup) > 1e-6:  # train.py counts its warmup in steps
        lost.append(f"the warmup's {plan.warmup_iterations:.4g} steps (written as {warmup})")
    beta1, beta2 = plan.optimizer.options.get("betas", (0.9, 0.999))
    final = plan.peak_lr if schedule.name == "constant" else max(  # a cosine from η to η
        schedule.final * plan.peak_lr if schedule.final is not None else 0.0, plan.lr_floor)
    lines = [
        f"# date plan: batch {plan.target_batch:,} = batch_size {split.micro_batch} × "
        f"gradient_accumulation_steps {split.accumulation_steps * split.world_size} "
        f"(over {split.world_size} process(es)); plan {plan.identity}",
        f"batch_size = {split.micro_batch}",
        *([f"block_size = {plan.tokens_per_sample}"] if plan.tokens_per_sample else []),
        f"gradient_accumulation_steps = {split.accumulation_steps * split.world_size}",
        f"learning_rate = {plan.peak_lr!r}",
        f"max_iters = {plan.total_iterations}",
        f"lr_decay_iters = {plan.total_iterations}",
        f"warmup_iters = {warmup}",
        f"min_lr = {final!r}",
        f"decay_lr = {schedule.name != 'constant' or plan.warmup_iterations > 0}",
        f"beta1 = {beta1!r}",
        f"beta2 = {beta2!r}",
        f"weight_decay = {plan.optimizer.options.get('weight_decay') or 0.0!r}",
        f"grad_clip = {plan.grad_clip or 0.0!r}",
    ]
    return "\n".join(lines) + "\n", lost
