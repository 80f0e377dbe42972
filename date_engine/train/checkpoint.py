"""Checkpoints: written atomically, verified when read, found again after any kind of stop,
refused if they belong to another plan.

A checkpoint is one file ``checkpoints/step-00000123.pt`` written by rank 0: model, optimizer
(DATE's state included), the step, the samples each process has read, every process's RNG states and
unlogged losses, the plan, and a fingerprint of the spec — ``torch.save``'s bytes, followed by a
trailer: a JSON record (the bytes' SHA-256, the step, the plan's id), its length and a magic word.
The file is written to a temporary name in the same folder, flushed to disk and renamed, so a crash
mid-write leaves the previous checkpoint intact; the temporary files of killed writes are removed
when the next run of the folder starts. Reading checks the SHA-256 (a flipped byte is caught, and
the checkpoint before it is taken, with a warning) and uses ``torch.load(weights_only=True)``: a
checkpoint holds tensors and plain values only.

Only finite states are written: a checkpoint is a promise that training can go on from it.

A sharded model (``train.parallel: fsdp``) is checkpointed as a folder of shards instead
(:mod:`date_engine.train.shards`), with the same promises: written atomically, verified when read,
rotated, refused for another plan.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from date_engine.errors import DateError
from date_engine.optim._tensors import local
from date_engine.plan import document_id
from date_engine.runfolder import RunFolder
from date_engine.train import shards

__all__ = [
    "FORMAT",
    "CheckpointPolicy",
    "Found",
    "capture_rng",
    "check_layout",
    "derived_by_older_rules",
    "describe_mismatch",
    "finite",
    "newest_valid",
    "refuse",
    "remove_partial_writes",
    "restore_rng",
    "save_atomic",
]

FORMAT = 1
"""The payload's layout (the keys below)."""
REQUIRED = ("format", "step", "model", "optimizer", "plan", "spec_fingerprint", "ranks")
_MAGIC = b"DATECKPT"
_TRAILER = struct.Struct("<Q8s")  # length of the JSON record, magic


def finite(*states: Any) -> bool:
    """Whether every floating-point tensor in ``states`` (nested dicts and lists, as state dicts
    are) is finite. One host synchronisation; used before a checkpoint is written."""
    tensors = [local(t) for t in _tensors(states) if t.is_floating_point() or t.is_complex()]
    if not tensors:
        return True
    return bool(torch.stack([torch.isfinite(t).all().to(tensors[0].device) for t in tensors]).all())


def _tensors(value: Any):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def save_atomic(run: RunFolder, step: int, payload: dict[str, Any], keep: int) -> Path:
    """Write ``payload`` as the checkpoint of ``step``, then remove this plan's older checkpoints
    beyond the ``keep`` newest (by write order; never the one just written)."""
    final = run.checkpoint_path(step)
    folder = final.parent
    folder.mkdir(parents=True, exist_ok=True)
    ident = document_id(payload["plan"])
    tmp = folder / f".{final.name}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            hashing = _HashingWriter(f)
            torch.save(payload, hashing)  # streamed: no second copy of the state in memory
            record = json.dumps({"sha256": hashing.sha256.hexdigest(), "step": step,
                                 "plan": ident}).encode()
            f.write(record)
            f.write(_TRAILER.pack(len(record), _MAGIC))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    _rotate(run, final, ident, keep)
    return final


def _rotate(run: RunFolder, final: Path, ident: str, keep: int) -> None:
    """Make the write of ``final`` durable, then remove this plan's checkpoints beyond the
    ``keep`` newest (by write order; never ``final``)."""
    _fsync_dir(final.parent)
    same_plan = [p for p in _by_write_order(run) if _trailer(p).get("plan") == ident]
    for old in [p for p in same_plan if p != final][max(keep - 1, 0):]:
        _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@dataclass(frozen=True)
class Found:
    """The checkpoint a run continues from, and the newer ones that could not be read."""

    path: Path
    payload: dict[str, Any]
    skipped: tuple[str, ...] = ()
    """One sentence per newer checkpoint passed over (damaged, cut short)."""


def newest_valid(run: RunFolder) -> Found | None:
    """The newest checkpoint (by write order) whose bytes match their checksum, that loads and has
    every required entry; None if there is none. In a folder where any checkpoint carries its
    checksum trailer, one without it was cut short (or damaged where its checksum would have
    caught it) and is passed over too."""
    skipped = []
    ordered = _by_write_order(run)
    trailed = any(_trailer(p) for p in ordered)
    for path in ordered:
        problem, payload = _read(path, trailed)
        if problem is None:
            return Found(path, payload, tuple(skipped))
        skipped.append(f"{path.name}: {problem}")
    return None


def remove_partial_writes(run: RunFolder) -> list[Path]:
    """Delete the temporary files of checkpoint writes that were killed (call only while holding
    the run folder's lock, so that no write is in flight)."""
    if not run.checkpoint_dir.is_dir():
        return []
    partial = [p for p in run.checkpoint_dir.iterdir()
               if p.name.startswith(".step-") and ".tmp-" in p.name]
    for p in partial:
        _remove(p)
    return partial


def _read(path: Path, trailed: bool = False) -> tuple[str | None, dict[str, Any] | None]:
    """Check the bytes against the trailer's checksum, then load them — both streamed from the
    file, so reading needs no memory beyond the state it loads (``trailed``: a file without a
    trailer is refused). A folder of shards: its files against its manifest, and its run.pt (the
    shards are read by :func:`shards.load`)."""
    if shards.is_sharded_checkpoint(path):
        problem, payload = shards.read(path)
        required = [k for k in REQUIRED if k != "model"]
        if problem is None and not (all(k in payload for k in required)
                                    and payload["format"] == FORMAT):
            return "is not a checkpoint of this version", None
        return problem, payload
    try:
        with open(path, "rb") as f:
            record, body = _trailer_in(f)
            if record is None and trailed:
                return ("has no checksum trailer, which the other checkpoints here carry (cut "
                        "short or damaged)"), None
            if record is not None and _sha256(f, body) != record.get("sha256"):
                return "its bytes do not match the checksum written with it (damaged)", None
            f.seek(0)
            try:
                payload = torch.load(_Window(f, body), map_location="cpu", weights_only=True)
            except OSError:
                raise
            except Exception:  # written by no version of this program, or cut short
                return "does not load (cut short or not a checkpoint)", None
    except OSError as exc:
        return f"cannot be read ({exc.strerror})", None
    if not (isinstance(payload, dict) and all(k in payload for k in REQUIRED)
            and payload["format"] == FORMAT):
        return "is not a checkpoint of this version", None
    return None, payload


def _trailer_in(f: BinaryIO) -> tuple[dict[str, Any] | None, int]:
    """(the trailer's record, the length of torch.save's bytes before it) of an open checkpoint
    file; (None, the file's length) for a file without a readable trailer."""
    size = f.seek(0, os.SEEK_END)
    if size < _TRAILER.size:
        return None, size
    f.seek(size - _TRAILER.size)
    length, magic = _TRAILER.unpack(f.read(_TRAILER.size))
    if magic != _MAGIC or length > size - _TRAILER.size:
        return None, size
    f.seek(size - _TRAILER.size - length)
    try:
        record = json.loads(f.read(length))
    except ValueError:
        return None, size
    if not isinstance(record, dict):
        return None, size
    return record, size - _TRAILER.size - length


def _trailer(path: Path) -> dict[str, Any]:
    """The record at the end of a checkpoint file, read without reading the file ({} if none);
    a folder of shards: its manifest."""
    if shards.is_sharded_checkpoint(path):
        return shards.manifest(path)
    try:
        with open(path, "rb") as f:
            return _trailer_in(f)[0] or {}
    except OSError:
        return {}


def _sha256(f: BinaryIO, length: int, chunk: int = 1 << 24) -> str:
    """The SHA-256 of the first ``length`` bytes of ``f``, read in chunks."""
    f.seek(0)
    digest, buffer = hashlib.sha256(), memoryview(bytearray(chunk))
    while length > 0:
        got = f.readinto(buffer[: min(chunk, length)])
        if not got:
            break
        digest.update(buffer[:got])
        length -= got
    return digest.hexdigest()


class _HashingWriter:
    """What ``torch.save`` writes into: passes the bytes on to ``f`` and hashes them."""

    def __init__(self, f: BinaryIO):
        self._f, self.sha256 = f, hashlib.sha256()

    def write(self, data) -> int:
        self.sha256.update(data)
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()


class _Window(io.RawIOBase):
    """The first ``length`` bytes of ``f`` as a file of their own (``torch.load`` finds its zip
    directory from the end of what it reads, so the trailer must not be part of it)."""

    def __init__(self, f: BinaryIO, length: int):
        super().__init__()
        self._f, self._length, self._pos = f, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._length}[whence]
        self._pos = max(base + offset, 0)
        return self._pos

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self._length - self._pos)
        if want <= 0:
            return 0
        self._f.seek(self._pos)
        got = self._f.readinto(memoryview(buffer).cast("B")[:want])
        self._pos += got
        return got


def _by_write_order(run: RunFolder) -> list[Path]:
    """The checkpoint files, the most recently written first."""
    files = []
    for p in run.checkpoints():
        try:
            files.append((p.stat().st_mtime_ns, p))
        except OSError:  # removed meanwhile
            continue
    return [p for _, p in sorted(files, key=lambda f: (f[0], f[1].name), reverse=True)]


def capture_rng(numpy: bool = True) -> dict[str, Any]:
    """This process's random states: torch (CPU and CUDA), Python, and numpy's when it is loaded
    (unless ``numpy=False``: the trainer itself draws nothing from numpy, and reading its state
    costs most of this function's time)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    np = _numpy() if numpy else None
    if np is not None:
        name, keys, pos, has_gauss, gauss = np.random.get_state()
        state["numpy"] = [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss]
    return state


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        # one state per GPU the writer saw: a machine with fewer restores those it has
        for index, cuda in enumerate(state["cuda"][:torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda, index)
    np = _numpy()
    if np is not None and "numpy" in state:
        name, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))


_NOT_COMPARED = ("grad_clip", "derivations", "lr_note")
"""Plan keys a checkpoint's plan is not compared on: the clipping, which the spec's fingerprint
covers (plans written before it was a plan key lack it), and the plan's own words — each
derivation's formula and why, the LR's note — which a version may word anew while every number
that trains stays (the numbers are plan keys of their own)."""


def _without(plan: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in plan.items() if k not in keys}


def describe_mismatch(
    saved_plan: dict[str, Any], plan: dict[str, Any], saved_fp: str, fp: str
) -> str | None:
    """Why a checkpoint cannot continue this run, or None if it can."""
    if saved_fp != fp:
        return "it was written for another spec (a baseline, date or training setting differs)"
    saved_parallel, parallel = saved_plan.get("parallel", "ddp"), plan.get("parallel", "ddp")
    if saved_parallel != parallel:
        return f"it was written by a train.parallel: {saved_parallel} run, not {parallel}"
    keys = ("target_batch", "world_size", "micro_batch", "accumulation_steps")
    if any(saved_plan.get(k) != plan.get(k) for k in keys):
        return (
            f"it was written for batch {saved_plan.get('target_batch')} = "
            f"{saved_plan.get('micro_batch')} × {saved_plan.get('world_size')} processes × "
            f"{saved_plan.get('accumulation_steps')}, not batch {plan['target_batch']} = "
            f"{plan['micro_batch']} × {plan['world_size']} × {plan['accumulation_steps']}"
        )
    if _without(saved_plan, _NOT_COMPARED) != _without(plan, _NOT_COMPARED):
        return "its plan differs from this run's"
    return None


def derived_by_older_rules(saved_plan: dict[str, Any], plan: dict[str, Any], saved_fp: str,
                           fp: str) -> bool:
    """Whether a checkpoint's plan differs from this run's only because older rules derived it
    (the same spec and split, a lower ``rules_version``): the run then keeps the plan it
    started with."""
    keys = ("target_batch", "world_size", "micro_batch", "accumulation_steps", "parallel")
    return (saved_fp == fp and saved_plan.get("rules_version", 1) < plan["rules_version"]
            and all(saved_plan.get(k) == plan.get(k) for k in keys))


def check_layout(found: Found, sharded: bool, parallel: str) -> None:
    """Refuse a checkpoint whose layout (a folder of shards, a whole-model file) a run of
    ``train.parallel: parallel`` cannot read."""
    if bool(found.payload.get("sharded")) != sharded:
        kind = "a folder of shards" if found.payload.get("sharded") else "a whole-model file"
        raise DateError(f"{found.path}: {kind}, which a train.parallel: {parallel} run cannot "
                        "read, even with --force-replan; resume with the train.parallel it was "
                        "written with, or choose another --output-dir.")


def refuse(path: Path, reason: str) -> DateError:
    return DateError(
        f"{path}: cannot resume from this checkpoint: {reason}. Resume with the settings it was "
        "written for, choose another --output-dir, or pass --force-replan to continue its weights "
        "under the new plan."
    )


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _numpy():
    import sys

    return sys.modules.get("numpy")


class CheckpointPolicy:
    """When to write a checkpoint besides the end and a stop: every ``every_steps`` optimizer
    steps, or (without it) once ``minutes`` have passed since the last one by rank 0's clock."""

    def __init__(self, every_steps: int | None, minutes: float) -> None:
        self.every_steps, self.seconds = every_steps, minutes * 60
        self._last = time.monotonic()

    def time_due(self, is_main: bool) -> bool:
        """This process's vote for saving by time (only rank 0's clock counts)."""
        return (
            self.every_steps is None and is_main and time.monotonic() - self._last >= self.seconds
        )

    def due(self, step: int, agreed_time_due: bool) -> bool:
        return agreed_time_due or bool(self.every_steps and step % self.every_steps == 0)

    def saved(self) -> None:
        self._last = time.monotonic()


class NonFiniteState(Exception):
    """The model's or optimizer's state is not finite (found when a checkpoint was to be
    written): no checkpoint may promise a state training cannot go on from."""


def save_run(rt, folder: RunFolder, step: int, run, model, optimizer, scaler, noise,
             log, *, seed: int, spec_fingerprint: str, recipe: str, keep: int,
             rng: dict[str, Any] | None = None, pair_gradient: Any = None,
             guard: dict[str, Any] | None = None) -> Path | None:
    """Write the checkpoint of ``step`` of a run stepping as ``run`` (collective: every
    process sends its RNG states — ``rng``, or its state now — and its unlogged losses; with
    ``pair_gradient``, the last step's gradient the next pair product needs). Returns
    the path on rank 0, else None. Raises :class:`NonFiniteState` on every process when the
    model's or optimizer's state is not finite (the replicas are equal, so every process does)."""
    import torch.distributed as dist

    sharded = run.split.sharded
    ok = finite(model.state_dict(), optimizer.state_dict())
    if sharded and rt.distributed:  # each process checked its own shards
        flag = torch.tensor([float(not ok)])
        dist.all_reduce(flag)
        ok = flag.item() == 0
    if not ok:
        raise NonFiniteState
    mine = {"rng": rng if rng is not None else capture_rng(), "log_window": log.window_state()}
    states = [None] * rt.world_size if rt.distributed else [mine]
    if rt.distributed:
        dist.all_gather_object(states, mine)
    samples = run.samples_through(step)
    payload = {
        "format": FORMAT,
        "step": step,
        "samples_seen": samples,
        "train_seconds": log.train_seconds(),
        "sampler": {"samples_per_process": samples // run.split.world_size, "seed": seed},
        "scaler": scaler.state_dict() if scaler is not None else None,
        "noise": noise.state_dict() if noise is not None else None,
        "pair_gradient": pair_gradient.detach().cpu() if pair_gradient is not None else None,
        "ranks": states,
        "plan": run.to_dict(),
        "spec_fingerprint": spec_fingerprint,
        "recipe": recipe,
        "guard": guard,
    }
    if sharded:
        ident = document_id(payload["plan"])
        final = folder.checkpoint_path(step, sharded=True)
        final.parent.mkdir(parents=True, exist_ok=True)
        path = shards.save(rt, final, payload, model, optimizer, ident)
        if path is not None:
            _rotate(folder, path, ident, keep)
        return path
    if not rt.is_main:
        return None
    payload.update(model=model.state_dict(), optimizer=optimizer.state_dict())
    return save_atomic(folder, step, payload, keep)


def read_back(folder: RunFolder, step: int) -> None:
    """Refuse, in one sentence, when the newest valid checkpoint of ``folder`` is not the one of
    ``step`` just written (a dry run reads back what it wrote)."""
    found = newest_valid(folder)
    if found is None or found.payload["step"] != step:
        raise DateError(f"dry run: the checkpoint written at step {step} could not be read back")
