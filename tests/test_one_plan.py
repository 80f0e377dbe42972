"""One derivation, one truth: what `date plan` prints is what `date scale` and every sweep cell run.

For every shipped recipe, at B0, 8·B0 and the largest batch its plan allows, on 1 and 2 processes:
`date plan --json`, the plan a sweep derives for its cell (and `date plan` of the cell's own spec),
and — at B0, where every recipe is dry-run anyway — `date scale --dry-run --json` through the real
worker (torchrun for 2 processes) print the same document, batch split included.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from date_engine import PlanError, load_spec
from date_engine.cli import app
from date_engine.planning import plan_for
from date_engine.recipes import get_recipe
from date_engine.sweep import SweepOptions, Tolerance, parse_schemes, plan_sweep
from date_engine.sweep.runner import prepare_cell
from tests.conftest import RECIPES
from tests.runs import in_one_job

SHIPPED = sorted(RECIPES.glob("*.yaml"))
runner = CliRunner()


def plan_json(*args, keep_step: bool = False) -> dict:
    """The plan ``date plan --json`` prints, without its "step" and "sharding" entries (how the
    optimizer step runs and how the processes hold the model: said by the catalog and the
    recipe's parameter count, not derived by the plan), which are checked to be there."""
    result = runner.invoke(app, ["plan", *map(str, args), "--json"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["step"]["path"] in ("fused", "foreach", "off")
    assert document.pop("sharding")["mode"] == document.get("parallel", "ddp")
    if not keep_step:
        del document["step"]
    return document


def largest_batch(path, nproc: int) -> int:
    """The largest batch the recipe's plan accepts on ``nproc`` processes."""
    spec = load_spec(path)
    recipe = get_recipe(spec.recipe)
    plan = plan_for(spec, spec.baseline.batch_size, recipe=recipe).plan
    batch = min(plan.dataset_size, plan.max_legw_batch or plan.dataset_size)
    batch -= batch % nproc
    while True:
        try:
            plan_for(spec, batch, devices=nproc, recipe=recipe)
            return batch
        except PlanError:
            batch -= nproc


def batches(path, nproc: int) -> list[int]:
    b0 = load_spec(path).baseline.batch_size
    return [b0, 8 * b0, largest_batch(path, nproc)]


@pytest.mark.parametrize("nproc", [1, 2])
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_plan_and_sweep_cells_agree(path, nproc, tmp_path):
    spec = load_spec(path)
    recipe = get_recipe(spec.recipe)
    for batch in batches(path, nproc):
        shown = plan_json(path, "--batch", batch, "--nproc", nproc)
        assert shown["target_batch"] == batch
        assert shown["micro_batch"] * shown["world_size"] * shown["accumulation_steps"] == batch
        assert shown["world_size"] == nproc
        options = SweepOptions(
            batches=[batch],
            schemes=parse_schemes("date"),
            nproc=nproc,
            tolerance=Tolerance.parse("1%"),
        )
        cells = plan_sweep(spec, options, recipe)
        cell = (
            next(c for c in cells if c.cell.batch == batch and c.cell.scheme != "baseline")
            if batch != spec.baseline.batch_size
            else cells[0]
        )
        planned = cell.run.to_dict()
        # the cell's `date scale` reads its cell.yaml: `date plan` of that file is the cell's plan
        folder = prepare_cell(tmp_path / f"B{batch}", cell)
        assert plan_json(folder.cell_spec_path, "--batch", batch, "--nproc", nproc) == planned
        if (
            cell.cell.scheme == "date"
        ):  # the recipes scale as DATE does: the same plan as the spec's
            assert planned == shown
        else:  # the baseline cell runs without per-layer ratios; everything else is the spec's
            assert planned["optimizer"]["layer_ratio"] == {"mode": "off"}
            assert {k: v for k, v in planned.items() if k != "optimizer"} == {
                k: v for k, v in shown.items() if k != "optimizer"
            }


def test_the_batch_split_is_the_recipes_fitted_default():
    """The bug this file guards against: `date plan` split 512 as 512 × 1 × 1 while `date scale`
    ran 256 × 1 × 2 (lenet-digits' micro-batch is 256)."""
    shown = plan_json(RECIPES / "lenet-digits.yaml", "--batch", 512)
    assert (shown["micro_batch"], shown["world_size"], shown["accumulation_steps"]) == (256, 1, 2)
    odd = plan_json(RECIPES / "lenet-digits.yaml", "--batch", 480, "--nproc", 2)
    assert (odd["micro_batch"], odd["accumulation_steps"]) == (240, 1)  # 240 divides 240, ≤ 256


def test_one_largest_divisor_rule_for_every_split():
    """The micro-batch rule the plan, the ramp's stages and the probe share: the largest divisor
    of a share not above a cap, checked against every candidate."""
    from date_engine.runplan import largest_divisor

    for n in range(0, 130):
        for cap in range(0, 140):
            want = max([d for d in range(1, min(n, cap) + 1) if n % d == 0], default=1)
            assert largest_divisor(n, cap) == want, (n, cap)


def _dry_runs(out, runs: dict[str, tuple], nproc: int) -> dict[str, dict]:
    """`date scale SPEC --batch BATCH --dry-run --json` of each run (name -> SPEC, BATCH) at
    ``nproc`` processes, all in one job (tests.runs.in_one_job; `date scale --nproc 2`'s own
    launch, torchrun's agent, is what tests/test_scale.py and tests/test_faults.py run). Name ->
    exit code, stdout, stderr and whether the run's folder was left behind."""
    folders = {name: out / f"run-{i}" for i, name in enumerate(runs)}
    commands = {name: [spec, "--batch", batch, "--dry-run", "--json", "-o", folders[name]]
                for name, (spec, batch) in runs.items()}
    # every shipped recipe's dry run in one job: 71 s idle at 2 processes, 43 s at one
    records = in_one_job(out, commands, nproc, idle_s=75)
    return {name: {**records[name], "left": folders[name].exists()} for name in runs}


@pytest.fixture(scope="module")
def shipped_dry_runs(tmp_path_factory) -> dict[int, dict[str, dict]]:
    """Every shipped recipe's dry run at its B0: processes -> run -> record."""
    runs = {str(p): (p, load_spec(p).baseline.batch_size) for p in SHIPPED}
    return {n: _dry_runs(tmp_path_factory.mktemp(f"dry-runs-{n}"), runs, n) for n in (1, 2)}


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2])
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_dry_run_trains_the_plan_date_plan_prints(path, nproc, shipped_dry_runs):
    """CI's dry run of every shipped recipe: the plan at the real batch, then 2 tiny steps through
    the real worker (2 processes: torchrun's); its plan.json is `date plan --json`'s document,
    and nothing is left behind."""
    batch = load_spec(path).baseline.batch_size
    ran = shipped_dry_runs[nproc][str(path)]
    assert ran["exit_code"] == 0, ran["stdout"] + ran["stderr"]
    record = json.loads(ran["stdout"])
    assert record["plan"].pop("step")["path"] in ("fused", "foreach", "off")  # as date plan's
    assert record["plan"].pop("sharding")["mode"] == "ddp"
    assert record["plan"] == plan_json(path, "--batch", batch, "--nproc", nproc)
    assert record["summary"]["steps"] == record["summary"]["total_steps"] == 2
    assert "dry run" in ran["stderr"] and f"2 × {nproc} × 2" in ran["stderr"]
    assert not ran["left"]


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2])
def test_dry_runs_at_larger_batches_train_the_printed_plan(nproc, tmp_path):
    """The same at 8·B0 and at the largest batch the plan allows, on the recipe that dry-runs in
    seconds (its real data ships with scikit-learn, so n comes from the data, as in real runs)."""
    path = RECIPES / "lenet-digits.yaml"
    larger = batches(path, nproc)[1:]
    ran_at = _dry_runs(tmp_path, {str(b): (path, b) for b in larger}, nproc)
    for batch in larger:
        ran = ran_at[str(batch)]
        assert ran["exit_code"] == 0, ran["stdout"] + ran["stderr"]
        shown = plan_json(path, "--batch", batch, "--nproc", nproc, keep_step=True)
        trained = json.loads(ran["stdout"])["plan"]
        assert trained.pop("sharding")["mode"] == "ddp"
        assert trained == shown  # "step" included, as date plan's
