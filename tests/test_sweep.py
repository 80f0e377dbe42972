"""`date sweep` end to end on lenet-digits: real cells through `date scale`, reports, resumption."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from date_engine.runfolder import RunFolder
from tests.bounds import hang_limit
from tests.conftest import ROOT
from tests.runs import SPEC, date, final_model, finish

# Every test here starts `date` processes that train: the slow tier (pyproject.toml).
pytestmark = pytest.mark.slow


SHORT = ["--set", "baseline.epochs=3", "--set", "baseline.warmup_epochs=0.1"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "digits"
    result = date("sweep", SPEC, "--batches", "64", "--schemes", "date,linear", "--tolerance", "5",
                  "--jobs", "2", *SHORT, "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out, result


def test_sweep_trains_every_cell_and_reports(swept):
    out, result = swept
    rows = list(csv.DictReader((out / "results.csv").read_text().splitlines()))
    assert [(r["scheme"], r["batch"], r["status"]) for r in rows] == \
        [("baseline", "16", "done"), ("date", "64", "done"), ("linear", "64", "done")]
    for row in rows:  # each row is what that cell's own run reported
        summary = json.loads(
            (out / "cells" / f"{row['scheme']}-B{row['batch']}-s0" / "summary.json").read_text()
        )
        assert float(row["metric"]) == pytest.approx(summary["metric"])
        assert int(row["steps"]) == summary["total_steps"]
    assert [int(r["steps"]) for r in rows] == [
        270,
        68,
        68,
    ]  # 3 epochs of 1437: 4× fewer steps at 64
    assert rows[0]["time_to_target_s"] != ""  # the baseline reaches its own accuracy less 5 points

    data = json.loads((out / "results.json").read_text())
    assert set(data["verdicts"]) == {"date", "linear"}
    assert data["settings"]["tolerance"] == "5" and data["settings"]["command"].startswith(
        "date sweep"
    )
    report = (out / "report.md").read_text()
    assert (
        "## Verdict" in report
        and "| 64 | 4 | date |" in report
        and "| 16 | 1 | baseline |" in report
    )
    for name in ("metric_vs_batch.png", "time_to_target.png", "lr_curves.png", "loss_curves.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert "report: " in result.stdout
    # one seed a cell: date against linear with no interval, from the cells' own metrics
    (side,) = data["summary"]["side_by_side"]
    difference = float(rows[1]["metric"]) - float(rows[2]["metric"])
    assert side["paired"]["differences"] == [pytest.approx(difference)]
    assert (side["scheme"], side["other"], side["reading"]) == ("date", "linear", "one seed")
    assert side["tolerance"] == 5.0 and side["seeds_for_tolerance"] is None  # no spread yet
    assert f"date − linear at 64: {difference:+.3g} over 1 seed: one seed, no interval." \
        in " ".join(result.stdout.split())


def test_a_rerun_skips_finished_cells(swept):
    out, _ = swept
    logs = {p: p.stat().st_mtime_ns for p in out.glob("cells/*/log.txt")}
    before = (out / "results.csv").read_text()
    result = date(
        "sweep",
        SPEC,
        "--batches",
        "64",
        "--schemes",
        "date,linear",
        "--tolerance",
        "5",
        "--jobs",
        "2",
        *SHORT,
        "-o",
        out,
    )
    assert result.returncode == 0, result.stderr
    assert {p: p.stat().st_mtime_ns for p in out.glob("cells/*/log.txt")} == logs  # nothing ran
    assert (out / "results.csv").read_text() == before
    report_only = date(
        "sweep",
        SPEC,
        "--batches",
        "64",
        "--schemes",
        "date,linear",
        "--tolerance",
        "5",
        "--jobs",
        "2",
        *SHORT,
        "-o",
        out,
        "--report-only",
    )
    assert report_only.returncode == 0 and (out / "results.csv").read_text() == before
    command = json.loads((out / "results.json").read_text())["settings"]["command"]
    assert (
        "--report-only" not in command and "--jobs 2" in command
    )  # the run that trained the cells


def test_a_finished_cell_that_lost_its_summary_is_finished_again(swept, tmp_path):
    """A cell whose summary.json was lost once exited 0 "already finished" and the sweep called it
    failed, for ever. Now its summary is written again from the final checkpoint and the final
    evaluation in metrics.jsonl; a cell that lost that evaluation too evaluates its final
    checkpoint."""
    import shutil

    out = tmp_path / "digits"
    shutil.copytree(swept[0], out)
    before = {c: json.loads((out / "cells" / c / "summary.json").read_text())
              for c in ("date-B64-s0", "linear-B64-s0")}
    (out / "cells" / "date-B64-s0" / "summary.json").unlink()
    linear = out / "cells" / "linear-B64-s0"
    (linear / "summary.json").unlink()
    lines = (linear / "metrics.jsonl").read_text().splitlines()
    (linear / "metrics.jsonl").write_text("\n".join(x for x in lines if '"eval"' not in x) + "\n")
    result = date("sweep", SPEC, "--batches", "64", "--schemes", "date,linear", "--tolerance", "5",
                  "--jobs", "2", *SHORT, "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = list(csv.DictReader((out / "results.csv").read_text().splitlines()))
    assert [r["status"] for r in rows] == ["done"] * 3
    for cell, old in before.items():
        new = json.loads((out / "cells" / cell / "summary.json").read_text())
        assert new["metric"] == pytest.approx(old["metric"]) and new["steps"] == old["steps"]
    assert "written again" in (out / "cells" / "date-B64-s0" / "log.txt").read_text()
    assert "evaluating that checkpoint" in (linear / "log.txt").read_text()


def test_an_interrupted_sweep_resumes_its_cell_exactly(tmp_path):
    out = tmp_path / "sweep"
    args = [
        "sweep",
        SPEC,
        "--batches",
        "64",
        "--schemes",
        "date",
        "--set",
        "baseline.epochs=10",  # 900 steps of the baseline's cell (1.6 s idle here, 180 were done
        # before the signal came): it is still training when stopped
        "--set",
        "baseline.warmup_epochs=0.1",
        "--set",
        "train.checkpoint_every=20",
        "-o",
        str(out),
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "date_engine", *args],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    checkpoints = out / "cells" / "baseline-B16-s0" / "checkpoints"
    # bound: a hang guard; the sweep's first checkpoint came within 5 s of its start, idle
    deadline = time.monotonic() + hang_limit(5)
    while not (checkpoints.is_dir() and any(checkpoints.glob("step-*.pt"))):
        assert proc.poll() is None and time.monotonic() < deadline, finish(proc)
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = finish(proc)
    assert proc.returncode == 143, stderr
    assert "Run the same command again" in stderr
    cell = out / "cells" / "baseline-B16-s0"
    assert json.loads((cell / "summary.json").read_text())["stopped_by"] == "SIGTERM"
    assert RunFolder(cell).lock_holder() is None

    again = date(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming from" in (cell / "log.txt").read_text()
    threads = str(RunFolder(cell).read_threads())  # as the cell had: the same summation order
    alone = date(
        "scale",
        cell / "cell.yaml",
        "--batch",
        "16",
        "-o",
        tmp_path / "alone",
        env={"OMP_NUM_THREADS": threads},
    )
    assert alone.returncode == 0, alone.stderr
    resumed, uninterrupted = final_model(cell), final_model(tmp_path / "alone")
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)


def test_grid_schemes_train_with_lars_and_adam_over_two_processes(tmp_path):
    """A grid scheme's cells at 2 processes each, 2 cells at a time, the report keeping each
    scheme's best LR (LAMB, LARS's layerwise sibling, trains at 2 processes in
    tests/test_fsdp.py)."""
    out = tmp_path / "grid"
    result = date(
        "sweep",
        SPEC,
        "--batches",
        "64",
        "--schemes",
        "lars,adam",
        "--lr-grid",
        "2e-3,2e-2",
        "--nproc",
        "2",
        "--jobs",
        "2",
        "--set",
        "baseline.epochs=1",
        "--set",
        "baseline.warmup_epochs=0.1",
        "-o",
        out,
        idle_s=45,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = list(csv.DictReader((out / "results.csv").read_text().splitlines()))
    assert len(rows) == 1 + 2 * 2 and {r["status"] for r in rows} == {"done"}
    for name in ("lars", "adam"):
        config = json.loads((out / "cells" / f"{name}-B64-lr0.02-s0" / "config.json").read_text())
        assert config["spec"]["baseline"]["optimizer"]["name"] == name and config["world_size"] == 2
        plan = json.loads((out / "cells" / f"{name}-B64-lr0.02-s0" / "plan.json").read_text())
        assert plan["peak_lr"] == 0.02 and plan["warmup_epochs"] == pytest.approx(0.4)
    report = (out / "report.md").read_text()
    for name in ("lars", "adam"):
        assert re.search(rf"- {name} at 64: 0.002: [0-9.]+, 0.02: [0-9.]+; kept 0.02?", report), (
            report
        )


def test_a_cell_refusing_its_input_stops_the_sweep(tmp_path):
    out = tmp_path / "sweep"
    result = date(
        "sweep",
        ROOT / "recipes" / "lenet-mnist.yaml",
        "--batches",
        "2048,4096",
        "--set",
        f"train.data_dir={tmp_path / 'no-mnist'}",
        "-o",
        out,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "error: cell baseline-B1024-s0:" in result.stderr
        and "train-images-idx3-ubyte" in result.stderr
    )
    assert [p.parent.name for p in out.glob("cells/*/log.txt")] == [
        "baseline-B1024-s0"
    ]  # no other started


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batches", "64,lots"], "--batches: 'lots' is not a whole number"),
        (["--batches", "64", "--schemes", "date,goyal"], "unknown scheme 'goyal'"),
        (["--batches", "64", "--tolerance", "some"], "--tolerance: 'some' is not a tolerance"),
        (["--batches", "64", "--lr-grid", "0"], "--lr-grid: 0 is not a positive learning rate"),
        (["--batches", "4096"], "batch 4096 is larger than the data set"),
    ],
)
def test_bad_sweep_input_is_one_sentence(args, message, tmp_path):
    result = date("sweep", SPEC, *args, "-o", tmp_path / "never")
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "never").exists()
