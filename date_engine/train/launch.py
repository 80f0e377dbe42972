"""Start a ``date scale`` job: in this process, inside a job torchrun or Slurm already started, or
as workers of torch's elastic agent (``torch.distributed.run``, the code behind ``torchrun``)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from date_engine.machine import choose_threads, threads_per_process
from date_engine.runfolder import RunFolder, RunSummary
from date_engine.train.config import RunConfig
from date_engine.train.runtime import die_with_parent, job_environment

__all__ = ["LaunchOptions", "elastic", "launch", "torchrun_arguments", "train_run"]


@dataclass(frozen=True)
class LaunchOptions:
    """How many processes, on how many nodes, meeting where, restarted how often."""

    nproc: int = 1
    """Processes per node."""
    nnodes: int = 1
    node_rank: int | None = None
    """This node's rank, with a static rendezvous at --master-addr (default: c10d rendezvous)."""
    rdzv_endpoint: str | None = None
    """host:port of the c10d rendezvous (multi-node)."""
    rdzv_id: str = "date-engine"
    rdzv_backend: str = "c10d"
    master_addr: str | None = None
    master_port: int | None = None
    max_restarts: int = 0
    """How often torch's elastic agent restarts the workers after one fails; they resume from the
    newest checkpoint."""

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def needs_agent(self) -> bool:
        return self.world_size > 1 or self.max_restarts > 0


def launch(config: RunConfig, options: LaunchOptions) -> int:
    """Run the job and return its exit code.

    A dry run trains into a temporary folder, removed afterwards. With ``config.print_json`` the
    run's plan and summary (plan.json and summary.json) are printed on stdout at the end."""
    if not config.dry_run:
        return _print_record(config, _run(config, options))
    with tempfile.TemporaryDirectory(prefix="date-dry-run-") as folder:
        config = dataclasses.replace(config, output_dir=folder)
        return _print_record(config, _run(config, options))


def train_run(spec: Any, run: Any, folder: str | Path, *, recipe: str | None = None,
              max_steps: int | None = None, resume: bool = False, dry_run: bool = False,
              precision: str | None = None) -> RunSummary | None:
    """Train ``run`` — a RunPlan of ``spec`` (:func:`date_engine.plan_for`) — with ``date
    scale``'s trainer into ``folder``, on as many local processes as its split names (torch's
    elastic agent for more than one), and return its summary. The run is trained as given, not
    derived again. ``recipe``: a registered name or ``package.module:function`` (default the
    spec's); ``max_steps``: stop (checkpointed) after that many optimizer steps; ``resume``:
    continue from the folder's newest checkpoint; ``dry_run``: check it in a few tiny steps (None
    is returned). A run that ends without a summary (refused input, a non-finite loss) raises
    :class:`~date_engine.errors.DateError` naming the folder."""
    from date_engine.errors import DateError, expect
    from date_engine.recipes import spec_recipe
    from date_engine.runplan import RunPlan
    from date_engine.spec import Spec

    expect(spec, Spec, "train_run: spec", "a validated Spec (load_spec(path) or baseline(...))")
    expect(run, RunPlan, "train_run: run", "a RunPlan of the spec (plan_for(spec, ...))")
    plan, base = run.plan, spec.baseline
    if (plan.baseline_batch, plan.baseline_lr) != (base.batch_size, base.lr):
        raise DateError(f"train_run: the run is a plan of another baseline (batch "
                        f"{plan.baseline_batch}, LR {plan.baseline_lr:g}) than the spec's (batch "
                        f"{base.batch_size}, LR {base.lr:g}); derive it from this spec with "
                        "plan_for(spec, ...).")
    found = spec_recipe(spec, recipe, to_train=True)
    folder = Path(folder)
    config = RunConfig(
        spec=spec.model_dump(mode="json", exclude_none=True), spec_path="(train_run)",
        recipe=recipe or spec.recipe or found.name, batch=plan.target_batch,
        world_size=run.split.world_size, micro_batch=run.split.micro_batch,
        output_dir=str(folder), run=run.to_dict(), resume=resume, dry_run=dry_run,
        max_steps=max_steps, precision=precision or spec.train.precision,
        rerun_command=f"train_run(spec, run, {str(folder)!r}, resume=True)")
    code = launch(config, LaunchOptions(nproc=run.split.world_size))
    summary = RunFolder(folder).read_summary() if not dry_run else None
    if summary is None and (code or not dry_run):
        raise DateError(f"train_run: the run in {folder} ended with exit code {code} and no "
                        "summary; its messages above say why.")
    return summary


def _run(config: RunConfig, options: LaunchOptions) -> int:
    from date_engine.train import trainer

    if job_environment().launcher != "none":  # a process of a job torchrun or srun started
        die_with_parent()
        return trainer.run(config)
    threads, why = choose_threads(options.nproc, kept=RunFolder(config.output_dir).read_threads()
                                  if config.resume else None)
    config = dataclasses.replace(config, threads=threads, threads_why=why)
    if not options.needs_agent:
        import torch

        torch.set_num_threads(threads)
        return trainer.run(config)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    return _elastic(config, options)


def _print_record(config: RunConfig, code: int) -> int:
    """With --json, rank 0 prints what the run wrote: its plan (as date plan --json prints it) and
    (when it ended) its summary."""
    if not config.print_json or job_environment().rank != 0:
        return code
    folder = RunFolder(config.output_dir)
    run, summary = folder.read_plan(), folder.read_summary()
    print(json.dumps({"plan": run.document() if run else None,
                      "summary": dataclasses.asdict(summary) if summary else None,
                      "exit_code": code}, indent=2))
    return code


def torchrun_arguments(config_path: Path, options: LaunchOptions,
                       module: str = "date_engine.train.worker") -> list[str]:
    """The torchrun command line (without the program name) that starts this job's workers:
    ``python -m module --config config_path`` each."""
    args = ["--nproc-per-node", str(options.nproc), "--max-restarts", str(options.max_restarts),
            "--monitor-interval", "0.5"]
    if options.nnodes == 1 and options.rdzv_endpoint is None and options.node_rank is None:
        args.append("--standalone")
    elif options.node_rank is not None:
        args += ["--nnodes", str(options.nnodes), "--node-rank", str(options.node_rank),
                 "--master-addr", options.master_addr or "127.0.0.1",
                 "--master-port", str(options.master_port or 29500)]
    else:
        args += ["--nnodes", str(options.nnodes), "--rdzv-backend", options.rdzv_backend,
                 "--rdzv-endpoint", options.rdzv_endpoint or "127.0.0.1:29400",
                 "--rdzv-id", options.rdzv_id]
    return args + ["-m", module, "--config", str(config_path)]


def _elastic(config: RunConfig, options: LaunchOptions) -> int:
    """The job's workers under torch's elastic agent. The workers' config goes to a file of its
    own (the run folder's record is written by the run, after its checks). Ctrl-C or SIGTERM to
    this process: the agent passes SIGTERM on, every worker finishes its step and checkpoints, and
    the exit code is 130 / 143; SIGUSR1 the same (138)."""
    return elastic(config.to_json(), options)


def elastic(config_json: str, options: LaunchOptions,
            module: str = "date_engine.train.worker") -> int:
    """Workers ``python -m module --config FILE`` under torch's elastic agent, FILE holding
    ``config_json``, each with its share of this machine's CPU threads; the job's exit code."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    with tempfile.NamedTemporaryFile("w", prefix="date-launch-", suffix=".json", delete=False) as f:
        f.write(config_json)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads_per_process(options.nproc)))

    def stop(signum: int, frame: Any) -> None:  # as the agent's own SIGTERM: passed on
        raise SignalException(f"Process {os.getpid()} got signal: {signum}",
                              sigval=signal.Signals(signum))

    try:  # Slurm's warning before the time limit
        previous = signal.signal(signal.SIGUSR1, stop)
    except ValueError:  # not the main thread: left as it is
        previous = None
    try:
        run(get_args_parser().parse_args(torchrun_arguments(Path(f.name), options, module)))
        return 0
    except ChildFailedError as failure:
        return job_exit_code([f.exitcode for f in failure.failures.values()])
    except SignalException as stop:
        return 128 + int(stop.sigval)
    finally:
        if previous is not None:
            signal.signal(signal.SIGUSR1, previous)
        Path(f.name).unlink(missing_ok=True)
        sys.stdout.flush()


TIME_LIMIT_CODE = 128 + signal.SIGUSR1
"""The exit code of a run stopped by SIGUSR1: what Slurm sends before the time limit
(``--signal=B:USR1@...`` in the emitted job), forwarded by srun to its tasks."""


REQUEUE_WINDOW_S = 1800
"""A SIGUSR1 within this many seconds of the job's time limit is the limit's warning
(``--signal=B:USR1@180`` is sent 180 to 240 s before it); one earlier, or to a job without a
limit, is an operator's stop, which is not requeued."""


def requeue_at_time_limit(code: int, env: dict[str, str] | None = None) -> bool:
    """Requeue this Slurm job once its run has stopped for the time limit (``code`` is
    :data:`TIME_LIMIT_CODE` and the job's limit is within :data:`REQUEUE_WINDOW_S`: the run has
    checkpointed), as Lightning's SLURM plugin and submitit do: ``scontrol requeue`` by the
    job's first task, so that the job starts again and continues the run (``--auto-resume``). A
    stop by any other signal (a plain ``scancel`` sends SIGTERM) is not requeued; a failed
    requeue says what to do. Whether it was requeued."""
    import subprocess

    env = dict(os.environ) if env is None else env
    job = env.get("SLURM_JOB_ID")
    if code != TIME_LIMIT_CODE or not job or env.get("SLURM_PROCID", "0") != "0":
        return False
    left = _time_left(job, env)
    if left is None or left > REQUEUE_WINDOW_S:
        return False
    print(f"Slurm job {job} reached its time limit's signal with the run checkpointed: "
          "requeueing it; it continues from this checkpoint.", file=sys.stderr, flush=True)
    # Slurm ends the requeued job's processes with SIGTERM: the run is saved, so this process
    # leaves quietly by it
    try:
        previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # not the main thread
        previous = None
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True,
                              env=env, timeout=60)
        why = (done.stderr.strip() or f"scontrol exited with {done.returncode}") \
            if done.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = str(exc)
    if not why:
        return True
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
    print(f"warning: could not requeue Slurm job {job} ({why}); submit the same script again: "
          "it continues from the run's newest checkpoint.", file=sys.stderr)
    return False


def _time_left(job: str, env: dict[str, str]) -> float | None:
    """Seconds until ``job``'s time limit (squeue's %L: [days-]hours:minutes:seconds), None
    where it has none or squeue cannot say."""
    import subprocess

    try:
        shown = subprocess.run(["squeue", "-h", "-j", job, "-o", "%L"], capture_output=True,
                               text=True, env=env, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    days, _, clock = shown.rpartition("-")
    parts = clock.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3 or \
            (days and not days.isdigit()):
        return None  # UNLIMITED, NOT_SET, INVALID or nothing
    seconds = sum(int(p) * 60 ** i for i, p in enumerate(reversed(parts)))
    return seconds + 86400 * int(days or 0)


def job_exit_code(codes: list[int]) -> int:
    """The job's exit code from its failed workers' codes, the most telling first: a refused input
    (2), a non-finite loss (3), a stop by signal (130, 143, 138; a worker killed by signal N reports
    -N), then whatever else."""
    codes = [128 - c if c < 0 else c for c in codes] or [1]
    for telling in (2, 3, 130, 143, 138):
        if telling in codes:
            return telling
    return max(codes)
