"""This machine, without torch: its cores and how training processes share them, and a line that
names it for reports (CPU model, logical CPUs, NVIDIA GPUs, OS, torch's version).

Torch-free so that ``date sweep``, which only starts ``date scale`` processes, never loads torch;
the device choices of a training process are :mod:`date_engine.train.runtime`'s.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import MutableMapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["choose_threads", "describe", "huge_pages_for_tensors", "idle_cores",
           "threads_per_process"]

CPUINFO = Path("/proc/cpuinfo")
"""Linux's description of each logical CPU (model name, family, model, flags)."""
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
"""One folder per GPU the NVIDIA driver sees, each with an ``information`` file ("Model: ...")."""
TRANSPARENT_HUGE_PAGES = Path("/sys/kernel/mm/transparent_hugepage/enabled")
"""Linux's transparent huge page mode: ``always [madvise] never``, the one in brackets in force."""
HUGE_PAGES_SWITCH = "THP_MEM_ALLOC_ENABLE"
"""torch's switch (read once, at a process's first CPU allocation): CPU tensors of 2 MiB or more
are asked to live on 2 MiB pages (madvise)."""


def threads_per_process(processes: int) -> int:
    """CPU threads for each of ``processes`` training processes sharing this machine's cores (so
    that they do not each start a thread per core)."""
    return max(1, (os.cpu_count() or 1) // max(1, processes))


PROC_STAT = Path("/proc/stat")
"""Linux's CPU time counters since boot: the ``cpu`` line's fields are user, nice, system, idle,
iowait, ... in clock ticks, summed over the logical CPUs."""


def _idle_and_total(stat: Path) -> tuple[int, int] | None:
    try:
        fields = [int(x) for x in stat.read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[3] + fields[4], sum(fields[:8])) if len(fields) >= 5 else None


def idle_cores(seconds: float = 0.25, stat: Path = PROC_STAT) -> float | None:
    """How many of this machine's logical CPUs sat idle over the next ``seconds`` (None where the
    kernel does not say: not Linux)."""
    before = _idle_and_total(stat)
    time.sleep(seconds)
    after = _idle_and_total(stat)
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (os.cpu_count() or 1) * (after[0] - before[0]) / (after[1] - before[1])


def choose_threads(processes: int, environ: MutableMapping[str, str] = os.environ,
                   idle: float | None = None, kept: int | None = None) -> tuple[int, str]:
    """Intra-op threads for each of ``processes`` training processes started now, and why: a
    user's ``OMP_NUM_THREADS`` as given; else ``kept``, the threads a resumed run began with (it
    goes on bit for bit); else the cores idle right now (``idle``, measured when not given)
    shared out, at most this machine's share per process. Threads beyond the idle cores
    wait on each other: on this project's 2-core VM the lenet-digits baseline with both threads
    beside one busy process ran 46× slower than with one (benchmarks/threads.py)."""
    given = environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given), "OMP_NUM_THREADS"
    if kept:
        return kept, "as this run began: it resumes bit for bit"
    share = threads_per_process(processes)
    idle = idle_cores() if idle is None else idle
    if idle is None:
        return share, f"{os.cpu_count() or 1} cores shared by {processes} process(es)"
    cores, free = os.cpu_count() or 1, int(idle + 0.5)
    busy = max(0, cores - free)
    why = (f"{busy} of {cores} cores busy with other work at the start" if busy else
           f"{cores} idle cores shared by {processes} process(es)")
    return min(share, max(1, free // max(1, processes))), why + "; OMP_NUM_THREADS sets it"


def huge_pages_for_tensors(environ: MutableMapping[str, str] = os.environ,
                           mode: Path = TRANSPARENT_HUGE_PAGES) -> bool:
    """Ask torch to back large CPU tensors with transparent huge pages, in this process and the
    ones it starts, unless ``THP_MEM_ALLOC_ENABLE`` is already set (a user's 0 keeps them off) or
    the kernel has them off (``never``, or no such file: not Linux). Returns whether they are on.

    On a CPU, a training step writes its activations and gradients into buffers that are freed
    and allocated again every step; on 4 KiB pages each step faults them in again and walks more
    page tables. On this project's CPU huge pages made lstm-mnist's one-process step 1.25–1.38×
    faster and kept lenet-mnist's at its fast speed, where on 4 KiB pages a process drew 35 or
    50 ms for its life (benchmarks/huge_pages.py, docs/performance.md). It must be set before
    torch's first CPU allocation: date_engine.train sets it on import."""
    if HUGE_PAGES_SWITCH in environ:
        return environ[HUGE_PAGES_SWITCH] not in ("", "0")
    try:
        setting = mode.read_text()
    except OSError:
        return False
    if "[never]" in setting or "[" not in setting:
        return False
    environ[HUGE_PAGES_SWITCH] = "1"
    return True


def describe(gpus: Path = NVIDIA_GPUS, cpuinfo: Path = CPUINFO) -> str:
    """The machine in words, for a report: 'AMD EPYC 7B13 (family 25 model 1, AVX2), 2 logical
    CPUs, Linux, torch 2.13.0'. The CPU's family, model and widest vector instructions are named
    because two CPUs sold under one name can run torch's kernels with other instructions, and a
    float rounded otherwise can change where a run goes (a plateau left or not)."""
    cpu = platform.processor() or platform.machine()
    try:
        first = cpuinfo.read_text().split("\n\n", 1)[0]
    except OSError:
        first = ""
    fields = dict(line.split(":", 1) for line in first.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    cpu = fields.get("model name", cpu)
    detail = []
    if "cpu family" in fields and "model" in fields:
        detail.append(f"family {fields['cpu family']} model {fields['model']}")
    flags = set(fields.get("flags", "").split())
    widest = next((name for flag, name in _VECTOR_UNITS if flag in flags), None)
    if widest:
        detail.append(widest)
    if detail:
        cpu += f" ({', '.join(detail)})"
    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "?"
    models = _gpu_models(gpus)
    gpu = f", {len(models)} × {models[0]}" if models else ""
    return f"{cpu}, {os.cpu_count()} logical CPUs{gpu}, {platform.system()}, torch {torch_version}"


_VECTOR_UNITS = (("amx_tile", "AMX"), ("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"),
                 ("asimd", "NEON"))
"""/proc/cpuinfo flags, widest first, and the name a report gives them."""


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
