"""Where a training process runs: its rank in the job, its device, backend and precision, and how
it holds the model (replicated by DDP or sharded by FSDP2).

Every device-dependent choice of the trainer is made here: CUDA or CPU, NCCL or gloo, bf16/fp16 or
fp32 (under FSDP2, its mixed-precision policy), whether ``--compile`` applies. A process joins
the job that launched it — torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` or Slurm's
``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID`` — or runs alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import itertools
import os
import re
import signal
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

__all__ = ["Runtime", "die_with_parent", "flushes_denormals", "job_environment", "raise_everywhere",
           "setup", "shard_units", "teardown"]


@dataclass(frozen=True)
class JobEnvironment:
    rank: int
    world_size: int
    local_rank: int
    launcher: str  # "torchrun", "slurm" or "none"


@dataclass
class Runtime:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None
    """The process group's backend, or None for a single process without one."""
    precision: str
    """What actually runs: fp32, bf16 or fp16."""
    compile: bool
    notes: list[str] = field(default_factory=list)
    """Things the user should know, e.g. that bf16 was asked for on a CPU."""
    parallel: str = "ddp"
    """``train.parallel``: ``ddp`` (replicas) or ``fsdp`` (sharded over the processes)."""
    flushed_denormals_before: bool = False
    """Whether the CPU flushed denormal floats to zero before :func:`setup` made it (restored by
    :func:`teardown`: a run inside the user's own process leaves its floating point as it was)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None

    @property
    def sharded(self) -> bool:
        """The model's parameters, gradients and optimizer state are sharded over the processes
        (fsdp with more than one process; one process holds the whole model either way)."""
        return self.parallel == "fsdp" and self.distributed

    def autocast(self) -> AbstractContextManager:
        """bf16/fp16 compute; under FSDP2 its mixed-precision policy casts instead
        (:meth:`shard`)."""
        if self.precision == "fp32" or self.sharded:
            return nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """fp16 needs loss scaling; bf16 and fp32 do not."""
        return torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None

    @property
    def pin_memory(self) -> bool:
        """Whether the loader pins host memory: for copies to a GPU."""
        return self.device.type == "cuda"

    def synchronize(self) -> None:
        """Wait for the device's queued work (CUDA runs asynchronously; the CPU does not)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def release_memory(self) -> None:
        """Give the allocator's cached blocks back to the device (CUDA), so that what is tried
        next allocates as a fresh process would."""
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def peak_memory(self, work: Callable[[], object]) -> tuple[int, str]:
        """(the peak bytes while ``work`` runs, what measured them): the CUDA allocator's peak
        (the CUDA context not counted), or on the CPU the process's peak resident memory, its
        high-water mark reset first where Linux allows (else the peak since the process began:
        measure sizes in ascending order)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            work()
            torch.cuda.synchronize(self.device)
            return torch.cuda.max_memory_allocated(self.device), "cuda allocator"
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        work()
        try:
            status = Path("/proc/self/status").read_text()
            return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024, "cpu resident"
        except (OSError, AttributeError):
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu resident"

    def shard(self, model: torch.nn.Module, units: list[torch.nn.Module]) -> torch.nn.Module:
        """Under fsdp in a job: shard ``model`` in place with FSDP2, each of ``units`` as one unit
        and the root holding the rest (every process built the same weights: FSDP2 broadcasts
        none). bf16/fp16 run through its policy: parameters cast for compute, fp32 master weights
        and fp32 gradient reductions. Else ``model`` unchanged. Build the optimizer after this:
        sharding replaces the parameters."""
        if not self.sharded:
            return model
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy()
        if self.precision != "fp32":
            dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
            policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        for unit in units:
            fully_shard(unit, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        return model

    def no_sync(self, wrapped: torch.nn.Module) -> AbstractContextManager:
        """A micro-batch whose gradients stay local (all but a step's last): DDP's ``no_sync``,
        FSDP2's ``set_requires_gradient_sync(False)``."""
        if self.sharded:
            return _GradientSyncOff(wrapped)
        return wrapped.no_sync() if self.distributed else nullcontext()

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module the step runs: ``model`` under DDP in a job (FSDP2's sharded ``model``
        itself under fsdp), compiled with ``--compile``."""
        wrapped = model
        if self.distributed and not self.sharded:
            wrapped = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[self.device] if self.device.type == "cuda" else None)
        if self.compile:
            wrapped = torch.compile(wrapped)
        return wrapped


class _GradientSyncOff(AbstractContextManager):
    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def __enter__(self):
        self.model.set_requires_gradient_sync(False)
        return self

    def __exit__(self, *exc) -> None:
        self.model.set_requires_gradient_sync(True)


def shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """FSDP2's default sharding units: each top-level block of ``model`` that holds parameters
    (the blocks of a top-level ``ModuleList`` or ``Sequential`` one by one), except a block that
    shares a parameter with a module outside it (a tied output head): that stays with the root."""
    blocks: list[torch.nn.Module] = []
    for child in model.children():
        inner = list(child.children())
        if isinstance(child, (torch.nn.ModuleList, torch.nn.Sequential)) and inner:
            blocks += inner
        else:
            blocks.append(child)
    everywhere = _holders(model)
    return [block for block in blocks if list(block.parameters()) and all(
        everywhere[p] == count for p, count in _holders(block).items())]


def _holders(module: torch.nn.Module) -> Counter:
    """How many modules under ``module`` hold each of its parameters (by id): more than one for
    a tied parameter."""
    return Counter(id(p) for _, m in module.named_modules(remove_duplicate=False)
                   for p in m.parameters(recurse=False))


def raise_everywhere(rt: Runtime, error: str | None) -> None:
    """Raise rank 0's ``error`` (a refusal) on every process, so that none waits for one that
    left."""
    if rt.distributed:
        box = [error]
        dist.broadcast_object_list(box, src=0)
        error = box[0]
    if error:
        from date_engine.errors import DateError

        raise DateError(error)


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send ``sig`` to this process when its parent (the launcher) dies, so that no
    worker trains on as an orphan beside a resumed run; SIGTERM makes it checkpoint and stop.
    Elsewhere this does nothing."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request: act on it now
        os.kill(os.getpid(), sig)


def job_environment(environ: dict[str, str] | None = None) -> JobEnvironment:
    """This process's place in the job, from torchrun's or Slurm's environment variables."""
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return JobEnvironment(
            int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0")), "torchrun"
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env and int(env["SLURM_NTASKS"]) > 1:
        return JobEnvironment(
            int(env["SLURM_PROCID"]),
            int(env["SLURM_NTASKS"]),
            int(env.get("SLURM_LOCALID", "0")),
            "slurm",
        )
    return JobEnvironment(0, 1, 0, "none")


def setup(
    precision: str = "fp32",
    backend: str | None = None,
    compile: bool = False,
    force_cpu: bool = False,
    parallel: str = "ddp",
) -> Runtime:
    """Join the job (initialising the process group when there is more than one process), pick
    this process's device and the precision that can run on it."""
    job = job_environment()
    notes: list[str] = []
    use_cuda = torch.cuda.is_available() and not force_cpu
    device = (
        torch.device("cuda", job.local_rank % torch.cuda.device_count())
        if use_cuda
        else torch.device("cpu")
    )
    if use_cuda:
        torch.cuda.set_device(device)
    if precision != "fp32" and device.type != "cuda":
        notes.append(
            f"{precision} runs on CUDA only; this process runs on the CPU, so it trains in fp32."
        )
        precision = "fp32"
    if compile and device.type != "cuda":
        notes.append("--compile applies on CUDA only; ignored on the CPU.")
        compile = False
    here = int(os.environ.get("LOCAL_WORLD_SIZE", job.world_size))  # processes on this machine
    units, unit = (torch.cuda.device_count(), "GPUs") if use_cuda else (os.cpu_count() or 1,
                                                                        "CPU cores")
    if here > units:
        notes.append(f"{here} processes share this machine's {units} {unit}: they take turns on "
                     f"them, so steps take longer than with --nproc {units} (the batch, its split "
                     "and the result are the same).")
    flushed_before = flushes_denormals()
    if device.type == "cpu":
        # Denormal floats take x86 CPUs a slow path: a PTB LSTM whose gates saturated after a too
        # large LR trained 6x slower with them. Flushed to zero they change nothing a model can
        # notice (|x| < 1.2e-38 in fp32). GPUs process them at full speed; this is for the CPU.
        torch.set_flush_denormal(True)

    chosen_backend = None
    if job.world_size > 1:
        # under fsdp on CUDA, a gloo group beside NCCL serves the CPU-side collectives (the
        # checkpoint's planning, the RNG states gathered into it)
        chosen_backend = backend or ("gloo" if device.type != "cuda" else
                                     "cpu:gloo,cuda:nccl" if parallel == "fsdp" else "nccl")
        if job.launcher == "slurm":
            _slurm_rendezvous(job)
        if not dist.is_initialized():
            dist.init_process_group(
                chosen_backend,
                store=_attempt_store(),
                rank=job.rank,
                world_size=job.world_size,
                device_id=device if device.type == "cuda" else None,
            )
    return Runtime(
        job.rank, job.world_size, job.local_rank, device, chosen_backend, precision, compile, notes,
        parallel, flushed_before)


_GROUPS_JOINED = itertools.count()
"""How many process groups this process has joined: every process of a job joins them in the
same order, so the count names the same group in each."""


def _attempt_store() -> dist.Store:
    """The job's rendezvous store, with keys private to this attempt and to this process group.

    After torch's elastic agent restarts failed workers, the new workers could otherwise read a
    dead worker's address from the previous attempt (seen here as gloo's "connectFullMesh failed:
    Connection refused", or as a hang). Within one attempt, a process that trains twice (two runs
    from one script under torchrun) would likewise read the first group's addresses and hang.
    """
    from torch.distributed.rendezvous import rendezvous

    store, _, _ = next(rendezvous("env://"))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"date_engine/attempt_{attempt}/group_{next(_GROUPS_JOINED)}", store)


def flushes_denormals() -> bool:
    """Whether this CPU now flushes denormal floats to zero (torch can set it, not read it)."""
    return (torch.tensor([1e-39], dtype=torch.float32) * 1.0).item() == 0.0


def teardown(runtime: Runtime) -> None:
    """Leave the process group and the CPU's handling of denormal floats as :func:`setup` found
    them."""
    if runtime.distributed and dist.is_initialized():
        dist.destroy_process_group()
    torch.set_flush_denormal(runtime.flushed_denormals_before)


def _slurm_rendezvous(job: JobEnvironment) -> None:
    """env:// rendezvous for processes started by srun: the first node of the job hosts it."""
    os.environ.setdefault("RANK", str(job.rank))
    os.environ.setdefault("WORLD_SIZE", str(job.world_size))
    os.environ.setdefault("LOCAL_RANK", str(job.local_rank))
    os.environ.setdefault("MASTER_PORT", "29500")
    if "MASTER_ADDR" not in os.environ:
        nodes = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get(
            "SLURM_NODELIST", "localhost"
        )
        os.environ["MASTER_ADDR"] = first_host(nodes)


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: 'gpu[07-09,12],cpu1' -> 'gpu07'."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        return nodelist
    prefix, ranges = match.groups()
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first
