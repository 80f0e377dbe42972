"""Derive a DATE plan from Python and read its schedule — the numbers `date plan` prints.

    python examples/plan_in_python.py recipes/lenet-mnist.yaml 8192
"""

from __future__ import annotations

import sys

from date_engine import DateError, load_spec
from date_engine.plan import derive_plan


def main(spec_path: str, batch: int) -> None:
    plan = derive_plan(load_spec(spec_path), batch)
    print(
        f"k = {plan.scale:g}, peak lr = {plan.peak_lr:.5g}, warmup = {plan.warmup_epochs:g} epochs "
        f"({plan.warmup_iterations:g} steps), {plan.total_iterations} steps"
    )
    for phase in plan.phases:
        print(
            f"{phase.name:>6}: steps {phase.first_step}-{phase.last_step}, "
            f"lr {phase.first_lr:.4g} -> {phase.last_lr:.4g}"
        )
    # Plan.lr is a pure function of the 1-based optimizer step: call it inside any training loop.
    for step in (1, plan.total_iterations // 2, plan.total_iterations):
        print(f"lr({step}) = {plan.lr(step):.6g}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or not sys.argv[2].isdigit():
        sys.exit(f"usage: python {sys.argv[0]} SPEC.yaml BATCH, e.g. recipes/lenet-mnist.yaml 8192")
    try:
        main(sys.argv[1], int(sys.argv[2]))
    except DateError as exc:
        sys.exit(f"error: {exc}")
