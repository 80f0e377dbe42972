"""Checkpoints of a sharded model (``train.parallel: fsdp``): torch.distributed.checkpoint (DCP).

A checkpoint is a folder ``checkpoints/step-00000123.dcp``: every process writes the shards it
holds of the model's parameters and the optimizer's state (DCP's ``__<rank>_<n>.distcp`` files and
its ``.metadata``), and rank 0 adds ``run.pt`` — everything else a checkpoint holds (the step, the
plan, the spec's fingerprint, every process's RNG states and unlogged losses, the optimizer's
param groups, the loss scaler, the noise scale) — and ``manifest.json``: the SHA-256 of every file
(each process hashes its own), the step and the plan's id. The folder is written under a temporary
name and renamed once complete, so a killed write leaves the previous checkpoint usable; a folder
whose files do not match the manifest is passed over like a damaged checkpoint file.

DCP reshards on load: the shards of a run on 2 processes load into a run on 1 (whole tensors) or
on 4, each process reading the slices its own shards need.

Tensors are stored under flat keys — ``model/<parameter name>``, ``optimizer/<index>/<key>`` — so
that the optimizer's state, which does not exist before its first step, can be allocated from the
checkpoint's own metadata before it is read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["SUFFIX", "is_sharded_checkpoint", "load", "read", "save"]

SUFFIX = ".dcp"
_RUN, _MANIFEST = "run.pt", "manifest.json"


def is_sharded_checkpoint(path: Path) -> bool:
    return path.name.endswith(SUFFIX)


def save(rt, final: Path, payload: dict[str, Any], model, optimizer, ident: str) -> Path | None:
    """Write the checkpoint folder ``final`` (collective): the model's and optimizer's tensors as
    each process holds them, and rank 0's ``payload`` (the checkpoint's other entries). Returns
    ``final`` on rank 0, else None."""
    import torch.distributed.checkpoint as dcp

    tmp = _agreed(rt, final.parent / f".{final.name}.tmp-{os.getpid()}")
    if rt.is_main:
        tmp.mkdir(parents=True)
    if rt.distributed:
        dist.barrier()
    tensors, rest = _split_optimizer(optimizer.state_dict())
    tensors.update({f"model/{k}": v for k, v in model.state_dict().items()})
    with _alone_is_meant():
        dcp.save(tensors, checkpoint_id=str(tmp), no_dist=not rt.distributed)
    mine = {p.name: _sha256(p) for p in tmp.iterdir() if p.name.startswith(f"__{rt.rank}_")}
    hashes = [None] * rt.world_size if rt.distributed else [mine]
    if rt.distributed:
        dist.all_gather_object(hashes, mine)
    if not rt.is_main:
        return None
    with open(tmp / _RUN, "wb") as f:
        torch.save({**payload, "optimizer": rest}, f)
        f.flush()
        os.fsync(f.fileno())
    files = {name: digest for part in hashes for name, digest in part.items()}
    files.update({name: _sha256(tmp / name) for name in (".metadata", _RUN)})
    _write_synced(tmp / _MANIFEST, json.dumps(
        {"files": files, "step": payload["step"], "plan": ident}).encode())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def manifest(path: Path) -> dict[str, Any]:
    """The checkpoint folder's manifest ({} if it has none that reads)."""
    try:
        record = json.loads((path / _MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def read(path: Path) -> tuple[str | None, dict[str, Any] | None]:
    """(why the checkpoint folder cannot be used, or None; its run.pt payload, marked
    ``sharded``). Every file is checked against the manifest."""
    record = manifest(path)
    files = record.get("files")
    if not isinstance(files, dict) or _RUN not in files or ".metadata" not in files:
        return "has no complete manifest (cut short)", None
    for name, digest in files.items():
        try:
            if _sha256(path / name) != digest:
                return f"its file {name} does not match the checksum written with it " \
                       "(damaged)", None
        except OSError as exc:
            return f"its file {name} cannot be read ({exc.strerror})", None
    try:
        payload = torch.load(path / _RUN, map_location="cpu", weights_only=True)
    except Exception:
        return "its run.pt does not load", None
    if not isinstance(payload, dict):
        return "is not a checkpoint of this version", None
    return None, {**payload, "sharded": True}


def load(path: Path, payload: dict[str, Any], model, optimizer) -> None:
    """Read the checkpoint folder ``path`` into ``model`` and ``optimizer`` as this run holds them
    (sharded over its processes or whole): DCP reads the slices each process needs."""
    import torch.distributed.checkpoint as dcp

    keys = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    params = [p for group in optimizer.param_groups for p in group["params"]]
    model_state = model.state_dict()
    tensors: dict[str, Any] = {f"model/{k}": v for k, v in model_state.items()}
    missing = sorted(k for k in tensors if k not in keys)
    if missing:
        raise ValueError(f"the checkpoint has no {missing[0]}")
    for key, meta in keys.items():
        if key.startswith("optimizer/"):
            index = int(key.split("/")[1])
            size, dtype = tuple(meta.size), meta.properties.dtype
            param = params[index]
            tensors[key] = torch.empty_like(param, dtype=dtype) if size == tuple(param.shape) \
                else torch.empty(size, dtype=dtype, device=_local_device(param))
    with _alone_is_meant():
        dcp.load(tensors, checkpoint_id=str(path), no_dist=not dist.is_initialized())
    model.load_state_dict({k: tensors[f"model/{k}"] for k in model_state})
    optimizer.load_state_dict(_join_optimizer(tensors, payload["optimizer"]))


def _split_optimizer(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The optimizer's state dict as (its per-parameter tensors under flat keys, the rest)."""
    tensors, per_param = {}, {}
    for index, entries in state["state"].items():
        for key, value in entries.items():
            if torch.is_tensor(value):
                tensors[f"optimizer/{index}/{key}"] = value
            else:
                per_param.setdefault(index, {})[key] = value
    rest = {k: v for k, v in state.items() if k != "state"}
    rest["plain_state"] = per_param
    return tensors, rest


def _join_optimizer(tensors: dict[str, Any], rest: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer/"):
            _, index, name = key.split("/", 2)
            state.setdefault(int(index), {})[name] = value
    for index, entries in rest.get("plain_state", {}).items():
        state.setdefault(int(index), {}).update(entries)
    return {**{k: v for k, v in rest.items() if k != "plain_state"}, "state": state}


@contextmanager
def _alone_is_meant() -> Iterator[None]:
    """Silence DCP's warning that a process without a process group reads or writes alone: one
    process of an fsdp run does so by design."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _local_device(t: torch.Tensor) -> torch.device:
    return t.to_local().device if hasattr(t, "to_local") else t.device


def _agreed(rt, path: Path) -> Path:
    """Rank 0's ``path`` on every process."""
    if not rt.distributed:
        return path
    box = [str(path)]
    dist.broadcast_object_list(box, src=0)
    return Path(box[0])


def _sha256(path: Path, chunk: int = 1 << 24) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
