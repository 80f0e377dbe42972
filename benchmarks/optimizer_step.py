"""Time one optimizer step on ResNet-50's parameters, every optimizer side by side in one run.

    python benchmarks/optimizer_step.py [--steps 30] [--warmup 5] [--out optimizer_step.json]

Parameters have ResNet-50's shapes (25.6 M values in 161 tensors) and random values; gradients are
random too. Each round times one step of every optimizer in turn, so a slow moment of a noisy
machine hits all of them; the table reports each one's median over the rounds and its ratio to
the step it is compared with. Targets (docs/performance.md): DATE(SGD momentum) ≤ 1.25× SGD
momentum, DATE(Adam) ≤ 1.6× Adam, LARS and LAMB ≥ 2× faster than the per-parameter loops.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from date_engine.models.resnet import resnet50
from date_engine.optim import DATE, LAMB, LARS
from date_engine.optim.reference import ReferenceLAMB, ReferenceLARS

# name: (factory over a parameter list, the row it is compared with, target ratio, "max" or "min")
OPTIMIZERS = {
    "SGD momentum (torch, foreach)": (
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True), None, None, None),
    "DATE(SGD momentum)": (
        lambda ps: DATE(torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True)),
        "SGD momentum (torch, foreach)", 1.25, "max"),
    "DATE(SGD momentum), per-tensor loop": (
        lambda ps: DATE(torch.optim.SGD(ps, lr=0.1, momentum=0.9), foreach=False),
        "SGD momentum (torch, foreach)", None, None),
    "Adam (torch, foreach)": (
        lambda ps: torch.optim.Adam(ps, lr=1e-3, foreach=True), None, None, None),
    "DATE(Adam)": (
        lambda ps: DATE(torch.optim.Adam(ps, lr=1e-3, foreach=True)),
        "Adam (torch, foreach)", 1.6, "max"),
    "DATE(Adam), per-tensor loop": (
        lambda ps: DATE(torch.optim.Adam(ps, lr=1e-3, foreach=True), foreach=False),
        "Adam (torch, foreach)", None, None),
    "LARS": (lambda ps: LARS(ps, lr=0.1, weight_decay=1e-4), "LARS, per-parameter loop", 0.5,
             "max"),
    "LARS, per-parameter loop": (
        lambda ps: ReferenceLARS(ps, lr=0.1, weight_decay=1e-4), None, None, None),
    "LAMB": (lambda ps: LAMB(ps, lr=1e-3, weight_decay=1e-4), "LAMB, per-parameter loop", 0.5,
             "max"),
    "LAMB, per-parameter loop": (
        lambda ps: ReferenceLAMB(ps, lr=1e-3, weight_decay=1e-4), None, None, None),
}


def state_bytes(opt) -> int:
    """Bytes the optimizer keeps between steps: its state and its scratch buffers."""
    tensors = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    tensors += list(getattr(opt, "_before", {}).values())  # DATE over an adaptive base
    tensors += list(getattr(opt, "_u", {}).values())  # LAMB's update
    return sum(t.numel() * t.element_size() for t in tensors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="timed rounds (median over them)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed rounds first")
    parser.add_argument("--out", default="optimizer_step.json", help="where to write the JSON")
    args = parser.parse_args()

    torch.manual_seed(0)
    shapes = [p.shape for p in resnet50().parameters()]
    runs = {}
    for name, (factory, *_) in OPTIMIZERS.items():
        params = [torch.nn.Parameter(torch.randn(s) * 0.05) for s in shapes]
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        runs[name] = (params, factory(params))
    param_bytes = sum(p.numel() * p.element_size() for p in runs[next(iter(runs))][0])

    times: dict[str, list[float]] = {name: [] for name in OPTIMIZERS}
    for round_ in range(args.warmup + args.steps):
        for name, (_, opt) in runs.items():
            start = time.perf_counter()
            opt.step()
            elapsed = time.perf_counter() - start
            if round_ >= args.warmup:
                times[name].append(elapsed)

    rows = []
    for name, (_, against, target, _) in OPTIMIZERS.items():
        median = statistics.median(times[name])
        ratio = median / statistics.median(times[against]) if against else None
        met = None if target is None else ratio <= target
        extra = state_bytes(runs[name][1]) - (state_bytes(runs[against][1]) if against else 0)
        rows.append(dict(optimizer=name, median_ms=median * 1e3, compared_with=against,
                         ratio=ratio, target=target, met=met,
                         state_mb=state_bytes(runs[name][1]) / 2**20,
                         extra_state_mb=extra / 2**20 if against else None))

    print(f"One step on ResNet-50's parameters ({len(shapes)} tensors, "
          f"{sum(s.numel() for s in shapes) / 1e6:.1f} M values, {param_bytes / 2**20:.0f} MiB); "
          f"median of {args.steps} rounds after {args.warmup} warm-up rounds; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{platform.processor() or platform.machine()}")
    print(f"{'optimizer':38s} {'median ms':>10s} {'ratio':>7s}  {'vs':30s} {'target':>7s} "
          f"{'state MiB':>10s}")
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else ""
        target = "" if r["target"] is None else \
            f"<={r['target']:.2f}x" + (" ok" if r["met"] else " MISS")
        print(f"{r['optimizer']:38s} {r['median_ms']:10.1f} {ratio:>7s}  "
              f"{r['compared_with'] or '':30s} {target:>7s} {r['state_mb']:10.0f}")
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "steps": args.steps, "warmup": args.warmup, "tensors": len(shapes),
                   "torch": torch.__version__, "threads": torch.get_num_threads(),
                   "machine": platform.machine()}, f, indent=2)
    print(f"JSON written to {args.out}")


if __name__ == "__main__":
    main()
