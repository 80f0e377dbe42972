"""What a newcomer or a script trips over: `date` beside the system's date, runs that re-run, pipes,
packaging, advice that must itself be accepted, and what a run leaves to look at."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from date_engine.cli import app
from date_engine.sysdate import is_for_system_date
from tests.bounds import hang_limit
from tests.conftest import RECIPES, ROOT
from tests.runs import SHORT, date, run_group

runner = CliRunner()
SCRIPT = Path(sys.executable).parent / "date"  # the console script pip installed


def invoke(*args, **kwargs):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "160"}, **kwargs)


# ------------------------------------------------------------------ 1. `date`, the system's too


@pytest.mark.parametrize("args, ours", [
    ([], False), (["+%s"], False), (["-u", "+%Y"], False), (["--iso-8601"], False),
    (["-d", "tomorrow"], False), (["0101"], False),
    (["plan"], True), (["scale"], True), (["--help"], True), (["probe"], True),
    (["--version"], False),  # scripts run it to tell GNU's date from BSD's
    (["recipes"], True), (["plna"], True),  # a typo of ours gets our error, not the clock's
])
def test_which_calls_go_to_the_system_date(args, ours):
    assert is_for_system_date(args) is not ours


@pytest.mark.skipif(not SCRIPT.exists() or shutil.which("date", path="/bin:/usr/bin") is None,
                    reason="needs the installed console script and a system date")
def test_the_console_script_hands_the_systems_calls_over():
    def run(*args):
        return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True,
                              timeout=hang_limit(0.5))

    before = int(time.time())
    now = run("+%s")
    assert now.returncode == 0 and before <= int(now.stdout) <= time.time()
    year = run("-u", "+%Y")
    assert year.stdout.strip() == time.strftime("%Y", time.gmtime())
    plain = run()
    assert plain.returncode == 0 and time.strftime("%Y") in plain.stdout
    system = subprocess.run([shutil.which("date", path="/bin:/usr/bin"), "--version"],
                            capture_output=True, text=True, timeout=hang_limit(0.5))
    assert run("--version").stdout == system.stdout  # what a script tells GNU's date by
    assert "DATE: scale a small-batch training run" in run("--help").stdout  # ours
    ours = subprocess.run([str(SCRIPT.parent / "date-engine"), "+%s"], capture_output=True,
                          text=True, timeout=hang_limit(0.5))
    assert ours.returncode == 2  # date-engine never hands over


def test_the_hand_over_imports_nothing_heavy():
    """`date +%s` once imported typer, rich and pydantic before handing over (10× a Python
    start-up); the console script's module decides on the standard library alone
    (benchmarks/date_handover.py measures the time)."""
    code = ("import sys, date_engine.sysdate\n"
            "print(sorted(m for m in ('typer', 'rich', 'pydantic', 'yaml', 'torch',"
            " 'date_engine.cli', 'date_engine.spec') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
@pytest.mark.skipif(not SCRIPT.exists(), reason="needs the installed console script")
def test_a_recipe_module_in_the_current_folder_is_found(tmp_path):
    """`--recipe mine:digits` failed from the console script, which has its bin folder on
    sys.path where `python -m` has the current folder; date plan now resolves the recipe too."""
    (tmp_path / "mine.py").write_text(
        "from dataclasses import replace\n"
        "from date_engine.recipes import get_recipe\n"
        "def digits():\n"
        "    return replace(get_recipe('lenet-digits'), name='my-digits')\n")
    spec = RECIPES / "lenet-digits.yaml"
    env = {"PYTHONPATH": ""}  # as a user's shell has it
    trained = run_group([SCRIPT, "scale", spec, "--batch", 256, "--recipe", "mine:digits",
                         "--dry-run"], cwd=tmp_path, env=env)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    planned = run_group([SCRIPT, "plan", spec, "--batch", 256, "--set", "recipe=mine:digits"],
                        cwd=tmp_path, env=env)
    assert planned.returncode == 0, planned.stderr
    unknown = run_group([SCRIPT, "plan", spec, "--batch", 256, "--set", "recipe=nope"],
                        cwd=tmp_path, env=env)
    assert unknown.returncode == 2 and "unknown recipe 'nope'" in unknown.stderr


# ------------------------------------------------------------------ 2. runs that re-run


@pytest.mark.slow
def test_running_a_command_again_starts_a_new_run_and_resume_takes_the_newest(tmp_path):
    args = ["scale", "lenet-digits", "--batch", 256, *SHORT, "--max-steps", 3]
    first = run_group([sys.executable, "-m", "date_engine", *args], cwd=tmp_path)
    second = run_group([sys.executable, "-m", "date_engine", *args], cwd=tmp_path)
    assert first.returncode == 0 and second.returncode == 0, second.stdout + second.stderr
    assert "already holds checkpoints" not in second.stderr
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == ["lenet-digits-B256", "lenet-digits-B256-2"]
    assert "-o runs/lenet-digits-B256-2 --resume" in second.stdout  # continue with: that run
    resumed = run_group([sys.executable, "-m", "date_engine", *args[:-2], "--resume"],
                        cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from runs/lenet-digits-B256-2/" in resumed.stdout


# ------------------------------------------------------------------ 3. pipes and --json


def test_recipes_in_a_pipe_keep_every_name_whole():
    result = run_group([sys.executable, "-m", "date_engine", "recipes"], env={"COLUMNS": "40"})
    assert result.returncode == 0
    names = [line.split("\t")[0] for line in result.stdout.splitlines()]
    assert names == ["bert-mlm", "gnmt", "gpt-char", "lenet-digits", "lenet-mnist", "lstm-mnist",
                     "ptb-large", "ptb-small", "resnet50-imagenet", "vit-mnist"]
    from date_engine.models.lenet import LeNet

    params = sum(p.numel() for p in LeNet(image_size=8).parameters())
    assert f"lenet-digits\tLeNet-5 (8×8 input)\tscikit-learn digits, 8×8 scans\t{params}\t1437" \
        in result.stdout  # numbers whole too
    listed = json.loads(invoke("recipes", "--json").stdout)
    assert {r["name"] for r in listed} == set(names)
    assert next(r for r in listed if r["name"] == "lenet-digits")["samples"] == 1437
    # every shipped baseline is listed with its recipe (lstm-mnist-adam was not)
    baselines = {r["name"]: r["baselines"] for r in listed}
    assert baselines["lstm-mnist"] == ["lstm-mnist", "lstm-mnist-adam"]
    assert baselines["bert-mlm"] == ["bert-mlm", "bert-mlm-lamb"]
    listed_names = sorted(name for names in baselines.values() for name in names)
    assert listed_names == sorted(p.stem for p in RECIPES.glob("*.yaml"))
    assert "\tlstm-mnist,lstm-mnist-adam\n" in result.stdout


# ------------------------------------------------------------------ 4. markup and optional packages


def blocked(module: str, *args: str) -> subprocess.CompletedProcess:
    """`date ARGS` in a process where ``module`` cannot be imported."""
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from date_engine.cli import main_engine\n"
            f"sys.argv = ['date', *{list(args)!r}]\n"
            "main_engine()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=hang_limit(2))


def test_the_extras_name_survives_in_the_message(tmp_path):
    result = blocked("matplotlib", "plan", "lenet-mnist", "--batch", "8192", "--plot",
                     str(tmp_path / "lr.png"))
    assert result.returncode == 2
    assert "pip install -e '.[plot]'" in result.stderr


def test_a_missing_package_is_named_before_training():
    result = blocked("sacrebleu", "scale", "gnmt", "--batch", "256", "--dry-run")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "recipe gnmt scores BLEU with sacrebleu" in result.stderr
    assert "pip install -e '.[translation]'" in result.stderr
    assert "dry run:" not in result.stdout  # refused before anything trained


# ------------------------------------------------------------------ 5. advice is accepted


@pytest.mark.parametrize("nproc", [1, 2])
@pytest.mark.parametrize("batch", [32768, 1437, 961])
def test_every_suggested_batch_is_accepted(batch, nproc):
    refused = invoke("plan", "lenet-digits", "--batch", batch, "--nproc", nproc)
    assert refused.exit_code == 2
    suggested = re.search(r"(?:choose --batch|LEGW fits up to batch) (\d+)", refused.output)
    assert suggested, refused.output
    accepted = invoke("plan", "lenet-digits", "--batch", suggested.group(1), "--nproc", nproc,
                      "--json")
    assert accepted.exit_code == 0, accepted.output


def test_the_split_advice_is_accepted():
    refused = invoke("plan", "lenet-mnist", "--batch", 8192, "--nproc", 3)
    batch = re.search(r"use a batch of (\d+)", refused.output).group(1)
    assert invoke("plan", "lenet-mnist", "--batch", batch, "--nproc", 3, "--json").exit_code == 0
    refused = invoke("plan", "lenet-mnist", "--batch", 8192, "--nproc", 4, "--micro-batch", 48)
    micro = re.search(r"micro-batches that work: (\d+)", refused.output).group(1)
    assert invoke("plan", "lenet-mnist", "--batch", 8192, "--nproc", 4, "--micro-batch", micro,
                  "--json").exit_code == 0


def test_both_lengths_say_how_to_switch():
    result = invoke("plan", "lenet-mnist", "--batch", 8192, "--set", "baseline.epochs=30")
    assert "--set baseline.iterations=null" in result.output
    fixed = invoke("plan", "lenet-mnist", "--batch", 8192, "--set", "baseline.epochs=30",
                   "--set", "baseline.iterations=null", "--json")
    assert fixed.exit_code == 0


# ------------------------------------------------------------------ 6. consistent inputs


def test_batch_takes_k_like_batches_and_help_reads_right():
    assert json.loads(invoke("plan", "lenet-mnist", "--batch", "8k", "--json").stdout)[
        "target_batch"] == 8192
    bad = invoke("plan", "lenet-mnist", "--batch", "8q")
    assert bad.exit_code == 2 and "--batch: '8q' is not a whole number" in bad.output
    plan_help = invoke("plan", "--help").stdout
    assert "--json" in plan_help and "<bool>" not in plan_help.replace("--help", "")
    assert "Examples: date scale lenet-digits --batch 256" in invoke("scale", "--help").stdout
    from date_engine import __version__

    assert invoke("--version").stdout.strip() == f"date-engine {__version__}"


# ------------------------------------------------------------------ 7. packaging


@pytest.mark.slow
def test_a_built_wheel_has_the_recipes_and_finds_them_by_name(tmp_path):
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                            "--no-build-isolation", "-w", str(wheels), str(ROOT)],
                           capture_output=True, text=True, timeout=hang_limit(6))
    assert built.returncode == 0, built.stderr
    site = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                                "--target", str(site), *map(str, wheels.glob("*.whl"))],
                               capture_output=True, text=True, timeout=hang_limit(6))
    assert installed.returncode == 0, installed.stderr
    assert (site / "date_engine/recipes/specs/lenet-mnist.yaml").is_file()
    plan = run_group([sys.executable, "-m", "date_engine", "plan", "lenet-mnist", "--batch", 8192,
                      "--json"], env={"PYTHONPATH": str(site)}, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["total_iterations"] == 220


def test_recipes_copy_starts_a_spec(tmp_path):
    result = invoke("recipes", "copy", "lenet-mnist", tmp_path / "mine.yaml")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "mine.yaml").read_text() == (RECIPES / "lenet-mnist.yaml").read_text()
    again = invoke("recipes", "copy", "lenet-mnist", tmp_path / "mine.yaml")
    assert again.exit_code == 2 and "pass --force" in again.output
    assert invoke("recipes", "copy", "lenet-mnist", tmp_path).exit_code == 0  # a folder: NAME.yaml
    assert (tmp_path / "lenet-mnist.yaml").is_file()
    unknown = invoke("recipes", "copy", "lenet", tmp_path / "x.yaml")
    assert unknown.exit_code == 2 and "lenet-digits" in unknown.output


@pytest.mark.slow
def test_recipes_new_writes_a_recipe_and_baseline_that_train_as_written(tmp_path):
    """`date recipes new NAME`: NAME.py (a model and data through recipes.simple) and NAME.yaml
    (its baseline) that date plan and date scale take as they are; a name that is no module,
    and files that exist, are refused in one sentence."""
    made = run_group([sys.executable, "-m", "date_engine", "recipes", "new", "my_model"],
                     cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "my_model.py" in made.stdout and "date plan my_model.yaml" in made.stdout
    plan = run_group([sys.executable, "-m", "date_engine", "plan", "my_model.yaml", "--batch",
                      512, "--json"], cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["scale"] == 8
    trained = run_group([sys.executable, "-m", "date_engine", "scale", "my_model.yaml",
                         "--batch", 256, "--max-steps", 5, "-o", "run"], cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    assert any((tmp_path / "run" / "checkpoints").glob("*.pt"))
    again = run_group([sys.executable, "-m", "date_engine", "recipes", "new", "my_model"],
                      cwd=tmp_path)
    assert again.returncode == 2 and "pass --force" in again.stderr
    bad = run_group([sys.executable, "-m", "date_engine", "recipes", "new", "my-model"],
                    cwd=tmp_path)
    assert bad.returncode == 2 and "e.g. my_model" in bad.stderr


# ------------------------------------------------------------------ 8. what a run shows and leaves


def test_the_progress_line_shows_no_number_before_it_has_one():
    from rich.console import Console

    from date_engine.view.progress import ProgressView

    view = ProgressView(Console(file=open("/dev/null", "w")), 10, 0)  # noqa: SIM115
    assert view._status() == "epoch 0.00  loss —  lr 0  — samples/s"
    view.step(3, loss=0.5, rate=123.4, epoch=0.5, lr=0.01)
    assert "loss 0.5" in view._status() and "123 samples/s" in view._status()


@pytest.mark.slow
def test_a_short_run_logs_its_last_step_and_draws_its_curves(tmp_path):
    out = tmp_path / "run"
    result = date("scale", "lenet-digits", "--batch", 128, "--set", "baseline.epochs=0.55",
                  "--set", "baseline.warmup_epochs=0.01", "-o", out)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if "loss" in x] == [7]  # 7 steps, log_every 20
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_dry_run_names_no_file_it_removed():
    result = date("scale", "lenet-digits", "--batch", 256, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "date-dry-run-" not in result.stdout
    assert "written and read back" in result.stdout


def test_the_example_without_arguments_says_how_to_run_it():
    out = subprocess.run([sys.executable, "examples/plan_in_python.py"], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode != 0 and "usage: python examples/plan_in_python.py" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_a_spec_whose_data_set_size_is_not_the_datas_is_refused(tmp_path):
    """lenet-mnist's spec trained as lenet-digits once ran with every epoch count 42× off after a
    note; now a size more than 10% off is refused, naming the fix and the spec's own recipe. An
    approximate size (gnmt's for WMT) still trains, with the note."""
    spec = RECIPES / "lenet-mnist.yaml"
    refused = date("scale", spec, "--batch", 256, "--recipe", "lenet-digits", "--dry-run")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    words = " ".join(refused.stderr.split())
    assert "off by 41.8×" in words and "baseline.dataset_size: 1437" in words
    assert "names recipe lenet-mnist" in words
    close = date("scale", RECIPES / "lenet-digits.yaml", "--batch", 256, "--dry-run",
                 "--set", "baseline.dataset_size=1500")
    assert close.returncode == 0, close.stderr
    assert "counts epochs of 1500 samples" in " ".join(close.stdout.split())
