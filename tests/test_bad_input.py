"""Every input a user or a script can get wrong ends in one sentence and exit code 2 — no traceback,
no hang, nothing written. The cases an outside check found failing, one per row, then a fuzz test
over spec values, `--set` and options (hypothesis)."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from date_engine.cli import app
from tests.conftest import RECIPES

runner = CliRunner()
DIGITS = str(RECIPES / "lenet-digits.yaml")
LENET = str(RECIPES / "lenet-mnist.yaml")


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def refused(result, *words):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    for word in words:
        assert word in result.output, (word, result.output)


@pytest.fixture
def spec_file(tmp_path):
    def write(text, name="spec.yaml"):
        path = tmp_path / name
        path.write_text(text)
        return path
    return write


BASE = "baseline: {batch_size: 16, lr: 0.001, warmup_epochs: 1, epochs: 4, dataset_size: 1437}\n"


@pytest.mark.parametrize("text, words", [
    # silent YAML coercions (a bool is not a number; a key given twice is not an override)
    (BASE.replace("batch_size: 16", "batch_size: true"), ["baseline.batch_size", "whole number"]),
    (BASE.replace("lr: 0.001", "lr: true"), ["baseline.lr", "expected a number"]),
    (BASE.replace("lr: 0.001", 'lr: "0.1"'), ["baseline.lr", "expected a number"]),
    (BASE + "baseline: {batch_size: 32}\n", ["line 2", "'baseline' is given twice"]),
    ("baseline:\n  batch_size: 16\n  batch_size: 32\n", ["line 3", "'batch_size' is given twice"]),
    ("a: &x [1, *x]\n" + BASE, ["refers to itself through a YAML alias"]),
    # numbers that overflow or never end
    (BASE.replace("lr: 0.001", "lr: 1e308"), ["baseline.lr", "must be <= 1000000"]),
    (BASE.replace("epochs: 4", "epochs: 1e308"), ["baseline.epochs", "must be <="]),
    (BASE.replace("epochs: 4", "epochs: 1e300"), ["baseline.epochs", "must be <="]),
    (BASE.replace("epochs: 4", "iterations: 1e400"), ["baseline.iterations", "whole number"]),
    (BASE.replace("epochs: 4", "epochs: 900000").replace("1437", "1000000000"),
     ["optimizer steps", "more than 1,000,000,000"]),
    (BASE + "train: {seed: 9223372036854775808}\n", ["train.seed", "must be <= 4294967295"]),
])
def test_spec_values(spec_file, text, words):
    refused(invoke("plan", spec_file(text), "--batch", 64), *words)


def test_batches_that_would_take_long_to_refuse_are_quick(spec_file):
    path = spec_file("baseline: {batch_size: 549755813888, lr: 0.001, warmup_epochs: 0, "
                     "iterations: 10, dataset_size: 1000000000000}\n")
    began = time.perf_counter()
    refused(invoke("plan", path, "--batch", 10**12 - 1, "--nproc", 2), "does not divide evenly")
    assert time.perf_counter() - began < 5


@pytest.mark.parametrize("args, words", [
    (["scale", DIGITS, "--batch", 256, "--nproc", 0], ["--nproc must be a positive"]),
    (["scale", DIGITS, "--batch", 256, "--recipe", ":"], ["recipe ':'", "cannot load"]),
    (["scale", DIGITS, "--batch", 256, "--backend", "bogus"], ["--backend must be gloo, nccl"]),
    (["scale", DIGITS, "--batch", 256, "--backend", "nccl"], ["--backend nccl needs CUDA"]),
    (["scale", DIGITS, "--batch", 256, "--master-port", 99999], ["--master-port must be a port"]),
    (["scale", DIGITS, "--batch", 256, "--rdzv-endpoint", "a host:x"], ["expected host:port"]),
    (["scale", DIGITS, "--batch", 256, "--rdzv-endpoint", "node01:70000"], ["from 1 to 65535"]),
    (["scale", DIGITS, "--batch", 256, "-o", "/proc/nope"], ["/proc/nope", "cannot write in"]),
    (["plan", LENET, "--batch", 8192, "--plot", "lr.xyz"], ["cannot write a .xyz file"]),
    (["plan", LENET, "--batch", 8192, "--plot", "."], ["--plot .", "is a folder"]),
])
def test_options(args, words):
    refused(invoke(*args), *words)


@pytest.mark.parametrize("command", [
    ["scale", DIGITS, "--batch", 256, "-o"],
    ["sweep", DIGITS, "--batches", 64, "-o"],
    ["data", "prepare", "mnist"],
])
def test_an_output_folder_that_is_a_file(command, tmp_path):
    taken = tmp_path / "file.txt"
    taken.write_text("mine")
    refused(invoke(*command, taken), str(taken), "is a file, not a folder")
    assert taken.read_text() == "mine"


# ------------------------------------------------------------------ fuzz


KEYS = ["baseline.batch_size", "baseline.lr", "baseline.warmup_epochs", "baseline.epochs",
        "baseline.iterations", "baseline.dataset_size", "baseline.optimizer.name",
        "baseline.optimizer.betas", "baseline.optimizer.alpha", "baseline.optimizer.eps",
        "date.rule", "date.scaling", "date.warmup", "date.lr_floor", "date.layer_ratio.mode",
        "date.layer_ratio.gamma", "train.micro_batch", "train.seed", "model.hidden", "recipe"]
VALUES = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["true", "false", "null", "~", "[]", "{}", "[0.9, 2]", "x", "'1'", "1e400",
                     "-1e400", ".nan", "sgd", "adam", "lars", "paper", "linear", "off", "*a",
                     "&a 1", "{a: 1}", ": :", "'", "0x10", "1_000"]),
)
OVERRIDE = st.tuples(st.sampled_from(KEYS), VALUES).map(lambda kv: f"{kv[0]}={kv[1]}")
BATCH = st.one_of(st.integers(-5, 2**65), st.sampled_from(["8k", "1e3", "x", "", "256"]))
NPROC = st.one_of(st.integers(-2, 70), st.sampled_from(["x", "1.5"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overrides=st.lists(OVERRIDE, max_size=4), batch=BATCH, nproc=NPROC,
       micro=st.one_of(st.none(), st.integers(-2, 5000)), as_json=st.booleans())
def test_fuzz_date_plan(overrides, batch, nproc, micro, as_json):
    """No spec value, `--set` or option makes `date plan` trace back, hang or exit otherwise
    than 0 or 2."""
    args = ["plan", LENET, "--batch", batch, "--nproc", nproc]
    args += ["--micro-batch", micro] if micro is not None else []
    args += ["--json"] if as_json else []
    for override in overrides:
        args += ["--set", override]
    began = time.perf_counter()
    result = invoke(*args)
    assert time.perf_counter() - began < 5, args
    assert result.exit_code in (0, 2), (args, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        (args, repr(result.exception))


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                    st.sampled_from(["sgd", "rmsprop", "lamb", "dynamic", "static", "off", "paper",
                                     "sqrt", "legw", "lenet-digits", "lenet-mnist", "x:y"]))
SECTIONS = {
    "baseline": ["batch_size", "lr", "warmup_epochs", "epochs", "iterations", "dataset_size",
                 "optimizer"],
    "date": ["rule", "scaling", "warmup", "warmup_shape", "lr_floor", "layer_ratio"],
    "train": ["micro_batch", "seed", "log_every", "grad_clip", "output_dir"],
    "model": ["hidden", "layers"],
}
SECTION = st.sampled_from(sorted(SECTIONS)).flatmap(
    lambda name: st.tuples(st.just(name), st.dictionaries(
        st.sampled_from(SECTIONS[name] + ["bogus"]),
        st.one_of(SCALARS, st.dictionaries(st.sampled_from(["name", "mode", "gamma", "betas"]),
                                           SCALARS, max_size=2), st.lists(SCALARS, max_size=3)),
        max_size=6)))
VALID = {"batch_size": 16, "lr": 0.001, "warmup_epochs": 1, "epochs": 4, "dataset_size": 1437}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(sections=st.lists(SECTION, max_size=4), start_valid=st.booleans(),
       recipe=st.one_of(st.none(), SCALARS), batch=st.integers(1, 5000))
def test_fuzz_spec_files(spec_file, sections, start_valid, recipe, batch):
    """Any YAML mapping of spec-like sections, valid or not: exit 0 or 2, no traceback, no hang."""
    import yaml

    raw = {"baseline": dict(VALID)} if start_valid else {}
    for name, values in sections:
        raw.setdefault(name, {}).update(values)
    if recipe is not None:
        raw["recipe"] = recipe
    path = spec_file(yaml.safe_dump(raw, allow_unicode=True))
    began = time.perf_counter()
    result = invoke("plan", path, "--batch", batch, "--json")
    assert time.perf_counter() - began < 5, raw
    assert result.exit_code in (0, 2), (raw, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        (raw, repr(result.exception))
