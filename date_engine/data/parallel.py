"""Parallel text for translation: ``{split}.{src}`` and ``{split}.{tgt}``, one sentence per line,
line i of one file translating line i of the other (e.g. ``train.en`` / ``train.de``).

Sentences are split into words and punctuation (Unicode-aware). Source and target share one
vocabulary (GNMT's shared embeddings), built once from the training files and cached beside them
(or under ``~/.cache/date_engine`` when that folder is read-only), keyed by the files' sizes and
times and the vocabulary size, so it is rebuilt when the data changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.utils.data import Dataset

from date_engine.data.text import Vocabulary
from date_engine.errors import DataError, DataMissing

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "UNK",
    "ParallelText",
    "collate_pairs",
    "find_parallel",
    "load_parallel",
    "tokenize",
]

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIALS = (PAD, UNK, BOS, EOS)
_TOKEN = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]", re.UNICODE)
TOKENIZER_VERSION = 1


def tokenize(line: str) -> list[str]:
    return _TOKEN.findall(line)


def find_parallel(
    root: str | Path, src: str, tgt: str, splits: Sequence[str] = ("train", "valid", "test")
) -> dict[str, tuple[Path, Path]]:
    """The ``{split}.{src}``/``{split}.{tgt}`` file pairs under ``root``; train and valid are
    required, test is optional. :class:`DataMissing` lists what was looked for."""
    root = Path(root)
    found, missing = {}, []
    for split in splits:
        pair = (root / f"{split}.{src}", root / f"{split}.{tgt}")
        absent = [p.name for p in pair if not p.is_file()]
        if not absent:
            found[split] = pair
        elif split != "test":
            missing += absent
    if missing:
        raise DataMissing(
            f"parallel text not found in {root}: missing {', '.join(missing)} (one sentence per "
            f"line, line i of {{split}}.{src} translating line i of {{split}}.{tgt}). Set "
            "train.data_dir, or lay out the installed English-German pairs with "
            "`date data prepare en-de <folder>`."
        )
    return found


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}: not UTF-8 text (byte {exc.start}); expected one sentence per line."
        ) from None


def _read_pair(pair: tuple[Path, Path]) -> tuple[list[str], list[str]]:
    src, tgt = (_read_lines(p) for p in pair)
    if len(src) != len(tgt):
        raise DataError(
            f"{pair[0]} has {len(src)} lines but {pair[1]} has {len(tgt)}; line i of "
            "one must translate line i of the other."
        )
    if not src:
        raise DataError(f"{pair[0]}: holds no sentences.")
    return src, tgt


def shared_vocabulary(pair: tuple[Path, Path], max_size: int) -> Vocabulary:
    """The joint source+target vocabulary of the training pair (cached while it is current)."""
    stamp = [(p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in pair]
    key = hashlib.sha256(json.dumps([stamp, max_size, TOKENIZER_VERSION]).encode()).hexdigest()[:12]
    name = f".vocab-{key}.json"
    folders = (
        pair[0].parent,
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "date_engine",
    )
    for folder in folders:
        cached = folder / name
        if cached.is_file():
            return Vocabulary(json.loads(cached.read_text()))
    counts: Counter = Counter()
    for path in pair:
        for line in _read_lines(path):
            counts.update(tokenize(line))
    vocab = Vocabulary.build(counts, max_size, SPECIALS)
    for folder in folders:  # the first one that can be written
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f"{name}.tmp-{os.getpid()}"
            tmp.write_text(json.dumps(vocab.words))
            os.replace(tmp, folder / name)
            break
        except OSError:
            continue
    return vocab


class ParallelText(Dataset):
    """Sentence pairs as token ids: source, and target framed as <s> … </s>."""

    def __init__(self, src: list[list[int]], tgt: list[list[int]], references: list[str]) -> None:
        self.src, self.tgt, self.references = src, tgt, references

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, index: int):
        return self.src[index], self.tgt[index], index


def load_parallel(
    root: str | Path, src: str, tgt: str, max_vocab: int = 32_000, max_length: int | None = 50
) -> tuple[Vocabulary, dict[str, ParallelText]]:
    """The shared vocabulary and each split; training pairs longer than ``max_length`` tokens on
    either side are left out (evaluation keeps every sentence)."""
    files = find_parallel(root, src, tgt)
    vocab = shared_vocabulary(files["train"], max_vocab)
    bos, eos = vocab.index[BOS], vocab.index[EOS]
    splits = {}
    for split, pair in files.items():
        src_lines, tgt_lines = _read_pair(pair)
        s_ids, t_ids, refs = [], [], []
        for s_line, t_line in zip(src_lines, tgt_lines):
            s_tok, t_tok = tokenize(s_line), tokenize(t_line)
            if not s_tok or not t_tok:
                continue
            if split == "train" and max_length and max(len(s_tok), len(t_tok)) > max_length:
                continue
            s_ids.append(vocab.encode(s_tok) + [eos])
            t_ids.append([bos] + vocab.encode(t_tok) + [eos])
            refs.append(" ".join(t_tok))
        if not s_ids:
            raise DataError(
                f"{pair[0]}: no sentence pair left after tokenizing (and the length "
                f"limit of {max_length} tokens for training)."
            )
        splits[split] = ParallelText(s_ids, t_ids, refs)
    return vocab, splits


def collate_pairs(batch):
    """Pad a list of (source ids, target ids, index) into tensors: source [B, S] with lengths,
    decoder input [B, T] (<s> y) and decoder target [B, T] (y </s>), and the sentence indices."""
    src, tgt, index = zip(*batch)
    src_len = torch.tensor([len(s) for s in src])
    s = torch.zeros(len(src), int(src_len.max()), dtype=torch.long)
    t = torch.zeros(len(tgt), max(len(x) for x in tgt) - 1, dtype=torch.long)
    y = torch.zeros_like(t)
    for i, (a, b) in enumerate(zip(src, tgt)):
        s[i, : len(a)] = torch.tensor(a)
        t[i, : len(b) - 1] = torch.tensor(b[:-1])
        y[i, : len(b) - 1] = torch.tensor(b[1:])
    return s, src_len, t, y, torch.tensor(index)
