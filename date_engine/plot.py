"""PNG figures of plans. matplotlib is optional and imported only here, only when asked for."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from date_engine.errors import DateError
from date_engine.plan import Plan

__all__ = ["save_lr_plot"]


def save_lr_plot(path: str | Path, plans: Sequence[tuple[str, Plan]]) -> Path:
    """Draw each plan's learning rate against the optimizer step (and epoch) into a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DateError(
            "--plot needs matplotlib, which is not installed; run: pip install 'date-engine[plot]'."
        ) from None

    path = Path(path)
    if path.parent and not path.parent.is_dir():
        raise DateError(f"--plot {path}: the folder {path.parent} does not exist; create it first.")
    first = plans[0][1]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    for (label, plan), color in zip(plans, ("tab:blue", "tab:red", "tab:green", "tab:purple")):
        steps = range(1, plan.total_iterations + 1)
        ax.plot(steps, plan.lrs(), label=f"{label}: η = {plan.peak_lr:.4g}", color=color)
        if plan.warmup_iterations >= 1:
            ax.axvline(plan.warmup_iterations, color=color, linestyle=":", linewidth=1)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("learning rate")
    ax.set_title(f"LR schedule at batch {first.target_batch} "
                 f"(baseline {first.baseline_batch}, k = {first.scale:g})")
    per_step = first.target_batch / first.dataset_size
    top = ax.secondary_xaxis("top", functions=(lambda s: s * per_step, lambda e: e / per_step))
    top.set_xlabel("epoch")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise DateError(f"--plot {path}: cannot write the file ({exc.strerror}).") from None
    finally:
        plt.close(fig)
    return path
