"""Short branches from the baseline: how many of the baseline's samples a step at a larger batch
is worth, read from the loss, not from gradient statistics.

    python lab/short_branches.py SPEC [--set key=value ...] [--points 0.5,1.0]
        [--batches 128,512,1024,2048] [--length 0.8] [--blend 0.5] [--seed 0] [--out FILE]

The baseline (its batch B0, its plan's LR schedule and optimizer) trains from scratch to the last
point plus the branch length, its loss on a fixed slice of the training set (the last
``--eval-samples`` images, in training too) read every ``--every`` steps. At each point its model
and optimizer state are kept; a branch continues from them at batch B for ``--length`` epochs with
the plan of B (its optimizer values, its peak LR on the baseline's LR shape in epochs, as a ramp's
move does), the LR blended from the baseline's peak to B's over the first ``--blend`` of the branch.
Where the baseline's own loss curve first reaches the branch's final loss gives the progress the
branch made, e'−e; the branch's cost per unit of the baseline's progress is r = length/(e'−e)
(McCandlish et al.'s (B_noise + B)/(B_noise + B0), 1 at B0), and the noise scale it implies is
B_eff = (B − r·B0)/(r − 1) (— where r is ∞: no progress at all, or B is B0). A branch at B0
(another data order) measures the protocol's own error.

This is the measurement Merrill et al. (2025) use for the critical batch, at the scale of this
repository's studies; docs/noise.md ("Where the forecast failed") has what it found.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time

import torch

from date_engine.optim.build import build_optimizer
from date_engine.plan import derive_plan
from date_engine.recipes import DataOptions, get_recipe
from date_engine.spec import load_spec


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("spec")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--points", type=_floats, default=[0.5, 1.0], help="branch epochs")
    p.add_argument("--batches", type=_floats, default=[128, 512, 1024, 2048])
    p.add_argument("--length", type=float, default=0.8, help="branch length, epochs")
    p.add_argument("--blend", type=float, default=0.5,
                   help="share of the branch over which its LR moves to B's plan")
    p.add_argument("--keep-lr", action="store_true",
                   help="branch at the baseline's LR (only the batch changes), to separate the "
                        "batch's effect from the LR's")
    p.add_argument("--every", type=int, default=20, help="baseline steps between loss readings")
    p.add_argument("--eval-samples", type=int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.set_num_threads(1)

    spec = load_spec(args.spec, args.set)
    recipe = get_recipe(spec.recipe)
    options = recipe.parse_options(spec.model)
    data = recipe.build_data(DataOptions(data_dir=spec.train.data_dir, seed=args.seed), options)
    x, y = data.train.tensors
    n = len(x)
    x_eval, y_eval = x[-args.eval_samples:], y[-args.eval_samples:]
    b0 = spec.baseline.batch_size
    plan0 = derive_plan(spec, b0, n)

    def shape(epoch: float) -> float:
        """The baseline's LR at ``epoch``, over its peak."""
        return plan0.lr(max(1, round(epoch * n / b0))) / plan0.peak_lr

    def loss_of(model) -> float:
        """The recipe's mean loss over the fixed evaluation slice."""
        with torch.no_grad():
            return sum(recipe.loss(model, (x_eval[i:i + 2048], y_eval[i:i + 2048]), data).item()
                       * len(x_eval[i:i + 2048]) for i in range(0, len(x_eval), 2048)) / len(x_eval)

    def train(model, opt, batch, start, end, peak, gen, *, blend_from=None, blend=0.0,
              curve=None):
        epoch, step = start, 0
        order, pos = torch.randperm(n, generator=gen), 0
        while epoch < end - 1e-9:
            if pos + batch > n:
                order, pos = torch.randperm(n, generator=gen), 0
            idx = order[pos:pos + batch]
            pos, step, epoch = pos + batch, step + 1, epoch + batch / n
            top = peak
            if blend_from is not None and epoch - start < blend:
                top = blend_from + (peak - blend_from) * (epoch - start) / blend
            for group in opt.param_groups:
                group["lr"] = top * shape(epoch)
            loss = recipe.loss(model, (x[idx], y[idx]), data)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if curve is not None and step % args.every == 0:
                curve.append((epoch, loss_of(model)))
        return epoch

    torch.manual_seed(args.seed)
    model = recipe.build_model(options)
    opt = build_optimizer(model.named_parameters(), plan0.optimizer, plan0.peak_lr)
    gen = torch.Generator().manual_seed(args.seed)
    curve, kept, epoch = [(0.0, loss_of(model))], {}, 0.0
    started = time.perf_counter()
    for point in sorted(args.points):
        epoch = train(model, opt, b0, epoch, point, plan0.peak_lr, gen, curve=curve)
        kept[point] = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()), epoch)
    train(model, opt, b0, epoch, max(args.points) + 2 * args.length, plan0.peak_lr, gen,
          curve=curve)
    print(f"baseline: {curve[-1][0]:.2f} epochs at batch {b0}, loss read {len(curve)} times, "
          f"{time.perf_counter() - started:.0f} s")

    def reached(loss: float) -> float:
        """The baseline's epoch at which its loss curve first falls to ``loss``."""
        for (e1, l1), (e2, l2) in zip(curve, curve[1:]):
            if l2 <= loss:
                return e1 if l1 <= loss else e1 + (e2 - e1) * (l1 - loss) / (l1 - l2)
        return math.inf

    rows = []
    print("| epoch | B | steps | peak LR | loss at start → end | baseline reaches it at | r | "
          "B_eff |\n|---:|---:|---:|---:|---|---:|---:|---:|")
    for point in sorted(args.points):
        state, opt_state, at = kept[point]
        for batch in (int(b) for b in args.batches):
            plan = derive_plan(spec, batch, n)
            branch = recipe.build_model(options)
            branch.load_state_dict(state)
            bopt = build_optimizer(branch.named_parameters(), plan.optimizer, plan.peak_lr)
            bopt.load_state_dict(opt_state)
            peak = plan0.peak_lr if args.keep_lr else plan.peak_lr
            end = train(branch, bopt, batch, at, at + args.length, peak,
                        torch.Generator().manual_seed(args.seed + 1 + batch),
                        blend_from=plan0.peak_lr, blend=args.blend * args.length)
            final = loss_of(branch)
            progress = reached(final) - at
            r = (end - at) / progress if progress > 0 else math.inf
            # r ≤ 1: as good as the baseline, no cost measurable; r = ∞: no progress at all
            b_eff = (None if batch == b0 or r == math.inf else math.inf if r <= 1
                     else (batch - r * b0) / (r - 1))
            rows.append({"epoch": at, "batch": batch, "steps": round((end - at) * n / batch),
                         "peak_lr": peak, "loss_start": reached_loss(curve, at),
                         "loss": final, "progress": progress, "r": _json(r), "b_eff": _json(b_eff)})
            print(f"| {at:.2f} | {batch} | {rows[-1]['steps']} | {peak:.3g} | "
                  f"{rows[-1]['loss_start']:.4f} → {final:.4f} | "
                  f"{'no progress' if progress <= 0 else f'{at + progress:.2f}'} | "
                  f"{'∞' if r == math.inf else f'{r:.2f}'} | {_b_eff(b_eff)} |", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"spec": args.spec, "set": args.set, "points": args.points,
                       "length": args.length, "blend": args.blend, "keep_lr": args.keep_lr,
                       "seed": args.seed, "curve": curve, "branches": rows}, f, indent=1)


def _json(value: float | None) -> float | str | None:
    return "inf" if value is not None and math.isinf(value) else value


def reached_loss(curve: list[tuple[float, float]], epoch: float) -> float:
    """The baseline's loss read nearest ``epoch``."""
    return min(curve, key=lambda point: abs(point[0] - epoch))[1]


def _b_eff(value: float | None) -> str:
    if value is None:
        return "—"
    if math.isinf(value):
        return "∞ (no cost)"
    # r > B/B0: a step at B made less progress than one at B0, which the model cannot express
    return f"{value:.0f}" if value >= 0 else "— (r > B/B0)"


if __name__ == "__main__":
    main()
