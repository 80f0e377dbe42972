"""Checks of the paths and options a user passes, made before any work starts: each failure is a
:class:`~date_engine.errors.DateError` with one sentence naming the option and what to do."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from date_engine.errors import DateError

__all__ = [
    "BACKENDS",
    "a_path",
    "check_backend",
    "check_dataset_size",
    "check_endpoint",
    "check_launch",
    "check_port",
    "output_file",
    "output_folder",
    "parse_size",
    "writable_file",
]

BACKENDS = ("gloo", "nccl", "mpi")
"""torch.distributed's process-group backends."""


def a_path(text: str, option: str) -> Path:
    """``text`` as a path, refused when empty or blank: ``Path("")`` is ``.``, and a run
    folder or a file written there would land among the user's own files."""
    if not str(text).strip():
        raise DateError(f"{option}: an empty path; give a file or folder name.")
    return Path(text)


def output_folder(path: str | Path, option: str) -> Path:
    """``path`` as a folder a command may create and write: not an existing file, and under a
    folder this process can write in (checked with a temporary file, which also catches read-only
    file systems)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise DateError(f"{option} {path}: is a file, not a folder; choose a folder.")
    _writable_ancestor(path if path.exists() else path.parent, path, option)
    return path


def output_file(path: str | Path, option: str, suffixes: tuple[str, ...]) -> Path:
    """``path`` as a file a command may write: one of ``suffixes``, not a folder, in a folder that
    exists and can be written."""
    path = Path(path)
    if path.is_dir() or not path.name:
        raise DateError(f"{option} {path}: is a folder; give a file name such as lr.png.")
    if path.suffix.lower() not in suffixes:
        raise DateError(f"{option} {path}: cannot write a {path.suffix or 'suffix-less'} file; "
                        f"use {', '.join(suffixes)}.")
    if not path.parent.is_dir():
        raise DateError(f"{option} {path}: the folder {path.parent} does not exist; create it "
                        "first.")
    _writable_ancestor(path.parent, path, option)
    return path


def writable_file(path: str | Path, where: str) -> Path:
    """``path`` as a file that can be written when work ends (its folders made then): not a
    folder, under a folder this process can write in. Checked before the work, so that none is
    lost to a path that cannot be written."""
    path = Path(path)
    if not str(path).strip() or path.is_dir() or not path.name:
        raise DateError(f"{where} {path}: is a folder or empty; give a file name such as "
                        f"probe.json.")
    _writable_ancestor(path.parent, path, where)
    return path


def _writable_ancestor(start: Path, path: Path, option: str) -> None:
    folder = start
    while not folder.exists():
        if folder.is_symlink():  # a link to nowhere, or to itself: nothing can be made under it
            raise DateError(f"{option} {path}: {folder} is a symbolic link that leads nowhere "
                            f"(or to itself); remove it or choose another folder.")
        folder = folder.parent
    if not folder.is_dir():
        raise DateError(f"{option} {path}: {folder} is a file, so no folder can be made under it.")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise DateError(f"{option} {path}: cannot write in {folder} ({exc.strerror}); choose "
                        "another place.") from None


def parse_size(text: str, option: str) -> int:
    """A batch size as users write it: ``8192`` or ``8k`` (k = 1024)."""
    part = text.strip()
    try:
        value = int(part[:-1]) * 1024 if part[-1:] in ("k", "K") else int(part)
    except ValueError:
        raise DateError(f"{option}: {text!r} is not a whole number; write e.g. {option} 8192 or "
                        f"{option} 8k.") from None
    if value < 1:
        raise DateError(f"{option} must be a positive whole number, got {value}.")
    return value


def check_port(port: int | None, option: str) -> None:
    if port is not None and not 1 <= port <= 65535:
        raise DateError(f"{option} must be a port number from 1 to 65535, got {port}.")


def check_endpoint(endpoint: str | None) -> None:
    """``host:port`` of a c10d rendezvous."""
    if endpoint is None:
        return
    match = re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+)(?::(\d+))?", endpoint)
    if not match:
        raise DateError(f"--rdzv-endpoint {endpoint!r}: expected host:port, e.g. node01:29400.")
    if match.group(2) is not None:
        check_port(int(match.group(2)), "the port of --rdzv-endpoint")


def check_backend(backend: str | None, cuda: bool) -> None:
    """A process-group backend torch knows; NCCL only where there is a GPU."""
    if backend is None:
        return
    if backend not in BACKENDS:
        raise DateError(f"--backend must be {', '.join(BACKENDS[:-1])} or {BACKENDS[-1]}, got "
                        f"{backend!r}.")
    if backend == "nccl" and not cuda:
        raise DateError("--backend nccl needs CUDA GPUs and this machine has none; use gloo (the "
                        "default on the CPU).")


DATASET_SIZE_SLACK = 0.1
"""How far baseline.dataset_size may be from the training data's length before a run is refused
(a spec may give an approximate size, as gnmt's does for WMT)."""


def check_dataset_size(n: int, source: str, held: int, batch: int, data_dir: str | None,
                       recipe: str, other_recipe: str | None = None) -> str | None:
    """The plan's n samples an epoch (from ``source``) against the ``held`` samples the data of
    ``recipe`` holds: a refusal when every epoch count would be off, a note when they differ a
    little, None when they agree. ``other_recipe``: the recipe the spec names, if not this one
    (a spec of another recipe is the likely mistake)."""
    if n == held:
        return None
    if batch > held:
        raise DateError(f"batch {batch} is larger than the training data ({held} samples in "
                        f"{data_dir or 'the default data'}); choose --batch {held} or less, or "
                        "point train.data_dir at the whole data set.")
    if source.startswith("recipe"):  # the recipe's nominal size: every epoch figure would lie
        raise DateError(f"the training data holds {held} samples, not the {n} {source} assumes; "
                        f"set baseline.dataset_size: {held} (or point train.data_dir at the whole "
                        "data set).")
    if abs(n - held) > DATASET_SIZE_SLACK * held:  # every epoch count would be off by n/held
        hint = (f" (the spec names recipe {other_recipe}: is it a spec of another recipe?)"
                if other_recipe else "")
        raise DateError(f"{source} says {n:,} training samples but the data of recipe {recipe} "
                        f"holds {held:,}{hint}: every epoch count of the plan would be off by "
                        f"{n / held:.3g}×. Set baseline.dataset_size: {held}, or point "
                        "train.data_dir at the whole data set.")
    return f"the plan counts epochs of {n} samples ({source}) but the training set holds {held}."


def check_launch(nproc: int, backend: str | None = None, endpoint: str | None = None,
                  port: int | None = None) -> None:
    """The launch options of date scale, probe and bench, before any process starts."""
    if nproc < 1:
        raise DateError(f"--nproc must be a positive whole number, got {nproc}.")
    check_endpoint(endpoint)
    check_port(port, "--master-port")
    if backend is not None:
        import torch

        check_backend(backend, torch.cuda.is_available())
