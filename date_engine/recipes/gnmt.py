"""gnmt: GNMT-style English→German translation on parallel text; BLEU with sacrebleu.

``train.data_dir`` holds ``{train,valid,test}.{src}`` and ``.{tgt}`` (default ``en`` and ``de``),
one sentence per line. The metric is BLEU of greedy translations of the validation split, computed
by sacrebleu on this project's word/punctuation tokens (``tokenize='none'``, so it is a tokenized
BLEU, not comparable to detokenized WMT figures). Sizes are options: ``--set model.hidden=256``
trains on a CPU.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from date_engine.errors import DateError
from date_engine.recipes import DataOptions, Recipe, RecipeData, register_recipe


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hidden: int = Field(default=1024, gt=0, multiple_of=2)
    layers: int = Field(default=4, ge=2)
    dropout: float = Field(default=0.2, ge=0.0, lt=1.0)
    vocab: int = Field(default=32_000, gt=4)
    """Size of the shared source+target vocabulary."""
    max_length: int = Field(default=50, gt=0)
    """Training pairs with more tokens on either side are left out."""
    label_smoothing: float = Field(default=0.1, ge=0.0, lt=1.0)
    src: str = "en"
    tgt: str = "de"
    eval_sentences: int | None = Field(default=None, gt=0)
    """Translate only the first N validation sentences for BLEU (None: all)."""


def _data(options: DataOptions, model: Options) -> RecipeData:
    import torch

    from date_engine.data.parallel import BOS, EOS, ParallelText, collate_pairs, load_parallel
    from date_engine.data.text import Vocabulary

    if options.synthetic:
        gen = torch.Generator().manual_seed(options.seed)
        vocab = Vocabulary(["<pad>", "<unk>", BOS, EOS] + [f"w{i}" for i in range(model.vocab - 4)])

        def pairs(n):
            lengths = torch.randint(3, 12, (n, 2), generator=gen).tolist()
            src = [
                torch.randint(4, model.vocab, (a,), generator=gen).tolist() + [3]
                for a, _ in lengths
            ]
            tgt = [
                [2] + torch.randint(4, model.vocab, (b,), generator=gen).tolist() + [3]
                for _, b in lengths
            ]
            refs = [" ".join(vocab.words[i] for i in t[1:-1]) for t in tgt]
            return ParallelText(src, tgt, refs)

        return RecipeData(
            pairs(256),
            pairs(16),
            collate_pairs,
            note="generated sentence pairs",
            context={"vocab": vocab, "options": model},
        )
    vocab, splits = load_parallel(
        options.data_dir or "data/en-de",
        model.src,
        model.tgt,
        max_vocab=model.vocab,
        max_length=model.max_length,
    )
    valid = splits["valid"]
    if model.eval_sentences is not None:
        n = min(model.eval_sentences, len(valid))
        valid = ParallelText(valid.src[:n], valid.tgt[:n], valid.references[:n])
    return RecipeData(
        splits["train"], valid, collate_pairs, context={"vocab": vocab, "options": model}
    )


def _model(options: Options):
    from date_engine.models.gnmt import GNMT

    return GNMT(options.vocab, options.hidden, options.layers, options.dropout)


def _unwrap(model):
    return getattr(model, "module", model)


def _loss(model, batch, data):
    src, src_len, tgt_in, tgt_out, _ = batch
    smoothing = data.context["options"].label_smoothing
    logits = model(src, src_len, tgt_in)  # through DDP's forward, so gradients are all-reduced
    import torch.nn.functional as F

    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        tgt_out.reshape(-1),
        ignore_index=0,
        label_smoothing=smoothing,
    )


def _evaluate(model, batch, data):
    try:
        import sacrebleu
    except ImportError:
        raise DateError(
            "recipe gnmt scores BLEU with sacrebleu, which is not installed; in the date_engine "
            "clone run: "
            "pip install -e '.[translation]'"
        ) from None
    src, src_len, _, _, index = batch
    vocab = data.context["vocab"]
    max_len = int(src_len.max()) * 2 + 10
    hyps = _unwrap(model).translate(src, src_len, vocab.index["<s>"], vocab.index["</s>"], max_len)
    stats = {
        "sys_len": 0,
        "ref_len": 0,
        **{f"correct{n}": 0 for n in range(4)},
        **{f"total{n}": 0 for n in range(4)},
    }
    for ids, i in zip(hyps, index.tolist()):
        hyp = " ".join(vocab.words[t] for t in ids)
        score = sacrebleu.sentence_bleu(hyp, [data.eval.references[i]], tokenize="none")
        stats["sys_len"] += score.sys_len
        stats["ref_len"] += score.ref_len
        for n in range(4):
            stats[f"correct{n}"] += score.counts[n]
            stats[f"total{n}"] += score.totals[n]
    return stats


def _bleu(stats: dict[str, float]) -> float:
    from sacrebleu.metrics.bleu import BLEU

    return BLEU.compute_bleu(
        [int(stats[f"correct{n}"]) for n in range(4)],
        [int(stats[f"total{n}"]) for n in range(4)],
        int(stats["sys_len"]),
        int(stats["ref_len"]),
    ).score


@register_recipe("gnmt")
def gnmt() -> Recipe:
    return Recipe(
        name="gnmt", model_name="GNMT-style LSTM seq2seq with attention",
        dataset_name="parallel text (train/valid/test.{en,de})", metric_name="bleu",
        higher_is_better=True, default_micro_batch=128, dataset_size=None, build_model=_model,
        build_data=_data, loss=_loss, evaluate=_evaluate, metric=_bleu, options=Options,
        description="English→German; tokenized BLEU of greedy translations.",
        requires=(("sacrebleu", "translation", "scores BLEU"),))
