"""The paper's six recipes trained for a few steps through `date scale` on small files in their real
formats: the real loaders, models, losses and metrics end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import RECIPES
from tests.runs import date, in_one_job
from tests.test_data import image_tree, mnist_fixture, parallel_fixture, ptb_fixture


def _ptb(root):
    words = "the cat sat on the mat and the dog ran to the house of a friend".split()
    lines = [" ".join(words[i % 7: i % 7 + 6]) for i in range(200)]
    ptb_fixture(
        root,
        {"train": "\n".join(lines), "valid": "\n".join(lines[:40]), "test": "\n".join(lines[:20])},
    )


def _pairs(root):
    en = [f"The dog number {i} sees the house." for i in range(60)]
    de = [f"Der Hund Nummer {i} sieht das Haus." for i in range(60)]
    parallel_fixture(
        root,
        {"train": ("\n".join(en), "\n".join(de)), "valid": ("\n".join(en[:8]), "\n".join(de[:8]))},
    )


CASES = {
    # recipe: (build fixture, extra arguments)
    "lenet-mnist": (
        mnist_fixture,
        ["--set", "baseline.dataset_size=64", "--set", "baseline.iterations=3"],
    ),
    "lstm-mnist": (
        mnist_fixture,
        ["--set", "baseline.dataset_size=64", "--set", "model.hidden=16"],
    ),
    "vit-mnist": (
        mnist_fixture,
        ["--set", "baseline.dataset_size=64", "--set", "model.dim=16", "--set", "model.mlp=32",
         "--set", "model.layers=2"],
    ),
    "ptb-small": (
        _ptb,
        [
            "--set",
            "baseline.dataset_size=69",  # the fixture's 20-token sequences
            "--set",
            "model.hidden=16",
            "--set",
            "model.vocab=20",
        ],
    ),
    "ptb-large": (
        _ptb,
        [
            "--set",
            "baseline.dataset_size=39",  # its 35-token sequences
            "--set",
            "model.hidden=16",
            "--set",
            "model.vocab=20",
        ],
    ),
    "gnmt": (
        _pairs,
        [
            "--set",
            "baseline.dataset_size=60",
            "--set",
            "model.hidden=16",
            "--set",
            "model.layers=4",
            "--set",
            "model.vocab=80",
        ],
    ),
    "resnet50-imagenet": (
        image_tree,
        [
            "--set",
            "baseline.dataset_size=6",
            "--set",
            "model.num_classes=2",
            "--set",
            "model.image_size=32",
        ],
    ),
}
METRICS = {
    "lenet-mnist": "accuracy",
    "lstm-mnist": "accuracy",
    "vit-mnist": "accuracy",
    "ptb-small": "perplexity",
    "ptb-large": "perplexity",
    "gnmt": "bleu",
    "resnet50-imagenet": "accuracy",
}


@pytest.fixture(scope="module")
def trained_on_files(tmp_path_factory) -> dict[str, tuple[dict, Path]]:
    """A few steps of every case on its files, all in one interpreter (tests.runs.in_one_job):
    name -> the run's record and its folder."""
    root = tmp_path_factory.mktemp("formats")
    runs = {}
    for name, (build, extra) in CASES.items():
        build(root / name / "data")
        batch = 4 if name == "resnet50-imagenet" else 8
        length = [] if name == "lenet-mnist" else ["--set", "baseline.epochs=0.4"]  # a few steps
        runs[name] = [RECIPES / f"{name}.yaml", "--batch", batch, "--micro-batch", batch // 2,
                      "--set", f"train.data_dir={root / name / 'data'}", *extra, *length,
                      "-o", root / name / "run", "--set", f"baseline.batch_size={batch}",
                      "--set", "baseline.warmup_epochs=0", "--set", "train.log_every=1"]
    records = in_one_job(root, runs)
    return {name: (records[name], root / name / "run") for name in CASES}


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_recipe_trains_on_files_in_its_format(trained_on_files, name):
    result, out = trained_on_files[name]
    assert result["exit_code"] == 0, result["stdout"] + result["stderr"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metric_name"] == METRICS[name] and summary["metric"] is not None
    losses = [
        json.loads(x)["loss"]
        for x in (out / "metrics.jsonl").read_text().splitlines()
        if '"loss"' in x
    ]
    assert losses and all(loss == loss for loss in losses)  # finite, logged every step


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, message",
    [
        ("lenet-mnist", "MNIST files not found under"),
        ("ptb-small", "Penn Treebank files not found under"),
        ("gnmt", "parallel text not found in"),
        ("resnet50-imagenet", "ImageFolder tree not found"),
    ],
)
def test_missing_data_is_one_message_and_exit_2(tmp_path, name, message):
    result = date(
        "scale",
        RECIPES / f"{name}.yaml",
        "--batch",
        8,
        "--micro-batch",
        4,
        "--set",
        f"train.data_dir={tmp_path / 'nothing'}",
        "-o",
        tmp_path / "run",
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert "date data prepare" in result.stderr or "train.data_dir" in result.stderr


@pytest.mark.slow
def test_malformed_file_is_one_message_and_exit_2(tmp_path):
    mnist_fixture(tmp_path / "data")
    (tmp_path / "data" / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b broken gzip")
    result = date(
        "scale",
        RECIPES / "lenet-mnist.yaml",
        "--batch",
        8,
        "--micro-batch",
        4,
        "--set",
        f"train.data_dir={tmp_path / 'data'}",
        "-o",
        tmp_path / "run",
    )
    assert result.returncode == 2
    assert "train-images-idx3-ubyte.gz: cannot be read as gzip" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_model_option_is_refused(tmp_path):
    result = date(
        "scale",
        RECIPES / "gnmt.yaml",
        "--batch",
        8,
        "--set",
        "model.hiden=16",
        "-o",
        tmp_path / "run",
    )
    assert result.returncode == 2
    assert "model.hiden: not an option of recipe gnmt; its options: hidden, layers" in result.stderr


def test_a_recipe_whose_functions_do_not_take_the_trainers_arguments_is_refused():
    """A recipe written from docs that said loss(model, batch) died in the first step with a
    40-line TypeError; it is now refused where it is loaded, naming the arguments."""
    from dataclasses import replace

    from date_engine.errors import DateError
    from date_engine.recipes import _checked, get_recipe

    base = get_recipe("lenet-digits")
    _checked(base, "lenet-digits")  # the shipped ones take them
    with pytest.raises(DateError, match=r"loss is called with 3 arguments \(model, batch, data\)"):
        _checked(replace(base, loss=lambda model, batch: 0), "mine")
    with pytest.raises(DateError, match=r"evaluate is called with 3 arguments"):
        _checked(replace(base, evaluate=lambda model, batch: {}), "mine")
    _checked(replace(base, loss=lambda *args: 0), "mine")  # anything that takes them will do


def test_the_vit_reads_28_pixel_images_and_refuses_a_patch_that_does_not_tile():
    import torch

    from date_engine.errors import DateError
    from date_engine.recipes import get_recipe

    recipe = get_recipe("vit-mnist")
    model = recipe.build_model(recipe.parse_options({"patch": 7, "dim": 32, "heads": 2}))
    assert model(torch.rand(3, 1, 28, 28)).shape == (3, 10)
    assert model.position.shape == (1, 16 + 1, 32)  # 4×4 patches of 7 pixels and a class token
    for bad, words in (({"patch": 5}, "patch 5 does not tile"),
                       ({"dim": 30, "heads": 4}, "dim 30 does not split into 4 heads")):
        with pytest.raises(DateError, match=words):
            recipe.parse_options(bad)


def test_the_digits_are_scikit_learns_and_split_as_it_splits_them():
    """lenet-digits reads scikit-learn's digits file without importing scikit-learn and splits it
    with the stored indices: both as load_digits and train_test_split(random_state=0) give."""
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from date_engine.recipes import DataOptions, get_recipe

    data = get_recipe("lenet-digits").build_data(DataOptions(), None)
    x, y = load_digits(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=360, stratify=y, random_state=0)
    for got, want in ((data.train, (xtr, ytr)), (data.eval, (xte, yte))):
        images, labels = got.tensors
        assert torch.equal(images, torch.tensor(want[0], dtype=torch.float32).view(-1, 1, 8, 8)
                           / 16.0)
        assert torch.equal(labels, torch.tensor(want[1], dtype=torch.long))


def test_without_scikit_learn_the_digits_recipe_says_how_to_install_it():
    from tests.test_newcomer import blocked

    result = blocked("sklearn", "scale", "lenet-digits", "--batch", "16", "--max-steps", "1")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pip install scikit-learn" in result.stderr and "Traceback" not in result.stderr
