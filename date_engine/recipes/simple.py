"""Your own model in the bundled trainer, in a few lines: a model builder and the data in, a
:class:`~date_engine.recipes.Recipe` out, for the two common cases::

    from date_engine.recipes.simple import classifier

    def recipe():
        return classifier("my-mlp", model=lambda: MyMLP(), data=load_my_data)   # (train, eval)

then ``recipe: my_module:recipe`` in the spec (``date recipes new NAME`` writes both files).
``data()`` returns ``(train, eval)``: each a pair of tensors ``(inputs, targets)`` (one row per
sample), or a map-style dataset of ``(inputs, targets)`` pairs; ``eval`` may be None.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from date_engine.recipes import DataOptions, Recipe, RecipeData
from date_engine.recipes._classification import accuracy_percent, correct_count, cross_entropy_loss

__all__ = ["classifier", "generated_tokens", "language_model", "perplexity", "stacked",
           "token_loss", "token_nll"]

Data = Callable[[], tuple[Any, Any]]


def classifier(name: str, model: Callable[[], Any], data: Data, *, micro_batch: int = 64,
               dataset_size: int | None = None, model_name: str = "", dataset_name: str = ""
               ) -> Recipe:
    """A recipe whose model maps inputs to class logits: trained with cross-entropy, scored by
    accuracy in % on ``eval``. ``dataset_size``: the training samples, if known without loading
    the data (else read from it at the start of a run)."""
    return Recipe(name=name, model_name=model_name or name, dataset_name=dataset_name or name,
                  metric_name="accuracy", higher_is_better=True,
                  default_micro_batch=micro_batch, dataset_size=dataset_size,
                  build_model=_no_options(model), build_data=_loaded(data),
                  loss=cross_entropy_loss, evaluate=correct_count, metric=accuracy_percent,
                  description=f"{model_name or name}: accuracy on the evaluation set.")


def language_model(name: str, model: Callable[[], Any], data: Data, *, micro_batch: int = 32,
                   dataset_size: int | None = None, model_name: str = "",
                   dataset_name: str = "") -> Recipe:
    """A recipe whose model maps token ids ``[batch, length]`` to logits ``[batch, length,
    vocabulary]``, the targets being the next tokens ``[batch, length]``: trained with
    cross-entropy per token, scored by perplexity on ``eval`` (lower is better)."""
    return Recipe(name=name, model_name=model_name or name, dataset_name=dataset_name or name,
                  metric_name="perplexity", higher_is_better=False,
                  default_micro_batch=micro_batch, dataset_size=dataset_size,
                  build_model=_no_options(model), build_data=_loaded(data), loss=token_loss,
                  evaluate=token_nll, metric=perplexity,
                  description=f"{model_name or name}: perplexity on the evaluation set.")


def _no_options(model: Callable[[], Any]) -> Callable[[Any], Any]:
    def build(options: Any = None) -> Any:
        return model()

    return build


def _loaded(data: Data) -> Callable[[DataOptions, Any], RecipeData]:
    def build(options: DataOptions, model_options: Any = None) -> RecipeData:
        train, evaluation = data()
        collate = None
        if isinstance(train, tuple):  # tensors: batches gathered with one index each
            from date_engine.data.tensors import TensorData, collate_batch

            train, collate = TensorData(*train), collate_batch
            evaluation = TensorData(*evaluation) if evaluation is not None else None
        return RecipeData(train, evaluation, collate)

    return build


def stacked(batch: Any) -> Any:
    """The collate of token windows (``LMSequences``, or a ``Subset`` of them): their
    ``__getitems__`` already stacked the micro-batch as (inputs, targets)."""
    return batch


def generated_tokens(vocab: int, length: int, seed: int, note: str) -> RecipeData:
    """A dry run's language-model data: random token streams of ``vocab`` ids cut into windows
    of ``length`` (512 training, 64 evaluation windows)."""
    import torch

    from date_engine.data.text import LMSequences

    gen = torch.Generator().manual_seed(seed)

    def stream(windows: int) -> Any:
        return torch.randint(0, vocab, (windows * length + 1,), generator=gen)

    return RecipeData(LMSequences(stream(512), length), LMSequences(stream(64), length), stacked,
                      note=note)


def token_loss(model: Any, batch: Any, data: Any = None) -> Any:
    import torch.nn.functional as F

    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def token_nll(model: Any, batch: Any, data: Any = None) -> dict[str, Any]:
    import torch.nn.functional as F

    x, y = batch
    logits = model(x).float()
    return {"nll": F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                   reduction="sum"), "tokens": y.numel()}


def perplexity(stats: dict[str, float]) -> float:
    return math.exp(stats["nll"] / max(stats["tokens"], 1))
