"""The public API: names re-exported from `date_engine`, torch loaded only when a torch name is
used."""

from __future__ import annotations

import subprocess
import sys

import date_engine
from tests.conftest import ROOT


def test_public_names_resolve():
    for name in date_engine.__all__:
        assert getattr(date_engine, name) is not None, name
    from date_engine import DATE, LAMB, LARS, build_optimizer, plan_scheduler  # noqa: F401


def test_import_does_not_load_torch_until_a_torch_name_is_used():
    code = (
        "import sys, date_engine\n"
        "before = 'torch' in sys.modules\n"
        "date_engine.DATE\n"
        "print(before, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.split() == ["False", "True"]
