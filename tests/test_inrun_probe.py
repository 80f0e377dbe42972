"""`date probe` inside the user's own trainer: the in-run measurement (integrations/probing.py)
against gradients computed one by one, and the callbacks of HF's Trainer and Lightning writing
a probe.json that `date plan --probe` and plan_for read."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from date_engine import DateError, plan_for
from date_engine.cli import app
from date_engine.forecast import forecast
from date_engine.integrations.probing import InRunProbe
from date_engine.probe import Probe
from tests.bounds import float64_formula

MICRO, ACCUMULATION = 4, 3


def _baseline(samples: int = 96):
    from date_engine import baseline

    return baseline(batch_size=MICRO * ACCUMULATION, lr=0.1, warmup_epochs=0.0,
                    iterations=40, dataset_size=samples, optimizer="sgd")


def test_each_step_measures_its_micro_batches_and_their_sum_before_clipping(tmp_path):
    """Three micro-batches a step: the noise scale receives the mean squared norm of their
    gradients, the squared norm of the step's (their mean) and its product with the previous
    step's, as computed one by one, though the step's gradient is clipped to almost nothing
    after the last backward."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
    model.double()
    spec = _baseline()
    run = plan_for(spec, batch=MICRO * ACCUMULATION, micro_batch=MICRO)
    last = [False]
    meter = InRunProbe(spec, run, tmp_path / "probe.json", lambda: last[0])
    meter.attach(model)
    seen = []
    update = meter.noise.update
    meter.noise.update = lambda *args: seen.append(args) or update(*args)
    step_gradients = []
    for _ in range(2):
        xs = torch.randn(ACCUMULATION, MICRO, 5, dtype=torch.float64)
        ys = torch.randn(ACCUMULATION, MICRO, 2, dtype=torch.float64)
        micro = []
        for i in range(ACCUMULATION):
            # the reference on copies of the parameters, which carry no hooks
            copies = {n: p.detach().clone().requires_grad_() for n, p in
                      model.named_parameters()}
            reference = torch.nn.functional.mse_loss(
                torch.func.functional_call(model, copies, (xs[i],)), ys[i])
            micro.append(torch.cat([g.flatten() for g in torch.autograd.grad(
                reference, list(copies.values()))]))
            last[0] = i == ACCUMULATION - 1
            (torch.nn.functional.mse_loss(model(xs[i]), ys[i]) / ACCUMULATION).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-9)
        meter.end_step(ACCUMULATION)
        model.zero_grad(set_to_none=True)
        step_gradients.append((micro, torch.stack(micro).mean(0)))
    # bound: each number is a sum of at most 2·(51 + 3) products and squares (51 parameters,
    # 3 micro-batches) and a division, in another order than the reference's: float64 formulas
    close = float64_formula(2 * (51 + ACCUMULATION) + 2)
    for (small_sq, big_sq, small, big, _), (micro, mean) in zip(seen, step_gradients):
        assert (small, big) == (MICRO, MICRO * ACCUMULATION)
        assert small_sq == pytest.approx(sum(g.dot(g).item() for g in micro) / ACCUMULATION,
                                         rel=close)
        assert big_sq == pytest.approx(mean.dot(mean).item(), rel=close)
    assert math.isnan(seen[0][4])  # no previous step: no pair
    first, second = step_gradients[0][1], step_gradients[1][1]
    assert seen[1][4] == pytest.approx(first.dot(second).item(), rel=close)
    meter.detach()
    assert not any(p._backward_hooks for p in model.parameters())


def test_a_step_of_one_micro_batch_is_refused_with_the_split_that_measures(tmp_path):
    spec = _baseline()
    run = plan_for(spec, batch=MICRO * ACCUMULATION, micro_batch=MICRO * ACCUMULATION)
    with pytest.raises(DateError, match="accumulation 2 of 6 samples per device"):
        InRunProbe(spec, run, tmp_path / "p.json", lambda: True)


def _characters(tmp_path):
    from date_engine.data.text import LMSequences, load_chars

    text = "".join(f"{i} to be, or not to be: that is the question {i * i}.\n" for i in range(80))
    (tmp_path / "input.txt").write_text(text)
    vocab, ids = load_chars(tmp_path)
    windows = LMSequences(ids["train"], 16)
    whole = len(windows) // 8 * 8  # every step two micro-batches of 4 (none partial)
    return len(vocab), [{"input_ids": windows[i][0], "labels": windows[i][0]}
                        for i in range(whole)]


def test_hf_trainer_writes_a_probe_that_date_plan_reads(tmp_path):
    """A GPT-2 baseline trained by HF's Trainer with DateProbe writes probe.json; `date plan
    --from` its arguments `--probe` it forecasts from the probe's noise curve."""
    transformers = pytest.importorskip("transformers")
    from date_engine.integrations.hf import DateProbe

    vocab, train = _characters(tmp_path)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=4,
        gradient_accumulation_steps=2, max_steps=48, learning_rate=3e-3,
        lr_scheduler_type="cosine", warmup_steps=4, max_grad_norm=0.5, use_cpu=True,
        report_to="none", save_strategy="no", logging_steps=4, disable_tqdm=True, seed=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=vocab, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0,
        eos_token_id=0))
    probe = DateProbe(str(tmp_path / "probe.json"), train_samples=len(train))
    trainer = transformers.Trainer(model=model, args=args, train_dataset=train,
                                   callbacks=[probe])
    trainer.train()
    assert not any(p._backward_hooks for p in model.parameters())
    written = Probe.read(tmp_path / "probe.json")
    assert (written.steps, written.baseline_steps, written.micro_batch,
            written.accumulation_steps) == (48, 48, 4, 2)
    assert len(probe.meter.records) == 47  # every step after the first (no pair before it)
    logged = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    kept = [r["loss"] for r in probe.meter.records]
    # each step keeps the loss last logged: HF logs after steps 4, 8, ... (records from step 2)
    assert kept[:3] == [None] * 3 and kept[3:] == [logged[(s - 1) // 4 - 1] for s in
                                                   range(5, 49)]
    (tmp_path / "args.json").write_text(args.to_json_string())
    given = ["plan", "--from", str(tmp_path / "args.json"), "--batch", "64", "--probe",
             str(tmp_path / "probe.json")]
    out = CliRunner().invoke(app, [*given, "--train-samples", str(len(train)), "--json"])
    assert out.exit_code == 0, out.output
    ahead = json.loads(out.stdout)["forecast"]
    expected = forecast(written.curve, 64, 8, written.baseline_epochs, len(train))
    assert (ahead["factor"], ahead["steps"]) == (expected.factor, expected.steps)
    other = CliRunner().invoke(app, [*given, "--train-samples", str(len(train) - 1)])
    assert other.exit_code == 2 and "measured for another baseline" in other.output


def test_hf_trainer_with_one_micro_batch_a_step_is_refused_before_a_step(tmp_path):
    transformers = pytest.importorskip("transformers")
    from date_engine.integrations.hf import DateProbe

    vocab, train = _characters(tmp_path)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=8, max_steps=4, use_cpu=True,
        report_to="none", save_strategy="no", disable_tqdm=True)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=vocab, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0,
        eos_token_id=0))
    before = [p.detach().clone() for p in model.parameters()]
    trainer = transformers.Trainer(model=model, args=args, train_dataset=train, callbacks=[
        DateProbe(str(tmp_path / "probe.json"), train_samples=len(train))])
    with pytest.raises(DateError, match="accumulation 2 of 4 samples per device"):
        trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_lightning_writes_a_probe_that_plan_for_reads(tmp_path):
    lightning = pytest.importorskip("lightning")
    from date_engine.integrations.lightning import DateProbe

    class Regression(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                           torch.nn.Linear(16, 1))

        def training_step(self, batch, index):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    x = torch.randn(96, 8)
    y = x @ torch.randn(8) + 0.5 * torch.randn(96)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    spec = _baseline()
    probe = DateProbe(str(tmp_path / "probe.json"), spec, share=0.75)
    trainer = lightning.Trainer(accelerator="cpu", devices=1, accumulate_grad_batches=3,
                                max_steps=40, callbacks=[probe], logger=False,
                                enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, default_root_dir=str(tmp_path))
    trainer.fit(Regression(), loader)
    assert trainer.global_step == 30  # share 0.75 of 40 steps, then stopped
    written = Probe.read(tmp_path / "probe.json")
    assert (written.steps, written.micro_batch, written.accumulation_steps) == (30, 4, 3)
    run = plan_for(spec, batch=48, probe=tmp_path / "probe.json", budget="hold")
    assert run.plan.forecast.factor == forecast(written.curve, 48, 12, written.baseline_epochs,
                                                96).factor
    wrong = lightning.Trainer(accelerator="cpu", devices=1, accumulate_grad_batches=2,
                              max_steps=4, logger=False, enable_checkpointing=False,
                              enable_progress_bar=False, enable_model_summary=False,
                              callbacks=[DateProbe(str(tmp_path / "p.json"), spec)])
    with pytest.raises(DateError, match="4 × 2 accumulated × 1 devices, not the baseline's 12"):
        wrong.fit(Regression(), loader)


@pytest.mark.slow
def test_under_ddp_each_process_measures_its_own_gradients_and_the_means_are_kept(tmp_path):
    """2 processes (gloo), 3 micro-batches a step, the last backward all-reducing: the noise
    scale receives the processes' mean of their own micro-batch |g|², of their own accumulated
    gradient's |G|² and of its product with the previous step's — read before DDP averages the
    gradients and before clipping (tests/probe_worker.py)."""
    import os
    import subprocess
    import sys

    from tests.bounds import hang_limit
    from tests.conftest import ROOT

    out = tmp_path / "seen.json"
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(ROOT / "tests" / "probe_worker.py"), str(out)], cwd=tmp_path, capture_output=True,
        text=True, timeout=hang_limit(16), env={**os.environ, "OMP_NUM_THREADS": "1",
                                                "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    # bound: as in the one-process test, plus the two processes' mean (an add and a halving)
    close = float64_formula(2 * (51 + ACCUMULATION) + 4)
    assert len(result["seen"]) == len(result["expected"]) == 3
    for (small_sq, big_sq, small, big, pair), (micro, step, product) in zip(result["seen"],
                                                                            result["expected"]):
        assert (small, big) == (MICRO, MICRO * ACCUMULATION)  # one process's micro-batches
        assert small_sq == pytest.approx(micro, rel=close)
        assert big_sq == pytest.approx(step, rel=close)
        assert (product is None and math.isnan(pair)) or pair == pytest.approx(product, rel=close)
