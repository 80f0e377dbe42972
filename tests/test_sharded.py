"""DATE, LARS and LAMB over parameters sharded with FSDP2 (``fully_shard``): each layer's norms
from the shards and one all-reduce a step, so the steps are those of the unsharded model."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.bounds import gamma, runs_bound
from tests.runs import run_group


@pytest.mark.slow
def test_every_layerwise_optimizer_steps_a_sharded_model_as_the_unsharded_one():
    """2 processes, gloo, shards of uneven size, 100 steps on half the batch each: the weights
    equal those of the unsharded model trained on the whole batch (relative ≤ 1e-5), DATE's
    per-layer ratios too, with one all-reduce per step for every layer's norms; a replicated
    tensor's norm counts it once."""
    result = run_group([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", 2,
                        "--standalone", "-m", "tests.sharded_worker"],
                       env={"OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {r["optimizer"]: r for r in map(json.loads, result.stdout.splitlines())}
    mixed = rows.pop("norms: sharded, replicated")
    # a norm of 15 float32 values, its squares summed in two orders (then the root)
    within = 2 * gamma(17, torch.float32)
    assert mixed["norms"] == pytest.approx([mixed["whole"]] * 2, rel=within)
    assert set(rows) == {"date-sgd", "date-nesterov-loop", "date-adam", "lars", "lamb"}
    for row in rows.values():
        assert row["weights"] <= runs_bound(100), row  # 100 steps of the worker
        assert row["ratios"] <= runs_bound(100), row
        assert row["all_reduces_per_step"] == [1], row  # no collective per parameter
        assert row["implementation"] in ("foreach", "loop"), row
