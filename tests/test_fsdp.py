"""`date scale --parallel fsdp` end to end: 2 processes (torchrun, gloo) sharding lenet-digits with
FSDP2 train as 2 DDP replicas do, stop and resume bit-exact, and their folder of shards resumes at
another number of processes.

Float tolerance: the two reduce the gradient in another order (DDP's all-reduce, FSDP2's
reduce-scatter), so the weights agree to rounding and no closer. Each optimizer runs at a learning
rate at which 100 steps do not amplify rounding: at lenet-digits' own LRs two DDP runs that differ
only in the split of the batch (2 processes or 2 accumulation steps) already differ by 0.19 after
100 steps (LARS at 0.002).
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.bounds import gamma, runs_bound
from tests.runs import SPEC, date, final_model, max_relative_difference, metrics

pytestmark = pytest.mark.slow

STEPS = 100
OPTIMIZERS = {  # name: the overrides of lenet-digits (DATE over RMSprop as shipped)
    "date-momentum": ["baseline.optimizer.name=momentum", "baseline.lr=0.01"],
    "lamb": ["baseline.optimizer.name=lamb", "baseline.lr=1e-4", "date.layer_ratio.mode=off"],
}
RATIOS = ("ratio_min", "ratio_median", "ratio_max")


def _sets(overrides: list[str]) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


def _scale(out, *args, nproc=2, steps=STEPS, overrides=()):
    result = date("scale", SPEC, "--batch", 64, "--nproc", nproc, "--max-steps", steps,
                  "-o", out, *_sets(list(overrides)), *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_fsdp_trains_as_ddp_step_for_step(name, tmp_path):
    """End to end for DATE's ratios over a base and for a layerwise optimizer of its own; every
    optimizer's step over shards (DATE over SGD and Adam, LARS, LAMB) is checked against the
    unsharded one in tests/test_sharded.py, in one job."""
    ddp, fsdp = tmp_path / "ddp", tmp_path / "fsdp"
    _scale(ddp, "--parallel", "ddp", overrides=OPTIMIZERS[name])
    sharded = _scale(fsdp, "--parallel", "fsdp", overrides=OPTIMIZERS[name])
    assert "Parallel: fsdp" in sharded.stdout
    assert list((fsdp / "checkpoints").glob("step-*.dcp")), "fsdp writes a folder of shards"
    a, b = final_model(ddp), final_model(fsdp)
    assert a.keys() == b.keys()
    assert max_relative_difference(a, b) <= runs_bound(STEPS)  # measured: 9e-8 to 3e-7
    logged_a, logged_b = metrics(ddp), metrics(fsdp)
    assert [r["step"] for r in logged_a] == [r["step"] for r in logged_b]
    for x, y in zip(logged_a, logged_b):
        # the gradient's norm: a gradient summed over the processes, not averaged (pytorch
        # 162338, gloo has no AVG), would read twice as large
        # the weights' difference so far, and the norms' own sums in another order
        within = runs_bound(x["step"]) + gamma(4 * 64 * 64, torch.float32)
        if "grad_norm" in x:
            assert y["grad_norm"] == pytest.approx(x["grad_norm"], rel=within)
        for key in RATIOS:  # the per-layer ratios each step applied
            if key in x:
                assert y[key] == pytest.approx(x[key], rel=within), (key, x["step"])
    if name.startswith("date"):
        assert any(key in x for x in logged_a for key in RATIOS)


@pytest.fixture(scope="module")
def fsdp_thirty(tmp_path_factory):
    """30 uninterrupted steps of DATE(momentum) on 2 processes under fsdp, a checkpoint every 4:
    past the first epoch of lenet-digits at batch 64 (22.5 steps; its 1,437 samples do not
    divide over 2 processes, and every split of a step's batch still reads the same samples)."""
    out = tmp_path_factory.mktemp("fsdp") / "whole"
    _scale(out, "--parallel", "fsdp", "--set", "train.checkpoint_every=4", steps=30,
           overrides=OPTIMIZERS["date-momentum"])
    return out


def test_a_killed_fsdp_process_is_restarted_and_resumes_bit_exact(fsdp_thirty, tmp_path):
    out = tmp_path / "killed"
    killed = date("scale", SPEC, "--batch", 64, "--nproc", 2, "--max-steps", 30, "-o", out,
                  "--parallel", "fsdp", "--set", "train.checkpoint_every=4",
                  *_sets(OPTIMIZERS["date-momentum"]), "--max-restarts", 1,
                  "--recipe", "tests.fault_recipes:lenet_digits_killed",
                  env={"DATE_TEST_KILL_AT": "11"})  # rank 0 SIGKILLed in step 11; step 8 saved
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert "resuming from" in killed.stdout and "step-00000008.dcp" in killed.stdout
    a, b = final_model(fsdp_thirty), final_model(out)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert metrics(out) == metrics(fsdp_thirty)


@pytest.mark.parametrize("first, then", [(2, 1), (1, 2)])
def test_a_folder_of_shards_resumes_at_another_number_of_processes(first, then, fsdp_thirty,
                                                                   tmp_path):
    """Another number of processes is another plan: --force-replan (its refusal without it is
    test_scale.py's, the same code for both kinds of checkpoint)."""
    out = tmp_path / "moved"
    _scale(out, "--parallel", "fsdp", nproc=first, steps=10,
           overrides=OPTIMIZERS["date-momentum"])
    moved = _scale(out, "--parallel", "fsdp", "--resume", "--force-replan", nproc=then,
                   steps=30, overrides=OPTIMIZERS["date-momentum"])
    assert "continuing its weights at step 10" in " ".join(moved.stdout.split())
    assert max_relative_difference(final_model(fsdp_thirty), final_model(out)) <= runs_bound(30)


def test_a_checkpoint_of_the_other_parallel_kind_is_refused(fsdp_thirty, tmp_path):
    """A ddp run's whole-model file cannot be read as fsdp's shards: refused in one sentence that
    does not offer --force-replan (which cannot read it either), with or without it."""
    out = tmp_path / "ddp"
    _scale(out, "--parallel", "ddp", steps=4, overrides=OPTIMIZERS["date-momentum"])
    for extra in ((), ("--force-replan",)):
        refused = date("scale", SPEC, "--batch", 64, "--nproc", 2, "-o", out, "--resume",
                       "--parallel", "fsdp", *extra, *_sets(OPTIMIZERS["date-momentum"]))
        said = " ".join(refused.stderr.split())
        assert refused.returncode == 2 and "Traceback" not in said
        assert "a whole-model file, which a train.parallel: fsdp run cannot read" in said
        assert "pass --force-replan" not in said
    plan = json.loads((fsdp_thirty / "plan.json").read_text())
    assert plan["parallel"] == "fsdp"


def test_a_transformer_with_a_tied_head_trains_under_fsdp_as_under_ddp(tmp_path):
    """bert-mlm shards its encoder blocks (its recipe's units: the head reads the token
    embedding's weight outside the embedding, so the embeddings stay with the root)."""
    from date_engine.recipes import DataOptions, get_recipe
    from tests.conftest import RECIPES
    from tests.test_mlm import corpus

    root = corpus(tmp_path / "text", lines=1500)
    model = {"vocab": 64, "seq_len": 16, "dim": 32, "mlp": 64, "layers": 2}
    recipe = get_recipe("bert-mlm")
    data = recipe.build_data(DataOptions(data_dir=str(root)), recipe.parse_options(model))
    sets = [*(f"model.{k}={v}" for k, v in model.items()), f"train.data_dir={root}",
            f"baseline.dataset_size={len(data.train)}", "baseline.epochs=8"]
    runs = {}
    for parallel in ("ddp", "fsdp"):
        runs[parallel] = tmp_path / parallel
        result = date("scale", RECIPES / "bert-mlm.yaml", "--batch", 32, "--nproc", 2,
                      "--max-steps", 60, "--parallel", parallel, *_sets(sets),
                      "-o", runs[parallel])
        assert result.returncode == 0, result.stdout + result.stderr
    a, b = final_model(runs["ddp"]), final_model(runs["fsdp"])
    # a transformer's step has more sums in it: attention and MLP widths of the recipe's model
    assert a.keys() == b.keys() and max_relative_difference(a, b) <= runs_bound(60, 4 * 220)
