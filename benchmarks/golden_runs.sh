#!/bin/bash
# Golden runs for a change to the trainer: a measured-ramp lenet-digits run (2 processes, gloo) and a
# fixed-batch one; their metrics.jsonl (wall-clock fields dropped) and plan.json go to OUTDIR/*.metrics
# and OUTDIR/*.plan.json. Run it before and after the change and cmp the files: they must be identical.
# usage: bash benchmarks/golden_runs.sh OUTDIR   (from the repository root, with date-engine installed)
set -e
OUT=$(realpath -m "$1"); mkdir -p "$OUT"
cd "$(dirname "$0")/.."
python - "$OUT/probe.json" <<'PY'
import sys
from date_engine.probe import Probe, NoisePoint, baseline_identity
from date_engine.spec import parse_spec
spec = parse_spec({"recipe": "lenet-digits",
                   "baseline": {"batch_size": 16, "lr": 1e-3, "warmup_epochs": 0.5,
                                "epochs": 10, "dataset_size": 1437,
                                "optimizer": {"name": "rmsprop"}},
                   "date": {"lr_floor": 1e-6, "layer_ratio": {"mode": "dynamic"}},
                   "train": {"log_every": 20}})
Probe(baseline=baseline_identity(spec, 1437), baseline_epochs=10.0, steps=90,
      baseline_steps=899, epochs=1.0, micro_batch=8, world_size=1, accumulation_steps=2,
      wall_seconds=1.0,
      points=(NoisePoint(0.25, 125.0, 1.0, 125.0, 2.0),
              NoisePoint(1.0, 500.0, 1.0, 500.0, 1.0))).write(__import__("pathlib").Path(sys.argv[1]))
PY
S="--set baseline.epochs=10 --set baseline.warmup_epochs=0.5"
OMP_NUM_THREADS=1 date scale recipes/lenet-digits.yaml --batch 256 --nproc 2 --micro-batch 8 $S --budget ramp --set train.checkpoint_every=4 --set train.log_every=5 --probe $OUT/probe.json -o $OUT/ramp --recipe tests.fault_recipes:lenet_digits > $OUT/ramp.log 2>&1
OMP_NUM_THREADS=1 date scale recipes/lenet-digits.yaml --batch 256 $S --set train.log_every=5 -o $OUT/fixed > $OUT/fixed.log 2>&1
for r in ramp fixed; do python -c "
import json,sys
for line in open('$OUT/$r/metrics.jsonl'):
    d=json.loads(line)
    for k in ('time_s','samples_per_s','wall_s','train_s'): d.pop(k,None)
    print(json.dumps(d,sort_keys=True))" > $OUT/$r.metrics; done
cp $OUT/ramp/plan.json $OUT/ramp.plan.json; cp $OUT/fixed/plan.json $OUT/fixed.plan.json
wc -l $OUT/*.metrics
