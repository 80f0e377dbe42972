"""``train.parallel: fsdp`` in one process: the sharding units, the plan's bytes and refusals, and
the folder of shards a checkpoint becomes (written, verified, read back, rotated, cleaned up)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from date_engine.cli import app
from date_engine.errors import PlanError
from date_engine.forecast import NoiseCurve
from date_engine.optim.build import build_optimizer
from date_engine.planning import plan_for
from date_engine.recipes import get_recipe
from date_engine.runfolder import RunFolder
from date_engine.runplan import BatchSplit, Sharding
from date_engine.spec import parse_spec
from date_engine.train import checkpoint as ckpt
from date_engine.train.runtime import Runtime, shard_units

runner = CliRunner()


def _spec(parallel="fsdp", **date_section):
    return parse_spec({
        "recipe": "lenet-digits",
        "baseline": {"batch_size": 16, "lr": 1e-3, "warmup_epochs": 1, "epochs": 4,
                     "dataset_size": 1437, "optimizer": {"name": "adam"}},
        "date": date_section,
        "train": {"parallel": parallel},
    })


class _Tied(torch.nn.Module):
    """An embedding whose weight the output head shares, blocks in a ModuleList, a block
    without parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(11, 4)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)])
        self.act = torch.nn.ReLU()
        self.head = torch.nn.Linear(4, 11, bias=False)
        self.head.weight = self.embed.weight


def test_default_units_are_the_blocks_and_leave_tied_weights_with_the_root():
    model = _Tied()
    units = shard_units(model)
    assert units == list(model.blocks)  # each block of the list; no ReLU; not embed, not head
    plain = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    assert shard_units(plain) == [plain[0], plain[2]]


def test_sharding_counts_the_bytes_each_process_holds():
    fsdp = Sharding("fsdp", 4, parameters=10, state_tensors=2)
    assert fsdp.bytes_per_process() == {"parameters": 12, "gradients": 12, "optimizer_state": 24}
    ddp = Sharding("ddp", 4, parameters=10, state_tensors=2)
    assert ddp.bytes_per_process() == {"parameters": 40, "gradients": 40, "optimizer_state": 80}
    assert Sharding("fsdp", 4).bytes_per_process() is None
    assert "all-reduce of every layer" in Sharding("fsdp", 2, layer_norms=True).collectives()
    assert "all-reduce of every layer" not in Sharding("fsdp", 2).collectives()


def test_the_split_names_fsdp_and_old_plans_read_as_ddp():
    planned = plan_for(_spec(), 64, devices=2)
    assert planned.split.parallel == "fsdp"
    assert planned.to_dict()["parallel"] == "fsdp"
    assert planned.dry_run().step_split.parallel == "fsdp"
    ddp = plan_for(_spec("ddp"), 64, devices=2)
    assert "parallel" not in ddp.to_dict()  # plans written before fsdp existed still compare
    assert BatchSplit.from_dict({"micro_batch": 8, "world_size": 2,
                                 "accumulation_steps": 4}).parallel == "ddp"
    sharding = planned.sharding(parameters=1000)
    assert sharding.state_tensors == 2 and sharding.layer_norms  # Adam; DATE's ratios on


def test_a_measured_ramp_is_refused_under_fsdp():
    rising = NoiseCurve(a=500.0, beta=1.0, first=0.1, last=1.0)
    with pytest.raises(PlanError, match="date.ramp: planned"):
        plan_for(_spec(budget="ramp"), 256, noise_curve=rising)
    planned = plan_for(_spec(budget="ramp", ramp="planned"), 256, noise_curve=rising)
    assert planned.plan.ramp


def test_date_plan_shows_the_bytes_per_process():
    args = ["plan", "lenet-digits", "--batch", "64", "--nproc", "4", "--parallel", "fsdp"]
    shown = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    recipe = get_recipe("lenet-digits")
    count = recipe.parameter_count(recipe.parse_options({}))
    assert "Parallel: fsdp" in shown.stdout and f"P = {count:,}" in shown.stdout
    document = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    share = -(-count // 4)
    assert document["parallel"] == "fsdp"
    assert document["sharding"]["bytes_per_process"]["parameters"] == 4 * share
    assert document["sharding"]["bytes_per_process"]["optimizer_state"] == 4 * share  # RMSprop
    plain = runner.invoke(app, ["plan", "lenet-digits", "--batch", "64"])
    assert "Parallel:" not in plain.stdout


def test_a_checkpoint_of_the_other_parallel_kind_is_named():
    planned = plan_for(_spec(), 64).to_dict()
    other = plan_for(_spec("ddp"), 64).to_dict()
    reason = ckpt.describe_mismatch(other, planned, "f", "f")
    assert reason == "it was written by a train.parallel: ddp run, not fsdp"


class _Log:
    """What a checkpoint reads from the run's logger."""

    def window_state(self):
        return (1.5, 3)

    def train_seconds(self):
        return 2.0


def _trained(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    planned = plan_for(_spec(), 64)
    optimizer = build_optimizer(model.named_parameters(), planned.plan.optimizer, 1e-2)
    for _ in range(2):
        model(torch.randn(8, 5)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer, planned


def _save(folder, step, model, optimizer, planned, keep=2):
    rt = Runtime(0, 1, 0, torch.device("cpu"), None, "fp32", False, parallel="fsdp")
    return ckpt.save_run(rt, folder, step, planned, model, optimizer, None, None, _Log(),
                         seed=0, spec_fingerprint="f", recipe="lenet-digits", keep=keep)


def test_a_folder_of_shards_reads_back_what_was_written(tmp_path):
    from date_engine.train.resume import restore

    folder = RunFolder(tmp_path / "run")
    model, optimizer, planned = _trained(0)
    path = _save(folder, 7, model, optimizer, planned)
    assert path == folder.checkpoint_path(7, sharded=True) and path.is_dir()
    found = ckpt.newest_valid(folder)
    assert found.path == path and found.payload["sharded"] and found.payload["step"] == 7
    fresh, other, _ = _trained(1)  # other weights, other state: all of it is overwritten
    from rich.console import Console

    point = restore(found, fresh, other, None, None, planned, None, 0, 0, Console(quiet=True))
    assert point.step == 7 and point.window == (1.5, 3)
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(a, b)
    saved, loaded = optimizer.state_dict(), other.state_dict()
    for index, state in saved["state"].items():
        for key, value in state.items():
            assert torch.equal(value, loaded["state"][index][key]), (index, key)
    assert loaded["date"]["steps"] == saved["date"]["steps"] == 2
    assert torch.equal(loaded["date"]["last_ratios"], saved["date"]["last_ratios"])


def test_a_damaged_shard_is_passed_over_and_old_folders_rotate(tmp_path):
    folder = RunFolder(tmp_path / "run")
    model, optimizer, planned = _trained(0)
    first = _save(folder, 4, model, optimizer, planned)
    second = _save(folder, 8, model, optimizer, planned)
    third = _save(folder, 12, model, optimizer, planned)
    assert not first.exists() and second.exists() and third.exists()  # keep 2
    shard = next(third.glob("__0_*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    found = ckpt.newest_valid(folder)
    assert found.path == second
    assert "does not match the checksum" in found.skipped[0]
    (third / "manifest.json").unlink()  # a write killed before its manifest: cut short
    assert "cut short" in ckpt.newest_valid(folder).skipped[0]


def test_a_killed_write_leaves_a_folder_that_the_next_run_removes(tmp_path):
    folder = RunFolder(tmp_path / "run")
    model, optimizer, planned = _trained(0)
    kept = _save(folder, 4, model, optimizer, planned)
    leftover = folder.checkpoint_dir / ".step-00000008.dcp.tmp-999"
    leftover.mkdir()
    (leftover / "__0_0.distcp").write_bytes(b"half")
    assert ckpt.newest_valid(folder).path == kept  # not a checkpoint: never read
    assert ckpt.remove_partial_writes(folder) == [leftover] and not leftover.exists()


def test_a_non_finite_state_is_never_written_as_shards(tmp_path):
    folder = RunFolder(tmp_path / "run")
    model, optimizer, planned = _trained(0)
    with torch.no_grad():
        next(model.parameters())[0, 0] = float("nan")
    with pytest.raises(ckpt.NonFiniteState):
        _save(folder, 4, model, optimizer, planned)
    assert ckpt.newest_valid(folder) is None
    assert not folder.checkpoint_dir.exists() or not any(folder.checkpoint_dir.iterdir())
