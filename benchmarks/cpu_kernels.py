"""The two CPU kernel choices in date_engine/optim/_tensors.py, timed side by side.

    python benchmarks/cpu_kernels.py [--rounds 25]

On ResNet-50's shapes (161 float32 tensors, 25.6 M values): per-tensor L2 norms by
``torch._foreach_norm`` vs a BLAS dot product, and ``buf = β·buf + r·g`` by ``mul_`` + ``addcmul_``
vs one ``addr_`` pass. Each round times every variant once; medians over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from date_engine.models.resnet import resnet50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    torch.manual_seed(0)
    shapes = [p.shape for p in resnet50().parameters()]
    tensors = [torch.randn(s) for s in shapes]
    bufs_a = [torch.randn(s) * 1e-3 for s in shapes]
    bufs_b = [b.clone() for b in bufs_a]
    r = torch.rand(len(shapes)) * 1e-3
    flat = [t.view(-1) for t in tensors]

    def addr():
        for b, g, f in zip(bufs_b, tensors, r.unbind(0)):
            b.view(-1, 1).addr_(g.view(-1), f.view(1), beta=0.9)

    variants = {
        "norms: torch._foreach_norm": lambda: torch._foreach_norm(tensors),
        "norms: BLAS dot per tensor": lambda: [torch.dot(f, f) for f in flat],
        "β·buf + r·g: _foreach_mul_ + _foreach_addcmul_": lambda: (
            torch._foreach_mul_(bufs_a, 0.9),
            torch._foreach_addcmul_(bufs_a, tensors, list(r.unbind(0))),
        ),
        "β·buf + r·g: addr_ per tensor": addr,
    }
    times = {k: [] for k in variants}
    for round_ in range(args.rounds + 3):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn()
            if round_ >= 3:
                times[name].append(time.perf_counter() - start)
    print(
        f"ResNet-50 shapes, {len(shapes)} tensors; median of {args.rounds} rounds; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    for name, ts in times.items():
        print(f"{name:50s} {statistics.median(ts) * 1e3:7.2f} ms")


if __name__ == "__main__":
    main()
