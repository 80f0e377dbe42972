"""The README's commands and excerpts are what the tool does, and every results table is what its
data gives (regenerated, never matched with regular expressions over prose)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import pytest

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def _bash_blocks(text):
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def _section(text: str, heading: str) -> str:
    """From ``heading`` (a line starting with it) to the next heading of the same or a higher
    level."""
    level = heading.split(" ")[0]
    start = next(i for i, line in enumerate(text.splitlines()) if line.startswith(heading))
    lines = text.splitlines()[start:]
    end = next((i for i, line in enumerate(lines[1:], 1)
                if re.match(f"#{{1,{len(level)}}} ", line)), len(lines))
    return "\n".join(lines[:end])


def _table(text: str) -> list[list[str]]:
    """The first markdown table in ``text``: its body rows, cells stripped."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]


def _number(cell: str) -> float:
    return float(re.search(r"[−+-]?[\d,]+\.?\d*", cell).group(0).replace(",", "")
                 .replace("−", "-"))


# ------------------------------------------------------------------ the README's commands


def test_ci_runs_the_readme_test_command():
    test_commands = [b.strip() for b in _bash_blocks(README) if "pytest" in b]
    assert len(test_commands) == 1, "README shows one test command"
    assert test_commands[0] in (ROOT / ".ci" / "run").read_text()


def test_readme_opens_with_install_and_a_command_on_a_shipped_recipe():
    """pip install and a `date scale` command within the first 40 lines, on a shipped recipe; the
    whole README within 1,800 words."""
    head = "\n".join(README.splitlines()[:40])
    main = _bash_blocks(head)[0]
    assert "pip install" in main
    recipe = re.search(r"date (?:plan|scale) (\S+)", main).group(1)
    assert (ROOT / recipe).is_file()
    assert len(README.split()) <= 1800


def test_readme_python_example_runs_as_written_and_prints_what_it_says(capsys):
    pytest.importorskip("transformers")
    block = re.search(r"```python\n(.*?)```", README, flags=re.S).group(1)
    scope: dict = {}
    with tempfile.TemporaryDirectory() as out:
        cwd = os.getcwd()
        os.chdir(out)  # training_arguments(run, "out") writes nothing until train()
        try:
            exec(block, scope)
        finally:
            os.chdir(cwd)
    claimed = re.search(r"print\(.*# (.*)", block).group(1).split()
    printed = capsys.readouterr().out.split()
    assert [round(float(x), 7) for x in printed] == [float(x) for x in claimed]
    assert scope["trainer"].run is scope["run"]  # DateTrainer(run=run): the RunPlan itself
    assert scope["scheduler"].optimizer is scope["optimizer"]


def test_example_script_runs():
    out = subprocess.run(
        [sys.executable, "examples/plan_in_python.py", "recipes/lenet-mnist.yaml", "8192"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )
    from date_engine import load_spec
    from date_engine.plan import derive_plan

    plan = derive_plan(load_spec(ROOT / "recipes/lenet-mnist.yaml"), 8192)
    assert f"peak lr = {plan.peak_lr:.5g}" in out.stdout and "220 steps" in out.stdout


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip("# ").lower())
    return text.replace(" ", "-")


def test_relative_links_and_their_anchors_resolve():
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)]*))?\)", page.read_text()):
            if "://" in target:
                continue
            path = (page.parent / target) if target else page
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
            elif anchor and path.suffix == ".md":
                anchors = {_anchor(h) for h in re.findall(r"^#+ .*", path.read_text(), re.M)}
                if anchor not in anchors:
                    broken.append(f"{page.relative_to(ROOT)} -> {target}#{anchor}")
    assert not broken, broken


def test_the_docs_stay_short_and_small():
    """Each docs page readable in one sitting, about a quarter of an hour: within 3,500 words (a
    page that outgrows it is split by the questions it answers, as results.md and training.md
    were); docs/ within 5 MB and 200 files, most of them the studies' data."""
    pages = sorted((ROOT / "docs").glob("*.md"))
    words = {p.name: len(p.read_text().split()) for p in pages}
    assert all(n <= 3500 for n in words.values()), words
    files = [p for p in (ROOT / "docs").rglob("*") if p.is_file()]
    assert len(files) <= 200 and sum(p.stat().st_size for p in files) <= 5 * 2**20


def _plan_lines(*args) -> list[str]:
    from typer.testing import CliRunner

    from date_engine.cli import app

    result = CliRunner().invoke(app, ["plan", *args], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    return [line.rstrip() for line in result.stdout.splitlines()]


def test_readmes_plan_excerpt_is_what_date_plan_prints():
    """Every line of the excerpt is a line the command prints at 100 columns, and the paper's
    §3.6 numbers the prose quotes are the paper rule's plan."""
    from date_engine import load_spec
    from date_engine.plan import derive_plan

    section = _section(README, "## `date plan`")
    (block,) = re.findall(r"```\n(DATE.*?)```", section, flags=re.S)
    spec = str(ROOT / "recipes" / "lenet-mnist.yaml")
    printed = _plan_lines(spec, "--batch", "8192")
    for line in block.splitlines():
        assert line.rstrip() in printed, line
    paper = derive_plan(load_spec(spec, ["date.rule=paper"]), 8192)
    assert f"η = {paper.peak_lr:.4e}".replace("e-03", "e-3") in section
    assert f"w = {paper.warmup_epochs:g}\nepochs, {int(paper.warmup_iterations)} warmup steps, " \
        f"{paper.total_iterations} steps" in section


def test_quick_start_numbers_are_the_plans():
    """k, the peak LR's factor, the warmup and the steps the quick start quotes."""
    from date_engine import load_spec
    from date_engine.planning import plan_for

    spec = load_spec(ROOT / "recipes" / "lenet-digits.yaml")
    big, base = plan_for(spec, 256).plan, plan_for(spec, 16).plan
    section = " ".join(_section(README, "## Install and quick start").split())
    assert (f"k = 16: peak LR ×{big.peak_lr / spec.baseline.lr:g}, warmup {base.warmup_epochs:g} "
            f"→ {big.warmup_epochs:g} epochs, {base.total_iterations:,} → "
            f"{big.total_iterations:,} steps") in section
    rows = _table(_section(README, "## Install and quick start"))
    assert [_number(r[2]) for r in rows] == [base.total_iterations, big.total_iterations]


@pytest.mark.slow
def test_quick_start_accuracy_at_16x_is_what_the_command_trains(tmp_path):
    """The 16× row's accuracy, retrained, to within one test image (a run on another x86 CPU can
    end an image apart)."""
    import json
    import os

    from tests.runs import date

    result = date("scale", ROOT / "recipes" / "lenet-digits.yaml", "--batch", 256, "--json",
                  "-o", tmp_path / "run", env={"OMP_NUM_THREADS": str(os.cpu_count())})
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)["summary"]
    row = next(r for r in _table(_section(README, "## Install and quick start"))
               if "--batch 256" in r[0])
    assert _number(row[2]) == summary["steps"]
    assert abs(_number(row[3]) - summary["metric"]) <= 100 / 360 + 0.005, (row[3], summary)


def test_readmes_rule_table_is_what_the_plan_derives():
    """Each row of the default rule's table, at k = 16, against derive_plan (and k^0.75 where a
    probe's LR check finds room)."""
    from date_engine import parse_spec
    from date_engine.catalog import entry
    from date_engine.forecast import NoiseCurve
    from date_engine.plan import derive_plan

    exponents = {"k·η0": 1.0, "k^0.75·η0": 0.75, "√k·η0": 0.5}
    room = NoiseCurve(a=100.0, beta=0.0, first=0.1, last=1.0, lr_checked=True)
    seen = set()
    for names, peak, also in _table(_section(README, "## The default rule")):
        plain, _, when = peak.partition("; ")
        for name in (n.strip() for n in names.strip("`").split(",")):
            raw = {"baseline": {"batch_size": 16, "lr": 1e-3, "warmup_epochs": 0.1, "epochs": 10,
                                "dataset_size": 1000, "optimizer": {"name": name}}}
            plan = derive_plan(parse_spec(raw), 256)
            assert plan.peak_lr == pytest.approx(16 ** exponents[plain] * 1e-3), name
            if when:
                checked = derive_plan(parse_spec(raw), 256, noise_curve=room)
                want = exponents[when.split(" where ")[0]]
                assert checked.peak_lr == pytest.approx(16 ** want * 1e-3), name
            options = plan.optimizer.options
            if also == "—":
                assert dict(options) == dict(entry(name).defaults), name
            else:
                assert options["eps"] == pytest.approx(entry(name).defaults["eps"] / 4), name
            seen.add(name)
    assert seen == {"sgd", "momentum", "nesterov", "rmsprop", "adam", "adamw", "adagrad"}


def test_the_readmes_spec_block_is_a_valid_spec():
    import yaml

    from date_engine import parse_spec
    from date_engine.catalog import spec_names

    block = re.search(r"```yaml\n(.*?)```", README, flags=re.S).group(1)
    spec = parse_spec(yaml.safe_load(block))
    assert spec.date.rule == "date"
    names = re.search(r"optimizer: \{name: rmsprop\} # ([\w |]+)", block).group(1)
    assert [n.strip() for n in names.split("|")] == list(spec_names())


def test_the_time_forecast_performance_md_quotes_is_what_date_plan_forecasts():
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
    text = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    assert (f"one step {seconds(time['step_seconds'])}, the run's {time['steps']} steps "
            f"{seconds(time['run_seconds'])}, the baseline's {time['baseline']['steps']:,} steps "
            f"of batch 128 on one device {seconds(time['baseline']['seconds'])}, a speedup of "
            f"{time['speedup']:.3g}×") in text


# ------------------------------------------------------------------ architecture


def test_architectures_backticked_names_exist():
    """Every code name docs/architecture.md cites is a module, file or attribute of date_engine."""
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
        for node in namespace.get(first, []):
            for part in rest:
                fields = getattr(node, "model_fields", None)
                if fields is not None and part in fields:
                    node = fields[part].annotation
                elif dataclasses.is_dataclass(node) and \
                        part in {f.name for f in dataclasses.fields(node)}:
                    node = None
                elif hasattr(node, part):
                    node = getattr(node, part)
                else:
                    break
            else:
                return True
        return False

    missing = []
    for token in set(re.findall(r"`([^`\n]+)`", (ROOT / "docs" / "architecture.md").read_text())):
        name = token.split("(")[0]
        if name.endswith((".py", "/")):
            if name.rstrip("/").split("/")[-1] not in files:
                missing.append(token)
        elif re.fullmatch(r"[A-Za-z_]\w*(\.\w+)*", name) and \
                not re.fullmatch(r"\w+\.(json|md)", name) and not resolves(name):
            missing.append(token)
    assert not missing, missing


def test_every_import_follows_the_flow_architecture_md_allows():
    """Each import inside the package goes to a module left of its own on architecture.md's line,
    or beside it; view/ imports neither train nor cli, and only train and cli import view/; no two
    modules import each other."""
    import ast

    text = (ROOT / "docs" / "architecture.md").read_text()
    line = next(x for x in _section(text, "## Allowed imports").splitlines() if "←" in x)
    rank = {name: i for i, step in enumerate(line.split("←")) for name in re.findall(r"\w+", step)}
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
                edges.add((here, target))
                src, dst = group(here), group(target)
                if id(node) in typing_only or src == dst or \
                        src in ("cli", "cli_options", "sysdate", "__main__", "date_engine"):
                    continue
                if src == "view":
                    ok = dst not in ("train", "cli")
                elif dst == "view":
                    ok = src in ("train", "cli")
                else:
                    ok = rank[dst] <= rank[src]
                if not ok:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
    assert not wrong, wrong
    assert not sorted((a, b) for a, b in edges if (b, a) in edges and a < b)


def test_the_package_imports_neither_the_benchmarks_nor_the_studies():
    """date_engine imports nothing from benchmarks/ or lab/, and the benchmarks a user runs import
    nothing from the studies: each room stands on the package alone."""
    import ast

    wrong = []
    for room, banned in (("date_engine", ("benchmarks", "lab")), ("benchmarks", ("lab",))):
        for path in (ROOT / room).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                    [a.name for a in node.names] if isinstance(node, ast.Import) else []
                wrong += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
                          for name in names if name.split(".")[0] in banned]
    assert not wrong, wrong


# ------------------------------------------------------------------ results tables, from data


def test_every_generated_table_is_what_its_data_gives():
    from lab.results_tables import FILES, TABLES, stale

    assert not stale()
    names = {m for f in FILES for m in re.findall(r"<!-- generated: ([\w-]+) -->",
                                                  (ROOT / f).read_text())}
    assert names == set(TABLES), "every table is in a page, once or more"


def test_a_number_edited_by_hand_in_a_generated_table_fails(tmp_path):
    """The check sees one digit changed in a generated table, and not in the prose around it."""
    import shutil

    from lab.results_tables import FILES, stale

    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    page = tmp_path / "docs" / "results.md"
    text = page.read_text()
    assert not stale(tmp_path)
    edited = "| 8 | −0.30 | −0.23 | **−0.21** |"
    page.write_text(text.replace("| 8 | −0.30 | −0.23 | **−0.22** |", edited, 1))
    assert stale(tmp_path) == ["docs/results.md: rules"]
    page.write_text(text.replace("Every number here", "Every figure here", 1))
    assert not stale(tmp_path)


def test_stored_sweeps_recompute_what_the_sweep_reported():
    """A stored sweep's summary is rebuilt with date sweep's own code: the verdict sentence it
    printed (kept in its settings' command's report) follows from its cells."""
    from lab.results_data import group, sweep, sweep_rows

    header, cells = sweep_rows("lenet-mnist-rules")
    assert header["settings"]["command"].startswith("date sweep recipes/lenet-mnist.yaml")
    assert {c["seed"] for c in cells} == {0, 1} and len(cells) == 2 + 3 * 3 * 2
    summary = sweep("lenet-mnist-rules")
    assert summary.baseline.mean == pytest.approx((99.16 + 99.15) / 2)
    assert group("lenet-mnist-rules", "linear", 2048).holds is False
    assert summary.verdicts(["date"])["date"].startswith("holds accuracy up to 1024")


def test_the_forecasts_quoted_misses_are_the_studies():
    """The constants `date plan`'s how-sure line quotes are recomputed from the stored probes and
    sweeps: the worst held-out miss of B_hold's constant, its miss where no larger batch held,
    and each steps-limited study's miss."""
    from date_engine.forecast import (
        HELD_OUT_MISS,
        HOLDING_FACTOR,
        PLATEAU_MISS,
        STEPS_LIMITED_MISSES,
    )
    from lab.holdout import (
        NOTHING_HELD,
        leave_one_out,
        lr_check_studies,
        three_seed_studies,
    )

    worst = max(row.miss for rows in (leave_one_out(), leave_one_out(three_seed_studies()))
                for row in rows)
    assert round(worst, 2) == HELD_OUT_MISS
    assert round(max(s.worst_miss(HOLDING_FACTOR) for s in NOTHING_HELD), 2) == PLATEAU_MISS
    limited: dict[str, float] = {}
    for _, study in lr_check_studies():
        if any(p.curve.steps_limited for p in study.curves):
            name = study.name.split(",")[0]
            limited[name] = max(limited.get(name, 0), study.worst_miss(HOLDING_FACTOR))
    assert tuple(sorted((n, round(m, 2)) for n, m in limited.items())) == STEPS_LIMITED_MISSES


def test_the_transformer_recipes_quote_their_studies():
    """vit-mnist's and bert-mlm's headers quote the default rule with their probes: vit-mnist at
    32× over eight seeds and its ramp, bert-mlm's ramp."""
    from lab.results_data import group, seed_metrics, sweep
    from lab.results_tables import EXPONENT, delta

    recipes = ROOT / "date_engine" / "recipes" / "specs"
    vit = " ".join((recipes / "vit-mnist.yaml").read_text().replace("#", " ").split())
    rows = next(rows for study, _, _, rows in EXPONENT if study.endswith("from 4e-3"))
    _, paper, _, sqrt = next(r for r in rows if r[0] == 32)
    assert len(seed_metrics([n for n, _ in sqrt], "date", 4096)) == 8
    assert (f"over 8 seeds {delta(sqrt, 4096):.1f} against the paper's {delta(paper, 4096):.1f}, "
            "not told apart seed by seed") in vit
    ramp = group("vit-mnist-lr4e-3-ramp-new", "date+ramp", 4096)
    base = sweep("vit-mnist-lr4e-3-ramp-new").baseline
    ratio = base.steps / (sum(r.steps for r in ramp.results) / 2)
    assert f"(+{ramp.delta:.2f} in {ratio:.1f}x fewer steps than the baseline)" in vit
    bert = " ".join((recipes / "bert-mlm.yaml").read_text().replace("#", " ").split())
    ramp = group("bert4-ramp-new", "date+ramp", 1024)
    seeds = [r.metric for r in ramp.results]
    assert (f"1024 loses {-ramp.delta:.2f} in {ramp.results[0].steps} steps (seeds "
            f"{seeds[0]:.2f}, {seeds[1]:.2f}; its LR check makes the rule sqrt(k))") in bert


def test_the_changelogs_newest_release_is_the_version_pyproject_carries():
    import date_engine

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d\d-\d\d$",
                          (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    assert releases[0] == version == date_engine.__version__
    assert releases[-1] == "0.1.0"


def test_without_a_probe_the_default_is_at_most_half_a_point_behind_the_papers_rule():
    """0.8's bound for taking √k without a probe, recomputed from the stored cells of the rules
    table, and the worst cell as results.md quotes it."""
    from lab.results_tables import worst_default_against_paper

    worst, where = worst_default_against_paper()
    assert worst <= 0.5, where
    text = " ".join((ROOT / "docs" / "results.md").read_text().split())
    assert f"at worst {worst:.2f} behind it ({where})" in text


def test_the_noise_scale_caps_decision_is_what_its_cells_give():
    """The criterion written before the cap's cells ran, applied to the stored cells: adopted
    only if no cell falls below the uncapped one by more than the seeds' spread and one or more
    rise above it by more than that; results.md states the decision the data gives."""
    from lab.results_tables import cap_cells, cap_decision

    rows = cap_cells()
    assert len(rows) == 6
    diffs = [(d1 if d1 is not None else -100.0) - (d0 if d0 is not None else -100.0)
             for *_, d0, d1, _ in rows]
    spreads = [row[-1] for row in rows]
    adopt = all(d >= -s for d, s in zip(diffs, spreads)) and any(
        d > s for d, s in zip(diffs, spreads))
    assert cap_decision() == adopt
    text = (ROOT / "docs" / "results.md").read_text()
    assert ("By the criterion: adopted." in text) == adopt
    assert ("not adopted; the plan keeps no cap" in text) == (not adopt)
    # the second criterion, on baselines whose check passes: no cell below by more than the spread
    from lab.results_tables import CAP_WHERE_ROOM, cap_where_room_decision

    room = cap_cells(CAP_WHERE_ROOM)
    extend = all((d1 - d0) >= -spread for *_, d0, d1, spread in room)
    assert len(room) == 4 and cap_where_room_decision() == extend
    assert ("Where the check passes: capped there too" in text) == extend
    # the default the code ships is the one the two decisions give
    from date_engine.spec import DateSpec

    assert DateSpec().lr_cap == ("noise" if extend else "auto" if adopt else "none")
    from lab.results_tables import CAP_RAMP, cap_in_ramps_decision

    ramps = cap_cells(CAP_RAMP)
    assert cap_in_ramps_decision() == all((d1 - d0) >= -s for *_, d0, d1, s in ramps)
    assert ("A ramp's rungs: not capped" in text) == (not cap_in_ramps_decision())


def test_every_install_command_shown_works_from_a_clone():
    """Each `pip install` of the project that README, CONTRIBUTING, docs, examples and the
    product's own messages show installs from the clone (`-e .` or `-e '.[extra]'`), and every
    extra it names is one pyproject.toml declares: the package is not on an index, so
    'date-engine[hf]' would fail."""
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
                 ["optional-dependencies"])
    sources = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md")),
               *sorted((ROOT / "examples").glob("*.py")),
               *sorted((ROOT / "date_engine").rglob("*.py")),
               *sorted((ROOT / "date_engine").rglob("*.yaml"))]
    shown = []
    for path in sources:
        text = path.read_text()
        assert "date-engine[" not in text, f"{path}: install from the clone: pip install -e ."
        for named in re.findall(r"-e '?\.\[([\w,]+)\]", text):
            shown.append((path.name, named))
            assert set(named.split(",")) <= extras, f"{path}: extras {named} not in pyproject"
    named = {extra for _, n in shown for extra in n.split(",")}
    assert {"hf", "lightning", "plot", "test"} <= named  # the commands users are told to run


def test_every_figure_is_drawn_from_the_data_as_it_stands():
    """Each SVG under docs/results/figures is the one drawn from the numbers its data gives now
    (lab/results_figures.py records both): a figure left stale by new data, or edited by
    hand, fails. Each is shown in the docs."""
    from lab.results_figures import FIGS, stale

    assert stale() == [], "run python -m lab.results_figures"
    pages = "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    assert all(f"results/figures/{name}.svg" in pages for name in FIGS)
