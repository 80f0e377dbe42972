"""The README's commands and examples are the ones that work."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def _bash_blocks(text):
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_ci_runs_the_readme_test_command():
    test_commands = [b.strip() for b in _bash_blocks(README) if "pytest" in b]
    assert len(test_commands) == 1, "README shows one test command"
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_commands[0] in ci


def test_readme_main_command_is_a_shipped_recipe():
    main = [b.strip() for b in _bash_blocks(README) if "pytest" not in b][0]
    recipe = re.search(r"date (?:plan|scale) (\S+)", main).group(1)
    assert (ROOT / recipe).is_file()


def test_readme_python_example_matches_its_comments():
    block = re.search(r"```python\n(.*?)```", README, flags=re.S).group(1)
    setup = block.split("for step")[0].replace("recipes/", str(ROOT / "recipes") + "/")
    scope: dict = {}
    exec(setup.split("plan.peak_lr,")[0], scope)
    plan, split = scope["plan"], scope["split"]
    claimed = re.search(r"# (.*)", block.split("plan.peak_lr,")[1]).group(1)
    shown = [float(x) for x in claimed.split(", ")]
    actual = [plan.peak_lr, plan.warmup_epochs, plan.total_iterations, split.accumulation_steps]
    assert [round(a, 7) for a in actual] == shown


def test_example_script_runs():
    out = subprocess.run(
        [sys.executable, "examples/plan_in_python.py", "recipes/lenet-mnist.yaml", "8192"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )
    from date_engine import derive_plan, load_spec

    plan = derive_plan(load_spec(ROOT / "recipes/lenet-mnist.yaml"), 8192)
    assert f"peak lr = {plan.peak_lr:.5g}" in out.stdout and "220 steps" in out.stdout


def test_relative_links_in_the_docs_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


# ------------------------------------------------------------------ numbers the docs quote


def _section(text: str, heading: str) -> str:
    """The text from the heading that starts with ``heading`` to the next heading of its level."""
    start = text.index(heading)
    level = text[:start].rsplit("\n", 1)[-1] + heading.split(" ")[0]
    rest = text[start + len(heading):]
    end = re.search(rf"\n{re.escape(level.strip())} ", rest)
    return rest[: end.start()] if end else rest


def _tables(text: str) -> list[list[list[str]]]:
    """Every markdown table in ``text``: its body rows as lists of cell texts."""
    tables, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            tables.append([r for r in rows[1:] if not set("".join(r)) <= set("-: ")])
            rows = []
    return tables


def _number(cell: str) -> float:
    return float(re.match(r"\**([−+-]?[\d,.]+)", cell).group(1).replace("−", "-")
                 .replace(",", ""))


def _sweep(link_cell: str) -> dict:
    """results.json of the sweep whose report the cell links to."""
    import json

    report = re.search(r"\]\(([^)]+)/report\.md\)", link_cell).group(1)
    return json.loads((ROOT / report / "results.json").read_text())["summary"]


def _group(summary: dict, scheme: str, batch: int) -> dict:
    return next(g for g in summary["groups"] if g["scheme"] == scheme and g["batch"] == batch)


def test_readmes_rule_table_is_what_the_plan_derives():
    """Each row of the default rule's table, at k = 16, against derive_plan."""
    from date_engine import parse_spec
    from date_engine.forecast import NoiseCurve
    from date_engine.plan import derive_plan

    table = _tables(_section(README, "## The default rule is per optimizer family"))[0]
    exponents = {"k·η0": 1.0, "k^0.75·η0": 0.75, "√k·η0": 0.5}
    seen = set()
    for names, peak, also in table:
        for name in (n.strip() for n in names.split(",")):
            raw = {"baseline": {"batch_size": 16, "lr": 1e-3, "warmup_epochs": 0.1, "epochs": 10,
                                "dataset_size": 1000, "optimizer": {"name": name}}}
            if name == "adamw":
                raw["baseline"]["optimizer"]["weight_decay"] = 0.01
            plan = derive_plan(parse_spec(raw), 256)
            plain, _, limited = peak.partition("; ")
            assert plan.peak_lr == pytest.approx(16 ** exponents[plain] * 1e-3), name
            if limited:  # "√k·η0 where a probe reads the baseline steps-limited"
                curve = NoiseCurve(a=100.0, beta=0.0, first=0.1, last=1.0, lr_checked=True,
                                   steps_limited=True)
                checked = derive_plan(parse_spec(raw), 256, noise_curve=curve)
                want = exponents[limited.split(" where ")[0]]
                assert checked.peak_lr == pytest.approx(16 ** want * 1e-3), name
                if name == "adamw":
                    assert checked.optimizer.options["weight_decay"] == \
                        pytest.approx(0.01 * 16 ** (1 - want))
            options = plan.optimizer.options
            if "α^k" in also and name == "rmsprop":
                assert options["alpha"] == pytest.approx(0.99**16)
            if "β2^k" in also and name in ("adam", "adamw"):
                assert options["betas"][1] == pytest.approx(0.999**16)
            if "ε/√k" in also:
                assert options["eps"] == pytest.approx(options_default(name, "eps") / 4)
            if "λ·k^0.25" in also and name == "adamw":
                assert options["weight_decay"] == pytest.approx(0.01 * 16**0.25)
            if also == "—":
                assert {k: v for k, v in options.items()} == dict(raw_defaults(name))
            seen.add(name)
    assert seen == {"sgd", "momentum", "nesterov", "rmsprop", "adam", "adamw", "adagrad"}
    paper = derive_plan(parse_spec({**raw, "date": {"rule": "paper"}}), 256)
    assert paper.peak_lr == pytest.approx(4e-3)  # √16: the paper's rule, whatever the optimizer


def options_default(name: str, key: str):
    from date_engine.catalog import entry

    return entry(name).defaults[key]


def raw_defaults(name: str) -> dict:
    from date_engine.catalog import entry

    return dict(entry(name).defaults)


def test_readmes_measured_tables_are_recomputed_from_the_sweeps():
    """The rules table and the ramp table of the README, from each sweep's results.json: Δ is the
    scheme's mean over seeds less the baseline's (accuracy points), perplexity its mean."""
    rules = _tables(_section(README, "## The default rule is per optimizer family"))[1]
    link = None
    for study, k, *cells in rules:
        link = study if "](" in study else link
        summary = _sweep(link)
        batch = int(k) * summary["baseline"]["batch"]
        for scheme, cell in zip(("paper", "date", "linear"), cells):
            group = _group(summary, scheme, batch)
            perplexity = summary["metric"] == "perplexity"
            want = round(group["mean"], 1) if perplexity else round(group["delta"], 2)
            assert _number(cell) == pytest.approx(want, abs=0.006), (link, k, scheme, cell)
    ramps = _tables(_section(README, "## `date sweep`"))[0]
    for study, batch, steps, delta in ramps:
        summary = _sweep(study)
        group = _group(summary, "date+ramp", int(batch))
        assert [int(s) for s in steps.split(", ")] == [r["steps"] for r in group["results"]]
        assert _number(delta) == pytest.approx(round(group["delta"], 2), abs=0.006)
        baseline_steps = int(re.search(r"([\d,]+) steps", study).group(1).replace(",", ""))
        assert baseline_steps == summary["baseline"]["steps"]


def _plan_lines(*args) -> list[str]:
    from typer.testing import CliRunner

    from date_engine.cli import app

    result = CliRunner().invoke(app, ["plan", *args], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    return [line.rstrip() for line in result.stdout.splitlines()]


def test_readmes_plan_excerpts_are_what_date_plan_prints():
    """Every line of the two excerpts (the default rule, then the paper's §3.6 example under
    date.rule: paper) is a line the command prints, at 100 columns."""
    section = _section(README, "## `date plan`")
    blocks = re.findall(r"```\n(DATE.*?)```", section, flags=re.S)
    assert len(blocks) == 2
    spec = str(ROOT / "recipes" / "lenet-mnist.yaml")
    for block, extra in zip(blocks, ([], ["--set", "date.rule=paper"])):
        printed = _plan_lines(spec, "--batch", "8192", *extra)
        for line in block.splitlines():
            if line.strip() != "...":
                assert line.rstrip() in printed, line
    # the numbers the prose quotes for §3.6 are the paper rule's
    from date_engine import load_spec
    from date_engine.plan import derive_plan

    paper = derive_plan(load_spec(spec, ["date.rule=paper"]), 8192)
    assert f"η = {paper.peak_lr:.4e}".replace("e-03", "e-3") in section
    assert (paper.warmup_epochs, math.floor(paper.warmup_iterations), paper.total_iterations) == \
        (16, 117, 220)


def test_quick_start_numbers_are_the_plans():
    """k, the peak LR's factor, the warmup and the steps the quick start quotes."""
    from date_engine import load_spec, resolve_plan

    spec = load_spec(ROOT / "recipes" / "lenet-digits.yaml")
    big = resolve_plan(spec, 256).plan
    base = resolve_plan(spec, 16).plan
    section = _section(README, "## Quick start")
    factor = big.peak_lr / spec.baseline.lr
    assert (f"k = 16: peak LR ×{factor:g}, warmup {base.warmup_epochs:g} → "
            f"{big.warmup_epochs:g} epochs, {base.total_iterations:,} → "
            f"{big.total_iterations:,} steps") in section
    rows = _tables(section)[0]
    assert [_number(r[2]) for r in rows] == [base.total_iterations, big.total_iterations]


def test_the_readmes_spec_block_is_a_valid_spec_with_the_defaults_it_says():
    import yaml

    from date_engine import parse_spec
    from date_engine.catalog import spec_names
    from date_engine.spec import DateSpec

    block = re.search(r"```yaml\n(.*?)```", _section(README, "## The baseline spec"),
                      flags=re.S).group(1)
    spec = parse_spec(yaml.safe_load(block))
    assert spec.date == DateSpec()  # "these are the defaults"
    names = re.search(r"optimizer: \{name: rmsprop\} # ([\w |]+), with", block).group(1)
    assert [n.strip() for n in names.split("|")] == list(spec_names())


def test_architectures_backticked_names_exist():
    """Every code name docs/architecture.md cites (`plan.derive_plan`, `Plan.lr`, `checkpoint`,
    `_fused.py`, ...) is a module, file or attribute of date_engine."""
    import dataclasses
    import importlib
    import inspect
    import pkgutil

    import date_engine

    modules = {m.name: importlib.import_module(m.name)
               for m in pkgutil.walk_packages(date_engine.__path__, "date_engine.")
               if not m.name.endswith("__main__")}
    files = {p.name for p in (ROOT / "date_engine").rglob("*")}
    namespace: dict[str, list] = {}
    for name, module in modules.items():
        namespace.setdefault(name.rsplit(".", 1)[-1], []).append(module)
        for attr, value in vars(module).items():
            namespace.setdefault(attr, []).append(value)
            if inspect.isclass(value) and value.__module__ == module.__name__:
                fields = [f.name for f in dataclasses.fields(value)] \
                    if dataclasses.is_dataclass(value) else []
                for member in [*vars(value), *getattr(value, "model_fields", {}), *fields]:
                    namespace.setdefault(member, []).append(getattr(value, member, None))

    def resolves(dotted: str) -> bool:
        first, *rest = dotted.split(".")
        for start in namespace.get(first, []):
            node = start
            for part in rest:
                fields = getattr(node, "model_fields", None)
                if fields is not None and part in fields:
                    node = fields[part].annotation
                elif dataclasses.is_dataclass(node) and \
                        part in {f.name for f in dataclasses.fields(node)}:
                    node = None  # a field: its type is not followed further
                elif hasattr(node, part):
                    node = getattr(node, part)
                else:
                    break
            else:
                return True
        return False

    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = []
    for token in set(re.findall(r"`([^`\n]+)`", text)):
        name = token.split("(")[0]
        if name.endswith((".py", "/")):
            if name.rstrip("/").split("/")[-1] not in files:
                missing.append(token)
        elif re.fullmatch(r"[A-Za-z_]\w*(\.\w+)*", name) and \
                not re.fullmatch(r"\w+\.(json|md)", name) and not resolves(name):
            missing.append(token)
    assert not missing, missing


def test_the_results_summary_quotes_the_ramp_sweeps():
    """docs/results.md's opening numbers for the ramp at 32×, from the two sweeps' results.json."""
    import json

    section = _section((ROOT / "docs" / "results.md").read_text(), "## In short")
    for study in ("lenet-mnist-ramp-pairs", "lstm-mnist-ramp-pairs"):
        summary = json.loads((ROOT / "docs" / "results" / "sweeps" / study / "results.json")
                             .read_text())["summary"]
        group = _group(summary, "date+ramp", 4096)
        steps = " and ".join(str(s) for s in sorted({r["steps"] for r in group["results"]}))
        delta = f"{group['delta']:+.2f}".replace("-", "−")
        assert f"{delta} in {steps} steps, the baseline's {summary['baseline']['steps']:,}" in \
            " ".join(section.split()), study


@pytest.mark.parametrize("heading", ["## Transformers: vit-mnist", "## Transformers: bert-mlm",
                                     "### ptb-small: the default rule at 2×"])
def test_the_study_table_is_recomputed_from_its_sweeps(heading):
    """docs/results.md's vit-mnist, bert-mlm and ptb-small tables of sweep cells (bert-mlm has two:
    the study as shipped and the first one): each row's steps, accuracies (to the two decimals
    written) and Δ from its sweep."""
    section = _section((ROOT / "docs" / "results.md").read_text(), heading)
    tables = [t for t in _tables(section) if len(t[0]) == 7 and "/report.md)" in t[0][0]]
    assert tables and sum(len(t) for t in tables) >= 3
    for study, batch, scheme, epochs, steps, accuracy, delta in (r for t in tables for r in t):
        summary = _sweep(study.replace("](results/", "](docs/results/"))  # links from docs/
        name = re.search(r"`([^`]+)`", scheme).group(1)
        group = _group(summary, name, int(batch.replace(",", "")))
        results = group["results"]
        assert [int(s) for s in steps.split(", ")] == [r["steps"] for r in results], study
        assert [float(a) for a in accuracy.split(", ")] == [round(r["metric"], 2)
                                                            for r in results], study
        assert _number(epochs) == pytest.approx(results[0]["epochs"], abs=0.06), study
        assert _number(delta) == pytest.approx(round(group["delta"], 2), abs=0.006), study


@pytest.mark.parametrize("heading, batch, seeds01, seeds23, sentence", [
    ("## Transformers: vit-mnist", 4096,
     {"baseline": "vit-mnist-rules", "date": "vit-mnist-rules", "paper": "vit-mnist-rules"},
     "vit-mnist-rules-seeds23", "rules tie: {d:.2f} against {p:.2f}, {dd:.2f} against {pd:.2f} "
     "from the four baselines' {b:.2f} — the default is ≥ the paper's rule by {diff:.2f} points"),
    ("## Transformers: bert-mlm", 1024,  # the rules sweep copied bert4-batches' date cells
     {"baseline": "bert4-batches", "date": "bert4-batches", "paper": "bert4-rules"},
     "bert4-rules-seeds23", "the default is below the paper's rule: {d:.2f} against {p:.2f}, "
     "{dd:.2f} against {pd:.2f} from the four baselines' {b:.2f} — the paper's rule ahead by "
     "{neg:.2f} points"),
])
def test_the_transformer_rules_at_32x_over_four_seeds_are_the_sweeps_means(
        heading, batch, seeds01, seeds23, sentence):
    """results.md's four-seed comparison of the default and the paper's rule at 32×: the means of
    seeds 0, 1 (``seeds01``: the sweep that trained each scheme's cells) and of seeds 2, 3 (their
    own sweep)."""
    from statistics import mean

    def cells(study: str, scheme: str) -> list[float]:
        summary = _sweep(f"[{study}](docs/results/sweeps/{study}/report.md)")
        if scheme == "baseline":
            return [r["metric"] for r in summary["baseline"]["results"]]
        return [r["metric"] for r in _group(summary, scheme, batch)["results"]]

    base, default, paper = (mean(cells(seeds01[scheme], scheme) + cells(seeds23, scheme))
                            for scheme in ("baseline", "date", "paper"))
    text = " ".join(_section((ROOT / "docs" / "results.md").read_text(), heading).split())
    assert sentence.format(d=default, p=paper, dd=default - base, pd=paper - base, b=base,
                           diff=default - paper, neg=paper - default).replace("-", "−") in text


def test_the_fashion_and_bert_rerun_numbers_are_their_files():
    """Fashion-MNIST's budgets as results.md's opening and README quote them (its budgets sweep),
    and bert-mlm's baseline on the second VM as results.md quotes it (its evaluation curves)."""
    import csv

    summary = _sweep("[s](docs/results/sweeps/fashion-lenet-budgets/report.md)")

    def delta(budget: str, batch: int) -> str:
        return f"{_group(summary, f'date+{budget}', batch)['delta']:+.2f}".replace("-", "−")

    results = " ".join((ROOT / "docs" / "results.md").read_text().split())
    assert (f"(hold {delta('hold', 2048)} and {delta('hold', 4096)}, ramp {delta('ramp', 2048)} "
            f"and {delta('ramp', 4096)}, 2 seeds;") in results
    readme = " ".join(README.split())
    assert (f"the hold lost {delta('hold', 4096)[1:]} at 32× and the ramp "
            f"{delta('ramp', 4096)[1:]}") in readme
    for name in ("baseline-vm2", "baseline16-vm2"):  # 8 and 16 epochs
        finals = []
        for seed in (0, 1):
            path = ROOT / "docs" / "results" / "bert-mlm-baseline" / f"{name}-s{seed}.csv"
            finals.append(float(list(csv.DictReader(path.open()))[-1]["masked_accuracy"]))
        assert f"**{finals[0]:.2f} and {finals[1]:.2f}**" in results


@pytest.mark.slow
def test_quick_start_accuracy_at_16x_is_what_the_command_trains(tmp_path):
    """The 16× row of the quick start, trained again: the same steps and the same test accuracy to
    within one of the 360 test images (the run is deterministic on one machine; another x86 CPU may
    round a kernel's sums otherwise). It read 96.11% after the default rule had moved it."""
    import json

    from tests.runs import date

    result = date("scale", ROOT / "recipes" / "lenet-digits.yaml", "--batch", 256, "--json",
                  "-o", tmp_path / "run",  # a thread per core, as the README's one process had
                  env={"OMP_NUM_THREADS": str(os.cpu_count())})  # (CI runs tests two at a time)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)["summary"]
    row = next(r for r in _tables(_section(README, "## Quick start"))[0] if "--batch 256" in r[0])
    assert _number(row[2]) == summary["steps"]
    assert abs(_number(row[3]) - summary["metric"]) <= 100 / 360 + 0.005, (row[3], summary)


def test_the_held_out_table_is_recomputed_from_the_probes_and_sweeps():
    """docs/noise.md's leave-one-study-out table of B_hold's constant and the sentence under it
    are what studies/holdout.py computes from the stored probes and sweeps."""
    from date_engine.forecast import HELD_OUT_MISS, HOLDING_FACTOR, PLATEAU_MISS
    from studies.holdout import (
        NOTHING_HELD,
        leave_one_out,
        nothing_held_table,
        summary,
        table,
        three_seed_studies,
    )

    section = _section((ROOT / "docs" / "noise.md").read_text(), "### Held out")
    assert table() in section
    assert summary() in section
    assert summary(three_seed_studies()) in " ".join(section.split())
    assert nothing_held_table() in section
    # the worst held-out miss `date plan` quotes under its forecast (the larger of the two
    # tables'), and its miss where none held
    worst = max(row.miss for studies in (None, three_seed_studies())
                for row in (leave_one_out(studies) if studies else leave_one_out()))
    assert round(worst, 2) == HELD_OUT_MISS
    assert round(max(s.worst_miss(HOLDING_FACTOR) for s in NOTHING_HELD), 2) == PLATEAU_MISS


def test_the_lr_checks_misses_date_plan_quotes_are_the_studies():
    """`date plan`'s "How sure" under a steps-limited probe quotes each flagged study's worst
    miss: the LR-checked probes of bert-mlm (both baselines) and of vit-mnist at 4e-3."""
    from date_engine.forecast import HOLDING_FACTOR, STEPS_LIMITED_MISSES
    from studies.holdout import lr_check_studies

    worst: dict[str, float] = {}
    for _, study in lr_check_studies():
        if any(p.curve.steps_limited for p in study.curves):
            name = study.name.split(",")[0]
            worst[name] = max(worst.get(name, 0), study.worst_miss(HOLDING_FACTOR))
    assert tuple(sorted((name, round(miss, 2)) for name, miss in worst.items())) == \
        STEPS_LIMITED_MISSES


def test_the_ptb_small_study_numbers_are_its_probe_and_sweep():
    """results.md's ptb-small study (its section, "In short") and README: the baseline's seeds and
    mean, the target, each batch's Δ, the hold budget at 8×, B_hold and its miss, and the probe's
    length, from the sweeps and probe in docs/results."""
    from date_engine.forecast import HOLDING_FACTOR
    from studies.holdout import LATER

    results = (ROOT / "docs" / "results.md").read_text()
    text = " ".join(_section(results, "### ptb-small: the default rule at 2×").split())
    short = " ".join(_section(results, "## In short").split())
    readme = " ".join(README.split())
    summary = _sweep("[s](docs/results/sweeps/ptb-small-batches/report.md)")
    seeds = [r["metric"] for r in summary["baseline"]["results"]]
    base_mean, base_steps = sum(seeds) / 2, summary["baseline"]["steps"]
    assert f"mean ({seeds[0]:.2f} and {seeds[1]:.2f}: {base_mean:.1f}," in text
    assert f"the target is {1.05 * base_mean:.1f})" in text
    (ptb,) = LATER
    probe, miss = ptb.curves[0], ptb.worst_miss(HOLDING_FACTOR)
    (holding,) = ptb.holding_batches(HOLDING_FACTOR)
    assert (f"B_hold is {holding}**, {miss:.2f}× the {ptb.largest_held} that held and just "
            f"above the {ptb.smallest_lost} that lost (the probe: {probe.steps} steps, "
            f"{probe.epochs:.1f} epochs;") in text
    hold = _group(_sweep("[s](docs/results/sweeps/ptb-small-budgets/report.md)"), "date+hold", 160)
    steps = hold["results"][0]["steps"]
    assert (f"({steps:,} steps, {base_steps / steps:.1f}× fewer than the baseline's "
            f"{base_steps:,})") in text
    assert f"{hold['delta']:+.2f} ({hold['delta'] / base_mean:.1%}, inside the 5%)" in text
    assert (f"`--budget hold` held on the mean, {hold['delta']:+.2f} perplexity in {steps:,} "
            "steps)") in readme
    deltas = [f"{_group(summary, 'date', b)['delta']:+.2f}".replace("-", "−")
              for b in (40, 80, 160)]
    assert (f"held at 2× and 4× in the baseline's epochs ({deltas[0]} and {deltas[1]} perplexity, "
            f"below the baseline's {base_mean:.1f}) and lost at 8× ({deltas[2]}); the probe's "
            f"B_hold ({holding}) was {miss:.2f}× the batch that held") in short
    assert f"B_hold ({holding}) was {miss:.2f}× the batch that held (2 seeds;" in readme


def test_the_plateau_check_that_was_not_shipped_is_its_probes():
    """docs/noise.md's negative result: each probe's share of loss shed over its second half, the
    threshold between the studies where nothing held and the others, and ptb-small (held out)
    below it though a larger batch held there."""
    from date_engine.forecast import HOLDING_FACTOR
    from studies.holdout import LATER, loss_fall, plateau_table, plateau_threshold

    section = " ".join(_section((ROOT / "docs" / "noise.md").read_text(), "### Held out").split())
    assert " ".join(plateau_table().split()) in section
    threshold = plateau_threshold()
    assert f"A threshold between the two, {threshold:.1%} (the geometric mean" in section
    (ptb,) = LATER
    assert ptb.largest_held > ptb.baseline_batch and loss_fall(ptb.curves[0]) < threshold
    assert f"is flagged too ({loss_fall(ptb.curves[0]):.1%})" in section
    miss, (holding,) = ptb.worst_miss(HOLDING_FACTOR), ptb.holding_batches(HOLDING_FACTOR)
    assert f"({miss:.2f}×): a language model's loss" in section
    assert f"B_hold ({holding}) is {miss:.2f}× the {ptb.largest_held} that held" in section


def test_the_lr_check_table_is_the_stored_probes():
    """docs/noise.md's LR check: each probe's two losses, its verdict and B_hold with and without
    it, the sentences under the table, from docs/results/probes-lrcheck and the sweeps; and the
    verdict is what the shipped code makes of each probe.json (the sign of the difference)."""
    from studies.holdout import (
        HELD_OUT_CHECK,
        HOT_CHECK,
        NOTHING_HELD,
        lr_check_studies,
        lr_check_summary,
        lr_check_table,
        lr_ratio,
        lr_ratio_sentence,
    )

    section = " ".join(_section((ROOT / "docs" / "noise.md").read_text(),
                                "### The LR check").split())
    for text in (lr_check_table(), lr_check_summary(), lr_ratio_sentence()):
        assert " ".join(text.split()) in section
    for label, study in lr_check_studies():
        assert len(study.curves) == 3
        for probe in study.curves:
            assert probe.curve.lr_checked
            assert probe.curve.steps_limited == (lr_ratio(probe) >= 1)
            # flagged where no larger batch held, on the held-out baseline at its best LR and
            # on the one at 8× its study's LR
            assert probe.curve.steps_limited == (
                study.name in {s.name for s in NOTHING_HELD} or label in (HELD_OUT_CHECK,
                                                                         HOT_CHECK))
    # results.md's bert-mlm section quotes the ranges of the change in loss
    rows = lr_check_studies()
    change = {label: [lr_ratio(p) - 1 for p in s.curves] for label, s in rows
              if s.name.startswith("bert-mlm") or label in (HELD_OUT_CHECK, HOT_CHECK)}
    others = [abs(lr_ratio(p) - 1) for label, s in rows
              if not s.name.startswith("bert-mlm") and label not in (HELD_OUT_CHECK, HOT_CHECK)
              for p in s.curves]
    text = " ".join(_section((ROOT / "docs" / "results.md").read_text(),
                             "## Transformers: bert-mlm").split())
    def span(values: list[float], digits: int = 1) -> str:
        return f"{100 * min(values):.1f}–{100 * max(values):.{digits}f}%"

    assert (f"is {span(change[''])} higher at 2e-3 than at 1e-3, {span(change['16 epochs'])} from "
            f"the 16-epoch baseline; every other study's is {span(others, 0)} lower, except "
            f"vit-mnist's from its baseline at its best LR, {span(change[HELD_OUT_CHECK], 0)} "
            f"higher, where 2× held, and lenet-mnist's from 8e-3, "
            f"{100 * min(change[HOT_CHECK]):.0f}–{100 * max(change[HOT_CHECK]):.0f}% "
            "higher") in text


def test_the_steps_limited_hold_at_2x_is_its_sweep():
    """results.md's table of bert-mlm's hold at 2× from a steps-limited probe, with the rule's LR
    and with the baseline's, row by row from the sweep's results.json."""
    text = _section((ROOT / "docs" / "results.md").read_text(),
                    "### The LR check's forecast at 2×")
    rows = _tables(text)[0]
    summary = _sweep(rows[0][1].replace("](results/", "](docs/results/"))
    base = summary["baseline"]["results"]
    assert rows[0][5] == ", ".join(f"{r['metric']:.2f}" for r in base)
    assert rows[0][8] == ", ".join(f"{r['steps_to_target']:,}" for r in base)
    for row, (scheme, batch) in zip(rows[1:], (("date+hold", 64), ("none+hold", 64),
                                              ("none+hold", 256))):
        own = _sweep(row[1].replace("](results/", "](docs/results/")) if "](" in row[1] else summary
        assert own["baseline"]["results"] == base  # the same baseline cells
        group = _group(own, scheme, batch)
        results = group["results"]
        assert _number(row[4]) == results[0]["steps"] == base[0]["steps"]  # the baseline's steps
        assert row[5] == ", ".join(f"{r['metric']:.2f}" for r in results)
        assert row[6] == f"{group['delta']:+.2f}".replace("-", "−")
        assert row[7] == ("✓" if group["holds"] else "✗")
        reached = [r["steps_to_target"] for r in results]
        assert row[8] == ("not reached" if not any(reached) else
                          ", ".join(f"{s:,}" for s in reached))
    held = _group(summary, "none+hold", 64)
    lo, hi = sorted(r["steps_to_target"] for r in held["results"])
    blo, bhi = sorted(r["steps_to_target"] for r in base)
    assert (f"passed the target in {lo:,}–{hi:,} steps where the baseline took {blo:,}–{bhi:,}, "
            f"and ended {held['delta']:.2f} points above") in " ".join(text.split())
    eight = _group(_sweep(rows[3][1].replace("](results/", "](docs/results/")), "none+hold", 256)
    gains = f"gained {held['delta']:.2f} and {eight['delta']:.2f} points"
    short = " ".join(_section((ROOT / "docs" / "results.md").read_text(), "## In short").split())
    assert gains in short and gains in " ".join(README.split())
    lo, hi = sorted(r["steps_to_target"] for r in eight["results"])
    assert (f"eight times the batch passed it in {lo:,}–{hi:,} steps and ended "
            f"{eight['delta']:.2f} above") in " ".join(text.split())


def test_the_probe_lengths_table_is_recomputed_from_the_long_probes():
    """docs/noise.md's table of B_hold from probes of 8%, 25% and 100% of each baseline, and the
    sentence under it, are what studies/holdout.py computes from docs/results/probes-long."""
    from studies.holdout import probe_lengths_summary, probe_lengths_table

    section = " ".join(_section((ROOT / "docs" / "noise.md").read_text(), "### Held out").split())
    assert " ".join(probe_lengths_table().split()) in section
    assert probe_lengths_summary() in section


def test_the_held_out_budgets_table_is_recomputed_from_the_sweeps():
    """docs/noise.md's table of every budget at 16× and 32×, fitted-on or held out, is what
    studies/holdout.py reads from the sweeps' results.json."""
    from studies.holdout import BUDGETS, FITTED_ON, budgets_table

    section = _section((ROOT / "docs" / "noise.md").read_text(), "### Held out: the budgets")
    assert budgets_table() in section
    assert {b.study for b in BUDGETS} - set(FITTED_ON), "no held-out study in the table"


def test_the_how_sure_example_is_the_vit_probe_s():
    """docs/noise.md's example of B_hold's one-standard-error range is the vit-mnist probe's."""
    from date_engine.forecast import forecast
    from date_engine.probe import Probe

    probe = Probe.read(ROOT / "docs" / "results" / "probes" / "vit-mnist" / "probe.json")
    ahead = forecast(probe.curve, 1024, 128, probe.baseline_epochs, 60000)
    text = " ".join((ROOT / "docs" / "noise.md").read_text().split())
    assert (f"(vit-mnist: {ahead.holding_low}–{ahead.holding_high} around "
            f"{ahead.holding_batch})") in text


def test_every_import_follows_the_flow_architecture_md_allows():
    """Each import inside the package (at the top or in a function; not the type-checking ones)
    goes to a module left of its own on architecture.md's line, or beside it; view/ stands beside
    the flow but imports neither train nor cli; and no two modules import each other (type-only
    imports included: the sweep's runner and its live view once did)."""
    import ast

    text = (ROOT / "docs" / "architecture.md").read_text()
    line = next(x for x in _section(text, "## Allowed imports").splitlines() if "←" in x)
    rank = {}
    for i, step in enumerate(line.split("←")):
        for name in re.findall(r"\w+", step):
            rank[name] = i
    rank.update({"data": rank["recipes"], "models": rank["recipes"]})

    def group(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else "date_engine"

    edges, wrong = set(), []
    for path in (ROOT / "date_engine").rglob("*.py"):
        here = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("date_engine"):
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("date_engine.")]
            else:
                continue
            for target in targets:
                edges.add((here, target))  # a circle counts even through type-only imports
                src, dst = group(here), group(target)
                if id(node) in typing_only:
                    continue
                if src == dst or src in ("cli", "sysdate", "__main__", "date_engine"):
                    continue
                if src == "view":
                    ok = dst not in ("train", "cli")
                elif dst == "view":
                    ok = src in ("train", "sweep", "cli")
                else:
                    ok = rank[dst] <= rank[src]
                if not ok:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
    assert not wrong, wrong
    mutual = sorted((a, b) for a, b in edges if (b, a) in edges and a < b)
    assert not mutual, mutual


def test_readmes_time_forecast_is_what_date_plan_forecasts():
    """README's forecast for the paper's MNIST-LSTM, recomputed from the bench.json it names."""
    import json

    from typer.testing import CliRunner

    from date_engine.cli import app
    from date_engine.view.timing import seconds

    bench = ROOT / "docs" / "results" / "bench" / "lstm-mnist-2proc.json"
    result = CliRunner().invoke(app, ["plan", str(ROOT / "recipes" / "lstm-mnist.yaml"), "--batch",
                                      "8192", "--devices", "64", "--bench", str(bench), "--link",
                                      "25GB/s,5us", "--json"])
    assert result.exit_code == 0, result.output
    time = json.loads(result.stdout)["time"]
    text = " ".join(_section(README, "### How long, on how many devices").split())
    assert (f"one step takes {seconds(time['step_seconds'])} "
            f"({seconds(time['step']['compute'])} of it compute), the run's {time['steps']} steps "
            f"{seconds(time['run_seconds'])}, and the baseline's "
            f"{time['baseline']['steps']:,} steps of batch 128 on one device "
            f"{seconds(time['baseline']['seconds'])}: a speedup of {time['speedup']:.3g}×") in text


def test_the_time_models_check_is_what_its_benchmark_printed():
    """README's range of forecast ÷ measured is the range in the benchmark's saved output."""
    import re

    saved = (ROOT / "docs" / "results" / "bench" / "time_model.md").read_text()
    ddp = saved.split("--parallel fsdp")[0]  # the table held to 30%, not the sharded rows
    ratios = [float(x) for x in re.findall(r"\| ([0-9]\.[0-9]{2}) \|", ddp)]
    assert len(ratios) == 16  # 8 cells: step and run
    within = sum(abs(a - 1) <= 0.3 and abs(b - 1) <= 0.3 for a, b in zip(ratios[::2],
                                                                          ratios[1::2]))
    text = " ".join(README.split())
    assert f"within {min(ratios):.2f}–{max(ratios):.2f}× of the measured ones, {within} of the 8 " \
        "cells within 30%" in text
    page = (ROOT / "docs" / "performance.md").read_text()
    worst = max(abs(r - 1) for r in ratios)
    assert f"Worst |ratio − 1| of the run: {worst:.2f} over the step and run times — {within} " \
        "of the 8 cells within 30%" in " ".join(page.split())
    shown = _section(page, "## Time on N devices")
    assert all(row in shown for row in ddp.splitlines() if row.startswith(("| lenet", "| lstm")))


def test_the_preconditioned_noise_table_is_recomputed_from_its_probes():
    """docs/noise.md's table of B_hold from probes measured as shipped and in the optimizer's
    metric, and the sentences on it and on reading B_noise at one point, are what
    studies/holdout.py computes from docs/results/probes-preconditioned and the stored probes."""
    from studies.holdout import metric_summary, metric_table, readings_summary

    section = " ".join(_section((ROOT / "docs" / "noise.md").read_text(), "### Held out").split())
    assert " ".join(metric_table().split()) in section
    assert metric_summary() in section
    assert readings_summary() in section


def test_the_vit_from_another_baseline_is_its_probe_and_sweep():
    """results.md's vit-mnist from a baseline at twice its LR: the table of B_hold against what
    held, and the numbers the paragraph quotes, from the probe and sweep in docs/results."""
    from statistics import mean

    from date_engine.forecast import HOLDING_FACTOR
    from studies.holdout import other_baseline_studies, other_baselines_table

    text = " ".join(_section((ROOT / "docs" / "results.md").read_text(),
                             "## Transformers: vit-mnist").split())
    assert " ".join(other_baselines_table().split()) in text
    _, study = other_baseline_studies()[1]  # the baseline at twice the recipe's LR
    (hold,) = study.holding_batches(HOLDING_FACTOR)
    (sweep,) = study.sweeps
    assert (f"names B_hold ≈ {hold}, {study.worst_miss(HOLDING_FACTOR):.2f}× below the "
            f"{study.largest_held} that held") in text
    summary = _sweep(f"[s](docs/results/sweeps/{sweep}/report.md)")
    base = [r["metric"] for r in summary["baseline"]["results"]]
    assert f"reaches {base[0]} and {base[1]} (mean {mean(base):.2f};" in text
    noise = " ".join((ROOT / "docs" / "noise.md").read_text().split())
    assert f"B_hold ({hold}) is {study.worst_miss(HOLDING_FACTOR):.2f}× off" in noise


def test_the_bert_16_epoch_baseline_numbers_are_its_files():
    """results.md's 16-epoch bert-mlm baseline: its seeds, mean, gain over the 8-epoch baseline
    and its probe's B_hold, from the sweeps and probe in docs/results."""
    from statistics import mean

    from date_engine.forecast import HOLDING_FACTOR
    from studies.holdout import NOTHING_HELD

    text = " ".join(_section((ROOT / "docs" / "results.md").read_text(),
                             "## Transformers: bert-mlm").split())
    longer, shipped = (_sweep(f"[s](docs/results/sweeps/{s}/report.md)")["baseline"]["results"]
                       for s in ("bert4-16-batches", "bert4-batches"))
    seeds = [round(r["metric"], 2) for r in longer]
    now, before = (mean(r["metric"] for r in results) for results in (longer, shipped))
    assert (f"reaches {seeds[0]} and {seeds[1]} (mean {now:.2f}), {now - before:.1f} points above "
            f"the 8-epoch baseline's {before:.2f}") in text
    (study,) = [s for s in NOTHING_HELD if "bert4-16-batches" in s.sweeps]
    assert f"names B_hold ≈ {study.holding_batches(HOLDING_FACTOR)[0]}." in text


def test_the_vit_baseline_lr_table_is_its_runs():
    """results.md's vit-mnist baseline at four LRs: each row's seeds and mean from the runs'
    summary.json, and the gain the paragraph quotes."""
    import json
    from statistics import mean

    folder = ROOT / "docs" / "results" / "vit-mnist-baseline-lr"
    section = _section((ROOT / "docs" / "results.md").read_text(), "## Transformers: vit-mnist")
    (table,) = [t for t in _tables(section) if t and t[0][0] == "1e-3" and len(t[0]) == 3]
    means = {}
    for lr, seeds, shown in table:
        runs = [json.loads((folder / f"lr{lr}-seed{s}" / "summary.json").read_text())
                for s in (0, 1)]
        assert all(r["plan"]["baseline_lr"] == float(lr) and r["steps"] == r["total_steps"]
                   for r in runs), lr
        assert seeds == ", ".join(f"{r['metric']:.2f}" for r in runs), lr
        means[lr] = mean(r["metric"] for r in runs)
        assert _number(shown) == pytest.approx(round(means[lr], 2), abs=0.006), lr
    assert max(means, key=means.get) == "4e-3"
    gain = round(means["4e-3"], 2) - round(means["1e-3"], 2)
    assert f"{gain:.2f} points above 1e-3" in " ".join(section.split())
    import yaml

    recipe = yaml.safe_load((ROOT / "recipes" / "vit-mnist.yaml").read_text())
    assert recipe["baseline"]["lr"] == 4e-3  # the recipe ships the best of the table


def test_the_vit_study_from_its_best_lr_quotes_its_files():
    """results.md's vit-mnist from the 4e-3 baseline: the numbers its sentences quote beside the
    table — the tuned LAMB's cells against this baseline, the check's losses, the noise scale's
    B_hold, the ramp's saving and the peak LRs at 32× — from the sweeps and probes."""
    import json
    from statistics import mean

    from studies.holdout import HELD_OUT_CHECK, lr_check_studies, lr_ratio, noise_only

    text = " ".join(_section((ROOT / "docs" / "results.md").read_text(),
                             "### From the baseline at 4e-3").split())
    small = _sweep("[s](docs/results/sweeps/vit-mnist-lr4e-3-small/report.md)")
    base = small["baseline"]["mean"]
    lamb = _sweep("[s](docs/results/sweeps/vit-mnist-lamb-phi/report.md)")
    eight, thirty_two = (_group(lamb, "lamb", b)["mean"] - base for b in (1024, 4096))
    assert f"this baseline's {base:.2f}: {eight:.2f} and {thirty_two:.2f}".replace("-", "−") in text
    (study,) = [s for label, s in lr_check_studies() if label == HELD_OUT_CHECK]
    higher = [lr_ratio(p) - 1 for p in study.curves]
    assert f"a {100 * min(higher):.0f}–{100 * max(higher):.0f}% higher loss" in text
    alone = [noise_only(study, p) for p in study.curves]
    assert f"the noise scale alone would have said {min(alone)}–{max(alone)}" in text
    for sweep in ("vit-mnist-lr4e-3-ramp-new", "vit-mnist-lr4e-3-ramp"):  # √k now, k^0.75 before
        ramp = _sweep(f"[s](docs/results/sweeps/{sweep}/report.md)")
        group = _group(ramp, "date+ramp", 4096)
        steps = [r["steps"] for r in group["results"]]
        assert (f"{group['delta']:+.2f} in {steps[0]:,} and {steps[1]:,} steps"
                .replace("-", "−")) in text, sweep
    new = _sweep("[s](docs/results/sweeps/vit-mnist-lr4e-3-ramp-new/report.md)")
    steps = [r["steps"] for r in _group(new, "date+ramp", 4096)["results"]]
    assert f"{new['baseline']['steps'] / mean(steps):.1f}× fewer steps" in text
    for sweep, p in (("vit-mnist-lr4e-3-ramp-new", 0.5), ("vit-mnist-lr4e-3-ramp", 0.75)):
        cells = json.loads((ROOT / "docs" / "results" / "sweeps" / sweep / "results.json")
                           .read_text())["cells"]
        peaks = [c["peak_lr"] for c in cells if c["scheme"] == "date+ramp"]
        assert peaks == pytest.approx([4e-3 * 32 ** p] * 2), sweep  # the last rung's: which rule
    sixteen = _sweep("[s](docs/results/sweeps/vit-mnist-lr4e-3-16x/report.md)")
    default, paper = (f"{_group(sixteen, s, 2048)['delta']:.2f}".replace("-", "−")
                      for s in ("date", "paper"))
    assert f"the default was still ahead, {default} against the paper's {paper}" in text
    for scheme, lr, shown in (("date", 32 ** 0.75, "k^0.75·η0 = {:.2g}"),
                              ("paper", 32 ** 0.5, "the paper's √k, {:.2g}"),
                              ("linear", 32, "a peak LR of {:.3g}")):
        assert shown.format(4e-3 * lr) in text, scheme


def test_bert_at_the_baselines_lr_in_its_epochs_is_set_beside_the_rule():
    """results.md's sentence under the bert4-none-same-epochs table: what the default rule lost
    in the same epochs at 2× and 8× (bert4-batches)."""
    text = " ".join(_section((ROOT / "docs" / "results.md").read_text(),
                             "## Transformers: bert-mlm").split())
    rule = _sweep("[s](docs/results/sweeps/bert4-batches/report.md)")
    two, eight = (f"{_group(rule, 'date', b)['delta']:.2f}".replace("-", "−") for b in (64, 256))
    assert f"what the default rule lost in the same epochs ({two} at 2×, {eight} at 8×" in text


def test_the_adaptive_exponent_table_is_recomputed_from_its_sweeps():
    """results.md's k^0.75-or-√k table: each column's Δ is the mean over the seeds of the sweeps
    its links name, each seed against its own sweep's baseline (the paper's cells are `paper`, both
    exponents' `date`, each cell at its column's peak LR), the
    LR check's verdict that of the study's three probes, the best of the row in bold, and the rule
    the code ships is the one the table reads: √k where the check flags, k^0.75 elsewhere."""
    import json

    section = _section((ROOT / "docs" / "results.md").read_text(),
                       "### The adaptive family's exponent")
    (table,) = [t for t in _tables(section) if t and len(t[0]) == 7]
    from date_engine.probe import Probe

    wins: dict[str, list[str]] = {}
    study = check = None
    for name, flagged, k, *cells, links in table:
        if flagged:  # the verdict of the study's three probes, linked by the first
            check, first = re.match(r"\[([^\]]+)\]\(([^)]+)/probe\.json\)", flagged).groups()
            probes = [Probe.read(ROOT / "docs" / first.replace("-seed0", f"-seed{s}") /
                                 "probe.json") for s in (0, 1, 2)]
            limited = {p.curve.steps_limited for p in probes}
            assert check == {frozenset({True}): "steps-limited",
                             frozenset({False}): "not flagged"}.get(frozenset(limited)), first
        study = name or study
        found = re.findall(r"\[([^\]]+)\]\(([^)]+)/report\.md\)", links)
        deltas = {}
        for label, cell in zip(("paper", "k^0.75", "√k"), cells):
            paths = [path for lab, path in found if lab == label]
            if not cell:  # not measured there
                assert not paths, (study, k, label)
                continue
            sweeps = [_sweep(f"[s](docs/{path}/report.md)") for path in paths]
            scheme = "paper" if label == "paper" else "date"
            for path in paths:  # the cells ran the exponent their column names
                rows = json.loads((ROOT / "docs" / path / "results.json").read_text())["cells"]
                eta0 = next(r["peak_lr"] for r in rows if r["scheme"] == "baseline")
                batch = int(k) * next(r["batch"] for r in rows if r["scheme"] == "baseline")
                p = 0.75 if label == "k^0.75" else 0.5
                peaks = [r["peak_lr"] for r in rows if r["scheme"] == scheme and
                         r["batch"] == batch]
                assert peaks == pytest.approx([eta0 * int(k) ** p] * len(peaks)) and peaks, \
                    (path, label, k)
            groups = [_group(s, scheme, int(k) * s["baseline"]["batch"]) for s in sweeps]
            # over every seed: each sweep's Δ (against its own baseline) weighted by its seeds
            deltas[label] = (sum(g["delta"] * len(g["results"]) for g in groups)
                             / sum(len(g["results"]) for g in groups))
            assert _number(cell) == pytest.approx(round(deltas[label], 2), abs=0.006), (study, k)
        best = max(deltas, key=deltas.get)
        assert cells[("paper", "k^0.75", "√k").index(best)].startswith("**"), (study, k)
        assert sum(c.startswith("**") for c in cells) == 1, (study, k)
        if best != "paper":
            wins.setdefault(check, []).append(best)
    assert set(wins) == {"not flagged", "steps-limited"}
    # k^0.75 leads on most unflagged cells, √k on most flagged ones: the rule of algorithm.md §6
    assert wins["not flagged"].count("k^0.75") > len(wins["not flagged"]) / 2
    assert wins["steps-limited"].count("√k") > len(wins["steps-limited"]) / 2
    from date_engine.catalog import entry

    for name in ("rmsprop", "adam", "adamw"):
        rule = entry(name).batch_rule
        assert (rule.lr_exponent, rule.steps_limited_exponent) == (0.75, 0.5), name


def test_the_vit_sentences_on_the_exponent_quote_its_table():
    """The vit-mnist section's "What changed" paragraph and the summary's bullet quote the
    exponent table's vit-mnist rows (from 4e-3), recomputed above from the sweeps."""
    results = (ROOT / "docs" / "results.md").read_text()
    (table,) = [t for t in _tables(_section(results, "### The adaptive family's exponent"))
                if t and len(t[0]) == 7]
    rows, study = {}, None
    for name, _, k, paper, k075, sqrt, _ in table:
        study = name or study
        if study.startswith("vit-mnist (AdamW), from 4e-3"):
            rows[int(k)] = [c.strip("*") for c in (paper, k075, sqrt)]
    changed = " ".join(_section(results, "### From the baseline at 4e-3").split())
    sqrt = {k: row[2] for k, row in rows.items()}
    assert (f"{sqrt[2]} at 2×, {sqrt[4]} at 4×, {sqrt[8]} at 8×, {sqrt[16]} at 16× and "
            f"{sqrt[32]} at 32× over eight seeds (the paper's rule {rows[32][0]} over the same "
            f"eight, k^0.75 {rows[32][1]} over four of them)") in changed
    short = " ".join(_section(results, "## In short").split())
    assert (f"({sqrt[16]} at 16× against k^0.75's {rows[16][1]}, {sqrt[32]} at 32× over eight "
            f"seeds against the paper's {rows[32][0]}, not told apart seed by seed;") in short
    readme = " ".join(README.split())
    assert f"{sqrt[32]} over eight against the paper's {rows[32][0]} (seed by seed" in readme
    ramp = _group(_sweep("[s](docs/results/sweeps/vit-mnist-lr4e-3-ramp-new/report.md)"),
                  "date+ramp", 4096)
    steps = [f"{r['steps']:,}" for r in ramp["results"]]
    assert (f"ramp held at 32× ({ramp['delta']:+.2f} in {steps[0]} and {steps[1]} steps"
            in short)


def test_what_the_exponent_table_says_is_its_numbers():
    """The bullets under the exponent table: the margins, the unflagged probes' check ratios, the
    diverging LRs and the 32× variants of vit-mnist's rule, from the table and its files."""
    from date_engine.probe import Probe

    results = (ROOT / "docs" / "results.md").read_text()
    section = _section(results, "### The adaptive family's exponent")
    text = " ".join(section.split())
    (table,) = [t for t in _tables(section) if t and len(t[0]) == 7]
    rows, study = {}, None
    for name, _, k, *cells, _ in table:
        study = name or study
        rows[study, int(k)] = [_number(c.strip("*")) if c else None for c in cells]

    def row(name: str, k: int) -> list[float]:
        return rows[next(s for s, _ in rows if s.startswith(name)), k]

    fashion = [row("fashion-lenet", k)[1] - row("fashion-lenet", k)[2] for k in (8, 16, 32)]
    assert f"at every k by {min(fashion):.1f} to {max(fashion):.1f} points" in text
    assert f"the three within {max(row('lenet-mnist', 8)) - min(row('lenet-mnist', 8)):.2f}" \
        in text
    two = row("vit-mnist (AdamW), from 4e-3", 2)
    assert f"at 2× the three are within {max(two) - min(two):.1f}" in text
    ratios = [p.lr_check.loss / p.lr_check.baseline_loss for name in
              ("lenet-mnist", "lstm-mnist-adam", "fashion-lenet") for s in (0, 1, 2)
              for p in [Probe.read(ROOT / "docs" / "results" / "probes-lrcheck" /
                                   f"{name}-seed{s}" / "probe.json")]]
    assert f"twice the LR ends {100 * (1 - max(ratios)):.0f}–{100 * (1 - min(ratios)):.0f}% " \
        "lower" in text
    assert f"RMSprop at {8e-3 * 16 ** 0.75:.3f} and {8e-3 * 32 ** 0.75:.3f}" in text
    vit2 = [row("vit-mnist (AdamW), from 2e-3", k) for k in (8, 32)]
    assert (f"(√k {vit2[1][2]:.2f}, k^0.75 {vit2[1][1]:.2f}, whose seeds ended".replace("-", "−")
            in text)
    assert f"leads at 8× ({vit2[0][1]:.2f} against {vit2[0][2]:.2f})".replace("-", "−") in text
    rules = _sweep("[s](docs/results/sweeps/vit-mnist-lr2e-3-exp-rules/report.md)")
    seeds = [r["metric"] for r in _group(rules, "date", 4096)["results"]]
    assert f"{max(seeds) - min(seeds):.2f} points apart" in text
    checks = [p.lr_check.loss / p.lr_check.baseline_loss for s in (0, 1, 2) for p in
              [Probe.read(ROOT / "docs" / "results" / "probes-lrcheck" /
                          f"vit-mnist-lr2e-3-seed{s}" / "probe.json")]]
    assert f"({min(checks):.3f}–{max(checks):.3f})" in text
    fashion = [row("vit on Fashion-MNIST", k) for k in (8, 32)]
    assert (f"√k leads at 8× and 32× ({fashion[0][2]:.2f} and {fashion[1][2]:.2f} over eight "
            f"seeds against k^0.75's {fashion[0][1]:.2f} and {fashion[1][1]:.2f} over two; the "
            f"paper's {fashion[0][0]:.2f} and {fashion[1][0]:.2f} over eight)"
            ).replace("-", "−") in text
    bert = [row("bert-mlm", k) for k in (2, 8)]
    assert (f"√k {bert[0][2]:.2f} at 2× and {bert[1][2]:.2f} at 8×, k^0.75 {bert[0][1]:.2f} and "
            f"{bert[1][1]:.2f}".replace("-", "−")) in text
    sqrt = _sweep("[s](docs/results/sweeps/bert4-exp-sqrt/report.md)")
    two = [r["metric"] for r in _group(sqrt, "date", 64)["results"]]
    assert f"up to {max(two) - min(two):.2f} points apart (√k at 2×: {two[0]:.2f} and " \
        f"{two[1]:.2f})" in text
    bases = [_sweep(f"[s](docs/results/sweeps/{s}/report.md)")["baseline"]["mean"]
             for s in ("bert4-batches", "bert4-exp-sqrt")]
    assert f"(baseline {bases[0]:.2f} there, {bases[1]:.2f} here)" in text
    floor = _sweep("[s](docs/results/sweeps/bert4-probe-32x/report.md)")
    cells = [r["metric"] for s in ("date", "paper") for r in _group(floor, s, 1024)["results"]]
    assert f"the unigram floor ({min(cells):.2f}–{max(cells):.2f})" in text
    assert (f"the default's √k reads {row('bert-mlm', 32)[2]:.2f} against the paper's "
            f"{row('bert-mlm', 32)[0]:.2f}".replace("-", "−")) in text
    assert f"λ·√k = {0.05 * 32 ** 0.5:.2f}" in text
    for sweep, shown in (("vit-mnist-lr4e-3-sqrt-decay-fixed", "it reaches {}"),
                         ("vit-mnist-lr4e-3-probe-rules", "ahead of the paper's {}"),
                         ("vit-mnist-lr4e-3-sqrt-beta2-fixed", "with β2 kept at 0.999, {}")):
        summary = _sweep(f"[s](docs/results/sweeps/{sweep}/report.md)")
        scheme = "paper" if "paper's" in shown else "date"
        delta = f"{_group(summary, scheme, 4096)['delta']:.2f}".replace("-", "−")
        assert shown.format(delta) in text, sweep


def test_the_summary_quotes_bert_mlms_ramp_under_both_exponents():
    """results.md's summary: the ramp at 32× on bert-mlm with √k (the LR-checked probe) and with
    k^0.75 before, from the two sweeps; each ran the exponent it is quoted for."""
    import json

    short = " ".join(_section((ROOT / "docs" / "results.md").read_text(), "## In short").split())
    quoted = []
    for sweep, p in (("bert4-ramp-new", 0.5), ("bert4-ramp", 0.75)):
        summary = _sweep(f"[s](docs/results/sweeps/{sweep}/report.md)")
        group = _group(summary, "date+ramp", 1024)
        assert {r["steps"] for r in group["results"]} == {group["results"][0]["steps"]}
        quoted.append((f"{-group['delta']:.2f}", group["results"][0]["steps"]))
        cells = json.loads((ROOT / "docs" / "results" / "sweeps" / sweep / "results.json")
                           .read_text())["cells"]
        assert [c["peak_lr"] for c in cells if c["scheme"] == "date+ramp"] == \
            pytest.approx([1e-3 * 32 ** p] * 2), sweep
    (new, new_steps), (old, old_steps) = quoted
    assert (f"the ramp lost {new} at 32× in {new_steps} steps ({old} in {old_steps} with k^0.75, "
            "before the rule read the LR check)") in short


def test_the_exponent_tables_seed_pairs_are_its_cells():
    """The exponent table's seed-by-seed bullet: per LR-check verdict, how many seed pairs end
    with each exponent above, and the two-sided sign test's chance, from the sweeps it links."""
    import math

    from date_engine.sweep.results import paired

    section = _section((ROOT / "docs" / "results.md").read_text(),
                       "### The adaptive family's exponent")
    (table,) = [t for t in _tables(section) if t and len(t[0]) == 7]
    pairs: dict[str, list[float]] = {}
    held_out: list[float] = []
    study = check = None
    for name, flagged, k, *_, links in table:
        check = re.match(r"\[([^\]]+)\]", flagged).group(1) if flagged else check
        study = name or study
        found = re.findall(r"\[([^\]]+)\]\(results/sweeps/([^)]+)/report\.md\)", links)
        batch = int(k) * _sweep(f"[s](docs/results/sweeps/{found[0][1]}/report.md)")[
            "baseline"]["batch"]
        high, low = (_seed_metrics(sorted({sweep for lab, sweep in found if lab == label}),
                                   "date", batch) for label in ("k^0.75", "√k"))
        differences = paired(high, low).differences  # a diverged cell ends with its metric
        pairs.setdefault(check, []).extend(differences)
        if "held out" in study and check == "steps-limited":
            held_out += differences

    def sign_test(above: int, n: int) -> float:
        tail = sum(math.comb(n, i) for i in range(max(above, n - above), n + 1))
        return min(1.0, 2 * tail / 2**n)

    passes, fires = pairs["not flagged"], pairs["steps-limited"]
    assert 0 not in passes + fires
    up, down = sum(d > 0 for d in passes), sum(d < 0 for d in fires)
    text = " ".join(section.split())
    assert (f"k^0.75 ends above √k on {up} of the {len(passes)} pairs; where it fires, √k ends "
            f"above on {down} of {len(fires)}") in text
    assert (f"a chance of {sign_test(up, len(passes)):.3f} and {sign_test(down, len(fires)):.3f}"
            in text)
    below = sum(d < 0 for d in held_out)
    assert (f"held-out studies alone have √k above on {below} of {len(held_out)} "
            f"({sign_test(below, len(held_out)):.3f})" in text)


_SEED_BY_SEED = {  # results.md's 32× seed-by-seed table: each column's cells, from these sweeps
    "vit-mnist": {"baseline": ("baseline", ["vit-mnist-lr4e-3-probe-rules",
                                            "vit-mnist-lr4e-3-32x-seeds23-sqrt",
                                            "vit-mnist-lr4e-3-32x-seeds4-7"]),
                  "default": ("date", ["vit-mnist-lr4e-3-probe-rules",
                                       "vit-mnist-lr4e-3-32x-seeds23-sqrt",
                                       "vit-mnist-lr4e-3-32x-seeds4-7"]),
                  "kept": ("date", ["vit-mnist-lr4e-3-sqrt-decay-fixed",
                                    "vit-mnist-lr4e-3-32x-decay-fixed-seeds2-7"]),
                  "paper": ("paper", ["vit-mnist-lr4e-3-probe-rules",
                                      "vit-mnist-lr4e-3-32x-seeds23-sqrt",
                                      "vit-mnist-lr4e-3-32x-seeds4-7"])},
    "bert-mlm": {"baseline": ("baseline", ["bert4-probe-32x", "bert4-32x-seeds45",
                                           "bert4-32x-seeds67"]),
                 "default": ("date", ["bert4-probe-32x", "bert4-32x-seeds45",
                                      "bert4-32x-seeds67"]),
                 "kept": ("date", []),  # not run at 32×
                 "paper": ("paper", ["bert4-probe-32x", "bert4-32x-seeds45",
                                     "bert4-32x-seeds67"])},
    "vit on Fashion-MNIST": {"baseline": ("baseline", ["vit-fashion-probe",
                                                       "vit-fashion-probe-seeds2-7"]),
                             "default": ("date", ["vit-fashion-probe",
                                                  "vit-fashion-probe-seeds2-7"]),
                             "kept": ("date", ["vit-fashion-decay-fixed"]),  # seeds 0, 1
                             "paper": ("paper", ["vit-fashion-probe",
                                                 "vit-fashion-probe-seeds2-7"])},
}


def _seed_metrics(sweeps: list[str], scheme: str, batch: int | None) -> dict[int, float]:
    """seed → final metric of ``scheme``'s cells at ``batch`` (None: the baseline's) over
    ``sweeps``, later sweeps adding seeds."""
    import json

    out = {}
    for sweep in sweeps:
        rows = json.loads((ROOT / "docs" / "results" / "sweeps" / sweep / "results.json")
                          .read_text())["cells"]
        out.update({r["seed"]: r["metric"] for r in rows if r["scheme"] == scheme
                    and (batch is None or r["batch"] == batch)})
    return out


def test_the_32x_seed_by_seed_tables_are_the_sweeps():
    """results.md's seed-by-seed section: every cell of its tables from the sweeps, and each
    sentence's paired mean, interval and count from date_engine's own side-by-side (paired);
    the pre-registered λ check's two criteria from the cells, and the rule that stayed."""
    from statistics import fmean, stdev

    from date_engine.sweep.results import paired

    results = (ROOT / "docs" / "results.md").read_text()
    section = _section(results, "### At 32× in the baseline's epochs, seed by seed").split(
        "\n## ")[0]
    text = " ".join(section.split())
    main, decay = (t for t in _tables(section) if t)
    cells: dict[tuple[str, int], dict[str, dict[int, float]]] = {}
    study = None
    for name, batch, seed, *shown in main:
        study = next(s for s in _SEED_BY_SEED if s in name) if name else study
        at = int(batch.replace(",", ""))
        columns = cells.setdefault((study, at), {
            col: _seed_metrics(sweeps, scheme, None if col == "baseline" else at)
            for col, (scheme, sweeps) in _SEED_BY_SEED[study].items()})
        for value, col in zip(shown, columns):
            if not value:  # a column that did not run this seed (or at all)
                assert (not columns[col] if seed == "mean" else int(seed) not in columns[col]), \
                    (study, at, seed, col)
                continue
            expected = fmean(columns[col].values()) if seed == "mean" else columns[col][int(seed)]
            assert _number(value) == pytest.approx(expected, abs=0.006), (study, at, seed, col)
    assert sorted(cells["vit-mnist", 4096]["default"]) == list(range(8))

    def said(a: dict, b: dict) -> str:
        p = paired(a, b)
        return (f"{p.mean:.2f} ({p.mean - p.half_width:+.2f} to {p.mean + p.half_width:+.2f}; "
                f"above on {sum(d > 0 for d in p.differences)} of {len(p.seeds)})"
                ).replace("-", "−")

    vit = cells["vit-mnist", 4096]
    p = paired(vit["default"], vit["paper"])
    assert (f"the default − the paper's {p.mean:.2f} (95% interval {p.mean - p.half_width:.2f} "
            f"to {p.mean + p.half_width:+.2f}), above on {sum(d > 0 for d in p.differences)} "
            f"of {len(p.seeds)} seeds").replace("-", "−") in text
    assert p.reading(True) == "level" and p.mean < 0
    assert f"missed by the mean by {-p.mean:.2f}" in text
    spread, needed = stdev(p.differences), p.seeds_for_half_width(0.3)
    assert (f"the difference moves {spread:.2f} points from seed to seed, and an interval of "
            f"±0.3 (the study's tolerance) would take {needed} paired seeds") in text
    sweep_md = " ".join((ROOT / "docs" / "sweep.md").read_text().split())
    assert (f"eight seeds spread {spread:.1f} points from seed to seed, and ±0.3 would take about "
            f"{needed}") in sweep_md
    assert (f"ahead of the default by {said(vit['kept'], vit['default'])} and of the paper's "
            f"rule by {said(vit['kept'], vit['paper'])}") in text
    bert = cells["bert-mlm", 1024]
    p = paired(bert["default"], bert["paper"])
    assert (f"The default {fmean(bert['default'].values()):.2f}, the paper's rule "
            f"{fmean(bert['paper'].values()):.2f} (the share of the most frequent token is "
            f"{min(bert['paper'].values()):.2f}): {p.mean:.2f} (95% interval "
            f"{p.mean - p.half_width:.2f} to {p.mean + p.half_width:+.2f}), above on "
            f"{sum(d > 0 for d in p.differences)} of {len(p.seeds)} and level on "
            f"{'one' if p.differences.count(0.0) == 1 else p.differences.count(0.0)}"
            ).replace("-", "−") in text
    bert_section = " ".join(_section(results, "## Transformers: bert-mlm").split())
    assert sorted(bert["default"]) == [0, 1, 4, 5, 6, 7]
    assert p.reading(True, tolerance=0.5) == "within"  # the question fixed before seeds 6, 7 ran
    assert (f"−{-p.mean + p.half_width:.2f} to +{p.mean + p.half_width:.2f}), above on "
            f"{sum(d > 0 for d in p.differences)} of 6 and level on one; seed 4's") in text
    assert "the interval lies inside ±0.5, the study's tolerance" in text
    assert ("with its probe, over six paired seeds, the default and the paper's rule are level to "
            "within the study's 0.5-point tolerance") in " ".join(README.split())
    assert (f"the default reads {fmean(bert['default'].values()):.2f} against the paper's "
            f"{fmean(bert['paper'].values()):.2f} over seeds 0, 1 and 4–7, paired seed by seed "
            "level within the tolerance (±0.5)") in bert_section
    late = bert["baseline"][4]
    assert f"seed 4's baseline itself stayed on the plateau until late ({late:.2f})" in text
    fashion = {b: cells["vit on Fashion-MNIST", b] for b in (1024, 4096)}
    for b, k in ((1024, 8), (4096, 32)):
        p = paired(fashion[b]["default"], fashion[b]["paper"])
        assert len(p.seeds) == 8 and p.reading(True) == "level"
        assert (f"at {k}× {p.mean:+.2f} (95% interval {p.mean - p.half_width:+.2f} to "
                f"{p.mean + p.half_width:+.2f}), above on {sum(d > 0 for d in p.differences)} "
                f"of {len(p.seeds)}").replace("-", "−") in text
    wide, narrow = (list(fashion[4096][col].values()) for col in ("paper", "default"))
    assert (f"({min(wide):.2f} to {max(wide):.2f}, standard deviation {stdev(wide):.2f}, "
            f"against {min(narrow):.2f} to {max(narrow):.2f}, {stdev(narrow):.2f}): "
            f"{sum(v < min(narrow) for v in wide)} of its {len(wide)} end below the default's "
            "lowest") in text
    assert sorted(fashion[4096]["kept"]) == [0, 1]
    short = " ".join(_section(results, "## In short").split())
    p = paired(fashion[4096]["default"], fashion[4096]["paper"])
    assert (f"on the ViT trained on Fashion-MNIST, held out, {p.mean:.2f} above the paper's rule "
            f"at 32× over eight paired seeds, not told apart either") in short
    # the λ check written down before its cells ran
    held = [d for b in (1024, 4096)
            for d in paired(fashion[b]["kept"], fashion[b]["default"]).differences]
    assert sum(d > 0 for d in held) >= 3 and fmean(held) >= 0
    assert f"above on {sum(d > 0 for d in held)} of {len(held)}, mean {fmean(held):+.2f}" in text
    small = []
    for batch, _k, scaled, kept, differences in decay:
        at = int(batch.replace(",", ""))
        a = _seed_metrics(["vit-mnist-lr4e-3-date-sqrt"], "date", at)
        b = _seed_metrics(["vit-mnist-lr4e-3-decay-fixed-small"], "date", at)
        assert scaled == f"{a[0]:.2f}, {a[1]:.2f}" and kept == f"{b[0]:.2f}, {b[1]:.2f}"
        pair = paired(b, a).differences
        assert differences == f"{pair[0]:+.2f}, {pair[1]:+.2f}".replace("-", "−")
        small += pair
    assert fmean(small) < -0.1  # criterion (2) failed: the rule kept λ·k^(1−p)
    assert f"(2) did not: mean {fmean(small):.2f}".replace("-", "−") in text
    assert f"λ kept losing {-fmean(small[-2:]):.2f} at 16×" in text
    from date_engine.probe import Probe

    checks = [p.lr_check.loss / p.lr_check.baseline_loss for s in (0, 1, 2) for p in
              [Probe.read(ROOT / "docs" / "results" / "probes-lrcheck" / f"vit-fashion-seed{s}" /
                          "probe.json")]]
    assert all(c > 1 for c in checks)  # steps-limited on every seed
    low, high = (100 * (c - 1) for c in (min(checks), max(checks)))
    ending = f"twice the LR ending {low:.1f}–{high:.1f}% higher"
    assert ending in text
    assert ending in " ".join((ROOT / "docs" / "noise.md").read_text().split())
    kept = _seed_metrics(["bert4-decay-fixed-sqrt"], "date", 256)
    scaled = _seed_metrics(["bert4-exp-sqrt"], "date", 256)
    assert (f"λ kept ended at {kept[0]:.2f} and {kept[1]:.2f} against the default's "
            f"{scaled[0]:.2f} and {scaled[1]:.2f}") in text
    from date_engine.catalog import entry

    assert entry("adamw").batch_rule.decoupled_decay


def test_the_transformer_recipes_quote_their_studies():
    """The vit-mnist and bert-mlm recipes' headers quote the studies as the default rule now runs
    them with a probe: vit-mnist's 32× over eight seeds (the exponent table's row) and its ramp,
    bert-mlm's ramp under its LR-checked probe."""
    recipes = ROOT / "date_engine" / "recipes" / "specs"
    vit = " ".join((recipes / "vit-mnist.yaml").read_text().replace("#", " ").split())
    (table,) = [t for t in _tables(_section((ROOT / "docs" / "results.md").read_text(),
                                            "### The adaptive family's exponent"))
                if t and len(t[0]) == 7]
    study = None
    for name, _, k, paper, _, sqrt, _ in table:
        study = name or study
        if study.startswith("vit-mnist (AdamW), from 4e-3") and k == "32":
            shown = [f"{_number(c.strip('*')):.1f}" for c in (sqrt, paper)]
    assert (f"over 8 seeds {shown[0]} against the paper's {shown[1]}, not told apart seed by seed"
            in vit)
    ramp = _group(_sweep("[s](docs/results/sweeps/vit-mnist-lr4e-3-ramp-new/report.md)"),
                  "date+ramp", 4096)
    ratio = 4688 / (sum(r["steps"] for r in ramp["results"]) / 2)
    assert f"(+{ramp['delta']:.2f} in {ratio:.1f}x fewer steps than the baseline)" in vit
    bert = " ".join((recipes / "bert-mlm.yaml").read_text().replace("#", " ").split())
    ramp = _group(_sweep("[s](docs/results/sweeps/bert4-ramp-new/report.md)"), "date+ramp", 1024)
    seeds = [r["metric"] for r in ramp["results"]]
    assert (f"1024 loses {-ramp['delta']:.2f} in {ramp['results'][0]['steps']} steps (seeds "
            f"{seeds[0]:.2f}, {seeds[1]:.2f}; its LR check makes the rule sqrt(k))") in bert
