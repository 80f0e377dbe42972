"""gpt-char: nanoGPT's character-level Shakespeare model (Karpathy), a decoder-only transformer.

``train.data_dir`` holds ``input.txt`` (``date data prepare shakespeare-chars``); its first 90%
trains and the rest validates, by position, as nanoGPT's ``shakespeare_char/prepare.py`` splits
it, with the training part's characters as the vocabulary. A sample is a window of ``block``
characters and the same window shifted by one as targets; the windows do not overlap (nanoGPT
draws them at random offsets). The metric is the validation loss in nats per character, as
nanoGPT reports it (lower is better), over ``eval_windows`` windows spread evenly over the
validation part (nanoGPT estimates it from 20 random batches).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from date_engine.recipes import DataOptions, Recipe, RecipeData, register_recipe
from date_engine.recipes.simple import generated_tokens, stacked, token_loss, token_nll


class GPTOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    layers: int = Field(default=4, gt=0)
    heads: int = Field(default=4, gt=0)
    dim: int = Field(default=128, gt=0)
    block: int = Field(default=64, gt=1)
    """Characters of context (and per sample)."""
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    bias: bool = False
    """Biases in the linear layers and LayerNorms (nanoGPT's ``bias``)."""
    eval_windows: int = Field(default=2048, gt=0)
    """Validation windows the metric reads, spread evenly over the validation part."""
    vocab: int = Field(default=96, gt=1)
    """Rows of the embedding: at least the corpus's characters and <unk> (date data prepare
    shakespeare-chars prints the count)."""


def _data(options: DataOptions, model: GPTOptions) -> RecipeData:
    import torch

    from date_engine.data.text import LMSequences, load_chars
    from date_engine.errors import DataError

    if options.synthetic:
        return generated_tokens(model.vocab, model.block, options.seed,
                                "a generated character stream")
    vocab, ids = load_chars(options.data_dir or "data/shakespeare-chars")
    if len(vocab) > model.vocab:
        raise DataError(f"{options.data_dir}/input.txt: its training part has {len(vocab) - 1} "
                        f"characters, more than model.vocab {model.vocab} holds with <unk>; set "
                        f"model.vocab: {len(vocab)}.")
    valid = LMSequences(ids["valid"], model.block)
    chosen = torch.linspace(0, len(valid) - 1, min(model.eval_windows, len(valid))).long()
    return RecipeData(LMSequences(ids["train"], model.block),
                      torch.utils.data.Subset(valid, chosen.tolist()), stacked)


def _model(options: GPTOptions):
    from date_engine.models.gpt import GPT

    return GPT(options.vocab, options.block, options.dim, options.layers, options.heads,
               options.dropout, options.bias)


def _loss_per_char(stats: dict[str, float]) -> float:
    return stats["nll"] / max(stats["tokens"], 1)


def _shard_units(model) -> list:
    """Under fsdp each decoder block is a unit; the embeddings stay with the root, whose output
    layer reads the token embedding's weight (tied) outside the embedding module."""
    return list(model.decoder.blocks)


@register_recipe("gpt-char")
def gpt_char() -> Recipe:
    return Recipe(
        name="gpt-char", model_name="GPT (nanoGPT's), character-level",
        dataset_name="a character corpus (input.txt)", metric_name="val_loss",
        higher_is_better=False, default_micro_batch=64, dataset_size=None, build_model=_model,
        build_data=_data, loss=token_loss, evaluate=token_nll, metric=_loss_per_char,
        options=GPTOptions, shard_units=_shard_units,
        description="nanoGPT's character-level GPT; validation loss in nats per character.")
