"""Every tolerance and time limit in tests/ says where it comes from (tests/bounds.py)."""

from __future__ import annotations

import math
import re

import pytest
import torch

from tests.bounds import LAMBDA, UNIT_ROUNDOFF, gamma, hang_limit, steps_bound, units
from tests.conftest import ROOT

BOUND = re.compile(
    # a tolerance or limit given as a number (not a bare 0: exact)
    r"\b(rtol|atol|rel|abs|timeout)\s*=\s*(?!0(\.0*)?(?![\d.eE]))[0-9.]"
    r"|perf_counter\(\)\s*-\s*\w+\s*<\s*[0-9]"  # a measured duration against a number
    r"|(monotonic|time)\(\)\s*\+\s*[0-9]"  # a deadline a number of seconds away
    r"|<=?\s*[0-9.]+e-[0-9]+"  # a difference against a small number
)
"""A numeric bound written as a literal, which must carry its derivation."""


def unexplained(text: str) -> list[tuple[int, str]]:
    """The lines (number, text) of ``text`` with a literal bound and no ``bound:`` comment on
    them, on the next line (a statement continued there) or above them in their paragraph (the
    lines up to a blank one or a ``def``: a derivation may head a group of assertions)."""
    lines = text.splitlines()

    def says(line: str) -> bool:
        return "#" in line and "bound:" in line.split("#", 1)[1]

    found = []
    for i, line in enumerate(lines):
        if not BOUND.search(line.split("#", 1)[0]):
            continue
        above = i
        while above > 0 and lines[above - 1].strip() and not says(lines[above]) and \
                not lines[above].lstrip().startswith(("def ", "async def ")):
            above -= 1
        if not any(says(x) for x in lines[above: i + 2]):
            found.append((i + 1, line.strip()))
    return found


def test_every_literal_bound_in_the_tests_says_where_it_comes_from():
    missing = {path.name: unexplained(path.read_text())
               for path in sorted((ROOT / "tests").glob("*.py"))
               if path.name not in ("test_bounds.py", "bounds.py")}  # the derivations' own
    missing = {name: lines for name, lines in missing.items() if lines}
    assert not missing, "add a '# bound: <derivation>' comment (tests/bounds.py): " + str(missing)


@pytest.mark.parametrize("line", [
    "torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-12)",
    "assert x == pytest.approx(y, rel=0.1)",
    "result = date('plan', timeout=60)",
    "assert time.perf_counter() - began < 5",
    "deadline = time.monotonic() + 120",
    "assert error <= 1e-5, error",
])
def test_the_check_finds_a_bound_without_its_derivation(line):
    assert unexplained(f"def test():\n    {line}\n") == [(2, line)]
    assert unexplained(f"def test():\n    # bound: why\n    {line}\n") == []
    assert unexplained(f"def test():\n    {line}  # bound: why\n") == []
    # a derivation heads its paragraph, not the next one
    assert unexplained(f"def test():\n    # bound: why\n    x = 1\n    {line}\n") == []
    assert unexplained(f"def test():\n    # bound: why\n\n    {line}\n") == [(4, line)]


def test_the_check_leaves_exact_comparisons_and_derived_bounds_alone():
    for line in ["assert torch.equal(a, b)", "assert_close(a, b, rtol=0, atol=0.0)",
                 "approx(y, rel=float64_formula(8))", "date('plan', timeout=hang_limit(3))",
                 "assert n <= 1800"]:
        assert unexplained(f"    {line}\n") == [], line


def test_gamma_is_higham_s_and_refuses_what_bounds_nothing():
    u = UNIT_ROUNDOFF[torch.float64]
    assert gamma(1) == u / (1 - u) and gamma(10) > 10 * u
    with pytest.raises(ValueError, match="bound nothing"):
        gamma(2**24, torch.float32)


def test_hang_limits_are_many_times_the_idle_duration():
    assert hang_limit(1) == 60 and hang_limit(30) == 600


def test_the_steps_bound_counts_stores_steps_and_repeated_roundings():
    u = UNIT_ROUNDOFF[torch.float32]
    # no steps: the cast of w_0 alone
    assert steps_bound(torch.float32, [1.0], [], roundings=10) == pytest.approx(LAMBDA * u)
    # two steps of 0.1 on a weight of 1: three stores and 10 roundings of each step, which vary;
    # the LR and β rounded once, the same in both steps
    got = steps_bound(torch.float32, [1.0, 1.0, 1.0], [0.1, 0.1], roundings=10)
    assert got == pytest.approx(LAMBDA * u * math.sqrt(3 + 20 * 0.1**2) + 2 * 2 * 0.1 * u)
    assert units(4) == 4 and units(10_000) == LAMBDA * 100  # the worst case, or λ·√n
