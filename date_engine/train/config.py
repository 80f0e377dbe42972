"""What one ``date scale`` run was asked to do, as every training process receives it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["RunConfig"]


@dataclass(frozen=True)
class RunConfig:
    """The resolved command line: the spec (overrides applied) and the run's options.

    Written to the run folder's config.json; a torchrun worker reads it back from there.
    """

    spec: dict[str, Any]
    """The validated spec, as a plain mapping."""
    spec_path: str
    recipe: str
    """Registered recipe name, or package.module:function."""
    batch: int
    world_size: int
    """Processes in the whole job (nodes × processes per node)."""
    micro_batch: int | None
    output_dir: str
    run: dict[str, Any] | None = None
    """The run the command derived (:meth:`RunPlan.to_dict`, as plan.json holds it): what every
    process trains, not derived again. None where n is known only once the data is loaded: each
    process then derives it from ``spec`` (date_engine/train/trainer.py)."""
    resume: bool = False
    force_replan: bool = False
    dry_run: bool = False
    max_steps: int | None = None
    max_seconds: float | None = None
    """Stop (checkpointed) once the run has trained this long; rank 0's clock decides."""
    measure_noise: bool = True
    """Measure the gradient noise scale when a step sees two or more micro-batch gradients;
    False skips it (benchmarks/noise_overhead.py compares the two)."""
    measure_pairs: bool = False
    """Also measure the product of consecutive steps' gradients (the pair noise scale,
    docs/noise.md): ``date probe`` does; it keeps a copy of the gradient between steps."""
    precision: str = "fp32"
    compile: bool = False
    backend: str | None = None
    rerun_command: str = ""
    """How the user started the run, for the messages that tell how to resume it."""
    print_json: bool = False
    """Print the run's plan and summary as JSON on stdout; everything else goes to stderr."""
    threads: int = 0
    """The intra-op threads each process runs with (0: torch's default), chosen at launch: a
    user's OMP_NUM_THREADS, else the cores idle when the run starts (machine.choose_threads),
    and on resume the run's own, so that it goes on bit for bit."""
    threads_why: str = ""
    branch_lr: float | None = None
    """A probe's branch (date_engine/train/branches.py): train at this constant LR (every group
    at its ratio to the plan's peak) instead of the plan's schedule."""
    evaluate_at: tuple[int, ...] = ()
    """Also evaluate after these steps (a probe's branch: where it stops, and a baseline
    branch halfway)."""
    quiet: bool = False
    """Show nothing but errors (a probe's branch: the probe says one line for it)."""
    brief: bool = False
    """Say in one line what is trained instead of showing the plan, and end without the summary
    table and curves.png: for a run that is part of another command (``date probe``)."""

    @property
    def draws_curves(self) -> bool:
        """curves.png at the end: not for a dry run or a brief one."""
        return not self.dry_run and not self.brief

    def to_json(self, record: bool = False) -> str:
        """The config as JSON: whole, as the workers read it; ``record``: for the run folder's
        config.json, without ``run`` (plan.json beside it holds the run)."""
        fields = asdict(self)
        if record:
            del fields["run"]
        return json.dumps(fields, indent=2, default=str)

    @classmethod
    def read(cls, path: str | Path) -> RunConfig:
        return cls(**json.loads(Path(path).read_text()))
