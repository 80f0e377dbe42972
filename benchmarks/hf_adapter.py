"""DATE's per-layer ratios inside Hugging Face's Trainer, on two small transformers built from
configs (no downloads): a character-level GPT-2 (causal LM) and a character-level BERT (masked
LM) on Shakespeare's plays (``date data prepare shakespeare-text``).

Each seed trains the baseline with HF's plain ``Trainer`` (batch 16, 300 steps, AdamW, cosine to
0 after a 5 % warmup, weight decay 0.1 with HF's exemptions, clipping at 1.0), then 8× its batch
(128) in the baseline's epochs four ways:

- ``date``: ``DateTrainer(run=run, date=True)``, DATE's ratios over AdamW,
- ``base``: ``DateTrainer(run=run, date=False)``, AdamW alone with the plan's settings,
- ``sqrt-by-hand``: HF's plain Trainer with the baseline's arguments, η0·√8 and 8× fewer steps,
- ``linear-by-hand``: the same with η0·8,

where ``run = plan_for(baseline_from_hf(args, ...), batch=128)`` and the arguments are
``training_arguments(run, base=args)``: the baseline is read from its TrainingArguments, not
typed in. One line of JSON per (model, cell, seed): the held-out loss and what trained::

    python -m benchmarks.hf_adapter --data data/shakespeare-text --seeds 0,1 \\
        -o docs/results/studies/hf-adapter.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

BLOCK, BATCH, STEPS, SCALE = 64, 16, 300, 8
LR, WARMUP, WEIGHT_DECAY = 1e-3, 0.05, 0.1
EVAL_BLOCKS = 512
MASK_FRACTION = 0.15


class Chars:
    """Character-level text as fixed blocks of ``BLOCK`` ids (id 0 is BERT's [MASK])."""

    def __init__(self, folder: Path) -> None:
        train = (folder / "train.txt").read_text(encoding="utf-8")
        valid = (folder / "valid.txt").read_text(encoding="utf-8")
        alphabet = sorted(set(train) | set(valid))
        self.ids = {c: i + 1 for i, c in enumerate(alphabet)}
        self.vocab = len(alphabet) + 1
        self.train = self._blocks(train)
        self.valid = self._blocks(valid)[:EVAL_BLOCKS]

    def _blocks(self, text: str) -> torch.Tensor:
        ids = torch.tensor([self.ids[c] for c in text], dtype=torch.long)
        return ids[: len(ids) // BLOCK * BLOCK].view(-1, BLOCK)


class CausalBlocks(torch.utils.data.Dataset):
    def __init__(self, blocks: torch.Tensor) -> None:
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


class MaskedBlocks(CausalBlocks):
    """MASK_FRACTION of each block's positions replaced by [MASK] (id 0) and predicted. Training
    blocks draw their positions per visit from torch's stream (the Trainer seeds it); evaluation
    blocks once, from ``seed``."""

    def __init__(self, blocks: torch.Tensor, seed: int | None = None) -> None:
        super().__init__(blocks)
        self.fixed = None if seed is None else torch.rand(
            blocks.shape, generator=torch.Generator().manual_seed(seed)) < MASK_FRACTION

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        block = self.blocks[i]
        masked = self.fixed[i] if self.fixed is not None else \
            torch.rand(block.shape) < MASK_FRACTION
        return {"input_ids": block.masked_fill(masked, 0),
                "labels": block.masked_fill(~masked, -100)}


def model_for(kind: str, vocab: int, seed: int, width: int = 128, layers: int = 4,
              heads: int = 4, block: int = BLOCK) -> torch.nn.Module:
    """A GPT-2 (``kind`` "gpt2") or BERT from its config, seeded: ``layers`` blocks of ``width``
    (BERT's feed-forward 4 × ``width``), ``heads`` heads, ``block`` positions."""
    import transformers

    torch.manual_seed(seed)
    if kind == "gpt2":
        config = transformers.GPT2Config(vocab_size=vocab, n_positions=block, n_embd=width,
                                         n_layer=layers, n_head=heads)
        return transformers.GPT2LMHeadModel(config)
    config = transformers.BertConfig(vocab_size=vocab, hidden_size=width,
                                     num_hidden_layers=layers, num_attention_heads=heads,
                                     intermediate_size=4 * width, max_position_embeddings=block)
    return transformers.BertForMaskedLM(config)


def baseline_args(out: str, seed: int):
    import transformers

    return transformers.TrainingArguments(
        output_dir=out, per_device_train_batch_size=BATCH, max_steps=STEPS, learning_rate=LR,
        lr_scheduler_type="cosine", warmup_steps=WARMUP, weight_decay=WEIGHT_DECAY,
        optim="adamw_torch", seed=seed, data_seed=seed, use_cpu=True, report_to="none",
        save_strategy="no", disable_tqdm=True, logging_strategy="no",
        per_device_eval_batch_size=128, dataloader_drop_last=True)


def train_cell(kind: str, cell: str, seed: int, text: Chars) -> dict:
    """One run: the baseline, or one of the 8× cells; its held-out loss and what it trained."""
    import transformers

    from date_engine import baseline_from_hf, plan_for
    from date_engine.integrations.hf import DateTrainer, training_arguments

    dataset = (CausalBlocks if kind == "gpt2" else MaskedBlocks)(text.train)
    held_out = CausalBlocks(text.valid) if kind == "gpt2" else MaskedBlocks(text.valid, 1234)
    model = model_for(kind, text.vocab, seed)
    with tempfile.TemporaryDirectory() as out:
        args = baseline_args(out, seed)
        run = plan_for(baseline_from_hf(args, len(dataset)), batch=BATCH * SCALE)
        trainer_kind, options = transformers.Trainer, {}
        if cell == "baseline":
            pass
        elif cell in ("date", "base"):
            args = training_arguments(run, base=args)
            trainer_kind, options = DateTrainer, {"run": run, "date": cell == "date"}
        else:  # the baseline's own arguments at 8×, the LR scaled by hand
            power = 0.5 if cell == "sqrt-by-hand" else 1.0
            args = dataclasses.replace(args, per_device_train_batch_size=BATCH * SCALE,
                                       max_steps=math.ceil(STEPS / SCALE),
                                       learning_rate=LR * SCALE ** power)
        trainer = trainer_kind(model=model, args=args, train_dataset=dataset, **options)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        loss = trainer.evaluate(held_out)["eval_loss"]
    return {"model": kind, "cell": cell, "seed": seed, "eval_loss": round(loss, 4),
            "batch": args.per_device_train_batch_size, "steps": args.max_steps,
            "peak_lr": args.learning_rate if cell != "date" and cell != "base"
            else run.plan.peak_lr, "train_s": round(seconds, 1)}


CELLS = ("baseline", "date", "base", "sqrt-by-hand", "linear-by-hand")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/shakespeare-text"))
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--models", default="gpt2,bert")
    parser.add_argument("--cells", default=",".join(CELLS))
    parser.add_argument("-o", "--output", type=Path, required=True)
    a = parser.parse_args(argv)
    torch.set_num_threads(1)
    text = Chars(a.data)
    done = set()
    if a.output.exists():
        for line in a.output.read_text().splitlines()[1:]:
            row = json.loads(line)
            done.add((row["model"], row["cell"], row["seed"]))
    else:
        a.output.parent.mkdir(parents=True, exist_ok=True)
        import transformers

        from date_engine.machine import describe

        header = {"study": "hf-adapter", "command": "python -m benchmarks.hf_adapter "
                  + " ".join(argv if argv is not None else sys.argv[1:]),
                  "machine": f"{describe()}, transformers {transformers.__version__}, "
                             "1 thread a run",
                  "baseline": {"batch": BATCH, "steps": STEPS, "lr": LR, "warmup": WARMUP,
                               "weight_decay": WEIGHT_DECAY, "schedule": "cosine",
                               "block": BLOCK, "scale": SCALE}}
        a.output.write_text(json.dumps(header) + "\n")
    for seed in (int(s) for s in a.seeds.split(",")):
        for kind in a.models.split(","):
            for cell in a.cells.split(","):
                if (kind, cell, seed) in done:
                    continue
                row = train_cell(kind, cell, seed, text)
                print(json.dumps(row), flush=True)
                with a.output.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
