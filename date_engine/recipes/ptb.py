"""ptb-small and ptb-large: Zaremba et al.'s word-level LSTM language models on Penn Treebank.

``train.data_dir`` holds ``ptb.{train,valid,test}.txt``. A sample is ``num_steps`` tokens; each
sample starts from a zero recurrent state (samples are shuffled across processes, so the state
cannot carry from one to the next as in the original, sequential training). The metric is perplexity
on the validation split, exp(mean negative log-likelihood per token).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from date_engine.recipes import DataOptions, Recipe, RecipeData, register_recipe
from date_engine.recipes.simple import (
    generated_tokens,
    perplexity,
    stacked,
    token_loss,
    token_nll,
)


class SmallOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hidden: int = Field(default=200, gt=0)
    layers: int = Field(default=2, gt=0)
    num_steps: int = Field(default=20, gt=0)
    """Tokens per sample (the unrolled length)."""
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    vocab: int = Field(default=10_000, gt=2)
    init_scale: float = Field(default=0.1, gt=0.0)


class LargeOptions(SmallOptions):
    hidden: int = Field(default=1500, gt=0)
    num_steps: int = Field(default=35, gt=0)
    dropout: float = Field(default=0.65, ge=0.0, lt=1.0)
    init_scale: float = Field(default=0.04, gt=0.0)


def _data(options: DataOptions, model: SmallOptions) -> RecipeData:
    from date_engine.data.text import LMSequences, load_ptb

    if options.synthetic:
        return generated_tokens(model.vocab, model.num_steps, options.seed,
                                "a generated token stream of the vocabulary's size")
    vocab, ids = load_ptb(options.data_dir or "data/ptb", max_vocab=model.vocab)
    return RecipeData(
        LMSequences(ids["train"], model.num_steps),
        LMSequences(ids["valid"], model.num_steps),
        stacked,
        context={"vocab": vocab},
    )

def _model(options: SmallOptions):
    from date_engine.models.lstm import WordLM

    return WordLM(
        options.vocab, options.hidden, options.layers, options.dropout, options.init_scale
    )


def _recipe(name: str, options, micro: int, model_name: str) -> Recipe:
    return Recipe(
        name=name, model_name=model_name, dataset_name="Penn Treebank (ptb.*.txt)",
        metric_name="perplexity", higher_is_better=False, default_micro_batch=micro,
        dataset_size=None, build_model=_model, build_data=_data, loss=token_loss,
        evaluate=token_nll, metric=perplexity, options=options,
        description=f"{model_name}; validation perplexity.")


@register_recipe("ptb-small")
def ptb_small() -> Recipe:
    return _recipe("ptb-small", SmallOptions, 64, "2-layer LSTM LM, 200 units, 20 steps")


@register_recipe("ptb-large")
def ptb_large() -> Recipe:
    return _recipe("ptb-large", LargeOptions, 32, "2-layer LSTM LM, 1500 units, 35 steps")
