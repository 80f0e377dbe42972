"""The two rules of docs/algorithm.md: the paper's (§2), exactly as before, and the default rule per
optimizer family (§6), pinned at landmark scales k = 1, 4, 32 and the largest batch LEGW allows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from date_engine import load_spec, parse_spec
from date_engine.plan import derive_plan
from tests.bounds import float64_formula
from tests.conftest import RECIPES

GOLDEN = json.loads((Path(__file__).parent / "data" / "paper_plans.json").read_text())


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_the_papers_rule_reproduces_the_plans_it_always_gave(key):
    """`date.rule: paper` gives, to the last bit, the plans the code gave before the default rule
    existed (tests/data/paper_plans.json: every recipe then shipped at 1, 2, 8 and 32 times its
    batch; lstm-mnist's Adam baseline is lstm-mnist-adam.yaml now)."""
    name, batch = key.split("@")
    plan = derive_plan(load_spec(RECIPES / f"{name}.yaml", ["date.rule=paper"]), int(batch))
    want = GOLDEN[key]
    for field in ("scale", "peak_lr", "warmup_epochs", "warmup_iterations", "total_iterations",
                  "total_epochs", "max_legw_batch"):
        assert getattr(plan, field) == want[field], field
    assert {s: plan.lr(int(s)) for s in want["lr"]} == want["lr"]
    assert [[p.name, p.first_step, p.last_step] for p in plan.phases] == want["phases"]
    spec = load_spec(RECIPES / f"{name}.yaml")
    assert plan.optimizer.options == spec.baseline.optimizer.options()  # no option changes


# ------------------------------------------------------------------ the default rule

BASE = {"batch_size": 100, "lr": 0.01, "warmup_epochs": 0.05, "epochs": 10, "dataset_size": 100_000}

# optimizer (with options) -> (p without a probe, the option holding β2 or None, ε scaled?,
# λ scaled?); the adaptive family's p is 0.75 with a probe whose LR check found room
FAMILIES = {
    "rmsprop": ({"name": "rmsprop"}, 0.5, "alpha", True, False),
    "adam": ({"name": "adam", "betas": [0.8, 0.99], "eps": 1e-7}, 0.5, "betas", True, False),
    "adamw": ({"name": "adamw", "weight_decay": 0.1}, 0.5, "betas", True, True),
    "adagrad": ({"name": "adagrad"}, 0.5, None, False, False),
    "sgd": ({"name": "sgd", "weight_decay": 1e-4}, 1.0, None, False, False),
    "momentum": ({"name": "momentum", "momentum": 0.95}, 1.0, None, False, False),
    "nesterov": ({"name": "nesterov"}, 1.0, None, False, False),
    "lars": ({"name": "lars"}, 1.0, None, False, False),
    "lamb": ({"name": "lamb"}, 0.5, "betas", True, False),
}
ADAPTIVE = ("rmsprop", "adam", "adamw", "lamb")


def _spec(optimizer: dict, **date):
    ratio = {"layer_ratio": {"mode": "off"}} if optimizer["name"] in ("lars", "lamb") else {}
    return parse_spec({"baseline": {**BASE, "optimizer": optimizer}, "date": {**ratio, **date}})


@pytest.mark.parametrize("k", [1, 4, 32, "edge"])
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_default_rule_per_family(name, k):
    optimizer, p, second_moment, eps, decay = FAMILIES[name]
    spec = _spec(optimizer)
    baseline = spec.baseline.optimizer.options()
    if k == "edge":  # the largest batch LEGW allows: 100 · 10 / 0.05 − 1
        k = 19999 / 100
    plan = derive_plan(spec, round(k * 100))
    options, rows = plan.optimizer.options, {d.name: d for d in plan.derivations}
    assert plan.rule == "date" and plan.scaling == "power" and plan.lr_exponent == p
    assert plan.peak_lr == pytest.approx(k**p * 0.01, rel=float64_formula(8))
    assert rows["peak_lr"].formula == f"k^{p:g} · η0"
    expected = dict(baseline)
    if k != 1:
        if second_moment == "alpha":
            expected["alpha"] = baseline["alpha"] ** k
        elif second_moment == "betas":
            expected["betas"] = (baseline["betas"][0], baseline["betas"][1] ** k)
        if eps:
            expected["eps"] = baseline["eps"] / math.sqrt(k)
        if decay:
            expected["weight_decay"] = baseline["weight_decay"] * k ** (1 - p)
    assert options.keys() == expected.keys()
    for key, value in expected.items():
        expect = value if value is None else pytest.approx(value, rel=float64_formula(8))
        assert options[key] == expect, key
    scaled = {d.name for d in plan.derivations if d.name.startswith("optimizer.")}
    assert scaled == {f"optimizer.{key}" if key != "betas" else "optimizer.betas[1]"
                      for key in expected if expected[key] != baseline[key]}
    if second_moment is not None and k != 1:  # a valid decay at every k: β^k stays in (0, 1)
        beta = options["alpha"] if second_moment == "alpha" else options["betas"][1]
        assert 0 < beta < 1


def test_an_explicit_scaling_overrides_the_rules_exponent_only():
    spec = _spec({"name": "adam"}, scaling="linear")
    plan = derive_plan(spec, 3200)  # k = 32
    assert plan.peak_lr == pytest.approx(0.32) and plan.scaling == "linear"
    assert plan.optimizer.options["betas"][1] == pytest.approx(0.999**32)


def test_the_papers_rule_changes_no_option_and_scales_by_sqrt():
    spec = _spec({"name": "adamw", "weight_decay": 0.1}, rule="paper")
    plan = derive_plan(spec, 3200)
    assert plan.peak_lr == pytest.approx(math.sqrt(32) * 0.01) and plan.lr_exponent == 0.5
    assert plan.optimizer.options == spec.baseline.optimizer.options()


def test_fixed_weight_decay_keeps_adamws_lambda_and_scales_the_rest():
    scaled = derive_plan(_spec({"name": "adamw", "weight_decay": 0.1}), 3200)
    fixed = derive_plan(_spec({"name": "adamw", "weight_decay": 0.1}, weight_decay="fixed"), 3200)
    assert scaled.optimizer.options["weight_decay"] == pytest.approx(0.1 * 32 ** 0.5)
    assert fixed.optimizer.options["weight_decay"] == 0.1
    assert "optimizer.weight_decay" not in {d.name for d in fixed.derivations}
    assert fixed.peak_lr == scaled.peak_lr
    assert fixed.optimizer.options["betas"] == scaled.optimizer.options["betas"]


@pytest.mark.parametrize(("optimizer", "key"), [({"name": "adamw", "weight_decay": 0.1}, "betas"),
                                                ({"name": "rmsprop"}, "alpha")])
def test_fixed_second_moment_keeps_the_baselines_decay_and_scales_the_rest(optimizer, key):
    scaled = derive_plan(_spec(optimizer), 3200)
    fixed = derive_plan(_spec(optimizer, second_moment="fixed"), 3200)
    baseline = _spec(optimizer).baseline.optimizer.options()[key]
    assert fixed.optimizer.options[key] == baseline != scaled.optimizer.options[key]
    assert not {"optimizer.betas[1]", "optimizer.alpha"} & {d.name for d in fixed.derivations}
    assert fixed.peak_lr == scaled.peak_lr
    assert fixed.optimizer.options["eps"] == scaled.optimizer.options["eps"]
    decay = [plan.optimizer.options.get("weight_decay") for plan in (fixed, scaled)]
    assert decay[0] == decay[1]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_only_a_probe_whose_lr_check_found_room_raises_the_adaptive_family_to_k075(name):
    """Without a probe, with one that ran no LR check, or with one whose check read the baseline
    steps-limited, the adaptive family's LR grows as √k (λ·√k for AdamW); with a probe whose check
    found room, as k^0.75 (λ·k^0.25), same-epochs and in every rung of a ramp. The plan says which
    in one line, and what would change it. The other families keep their exponent."""
    from date_engine.forecast import NoiseCurve

    optimizer, p, *_ = FAMILIES[name]
    unchecked = NoiseCurve(a=500.0, beta=0.0, first=0.1, last=1.0)
    room = NoiseCurve(**{**unchecked.__dict__, "lr_checked": True})
    limited = NoiseCurve(**{**room.__dict__, "steps_limited": True})
    plans = {c: derive_plan(_spec(optimizer, lr_cap="none"), 3200, noise_curve=c)
             for c in (None, unchecked, room, limited)}  # the cap apart: tested below
    adaptive = name in ADAPTIVE
    want = {None: p, unchecked: p, room: 0.75 if adaptive else p, limited: p}
    for curve, plan in plans.items():
        assert plan.lr_exponent == want[curve]
        assert plan.peak_lr == pytest.approx(32 ** want[curve] * 0.01)
        if "weight_decay" in FAMILIES[name][0] and FAMILIES[name][4]:
            assert plan.optimizer.options["weight_decay"] == pytest.approx(
                0.1 * 32 ** (1 - want[curve]))
    notes = {c: plan.lr_note for c, plan in plans.items()}
    if not adaptive:
        assert set(notes.values()) == {""}
        return
    assert notes[None] == ("LR exponent 0.5 (no probe); a probe whose LR check passes raises it "
                           "to 0.75: date probe SPEC.")
    assert "ran without its LR check" in notes[unchecked] and "0.75" in notes[unchecked]
    assert notes[room].startswith("LR exponent 0.75: the probe's LR check found room")
    assert "steps-limited" in notes[limited]
    assert derive_plan(_spec(optimizer, scaling="sqrt"), 3200).optimizer.options == \
        plans[None].optimizer.options  # √k under the default rule: date.scaling=sqrt's optimizer
    for curve in (room, limited):
        ramp = derive_plan(_spec(optimizer, budget="ramp", lr_cap="none"), 3200,
                           noise_curve=curve)
        assert [st.peak_lr for st in ramp.ramp] == pytest.approx(
            [(st.batch / 100) ** want[curve] * 0.01 for st in ramp.ramp])


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_by_default_the_lr_stops_at_the_noise_scale_where_the_lr_check_fires(name):
    """date.lr_cap: auto (the default) caps where the cap was measured and won: the adaptive
    family in the baseline's epochs with a probe whose LR check found the baseline steps-limited,
    √k up to B_cap and flat past it, and the plan's line says so; not a ramp's rungs. Where the
    check found room, without a check or a probe, in the other families and with lr_cap: none, no
    cap."""
    from date_engine.forecast import NoiseCurve

    optimizer, p, *_ = FAMILIES[name]
    room = NoiseCurve(a=500.0, beta=0.0, first=0.1, last=1.0, lr_checked=True)  # B_cap = 500
    limited = NoiseCurve(**{**room.__dict__, "steps_limited": True})
    adaptive = name in ADAPTIVE
    plan = derive_plan(_spec(optimizer), 3200, noise_curve=limited)
    assert plan.peak_lr == pytest.approx((5 if adaptive else 32) ** p * 0.01)
    assert ("stops growing at the probe's noise scale, batch 500" in plan.lr_note) == adaptive
    # a ramp, whose batch follows the run's noise scale, is not capped (capped, it lost)
    ramp = derive_plan(_spec(optimizer, budget="ramp"), 3200, noise_curve=limited)
    assert [st.peak_lr for st in ramp.ramp] == pytest.approx(
        [(st.batch / 100) ** p * 0.01 for st in ramp.ramp])
    noise = derive_plan(_spec(optimizer, budget="ramp", lr_cap="noise"), 3200,
                        noise_curve=limited)
    assert [st.peak_lr for st in noise.ramp] == pytest.approx(
        [(min(st.batch, 500) / 100) ** p * 0.01 for st in noise.ramp])
    uncapped = [derive_plan(_spec(optimizer), 3200, noise_curve=room),
                derive_plan(_spec(optimizer), 3200),
                derive_plan(_spec(optimizer, lr_cap="none"), 3200, noise_curve=limited)]
    assert [u.peak_lr for u in uncapped] == pytest.approx(
        [32 ** (0.75 if adaptive else p) * 0.01, 32 ** p * 0.01, 32 ** p * 0.01])


def test_the_noise_scale_cap_stops_the_lr_at_the_probes_noise_scale():
    """date.lr_cap: noise: with any probe, η = η0·(min(B, B_cap)/B0)^p, B_cap the fit at the
    probe's last measured epoch; no cap below B_cap, none without a probe, and the rest of the
    rule (β2^k at the true k) unchanged."""
    from date_engine.forecast import NoiseCurve

    curve = NoiseCurve(a=400.0, beta=0.0, first=0.1, last=1.0, lr_checked=True)  # B_cap = 400
    capped = _spec({"name": "adam"}, lr_cap="noise")
    assert derive_plan(capped, 3200, noise_curve=curve).peak_lr == pytest.approx(
        (400 / 100) ** 0.75 * 0.01)  # room: k^0.75, at k = 4 instead of 32
    assert derive_plan(capped, 300, noise_curve=curve).peak_lr == pytest.approx(3 ** 0.75 * 0.01)
    assert derive_plan(capped, 3200).peak_lr == pytest.approx(32 ** 0.5 * 0.01)  # no probe
    plan = derive_plan(capped, 3200, noise_curve=curve)
    assert plan.optimizer.options["betas"][1] == pytest.approx(0.999 ** 32)
    assert "stops at your probe's noise scale" in {d.name: d for d in plan.derivations}[
        "peak_lr"].note
