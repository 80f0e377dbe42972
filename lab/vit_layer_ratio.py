"""Why DATE's per-layer ratios slow the vit-mnist ViT at the baseline's batch: a side-by-side.

    OMP_NUM_THREADS=1 python lab/vit_layer_ratio.py [--steps 300] [--data data/mnist]

The recipe's ViT (7×7 patches, 4 pre-LN blocks of width 64) trained the same number of steps, on the
same data order, with AdamW 1e-3 (weight decay 0.05, batch 128, 20 warmup steps), once per variant
of the ratios; accuracy on the first 2,000 MNIST test images:

- ``off``: plain AdamW (what a sweep's baseline cell runs);
- ``dynamic``: DATE's dynamic ratios, ρ = ||w||/||g|| (docs/algorithm.md §3);
- ``dynamic-no-embed``: the same, the head, class token and position embeddings kept at r = 1;
- ``update``: ρ = ||w||/||u|| with u the base's update (LAMB's ratio), clamped the same way;
- ``update-no-embed``: both changes.

``--show STEP`` prints each layer's multiplier, ||w|| and ||g|| at that step of ``dynamic``.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from date_engine.data.idx import load_mnist
from date_engine.models.vit import ViT
from date_engine.optim import DATE
from date_engine.optim.ratios import DEFAULTS, layer_ratios

EMBEDDINGS = ("cls", "position", "head.weight")
VARIANTS = ("off", "dynamic", "dynamic-no-embed", "update", "update-no-embed")


def train(variant: str, data, steps: int, show: int | None = None) -> float:
    xtr, ytr, xte, yte = data
    torch.manual_seed(0)
    model = ViT(patch=7)
    named = list(model.named_parameters())
    base = torch.optim.AdamW(named, lr=1e-3, weight_decay=0.05)
    skip = variant.endswith("no-embed")
    measured_on_update = variant.startswith("update")
    if variant.startswith("dynamic"):
        opt = DATE(base, mode="dynamic", exclude=(lambda n, p: n in EMBEDDINGS) if skip else None)
    else:
        opt = DATE(base, mode="off")
    adapted = [(n, p) for n, p in named if p.ndim > 1 and not (skip and n in EMBEDDINGS)]
    order = torch.Generator().manual_seed(0)
    for step in range(steps):
        for group in base.param_groups:
            group["lr"] = 1e-3 * min(1.0, (step + 1) / 20)
        idx = torch.randint(0, len(xtr), (128,), generator=order)
        loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
        opt.zero_grad()
        loss.backward()
        if step == show:
            norms = {n: (p.norm().item(), p.grad.norm().item()) for n, p in adapted}
        if not measured_on_update:
            opt.step()
        else:
            _update_ratio_step(base, adapted)
        if step == show and variant == "dynamic":
            print(f"  step {step}  training loss {loss.item():.3f}")
            for (n, _), r in zip(adapted, opt.last_ratios.tolist()):
                print(f"  step {step}  {n:32s} r={r:6.3f}  |w|={norms[n][0]:.3e}  "
                      f"|g|={norms[n][1]:.3e}")
    model.eval()
    with torch.no_grad():
        return (model(xte).argmax(1) == yte).float().mean().item() * 100


@torch.no_grad()
def _update_ratio_step(base: torch.optim.Optimizer, adapted) -> None:
    """The base's step, then DATE's dynamic rule (:func:`layer_ratios`) with the update's norm
    where DATE takes the gradient's: w ← w_before + r·u."""
    before = [p.detach().clone() for _, p in adapted]
    base.step()
    update = [p - b for (_, p), b in zip(adapted, before)]
    r = layer_ratios(torch.stack([b.norm() for b in before]),
                     torch.stack([x.norm() for x in update]), DEFAULTS)
    for (_, p), b, x, ri in zip(adapted, before, update, r):
        p.copy_(b + ri * x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--data", default="data/mnist")
    parser.add_argument("--show", type=int, default=None)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    xtr, ytr, xte, yte = load_mnist(args.data)
    data = (xtr, ytr, xte[:2000], yte[:2000])
    print(f"| variant | accuracy after {args.steps} steps (2,000 test images) |\n|---|---:|")
    for variant in args.variants.split(","):
        print(f"| {variant} | {train(variant, data, args.steps, args.show):.1f} |", flush=True)


if __name__ == "__main__":
    main()
