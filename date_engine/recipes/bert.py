"""bert-mlm: a BERT-style encoder trained by masked-language modelling on a plain-text corpus.

``train.data_dir`` holds ``train.txt``, ``valid.txt`` and ``test.txt`` (or WikiText's or PTB's file
names); a WordPiece vocabulary is trained on ``train.txt`` and cached beside it
(:mod:`date_engine.data.mlm`). A sample is ``seq_len`` tokens, ``[CLS] … [SEP]``. The metric is
the accuracy of the predictions at the masked positions of ``valid.txt`` (masked once, the same for
every evaluation and every run); the loss there is logged beside it as ``mlm_loss``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from date_engine.recipes import (
    DataOptions,
    Recipe,
    RecipeData,
    check_heads,
    register_recipe,
)


class BertOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    layers: int = Field(default=2, gt=0)
    dim: int = Field(default=128, gt=0)
    """Width of the tokens."""
    heads: int = Field(default=4, gt=0)
    """Attention heads; they must divide ``dim``. 4: with 2 the masked accuracy sat on a plateau
    near 14% for 3.5 to more than 16 epochs, depending on the starting point (docs/results.md)."""
    mlp: int = Field(default=512, gt=0)
    seq_len: int = Field(default=64, ge=8, le=4096)
    """Tokens per sample, [CLS] and [SEP] included."""
    vocab: int = Field(default=8000, ge=64)
    """WordPiece vocabulary size, special tokens included."""
    mask_share: float = Field(default=0.15, gt=0.0, lt=1.0)
    """Share of the tokens chosen for prediction (80% of them masked, 10% replaced, 10% kept)."""

    @model_validator(mode="after")
    def _fits(self) -> BertOptions:
        check_heads(self.dim, self.heads)
        return self


def _data(options: DataOptions, model: BertOptions) -> RecipeData:
    import torch

    from date_engine.data.mlm import MaskedBlocks, find_corpus, mask_tokens, wordpiece

    if options.synthetic:
        gen = torch.Generator().manual_seed(options.seed)
        make = lambda n: torch.randint(5, model.vocab, (n, model.seq_len), generator=gen)  # noqa: E731
        train, held = make(256), make(32)
        vocab = model.vocab
        note = "generated token blocks of the vocabulary's size"
    else:
        files = find_corpus(options.data_dir or "data/text")
        tokenizer = wordpiece(files["train"], model.vocab)
        vocab = tokenizer.get_vocab_size()
        train = MaskedBlocks(files["train"], tokenizer, model.seq_len).samples
        held = MaskedBlocks(files["valid"], tokenizer, model.seq_len).samples
        note = ""
    # the evaluation set is masked once, from its own seed: every evaluation scores the same tokens
    inputs, labels = mask_tokens(held, vocab, torch.Generator().manual_seed(1234), model.mask_share)
    context = {"vocab": vocab, "mask_share": model.mask_share}
    return RecipeData(list(train), list(zip(inputs, labels)), _collate(context), note=note,
                      context=context)


class _collate:
    """Training samples (token ids) are masked as they are batched (dynamic masking, drawn from the
    process's random stream, which checkpoints restore); evaluation samples come masked."""

    def __init__(self, context: dict) -> None:
        self.vocab, self.share = context["vocab"], context["mask_share"]

    def __call__(self, items):
        import torch

        from date_engine.data.mlm import mask_tokens

        if isinstance(items[0], tuple):
            return torch.stack([i for i, _ in items]), torch.stack([label for _, label in items])
        return mask_tokens(torch.stack(items), self.vocab, None, self.share)


def _model(options: BertOptions):
    from date_engine.models.bert import MaskedLM

    return MaskedLM(options.vocab, options.seq_len, options.dim, options.layers, options.heads,
                    options.mlp)


def _masked(model, batch):
    """(logits, targets) at the positions the batch's labels keep."""
    from date_engine.data.mlm import IGNORE

    inputs, labels = batch
    chosen = labels != IGNORE
    return model(inputs, chosen), labels[chosen]


def _loss(model, batch, data=None):
    import torch.nn.functional as F

    return F.cross_entropy(*_masked(model, batch))


def _evaluate(model, batch, data=None):
    import torch.nn.functional as F

    logits, targets = _masked(model, batch)
    logits = logits.float()
    return {"correct": (logits.argmax(-1) == targets).sum(), "count": targets.numel(),
            "nll": F.cross_entropy(logits, targets, reduction="sum")}


def _accuracy(stats: dict[str, float]) -> float:
    return 100.0 * stats["correct"] / max(stats["count"], 1)


def _details(stats: dict[str, float]) -> dict[str, float]:
    return {"mlm_loss": stats["nll"] / max(stats["count"], 1)}


@register_recipe("bert-mlm")
def bert_mlm() -> Recipe:
    return Recipe(
        name="bert-mlm", model_name="BERT-style pre-LN encoder, masked LM",
        dataset_name="plain text ({train,valid,test}.txt)", metric_name="masked_accuracy",
        higher_is_better=True, default_micro_batch=64, dataset_size=None, build_model=_model,
        build_data=_data, loss=_loss, evaluate=_evaluate, metric=_accuracy, details=_details,
        options=BertOptions,
        description="A small BERT trained by masked-language modelling; masked-token accuracy "
                    "on valid.txt.",
        requires=(("tokenizers", "text", "trains its WordPiece vocabulary"),),
        shard_units=_shard_units)


def _shard_units(model) -> list:
    """Under fsdp, each encoder block is a unit; the embeddings stay with the root, whose head
    reads the token embedding's weight (tied) outside the embedding module."""
    return list(model.encoder.blocks)

