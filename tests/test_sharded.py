"""DATE, LARS and LAMB over parameters sharded with FSDP2 (``fully_shard``): each layer's norms
from the shards and one all-reduce a step, so the steps are those of the unsharded model."""

from __future__ import annotations

import json
import sys

import pytest

from tests.runs import run_group


@pytest.mark.slow
def test_every_layerwise_optimizer_steps_a_sharded_model_as_the_unsharded_one():
    """2 processes, gloo, shards of uneven size, 100 steps on half the batch each: the weights
    equal those of the unsharded model trained on the whole batch (relative ≤ 1e-5), DATE's
    per-layer ratios too, with one all-reduce per step for every layer's norms; a replicated
    tensor's norm counts it once."""
    result = run_group([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", 2,
                        "--standalone", "-m", "tests.sharded_worker"],
                       env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {r["optimizer"]: r for r in map(json.loads, result.stdout.splitlines())}
    mixed = rows.pop("norms: sharded, replicated")
    assert mixed["norms"] == pytest.approx([mixed["whole"]] * 2, rel=1e-6)  # float32 sums
    assert set(rows) == {"date-sgd", "date-nesterov-loop", "date-adam", "lars", "lamb"}
    for row in rows.values():
        assert row["weights"] <= 1e-5, row
        assert row["ratios"] <= 1e-5, row
        assert row["all_reduces_per_step"] == [1], row  # no collective per parameter
        assert row["implementation"] in ("foreach", "loop"), row
