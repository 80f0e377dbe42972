"""A torchrun worker for tests/test_integrations.py: runs one of the examples (hf_trainer,
lightning_trainer, accelerate_loop) unchanged into ``OUT/whole``, watching every optimizer step
through torch's global hooks, and writes what it saw (rank 0) to ``OUT/watched.json``. Then it
copies one checkpoint that run saved part way alone into ``OUT/resumed`` (as a stopped run would
have left it) and starts the example again there, as a requeued job would: rank 0 writes the LR
of every step the resumed run took to ``OUT/resumed/lrs.json``; both runs write final.pt.

    torchrun --nproc-per-node 2 tests/integration_worker.py EXAMPLE OUT

Per optimizer step of the optimizer the tool built (DATE over AdamW, or AdamW alone where the
adapter trains without DATE's ratios, its default): the LR, betas, eps and weight decay its group
held as it stepped; the samples all processes' forward passes saw since the last step; and how far
the step's update of the first layer was from one computed by hand — torch's AdamW stepped on a
copy of that layer from the same state, times DATE's ratio r_l from every adapted layer's weight
and gradient norms (the ratio rule applied by hand; 1 without DATE).
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.modules.module import register_module_forward_hook
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from date_engine.optim import DATE
from date_engine.optim.ratios import layer_ratios

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class Watch:
    def __init__(self, model_class: type) -> None:
        self.model_class, self.seen, self.steps, self.before = model_class, 0, [], None
        self.stepping = None  # the tool's optimizer while it steps: a step inside it is not one

    def watched(self, optimizer) -> bool:
        return isinstance(optimizer, (DATE, torch.optim.AdamW)) and self.stepping in (
            None, optimizer)

    def forward(self, module, args, kwargs, output) -> None:
        if type(module) is self.model_class and module.training:
            x = args[0] if args else kwargs["x"]
            self.seen += len(x)

    def pre(self, optimizer, args, kwargs):
        """Snapshot the layer before the step; after the closure's backward where the tool
        passes one (Lightning computes the last micro-batch's gradient inside the step)."""
        if not self.watched(optimizer):
            return None
        self.stepping = optimizer
        # torch passes the step's own arguments, the optimizer first
        closure = args[1] if len(args) > 1 else kwargs.get("closure")
        if closure is None:
            self.snapshot(optimizer)
            return None

        def then_snapshot():
            loss = closure()
            self.snapshot(optimizer)
            return loss

        return (args[0], then_snapshot), {}

    def snapshot(self, optimizer) -> None:
        adapted = [p for g in optimizer.param_groups for p in g["params"]
                   if p.grad is not None and p.ndim > 1]
        first = adapted[0]
        group = next(g for g in optimizer.param_groups if any(p is first for p in g["params"]))
        state = {k: v.clone() if torch.is_tensor(v) else v
                 for k, v in optimizer.state.get(first, {}).items()}
        ratio = 1.0
        if isinstance(optimizer, DATE):
            ratio = float(layer_ratios(torch.stack([p.detach().norm() for p in adapted]),
                                       torch.stack([p.grad.norm() for p in adapted]),
                                       optimizer.rule)[0])
        self.before = (first, first.detach().clone(), first.grad.clone(), state, ratio,
                       dict(group), isinstance(optimizer, DATE))

    def post(self, optimizer, args, kwargs) -> None:
        if self.stepping is not optimizer:
            return
        first, w, g, state, ratio, group, dated = self.before
        copy = w.clone().requires_grad_(True)
        base = torch.optim.AdamW([copy], lr=group["lr"], betas=group["betas"], eps=group["eps"],
                                 weight_decay=group["weight_decay"])
        if state:
            base.state[copy] = state
        copy.grad = g
        base.step()  # by hand: its own hooks see the tool's optimizer still stepping
        self.stepping = None
        expected = w + ratio * (copy.detach() - w)
        error = ((first.detach() - expected).norm() / (expected - w).norm()).item()
        # float32 rounds w_after to about 2^-24·|w| per element: that much of the error is noise
        noise = (2.0 ** -23 * w.norm() / (expected - w).norm()).item()
        seen = torch.tensor([self.seen], dtype=torch.long)
        if dist.is_initialized():
            dist.all_reduce(seen)
        self.seen = 0
        self.steps.append({"lr": group["lr"], "betas": list(group["betas"]), "eps": group["eps"],
                           "weight_decay": group["weight_decay"], "samples": int(seen),
                           "ratio": ratio, "update_error": error,
                           "rounding": noise, "date": dated})


SAVED = {"hf_trainer": ("checkpoint-18", "checkpoint-18"),
         "lightning_trainer": ("epoch=1-step=16.ckpt", "last.ckpt"),
         "accelerate_loop": ("step-000018", "step-000018")}
"""Each example's checkpoint part way (mid-epoch where the tool resumes there), and the name the
example looks for when it starts again."""


def main(example: str, out: Path) -> None:
    sys.path.insert(0, str(EXAMPLES))
    module = importlib.import_module(example)
    shared = importlib.import_module("_digits")
    watch = Watch(shared.MLP)
    hooks = [register_module_forward_hook(watch.forward, with_kwargs=True),
             register_optimizer_step_pre_hook(watch.pre),
             register_optimizer_step_post_hook(watch.post)]
    accuracy = module.main(str(out / "whole"))
    for hook in hooks:
        hook.remove()
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        (out / "watched.json").write_text(json.dumps({
            "world": dist.get_world_size(), "accuracy": accuracy, "steps": watch.steps}))
        (out / "resumed").mkdir()
        source, name = SAVED[example]
        copy = shutil.copytree if (out / "whole" / source).is_dir() else shutil.copyfile
        copy(out / "whole" / source, out / "resumed" / name)
    dist.barrier()
    lrs, stepping = [], []  # the optimizers stepping now: DATE steps the AdamW it wraps

    def pre(optimizer, args, kwargs):
        if isinstance(optimizer, (DATE, torch.optim.AdamW)) and not stepping:
            lrs.append(optimizer.param_groups[0]["lr"])
        stepping.append(optimizer)

    hooks = [register_optimizer_step_pre_hook(pre),
             register_optimizer_step_post_hook(lambda *_: stepping.pop())]
    module.main(str(out / "resumed"))
    if dist.get_rank() == 0:
        (out / "resumed" / "lrs.json").write_text(json.dumps(lrs))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
