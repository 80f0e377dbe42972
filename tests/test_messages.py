"""What a new user reads: every message of `date probe`, `date plan`, `date scale` and `date sweep`
on the quick-start recipe is at most two lines at 100 columns and names no study of the project's
(the evidence is a link away)."""

from __future__ import annotations

import re
import sys

import pytest

from tests.conftest import ROOT, STUDY_NAMES
from tests.runs import run_group

SPEC = ROOT / "recipes" / "lenet-digits.yaml"
TABLE = re.compile(r"^\s*[│┃┏┡└┌┗├╭╰─━┤┬┴┼╇╈╋═]")
"""A table's or the LR chart's lines (their width is their content's, not a message's)."""


def _date(*args, cwd, code=0):
    """`date ...` with a terminal wide enough that a message is one line."""
    result = run_group([sys.executable, "-m", "date_engine", *args], cwd=cwd, idle_s=35,
                       env={"COLUMNS": "100000", "OMP_NUM_THREADS": "1"})
    assert result.returncode == code, result.stderr[-2000:]
    return result.stdout + result.stderr


def long_or_naming(output: str) -> list[str]:
    """The messages longer than two lines at 100 columns, or naming a study."""
    bad = []
    for line in output.splitlines():
        line = line.rstrip()
        if TABLE.match(line) or "⠀" in line or not line:
            continue
        if len(line) > 200 or any(name in line for name in STUDY_NAMES):
            bad.append(line)
    return bad


def test_the_walk_itself_catches_a_long_or_naming_message():
    assert long_or_naming("How sure: " + "x" * 200) == ["How sure: " + "x" * 200]
    assert long_or_naming("as on vit-mnist at 32×") == ["as on vit-mnist at 32×"]
    assert long_or_naming("│ " + "x" * 300 + " │\nok") == []


@pytest.mark.slow
def test_a_new_users_walk_reads_in_short_messages(tmp_path):
    """probe, then plan with it (within B_hold and beyond, each budget), scale and its dry run,
    a small sweep: the outputs a user meets in the quick start and its next steps."""
    outputs = {"probe": _date("probe", SPEC, "-o", "probe", cwd=tmp_path)}
    probe = tmp_path / "probe" / "probe.json"
    for batch in (256, 512):
        for budget in ("same-epochs", "hold", "ramp"):
            outputs[f"plan {batch} {budget}"] = _date(
                "plan", SPEC, "--batch", batch, "--probe", probe, "--budget", budget,
                cwd=tmp_path)
    outputs["too large"] = _date("plan", SPEC, "--batch", 1024, cwd=tmp_path, code=2)
    outputs["plan no probe"] = _date("plan", SPEC, "--batch", 256, "--compare", cwd=tmp_path)
    outputs["scale"] = _date("scale", SPEC, "--batch", 256, "--set", "baseline.epochs=20", "-o",
                             "run", cwd=tmp_path)
    outputs["dry run"] = _date("scale", SPEC, "--batch", 512, "--probe", probe, "--budget", "ramp",
                               "--dry-run", cwd=tmp_path)
    outputs["sweep"] = _date("sweep", SPEC, "--batches", 64, "--schemes", "date,paper",
                             "--repeats", 2, "--jobs", 2, "--set", "baseline.epochs=5",
                             "-o", "sweep", cwd=tmp_path)
    assert "How sure:" in outputs["plan 256 same-epochs"]
    bad = {name: long_or_naming(text) for name, text in outputs.items()}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}
