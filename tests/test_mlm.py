"""bert-mlm's data: the WordPiece vocabulary and its cache, packed blocks, BERT's masking; and a
tiny model trained through `date scale` beats predicting the most frequent token."""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter

import pytest
import torch

from date_engine.data.mlm import (
    CLS,
    IGNORE,
    MASK,
    SEP,
    SPECIALS,
    MaskedBlocks,
    find_corpus,
    mask_tokens,
    wordpiece,
)
from date_engine.data.wordpiece import train_vocabulary
from date_engine.errors import DataMissing
from tests.bounds import close_within

ANIMALS = ["cat", "dog", "bird", "horse", "fox"]
PLACES = ["mat", "roof", "tree", "field", "hill"]


def corpus(root, lines=3000, seed=0):
    """{train,valid,test}.txt of a tiny language with structure a masked LM can learn: "the <animal>
    sat on the <place> near the <animal> ." with each animal tied to its place."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)

    def sentence():
        i = rng.randrange(len(ANIMALS))
        return f"the {ANIMALS[i]} sat on the {PLACES[i]} near the {rng.choice(ANIMALS)} ."

    for split, n in (("train", lines), ("valid", lines // 10), ("test", lines // 10)):
        (root / f"{split}.txt").write_text("\n".join(sentence() for _ in range(n)) + "\n")
    return root


def test_the_vocabulary_is_trained_once_per_corpus_and_cached_beside_it(tmp_path):
    files = find_corpus(corpus(tmp_path / "text"))
    tok = wordpiece(files["train"], 64)
    cached = list((tmp_path / "text" / ".date-cache").glob("wordpiece2-*-64.json"))
    assert len(cached) == 1 and tok.get_vocab_size() <= 64
    assert [tok.token_to_id(s) for s in SPECIALS] == list(range(len(SPECIALS)))
    stamp = cached[0].stat().st_mtime_ns
    again = wordpiece(files["train"], 64)  # read from the cache, not trained again
    assert cached[0].stat().st_mtime_ns == stamp and again.get_vocab() == tok.get_vocab()
    files["train"].write_text(files["train"].read_text() + "the fox sat on the moon .\n")
    wordpiece(files["train"], 64)  # another corpus: another vocabulary beside the first
    assert len(list((tmp_path / "text" / ".date-cache").glob("wordpiece2-*-64.json"))) == 2


def test_the_vocabulary_has_the_same_ids_every_time_it_is_trained(tmp_path):
    """tokenizers' own WordPieceTrainer gave this corpus a different vocabulary on each of ten
    trainings (ids, and on ties even tokens): a run's embedding rows depended on the process that
    trained it. A file of the old trainer in the cache is not read."""
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 8)))
             for _ in range(300)]
    text = "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(2000))
    (tmp_path / "train.txt").write_text(text)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / f"wordpiece-{digest}-200.json").write_text("not a tokenizer")
    files = [tmp_path / folder / f"wordpiece2-{digest}-200.json" for folder in "abc"]
    vocabularies = [wordpiece(tmp_path / "train.txt", 200, cache=f.parent).get_vocab()
                    for f in files]
    assert vocabularies[0] == vocabularies[1] == vocabularies[2] and len(vocabularies[0]) == 200
    assert files[0].read_bytes() == files[1].read_bytes() == files[2].read_bytes()


def test_merges_follow_frequency_and_ties_go_to_the_pair_that_sorts_first():
    words = Counter({"ab": 2, "cd": 2, "cde": 1, "ef": 2, "x": 9})
    vocab = train_vocabulary(words, 13, ["[UNK]"])
    # specials; the sorted alphabet (## sorts before letters); cd (3 uses); the tie between ab
    # and ef (2 each) goes to ab, which sorts first; then cde ("cd" + "##e")
    assert list(vocab) == ["[UNK]", "##b", "##d", "##e", "##f", "a", "c", "e", "x",
                           "cd", "ab", "ef", "cde"]
    assert list(vocab.values()) == list(range(13))
    assert train_vocabulary(words, 11, ["[UNK]"]) == {t: i for t, i in vocab.items() if i < 11}
    assert len(train_vocabulary(words, 100)) == 12  # merges run out: every word is one token


def test_corpus_layouts_and_what_is_missing(tmp_path):
    for names in (("train.txt", "valid.txt", "test.txt"),
                  ("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens")):
        root = tmp_path / names[0]
        root.mkdir()
        for name in names:
            (root / name).write_text("a b c\n")
        assert find_corpus(root)["train"].name == names[0]
    with pytest.raises(DataMissing, match="no text corpus in .*train,valid,test.*shakespeare-text"):
        find_corpus(tmp_path / "nothing")


def test_blocks_are_framed_and_cover_the_stream(tmp_path):
    files = find_corpus(corpus(tmp_path / "text", lines=200))
    tok = wordpiece(files["train"], 64)
    blocks = MaskedBlocks(files["train"], tok, 16)
    stream = [i for e in tok.encode_batch(files["train"].read_text().splitlines()) for i in e.ids]
    assert blocks.samples.shape == (len(stream) // 14, 16)
    assert (blocks.samples[:, 0] == CLS).all() and (blocks.samples[:, -1] == SEP).all()
    assert blocks.samples[:, 1:-1].flatten().tolist() == stream[: len(blocks) * 14]


def test_masking_chooses_15_percent_and_splits_them_80_10_10():
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(len(SPECIALS), 1000, (512, 128), generator=gen)
    tokens[:, 0], tokens[:, -1] = CLS, SEP
    inputs, labels = mask_tokens(tokens, 1000, torch.Generator().manual_seed(1))
    chosen = labels != IGNORE
    assert not chosen[:, 0].any() and not chosen[:, -1].any()  # specials are never chosen
    # bound: statistical, for every tolerance below: 512·126 = 64,512 positions drawn with
    # p = 0.15 (σ = 0.0014), of them ~9,700 split 80/10/10 (σ 0.004 and 0.003); each bound is
    # 2.5–3.6σ of another seed, and this draw is seeded (the same on any machine)
    assert chosen.float().mean().item() * 128 / 126 == pytest.approx(0.15, abs=0.005)
    assert torch.equal(labels[chosen], tokens[chosen])  # labels: the original tokens
    masked = (inputs == MASK) & chosen
    kept = (inputs == tokens) & chosen
    replaced = chosen & ~masked & ~kept
    n = chosen.sum().item()
    assert masked.sum().item() / n == pytest.approx(0.8, abs=0.01)
    assert kept.sum().item() / n == pytest.approx(0.1, abs=0.01)  # (a random draw may equal it)
    assert replaced.sum().item() / n == pytest.approx(0.1, abs=0.01)
    assert (inputs[replaced] >= len(SPECIALS)).all()
    assert torch.equal(inputs[~chosen], tokens[~chosen])  # the rest is untouched
    again = mask_tokens(tokens, 1000, torch.Generator().manual_seed(1))
    assert torch.equal(again[0], inputs) and torch.equal(again[1], labels)  # seeded: repeatable
    one = torch.tensor([[CLS, 7, 8, SEP]])  # too short for 15%: one position is still chosen
    assert (mask_tokens(one, 100, torch.Generator().manual_seed(0))[1] != IGNORE).sum() == 1


def test_padding_tokens_change_no_other_position():
    """A padded batch: what the real tokens' logits are does not depend on the padding."""
    from date_engine.models.bert import MaskedLM

    torch.manual_seed(0)
    model = MaskedLM(vocab=50, seq_len=8, dim=16, layers=1, heads=2, mlp=32).eval()
    ids = torch.tensor([[CLS, 7, 8, SEP, 0, 0], [CLS, 7, 8, SEP, 9, 9]])
    padding = torch.tensor([[False] * 4 + [True] * 2, [False] * 4 + [True] * 2])
    with torch.no_grad():
        logits = model(ids, padding=padding)
        unpadded = model(ids[:, :4])
    # the same values through other shapes of the same sums: a layer's attention (dot products
    # of 16, a softmax over ≤ 6, sums of ≤ 6), its two layer norms (16 each), its MLP (16 and 32)
    # and the head (16): under 200 roundings, each at most u of the largest logit
    within = close_within(torch.float32, 200, unpadded.abs().max().item())
    torch.testing.assert_close(logits[:, :4], unpadded, **within)
    torch.testing.assert_close(logits[0, :4], logits[1, :4], **within)
    with torch.no_grad():  # without the mask the padding is attended to, and changes them
        assert (model(ids)[0, :4] - unpadded[0]).abs().max() > 100 * within["atol"]


@pytest.mark.slow
def test_a_tiny_model_trained_by_date_scale_beats_the_most_frequent_token(tmp_path):
    """Through the real command: masked accuracy on valid.txt against the accuracy of always
    predicting the token most frequent at the masked positions, with the MLM loss logged."""
    from date_engine.recipes import DataOptions, get_recipe
    from tests.conftest import RECIPES
    from tests.runs import date

    root = corpus(tmp_path / "text", lines=1500)
    recipe = get_recipe("bert-mlm")
    options = ["--set", "model.vocab=64", "--set", "model.seq_len=16", "--set", "model.dim=32",
               "--set", "model.mlp=64", "--set", "model.layers=1"]
    model = recipe.parse_options({"vocab": 64, "seq_len": 16, "dim": 32, "mlp": 64, "layers": 1})
    data = recipe.build_data(DataOptions(data_dir=str(root)), model)
    result = date("scale", RECIPES / "bert-mlm.yaml", "--batch", 32, *options,
                  "--set", f"train.data_dir={root}",
                  "--set", f"baseline.dataset_size={len(data.train)}",
                  "--set", "baseline.epochs=12",
                  # on this toy language DATE's ratios learn the context within the test's ~410
                  # steps (50.5% against the unigram's 31.7%; without them 39.4%); the recipe ships
                  # them off because on real text they stall (docs/results-transformers.md)
                  "--set", "date.layer_ratio.mode=dynamic",
                  "-o", tmp_path / "run")
    assert result.returncode == 0, result.stdout + result.stderr
    labels = torch.stack([label for _, label in data.eval])
    masked = labels[labels != IGNORE]
    unigram = 100.0 * masked.bincount().max().item() / masked.numel()
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    final = [r["eval"] for r in records if "eval" in r][-1]
    assert final["masked_accuracy"] > unigram + 10, (final, unigram)
    assert 0 < final["mlm_loss"] < 4
