"""Word-level language-model data in the Penn Treebank layout: ``ptb.{train,valid,test}.txt``.

Each file holds one sentence per line, words separated by spaces (the Mikolov distribution already
maps rare words to ``<unk>``). Every line ends with an ``<eos>`` token; the vocabulary is the
training set's words, most frequent first, capped at ``max_vocab`` (10k for PTB) with the rest read
as ``<unk>``. A sample is ``num_steps`` consecutive tokens and the same window shifted by one as
targets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.utils.data import Dataset

from date_engine.errors import DataError, DataMissing

__all__ = ["PTB_SPLITS", "TRAIN_SHARE", "LMSequences", "Vocabulary", "find_ptb", "load_chars",
           "load_ptb"]

PTB_SPLITS = ("train", "valid", "test")
EOS, UNK = "<eos>", "<unk>"


class Vocabulary:
    """Words ↔ ids, most frequent first; unknown words map to ``<unk>``."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.unk = self.index[UNK]

    @classmethod
    def build(cls, counts: Counter, max_size: int | None, specials: Sequence[str]) -> Vocabulary:
        ranked = [
            w
            for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            if w not in specials
        ]
        keep = ranked if max_size is None else ranked[: max(0, max_size - len(specials))]
        return cls(list(specials) + keep)

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self.index.get(t, self.unk) for t in tokens]


def find_ptb(root: str | Path) -> dict[str, Path]:
    """``ptb.{train,valid,test}.txt`` under ``root`` (or ``root/data``, as the Mikolov tarball
    unpacks to ``simple-examples/data``). :class:`DataMissing` lists what was looked for where."""
    root = Path(root)
    folders = [root, root / "data", root / "simple-examples" / "data"]
    found, missing = {}, []
    for split in PTB_SPLITS:
        name = f"ptb.{split}.txt"
        hit = next((f / name for f in folders if (f / name).is_file()), None)
        if hit is None:
            missing.append(name)
        else:
            found[split] = hit
    if missing:
        raise DataMissing(
            f"Penn Treebank files not found under {root}: missing {', '.join(missing)} (looked in "
            f"{', '.join(str(f) for f in folders)}). Set train.data_dir, or lay out an English "
            "corpus in this format with `date data prepare shakespeare <folder> --source "
            "<archive>`."
        )
    return found


def _read_words(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}: not UTF-8 text (byte {exc.start}); expected one sentence per "
            "line, words separated by spaces."
        ) from None
    words = [w for line in text.splitlines() if line.strip() for w in line.split() + [EOS]]
    if not words:
        raise DataError(f"{path}: holds no words; expected one sentence per line.")
    return words


def load_ptb(
    root: str | Path, max_vocab: int | None = 10_000
) -> tuple[Vocabulary, dict[str, torch.Tensor]]:
    """The vocabulary of the training split and every split as a 1-D tensor of token ids."""
    files = find_ptb(root)
    words = {split: _read_words(path) for split, path in files.items()}
    vocab = Vocabulary.build(Counter(words["train"]), max_vocab, specials=(UNK, EOS))
    return vocab, {
        split: torch.tensor(vocab.encode(w), dtype=torch.long) for split, w in words.items()
    }


TRAIN_SHARE = 0.9
"""A character corpus's first 90% trains, the rest validates (nanoGPT's shakespeare_char split)."""


def load_chars(root: str | Path) -> tuple[Vocabulary, dict[str, torch.Tensor]]:
    """``input.txt`` under ``root`` (nanoGPT's character-level layout) as character ids: the
    first :data:`TRAIN_SHARE` of the text trains, the rest validates; the vocabulary is the
    training part's characters in code-point order, after ``<unk>`` (id 0), which a validation
    character the training part lacks reads as."""
    path = Path(root) / "input.txt"
    if not path.is_file():
        raise DataMissing(
            f"{path}: not found; set train.data_dir to a folder with input.txt, or write one with "
            "`date data prepare shakespeare-chars <folder> --source <archive>`.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8.") from None
    cut = int(len(text) * TRAIN_SHARE)
    vocab = Vocabulary([UNK, *sorted(set(text[:cut]))])
    ids = torch.tensor(vocab.encode(text), dtype=torch.long)
    return vocab, {"train": ids[:cut], "valid": ids[cut:]}


class LMSequences(Dataset):
    """Non-overlapping windows of ``num_steps`` tokens: sample i is (ids[i·T : i·T+T],
    ids[i·T+1 : i·T+T+1]). Each window starts from a fresh recurrent state."""

    def __init__(self, ids: torch.Tensor, num_steps: int) -> None:
        if len(ids) < num_steps + 1:
            raise DataError(
                f"a token stream of {len(ids)} tokens is shorter than one sample of "
                f"{num_steps} steps"
            )
        self.ids, self.num_steps = ids, num_steps

    def __len__(self) -> int:
        return (len(self.ids) - 1) // self.num_steps

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.num_steps
        return self.ids[start : start + self.num_steps], self.ids[
            start + 1 : start + self.num_steps + 1
        ]

    def __getitems__(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.as_tensor(indices, dtype=torch.long).unsqueeze(1) * self.num_steps
        window = starts + torch.arange(self.num_steps + 1)
        tokens = self.ids[window]
        return tokens[:, :-1], tokens[:, 1:]
