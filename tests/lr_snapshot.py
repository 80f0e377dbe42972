"""Every shipped recipe's LR at every step, as a digest per plan: the values ``test_one_plan``
holds the schedule code to, bit for bit.

The plans: each shipped recipe under both rules, both warmups and both warmup shapes at 4×, 16× and
64× its batch (the sound ones); every shape of ``baseline.schedule`` under both indexes; and the
hold and ramp budgets over a measured noise curve. Rewrite the digests only when a change is meant
to move an LR, and say so in the commit::

    python -m tests.lr_snapshot --write
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

from date_engine.errors import PlanError
from date_engine.forecast import NoiseCurve
from date_engine.plan import Plan, derive_plan
from date_engine.ramp import Change
from date_engine.spec import load_spec, parse_spec, shipped_specs, spec_with

DIGESTS = Path(__file__).parent / "data" / "lr_digests.json"
CURVE = NoiseCurve(a=500.0, beta=1.0, first=0.1, last=1.0, lr_checked=True)
SHAPES = (
    {"name": "linear"}, {"name": "linear", "final_fraction": 0.1}, {"name": "cosine"},
    {"name": "cosine", "final_fraction": 0.05}, {"name": "polynomial", "power": 2.0},
    {"name": "constant"}, {"name": "step", "every_epochs": 3}, {"name": "inverse_sqrt"},
    {"name": "multistep", "milestones": [2, 5, 8], "factor": 0.5},
    {"name": "wsd", "decay_fraction": 0.2, "decay_shape": "cosine"},
    {"name": "wsd", "decay_shape": "1-sqrt", "final_fraction": 0.1},
)


def plans() -> Iterator[tuple[str, Plan]]:
    """(name, plan) for every plan the digests cover (a combination with no sound plan is left
    out)."""
    for path in shipped_specs().values():
        spec = load_spec(path)
        for rule in ("date", "paper"):
            for warmup in ("legw", "constant"):
                for shape in ("linear", "quadratic"):
                    varied = spec_with(spec, [f"date.rule={rule}", f"date.warmup={warmup}",
                                              f"date.warmup_shape={shape}"])
                    for k in (4, 16, 64):
                        name = f"{path.stem} {rule} {warmup} {shape} {k}x"
                        try:
                            yield name, derive_plan(varied, spec.baseline.batch_size * k)
                        except PlanError:
                            continue
    for shape in SHAPES:
        for index in ("paper", "torch"):
            for rule in ("date", "paper"):
                spec = _lenet(date={"rule": rule},
                              schedule={**shape, "index": index})
                yield f"lenet {json.dumps(shape)} {index} {rule}", derive_plan(spec, 2048)
    for budget, extra in (("hold", {}), ("ramp", {"ramp": "planned"}), ("ramp", {})):
        for shape in ({"name": "linear"}, {"name": "cosine"}):
            spec = _lenet(date={"budget": budget, **extra}, schedule=shape)
            name = f"lenet {budget} {json.dumps(extra)} {shape['name']}"
            yield name, derive_plan(spec, 4096, noise_curve=CURVE)
    spec = _lenet(date={"budget": "ramp"})
    yield "lenet ramp moved", derive_plan(spec, 4096, noise_curve=CURVE,
                                         ramp_changes=(Change(30, 256, 300.0),))


def _lenet(date: dict, schedule: dict | None = None):
    return parse_spec({
        "recipe": "lenet-mnist",
        "baseline": {"batch_size": 128, "lr": 1e-3, "warmup_epochs": 0.1, "epochs": 10,
                     "dataset_size": 60000, "optimizer": {"name": "rmsprop"},
                     "schedule": schedule or {"name": "linear"}},
        "date": date,
    })


def digest(plan: Plan) -> str:
    """sha256 of lr(1..I) as IEEE doubles: equal only when every step's LR is equal to the bit."""
    return hashlib.sha256(struct.pack(f"<{plan.total_iterations}d", *plan.lrs())).hexdigest()


def digests() -> dict[str, str]:
    return {name: digest(plan) for name, plan in plans()}


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.lr_snapshot --write")
    DIGESTS.write_text(json.dumps(digests(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {DIGESTS}")
