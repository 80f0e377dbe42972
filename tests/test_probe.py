"""The forecast (forecast.py), the plan that uses it, and `date probe` end to end."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from date_engine.errors import DateError, PlanError
from date_engine.forecast import NoiseCurve, epochs_factor, forecast, holding_batch
from date_engine.plan import derive_plan
from date_engine.probe import (
    PROBE_FORMAT,
    LRCheck,
    NoisePoint,
    Probe,
    probe_points,
    second_half_loss,
)
from date_engine.recipes import get_recipe
from date_engine.runfolder import RunFolder
from date_engine.runplan import RunPlan
from date_engine.spec import parse_spec, spec_with
from tests.bounds import float64_formula
from tests.runs import SHORT, SPEC, date

PROBE = [*SHORT, "--share", "0.1", "--points", "4"]


def _spec(**date_section):
    return parse_spec({
        "recipe": "lenet-mnist",
        "baseline": {"batch_size": 128, "lr": 1e-3, "warmup_epochs": 0.1, "epochs": 10,
                     "dataset_size": 60000, "optimizer": {"name": "rmsprop"}},
        "date": date_section,
    })


FLAT = NoiseCurve(a=1000.0, beta=0.0, first=0.1, last=1.0)  # B_noise = 1000 throughout


def test_curve_fit_recovers_a_power_law():
    points = [(e, 40 * e**0.8) for e in (0.25, 0.5, 1.0, 2.0)]
    curve = NoiseCurve.fit(points)
    assert curve.a == pytest.approx(40) and curve.beta == pytest.approx(0.8)
    assert (curve.first, curve.last) == (0.25, 2.0)
    with pytest.raises(ValueError):
        NoiseCurve.fit([(1.0, 50.0), (1.0, 60.0), (2.0, None)])
    # a transient that falls first (an LSTM leaving its initialisation) is left out of the fit
    falling = [(0.04, 4400.0), (0.12, 1560.0), (0.2, 380.0)] + points
    assert NoiseCurve.fit(falling).beta == pytest.approx(0.8)
    assert NoiseCurve.fit(falling).first == 0.25
    # a noise scale that only falls keeps every point (and a falling curve)
    assert NoiseCurve.fit([(0.1, 300.0), (0.2, 200.0), (0.4, 100.0)]).beta < 0


def test_the_fit_s_standard_error_is_the_least_squares_line_s():
    """s = √(Σr²/(n−2)) of the log residuals, and the line's standard error at ln e is
    s·√(1/n + (ln e − x̄)²/Sxx): smallest at the probed epochs' centre, growing with the
    extrapolation; the B_hold range brackets B_hold and widens with the scatter."""
    epochs = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    wobble = [1.1, 0.9, 1.05, 0.95, 1.1, 0.9]
    curve = NoiseCurve.fit([(e, 50 * e**0.7 * w) for e, w in zip(epochs, wobble)])
    xs = [math.log(e) for e in epochs]
    ys = [math.log(50 * e**0.7 * w) for e, w in zip(epochs, wobble)]
    mx, my = sum(xs) / 6, sum(ys) / 6
    sxx = sum((x - mx) ** 2 for x in xs)
    beta = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    s = math.sqrt(sum((y - my - beta * (x - mx)) ** 2 for x, y in zip(xs, ys)) / 4)
    assert (curve.points, curve.spread, curve.sxx) == (6, pytest.approx(s), pytest.approx(sxx))
    at = {e: curve.log_error(e) for e in (math.exp(mx), 0.6, 6.0, 60.0)}
    assert at[math.exp(mx)] == pytest.approx(s / math.sqrt(6))
    assert at[math.exp(mx)] < at[0.6] < at[6.0] < at[60.0]
    assert curve.shifted(1.0)(6.0) == pytest.approx(curve(6.0) * math.exp(at[6.0]))
    ahead = forecast(curve, 4096, 128, 10, 60000)
    assert ahead.holding_low < ahead.holding_batch < ahead.holding_high
    steadier = NoiseCurve.fit([(e, 50 * e**0.7 * (1 + (w - 1) / 4))
                               for e, w in zip(epochs, wobble)])
    close = forecast(steadier, 4096, 128, 10, 60000)
    assert close.holding_high / close.holding_low < ahead.holding_high / ahead.holding_low
    # B_hold is where f crosses 4/3 (f is linear in B: B0 + (4/3 − 1)/M)
    for c in (curve, steadier, FLAT):
        hold = holding_batch(c, 128, 10)
        assert epochs_factor(c, hold, 128, 10) <= 4 / 3 + 1e-9
        assert epochs_factor(c, hold + 1, 128, 10) > 4 / 3
    # two points (or a plan written before the statistics) say nothing about the scatter
    assert math.isnan(NoiseCurve.fit([(0.1, 10.0), (0.2, 20.0)]).log_error(1.0))
    assert forecast(FLAT, 4096, 128, 10, 60000).holding_low is None


def test_a_constant_noise_scale_gives_mccandlish_closed_forms():
    """With B_noise constant, E_B/E0 = (B_noise + B)/(B_noise + B0) and f = 4/3 (B_hold) at
    B = (B_noise + 4·B0)/3."""
    assert epochs_factor(FLAT, 4096, 128, 10) == pytest.approx((1000 + 4096) / (1000 + 128))
    assert epochs_factor(FLAT, 128, 128, 10) == pytest.approx(1.0)
    assert abs(holding_batch(FLAT, 128, 10) - (1000 + 4 * 128) / 3) <= 2
    ahead = forecast(FLAT, 4096, 128, 10, 60000)
    assert ahead.steps == math.ceil(ahead.epochs * 60000 / 4096)
    assert ahead.baseline_steps == math.ceil(10 * 60000 / 128)
    assert ahead.loses_at_same_epochs
    assert not forecast(FLAT, 480, 128, 10, 60000).loses_at_same_epochs


def test_a_growing_noise_scale_costs_less_than_its_start_says():
    growing = NoiseCurve(a=100.0, beta=1.0, first=0.1, last=1.0)
    start = NoiseCurve(a=100.0, beta=0.0, first=0.1, last=1.0)
    assert 1 < epochs_factor(growing, 4096, 128, 10) < epochs_factor(start, 4096, 128, 10)


def test_budget_hold_trains_the_forecast_epochs_and_same_epochs_only_warns():
    same = derive_plan(_spec(), 4096, noise_curve=FLAT)
    hold = derive_plan(_spec(budget="hold"), 4096, noise_curve=FLAT)
    factor = (1000 + 4096) / (1000 + 128)
    assert same.total_iterations == math.ceil(128 * same.baseline_iterations / 4096)
    # the midpoint rule sums 2,000 equal terms of a flat curve (exact but for its roundings)
    within = float64_formula(2000 + 10)
    assert same.forecast.factor == pytest.approx(factor, rel=within)
    assert hold.total_epochs == pytest.approx(factor * same.total_epochs, rel=within)
    assert hold.total_iterations == math.ceil(hold.total_epochs * 60000 / 4096)
    assert hold.peak_lr == same.peak_lr and hold.warmup_epochs == same.warmup_epochs
    assert hold.lr(hold.total_iterations) <= hold.lr(same.total_iterations)  # decays over more
    symbols = [d.symbol for d in hold.derivations]
    assert {"B_noise", "f", "B_hold", "E_tot", "I"} <= set(symbols)
    assert symbols.index("f") < symbols.index("E_tot")  # derived from the forecast
    # the forecast round-trips through plan.json
    saved = json.loads(json.dumps(
        {**hold.to_dict(), "micro_batch": 1, "world_size": 1, "accumulation_steps": 4096}))
    assert RunPlan.from_dict(saved).plan == hold
    # and a run folder's plan from before B_hold (its forecast named the f = 2 batch) still reads
    saved["forecast"]["critical_batch"] = saved["forecast"].pop("holding_batch")
    assert RunPlan.from_dict(saved).plan.forecast.holding_batch == hold.forecast.holding_batch
    # below the baseline's batch, hold never shortens training
    assert derive_plan(_spec(budget="hold"), 64, noise_curve=FLAT).total_epochs == \
        same.total_epochs
    with pytest.raises(PlanError, match="date probe"):
        derive_plan(_spec(budget="hold"), 4096)


def test_a_steps_limited_baseline_is_forecast_to_need_its_steps_at_any_batch():
    """Where the LR check found twice the LR no better, B_noise is taken as 0: f = B/B0 (the
    baseline's steps at every batch, McCandlish's S = S_min), B_hold = 4/3·B0, whatever the
    fitted curve says; hold trains the baseline's steps, and plan.json keeps the verdict."""
    limited = dataclasses.replace(FLAT, lr_checked=True, steps_limited=True)
    for batch in (64, 256, 4096):
        assert epochs_factor(limited, batch, 128, 10) == pytest.approx(batch / 128)
    assert holding_batch(limited, 128, 10) == 170  # ⌊128 · 4/3⌋
    ahead = forecast(limited, 4096, 128, 10, 60000)
    assert ahead.steps == ahead.baseline_steps and ahead.loses_at_same_epochs
    assert ahead.holding_low is None and ahead.noise_at_end == FLAT(10)  # still shown
    assert holding_batch(FLAT, 128, 10) > 400  # the curve alone: (1000 + 4·128)/3
    hold = derive_plan(_spec(budget="hold"), 1024, noise_curve=limited)
    assert hold.total_iterations == hold.baseline_iterations
    rows = {d.symbol: d for d in hold.derivations}
    assert rows["f"].formula == "B / B0" and "LR check" in rows["f"].note
    saved = json.loads(json.dumps(
        {**hold.to_dict(), "micro_batch": 1, "world_size": 1, "accumulation_steps": 1024}))
    assert RunPlan.from_dict(saved).plan.noise_curve.steps_limited
    # a plan written before the LR check reads as not checked
    del saved["noise_curve"]["lr_checked"], saved["noise_curve"]["steps_limited"]
    assert not RunPlan.from_dict(saved).plan.noise_curve.lr_checked


def test_the_lr_check_compares_the_second_halves_and_marks_the_curve(tmp_path):
    records = [{"step": s, "loss": 10.0 - s} for s in range(2, 11, 2)] + [{"step": 12, "eval": 1}]
    assert second_half_loss(records, 10) == pytest.approx((4 + 2 + 0) / 3)  # steps 6, 8, 10
    assert second_half_loss(records, 1) is None
    points = (NoisePoint(0.25, 20.0, 1.0, 20.0, 2.0), NoisePoint(0.75, 40.0, 1.0, 40.0, 1.0))
    base = {"baseline": {"batch_size": 16}, "baseline_epochs": 10.0, "steps": 90,
            "baseline_steps": 900, "epochs": 1.0, "micro_batch": 4, "world_size": 1,
            "accumulation_steps": 4, "wall_seconds": 9.0, "points": points}
    unchecked = Probe(**base)
    gains = Probe(**base, lr_check=LRCheck(2.0, loss=0.9, baseline_loss=1.0))
    flat = Probe(**base, lr_check=LRCheck(2.0, loss=1.0, baseline_loss=1.0))
    diverged = Probe(**base, lr_check=LRCheck(2.0, loss=None, baseline_loss=1.0))
    assert diverged.curve.steps_limited
    diverged.write(tmp_path / "diverged.json")
    assert Probe.read(tmp_path / "diverged.json") == diverged
    assert not unchecked.curve.lr_checked and not unchecked.curve.steps_limited
    assert gains.curve.lr_checked and not gains.curve.steps_limited
    assert flat.curve.steps_limited  # not lower is not faster
    assert (gains.curve.a, gains.curve.beta) == (flat.curve.a, flat.curve.beta)
    flat.write(tmp_path / "probe.json")
    assert Probe.read(tmp_path / "probe.json") == flat
    data = json.loads((tmp_path / "probe.json").read_text())
    data["lr_check"]["factor"] = 1.0
    (tmp_path / "probe.json").write_text(json.dumps(data))
    with pytest.raises(DateError, match="lr_check: factor must be above 1"):
        Probe.read(tmp_path / "probe.json")


def test_an_lr_check_run_that_diverges_reads_steps_limited(tmp_path, monkeypatch):
    """The check's run trains the probe's spec at twice its LR (the probe's own config left as
    it was); a run that stops on a non-finite loss is a larger LR that did not train faster, not
    a failed probe; a stop by signal is passed on."""
    from date_engine.train import probe as probing
    from date_engine.train.config import RunConfig

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": 3.0 - 0.1 * s}) + "\n" for s in range(1, 11)))
    spec = spec_with("lenet-mnist", ["baseline.lr=0.1"])
    probed = RunConfig(spec=spec.model_dump(mode="json", exclude_none=True), spec_path="s.yaml",
                       recipe="lenet-mnist", batch=1024, world_size=1, micro_batch=512,
                       output_dir=str(run), measure_pairs=True, max_seconds=60.0)
    recipe = get_recipe("lenet-mnist")
    asked = []

    def launch(config, options):
        asked.append(config)
        return codes.pop(0)

    monkeypatch.setattr(probing, "launch", launch)
    codes = [3, 143]
    check, code = probing._lr_check(probed, recipe, 10, tmp_path / "lr-check",
                                    probing.ProbeOptions())
    assert code == 0 and check.loss is None and not check.gains
    assert check.baseline_loss == pytest.approx(second_half_loss(
        [{"step": s, "loss": 3.0 - 0.1 * s} for s in range(1, 11)], 10))
    sent = asked[0]
    assert sent.spec["baseline"]["lr"] == 0.2 and probed.spec["baseline"]["lr"] == 0.1
    assert sent.run["baseline_lr"] == sent.run["peak_lr"] == 0.2  # the run derived at 2× the LR
    assert (sent.max_steps, sent.max_seconds, sent.measure_pairs, sent.measure_noise) == (
        10, None, False, False)
    assert sent.output_dir == str(tmp_path / "lr-check") and not sent.resume
    assert probing._lr_check(probed, recipe, 10, tmp_path / "lr-check",
                             probing.ProbeOptions()) == (None, 143)


def test_date_probe_prints_the_lr_check_and_its_forecast(stored_probe):
    """What `date probe` prints of a probe.json: the check's two losses and verdict, and a
    forecast table that follows it (bert-mlm's stored probe, where twice the LR trained no
    faster: every batch loses at the baseline's epochs; the same probe unchecked: the noise
    scale's forecast, and a pointer to the check)."""
    from rich.console import Console

    from date_engine.view.probe import render_probe

    def shown(probe):
        console = Console(width=200, record=True)
        console.print(render_probe(probe, "t"))
        return " ".join(console.export_text().split())

    probe = Probe.read(stored_probe("probes-lrcheck/bert-mlm-seed0"))
    words = shown(probe)
    assert (f"end at a loss of {probe.lr_check.loss:.4g} against "
            f"{probe.lr_check.baseline_loss:.4g}: a larger LR does not train faster") in words
    assert "holds" not in words.split("Forecast", 1)[1]  # 2× already loses
    assert "B_hold ≈ 42:" in words
    lost = shown(dataclasses.replace(probe, lr_check=LRCheck(2.0, None, 6.0)))
    assert "stopped on a non-finite loss (6 at the baseline's)" in lost
    assert "does not train faster" in lost
    unchecked = shown(dataclasses.replace(probe, lr_check=None))
    assert "LR check: not run" in unchecked and "│ holds │" in unchecked


def test_probe_points_are_the_ratio_of_stretch_means():
    # the forecast's scale from the pairs' |G|², B_simple beside it from the single steps'
    records = [{"epoch": e, "grad_sq_pair": g, "grad_sq": 2 * g, "grad_trace": t, "loss": 1.0}
               for e, g, t in ((0.1, 1.0, 10.0), (0.2, 3.0, 30.0), (0.3, 1.0, 50.0),
                               (0.4, 1.0, 70.0))]
    points = probe_points(records + [{"epoch": 0.5, "loss": 1.0}], 2)
    assert [p.noise_scale for p in points] == [pytest.approx(40 / 4), pytest.approx(60 / 1)]
    assert [p.simple_scale for p in points] == [pytest.approx(40 / 8), pytest.approx(60 / 2)]
    assert [p.epoch for p in points] == [pytest.approx(0.1), pytest.approx(0.3)]
    # a run that measured no pairs (date scale's own records) gives no points
    assert probe_points([{k: v for k, v in r.items() if k != "grad_sq_pair"} for r in records],
                        2) == ()


def test_probe_json_is_read_back_or_refused_in_one_sentence(tmp_path):
    probe = Probe(baseline={"batch_size": 16}, baseline_epochs=10.0, steps=90, baseline_steps=900,
                  epochs=1.0, micro_batch=4, world_size=1, accumulation_steps=4, wall_seconds=9.0,
                  points=(NoisePoint(0.25, 20.0, 1.0, 20.0, 2.0),
                          NoisePoint(0.75, 40.0, 1.0, 40.0, 1.0)))
    path = tmp_path / "probe.json"
    probe.write(path)
    back = Probe.read(path)
    assert back == probe and back.curve == probe.curve and back.share == pytest.approx(0.1)
    assert back.matching({"batch_size": 16}) is back
    with pytest.raises(DateError, match="another baseline .batch_size: 16 there, 32 here"):
        back.matching({"batch_size": 32})
    for text, fix in (("{", "not a probe written by date probe"),
                      ('{"format": 99}', "not a probe.json of this version"),
                      # a probe of B_simple alone, before pairs were measured
                      ('{"format": 1, "points": []}', "not a probe.json of this version"),
                      (f'{{"format": {PROBE_FORMAT}, "points": []}}', "field required")):
        path.write_text(text)
        with pytest.raises(DateError, match=fix):
            Probe.read(path)
    with pytest.raises(DateError, match="no such file; run date probe"):
        Probe.read(tmp_path / "missing.json")


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe") / "p"
    result = date("probe", SPEC, *PROBE, "-o", folder, "--set", "train.log_every=2",
                  idle_s=8)
    assert result.returncode == 0, result.stdout + result.stderr
    return folder, result


@pytest.mark.slow
def test_date_probe_trains_a_share_of_the_baseline_and_writes_its_forecast(probed):
    folder, result = probed
    probe = Probe.read(folder / "probe.json")
    assert probe.steps == math.ceil(0.1 * probe.baseline_steps)
    assert probe.micro_batch * probe.accumulation_steps == 16 and probe.accumulation_steps == 2
    assert len(probe.points) == 4  # one may be unmeasurable (mean |G|² ≤ 0): kept as None
    assert sum(p.noise_scale is not None and p.noise_scale > 0 for p in probe.points) >= 2
    assert (folder / "probe.png").stat().st_size > 0
    records = [json.loads(x) for x in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all("noise_scale" in r and "grad_sq_pair" in r for r in records)
    assert any(p.simple_scale is not None for p in probe.points)
    words = " ".join(result.stdout.split())
    assert "the largest batch expected to hold accuracy in the baseline's epochs" in words
    assert "date plan" in words
    # how long its steps should take, said at the first logged step of its run and of its LR check
    assert words.count(f"more for the {probe.steps} steps, at the speed of the first") == 2
    # the LR check: the same steps at twice the LR, from the same start, losses compared
    check = RunFolder(folder / "lr-check")
    assert check.read_summary().steps == probe.steps
    assert check.read_plan().plan.peak_lr == pytest.approx(2 * RunFolder(
        folder / "run").read_plan().plan.peak_lr)
    assert probe.lr_check.factor == 2.0
    assert probe.lr_check.loss == pytest.approx(second_half_loss(check.read_metrics(),
                                                                 probe.steps))
    assert probe.lr_check.baseline_loss == pytest.approx(
        second_half_loss(RunFolder(folder / "run").read_metrics(), probe.steps))
    assert probe.curve.lr_checked and "LR check: at 2× the LR the probe's steps" in words
    # the folder now holds a probe: a second one into it is refused before training
    again = date("probe", SPEC, *SHORT, "-o", folder)
    assert again.returncode == 2 and "already holds a finished probe" in again.stderr
    assert "--probe" in again.stderr  # and says how to use it


@pytest.mark.slow
def test_an_interrupted_probe_is_continued_by_the_same_command(probed, tmp_path):
    """A probe stopped by SIGTERM once left its folder refused ("already holds a probe") with
    nothing in it to use; the same command now continues its training from the checkpoint the
    signal wrote, to the probe an uninterrupted one writes. Its output is one line of what it
    trains and the probe's table, not the inner run's plan and summary."""
    import signal

    from tests.runs import finish, start
    from tests.test_faults import logged_steps, wait_for

    folder = tmp_path / "p"
    args = ["probe", SPEC, *PROBE, "-o", folder, "--set", "train.log_every=2"]
    first = start(*args)
    wait_for(lambda: logged_steps(folder / "run") >= 3, what="three logged steps")
    first.send_signal(signal.SIGTERM)
    _, err = finish(first)
    assert first.returncode == 143 and "Run the same command again to continue" in err, err
    assert not (folder / "probe.json").exists() and list((folder / "run" / "checkpoints").iterdir())
    again = date(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "continuing the interrupted probe" in again.stderr
    got, want = Probe.read(folder / "probe.json"), Probe.read(probed[0] / "probe.json")
    assert got.steps == want.steps and len(got.points) == len(want.points)
    # the same training, resumed bit for bit, pairs of steps included: the checkpoint kept the
    # gradient the first product after the resume needs
    assert got.points == want.points
    assert "training the first" in again.stdout and "Derived" not in again.stdout
    assert "Summary" not in again.stdout


@pytest.mark.slow
def test_a_probe_stopped_in_its_lr_check_continues_there(probed, tmp_path):
    """SIGTERM during the LR check leaves a checkpoint there; the same command continues the
    check without training the probe's own run again, to the probe an uninterrupted one
    writes."""
    import signal

    from tests.runs import finish, start
    from tests.test_faults import logged_steps, wait_for

    folder = tmp_path / "p"
    args = ["probe", SPEC, *PROBE, "-o", folder, "--set", "train.log_every=2",
            "--set", "train.checkpoint_every=2"]
    first = start(*args)
    wait_for(lambda: logged_steps(folder / "lr-check") >= 3, what="three steps of the LR check")
    first.send_signal(signal.SIGTERM)
    _, err = finish(first)
    assert first.returncode == 143 and "Run the same command again to continue" in err, err
    trained = (folder / "run" / "metrics.jsonl").read_bytes()
    again = date(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (folder / "run" / "metrics.jsonl").read_bytes() == trained  # not trained again
    got, want = Probe.read(folder / "probe.json"), Probe.read(probed[0] / "probe.json")
    # the same command with the same threads (tests/conftest.py), continued bit for bit
    assert got.lr_check.loss == want.lr_check.loss
    assert got.lr_check.baseline_loss == want.lr_check.baseline_loss


@pytest.mark.slow
def test_plan_with_the_probe_forecasts_and_warns(probed):
    folder, _ = probed
    probe = Probe.read(folder / "probe.json")
    edge = forecast(probe.curve, 16, 16, probe.baseline_epochs, 1437).holding_batch
    beyond = 16 * 2 ** math.ceil(math.log2(edge / 16) + 1)
    out = date("plan", SPEC, *SHORT, "--batch", beyond, "--probe", folder / "probe.json")
    assert out.returncode == 0, out.stderr
    words = " ".join(out.stdout.split())  # the console wraps lines
    assert "Forecast" in words and f"at batch {beyond:,}, beyond B_hold ≈ {edge:,}" in words
    assert "--budget hold trains" in words and "--budget ramp grows the batch" in words
    hold = date("plan", SPEC, *SHORT, "--batch", beyond, "--probe", folder / "probe.json",
                "--budget", "hold", "--json")
    plan = json.loads(hold.stdout)
    assert plan["budget"] == "hold" and plan["forecast"]["factor"] > 1
    assert plan["total_epochs"] == pytest.approx(plan["forecast"]["epochs"])
    other = date("plan", SPEC, *SHORT, "--batch", beyond, "--probe", folder / "probe.json",
                 "--set", "baseline.lr=0.01")
    assert other.returncode == 2 and "another baseline (lr" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_forecast_says_what_to_do(probed):
    """Within B_hold the plan says the baseline's epochs hold, as surely as B_hold's range allows;
    a ramp that plans more steps than the baseline's epochs says so; the forecast says how far
    past the probe its curve reaches."""
    folder, _ = probed
    probe = Probe.read(folder / "probe.json")
    e0 = probe.baseline_epochs
    edge = forecast(probe.curve, 16, 16, e0, 1437).holding_batch
    within = 16 * 2 ** max(0, math.floor(math.log2(edge / 16)))
    out = date("plan", SPEC, *SHORT, "--batch", within, "--probe", folder / "probe.json")
    words = " ".join(out.stdout.split())
    ahead = json.loads(date("plan", SPEC, *SHORT, "--batch", within, "--probe",
                            folder / "probe.json", "--json").stdout)["forecast"]
    low, high = ahead["holding_low"], ahead["holding_high"]
    if low is None:  # too few points to measure the spread
        assert f"batch {within:,} is within B_hold ≈ {edge:,}" in words
    elif within <= low:
        assert f"batch {within:,} is below B_hold's whole range ({low:,}–{high:,})" in words
        assert ("no budget is needed" in words) == (high <= 2 * low)
    else:
        assert f"batch {within:,} is within B_hold ≈ {edge:,} but inside its range" in words
    assert f"extrapolated {e0 / probe.curve.last:.3g}× past it" in words
    ramp = date("plan", SPEC, *SHORT, "--batch", within, "--probe", folder / "probe.json",
                "--budget", "ramp", "--json")
    steps = json.loads(ramp.stdout)["total_iterations"]
    same = math.ceil(json.loads(ramp.stdout)["baseline_iterations"] * 16 / within)
    shown = " ".join(date("plan", SPEC, *SHORT, "--batch", within, "--probe",
                          folder / "probe.json", "--budget", "ramp").stdout.split())
    assert (f"this ramp plans {steps:,} steps, more than the {same:,}" in shown) == (steps > same)


@pytest.mark.slow
def test_sweep_report_puts_the_forecast_beside_the_cells(probed, tmp_path):
    folder, _ = probed
    probe = Probe.read(folder / "probe.json")
    out = date("sweep", SPEC, *SHORT, "--batches", "64,256", "--report-only", "--probe",
               folder / "probe.json", "-o", tmp_path / "sweep")
    assert out.returncode == 0, out.stderr
    report = (tmp_path / "sweep" / "report.md").read_text()
    assert "## Forecast against the result" in report
    for batch in (64, 256):
        ahead = forecast(probe.curve, batch, 16, probe.baseline_epochs, 1437)
        assert f"| {batch} | {ahead.factor:.3g} | {ahead.epochs:.3g} |" in report
    forecasts = json.loads((tmp_path / "sweep" / "results.json").read_text())["settings"]
    assert [row["batch"] for row in forecasts["forecast"]["batches"]] == [64, 256]


@pytest.mark.slow
def test_a_time_budget_stops_the_run_with_a_checkpoint_to_resume(tmp_path):
    """What --budget-minutes rests on: RunConfig.max_seconds stops training, checkpointed."""
    import contextlib
    import io

    from date_engine.runfolder import RunFolder
    from date_engine.spec import load_spec
    from date_engine.train.config import RunConfig
    from date_engine.train.trainer import run

    spec = load_spec(SPEC, ["baseline.epochs=10", "baseline.warmup_epochs=0.5"])
    out = tmp_path / "run"
    config = RunConfig(spec=spec.model_dump(mode="json", exclude_none=True), spec_path=SPEC,
                       recipe="lenet-digits", batch=16, world_size=1, micro_batch=8,
                       output_dir=str(out), max_seconds=0.5)
    with contextlib.redirect_stdout(io.StringIO()):
        assert run(config) == 0
    summary = RunFolder(out).read_summary()
    assert summary.stopped_by == "time-limit" and 0 < summary.steps < summary.total_steps
    newest = sorted((out / "checkpoints").glob("step-*.pt"))[-1]
    assert newest.name == f"step-{summary.steps:08d}.pt"
