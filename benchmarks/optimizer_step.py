"""Time one optimizer step on ResNet-50's parameters, every optimizer side by side in one run.

    python benchmarks/optimizer_step.py [--steps 20] [--warmup 5] [--runs 3] [--device cuda]
                                        [--shapes resnet50|transformer] [--out FILE]

Parameters have ResNet-50's shapes (25.6 M float32 values in 161 tensors), or with ``--shapes
transformer`` a pre-LN transformer's (:func:`transformer_shapes`: 6 blocks of width 512, 23.6 M
values in 76 tensors, 50 of them biases and norms), and random values;
gradients are random too. Each round times one step of every optimizer in turn, and a plain copy
of the parameters, so a slow moment of a noisy machine hits all of them; each row is the median
over the rounds, and with ``--runs N`` the median over N such runs (each in a fresh process) of
that median and of its ratio. Every step is compared with the fastest step torch itself offers for
the same base (fused where torch has it), and with its roofline: the parameter-sized reads and
writes the step cannot avoid, at the best bandwidth the copy or torch's fused steps reached in the
same run. Targets: docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time

import torch

from date_engine.models.resnet import resnet50
from date_engine.optim import DATE, LAMB, LARS
from date_engine.optim._tensors import norms
from date_engine.optim.build import state_bytes

COPY = "copy of the parameters"
NORMS = "||w|| and ||g|| of every tensor"
"""Two reference passes timed beside the steps: a copy (one read, one write) and the two norm
reductions DATE and LARS add to their base (two reads)."""


def _sgd(**kw):
    return lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, **kw)


def _torch(cls, lr, **kw):
    return lambda ps: cls(ps, lr=lr, **kw)


def _date(base, **kw):
    return lambda ps: DATE(base(ps), **kw)


# name: (factory over a parameter list, the torch step it is compared with, target ratio,
#        parameter-sized reads and writes its step cannot avoid, parameter-sized reads it makes)
# DATE adds two reads (||w||, ||g||) to its base; LARS is momentum SGD plus those two; LAMB reads
# g, m, v, w and writes m, v computing both norms, then reads m, v, w again and writes w.
# The last number counts the reads of the step as it is built (a layer that stays in cache
# between passes reads less): on one core of this CPU a step's time follows its reads, its writes
# overlapping them (docs/performance.md). torch's foreach SGD momentum reads buf; buf, g; w, buf.
# DATE's dynamic rule needs every layer's ||w|| and ||g|| before any layer steps (the geometric
# mean of the ratios), so its two reads come before the base's. LAMB's host path per layer:
# AdamW's kernel on the buffer u (g, m, v, u), u − λw (u, w), ||w|| and ||u|| (w, u), w + r·u
# (w, u).
SGD_FOREACH, SGD_FUSED = "SGD momentum (torch, foreach)", "SGD momentum (torch, fused)"
ADAM_FUSED, ADAMW_FUSED = "Adam (torch, fused)", "AdamW (torch, fused)"
RMSPROP_FOREACH = "RMSprop (torch, foreach)"
OPTIMIZERS = {
    SGD_FOREACH: (_sgd(foreach=True), None, None, 5, 5),
    SGD_FUSED: (_sgd(fused=True), None, None, 5, 3),
    "DATE(SGD momentum)": (_date(_sgd()), SGD_FUSED, 1.25, 7, 5),
    "DATE(SGD momentum), foreach path": (_date(_sgd(), fused=False), SGD_FUSED, None, 7, None),
    "Adam (torch, foreach)": (_torch(torch.optim.Adam, 1e-3, foreach=True), None, None, 7, None),
    ADAM_FUSED: (_torch(torch.optim.Adam, 1e-3, fused=True), None, None, 7, 4),
    "DATE(Adam)": (_date(_torch(torch.optim.Adam, 1e-3)), ADAM_FUSED, 1.45, 9, 6),
    "DATE(Adam fused)": (_date(_torch(torch.optim.Adam, 1e-3, fused=True)), ADAM_FUSED, 1.45,
                         9, 6),
    "DATE(Adam), foreach path": (_date(_torch(torch.optim.Adam, 1e-3, foreach=True),
                                       fused=False), ADAM_FUSED, None, 9, None),
    ADAMW_FUSED: (_torch(torch.optim.AdamW, 1e-3, fused=True), None, None, 7, 4),
    "DATE(AdamW)": (_date(_torch(torch.optim.AdamW, 1e-3)), ADAMW_FUSED, 1.45, 9, 6),
    RMSPROP_FOREACH: (_torch(torch.optim.RMSprop, 1e-3, foreach=True), None, None, 5, None),
    "DATE(RMSprop)": (_date(_torch(torch.optim.RMSprop, 1e-3)), RMSPROP_FOREACH, 1.3, 7, 6),
    "DATE(RMSprop), foreach path": (_date(_torch(torch.optim.RMSprop, 1e-3, foreach=True),
                                          fused=False), RMSPROP_FOREACH, None, 7, None),
    "LARS": (lambda ps: LARS(ps, lr=0.1, weight_decay=1e-4), SGD_FOREACH, 1.0, 7, 5),
    "LARS, foreach path": (lambda ps: LARS(ps, lr=0.1, weight_decay=1e-4, fused=False),
                           SGD_FOREACH, None, 7, None),
    "LAMB": (lambda ps: LAMB(ps, lr=1e-3, weight_decay=1e-4), ADAMW_FUSED, 1.5, 10, 10),
    "LAMB, foreach path": (lambda ps: LAMB(ps, lr=1e-3, weight_decay=1e-4, fused=False),
                           ADAMW_FUSED, None, 10, None),
}
BANDWIDTH_PROBES = (SGD_FUSED, ADAM_FUSED, ADAMW_FUSED)
"""The roofline's bandwidth is the best any of these or the copy reached in the run: on this CPU a
single-stream copy moves fewer bytes per second than torch's fused kernels do."""
EXTRA_TARGETS = {"DATE(SGD momentum)": (SGD_FOREACH, 1.0)}
"""A second comparison for a row: (torch step, target ratio)."""


def transformer_shapes(width: int = 512, blocks: int = 6, vocab: int = 8192,
                       block: int = 1024) -> list[tuple[int, ...]]:
    """A GPT-style transformer's parameter shapes: token and position embeddings, per block two
    layer norms, the fused QKV and output projections and the 4× MLP (each with a bias), a final
    norm (the head tied to the token embedding)."""
    shapes: list[tuple[int, ...]] = [(vocab, width), (block, width)]
    for _ in range(blocks):
        shapes += [(width,), (width,), (3 * width, width), (3 * width,), (width, width), (width,),
                   (width,), (width,), (4 * width, width), (4 * width,), (width, 4 * width),
                   (width,)]
    return shapes + [(width,), (width,)]


SHAPES = {"resnet50": lambda: [tuple(p.shape) for p in resnet50().parameters()],
          "transformer": transformer_shapes}


def measure(steps: int, warmup: int, device: str = "cpu", shapes: str = "resnet50") -> dict:
    """One run on ``device``: every optimizer's median step time (ms), its implementation and
    kept state. On CUDA each step is timed to its last kernel (synchronised before and after)."""
    torch.manual_seed(0)
    shapes = SHAPES[shapes]()
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    runs = {}
    for name, (factory, *_) in OPTIMIZERS.items():
        params = [torch.nn.Parameter(torch.randn(s, device=device) * 0.05) for s in shapes]
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        runs[name] = (params, factory(params))
    source = runs[SGD_FOREACH][0]
    copies = [torch.empty_like(p) for p in source]
    times: dict[str, list[float]] = {name: [] for name in [COPY, NORMS, *OPTIMIZERS]}
    for round_ in range(warmup + steps):
        for name in times:
            sync()
            start = time.perf_counter()
            if name == COPY:
                torch._foreach_copy_(copies, source)
            elif name == NORMS:
                norms(source), norms([p.grad for p in source])
            else:
                runs[name][1].step()
            sync()
            elapsed = time.perf_counter() - start
            if round_ >= warmup:
                times[name].append(elapsed)
    return {
        "median_ms": {name: statistics.median(t) * 1e3 for name, t in times.items()},
        "implementation": {name: getattr(opt, "implementation", None)
                           for name, (_, opt) in runs.items()},
        "state_mib": {name: state_bytes(opt) / 2**20 for name, (_, opt) in runs.items()},
        "param_bytes": sum(p.numel() * p.element_size() for p in source),
        "tensors": len(shapes),
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
    }


def table(results: list[dict]) -> tuple[list[dict], float]:
    """Rows of the report: each step's median over runs of its time, of its ratios and of its
    ratio to the roofline."""
    def over_runs(f):
        return statistics.median(f(r) for r in results)

    def rate(r, name, accesses):  # bytes per second a step moved
        return accesses * r["param_bytes"] / (r["median_ms"][name] / 1e3)

    bandwidth = over_runs(lambda r: max(
        [rate(r, COPY, 2)] + [rate(r, name, OPTIMIZERS[name][3]) for name in BANDWIDTH_PROBES]))
    # the read floor: the best rate at which a pass read parameter-sized tensors (the norms'
    # reductions, or a fused step's reads)
    reading = over_runs(lambda r: max(
        [rate(r, NORMS, 2)] + [rate(r, name, OPTIMIZERS[name][4]) for name in BANDWIDTH_PROBES]))
    rows = []
    for name, (_, against, target, accesses, reads) in OPTIMIZERS.items():
        ms = over_runs(lambda r, name=name: r["median_ms"][name])
        roofline_ms = accesses * results[0]["param_bytes"] / bandwidth * 1e3
        row = dict(optimizer=name, median_ms=ms, implementation=results[0]["implementation"][name],
                   state_mib=results[0]["state_mib"][name], accesses=accesses,
                   roofline_ms=roofline_ms, over_roofline=ms / roofline_ms, reads=reads,
                   over_reads=None if reads is None else
                   ms / (reads * results[0]["param_bytes"] / reading * 1e3))
        comparisons = [(against, target)] if against else []
        comparisons += [EXTRA_TARGETS[name]] if name in EXTRA_TARGETS else []
        row["ratios"] = [
            dict(against=base, target=goal,
                 ratio=over_runs(lambda r, a=name, b=base: r["median_ms"][a] / r["median_ms"][b]))
            for base, goal in comparisons
        ]
        for ratio in row["ratios"]:
            ratio["met"] = None if ratio["target"] is None else ratio["ratio"] <= ratio["target"]
        rows.append(row)
    return rows, bandwidth, reading


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed rounds (median over them)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed rounds first")
    parser.add_argument("--runs", type=int, default=1,
                        help="runs, each in a fresh process; the report takes their medians")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--shapes", default="resnet50", choices=sorted(SHAPES),
                        help="whose parameter shapes (default resnet50)")
    parser.add_argument("--out", default="optimizer_step.json", help="where to write the JSON")
    parser.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.one_run:
        json.dump(measure(args.steps, args.warmup, args.device, args.shapes), sys.stdout)
        return
    results = []
    for _ in range(args.runs):
        out = subprocess.run([sys.executable, __file__, "--one-run", "--steps", str(args.steps),
                              "--warmup", str(args.warmup), "--threads", str(args.threads),
                              "--device", args.device, "--shapes", args.shapes],
                             check=True, capture_output=True,
                             text=True).stdout
        results.append(json.loads(out))
    rows, bandwidth, reading = table(results)
    first = results[0]
    passes = {name: statistics.median(r["median_ms"][name] for r in results)
              for name in (COPY, NORMS)}
    where = first["device"] if args.device != "cpu" else (platform.processor()
                                                          or platform.machine())
    whose = {"resnet50": "ResNet-50's", "transformer": "a transformer's"}[args.shapes]
    print(f"One step on {whose} parameters ({first['tensors']} tensors, "
          f"{first['param_bytes'] / 4e6:.1f} M float32, {first['param_bytes'] / 2**20:.0f} MiB); "
          f"median of {args.steps} interleaved rounds after {args.warmup}, median of "
          f"{args.runs} run(s); torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
          f"{where}; roofline bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s (reads + writes); reads {reading / 1e9:.1f} GB/s")
    print(f"{'optimizer':34s} {'path':8s} {'ms':>6s} {'roofline':>9s} {'×roof':>6s} "
          f"{'reads':>5s} {'×reads':>6s}  {'state MiB':>9s}  ratios")
    for r in rows:
        ratios = "; ".join(
            f"{x['ratio']:.2f}× {x['against']}"
            + ("" if x["target"] is None else
               f" (≤ {x['target']:.2f}× {'ok' if x['met'] else 'MISSED'})")
            for x in r["ratios"])
        print(f"{r['optimizer']:34s} {r['implementation'] or 'torch':8s} {r['median_ms']:6.1f} "
              f"{r['roofline_ms']:7.1f}ms {r['over_roofline']:5.2f}× "
              f"{r['reads'] or '':>5} "
              f"{'' if r['over_reads'] is None else format(r['over_reads'], '5.2f') + '×':>6s}  "
              f"{r['state_mib']:9.0f}  {ratios}")
    for name, ms in passes.items():
        moved = 2 * first["param_bytes"]  # the copy reads and writes; the norms read twice
        print(f"{name:43s} {ms:6.1f} ms  ({moved / (ms / 1e3) / 1e9:.1f} GB/s)")
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "passes_ms": passes, "runs": results, "steps": args.steps,
                   "warmup": args.warmup, "roofline_bytes_per_s": bandwidth,
                   "read_bytes_per_s": reading,
                   "torch": torch.__version__, "threads": args.threads, "device": args.device,
                   "shapes": args.shapes,
                   "machine": platform.machine()}, f,
                  indent=2)
    print(f"JSON written to {args.out}")


if __name__ == "__main__":
    main()
