"""A checkpoint's write and read against plain torch.save / torch.load of the same state.

    python benchmarks/checkpoint_io.py [--mb 1024] [--repeats 3]

The state is float32 tensors of ``--mb`` MiB in all (a model and an optimizer state of twice its
size, as Adam keeps). Each operation runs in a fresh process, alternating, ``--repeats`` times:
checkpoint.save_atomic (checksum trailer, fsync, atomic rename) against torch.save to a path,
checkpoint.newest_valid (checksum verified, then loaded) against torch.load of a path. Reported:
median seconds and the peak resident memory the operation added to the process (ru_maxrss after,
less the resident size before), and their ratios. The state's own size is the floor of a read's
memory: it has to be built.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

OPS = ("save", "torch.save", "read", "torch.load")


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _payload(mib: int) -> dict:
    n = mib * 2**20 // 4 // 3  # model + two optimizer tensors per parameter
    size = n // 8
    model = {f"layer{i}.weight": torch.randn(size) for i in range(8)}
    state = {i: {"exp_avg": torch.randn(size), "exp_avg_sq": torch.rand(size)} for i in range(8)}
    optimizer = {"state": state, "param_groups": [{"lr": 1e-3, "params": list(range(8))}]}
    return {"format": 1, "step": 1, "model": model, "optimizer": optimizer,
            "plan": {"peak_lr": 1e-3}, "spec_fingerprint": "bench", "ranks": [{}]}


def one(op: str, mib: int, folder: Path) -> dict:
    """Run ``op`` once in this process; the state is built (or the file written) beforehand."""
    from date_engine.runfolder import RunFolder
    from date_engine.train import checkpoint as ckpt

    run, plain = RunFolder(folder / "run"), folder / "plain.pt"
    if op in ("save", "torch.save"):
        payload = _payload(mib)
        base, began = _rss_mib(), time.perf_counter()
        if op == "save":
            ckpt.save_atomic(run, 1, payload, keep=1)
        else:
            torch.save(payload, plain)
            with open(plain, "rb") as f:  # the same durability as save_atomic's
                os.fsync(f.fileno())
    else:
        base, began = _rss_mib(), time.perf_counter()
        if op == "read":
            found = ckpt.newest_valid(run)
            assert found is not None and found.payload["step"] == 1
        else:
            torch.load(plain, map_location="cpu", weights_only=True)
    return {"seconds": time.perf_counter() - began, "added_mib": _peak_mib() - base}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="the state's size in MiB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", choices=OPS, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.mb, args.dir)))
        return
    results: dict[str, list[dict]] = {op: [] for op in OPS}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for op in OPS:  # each read follows the write it reads
                out = subprocess.run([sys.executable, __file__, "--one", op, "--mb", str(args.mb),
                                      "--dir", tmp], check=True, capture_output=True, text=True)
                results[op].append(json.loads(out.stdout))
    med = {op: {k: statistics.median(r[k] for r in runs) for k in ("seconds", "added_mib")}
           for op, runs in results.items()}
    print(f"state: {args.mb} MiB of float32; medians of {args.repeats} runs, one process each")
    print(f"{'operation':<12} {'seconds':>8} {'peak memory added (MiB)':>24}")
    for op in OPS:
        print(f"{op:<12} {med[op]['seconds']:>8.2f} {med[op]['added_mib']:>24.0f}")
    for ours, theirs in (("save", "torch.save"), ("read", "torch.load")):
        print(f"{ours} / {theirs}: time {med[ours]['seconds'] / med[theirs]['seconds']:.2f}×, "
              f"peak memory added {med[ours]['added_mib'] / args.mb:.2f}× against "
              f"{med[theirs]['added_mib'] / args.mb:.2f}× the state's size")


if __name__ == "__main__":
    main()
