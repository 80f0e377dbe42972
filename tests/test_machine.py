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


def test_threads_follow_the_idle_cores_and_a_users_setting(monkeypatch):
    """Threads beyond the cores idle at the start wait on each other (46× slower beside one busy
    process on 2 cores): a process takes the idle cores' share, at most the machine's share, at
    least one; a user's OMP_NUM_THREADS is kept as given."""
    from date_engine.machine import choose_threads

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert choose_threads(1, {}, idle=8.0) == (8, "8 idle cores shared by 1 process(es); "
                                                   "OMP_NUM_THREADS sets it")
    assert choose_threads(2, {}, idle=8.0)[0] == 4
    threads, why = choose_threads(1, {}, idle=2.6)
    assert threads == 3 and why.startswith("5 of 8 cores busy with other work at the start")
    assert choose_threads(4, {}, idle=2.6)[0] == 1 and choose_threads(1, {}, idle=0.0)[0] == 1
    assert choose_threads(1, {"OMP_NUM_THREADS": "6"}, idle=0.0) == (6, "OMP_NUM_THREADS")
    assert choose_threads(2, {"OMP_NUM_THREADS": "x"}, idle=8.0)[0] == 4  # not a number: ignored
    # a resumed run keeps the threads it began with, unless the user sets them
    assert choose_threads(1, {}, idle=8.0, kept=3)[0] == 3
    assert choose_threads(1, {"OMP_NUM_THREADS": "6"}, idle=8.0, kept=3)[0] == 6


def test_idle_cores_are_read_from_the_kernels_counters(tmp_path, monkeypatch):
    from date_engine.machine import idle_cores

    stat = tmp_path / "stat"
    counts = iter([(100, 0, 100, 800, 0), (200, 0, 200, 900, 100)])  # 400 ticks, 200 idle

    def write(*_):
        stat.write_text("cpu  " + " ".join(map(str, next(counts))) + " 0 0 0\ncpu0 1 2 3 4\n")

    write()
    monkeypatch.setattr("time.sleep", write)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert idle_cores(0.0, stat) == 1.0
    monkeypatch.setattr("time.sleep", lambda _: None)
    assert idle_cores(0.0, tmp_path / "absent") is None
