"""Every input a user or a script can get wrong ends in one sentence and exit code 2 — no traceback,
no hang, nothing written. The cases an outside check found failing, one per row, then a fuzz test
over spec values, `--set` and options (hypothesis)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from date_engine.cli import app
from tests.bounds import hang_limit
from tests.conftest import RECIPES

runner = CliRunner()
DIGITS = str(RECIPES / "lenet-digits.yaml")
LENET = str(RECIPES / "lenet-mnist.yaml")

QUICK_S = hang_limit(0.06)
"""An in-process `date plan` answers (or refuses) in 11–57 ms on the idle development VM: one
taking past hang_limit of that (a minute) has hung, as a divisor search over 10^9 processes did."""


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


def alias_bomb(levels=9, fan=9) -> str:
    """YAML whose every level lists the one before ``fan`` times: fan**levels values in all."""
    lines = ["l0: &l0 [x]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fan) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("where", ["file", "--set"])
def test_a_yaml_alias_bomb_is_refused_in_bounded_time(spec_file, where):
    """9 levels of 9 aliases (387 million values written out) once ran for ever in the key check;
    the size is now counted on the YAML's node graph, where each node is seen once."""
    from tests.runs import date

    if where == "file":
        args = ["plan", spec_file(alias_bomb() + BASE), "--batch", 64]
    else:
        bomb = "{" + alias_bomb().strip().replace("\n", ", ") + "}"
        args = ["plan", spec_file(BASE), "--batch", 64, "--set", f"model={bomb}"]
    result = date(*args, idle_s=0.5)  # bound: a hang guard: `date plan` refuses in 0.4 s idle
    assert result.returncode == 2 and "expands to more than 10,000 values" in result.stderr, \
        result.stderr
    assert "Traceback" not in result.stderr


def test_batches_that_would_take_long_to_refuse_are_quick(spec_file):
    path = spec_file("baseline: {batch_size: 549755813888, lr: 0.001, warmup_epochs: 0, "
                     "iterations: 10, dataset_size: 1000000000000}\n")
    began = time.perf_counter()
    refused(invoke("plan", path, "--batch", 10**12 - 1, "--nproc", 2), "does not divide evenly")
    assert time.perf_counter() - began < QUICK_S


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
    assert time.perf_counter() - began < QUICK_S, args
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
    assert time.perf_counter() - began < QUICK_S, raw
    assert result.exit_code in (0, 2), (raw, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        (raw, repr(result.exception))


def digits_probe() -> dict:
    """probe.json of the shipped lenet-digits baseline, as date probe writes it."""
    import json

    from date_engine import load_spec
    from date_engine.probe import NoisePoint, Probe, baseline_identity

    probe = Probe(baseline=baseline_identity(load_spec(DIGITS), 1437), baseline_epochs=60.0,
                  steps=431, baseline_steps=5389, epochs=4.8, micro_batch=8, world_size=1,
                  accumulation_steps=2, wall_seconds=3.0,
                  points=(NoisePoint(0.6, 40.0, 1.0, 40.0, 2.0, 30.0),
                          NoisePoint(1.8, 60.0, 0.5, 30.0, 1.0, 40.0),
                          NoisePoint(4.2, 90.0, 0.25, 22.5, 0.5, 50.0)))
    return json.loads(json.dumps(probe.to_dict()))


def test_a_probe_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path):
    """A FIFO given as --probe once blocked `date plan` forever in its read."""
    import os

    from tests.runs import date

    fifo = tmp_path / "probe.json"
    os.mkfifo(fifo)
    # bound: a hang guard: the FIFO is refused in 0.4 s idle, where reading it would wait forever
    result = date("plan", DIGITS, "--batch", 256, "--probe", fifo, idle_s=0.5)
    assert result.returncode == 2 and "not a regular file" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("option", ["--bench", "--probe", "spec"])
@pytest.mark.parametrize("kind", ["fifo", "device", "folder", "huge"])
def test_every_file_option_reads_a_regular_file_of_bounded_size(tmp_path, option, kind):
    """`--bench /dev/zero` once read without bound (1.2 GB/s of memory, then a MemoryError) and
    a FIFO as --bench hung: the spec, --probe and --bench share one guard (a regular file, read
    to at most 16 MiB)."""
    import os

    from tests.runs import date

    path = {"device": Path("/dev/zero"), "folder": tmp_path}.get(kind, tmp_path / "file.json")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(17 << 20)  # sparse: 17 MiB of zeros
    spec, extra = (path, []) if option == "spec" else (DIGITS, [option, path])
    result = date("plan", spec, "--batch", 256, "--devices", 2, *extra, idle_s=0.5)
    said = " ".join(result.stderr.split())
    assert result.returncode == 2 and "Traceback" not in said, said
    want = {"fifo": "not a regular file", "device": "not a regular file",
            "folder": "a directory", "huge": "larger than"}[kind]
    assert f"{path}: {want}" in said and said.count("error:") == 1


@pytest.mark.parametrize("option", ["--devices", "--nproc"])
@pytest.mark.parametrize("count", [10**9, 2**70])
def test_a_process_count_past_the_batch_is_refused_at_once(option, count):
    """--devices 10^9 once spun in the divisor search that built the refusal (10^8: 14 s)."""
    began = time.perf_counter()
    refused(invoke("plan", DIGITS, "--batch", 256, option, count),
            "leaves processes without a sample", "--nproc 256 or fewer")
    assert time.perf_counter() - began < QUICK_S


def test_bench_options_beyond_what_can_be_measured(tmp_path):
    """A micro-batch larger than the training set was once timed as a smaller one and recorded
    under its label; a bench.json of huge times printed "nan×"; --link 1e400GB/s was taken as an
    infinite link."""
    import json

    from date_engine.timing import Bench, Link

    refused(invoke("bench", DIGITS, "--nproc", 1, "--micro-batches", "16,100000", "-o", tmp_path),
            "--micro-batches: 100000 is more than the 1437 samples", "1437 or fewer")
    assert not (tmp_path / "bench.json").exists()
    bench = Bench("lenet-digits", "m", "2", "cpu", "gloo", 2, 1, 10, 40, 1e308, 1e300, 1e-3,
                  Link(5e-6, 2.5e10, "bench"), ((16, 1e308), (32, 1e308)), (), ())
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(bench.to_dict()))
    refused(invoke("plan", DIGITS, "--batch", 256, "--devices", 2, "--bench", path),
            "no time above a day")
    fine = tmp_path / "fine.json"
    fine.write_text(json.dumps({**bench.to_dict(), "compute_fixed": 1e-3,
                                "compute_per_sample": 1e-5,
                                "compute_points": [[16, 2e-3], [32, 3e-3]]}))
    assert invoke("plan", DIGITS, "--batch", 256, "--devices", 2, "--bench", fine).exit_code == 0
    for link in ("1e400GB/s,5us", "25GB/s,1e400us", "0GB/s,5us"):
        refused(invoke("plan", DIGITS, "--batch", 256, "--devices", 2, "--bench", fine,
                       "--link", link), "beyond any fabric")


def test_a_probe_under_fsdp_is_refused_as_the_docs_say():
    refused(invoke("probe", DIGITS, "--set", "train.parallel=fsdp"),
            "train.parallel: fsdp does not show", "--set train.parallel=ddp")


@pytest.mark.parametrize("change, words", [
    (("baseline", "set", [1, 2]), ["baseline", "should be an object"]),  # was AttributeError
    (("steps", "set", 1.5), ["steps", "valid integer"]),
    (("steps", "set", 0), ["steps must be a positive"]),
    (("points", "set", "none"), ["points", "valid"]),
    (("baseline_epochs", "del", None), ["baseline_epochs", "required"]),
])
def test_a_malformed_probe_field_is_named(tmp_path, change, words):
    import json

    data = digits_probe()
    key, how, value = change
    if how == "del":
        del data[key]
    else:
        data[key] = value
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(data))
    refused(invoke("plan", DIGITS, "--batch", 256, "--probe", path), str(path), *words)


PROBE_FIELDS = sorted(digits_probe()) + ["baseline." + k for k in digits_probe()["baseline"]] + \
    [f"points.{i}.{k}" for i in range(3) for k in digits_probe()["points"][0]]
PROBE_VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3),
                         st.dictionaries(st.sampled_from(["epoch", "batch_size", "x"]), SCALARS,
                                         max_size=2))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.sampled_from(PROBE_FIELDS), st.booleans(), PROBE_VALUES),
                        min_size=1, max_size=3), budget=st.sampled_from(["same-epochs", "hold",
                                                                          "ramp"]))
@example(changes=[("points.1.epoch", False, 36550318388.0)], budget="ramp")  # a·e^β overflowed
@example(changes=[("points.0.noise_scale", False, 2.67e-245),  # the error band's e^(z·s) did
                  ("points.2.noise_scale", False, 2.67e-245)], budget="same-epochs")
def test_fuzz_probe_files(tmp_path, changes, budget):
    """Any probe.json with fields changed or removed: `date plan --probe` exits 0 or 2, with no
    traceback and no hang."""
    import json

    data = digits_probe()
    for dotted, remove, value in changes:
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            if isinstance(node, list):  # an earlier change may have made a mapping a list
                node = node[int(part)] if part.isdigit() and int(part) < len(node) else None
            else:
                node = node.get(part)
            if not isinstance(node, (dict, list)):
                break
        else:
            if isinstance(node, list):
                if last.isdigit() and int(last) < len(node):
                    node[int(last)] = value
            elif remove:
                node.pop(last, None)
            else:
                node[last] = value
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(data))
    began = time.perf_counter()
    result = invoke("plan", DIGITS, "--batch", 256, "--probe", path, "--budget", budget, "--json")
    assert time.perf_counter() - began < QUICK_S, data
    assert result.exit_code in (0, 2), (data, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        (data, repr(result.exception))


EMPTY_PATHS = [
    ["plan", "{}", "--batch", 256],
    ["plan", DIGITS, "--batch", 256, "--probe", "{}"],
    ["plan", DIGITS, "--batch", 256, "--plot", "{}"],
    ["scale", "{}", "--batch", 256, "--dry-run"],
    ["scale", DIGITS, "--batch", 256, "-o", "{}"],
    ["scale", DIGITS, "--batch", 256, "--output-dir", "{}", "--dry-run"],
    ["scale", DIGITS, "--batch", 256, "--probe", "{}"],
    ["scale", DIGITS, "--batch", 256, "--recipe", "{}"],
    ["scale", DIGITS, "--batch", 256, "--set", "train.output_dir='{}'"],
    ["scale", DIGITS, "--batch", 256, "--set", "train.data_dir='{}'"],
    ["scale", DIGITS, "--batch", 256, "--set", "date.probe='{}'"],
    ["probe", DIGITS, "-o", "{}"],
    ["sweep", DIGITS, "--batches", 64, "-o", "{}"],
    ["sweep", DIGITS, "--batches", 64, "--probe", "{}"],
    ["recipes", "copy", "lenet-digits", "{}"],
    ["data", "prepare", "mnist", "{}"],
    ["data", "prepare", "mnist", "out", "--source", "{}"],
]


@pytest.mark.parametrize("blank", ["", "  "], ids=["empty", "blank"])
@pytest.mark.parametrize("args", EMPTY_PATHS, ids=lambda a: " ".join(map(str, a[:2] + a[-2:])))
def test_an_empty_path_is_refused_before_anything_is_written(tmp_path, monkeypatch, args, blank):
    """`date scale … -o ''` once trained into the current folder and replaced the user's
    spec.yaml there: every path option of every command refuses empty or blank text."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text("mine\n")
    result = invoke(*[str(a).replace("{}", blank) for a in args])
    refused(result, "empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]
    assert (tmp_path / "spec.yaml").read_text() == "mine\n"


@pytest.mark.slow
def test_a_default_run_folder_that_cannot_be_written_is_refused_before_training():
    """Under a folder that cannot be written (here /proc), the default run folder once failed
    inside the run with exit 1 and a --resume hint for a run that never started."""
    import sys

    from tests.runs import run_group

    result = run_group([sys.executable, "-m", "date_engine", "scale", DIGITS, "--batch", 256,
                        "--max-steps", 2], cwd="/proc")
    assert result.returncode == 2, result.stderr
    assert "runs/lenet-digits-B256" in result.stderr and "--resume" not in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_refused_resume_leaves_no_folder_behind(tmp_path):
    """--resume into a folder with nothing to resume once left it made, empty but for a LOCK."""
    from tests.runs import date

    result = date("scale", DIGITS, "--batch", 256, "--resume", "-o", tmp_path / "new")
    assert result.returncode == 2 and "no checkpoint" in result.stderr, result.stderr
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("value", [2.2244852767877438e+148, 3.4014183529622016e+155])
def test_a_probe_point_beyond_any_measurement_is_refused(tmp_path, value):
    """Found by the fuzzer: one point's noise scale of 1e148 fitted a curve whose forecast was NaN
    (a ValueError from math.ceil) or overflowed; now the probe is refused, naming its points."""
    import json

    data = digits_probe()
    data["points"][2]["noise_scale"] = value
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(data))
    refused(invoke("plan", DIGITS, "--batch", 256, "--probe", path), str(path), "points",
            "no usable noise curve")


@pytest.mark.parametrize("target", ["self", "nowhere"])
def test_an_output_folder_under_a_looping_or_dangling_link_is_one_sentence(tmp_path, monkeypatch,
                                                                           target):
    """`date data prepare fashion-mnist data/fashion` with `data` a link to itself ended in an
    OSError traceback (too many levels of symbolic links)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").symlink_to(tmp_path / ("data" if target == "self" else "gone"))
    for args in (["data", "prepare", "fashion-mnist", "data/fashion"],
                 ["sweep", DIGITS, "--batches", 64, "-o", "data/sweep"]):
        result = invoke(*args)
        refused(result, "data is a symbolic link that leads nowhere (or to itself)")


def test_auto_resume_continues_the_newest_default_folder_with_a_checkpoint(tmp_path, capsys):
    """Without --output-dir, --auto-resume continues the newest versioned default folder that
    holds a checkpoint, and starts the next free one where none does."""
    from date_engine.runfolder import run_folder_for

    base = tmp_path / "runs" / "lenet-digits-B256"

    def folder():
        return run_folder_for(None, None, str(base), False, versioned=True, dry_run=False,
                              auto=True)

    assert folder() == (base, False)
    assert f"no checkpoint in {base} yet" in capsys.readouterr().err
    for name in (base, base.with_name(f"{base.name}-2")):
        (name / "checkpoints").mkdir(parents=True)
        (name / "checkpoints" / "step-00000004.pt").write_bytes(b"")
    assert folder() == (base.with_name(f"{base.name}-2"), True)
    assert capsys.readouterr().err == ""
