"""Where the tests' numeric bounds come from. Every tolerance and time limit in tests/ is one of
these, or carries its own derivation in a comment that starts with ``bound:`` (grep for it;
tests/test_bounds.py fails on a literal tolerance or limit without one).

Rounding (IEEE 754): a binary format with p significand bits rounds each operation to nearest
with relative error at most its unit roundoff u = 2^-p. After n roundings in any order the
relative error is at most γ_n = n·u / (1 − n·u) (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., Lemma 3.1); a sum or dot product of n terms, in any order, blocking,
vector width or FMA contraction, is within γ_n·Σ|x_i| of the exact one (§3.1, §4.2), so the
bounds here hold on any CPU, BLAS or reduction order, not only the one they were written on. A
correctly rounded libm function (sqrt always; exp, log, pow within 1 ulp in glibc, musl and
Apple's libm) counts as two roundings.

Time: a wall-clock limit guards only against a hang, and is :data:`HANG_FACTOR` times the idle
duration measured on the development VM (``DATE_TEST_TIMES=FILE pytest ...`` records every
process a test waits for), never below :data:`HANG_FLOOR_S`. Everything else is bounded by steps
or events.

``pytest.approx(x)`` with no tolerance is pytest's default (relative 1e-6): the tests use it only
on numbers a few float64 operations produce, where γ_n is below 1e-13.
"""

from __future__ import annotations

import math

import torch

UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-11,
                 torch.bfloat16: 2.0**-8}
"""u = 2^-p for p significand bits (the hidden bit included): IEEE 754 binary64 53, binary32 24,
binary16 11; bfloat16 8."""


def gamma(n: float, dtype: torch.dtype = torch.float64) -> float:
    """γ_n: the relative error of n roundings in ``dtype``, in any order (Higham, Lemma 3.1)."""
    nu = n * UNIT_ROUNDOFF[dtype]
    if nu >= 1:
        raise ValueError(f"{n} roundings in {dtype} bound nothing (n·u = {nu} >= 1)")
    return nu / (1 - nu)


def float64_formula(roundings: int) -> float:
    """The relative distance of two float64 evaluations of one formula of at most ``roundings``
    operations each, in whatever order: each is within γ_n of the exact value."""
    return 2 * gamma(roundings)


HANG_FACTOR = 20
"""A process under test may take this many times its idle duration before it counts as hung: a
loaded 2-core machine (two other CPU-bound processes beside the test's two xdist workers) runs a
one-thread process up to 3.7 times slower than idle (measured: DATE_TEST_TIMES of a clean-clone
CI run beside two busy loops, 2026-11-28), so 20× leaves a fivefold margin."""
HANG_FLOOR_S = 60.0
"""No hang limit below a minute: a process's start (Python, torch's import: 2–3 s idle) on a
loaded machine, or a page cache emptied by other work, is not a hang."""


def hang_limit(idle_s: float) -> float:
    """Seconds after which a process that takes ``idle_s`` on the idle development VM counts as
    hung (:data:`HANG_FACTOR` times, at least :data:`HANG_FLOOR_S`)."""
    return max(HANG_FACTOR * idle_s, HANG_FLOOR_S)


LAMBDA = 8.0
"""λ of the probabilistic bounds: exceeded with probability at most 2·exp(−λ²/2) = 2.5e-14."""


def rounding_bound(dtype: torch.dtype, varying: list[float], repeated: list[float] = ()) -> float:
    """How far a value may be from its exact counterpart when roundings (|δ_i| ≤ u) of
    quantities of sizes x_i reach it: λ·u·√(Σ x_i²) for roundings that vary from operation to
    operation, modelled as independent and of mean zero (Higham & Mary, "A New Approach to
    Probabilistic Rounding Error Analysis", SIAM J. Sci. Comput. 41(5), 2019; Hoeffding's
    inequality), and u·Σ|x_j| for ``repeated`` ones, the same rounding every time (a constant
    rounded once and applied at every step), which add up in the worst case."""
    u = UNIT_ROUNDOFF[dtype]
    return LAMBDA * u * math.sqrt(sum(x * x for x in varying)) + u * sum(abs(x) for x in repeated)


def units(roundings: int) -> float:
    """A bound, in units of u times a value's scale, on ``roundings`` roundings each of at most
    one such unit: at most their number, and (rounding_bound's model) at most λ·√n."""
    return min(roundings, LAMBDA * math.sqrt(roundings))


def close_within(dtype: torch.dtype, roundings: int, scale: float) -> dict[str, float]:
    """``torch.testing.assert_close``'s tolerances for two evaluations of the same exact values
    in ``dtype`` that differ in the order or fusion of at most ``roundings`` roundings each, every
    one of at most u·``scale`` (``scale``: the largest value rounded on the way, e.g. the
    parameter's largest entry over the run): |a − b| ≤ 2·units(roundings)·u·scale."""
    return dict(rtol=0.0, atol=2 * units(roundings) * UNIT_ROUNDOFF[dtype] * scale)


TRAINING_STEP_ROUNDINGS = 220
"""Roundings of one training step of the tests' small models (lenet-digits, the sharded MLPs) in
which two runs that see the same samples may differ in order: the backward's sums over a
micro-batch's samples and a layer's width (at most 64 + 64), the sum over micro-batches or
processes (at most 4), the optimizer's step (84: KERNEL_ROUNDINGS of tests/test_optim_date.py)
and stores."""


def runs_bound(steps: int, roundings: int = TRAINING_STEP_ROUNDINGS,
               amplification: float = 1.0) -> float:
    """How far (tests/runs.py's max_relative_difference: each tensor's largest difference over
    its largest entry) two float32 training runs may end that take the same steps on the same
    samples and differ only in the order of ``roundings`` roundings a step (data-parallel
    reductions, micro-batches, shards): each rounding is at most u of a tensor's largest entry,
    2·units(steps·roundings) in the two runs, times ``amplification`` where the optimizer makes
    a gradient's rounding a larger step (RMSprop's first steps divide by √((1 − α)·g²): a step
    of lr/√(1 − α) = 10·lr an entry, whatever g's size)."""
    return 2 * units(steps * roundings) * UNIT_ROUNDOFF[torch.float32] * amplification


def steps_bound(dtype: torch.dtype, weights: list[float], steps: list[float], *, roundings: int,
                memory: float = 1.0, gradients: list[float] = (), constants: int = 2,
                decays: int = 0, sensitivity: float = 0.0) -> float:
    """How far (relative, 2-norm over all parameters) T optimizer steps in ``dtype`` may end from
    the same steps in exact arithmetic (float64), from the same starting values and gradients,
    by :func:`rounding_bound`. ``weights`` are ‖w_0‖..‖w_T‖ and ``steps`` ‖w_t − w_{t−1}‖ of
    the exact run. The run in ``dtype`` rounds

    - w_0 where it was cast, and each stored w_t: one rounding of size ‖w_t‖ each;
    - each step ``roundings`` times between its inputs and w, each of the step's size times
      ``memory``: a state decaying by β (momentum, Adam's first moment) carries every earlier
      step's roundings, and its terms may cancel, so its error is relative to Σβ^k|x_k| ≤
      1/(1 − β) times the largest term;
    - ``gradients``: quantities of a gradient's size whose rounding enters a step (torch's SGD
      kernel's 1 − dampening, which DATE and LARS set near 1 to scale the gradient), times
      ``memory``;
    - the same way every step: ``constants`` rounded settings the step is proportional to (the
      LR, β), and ``decays`` factors that multiply w itself (AdamW's 1 − lr·λ);

    and an error already in w changes later steps through the layers' norms (trust ratios) by
    ``sensitivity``·ε·‖Δ_t‖ for a relative error ε, counted once: the bound is multiplied by
    1 + sensitivity·Σ‖Δ_t‖/‖w_{t−1}‖."""
    varying = [*weights, *(memory * s for s in steps for _ in range(roundings)),
               *(memory * g for g in gradients)]
    repeated = [*(s for s in steps for _ in range(constants)),
                *(w for w in weights[1:] for _ in range(decays))]
    growth = 1 + sensitivity * sum(s / w for s, w in zip(steps, weights) if w > 0)
    return rounding_bound(dtype, varying, repeated) * growth / weights[-1]
