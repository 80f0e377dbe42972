"""The stacks language models train in: a nanoGPT config read without running it (what it
leaves out is train.py's, and said so), and the plan written back as one (round trip)."""

from __future__ import annotations

import json
import math
import re
import shlex

import pytest
from typer.testing import CliRunner

from date_engine.baselines import baseline_from_file, read_baseline
from date_engine.cli import app
from date_engine.errors import SpecError
from date_engine.forecast import NoiseCurve
from date_engine.plan import Plan, derive_plan
from date_engine.planning import plan_for
from date_engine.spec import load_spec, parse_spec
from date_engine.stacks.megatron import baseline_from_megatron, parse_flags, step_schedule
from date_engine.stacks.nanogpt import (
    TRAIN_DEFAULTS,
    emit_nanogpt,
    nanogpt_sources,
    read_pyconfig_text,
)
from date_engine.stacks.pyconfig import read_pyconfig
from date_engine.view.emit import stack_emitted
from tests.conftest import RECIPES

runner = CliRunner()

GPT_CHAR = """# gpt-char's baseline: nanoGPT's README configuration for a CPU
import time
out_dir = 'out-shakespeare-char'
wandb_run_name = 'mini-gpt-' + str(time.time())   # not read: not needed
block_size = 64
batch_size = 12
n_layer = 4
n_head = 4
n_embd = 128
max_iters = 2000
lr_decay_iters = max_iters
dropout = 0.0
learning_rate = 1e-3
gradient_accumulation_steps = 1
min_lr = learning_rate / 10
beta2 = 0.99
warmup_iters = 100
"""


def _floats_close(a, b, path=""):
    """Two plans' JSON alike, floats to 1e-12 (the recipe writes its warmup to 15 digits)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _floats_close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _floats_close(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15), path  # bound: 15 written digits
    else:
        assert a == b, path


def test_a_config_is_read_as_values_never_run():
    read = read_pyconfig("import os\n'doc'\na = 5 * 8\nb = a / 10\nc = (0.9, -0.95)\n"
                         "d = os.getcwd()\ne = 10 ** 10 ** 10\nf = 'x' + 'y'\ng = h = 2\n",
                         "c.py", {"z": 1})
    assert read.values == {"a": 40, "b": 4.0, "c": (0.9, -0.95), "f": "xy", "g": 2, "h": 2}
    assert read.unread == {"d": 6, "e": 7}  # a call, and a power too large to compute
    for text, line in (("a = 1\nif a:\n    a = 2\n", 2), ("def f():\n    pass\n", 1),
                       ("a = 1\nfor i in []:\n    pass\n", 2)):
        with pytest.raises(SpecError, match=f"c.py line {line}: .* statement; this file is read"):
            read_pyconfig(text, "c.py")
    with pytest.raises(SpecError, match="c.py: not Python"):
        read_pyconfig("a = (", "c.py")


def test_gpt_chars_baseline_from_its_nanogpt_config_plans_as_the_recipe(tmp_path):
    config = tmp_path / "train_gpt_char.py"
    config.write_text(GPT_CHAR)
    spec = baseline_from_file(config, 71117)
    recipe = load_spec(RECIPES / "gpt-char.yaml")
    for batch in (24, 96):  # 2× and 8×
        _floats_close(derive_plan(spec, batch).to_dict(), derive_plan(recipe, batch).to_dict())
    plan = derive_plan(spec, 96)
    assert plan.tokens_per_sample == 64 and plan.tokens(96) == 6144
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert "tokens_per_sample" not in derive_plan(load_spec(RECIPES / "lenet-digits.yaml"),
                                                  64).to_dict()
    raw = spec.model_dump(mode="json", exclude_none=True)
    del raw["baseline"]["tokens_per_sample"]  # counted in, not trained: a run resumes without it
    assert parse_spec(raw).fingerprint() == spec.fingerprint()
    read = read_pyconfig_text(GPT_CHAR, "train_gpt_char.py")
    sources = nanogpt_sources(read)
    assert sources["baseline.batch_size"] == \
        "batch_size × gradient_accumulation_steps (train_gpt_char.py)"
    assert "wandb_run_name" in read.unread


def test_what_a_config_leaves_out_is_train_pys_and_the_plan_says_so(tmp_path):
    config = tmp_path / "small.py"
    config.write_text("batch_size = 8\nmax_iters = 50000\nlr_decay_iters = max_iters\n")
    base = baseline_from_file(config, 100000).baseline
    d = TRAIN_DEFAULTS
    assert base.batch_size == 8 * d["gradient_accumulation_steps"] == 320
    assert (base.lr, base.iterations, base.optimizer.betas, base.optimizer.weight_decay) == \
        (d["learning_rate"], 50000, (d["beta1"], d["beta2"]), d["weight_decay"])
    assert base.warmup_epochs == d["warmup_iters"] * 320 / 100000
    assert base.schedule.final_lr == d["min_lr"] and base.schedule.name == "cosine"
    shown = runner.invoke(app, ["plan", "--from", str(config), "--train-samples", "100000",
                                "--batch", "1280"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "batch_size × gradient_accumulation_steps (gradient_accumulation_steps: train.py's" \
        in shown.output
    assert "learning_rate (learning_rate: train.py's default)" in shown.output
    # block_size, train.py's 1,024: the plan counts tokens too (320 → 1,280 sequences a step)
    assert "sequences of 1,024 tokens: 327,680 → 1.311M a step" in shown.output


@pytest.mark.parametrize("text, says", [
    ("max_iters = 1000\nlr_decay_iters = 2000\n",
     "small.py: lr_decay_iters 2000 is not max_iters 1000: the cosine would stop short of"),
    ("import math\nlearning_rate = math.sqrt(2) * 1e-4\n",
     "small.py line 2: learning_rate is not a value or arithmetic on values"),
    ("max_iters = 1000\nlr_decay_iters = 1000\n",  # train.py's 2,000 warmup steps
     "small.py: warmup_iters 2000 is not fewer than max_iters 1000"),
    ("batch_size = 0\n", "small.py: batch_size must be a whole number from 1"),
    ("learning_rate = '1e-3'\n", "small.py: learning_rate must be a number"),
])
def test_a_config_it_cannot_carry_is_refused_in_one_sentence_exit_2(tmp_path, text, says):
    config = tmp_path / "small.py"
    config.write_text(text)
    with pytest.raises(SpecError, match=says.replace("(", r"\(")):
        baseline_from_file(config, 100000)
    result = runner.invoke(app, ["plan", "--from", str(config), "--train-samples", "100000",
                                 "--batch", "480"], env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert says.split(": ", 1)[1][:40] in " ".join(result.output.split())


def test_the_emitted_config_reads_back_as_the_plan_that_wrote_it(tmp_path):
    """--emit nanogpt: the plan at 8× as train.py's names; read back, its plan at k = 1 trains
    alike (peak, steps, warmup, the LR at every step, β2, λ, clipping); ε, which train.py does
    not set, is named as lost."""
    config = tmp_path / "train_gpt_char.py"
    config.write_text(GPT_CHAR)
    run = plan_for(baseline_from_file(config, 71117), 96, devices=2, micro_batch=24)
    text, lost = emit_nanogpt(run)
    assert "gradient_accumulation_steps = 4\n" in text and "batch_size = 24\n" in text
    assert lost == [f"ε {run.plan.optimizer.options['eps']:g} (train.py keeps torch's 1e-8)"]
    back = tmp_path / "emitted.py"
    back.write_text(text)
    again = derive_plan(baseline_from_file(back, 71117), 96)
    wrote = run.plan
    assert (again.target_batch, again.total_iterations, again.warmup_iterations) == \
        (wrote.target_batch, wrote.total_iterations, wrote.warmup_iterations)
    assert again.peak_lr == wrote.peak_lr and again.grad_clip == wrote.grad_clip
    assert all(math.isclose(again.lr(i), wrote.lr(i), rel_tol=1e-12)  # bound: float64 round
               for i in range(1, wrote.total_iterations + 1))              # trip of min_lr
    for option in ("betas", "weight_decay"):
        assert again.optimizer.options[option] == wrote.optimizer.options[option]
    shown = runner.invoke(app, ["plan", "--from", str(config), "--train-samples", "71117",
                                "--batch", "96", "--emit", "nanogpt"])
    assert shown.exit_code == 0 and shown.stdout.startswith("# date plan: batch 96")


# ---------------------------------------------------------------------------------- Megatron

GPT3_SCRIPT = """#!/bin/bash
# as examples/gpt3/train_gpt3_175b_distributed.sh writes its arguments
GPUS_PER_NODE=8
DATA_PATH=$5 #<Specify path and file prefix>_text_document
DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
)
GPT_MODEL_ARGS=(
    --num-layers 96
    --seq-length 2048
    --attention-backend auto # Can use (flash/fused/unfused/local)
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1536
    --step-batch-size-schedule "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536"
    --train-iters 500000
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --clip-grad 1.0
    --fp16
    --lr 6.0e-5
    --lr-decay-style cosine
    --min-lr 6.0e-6
    --lr-warmup-fraction .001
    --lr-decay-iters 500000
)
torchrun ${DISTRIBUTED_ARGS[@]} examples/classes/pretrain_gpt.py \\
    ${GPT_MODEL_ARGS[@]} \\
    ${TRAINING_ARGS[@]}
"""


def test_a_megatron_launch_script_reads_as_its_baseline_naming_what_is_lost():
    spec, lost = baseline_from_megatron(parse_flags(GPT3_SCRIPT, "train.sh"), 10**8)
    base = spec.baseline
    assert (base.batch_size, base.lr, base.iterations, base.tokens_per_sample) == \
        (1536, 6e-5, 500000, 2048)
    assert base.optimizer.betas == (0.9, 0.95) and base.optimizer.weight_decay == 0.1
    assert base.optimizer.eps == 1e-8 and spec.train.grad_clip == 1.0  # Megatron's default ε
    assert base.warmup_epochs == pytest.approx(0.001 * 500000 * 1536 / 10**8)  # bound: float64
    assert (base.schedule.name, base.schedule.final_lr) == ("cosine", 6e-6)
    assert lost == ["the baseline's own ramp (--step-batch-size-schedule): planned from its "
                    "last batch, 1,536"]
    assert step_schedule("0:16 2.4B:320 12B:1536", 2048) == \
        [(0, 16), (2_400_000_000 // 2048, 320), (12_000_000_000 // 2048, 1536)]


@pytest.mark.parametrize("old, new, says", [
    ("--lr 6.0e-5", "--lr $LR",
     "train.sh: lr must be a number above 0 and up to 1e+06, got '$LR'"),
    ("--lr-decay-iters 500000", "--lr-decay-iters 430000",
     "train.sh: --lr-decay-iters 430000 is not --train-iters 500000: the decay would end"),
    ("--global-batch-size 1536\n    --step-batch-size-schedule", "--x",
     "train.sh: no --global-batch-size, so the global batch is the micro-batch times the"),
    ("--train-iters 500000", "", "train.sh: give one of --train-iters and --train-samples"),
], ids=["shell", "decay", "batch", "length"])
def test_megatron_flags_it_cannot_read_are_refused_naming_the_flag(old, new, says):
    assert old in GPT3_SCRIPT
    with pytest.raises(SpecError, match=re.escape(says)):
        baseline_from_megatron(parse_flags(GPT3_SCRIPT.replace(old, new), "train.sh"), 10**8)


def _gpt_char(**date):
    raw = load_spec(RECIPES / "gpt-char.yaml").model_dump(mode="json", exclude_none=True)
    raw.setdefault("date", {}).update(date)
    return parse_spec(raw)


def test_emitted_megatron_flags_read_back_as_the_plan_that_wrote_them(tmp_path):
    """gpt-char at 8× as Megatron flags: read back (as a launch script would hold them), the
    plan at k = 1 trains alike: batch, steps, warmup, the LR at every step, β2, ε, λ, clipping,
    the sequence length; Bridge's YAML alike."""
    run = plan_for(_gpt_char(), 96, devices=4, micro_batch=8)
    wrote = run.plan
    for target, name in (("megatron", "args.sh"), ("megatron-bridge", "bridge.yaml")):
        text, lost = stack_emitted(target, run)
        assert lost == []
        (tmp_path / name).write_text(text)
        read = read_baseline(tmp_path / name, 71117)
        again = derive_plan(read.spec, 96)
        assert (again.target_batch, again.total_iterations, again.tokens_per_sample,
                again.grad_clip) == (96, wrote.total_iterations, 64, 1.0), target
        # bound: the recipe writes its warmup to 15 digits; the flags carry 9,600 samples
        assert again.warmup_iterations == pytest.approx(wrote.warmup_iterations, rel=1e-12)
        assert again.optimizer.options == wrote.optimizer.options, target
        assert all(math.isclose(again.lr(i), wrote.lr(i), rel_tol=1e-12)  # bound: float64
                   for i in range(1, wrote.total_iterations + 1)), target  # min-lr's round trip
    text, _ = stack_emitted("megatron", run)
    assert "--micro-batch-size 8\n" in text and "--global-batch-size 96\n" in text
    assert "--train-samples 24000\n" in text and "--lr-warmup-samples 9600\n" in text


def _ramped(target):
    """gpt-char ramping to ``target`` on a rising noise curve (B_noise = 4·e^0.5 · 1000)."""
    curve = NoiseCurve(a=4000.0, beta=0.5, first=0.01, last=0.3, lr_checked=True)
    spec = _gpt_char(budget="ramp", ramp="planned", warmup="constant")
    return plan_for(spec, target, noise_curve=curve)


def test_a_ramp_is_written_as_megatrons_step_schedule_in_tokens():
    run = _ramped(96)
    assert [st.batch for st in run.plan.ramp] == [12, 24, 48, 96]
    text, lost = stack_emitted("megatron", run)
    assert "--global-batch-size" not in text  # megatron-core 0.18 refuses both
    written = re.search(r'--step-batch-size-schedule (.+)', text).group(1)
    assert step_schedule(shlex.split(written)[0], 64) == \
        [(st.samples_before, st.batch) for st in run.plan.ramp]
    assert any("peak LR per ramp stage" in line for line in lost)
    with pytest.raises(SpecError, match="--rampup-batch-size cannot give this ramp "
                                        r"\(12 → 24 → 48 → 96 from samples 0, "):
        stack_emitted("megatron-rampup", run)
    with pytest.raises(SpecError, match="Megatron-Bridge cannot train this ramp as planned"):
        stack_emitted("megatron-bridge", run)


def test_megatron_cores_own_calculator_gives_the_emitted_rampup_the_plans_batch_per_sample():
    """A ramp of one move, which --rampup-batch-size can give: megatron-core's calculator over
    the emitted triple gives the plan's batch at every sample."""
    calculator = pytest.importorskip("megatron.core.num_microbatches_calculator",
                                     reason="megatron-core is not installed (pip install "
                                            "'date-engine[stacks]')")
    run = _ramped(24)
    plan = run.plan
    assert [st.batch for st in plan.ramp] == [12, 24]
    text, _ = stack_emitted("megatron-rampup", run)
    rampup = [int(w) for w in re.search(r"--rampup-batch-size (.+)", text).group(1).split()]
    calculator.init_num_microbatches_calculator(0, rampup, 24, 12, 1)
    try:
        for step in range(1, plan.total_iterations + 1):
            samples = round(plan.samples_through(step - 1))
            calculator.update_num_microbatches(samples, consistency_check=False)
            assert calculator.get_current_global_batch_size() == plan.batch_at(step), step
    finally:
        calculator.unset_num_microbatches_calculator()


def test_a_constant_schedule_is_written_for_nanogpt_as_a_cosine_that_stays_at_its_peak(tmp_path):
    raw = _gpt_char().model_dump(mode="json", exclude_none=True)
    raw["baseline"]["schedule"] = {"name": "constant"}
    run = plan_for(parse_spec(raw), 96)
    text, lost = emit_nanogpt(run)
    assert lost[1:] == [] and f"min_lr = {run.plan.peak_lr!r}\n" in text
    (tmp_path / "c.py").write_text(text)
    again = derive_plan(baseline_from_file(tmp_path / "c.py", 71117), 96)
    assert all(math.isclose(again.lr(i), run.plan.lr(i), rel_tol=1e-12)  # bound: float64 cosine
               for i in range(1, run.plan.total_iterations + 1))


def test_a_warmup_of_a_fraction_of_a_step_is_named_where_nanogpt_rounds_it():
    raw = _gpt_char().model_dump(mode="json", exclude_none=True)
    raw["baseline"]["warmup_epochs"] = 50.5 * 12 / 71117  # 50.5 steps of 12
    run = plan_for(parse_spec(raw), 96)
    text, lost = emit_nanogpt(run)
    assert run.plan.warmup_iterations == pytest.approx(50.5)  # bound: float64 of 50.5·12/71117
    assert "warmup_iters = 50\n" in text or "warmup_iters = 51\n" in text
    assert any(line.startswith("the warmup's 50.5 steps (written as ") for line in lost)
