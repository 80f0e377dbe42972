"""nanoGPT's character-level Shakespeare baseline in Hugging Face's Trainer, scaled 8x by the plan.

The baseline is a GPT2LMHeadModel built from a config of nanoGPT's CPU size (4 layers, 4 heads,
128 wide, 64 characters of context) with nanoGPT's TrainingArguments: batch 12, 2,000 steps, AdamW
at 1e-3 (beta2 0.99, weight decay 0.1 on matrices), 100 warmup steps, cosine to 1e-4, clipping at
1.0. The plan is read from those arguments (baseline_from_hf), and DateTrainer trains it at batch
96 on the same characters as the gpt-char recipe (date_engine.data.text.load_chars):

    pip install -e '.[hf]'
    date data prepare shakespeare-chars data/shakespeare-chars --source <archive>
    python examples/hf_gpt_char.py                         # the baseline, then 8x
    python examples/hf_gpt_char.py --steps 20 --scaled-only  # a quick look
    python examples/hf_gpt_char.py --probe probe.json --probe-share 0.25 --scaled-only

With --probe the baseline is first trained with DateProbe, which measures its gradient noise
scale (the same batch of 12 split into two micro-batches of 6) and writes probe.json; the
forecast for the scaled batch is printed from it, as `date plan --from args.json --probe` reads it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tempfile

import torch
import transformers

from date_engine import baseline_from_hf, plan_for
from date_engine.data.text import LMSequences, load_chars
from date_engine.integrations.hf import DateProbe, DateTrainer, training_arguments

BLOCK, EVAL_WINDOWS = 64, 2048


class Windows(torch.utils.data.Dataset):
    """The recipe's windows of BLOCK characters as HF's causal-LM examples (labels = inputs;
    the model shifts them)."""

    def __init__(self, windows: LMSequences, chosen: list[int] | None = None) -> None:
        self.windows, self.chosen = windows, chosen or list(range(len(windows)))

    def __len__(self) -> int:
        return len(self.chosen)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x, _ = self.windows[self.chosen[i]]
        return {"input_ids": x, "labels": x}


def nanogpt_args(out: str, steps: int, seed: int) -> transformers.TrainingArguments:
    return transformers.TrainingArguments(
        output_dir=out, per_device_train_batch_size=12, max_steps=steps, learning_rate=1e-3,
        lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"min_lr": 1e-4},
        warmup_steps=min(100, steps // 20), adam_beta2=0.99, weight_decay=0.1,
        max_grad_norm=1.0, optim="adamw_torch", seed=seed, data_seed=seed, use_cpu=True,
        report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
        per_device_eval_batch_size=256)


def model(vocab: int, seed: int) -> transformers.GPT2LMHeadModel:
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=vocab, n_positions=BLOCK, n_embd=128, n_layer=4, n_head=4, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/shakespeare-chars")
    parser.add_argument("--steps", type=int, default=2000, help="the baseline's steps")
    parser.add_argument("--scale", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scaled-only", action="store_true", help="skip training the baseline")
    parser.add_argument("--probe", help="first probe the baseline with DateProbe into this file")
    parser.add_argument("--probe-share", type=float, help="the share of its steps to probe")
    a = parser.parse_args(argv)
    vocab, ids = load_chars(a.data)
    train = Windows(LMSequences(ids["train"], BLOCK))
    valid = LMSequences(ids["valid"], BLOCK)
    chosen = torch.linspace(0, len(valid) - 1, min(EVAL_WINDOWS, len(valid))).long().tolist()
    held_out = Windows(valid, chosen)
    losses = {}
    with tempfile.TemporaryDirectory() as out:
        args = nanogpt_args(out, a.steps, a.seed)
        run = plan_for(baseline_from_hf(args, len(train)), batch=12 * a.scale)
        if a.probe:
            probe_forecast(a, args, train, len(vocab), run.plan.target_batch)
        jobs = [("scaled", DateTrainer, training_arguments(run, base=args), {"run": run})]
        if not a.scaled_only:
            jobs.insert(0, ("baseline", transformers.Trainer, args, {}))
        for name, kind, arguments, extra in jobs:
            trainer = kind(model=model(len(vocab), a.seed), args=arguments, train_dataset=train,
                           **extra)
            trainer.train()
            losses[name] = trainer.evaluate(held_out)["eval_loss"]
            print(f"{name}: batch {arguments.per_device_train_batch_size}, "
                  f"{arguments.max_steps} steps, peak LR {arguments.learning_rate:.4g}: "
                  f"validation loss {losses[name]:.4f} nats per character", flush=True)
    assert all(math.isfinite(v) for v in losses.values())
    return losses


def probe_forecast(a: argparse.Namespace, args: transformers.TrainingArguments,
                   train: Windows, vocab: int, batch: int) -> None:
    """Train the baseline with DateProbe (batch 12 as 2 micro-batches of 6) and print what its
    probe forecasts for ``batch``."""
    split = dataclasses.replace(args, per_device_train_batch_size=6,
                                gradient_accumulation_steps=2)
    probe = DateProbe(a.probe, train_samples=len(train), share=a.probe_share)
    transformers.Trainer(model=model(vocab, a.seed), args=split, train_dataset=train,
                         callbacks=[probe]).train()
    if probe.probe is None:
        raise SystemExit("the probe measured too few steps for a noise curve; probe more steps")
    ahead = plan_for(baseline_from_hf(args, len(train)), batch=batch, probe=a.probe,
                     budget="hold").plan.forecast
    print(f"probe ({probe.probe.steps} steps, {probe.probe.wall_seconds:.0f} s): B_noise at the "
          f"baseline's end {ahead.noise_at_end:.1f}, B_hold {ahead.holding_batch}; batch {batch} "
          f"needs {ahead.factor:.2f}x the baseline's epochs ({ahead.steps} steps)", flush=True)


if __name__ == "__main__":
    main()
