"""Recipes for the trainer's tests: lenet-digits with a fault injected at a chosen loss call.

Loaded by the real command line through ``--recipe tests.fault_recipes:<function>``.
"""

from __future__ import annotations

import os
import signal
from dataclasses import replace

from date_engine.noise import NoiseScale
from date_engine.recipes import Recipe, get_recipe

KILL_AT = int(os.environ.get("DATE_TEST_KILL_AT", "11"))
NAN_AT = int(os.environ.get("DATE_TEST_NAN_AT", "9"))
_calls = {"n": 0}


def _digits() -> Recipe:
    """lenet-digits, in a process whose noise scale counts as measurable once settled.

    These digits runs are too short for a measurable noise scale (|G|² stays within 3 standard
    errors of 0): a ramp run through these recipes moves on any settled reading risen from its
    lowest, so that the tests exercise the moves, their resume and their plans. The gate itself is
    tested on its own (tests/test_ramp.py). Set when a recipe is built — in the run's process —
    not on import, so that importing this module changes nothing.
    """
    NoiseScale.SIGNIFICANCE = 0.0
    return get_recipe("lenet-digits")


def lenet_digits() -> Recipe:
    """lenet-digits as shipped, without the measurability gate (:func:`_digits`)."""
    return _digits()


def lenet_digits_killed() -> Recipe:
    """SIGKILLs rank 0 at its KILL_AT-th loss computation — on the first attempt only."""
    base = _digits()

    def loss(model, batch, data):
        _calls["n"] += 1
        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if _calls["n"] == KILL_AT and first_attempt and os.environ.get("RANK", "0") == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        return base.loss(model, batch, data)

    return replace(base, name="lenet-digits-killed", loss=loss)


def lenet_digits_nan() -> Recipe:
    """The loss turns NaN from its NAN_AT-th computation on."""
    base = _digits()

    def loss(model, batch, data):
        _calls["n"] += 1
        value = base.loss(model, batch, data)
        return value * float("nan") if _calls["n"] >= NAN_AT else value

    return replace(base, name="lenet-digits-nan", loss=loss)


def lenet_digits_state_nan() -> Recipe:
    """lenet-digits with a spare parameter the forward pass never reads; at the NAN_AT-th loss
    computation the spare turns NaN. The loss stays finite: only a check of the state finds it."""
    import torch

    base = _digits()

    def build_model(options):
        model = base.build_model(options)
        model.register_parameter("spare", torch.nn.Parameter(torch.zeros(3)))
        return model

    def loss(model, batch, data):
        _calls["n"] += 1
        if _calls["n"] == NAN_AT:
            getattr(model, "module", model).spare.data.fill_(float("nan"))
        return base.loss(model, batch, data)

    return replace(base, name="lenet-digits-state-nan", build_model=build_model, loss=loss)


OOM_ABOVE = int(os.environ.get("DATE_TEST_OOM_ABOVE", "40"))
OOM_RANK = os.environ.get("DATE_TEST_OOM_RANK")
"""lenet_digits_oom's device: a forward of more than OOM_ABOVE samples runs out of memory (on
every process, or on rank OOM_RANK alone)."""


def lenet_digits_oom() -> Recipe:
    """lenet-digits on a device that holds OOM_ABOVE samples per pass: a larger forward raises
    torch.OutOfMemoryError, the exception CUDA's allocator raises."""
    import torch

    base = _digits()

    class Limited(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):
            mine = OOM_RANK is None or os.environ.get("RANK", "0") == OOM_RANK
            if mine and x.shape[0] > OOM_ABOVE:
                raise torch.OutOfMemoryError(
                    f"CUDA out of memory (a test device that holds {OOM_ABOVE} samples)")
            return self.inner(x)

    return replace(base, name="lenet-digits-oom",
                   build_model=lambda options: Limited(base.build_model(options)))


SPIKE_AT = int(os.environ.get("DATE_TEST_SPIKE_AT", "0"))
SPIKE_FOR = int(os.environ.get("DATE_TEST_SPIKE_FOR", "3"))


def lenet_digits_spike() -> Recipe:
    """The loss (and so its gradient) ×100 at loss computations SPIKE_AT .. SPIKE_AT + SPIKE_FOR
    − 1 (0: never): a spike the guard rolls back from, gone once it has (the count goes on past
    it), or, with a large SPIKE_FOR, one that comes back every time."""
    base = _digits()

    def loss(model, batch, data):
        _calls["n"] += 1
        value = base.loss(model, batch, data)
        return value * 100 if SPIKE_AT and SPIKE_AT <= _calls["n"] < SPIKE_AT + SPIKE_FOR \
            else value

    return replace(base, name="lenet-digits-spike", loss=loss)
