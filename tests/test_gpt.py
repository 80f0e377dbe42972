"""gpt-char: nanoGPT's character-level GPT, its corpus (one input.txt, split 90/10 by position)
and the recipe trained through `date scale` on a small corpus in that format."""

from __future__ import annotations

import json

import pytest
import torch

from date_engine.data.prepare import prepare
from date_engine.data.text import load_chars
from date_engine.errors import DataError, DataMissing
from tests.conftest import RECIPES
from tests.runs import date
from tests.test_data import _shakespeare_archive

TEXT = "To be, or not to be: that is the question.\n" * 40 + "Zounds!\n"


def test_prepare_shakespeare_chars_writes_the_works_as_one_input_txt(tmp_path):
    archive = _shakespeare_archive(tmp_path, "*** START OF THIS PROJECT ***\nTo be, or not.\n"
                                   "  Exit.\n*** END ***\nlicence text\n")
    message = prepare("shakespeare-chars", tmp_path / "chars", archive)
    text = (tmp_path / "chars" / "input.txt").read_text()
    assert text == "To be, or not.\n  Exit.\n" * 3  # bodies as written, header and licence out
    cut = int(len(text) * 0.9)
    assert f"{(cut - 1) // 64} training windows" in message
    assert f"model.vocab {len(set(text[:cut])) + 1}" in message


def test_the_corpus_splits_by_position_and_its_vocabulary_is_the_training_parts(tmp_path):
    (tmp_path / "input.txt").write_text(TEXT)
    vocab, ids = load_chars(tmp_path)
    cut = int(len(TEXT) * 0.9)
    assert (len(ids["train"]), len(ids["valid"])) == (cut, len(TEXT) - cut)
    assert vocab.words == ["<unk>", *sorted(set(TEXT[:cut]))]
    assert "".join(vocab.words[i] for i in ids["train"].tolist()) == TEXT[:cut]
    unseen = [i for c, i in zip(TEXT[cut:], ids["valid"].tolist()) if c not in TEXT[:cut]]
    assert unseen and set(unseen) == {0}  # "Z" and "!" only validate: <unk>


def test_a_missing_or_unreadable_corpus_says_what_to_do(tmp_path):
    with pytest.raises(DataMissing, match="date data prepare shakespeare-chars"):
        load_chars(tmp_path)
    (tmp_path / "input.txt").write_bytes(b"\xff\xfe bad")
    with pytest.raises(DataError, match="not UTF-8"):
        load_chars(tmp_path)


def test_the_gpt_is_causal_and_its_output_layer_is_the_token_embedding():
    from date_engine.models.gpt import GPT

    torch.manual_seed(0)
    model = GPT(vocab=20, block=16, dim=32, layers=3, heads=4).eval()
    assert model.head.weight is model.tokens.weight
    assert all(not n.endswith("bias") for n, _ in model.named_parameters())  # bias=False
    ids = torch.randint(0, 20, (2, 16))
    changed = ids.clone()
    changed[:, 9:] = (changed[:, 9:] + 1) % 20
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert torch.equal(a[:, :9], b[:, :9])  # a later character changes no earlier prediction
    assert not torch.equal(a[:, 9:], b[:, 9:])
    with pytest.raises(ValueError, match="longer than the context"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_the_projections_start_as_nanogpts():
    """Output projections from N(0, 0.02²/(2·layers)), the rest from N(0, 0.02²): their spreads
    4,096 draws apart, far beyond the draws' noise (a standard deviation estimated from n draws
    has relative error 1/√(2n) ≈ 1.1%)."""
    from date_engine.models.gpt import GPT

    torch.manual_seed(0)
    model = GPT(vocab=64, block=16, dim=64, layers=8, heads=4)
    block = model.decoder.blocks[0]
    small = 0.02 / 16 ** 0.5
    # bound: 6σ of a standard deviation estimated from 4,096 (proj) and 16,384 (mlp) draws
    assert block.proj.weight.std().item() == pytest.approx(small, rel=6 / (2 * 4096) ** 0.5)
    assert block.mlp[2].weight.std().item() == pytest.approx(small, rel=6 / (2 * 16384) ** 0.5)
    assert block.qkv.weight.std().item() == pytest.approx(0.02, rel=6 / (2 * 12288) ** 0.5)


def test_gpt_char_trains_through_date_scale_and_reports_validation_loss(tmp_path):
    """The shipped spec on a small corpus in its format: a few optimizer steps of the real loader,
    model, loss and metric; the loss per character is finite and below a uniform guess's."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "input.txt").write_text(TEXT * 3)
    vocab, ids = load_chars(data)
    vocab, windows = len(vocab), (len(ids["train"]) - 1) // 64
    out = tmp_path / "run"
    done = date("scale", RECIPES / "gpt-char.yaml", "--batch", 4, "--set", f"train.data_dir={data}",
         "--set", f"baseline.dataset_size={windows}", "--set", "baseline.batch_size=4", "--set",
         "baseline.iterations=6", "--set", "baseline.warmup_epochs=0.08", "--set",
         "model.dim=32", "--set", "model.layers=2", "--set", f"model.vocab={vocab}", "--set",
         "model.eval_windows=8", "-o", out)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metric_name"] == "val_loss"
    assert 0 < summary["metric"] < torch.log(torch.tensor(float(vocab))).item()
    assert summary["steps"] == 6


@pytest.mark.slow
def test_the_hf_gpt_example_trains_the_baseline_and_the_plan_at_8x(tmp_path, monkeypatch):
    """examples/hf_gpt_char.py as a user runs it, on a small corpus in the recipe's format: HF's
    Trainer on nanoGPT's arguments, then DateTrainer at 8× from the baseline those arguments
    describe (baseline_from_hf); both report a finite validation loss. With --probe DateProbe
    measures the baseline's first half and writes the probe.json the forecast reads."""
    pytest.importorskip("transformers")
    import sys

    from tests.conftest import ROOT

    (tmp_path / "input.txt").write_text(TEXT * 20)
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    sys.modules.pop("hf_gpt_char", None)
    import hf_gpt_char

    losses = hf_gpt_char.main(["--data", str(tmp_path), "--steps", "16"])
    assert set(losses) == {"baseline", "scaled"}
    assert all(0 < v < 5 for v in losses.values())
    probed = hf_gpt_char.main(["--data", str(tmp_path), "--steps", "40", "--scaled-only",
                               "--probe", str(tmp_path / "probe.json"), "--probe-share", "0.5"])
    assert set(probed) == {"scaled"}
    from date_engine.probe import Probe

    written = Probe.read(tmp_path / "probe.json")
    assert (written.steps, written.baseline_steps, written.accumulation_steps) == (20, 40, 2)


@pytest.mark.slow
def test_gpt_char_at_64x_on_two_processes_a_dry_run_and_legws_limit(tmp_path):
    """At 768 (64×) in the baseline's tokens LEGW's warmup would outlast training: refused in one
    sentence naming the largest batch it fits; with a constant warmup the recipe dry-runs on 2
    processes (no corpus needed: generated characters)."""
    refused = date("scale", RECIPES / "gpt-char.yaml", "--batch", 768, "--nproc", 2, "--dry-run",
                   "-o", tmp_path / "a")
    assert refused.returncode == 2 and "LEGW fits up to batch 240" in refused.stderr
    ran = date("scale", RECIPES / "gpt-char.yaml", "--batch", 768, "--nproc", 2, "--dry-run",
               "--set", "date.warmup=constant", "-o", tmp_path / "b")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "batch 12 → 768 (k = 64)" in ran.stdout


def test_a_sweep_forecasts_a_batch_its_spec_refuses_from_the_hold_plan(stored_probe):
    """At 32× LEGW's warmup outlasts gpt-char's 0.34 epochs, so the spec's own plan is refused;
    a sweep of --budgets hold still records the probe's forecast there (it does not depend on the
    budget), the one `date plan --budget hold` prints."""
    from date_engine.errors import PlanError
    from date_engine.forecast import forecast
    from date_engine.planning import plan_for
    from date_engine.probe import Probe
    from date_engine.recipes import get_recipe
    from date_engine.spec import load_spec
    from date_engine.sweep import sweep_forecast

    path = stored_probe("probes/gpt-char")
    spec = load_spec(RECIPES / "gpt-char.yaml", [f"date.probe={path}"])
    recipe = get_recipe("gpt-char")
    with pytest.raises(PlanError, match="LEGW fits up to batch"):
        plan_for(spec, 384, devices=1, recipe=recipe)
    rows = sweep_forecast(spec, [96, 384], 1, recipe)["batches"]
    probe, base = Probe.read(path), spec.baseline
    e0 = base.iterations * base.batch_size / base.dataset_size
    for row in rows:
        ahead = forecast(probe.curve, row["batch"], base.batch_size, e0, base.dataset_size)
        assert (row["factor"], row["steps"]) == (ahead.factor, ahead.steps)
    assert [row["expected"] for row in rows] == ["loses", "loses"]
