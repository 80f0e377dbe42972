"""A WordPiece vocabulary trained the same way on every machine.

The ``tokenizers`` library's ``WordPieceTrainer`` numbers the ``##`` continuation pieces in the
order it walks a hash map, which changes from one process to the next, and breaks ties between
equally frequent merges by those numbers (huggingface/tokenizers#1794). Two trainings on one file
give the same tokens different ids — on the Shakespeare corpus about 300 of 8,000 — and on a small
corpus even different tokens. A token's id decides which row of the embedding it starts from, so
the same spec and seed trained a different model on each machine that built its own vocabulary.

This trainer is the same algorithm with every choice fixed: words are counted after BERT's
normaliser and pre-tokeniser (the library's, which are deterministic); a word starts as its first
character followed by ``##``-prefixed continuation characters; the most frequent adjacent pair is
merged until the vocabulary is full, ties going to the pair whose two strings sort first; ids are
the special tokens, then the alphabet in sorted order, then the merges in the order they were made.
Encoding stays the library's: greedy longest-match-first over this vocabulary, as BERT's.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable

__all__ = ["CONTINUE", "train_vocabulary"]

CONTINUE = "##"
"""The prefix of a piece that continues a word."""


def train_vocabulary(words: Counter[str], vocab_size: int,
                     specials: Iterable[str] = ()) -> dict[str, int]:
    """Token → id for a WordPiece vocabulary of at most ``vocab_size`` entries (at least the
    specials and the alphabet) learnt from ``words``' counts by frequency-ordered merges."""
    vocab: dict[str, int] = {}
    for token in [*specials, *_alphabet(words)]:
        vocab.setdefault(token, len(vocab))
    spelled = sorted(words)  # word order fixed, so a tie never depends on the Counter's order
    pieces = [_pieces(word) for word in spelled]
    counts = [words[word] for word in spelled]
    pairs: Counter[tuple[str, str]] = Counter()
    holders: dict[tuple[str, str], set[int]] = defaultdict(set)
    for index, word in enumerate(pieces):
        for pair in zip(word, word[1:]):
            pairs[pair] += counts[index]
            holders[pair].add(index)
    heap = [(-count, pair) for pair, count in pairs.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        negative, pair = heapq.heappop(heap)
        if pairs.get(pair, 0) != -negative or -negative <= 0:
            continue  # a stale entry: the pair's count changed since it was pushed
        merged = pair[0] + pair[1][len(CONTINUE):]
        vocab.setdefault(merged, len(vocab))
        changed: set[tuple[str, str]] = set()
        for index in sorted(holders.pop(pair)):
            old = pieces[index]
            new = _merge(old, pair, merged)
            for seen in zip(old, old[1:]):
                pairs[seen] -= counts[index]
                changed.add(seen)
            for made in zip(new, new[1:]):
                pairs[made] += counts[index]
                holders[made].add(index)
                changed.add(made)
            pieces[index] = new
        for other in changed:
            if pairs[other] > 0:
                heapq.heappush(heap, (-pairs[other], other))
    return vocab


def _alphabet(words: Counter[str]) -> list[str]:
    """Every first character and every ``##`` continuation character, sorted."""
    first = {word[0] for word in words if word}
    rest = {CONTINUE + char for word in words for char in word[1:]}
    return sorted(first | rest)


def _pieces(word: str) -> list[str]:
    return [word[0], *(CONTINUE + char for char in word[1:])] if word else []


def _merge(pieces: list[str], pair: tuple[str, str], merged: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(pieces):
        if i + 1 < len(pieces) and pieces[i] == pair[0] and pieces[i + 1] == pair[1]:
            out.append(merged)
            i += 2
        else:
            out.append(pieces[i])
            i += 1
    return out
