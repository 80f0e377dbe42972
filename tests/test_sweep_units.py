"""`date sweep`'s parts without training: schemes, cells, tolerances, results and verdicts."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import pytest

from date_engine.catalog import CATALOG
from date_engine.errors import DateError
from date_engine.planning import plan_for
from date_engine.runfolder import RunFolder, RunSummary
from date_engine.spec import parse_spec
from date_engine.sweep import (
    SCHEMES,
    SweepOptions,
    Tolerance,
    parse_batches,
    parse_lr_grid,
    parse_schemes,
    plan_sweep,
)
from date_engine.sweep.grid import Cell
from date_engine.sweep.results import CellResult, read_cell, summarize
from date_engine.sweep.runner import prepare_cell

BASE = {
    "recipe": "lenet-digits",
    "baseline": {"batch_size": 16, "lr": 1e-3, "warmup_epochs": 0.25, "epochs": 8,
                 "dataset_size": 1437, "optimizer": {"name": "rmsprop", "alpha": 0.9}},
    "date": {"layer_ratio": {"mode": "dynamic", "gamma": 4.0}},
}


def cells_of(spec: dict, batches, schemes="date,paper,linear,none,lars,lamb,adam", repeats=1,
             grid=(1e-3, 1e-2), evals=10):
    options = SweepOptions(batches=parse_batches(batches), schemes=parse_schemes(schemes),
                           repeats=repeats, lr_grid=tuple(grid), evals=evals)
    return plan_sweep(parse_spec(spec), options)


# ------------------------------------------------------------------ parsing


def test_batches_accept_k_and_sort():
    assert parse_batches("4k, 1024,1024,256") == [256, 1024, 4096]
    for bad in ("", "12x", "0"):
        with pytest.raises(DateError, match="--batches"):
            parse_batches(bad)


def test_lr_grid_and_schemes_reject_bad_values():
    assert parse_lr_grid("1e-2,1e-3") == [1e-3, 1e-2]
    for bad in ("", "fast", "-1e-3", "inf"):
        with pytest.raises(DateError, match="--lr-grid"):
            parse_lr_grid(bad)
    assert [s.name for s in parse_schemes("linear,date,linear")] == ["linear", "date"]
    with pytest.raises(DateError, match="unknown scheme 'goyal'.*date, paper, linear"):
        parse_schemes("date,goyal")


def test_tolerance_absolute_and_relative():
    points, share = Tolerance.parse("0.3"), Tolerance.parse("5%")
    assert points.target(99.0, True) == pytest.approx(98.7)
    assert share.target(120.0, False) == pytest.approx(126.0)  # perplexity: 5% above is the limit
    assert (str(points), str(share)) == ("0.3", "5%")
    with pytest.raises(DateError, match="--tolerance"):
        Tolerance.parse("a little")


# ------------------------------------------------------------------ schemes and cells


def test_each_scheme_derives_its_own_schedule():
    cells = {c.cell.name: c for c in cells_of(BASE, "256")}  # k = 16
    base = cells["baseline-B16-s0"]
    assert (
        base.spec["date"]["layer_ratio"] == {"mode": "off"} and base.run.plan.peak_lr == 1e-3
    )

    date = cells["date-B256-s0"]  # RMSprop's rule: k^p, α^k, ε/√k
    p = CATALOG["rmsprop"].batch_rule.lr_exponent
    assert date.run.plan.peak_lr == pytest.approx(16**p * 1e-3)
    assert date.run.plan.warmup_epochs == pytest.approx(4.0)
    assert date.run.plan.optimizer.options["alpha"] == pytest.approx(0.9**16)
    assert date.run.plan.optimizer.options["eps"] == pytest.approx(1e-8 / 4)
    assert date.spec["date"]["layer_ratio"] == {"mode": "dynamic", "gamma": 4.0}  # the spec's own

    paper = cells["paper-B256-s0"]  # as printed: √k, the optimizer unchanged
    assert paper.run.plan.peak_lr == pytest.approx(4e-3)
    assert paper.run.plan.optimizer.options["alpha"] == 0.9
    assert paper.spec["date"]["layer_ratio"] == {"mode": "dynamic", "gamma": 4.0}

    linear = cells["linear-B256-s0"]
    assert (
        linear.run.plan.peak_lr == pytest.approx(16e-3)
        and linear.run.plan.warmup_epochs == 0.25
    )
    assert linear.spec["date"]["layer_ratio"] == {"mode": "off"}  # gamma went with the mode
    assert linear.spec["baseline"]["optimizer"] == BASE["baseline"]["optimizer"]

    none = cells["none-B256-s0"]
    assert none.run.plan.peak_lr == 1e-3 and none.run.plan.warmup_epochs == 0.25

    for name in ("lars", "lamb", "adam"):
        grid = cells[f"{name}-B256-lr0.01-s0"]
        assert grid.spec["baseline"]["optimizer"] == {"name": name}  # at the catalog's defaults
        assert (
            grid.run.plan.peak_lr == 1e-2
            and grid.run.plan.warmup_epochs == pytest.approx(4.0)
        )
        assert grid.spec["date"]["layer_ratio"] == {"mode": "off"}
    # every scheme keeps the baseline's epochs: same samples, k times fewer steps
    assert {c.run.plan.total_epochs for c in cells.values()} == {
        base.run.plan.total_epochs
    }
    assert date.run.plan.total_iterations == math.ceil(
        base.run.plan.total_iterations / 16
    )


def test_grid_schemes_keep_the_baselines_weight_decay():
    spec = {
        **BASE,
        "baseline": {**BASE["baseline"], "optimizer": {"name": "momentum", "weight_decay": 5e-4}},
    }
    cells = {c.cell.name: c for c in cells_of(spec, "64", "lamb", grid=(1e-3,))}
    assert cells["lamb-B64-lr0.001-s0"].spec["baseline"]["optimizer"] == {
        "name": "lamb",
        "weight_decay": 5e-4,
    }


def test_cells_cover_seeds_grid_and_skip_the_baseline_batch():
    cells = cells_of(BASE, "16,64,128", "date,adam", repeats=2, grid=(1e-3, 3e-3, 1e-2))
    names = [c.cell.name for c in cells]
    assert names[:2] == ["baseline-B16-s0", "baseline-B16-s1"]
    assert len(names) == len(set(names)) == 2 + 2 * 2 * (1 + 3)  # batch 16 is the baseline only
    assert all(c.spec["train"]["seed"] == c.cell.seed for c in cells)
    for c in cells:
        assert c.spec["train"]["eval_every"] == math.ceil(c.run.plan.total_iterations / 10)


def test_a_batch_legw_cannot_reach_names_the_cell():
    # 8 epochs with 0.25 warmup epochs: at k = 64 LEGW would warm up for 16 epochs
    with pytest.raises(DateError, match=r"cell date-B1024-s0 \(scheme date, batch 1024\).*warmup"):
        cells_of(BASE, "256,1024", "linear,date")


def test_layerwise_optimizers_need_ratios_off():
    spec = {**BASE, "baseline": {**BASE["baseline"], "optimizer": {"name": "lars"}}}
    with pytest.raises(DateError, match="lars applies its own per-layer trust ratio"):
        parse_spec(spec)


# ------------------------------------------------------------------ results and verdicts


def result(scheme, batch, seed, metric, evals, steps=100, lr=None, status="done"):
    r = CellResult(
        Cell(scheme, batch, seed, lr), status, metric=metric, steps=steps, total_steps=steps
    )
    r.evals = evals
    return r


def test_summary_time_to_target_speedup_and_verdict():
    results = [
        result("baseline", 16, 0, 90.0, [(50, 5.0, 80.0), (100, 10.0, 89.6)], steps=400),
        result("baseline", 16, 1, 92.0, [(50, 5.0, 89.5), (100, 10.0, 92.0)], steps=400),
        # target = 91 - 2 = 89: seed 0 reaches it at 10 s, seed 1 at 5 s -> baseline 7.5 s
        result("date", 64, 0, 91.0, [(10, 1.0, 85.0), (20, 2.0, 89.0)]),
        result("date", 64, 1, 90.0, [(10, 1.0, 89.5), (20, 2.0, 90.0)]),
        result("date", 256, 0, 80.0, [(5, 0.5, 70.0), (10, 1.0, 80.0)]),
        result("date", 256, 1, 82.0, [(5, 0.5, 75.0), (10, 1.0, 82.0)]),
    ]
    summary = summarize(results, "accuracy", True, Tolerance.parse("2"), ["date"])
    assert summary.baseline.mean == 91.0 and summary.target == 89.0
    assert summary.baseline.time_to_target_s == 7.5
    at64, at256 = summary.groups
    assert at64.holds and at64.delta == pytest.approx(-0.5)
    assert at64.time_to_target_s == 1.5 and at64.speedup == pytest.approx(5.0)
    assert not at256.holds and at256.time_to_target_s is None and at256.reached == 0
    verdict = summary.verdicts(["date"])["date"]
    assert verdict.startswith("holds accuracy up to 64; at 256 it falls to 81")
    assert "5.00× faster" in verdict and "4× fewer steps" in verdict


def test_lower_is_better_and_divergence():
    results = [
        result("baseline", 20, 0, 100.0, [(10, 10.0, 150.0), (20, 20.0, 100.0)]),
        result("linear", 320, 0, None, [], status="diverged"),
        result("date", 320, 0, 104.0, [(1, 1.0, 130.0), (2, 2.0, 104.0)]),
    ]
    summary = summarize(results, "perplexity", False, Tolerance.parse("5%"), ["date", "linear"])
    date, linear = summary.groups
    assert date.holds and date.speedup == pytest.approx(10.0)
    assert linear.holds is False
    verdicts = summary.verdicts(["date", "linear"])
    assert verdicts["linear"] == "does not hold accuracy: at 320 it diverges"


def test_grid_keeps_the_best_mean_lr():
    results = [result("baseline", 16, 0, 90.0, [(1, 1.0, 90.0)])]
    for lr, metrics in ((1e-3, (85.0, 86.0)), (1e-2, (91.0, 88.0)), (1e-1, (None, None))):
        for seed, m in enumerate(metrics):
            results.append(
                result("adam", 64, seed, m, [], lr=lr, status="done" if m else "diverged")
            )
    (group,) = summarize(results, "accuracy", True, Tolerance.parse("1"), ["adam"]).groups
    assert group.grid_lr == 1e-2 and group.mean == 89.5
    assert group.tried == {1e-3: 85.5, 1e-2: 89.5, 1e-1: None}


def test_read_cell_follows_a_run_folder(tmp_path):
    cell = Cell("date", 64, 0)
    assert read_cell(cell, tmp_path, "accuracy").status == "pending"
    planned = plan_for(parse_spec(BASE), 64)
    (tmp_path / "plan.json").write_text(json.dumps(planned.to_dict()))
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 10, "epoch": 1.3, "lr": 0.002, "loss": 1.5, "time_s": 2.0}\n'
        '{"step": 15, "eval": {"accuracy": 70.0}, "time_s": 3.0}\n'
        '{"step": 20, "epoch": 2.6, "lr": 0.0'
    )  # cut short by a kill
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step-00000010.pt").write_bytes(b"")
    partial = read_cell(cell, tmp_path, "accuracy")
    assert (partial.status, partial.steps, partial.evals, partial.losses) == (
        "partial",
        10,
        [(15, 3.0, 70.0)],
        [(1.3, 1.5)],
    )
    assert (partial.total_steps, partial.peak_lr) == (planned.plan.total_iterations,
                                                       planned.plan.peak_lr)
    RunFolder(tmp_path).write_summary(
        RunSummary(
            "lenet-digits", 30, 30, None, "accuracy", 91.0, 9.0, 200.0, None, planned.to_dict()
        )
    )
    done = read_cell(cell, tmp_path, "accuracy")
    assert (done.status, done.metric, done.steps) == ("done", 91.0, 30)
    (tmp_path / "FAILED.json").write_text("{}")
    assert read_cell(cell, tmp_path, "accuracy").status == "diverged"


def test_a_cell_folder_is_not_shared(tmp_path):
    planned = cells_of(BASE, "64", "date")[1]
    folder = prepare_cell(tmp_path, planned)
    lock = folder.lock("date scale cell.yaml")  # a running cell holds its folder's lock
    with pytest.raises(DateError, match=r"is being trained by process \d+ on .*date scale"):
        prepare_cell(tmp_path, planned)
    lock.release()  # as when that process ends, however it ends
    prepare_cell(tmp_path, planned)
    other = cells_of({**BASE, "baseline": {**BASE["baseline"], "lr": 2e-3}}, "64", "date")[1]
    with pytest.raises(DateError, match="trained with other settings"):
        prepare_cell(tmp_path, other)


def test_a_cell_written_before_a_new_spec_field_is_the_same_cell(tmp_path):
    """A sweep resumed after an upgrade that added a spec field (spike_guard did) or changed a
    default's spelling (date.second_moment, written as scaled before branches could measure it):
    the cell.yaml of the older version is the same cell; at another value it is not."""
    planned = cells_of(BASE, "64", "date")[1]
    folder = prepare_cell(tmp_path, planned)
    text = folder.cell_spec_path.read_text()
    assert "second_moment" not in text and "spike_guard: true" in text
    older = text.replace("  spike_guard: true\n", "").replace(
        "date:\n", "date:\n  second_moment: scaled\n")
    folder.cell_spec_path.write_text(older)
    prepare_cell(tmp_path, planned)
    assert folder.cell_spec_path.read_text() == text  # written again by this version
    folder.cell_spec_path.write_text(older.replace("second_moment: scaled", "second_moment: fixed"))
    with pytest.raises(DateError, match="trained with other settings"):
        prepare_cell(tmp_path, planned)


def test_sweeps_that_differ_in_settings_moot_at_the_baseline_batch_share_its_cells(tmp_path):
    """At k = 1 the LR scaling, warmup and rule change nothing: a sweep with --set
    date.scaling=sqrt trains (and finds finished) the same baseline cells as one without; a
    baseline cell.yaml written with those keys (as before) is the same cell."""
    plain = cells_of(BASE, "64", "date")[0]
    given = cells_of({**BASE, "date": {"scaling": "sqrt", "warmup": "constant",
                                       "second_moment": "fixed"}}, "64", "date")
    assert plain.cell.scheme == given[0].cell.scheme == "baseline"
    assert given[0].spec == plain.spec and "scaling" not in plain.spec.get("date", {})
    assert given[1].spec["date"]["scaling"] == "sqrt"  # the date scheme's cell keeps it
    folder = prepare_cell(tmp_path, plain)
    text = folder.cell_spec_path.read_text()
    older = text.replace("date:\n", "date:\n  rule: date\n  scaling: sqrt\n")
    assert older != text
    folder.cell_spec_path.write_text(older)
    prepare_cell(tmp_path, plain)  # the keys an older version wrote: moot, the same cell
    assert folder.cell_spec_path.read_text() == text


def test_every_scheme_is_documented():
    assert set(SCHEMES) == {"date", "paper", "linear", "none", "lars", "lamb", "adam"}
    assert all(s.summary for s in SCHEMES.values())


def test_a_batch_can_hold_on_the_mean_while_a_seed_misses_the_target():
    results = [
        result("baseline", 16, 0, 90.0, [(100, 10.0, 90.0)], steps=400),
        result("date", 64, 0, 91.0, [(100, 2.0, 91.0)]),
        result(
            "date", 64, 1, 88.6, [(100, 2.0, 88.6)]
        ),  # mean 89.8 holds; this seed never gets to 89
    ]
    (group,) = (
        summary := summarize(results, "accuracy", True, Tolerance.parse("1"), ["date"])
    ).groups
    assert group.holds and group.reached == 1 and group.speedup is None
    assert summary.verdicts(["date"])["date"] == (
        "holds accuracy at every batch run, up to 64 (4×); at 64: 4× fewer steps, no time to "
        "target "
        "(1 of 2 seeds reached it)"
    )


def test_cells_that_do_not_ramp_leave_the_ramps_settings_out():
    """A sweep that varies only a ramp's settings (--set date.ramp_reach=2) shares its baseline
    and same-epochs cells with one that did not: their specs are the same text."""
    reach = {**BASE, "date": {**BASE["date"], "ramp_reach": 2.0, "ramp": "planned"}}
    plain, varied = cells_of(BASE, "64", "date"), cells_of(reach, "64", "date")
    for a, b in zip(plain, varied):
        assert a.cell == b.cell and a.spec == b.spec
        assert "ramp_reach" not in a.spec["date"] and "ramp" not in a.spec["date"]


def test_date_sweep_never_imports_torch(tmp_path):
    """`date sweep` only starts `date scale` processes: its modules, the thread rule and the
    machine line of its report load no torch (the cells do)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from date_engine.cli import app\n"
        "import date_engine.sweep.runner, date_engine.view.report\n"
        "r = CliRunner().invoke(app, ['sweep', 'lenet-digits', '--batches', '64', '--report-only',"
        f" '-o', {str(tmp_path / 'sweep')!r}])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert "logical CPUs" in json.loads((tmp_path / "sweep" / "results.json").read_text())[
        "settings"]["machine"]


def test_the_machine_line_names_the_drivers_gpus(tmp_path):
    from date_engine.machine import describe

    for i, model in enumerate(["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]):
        (tmp_path / f"0000:0{i}:00.0").mkdir()
        (tmp_path / f"0000:0{i}:00.0" / "information").write_text(
            f"Model: \t\t {model}\nIRQ:   \t\t 42\n")
    assert ", 2 × NVIDIA H100 80GB HBM3, " in describe(tmp_path)
    assert " × " not in describe(tmp_path / "absent")


def test_the_machine_line_names_the_cpus_family_and_vector_unit(tmp_path):
    """Two CPUs sold as "AMD EPYC" ran one bert-mlm baseline to different places; the line tells
    them apart by family, model and the widest vector instructions torch can use."""
    from date_engine.machine import describe

    entry = ("processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
             "model name\t: AMD EPYC\nflags\t\t: fpu sse2 {flags}\n")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("\n".join(entry.format(n=n, flags="avx avx2 fma") for n in range(2)))
    assert describe(tmp_path / "none", cpuinfo).startswith("AMD EPYC (family 25 model 1, AVX2), ")
    cpuinfo.write_text(entry.format(n=0, flags="avx avx2 avx512f"))
    assert describe(tmp_path / "none", cpuinfo).startswith("AMD EPYC (family 25 model 1, AVX-512)")
    assert "logical CPUs" in describe(tmp_path / "none", tmp_path / "absent")


def test_the_live_table_and_the_plain_lines_follow_the_cells():
    """On a terminal a table of every cell (its steps out of its plan's); elsewhere one line per
    cell as it ends, said once."""
    import io

    from rich.console import Console

    from date_engine.view.sweep import SweepProgress

    cells = cells_of(BASE, "64", "date")
    results = {c.cell: CellResult(c.cell, "pending") for c in cells}
    screen = io.StringIO()
    with SweepProgress(Console(file=screen, force_terminal=True, width=120), cells, results):
        pass
    for c in cells:
        assert c.cell.name in screen.getvalue()
        assert f"0/{c.run.plan.total_iterations}" in screen.getvalue()
    log = io.StringIO()
    plain = SweepProgress(Console(file=log, force_terminal=False, width=120), cells, results)
    results[cells[-1].cell] = CellResult(cells[-1].cell, "done", metric=91.5, steps=40)
    plain.update()
    plain.update()
    assert log.getvalue() == f"{cells[-1].cell.name}: done, metric 91.5, 40 steps\n"


def test_grid_set_reaches_the_tuned_optimizer_only():
    """--grid-set gives the optimizer the grid schemes tune an option of its own (LAMB's
    phi_bounds) and leaves the baseline and the rules' cells alone; an option that optimizer does
    not take names the cell."""
    from date_engine.sweep import parse_grid_options

    grid = parse_grid_options(["phi_bounds=[1, 10]"])
    assert grid == {"phi_bounds": [1, 10]}
    options = SweepOptions(batches=[64], schemes=parse_schemes("date,lamb"), lr_grid=(1e-3,),
                           grid_options=grid)
    cells = plan_sweep(parse_spec(BASE), options)
    by_scheme = {c.cell.scheme: c for c in cells}
    assert by_scheme["lamb"].spec["baseline"]["optimizer"]["phi_bounds"] == [1, 10]
    assert by_scheme["lamb"].run.plan.optimizer.options["phi_bounds"] == (1.0, 10.0)
    for name in ("date", "baseline"):
        assert "phi_bounds" not in by_scheme[name].spec["baseline"]["optimizer"]
    with pytest.raises(DateError, match="adam-B64.*'phi_bounds' is not an option of the adam"):
        plan_sweep(parse_spec(BASE), SweepOptions(batches=[64], schemes=parse_schemes("adam"),
                                                  lr_grid=(1e-3,), grid_options=grid))
    with pytest.raises(DateError, match="--grid-set 'a.b=1'"):
        parse_grid_options(["a.b=1"])


def test_the_report_puts_each_cells_forecast_time_beside_the_measured(tmp_path):
    from date_engine.sweep import sweep_time_forecast
    from date_engine.timing import forecast
    from date_engine.view.sweep import report_markdown
    from tests.test_timing import _bench

    cells = cells_of(BASE, "64", schemes="date", repeats=2)
    bench = tmp_path / "bench.json"
    _bench().write(bench)
    timed = sweep_time_forecast(bench, cells, "lenet-digits")
    for planned in cells:
        assert timed["cells"][planned.cell.name] == forecast(_bench(), planned.run).run_seconds
    results = []
    for planned in cells:
        r = result(planned.cell.scheme, planned.cell.batch, planned.cell.seed, 90.0,
                   [(10, 1.0, 90.0)])
        r.train_s = 2 * timed["cells"][planned.cell.name]  # measured: twice the forecast
        results.append(r)
    summary = summarize(results, "accuracy", True, Tolerance.parse("1"), ["date"])
    settings = {"spec": "s.yaml", "command": "date sweep", "jobs": 1, "nproc": 1, "evals": 10,
                "time_forecast": timed}
    report = report_markdown(summary, settings, ["date"], {})
    assert "## Training time: forecast against measured" in report
    row = next(x for x in report.splitlines() if x.startswith("| 64 | date |"))
    assert row.endswith("| 0.50 |")
    with pytest.raises(DateError, match="recipe lenet-digits, not gnmt"):
        sweep_time_forecast(bench, cells, "gnmt")


def test_figures_are_redrawn_at_most_once_a_minute_while_cells_train(tmp_path, monkeypatch):
    """After each cell the tables and report.md are written anew; the figures only when a minute
    has passed since they were last drawn (or the sweep started), and always when it ends."""
    from rich.console import Console

    import date_engine.sweep.runner as runner
    import date_engine.view.report as report
    from date_engine.recipes import get_recipe
    from date_engine.sweep import run_sweep
    from date_engine.view.report import SweepDisplay

    cells = cells_of(BASE, "64", schemes="date")
    clock = [1000.0]
    drawn, reports = [], []
    monkeypatch.setattr("time.monotonic", lambda: clock[0])

    def draw(root, summary, schemes, plan_of):
        drawn.append(clock[0])
        (root / "metric_vs_batch.png").write_bytes(b"png")
        return {"metric_vs_batch.png": True}

    def train(root, planned, *, on_change, **_):
        results = [read_cell(p.cell, tmp_path / "none", "accuracy") for p in planned]
        for minutes in (0.5, 0.9, 1.2, 1.5, 2.3):  # cells ending at these minutes
            clock[0] = 1000.0 + 60 * minutes
            on_change(results)
            reports.append((root / "report.md").read_text())
        clock[0] = 1000.0 + 60 * 2.4
        return results, 0

    monkeypatch.setattr(report, "sweep_figures", draw)
    monkeypatch.setattr(runner, "run_cells", train)
    options = SweepOptions(batches=[64], schemes=parse_schemes("date"))
    run_sweep(get_recipe("lenet-digits"), cells, options, tmp_path / "sweep",
              {"spec": "lenet-digits.yaml", "command": "date sweep lenet-digits.yaml"},
              SweepDisplay(Console(quiet=True)))
    assert [round((t - 1000) / 60, 1) for t in drawn] == [1.2, 2.3, 2.4]  # the last: the end
    assert "metric_vs_batch.png: not drawn yet: they are drawn when the sweep ends" in reports[0]
    assert "![" in reports[3] and "![" in reports[4]  # drawn before: linked, not redrawn


def test_a_figure_not_drawn_says_why(tmp_path):
    """time_to_target.png needs the baseline's time to the target: where a baseline seed never
    reached it, the report says so (it said "no finished cells yet" of finished cells)."""
    pytest.importorskip("matplotlib")
    from date_engine.view.plots import sweep_figures

    results = [
        result("baseline", 16, 0, 90.0, [(100, 10.0, 90.0)], steps=400),
        result("baseline", 16, 1, 87.0, [(100, 10.0, 87.0)], steps=400),  # target 87.5: missed
        result("date", 64, 0, 85.0, [(100, 2.0, 85.0)]),
    ]
    summary = summarize(results, "accuracy", True, Tolerance.parse("1"), ["date"])
    drawn = sweep_figures(tmp_path, summary, ["date"], lambda cell: None)
    assert drawn["time_to_target.png"] == (
        "not drawn: the baseline reached the target on 1 of its 2 seeds, so it has no time to "
        "target to compare with")
    assert drawn["metric_vs_batch.png"] is True and not (tmp_path / "time_to_target.png").exists()
    nothing = summarize(results[2:], "accuracy", True, Tolerance.parse("1"), ["date"])
    assert sweep_figures(tmp_path, nothing, ["date"], lambda cell: None)[
        "time_to_target.png"] == "not drawn: no finished cells yet"


def test_date_sweep_says_when_a_set_reaches_no_schemes_cells(tmp_path):
    """The schemes set their own rule, and all but date their own LR scaling and warmup: a --set
    that reaches none of the schemes asked for is said, not ignored."""
    from typer.testing import CliRunner

    from date_engine.cli import app

    def sweep(*extra):
        out = CliRunner().invoke(app, ["sweep", "lenet-digits", "--batches", "64", "--report-only",
                                       "-o", str(tmp_path / "sweep"), *extra],
                                 env={"COLUMNS": "200"})
        assert out.exit_code == 0, out.output
        return " ".join(out.output.split())

    sets = ("--set", "date.scaling=sqrt", "--set", "date.warmup=constant")
    said = sweep(*sets, "--schemes", "paper,linear")
    assert "date.scaling=sqrt, date.warmup=constant reaches no scheme's cells" in said
    assert "reaches no scheme's cells" not in sweep(*sets, "--schemes", "date,paper")
    report = (tmp_path / "sweep" / "report.md").read_text()
    assert "here with date.scaling=sqrt, date.warmup=constant from the spec." in report
    assert "date.rule=paper reaches no scheme's cells" in sweep("--set", "date.rule=paper")
    assert "reaches no scheme's cells" not in sweep("--set", "date.lr_floor=1e-6")


def test_the_date_scheme_keeps_the_specs_lr_scaling_and_warmup_and_the_paper_scheme_does_not():
    """``--set date.scaling=sqrt`` sweeps the default rule with √k: β2, ε and λ still scaled (as
    ``date scale`` trains that spec); the paper's scheme stays the rule as printed."""
    from date_engine.plan import derive_plan
    from date_engine.sweep.schemes import SCHEMES, scheme_spec

    raw = {"recipe": "vit-mnist", "baseline": {"batch_size": 128, "lr": 4e-3, "epochs": 10,
                                                "warmup_epochs": 0.2,
                                                "optimizer": {"name": "adamw",
                                                              "weight_decay": 0.05}}}
    given = parse_spec({**raw, "date": {"scaling": "sqrt", "warmup": "constant"}})

    def plan(spec, scheme):
        return derive_plan(scheme_spec(spec, SCHEMES[scheme]), 4096, dataset_size=60000)

    default, date, paper = plan(parse_spec(raw), "date"), plan(given, "date"), plan(given, "paper")
    assert date.peak_lr == pytest.approx(32 ** 0.5 * 4e-3) == paper.peak_lr
    assert default.peak_lr == pytest.approx(32 ** 0.5 * 4e-3)  # no probe: √k
    assert date.warmup_epochs == pytest.approx(0.2)
    assert paper.warmup_epochs == default.warmup_epochs == pytest.approx(32 * 0.2)
    assert date.optimizer.options["betas"][1] == default.optimizer.options["betas"][1] \
        == pytest.approx(0.999 ** 32)  # the default rule's β2^k, kept under √k
    assert paper.optimizer.options["betas"][1] == 0.999


def test_a_sweeps_probe_reaches_every_cell_of_the_default_rule(tmp_path):
    """The default rule reads the probe's LR check (a steps-limited baseline takes the adaptive
    family to √k), so `--probe` reaches every `date` cell, same-epochs ones too; the paper's
    cells, whose rule reads no probe, are trained without it."""
    from date_engine.probe import LRCheck, NoisePoint, Probe, baseline_identity

    points = (NoisePoint(0.25, 20.0, 1.0, 20.0, 2.0), NoisePoint(0.75, 40.0, 1.0, 40.0, 1.0))
    identity = baseline_identity(parse_spec(BASE), BASE["baseline"]["dataset_size"])
    probe = Probe(baseline=identity, baseline_epochs=8.0, steps=90, baseline_steps=720,
                  epochs=1.0, micro_batch=4, world_size=1, accumulation_steps=4,
                  wall_seconds=9.0, points=points, lr_check=LRCheck(2.0, loss=1.0,
                                                                    baseline_loss=1.0))
    probe.write(tmp_path / "probe.json")
    assert probe.curve.steps_limited

    def exponents(probe_path):
        options = SweepOptions(batches=[128], schemes=parse_schemes("date,paper"), repeats=1,
                               probe=probe_path)
        cells = plan_sweep(parse_spec(BASE), options)
        return {c.cell.scheme: (c.spec["date"].get("probe"), c.run.plan.lr_exponent)
                for c in cells if c.cell.scheme != "baseline"}

    path = str(tmp_path / "probe.json")
    assert exponents(path) == {"date": (path, 0.5), "paper": (None, 0.5)}
    assert exponents(None) == {"date": (None, 0.5), "paper": (None, 0.5)}
    room = dataclasses.replace(probe, lr_check=LRCheck(2.0, loss=0.5, baseline_loss=1.0))
    room.write(tmp_path / "room.json")
    assert exponents(str(tmp_path / "room.json"))["date"][1] == 0.75


def test_paired_differences_and_their_t_interval():
    from date_engine.sweep.results import paired, t_975

    # scipy.stats.t.ppf(0.975, df) for df 1, 4, 30, 31, 100
    for df, t in ((1, 12.7062), (4, 2.7764), (30, 2.0423), (31, 2.0395), (100, 1.9840)):
        # bound: scipy's values to 4 decimals (±5e-5) and t_975's own accuracy (its docstring:
        # the table exact, Cornish–Fisher within 1e-4 from 30 degrees of freedom on)
        assert t_975(df) == pytest.approx(t, abs=2e-4)
    pair = paired({0: 90.0, 1: 91.0, 2: 95.0, 5: 70.0}, {0: 89.0, 1: 89.0, 2: 92.0, 3: 99.0})
    assert pair.seeds == (0, 1, 2) and pair.differences == (1.0, 2.0, 3.0)
    # mean 2, sd 1, n 3: 4.303 / √3
    assert pair.mean == 2.0 and pair.half_width == pytest.approx(4.3027 / math.sqrt(3))
    assert pair.reading(higher_is_better=True) == "level"  # 2 − 2.48 < 0
    assert paired({0: 1.0}, {1: 1.0}) is None
    assert paired({0: 2.0}, {0: 1.0}).reading(True) == "one seed"
    # seeds whose interval would be ±w at sd 1: t(n−1)/√n ≤ w; t(5)/√6 = 1.05, t(6)/√7 = 0.925
    assert pair.seeds_for_half_width(1.0) == 7
    assert pair.seeds_for_half_width(0.5) == 18  # t(16)/√17 = 0.514, t(17)/√18 = 0.497
    assert pair.seeds_for_half_width(pair.half_width) == 3  # the interval it has
    assert pair.seeds_for_half_width(100.0) == 2  # never fewer than a pair
    assert paired({0: 2.0}, {0: 1.0}).seeds_for_half_width(1.0) is None  # one seed: no spread
    assert paired({0: 2.0, 1: 3.0}, {0: 1.0, 1: 2.0}).seeds_for_half_width(1.0) == 2
    assert pair.seeds_for_half_width(0.0) is None
    # level within a tolerance: the interval inside ±tolerance (here −0.24 to +0.27)
    close = paired({0: 0.1, 1: -0.1, 2: 0.05}, {0: 0.0, 1: 0.0, 2: 0.0})
    assert close.reading(True, tolerance=0.3) == "within"
    assert close.reading(True, tolerance=0.2) == close.reading(True) == "level"
    assert pair.reading(True, tolerance=10.0) == "within"  # −0.48 to 4.48 inside ±10


def test_the_sweep_sets_date_beside_each_other_scheme_seed_by_seed():
    """Seeds pair across schemes: a scheme ahead on every seed by about the same amount is told
    apart however far the seeds spread, one whose lead changes sign is not; a seed that did not
    finish on one side is left out; lower-is-better metrics flip ahead and behind."""
    from date_engine.sweep.results import t_975
    from date_engine.view.sweep import report_markdown, side_by_side_lines

    results = [result("baseline", 16, s, 90.0, []) for s in range(4)]
    for seed, (date, paper, linear) in enumerate(
            [(80.0, 79.0, 81.0), (90.0, 88.9, 85.0), (70.0, 69.1, 75.0), (85.0, 84.0, None)]):
        results += [result("date", 64, seed, date, []), result("paper", 64, seed, paper, []),
                    result("linear", 64, seed, linear, [],
                           status="done" if linear else "diverged")]
    summary = summarize(results, "accuracy", True, Tolerance.parse("1"),
                        ["paper", "date", "linear"])
    paper, linear = summary.side_by_side()
    assert (paper.scheme, paper.other, paper.batch) == ("date", "paper", 64)
    assert paper.paired.seeds == (0, 1, 2, 3) and paper.paired.mean == pytest.approx(1.0)
    assert paper.paired.reading(True) == "ahead"
    assert linear.paired.seeds == (0, 1, 2) and linear.paired.reading(True) == "level"
    assert summary.to_dict()["side_by_side"][0]["reading"] == "ahead"
    lines = side_by_side_lines(summary)
    assert lines[0].startswith("date − paper at 64: +1 over 4 seeds (95% interval +0.")
    assert lines[0].endswith(": date ahead")
    # where the seeds do not tell them apart: how many would narrow the interval to ±1, the
    # tolerance — the fewest n with t(n−1)·sd/√n ≤ 1
    spread, needed = statistics.stdev([-1.0, 5.0, -5.0]), linear.seeds_for_tolerance
    assert linear.tolerance == 1.0
    assert t_975(needed - 1) * spread / math.sqrt(needed) <= 1.0 \
        < t_975(needed - 2) * spread / math.sqrt(needed - 1)
    assert lines[1].endswith(f": not told apart; about {needed} paired seeds would narrow the "
                             "interval to ±1, the tolerance")
    assert summary.to_dict()["side_by_side"][1]["seeds_for_tolerance"] == needed
    settings = {"spec": "s.yaml", "command": "date sweep", "jobs": 1, "nproc": 1, "evals": 10}
    report = report_markdown(summary, settings, ["paper", "date", "linear"], {})
    assert "| 64 | date − paper | 0, 1, 2, 3 | +1, +1.1, +0.9, +1 | +1 |" in report
    assert "| reads | seeds for ±1 |" in report
    assert "| 64 | date − linear | 0, 1, 2 | -1, +5, -5 |" in report
    assert report.split("| 64 | date − linear |")[1].split("\n")[0].endswith(
        f"| not told apart | {needed} |")
    loose = summarize(results, "accuracy", True, Tolerance.parse("20"), ["date", "linear"])
    assert side_by_side_lines(loose)[0].endswith(": level within ±20")  # −12.8 to +12.2
    assert "| level within ±20 | 3 |" in report_markdown(loose, settings, ["date", "linear"], {})
    flipped = summarize(results, "perplexity", False, Tolerance.parse("1"), ["date", "paper"])
    assert flipped.side_by_side()[0].paired.reading(False) == "behind"
    alone = summarize(results, "accuracy", True, Tolerance.parse("1"), ["paper"])
    assert alone.side_by_side() == [] and "Side by side" not in report_markdown(
        alone, settings, ["paper"], {})
