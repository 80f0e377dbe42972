"""Huge pages under large CPU tensors: when the trainer asks torch for them, and when it leaves the
choice to the user or the kernel."""

import os
import subprocess
import sys

import pytest

from date_engine.machine import HUGE_PAGES_SWITCH, TRANSPARENT_HUGE_PAGES, huge_pages_for_tensors


@pytest.mark.parametrize(("mode", "on"), [
    ("always [madvise] never\n", True),
    ("[always] madvise never\n", True),
    ("always madvise [never]\n", False),
])
def test_huge_pages_follow_the_kernels_mode(tmp_path, mode, on):
    setting = tmp_path / "enabled"
    setting.write_text(mode)
    environ = {}
    assert huge_pages_for_tensors(environ, setting) is on
    assert environ == ({HUGE_PAGES_SWITCH: "1"} if on else {})


def test_huge_pages_stay_off_without_the_kernels_switch(tmp_path):
    environ = {}
    assert huge_pages_for_tensors(environ, tmp_path / "absent") is False
    assert environ == {}


@pytest.mark.parametrize(("value", "on"), [("0", False), ("", False), ("1", True)])
def test_a_users_setting_is_kept(tmp_path, value, on):
    setting = tmp_path / "enabled"
    setting.write_text("[always] madvise never\n")
    environ = {HUGE_PAGES_SWITCH: value}
    assert huge_pages_for_tensors(environ, setting) is on
    assert environ == {HUGE_PAGES_SWITCH: value}


def test_a_training_process_asks_before_torch_loads():
    """The switch is read at torch's first CPU allocation: the trainer's package sets it when
    imported (before any of its modules, which import torch, can run), without loading torch
    itself, and leaves a user's 0 alone."""
    probe = ("import sys, os, date_engine.train; "
             "print(os.environ.get('THP_MEM_ALLOC_ENABLE'), 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != HUGE_PAGES_SWITCH}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    try:
        expected = "1" if "[never]" not in TRANSPARENT_HUGE_PAGES.read_text() else "None"
    except OSError:
        expected = "None"
    assert out == [expected, "False"]
    out = subprocess.run([sys.executable, "-c", probe], env={**env, HUGE_PAGES_SWITCH: "0"},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "False"]
