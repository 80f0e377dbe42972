"""The baseline spec: every shipped recipe validates; bad input is refused with the field named."""

from __future__ import annotations

import re

import pytest
from pydantic import create_model

from date_engine import SpecError, load_spec, parse_spec
from date_engine.plan import derive_plan
from date_engine.spec import DateSpec, OptimizerSpec, Spec
from tests.conftest import RECIPES

SHIPPED = sorted(RECIPES.glob("*.yaml"))
PAPER_APPS = {"lenet-mnist", "lstm-mnist", "ptb-small", "ptb-large", "gnmt", "resnet50-imagenet"}


def test_the_papers_six_applications_ship():
    assert {p.stem for p in SHIPPED} >= PAPER_APPS


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_recipe_validates_and_plans_its_own_command(path):
    spec = load_spec(path)
    assert path.stem.startswith(spec.recipe)  # a recipe's YAML, or a variant of it
    first = path.read_text().splitlines()[0]
    commands = (f"# date plan recipes/{path.name} ", f"# date scale recipes/{path.name} ")
    assert first.startswith(commands), "opens with its command"
    batch = int(re.search(r" --batch (\d+)", first).group(1))
    plan = derive_plan(spec, batch)
    assert plan.scale > 1 and plan.warmup_epochs < plan.total_epochs


def test_defaults():
    spec = parse_spec(
        {
            "baseline": {
                "batch_size": 256,
                "lr": 0.1,
                "warmup_epochs": 1,
                "epochs": 10,
                "dataset_size": 1000,
            }
        }
    )
    assert (spec.date.rule, spec.date.scaling, spec.date.warmup, spec.date.warmup_shape) == (
        "date", None, None, "linear")  # scaling and warmup: the rule's
    assert spec.date.lr_floor == 1e-6
    assert spec.date.layer_ratio.mode == "dynamic"
    assert spec.baseline.optimizer.name == "momentum"
    assert spec.baseline.optimizer.options() == {
        "momentum": 0.9,
        "dampening": 0.0,
        "weight_decay": 0.0,
    }


def test_optimizer_options_take_torch_defaults_unless_given():
    adamw = OptimizerSpec(name="adamw", betas=(0.9, 0.95))
    assert adamw.options() == {
        "betas": (0.9, 0.95),
        "eps": 1e-8,
        "weight_decay": 1e-2,
        "amsgrad": False,
    }
    assert adamw.family == "adaptive" and OptimizerSpec(name="nesterov").family == "sgd"


@pytest.mark.parametrize(
    "patch, message",
    [
        (
            {"baseline": {"batchsize": 8}},
            "baseline.batchsize: unknown key; did you mean 'batch_size'?",
        ),
        ({"dat": {}}, "dat: unknown key; did you mean 'date'?"),
        (
            {"baseline": {"batch_size": "big"}},
            "baseline.batch_size: expected a whole number, got 'big'",
        ),
        ({"baseline": {"batch_size": 0}}, "baseline.batch_size: must be > 0, got 0"),
        ({"baseline": {"lr": -1}}, "baseline.lr: must be > 0.0, got -1"),
        ({"baseline": {"lr": ".nan"}}, "baseline.lr: expected a number"),
        ({"baseline": {"epochs": 3}}, "give exactly one of 'iterations' or 'epochs'"),
        (
            {"date": {"scaling": "cubic"}},
            "date.scaling: must be one of 'sqrt', 'linear' or 'none', got 'cubic'",
        ),
        (
            {"date": {"layer_ratio": {"mode": "off", "gamma": 3}}},
            "'gamma' belongs to mode dynamic, not off",
        ),
        (
            {"date": {"layer_ratio": {"mode": "static", "lower": 2, "upper": 1}}},
            "lower (2) is above upper (1)",
        ),
        (
            {"baseline": {"optimizer": {"name": "sgd", "betas": [0.9, 0.99]}}},
            "'betas' is not an option of the sgd optimizer",
        ),
        (
            {"baseline": {"optimizer": {"name": "adam", "betas": [0.9, 1.5]}}},
            "betas must lie in [0, 1)",
        ),
        (
            {"baseline": {"optimizer": {"name": "adamw", "phi_bounds": [0.01, 10]}}},
            "'phi_bounds' is not an option of the adamw optimizer",
        ),
        (
            {"baseline": {"optimizer": {"name": "lamb", "phi_bounds": [1.0, 0.5]}},
             "date": {"layer_ratio": {"mode": "off"}}},
            "phi_bounds must be [lower, upper] with 0 <= lower < upper",
        ),
        ({"train": {"precision": "fp8"}}, "train.precision: must be one of"),
    ],
)
def test_invalid_fields_are_named_with_the_fix(lenet_raw, patch, message):
    for section, values in patch.items():
        lenet_raw.setdefault(section, {}).update(values)
    with pytest.raises(SpecError) as err:
        parse_spec(lenet_raw, source="base.yaml")
    assert message in str(err.value)
    assert str(err.value).startswith("base.yaml: ")


def test_missing_required_field(lenet_raw):
    del lenet_raw["baseline"]["lr"]
    with pytest.raises(
        SpecError, match=r"baseline\.lr: required but missing; add it, e\.g\. lr: 0\.1"
    ):
        parse_spec(lenet_raw)


def test_missing_file_and_malformed_yaml(tmp_path, write_spec):
    with pytest.raises(SpecError, match="nope.yaml: does not exist"):
        load_spec(tmp_path / "nope.yaml")
    bad = write_spec("baseline:\n  batch_size: 1024\n lr: 0.1\n")
    with pytest.raises(SpecError, match=r"line 3, column 2: malformed YAML"):
        load_spec(bad)
    with pytest.raises(SpecError, match="expected a mapping .* got a list"):
        load_spec(write_spec("- 1\n- 2\n"))


def test_overrides_are_parsed_as_yaml_and_win(write_spec, lenet_raw):
    path = write_spec(lenet_raw)
    spec = load_spec(
        path,
        [
            "baseline.lr=0.5",
            "date.scaling=linear",
            "date.layer_ratio.mode=off",
            "baseline.optimizer={name: adam, betas: [0.8, 0.9]}",
        ],
    )
    assert spec.baseline.lr == 0.5 and spec.date.scaling == "linear"
    assert spec.date.layer_ratio.mode == "off"
    assert spec.baseline.optimizer.betas == (0.8, 0.9)
    assert load_spec(path).baseline.lr == 1.25e-3, "the file itself is untouched"


@pytest.mark.parametrize(
    "override, message",
    [
        ("baseline.lr", "expected key=value"),
        ("=3", "expected key=value"),
        ("baseline..lr=3", "expected key=value"),
        ("baseline.lr.x=1", "'baseline.lr' holds a value (0.00125), not a section"),
        ("baseline.lr=[1", "the value is not valid YAML"),
        ("baseline.nope=1", "baseline.nope: unknown key; allowed here: batch_size"),
        ("baseline.lr=abc", "baseline.lr: expected a number, got 'abc' (set by overrides)"),
    ],
)
def test_bad_overrides(write_spec, lenet_raw, override, message):
    with pytest.raises(SpecError) as err:
        load_spec(write_spec(lenet_raw), [override])
    assert message in str(err.value)


def test_yaml_scalars_follow_yaml_1_2(write_spec):
    text = (RECIPES / "lenet-mnist.yaml").read_text()
    text = text.replace("{mode: dynamic}", "{mode: off}").replace("lr: 1.25e-3", "lr: 125e-5")
    spec = load_spec(write_spec(text))
    assert spec.date.layer_ratio.mode == "off"  # YAML 1.1 would read `off` as false
    assert spec.baseline.lr == 1.25e-3


def test_fingerprint_tracks_every_setting(lenet_raw):
    a = parse_spec(lenet_raw)
    assert a.fingerprint() == parse_spec(lenet_raw).fingerprint()
    assert a.fingerprint() != parse_spec(lenet_raw, ["train.seed=1"]).fingerprint()
    assert a.fingerprint() != parse_spec(lenet_raw, ["date.ramp_reach=2"]).fingerprint()


def test_a_later_version_that_adds_a_setting_resumes_todays_checkpoints(lenet_raw):
    """A checkpoint records the spec's fingerprint; a version whose spec gains a setting (at its
    default, so the run is the same) must find the same fingerprint."""
    later_date = create_model("LaterDate", __base__=DateSpec, newer=(int, 0))
    later = create_model("LaterSpec", __base__=Spec, date=(later_date, later_date()))
    assert later.model_validate(lenet_raw).fingerprint() == parse_spec(lenet_raw).fingerprint()
    changed = later.model_validate({**lenet_raw, "date": {**lenet_raw.get("date", {}), "newer": 1}})
    assert changed.fingerprint() != parse_spec(lenet_raw).fingerprint()
