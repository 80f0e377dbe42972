"""This machine, without torch: its cores and how training processes share them, and a line that
names it for reports (CPU model, logical CPUs, NVIDIA GPUs, OS, torch's version).

Torch-free so that ``date sweep``, which only starts ``date scale`` processes, never loads torch;
the device choices of a training process are :mod:`date_engine.train.runtime`'s.
"""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["describe", "threads_per_process"]

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
"""One folder per GPU the NVIDIA driver sees, each with an ``information`` file ("Model: ...")."""


def threads_per_process(processes: int) -> int:
    """CPU threads for each of ``processes`` training processes sharing this machine's cores (so
    that they do not each start a thread per core)."""
    return max(1, (os.cpu_count() or 1) // max(1, processes))


def describe(gpus: Path = NVIDIA_GPUS) -> str:
    """The machine in words, for a report: 'AMD EPYC 7B13, 2 logical CPUs, Linux, torch 2.13.0'."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "?"
    models = _gpu_models(gpus)
    gpu = f", {len(models)} × {models[0]}" if models else ""
    return f"{cpu}, {os.cpu_count()} logical CPUs{gpu}, {platform.system()}, torch {torch_version}"


def _gpu_models(gpus: Path) -> list[str]:
    models = []
    try:
        folders = sorted(gpus.iterdir())
    except OSError:
        return []
    for folder in folders:
        try:
            text = (folder / "information").read_text()
        except OSError:
            continue
        model = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                      if line.startswith("Model:")), None)
        if model:
            models.append(model)
    return models
