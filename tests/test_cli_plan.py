"""`date plan` through the real command line (typer's CliRunner, and a subprocess for imports)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from date_engine.cli import app
from tests.conftest import RECIPES, ROOT, STUDY_NAMES

LENET = str(RECIPES / "lenet-mnist.yaml")
runner = CliRunner()


def plan(*args):
    return runner.invoke(app, ["plan", *map(str, args)], env={"COLUMNS": "140"})


def test_plan_shows_every_derived_number_with_its_formula():
    result = plan(LENET, "--batch", 8192, "--set", "date.rule=paper")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ["√k · η0", "= √8 · 0.00125", "0.0035355",  # peak LR and its derivation
                 "k · w0", "16 epochs",                      # LEGW
                 "117.1875", "⌈1024 · 1755 / 8192⌉ = ⌈219.375⌉", "220",
                 "29.952 epochs", "15335"]:
        assert text in out, text
    assert "1–117" in out and "118–219" in out  # the warmup, decay and floor phases
    assert "Batch split: 8192 = 1024 (micro-batch) × 1 (process) × 8 (accumulation steps)" in out
    assert "⣀" in out or "⠉" in out  # the braille LR curve


def test_plan_shows_the_rules_scaled_optimizer():
    """The default rule's rows for RMSprop at k = 8: η = k^p·η0 (√k without a probe, and one line
    saying what would raise it), α^k, ε/√k — and the optimizer line says what runs."""
    out = plan(LENET, "--batch", 8192).stdout
    assert ("LR exponent 0.5 (no probe); a probe whose LR check passes raises it to 0.75: date "
            "probe SPEC.") in out
    for text in ["k^0.5 · η0", "= 8^0.5 · 0.00125", "α^k", "= 0.99^8", "0.92274469",
                 "ε / √k", "= 1e-08 / √8", "Optimizer: DATE (dynamic, gamma 8) over rmsprop (alpha "
                 "0.92274, eps 3.5355e-09"]:
        assert text in out, text

def test_plan_json_has_the_plan_fields():
    result = plan(LENET, "--batch", 8192, "--nproc", 4, "--micro-batch", 256, "--json",
                  "--set", "date.rule=paper")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["baseline_batch"] == 1024 and data["target_batch"] == 8192
    assert data["scale"] == 8 and data["peak_lr"] == pytest.approx(3.5355339e-3)
    assert data["optimizer"]["options"]["alpha"] == 0.99  # the paper changes no option
    assert data["warmup_epochs"] == 16 and data["warmup_iterations"] == 117.1875
    assert data["total_iterations"] == 220 and data["total_epochs"] == pytest.approx(29.952)
    assert data["lr_floor"] == 1e-6
    assert (data["micro_batch"], data["world_size"], data["accumulation_steps"]) == (256, 4, 8)
    assert [p["name"] for p in data["phases"]] == ["warmup", "decay", "floor"]
    assert {d["symbol"] for d in data["derivations"]} >= {"k", "η", "w", "I_w", "I", "E_tot"}


def test_set_overrides_reach_the_plan():
    result = plan(LENET, "--batch", 8192, "--json", "--set", "date.scaling=linear",
                  "--set", "baseline.warmup_epochs=1")
    data = json.loads(result.stdout)
    assert data["peak_lr"] == pytest.approx(0.01) and data["warmup_epochs"] == 8


def test_compare_puts_the_paper_and_goyal_beside_the_default_rule():
    result = plan(LENET, "--batch", 8192, "--compare")
    assert result.exit_code == 0, result.output
    assert "DATE (rmsprop rule: k^0.5 + LEGW)" in result.stdout
    assert "paper" in result.stdout and "linear" in result.stdout
    data = json.loads(plan(LENET, "--batch", 8192, "--compare", "--json").stdout)
    assert data["compare"]["paper"]["peak_lr"] == pytest.approx(3.5355339e-3)
    assert data["compare"]["linear"]["peak_lr"] == pytest.approx(0.01)
    assert data["compare"]["linear"]["warmup_epochs"] == 2
    paper = json.loads(plan(LENET, "--batch", 8192, "--compare", "--json",
                            "--set", "date.rule=paper").stdout)
    assert set(paper["compare"]) == {"date", "linear"}  # the paper's rule is compared with DATE's


def test_plot_writes_a_png(tmp_path):
    out = tmp_path / "lr.png"
    result = plan(LENET, "--batch", 8192, "--compare", "--plot", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


BAD_INPUT = [
    # (arguments after `plan`, words the message must contain)
    ([LENET, "--batch", 16384], "LEGW fits up to batch 15335"),  # w >= E_tot
    ([LENET, "--batch", 60001], "larger than the data set (60000 samples"),  # B > n
    ([LENET, "--batch", 0], "--batch must be a positive whole number, got 0"),
    ([LENET, "--batch", -8], "--batch must be a positive whole number, got -8"),
    ([LENET, "--batch", 8192, "--nproc", 0], "--nproc must be a positive"),
    ([LENET, "--batch", 8192, "--micro-batch", 0], "--micro-batch must be a positive"),
    ([LENET, "--batch", 8192, "--set", "baseline.lr=-0.1"], "baseline.lr: must be > 0.0"),
    (
        [LENET, "--batch", 8192, "--set", "baseline.epochs=30"],
        "give exactly one of 'iterations' or 'epochs'",
    ),
    ([LENET, "--batch", 8192, "--set", "baseline.iterations=null"], "(got neither"),
    (
        [LENET, "--batch", 8192, "--nproc", 3],
        "use a batch of 8190 or 8193, or --nproc 1, 2, 4 or 8",
    ),
    (
        [LENET, "--batch", 8192, "--nproc", 4, "--micro-batch", 48],
        "micro-batches that work: 32 (64 accumulation steps), 64 (32 accumulation steps)",
    ),
    ([LENET, "--batch", 8192, "--micro-batch", 10000], "use --micro-batch 8192 or less"),
    (
        [LENET, "--batch", 8192, "--set", "date.lr_floor=0.01"],
        "date.lr_floor (0.01) is not below the peak LR",
    ),
    (
        [LENET, "--batch", 8192, "--set", "baseline.warmup_epochs=40"],
        "baseline.warmup_epochs (40) is not shorter",
    ),
    (
        [LENET, "--batch", 8192, "--set", "baseline.dataset_size=null", "--set", "recipe=null"],
        "baseline.dataset_size is missing and no recipe supplies it",
    ),
    (["missing.yaml", "--batch", 8192], "missing.yaml: does not exist"),
    (
        [LENET, "--batch", 8192, "--set", "baseline.batch_size=many"],
        "baseline.batch_size: expected a whole number, got 'many'",
    ),
    (
        [LENET, "--batch", 8192, "--set", "date.warmup_epochs=3"],
        "date.warmup_epochs: unknown key; 'warmup_epochs' belongs under baseline",
    ),
    ([LENET, "--batch", 8192, "--set", "baseline.lr"], "--set 'baseline.lr': expected key=value"),
    (
        [LENET, "--batch", 8192, "--budget", "hld"],  # named as the option, not as a --set
        "--budget: must be one of same-epochs, hold, ramp; got 'hld'.",
    ),
    (
        [LENET, "--batch", 8192, "--plot", "/nonexistent/dir/lr.png"],
        "the folder /nonexistent/dir does not exist",
    ),
]


@pytest.mark.parametrize("args, message", BAD_INPUT, ids=[m[:40] for _, m in BAD_INPUT])
def test_bad_input_exits_2_with_one_clear_message(args, message):
    result = plan(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.output and result.stdout == ""


def test_malformed_yaml_and_unknown_key_in_the_file(write_spec):
    bad = write_spec("baseline: {batch_size: 1024, lr: [0.1\n", "bad.yaml")
    result = plan(bad, "--batch", 8192)
    assert result.exit_code == 2 and "bad.yaml: line 2, column 1: malformed YAML" in result.stderr
    typo = write_spec(
        {
            "baseline": {
                "batch_size": 1024,
                "lr": 0.1,
                "warmup_epochs": 1,
                "epochs": 10,
                "dataset_size": 60000,
                "learning_rate": 1,
            }
        },
        "typo.yaml",
    )
    result = plan(typo, "--batch", 8192)
    assert result.exit_code == 2
    assert "typo.yaml: baseline.learning_rate: unknown key" in result.stderr


def test_missing_batch_is_a_usage_error():
    result = plan(LENET)
    assert result.exit_code == 2 and "--batch" in result.output


def test_help_lists_the_options():
    result = runner.invoke(app, ["plan", "--help"], env={"COLUMNS": "140"})
    assert result.exit_code == 0
    for option in ["--batch", "--nproc", "--micro-batch", "--set", "--json", "--plot", "--compare"]:
        assert option in result.stdout


def test_date_plan_does_not_import_torch():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from date_engine.cli import app\n"
        f"r = CliRunner().invoke(app, ['plan', {LENET!r}, '--batch', '8192', '--compare'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'matplotlib')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "[]"


def test_module_entry_point():
    out = subprocess.run(
        [sys.executable, "-m", "date_engine", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0 and "plan" in out.stdout


def test_plan_takes_the_data_set_size_from_the_recipe():
    result = plan(LENET, "--batch", 8192, "--json", "--set", "baseline.dataset_size=null")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["dataset_size"] == 60000  # lenet-mnist knows MNIST's size


def test_the_forecast_says_how_sure_it_is(stored_probe):
    """Under the forecast, one line: B_hold one standard error of the probe's fit either side (the
    plan's forecast.holding_low/high), the worst held-out miss of its constant, a link; a probe
    without the LR check says so. No study is named."""
    from date_engine.forecast import HELD_OUT_MISS

    args = (RECIPES / "vit-mnist.yaml", "--batch", 1024, "--probe",
            stored_probe("probes/vit-mnist"),
            "--set", "baseline.lr=1e-3")  # the recipe's LR when the probe was measured
    ahead = json.loads(plan(*args, "--json").output)["forecast"]
    assert ahead["holding_low"] < ahead["holding_batch"] < ahead["holding_high"]
    out = plan(*args).output
    words = " ".join(out.split())
    assert (f"How sure: B_hold {ahead['holding_low']:,}–{ahead['holding_high']:,} over one "
            f"standard error of the fit; on held-out studies it missed by up to "
            f"{HELD_OUT_MISS:g}× (docs/noise.md#how-sure-the-forecast-is).") in words
    assert words.count("How sure") == 1
    assert "note: this probe ran without the LR check" in words
    assert not any(name in out for name in STUDY_NAMES if name != "vit-mnist")


def test_the_forecast_says_what_the_lr_check_found(stored_probe):
    """A probe whose LR check passed (vit-mnist from 1e-3) forecasts from its noise scale; one
    where twice the LR trained no faster (bert-mlm) forecasts the baseline's steps at any batch —
    f = k, B_hold = ⌊4/3 · B0⌋, hold as many steps as the baseline — and says why, naming no
    study."""
    from date_engine.forecast import STEPS_LIMITED_MISSES

    vit = (RECIPES / "vit-mnist.yaml", "--batch", 1024, "--probe",
           stored_probe("probes-lrcheck/vit-mnist-seed0"), "--set", "baseline.lr=1e-3")
    words = " ".join(plan(*vit).output.split())
    assert "From the probe's fit B_noise(e) =" in words
    assert "LR exponent 0.75: the probe's LR check found room" in words
    assert "steps-limited" not in words
    bert = (RECIPES / "bert-mlm.yaml", "--batch", 256, "--probe",
            stored_probe("probes-lrcheck/bert-mlm-seed0"))
    hold = json.loads(plan(*bert, "--budget", "hold", "--json").output)
    assert hold["forecast"]["factor"] == pytest.approx(8)
    assert hold["forecast"]["holding_batch"] == 42
    assert hold["total_iterations"] == hold["baseline_iterations"]
    out = plan(*bert).output
    words = " ".join(out.split())
    assert "From the probe's LR check: twice the LR trained no faster" in words
    assert f"steps (as many as its {hold['baseline_iterations']:,})" in words
    misses = [m for _, m in STEPS_LIMITED_MISSES]
    assert (f"How sure: set by the LR check, not the noise scale; where probes read so, B_hold "
            f"was {min(misses):g}–{max(misses):g}× off") in words
    assert "warning: at batch 256, beyond B_hold ≈ 42, the baseline's 8.001 epochs are " \
        "expected to lose accuracy" in words
    assert not any(name in out for name in STUDY_NAMES if name != "bert-mlm")
    ramp = " ".join(plan(*bert, "--budget", "ramp").output.split())
    assert "warning: the LR check read this baseline steps-limited" in ramp
    # the steps-limited exponent √k, flat past the probe's noise scale B_cap (< 8 · 32 here);
    # and not once the LR is kept
    rows = json.loads(plan(*bert, "--json").output)
    assert rows["lr_exponent"] == 0.5 and 1e-3 < rows["peak_lr"] < 8 ** 0.5 * 1e-3
    assert (f"yet this plan raises it {rows['peak_lr'] / 1e-3:.3g}×; --set date.scaling=none "
            "keeps the baseline's LR") in words
    assert "The LR stops growing at the probe's noise scale" in rows["lr_note"]
    uncapped = json.loads(plan(*bert, "--set", "date.lr_cap=none", "--json").output)
    assert uncapped["peak_lr"] == pytest.approx(8 ** 0.5 * 1e-3)
    unchecked = json.loads(plan(*bert[:3], "--json").output)  # no probe: √k too, and it says why
    assert unchecked["peak_lr"] == pytest.approx(8 ** 0.5 * 1e-3)
    assert "raises it to 0.75: date probe SPEC" in unchecked["lr_note"]
    assert "found the baseline steps-limited" in rows["lr_note"]
    kept = " ".join(plan(*bert, "--set", "date.rule=paper", "--set", "date.scaling=none",
                         "--set", "date.warmup=constant").output.split())
    assert "this plan raises it" not in kept and "steps-limited" in kept


def test_the_verdict_is_as_sure_as_its_range(stored_probe):
    """Below B_hold's whole range the baseline's epochs are expected to hold — "though" when the
    range is too wide to trust; inside the range, they may."""
    path = stored_probe("probes/digits-lenet")
    args = (RECIPES / "lenet-digits.yaml", "--probe", path)
    ahead = json.loads(plan(*args, "--batch", 256, "--json").output)["forecast"]
    low, high = ahead["holding_low"], ahead["holding_high"]
    words = " ".join(plan(*args, "--batch", 256).output.split())
    assert low > 256 and high > 2 * low  # this probe's range is wide
    assert "too wide to trust" in words
    assert (f"batch 256 is below B_hold's whole range ({low:,}–{high:,}): the baseline's epochs "
            "are expected to hold accuracy, though that range is too wide to be sure.") in words
    inside = next(b for b in range(low + 1, ahead["holding_batch"] + 1) if b % 16 == 0)
    words = " ".join(plan(*args, "--batch", inside).output.split())
    assert f"batch {inside:,} is within B_hold" in words and "may hold accuracy" in words


def test_the_forecast_writes_the_baseline_epochs_as_a_person_would(stored_probe):
    """bert-mlm's baseline steps (⌈8 · 17,493 / 32⌉ = 4,374) end at 8.0014 epochs: the warning says
    8.001, not 8.001372 (the derivation's table keeps every digit)."""
    out = plan(RECIPES / "bert-mlm.yaml", "--batch", 1024, "--probe",
               stored_probe("probes/bert-mlm")).output
    assert "the baseline's 8.001 epochs" in " ".join(out.split())


def test_the_forecast_counts_steps_against_the_baselines_in_words():
    from date_engine.view.plan import _how_many

    assert [_how_many(4000, s) for s in (1000, 4001, 6000)] == ["4× fewer", "as many", "1.5× more"]


def test_the_shipped_baselines_exponents_without_and_with_a_probe(stored_probe):
    """Without a probe the adaptive family takes √k (vit-mnist at 4096, lenet-mnist at 8192,
    lstm-mnist-adam at 2048), momentum k (lstm-mnist); with a probe whose LR check passes
    (lenet-digits' own), k^0.75. --json carries the exponent and the one line that says why."""
    for spec, batch, p in (("vit-mnist", 4096, 0.5), ("lenet-mnist", 8192, 0.5),
                           ("lstm-mnist-adam", 2048, 0.5), ("lstm-mnist", 2048, 1.0)):
        data = json.loads(plan(RECIPES / f"{spec}.yaml", "--batch", batch, "--json").stdout)
        assert data["lr_exponent"] == p, spec
        assert ("raises it to 0.75: date probe SPEC" in data["lr_note"]) == (p == 0.5), spec
    probed = json.loads(plan(RECIPES / "lenet-digits.yaml", "--batch", 256, "--json", "--probe",
                             stored_probe("probes-lrcheck/digits-lenet-seed0")).stdout)
    assert probed["lr_exponent"] == 0.75
    assert probed["lr_note"].startswith("LR exponent 0.75: the probe's LR check found room")


@pytest.mark.parametrize("rule", ["date", "paper"])
def test_every_why_of_every_shipped_plan_is_one_line_of_its_column(rule):
    """In a 120-column terminal each derived number's "why" fits its column: one line that speaks
    of the user's run, the evidence a link away (the column's width read from the table)."""
    import re

    from rich.console import Console

    from date_engine import load_spec, plan_for
    from date_engine.recipes import spec_recipe
    from date_engine.view.plan import render_plan

    console = Console(width=120, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    notes = []
    for path in sorted((ROOT / "date_engine" / "recipes" / "specs").glob("*.yaml")):
        spec = load_spec(path, [f"date.rule={rule}"])
        run = plan_for(spec, 2 * spec.baseline.batch_size, recipe=spec_recipe(spec))
        notes += [d.note for d in run.plan.derivations]
        console.print(render_plan(run.plan, run.split, path.stem))
    header = next(line for line in console.export_text().splitlines() if "┃ why" in line)
    width = len(re.split("┃", header)[-2]) - 2  # the cell's text, less its padding
    assert notes and max(map(len, notes)) <= width, [n for n in notes if len(n) > width]


def test_the_plan_says_what_trains_besides_the_optimizer():
    """date plan names the clipping and whom weight decay spares: what the trainers apply."""
    from date_engine import baseline, plan_for
    from date_engine.view.plan import describe_extras

    base = dict(batch_size=16, lr=1e-3, warmup_epochs=0.25, epochs=4, dataset_size=1024,
                optimizer="adamw", weight_decay=0.01)
    assert describe_extras(plan_for(baseline(**base), 64).plan) == (
        "no gradient clipping; weight decay on every parameter, biases and norms included")
    spared = baseline(**base, decay_biases_and_norms=False)
    assert describe_extras(plan_for(spared, 64, overrides=["train.grad_clip=0.5"]).plan) == (
        "gradients clipped to global norm 0.5; weight decay biases and norm weights spared")
    result = CliRunner().invoke(app, ["plan", "lenet-digits", "--batch", "256", "--set",
                                      "train.grad_clip=2"], env={"COLUMNS": "200"})
    assert "\nClipping and decay: gradients clipped to global norm 2\n" in result.output, \
        result.output
