from __future__ import annotations

import copy
import os
from collections import Counter
from pathlib import Path

import pytest

from date_engine import parse_spec

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
STUDY_NAMES = ("bert-mlm", "vit-mnist", "lenet-mnist", "lstm-mnist", "ptb-small", "fashion")
"""The studies of docs/results.md: what a message must not quote as evidence."""


def pytest_configure(config):
    """Under pytest-xdist (`-n N`, as CI runs) the workers share the machine's cores: each worker,
    and every `date` it starts, gets its share of CPU threads, as `date sweep --jobs N` gives its
    cells (a run that sets OMP_NUM_THREADS itself keeps its own). Set always, so that no `date`
    chooses its threads by the load it meets: runs a test compares bit for bit use the same. The
    controller of an xdist run sets nothing: its workers, which inherit its environment, do."""
    worker = getattr(config, "workerinput", None)  # set on an xdist worker before it configures
    controller = worker is None and bool(getattr(config.option, "numprocesses", None))
    workers = worker["workercount"] if worker else 1
    if not controller and "OMP_NUM_THREADS" not in os.environ:
        from date_engine.machine import threads_per_process

        os.environ["OMP_NUM_THREADS"] = str(threads_per_process(workers))
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order set below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """The files with the most `slow` tests (the ones that start training processes) first, the
    many quick files last: with `--dist loadfile` each worker takes the next file when it is free,
    so the quick ones fill in at the end instead of a long file running alone there. (xdist's own
    order, files with the most tests first, put test_fsdp and test_sharded, few tests and minutes
    of training, at the end.) The order within a file is kept."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])


# The paper's worked example (docs/algorithm.md §1): LeNet on MNIST, B0 = 1024.
LENET = {
    "baseline": {
        "batch_size": 1024,
        "lr": 1.25e-3,
        "warmup_epochs": 2,
        "iterations": 1755,
        "dataset_size": 60000,
        "optimizer": {"name": "rmsprop"},
    }
}


def lenet_spec(**date):
    """The paper's LeNet baseline; ``date`` settings on top of the paper's rule (``rule="date"``
    for the default rule)."""
    raw = copy.deepcopy(LENET)
    raw["date"] = {"rule": "paper", **date}
    return parse_spec(raw)


@pytest.fixture
def lenet_raw():
    return copy.deepcopy(LENET)


@pytest.fixture
def write_spec(tmp_path):
    """Write a mapping (or raw text) as a YAML file and return its path."""
    import yaml

    def write(content, name="spec.yaml"):
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
        return path

    return write


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory):
    """lenet-digits at batch 256, 57 steps, never stopped: what stopped runs must end equal to."""
    from tests.runs import SHORT, SPEC, date

    out = tmp_path_factory.mktemp("full") / "run"
    result = date("scale", SPEC, "--batch", 256, *SHORT, "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture(scope="session")
def two_processes(tmp_path_factory):
    """The same on 2 processes (torchrun, gloo), checkpointing every 4 steps."""
    from tests.runs import SPEC, TWO, date

    out = tmp_path_factory.mktemp("two") / "run"
    result = date("scale", SPEC, *TWO, "-o", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture
def stored_probe(tmp_path):
    """A probe of the studies (docs/results/probes.jsonl), written out as the probe.json `date
    probe` wrote: ``stored_probe("probes-lrcheck/bert-mlm-seed0")`` -> its path."""
    from lab.results_data import write_probe

    def write(name: str) -> Path:
        return write_probe(name, tmp_path / f"{name.replace('/', '-')}.json")

    return write


def _record_process_times(path: str) -> None:
    """DATE_TEST_TIMES=FILE: append one JSON line per process a test starts and waits for (the
    test, the command, its seconds): the idle durations tests/bounds.py's hang limits state."""
    import json
    import subprocess
    import time

    started, wait = subprocess.Popen.__init__, subprocess.Popen.wait

    def init(self, *args, **kwargs):
        self._began = time.monotonic()
        started(self, *args, **kwargs)

    def timed_wait(self, timeout=None):
        code = wait(self, timeout)
        if not getattr(self, "_recorded", False) and hasattr(self, "_began"):
            self._recorded = True
            args = self.args if isinstance(self.args, list | tuple) else [self.args]
            with open(path, "a") as f:
                f.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
                                    "cmd": " ".join(map(str, args))[:300],
                                    "seconds": round(time.monotonic() - self._began, 3)}) + "\n")
        return code

    subprocess.Popen.__init__, subprocess.Popen.wait = init, timed_wait


if os.environ.get("DATE_TEST_TIMES"):
    _record_process_times(os.environ["DATE_TEST_TIMES"])
