"""What FSDP2 saves and costs for DATE: the bytes of parameters, gradients and optimizer state each
process holds, and the time of one optimizer step, for the same model replicated (DDP) and sharded
(``fully_shard``), side by side in one run.

    python benchmarks/sharded_memory.py [--width 2048] [--layers 12] [--repeats 10]

Starts 2 processes (gloo, one thread each) itself. The model: ``--layers`` square linear layers of
``--width`` (12 × 2048² ≈ 50.4 M parameters), DATE over Adam (two state tensors a parameter). Each
process counts the bytes of the tensors it holds (a DTensor's local shard), then times the step:
the median over ``--repeats`` of DATE's ``step()`` after a forward and backward on 8 samples, the
two layouts alternating. Under FSDP2 the step adds the one all-reduce of every layer's squared
norms (docs/optimizer.md, "Sharded models"); DDP's gradients are all-reduced in backward, outside
the timed step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def held(tensors) -> int:
    """Bytes this process holds of ``tensors`` (a DTensor: its local shard)."""
    from date_engine.optim._tensors import local

    return sum(local(t).numel() * t.element_size() for t in tensors)


def worker(width: int, layers: int, repeats: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    from date_engine.optim import DATE

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    def build(layout: str):
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
        if layout == "fsdp":
            for layer in model:
                fully_shard(layer)
            model = fully_shard(model)
        else:
            model = DistributedDataParallel(model)
        return model, DATE(torch.optim.Adam(model.parameters(), lr=1e-4))

    setups = {layout: build(layout) for layout in ("ddp", "fsdp")}
    x = torch.randn(8, width)
    times: dict[str, list[float]] = {layout: [] for layout in setups}
    for i in range(repeats + 1):
        for layout, (model, opt) in setups.items():
            opt.zero_grad()
            model(x).square().mean().backward()
            dist.barrier()
            start = time.perf_counter()
            opt.step()
            dist.barrier()
            if i:  # the first step allocates Adam's state
                times[layout].append(time.perf_counter() - start)
    if rank == 0:
        for layout, (model, opt) in setups.items():
            params = list(model.parameters())
            state = [t for s in opt.state.values() for t in s.values()
                     if isinstance(t, torch.Tensor) and t.ndim > 0]
            print(json.dumps({
                "layout": layout,
                "parameters": sum(p.numel() for p in params),
                "param_bytes": held(params),
                "grad_bytes": held([p.grad for p in params]),
                "state_bytes": held(state),
                "step_ms": 1000 * statistics.median(times[layout]),
            }), flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.width, args.layers, args.repeats)
        return
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           __file__, "--worker", "--width", str(args.width), "--layers", str(args.layers),
           "--repeats", str(args.repeats)]
    out = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                         text=True, check=True).stdout
    rows = {r["layout"]: r for r in map(json.loads, out.splitlines())}
    mib = 2**20
    print(f"{rows['ddp']['parameters'] / 1e6:.1f} M parameters, DATE(Adam), 2 processes (gloo)")
    print("| layout | parameters | gradients | optimizer state | all three | step (median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for layout, r in rows.items():
        total = r["param_bytes"] + r["grad_bytes"] + r["state_bytes"]
        print(f"| {layout} | {r['param_bytes'] / mib:.1f} MiB | {r['grad_bytes'] / mib:.1f} MiB | "
              f"{r['state_bytes'] / mib:.1f} MiB | {total / mib:.1f} MiB | {r['step_ms']:.1f} ms |")
    ddp, fsdp = rows["ddp"], rows["fsdp"]
    share = sum(fsdp[k] for k in ("param_bytes", "grad_bytes", "state_bytes")) / \
        sum(ddp[k] for k in ("param_bytes", "grad_bytes", "state_bytes"))
    print(f"fsdp holds {share:.3f}× ddp's bytes per process; its step takes "
          f"{fsdp['step_ms'] / ddp['step_ms']:.2f}× ddp's")


if __name__ == "__main__":
    main()
