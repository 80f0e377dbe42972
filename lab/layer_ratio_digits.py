"""Per-layer ratio rules on real handwritten digits: which layer_ratio setting trains best at large
batch?

    python lab/layer_ratio_digits.py [--optimizer rmsprop] [--batches 32,256,512,1024]
        [--seeds 5] [--rule paper] [--out layer_ratio_digits.json]

LeNet on scikit-learn's 8×8 digits (1,797 real scans; 1,437 train / 360 test, stratified, fixed
split). The baseline — batch 32, the optimizer's usual LR, 0.5 warmup epochs, 40 epochs — is scaled
by DATE's plan (by default the paper's rule, as docs/layer_ratios.md was measured: sqrt LR,
LEGW warmup, decay to the floor; --rule date for the per-family default) to each batch; only the
per-layer ratio rule changes between columns:

- off: the base optimizer unchanged;
- lars: the plain LARS ratio, r = ||w||/||g|| (static, c = 1, no clamp), as in docs/algorithm.md
  §3's RMSprop case;
- dynamic γ: DATE's rule, r = clamp(ρ/m, 1/γ, γ).

Prints mean ± std test accuracy over the seeds and writes every run to JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from date_engine import parse_spec
from date_engine.models.lenet import LeNet
from date_engine.optim.build import build_optimizer
from date_engine.plan import derive_plan
from date_engine.schedule import scheduler_for
from date_engine.spec import LayerRatioSpec

BASE_LR = {"rmsprop": 1e-3, "adam": 1e-3, "momentum": 0.01, "adagrad": 0.05}


def digits(seed: int = 0):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=360, stratify=y, random_state=seed)
    as_images = lambda a: torch.tensor(a, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0  # noqa: E731
    return as_images(xtr), torch.tensor(ytr), as_images(xte), torch.tensor(yte)


def rules(gammas):
    yield "off", LayerRatioSpec(mode="off")
    yield "lars", LayerRatioSpec(mode="static", trust_coefficient=1.0, lower=0.0, upper=1e30)
    for g in gammas:
        yield (
            (f"dynamic γ={g:g}" if g < 1e6 else "dynamic, no clamp"),
            LayerRatioSpec(mode="dynamic", gamma=g),
        )


def train_once(
    data, optimizer: str, lr: float, batch: int, rule: LayerRatioSpec, seed: int,
    scaling_rule: str = "paper",
) -> float:
    xtr, ytr, xte, yte = data
    spec = parse_spec(
        {
            "baseline": {
                "batch_size": 32,
                "lr": lr,
                "warmup_epochs": 0.5,
                "epochs": 40,
                "dataset_size": len(xtr),
                "optimizer": {"name": optimizer},
            },
            "date": {"rule": scaling_rule},
        }
    )
    plan = derive_plan(spec, batch)
    torch.manual_seed(seed)
    model = LeNet(image_size=8)
    ratio = {"mode": rule.mode, **rule.options()}
    opt = build_optimizer(
        model.named_parameters(), replace(plan.optimizer, layer_ratio=ratio), plan.peak_lr
    )
    sched = scheduler_for(opt, plan)
    gen = torch.Generator().manual_seed(seed)
    order = torch.empty(0, dtype=torch.long)
    for _ in range(plan.total_iterations):
        if len(order) < batch:  # reshuffle each epoch; a batch may straddle two epochs
            order = torch.cat([order, torch.randperm(len(xtr), generator=gen)])
        idx, order = order[:batch], order[batch:]
        loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        return (model(xte).argmax(1) == yte).float().mean().item() * 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--optimizer", default="rmsprop", choices=sorted(BASE_LR))
    parser.add_argument(
        "--lr", type=float, default=None, help="baseline LR (default: per optimizer)"
    )
    parser.add_argument("--batches", default="32,256,512,1024")
    parser.add_argument("--gammas", default="1.5,2,4,8")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rule", default="paper", choices=["paper", "date"],
                        help="date.rule of the plans (paper: as docs/layer_ratios.md measured)")
    parser.add_argument("--out", default="layer_ratio_digits.json")
    args = parser.parse_args()
    torch.set_num_threads(1)  # tiny model: threads only add overhead

    data = digits()
    lr = args.lr if args.lr is not None else BASE_LR[args.optimizer]
    batches = [int(b) for b in args.batches.split(",")]
    named_rules = list(rules([float(g) for g in args.gammas.split(",")]))
    runs, start = [], time.time()
    for batch in batches:
        for name, rule in named_rules:
            for seed in range(args.seeds):
                acc = train_once(data, args.optimizer, lr, batch, rule, seed, args.rule)
                runs.append({"batch": batch, "rule": name, "seed": seed, "test_accuracy": acc})
    print(
        f"LeNet on 8x8 digits, base optimizer {args.optimizer} (lr {lr:g} at batch 32); test "
        f"accuracy % "
        f"(mean ± std of {args.seeds} seeds); {time.time() - start:.0f} s"
    )
    header = "| rule | " + " | ".join(f"B = {b} ({b // 32}×)" for b in batches) + " |"
    print(header + "\n|" + "---|" * (len(batches) + 1))
    for name, _ in named_rules:
        cells = []
        for batch in batches:
            accs = [r["test_accuracy"] for r in runs if r["batch"] == batch and r["rule"] == name]
            cells.append(
                f"{statistics.mean(accs):.1f} ± "
                f"{statistics.stdev(accs) if len(accs) > 1 else 0:.1f}"
            )
        print(f"| {name} | " + " | ".join(cells) + " |")
    with open(args.out, "w") as f:
        json.dump({"optimizer": args.optimizer, "lr": lr, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
