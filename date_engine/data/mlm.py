"""Masked-language-model data: a plain-text corpus, a WordPiece vocabulary trained on it, packed
sequences and BERT's masking.

The corpus is the layout people have on disk for language modelling: ``train.txt``, ``valid.txt``
and ``test.txt`` in one folder (WikiText's ``wiki.{train,valid,test}.tokens`` and PTB's
``ptb.{train,valid,test}.txt`` are read too). A WordPiece vocabulary (Wu et al. 2016, as BERT
uses it) is trained on ``train`` — offline, seconds, the same ids on every machine
(:mod:`date_engine.data.wordpiece`) — and cached beside the data under a name that holds the
training text's SHA-256 and the vocabulary size, so a changed corpus trains a new one; the
``tokenizers`` library normalises, splits and encodes. Each split's lines are tokenized, joined
into one stream and cut into blocks of ``seq_len − 2`` tokens, each framed as
``[CLS] … [SEP]``: a sample is one block.

Masking (Devlin et al. 2019, §3.1): 15% of a sample's non-special tokens are chosen; of those 80%
become ``[MASK]``, 10% a random token, 10% stay; the labels hold the original ids there and
:data:`IGNORE` elsewhere. Training batches draw new masks every time (dynamic masking, as RoBERTa);
the evaluation set is masked once, from its own seed, so every evaluation scores the same positions.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from pathlib import Path

import torch
from torch import Tensor
from torch.utils.data import Dataset

from date_engine.errors import DataError, DataMissing

__all__ = ["IGNORE", "SPECIALS", "MaskedBlocks", "find_corpus", "mask_tokens", "wordpiece"]

IGNORE = -100
"""The label of a position the loss leaves out (torch's cross-entropy ``ignore_index``)."""
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""Special tokens, ids 0–4 in this order."""
PAD, UNK, CLS, SEP, MASK = range(len(SPECIALS))
VOCAB_FORMAT = 2
"""In the cache's file names: 2 is :mod:`date_engine.data.wordpiece`'s vocabulary (the same ids
everywhere); files without a number were the ``tokenizers`` trainer's, whose ids differ from one
training to the next, and are not read."""
LAYOUTS = (("{split}.txt",), ("wiki.{split}.tokens",), ("ptb.{split}.txt",))


def find_corpus(root: str | Path) -> dict[str, Path]:
    """``train``, ``valid`` and ``test`` text files under ``root``, in the first layout that has all
    three; :class:`DataMissing` names what was looked for where."""
    root = Path(root)
    for (pattern,) in LAYOUTS:
        found = {s: root / pattern.format(split=s) for s in ("train", "valid", "test")}
        if all(p.is_file() for p in found.values()):
            return found
    names = ", ".join(pattern.format(split="{train,valid,test}") for (pattern,) in LAYOUTS)
    raise DataMissing(
        f"no text corpus in {root}: looked for {names}. Set train.data_dir, or lay out an English "
        "corpus with `date data prepare shakespeare-text <folder> --source <archive>` "
        "(docs/data.md)."
    )


def _lines(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}); expected plain text, one "
                        "passage per line.") from None
    return [line for line in text.splitlines() if line.strip()]


def wordpiece(train: Path, vocab_size: int, cache: Path | None = None):
    """A WordPiece tokenizer (lower-cased, BERT's normaliser and pre-tokeniser) whose vocabulary is
    trained on ``train`` by :func:`date_engine.data.wordpiece.train_vocabulary` — the same ids on
    every machine — and cached as ``wordpiece2-<sha256 of the file, 12 hex>-<vocab_size>.json`` in
    ``cache`` (default: a ``.date-cache`` folder beside the file, else ``~/.cache/date_engine``
    when that cannot be written)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    from date_engine.data.wordpiece import CONTINUE, train_vocabulary

    digest = hashlib.sha256(train.read_bytes()).hexdigest()[:12]
    name = f"wordpiece{VOCAB_FORMAT}-{digest}-{vocab_size}.json"
    folders = [cache] if cache is not None else \
        [train.parent / ".date-cache", Path.home() / ".cache" / "date_engine"]
    for folder in folders:
        if (folder / name).is_file():
            return Tokenizer.from_file(str(folder / name))
    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    words: Counter[str] = Counter()
    for line in _lines(train):
        words.update(word for word, _ in pre_tokenizer.pre_tokenize_str(
            normalizer.normalize_str(line)))
    vocab = train_vocabulary(words, vocab_size, SPECIALS)
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token=SPECIALS[UNK],
                                           continuing_subword_prefix=CONTINUE))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            partial = folder / f".{name}.{os.getpid()}"
            tokenizer.save(str(partial))
            partial.replace(folder / name)  # atomic; processes training it at once write the same
            break
        except OSError:
            continue
    return tokenizer


class MaskedBlocks(Dataset):
    """A split as ``[CLS] block [SEP]`` samples of ``seq_len`` token ids (a LongTensor each)."""

    def __init__(self, path: Path, tokenizer, seq_len: int) -> None:
        if seq_len < 8:
            raise ValueError(f"seq_len must be at least 8, got {seq_len}")
        lines = _lines(path)
        ids = [i for encoding in tokenizer.encode_batch(lines) for i in encoding.ids]
        block = seq_len - 2
        count = len(ids) // block
        if count == 0:
            raise DataError(f"{path}: {len(ids)} tokens, fewer than one sample of {seq_len}; "
                            "give a longer text or a smaller model.seq_len.")
        body = torch.tensor(ids[: count * block], dtype=torch.long).view(count, block)
        self.samples = torch.cat([torch.full((count, 1), CLS), body,
                                  torch.full((count, 1), SEP)], dim=1)
        self.path = path

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Tensor:
        return self.samples[index]


def mask_tokens(tokens: Tensor, vocab_size: int, generator: torch.Generator | None = None,
                share: float = 0.15) -> tuple[Tensor, Tensor]:
    """(inputs, labels) for a batch of token ids: ``share`` of the non-special positions chosen,
    80/10/10 → [MASK] / a random non-special token / unchanged; labels are the original ids at the
    chosen positions and :data:`IGNORE` elsewhere. At least one position per sample is chosen."""
    special = tokens < len(SPECIALS)
    draw = torch.rand(tokens.shape, generator=generator)
    chosen = (draw < share) & ~special
    # a sample with no chosen position would add nothing: take its first non-special token
    empty = ~chosen.any(dim=1) & (~special).any(dim=1)
    if empty.any():
        first = (~special[empty]).float().argmax(dim=1)
        chosen[empty.nonzero(as_tuple=True)[0], first] = True
    labels = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))
    how = torch.rand(tokens.shape, generator=generator)
    inputs = tokens.clone()
    inputs[chosen & (how < 0.8)] = MASK
    random_at = chosen & (how >= 0.8) & (how < 0.9)
    inputs[random_at] = torch.randint(len(SPECIALS), vocab_size, tokens.shape,
                                      generator=generator)[random_at]
    return inputs, labels
