"""The options of the ``date`` command line, declared once; each command's signature in
:mod:`date_engine.cli` names them. Parsing only: the library checks the values."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional, get_args

import typer

from date_engine.checks import a_path
from date_engine.errors import DateError
from date_engine.integrations import EMIT_TARGETS
from date_engine.spec import TrainSpec


def opt(*names: str, help: str, **kwargs) -> typer.models.OptionInfo:
    """An option that takes a value (no default shown unless asked)."""
    return typer.Option(*names, help=help, show_default=kwargs.pop("show_default", False),
                        **kwargs)


def parse_path(text: str) -> Path:
    """A path option's text as a Path, refused when empty or blank (``Path("")`` is ``.``)."""
    try:
        return a_path(text, "the path")
    except DateError:
        raise typer.BadParameter("an empty path; give a file or folder name.") from None


def path_opt(*names: str, help: str) -> typer.models.OptionInfo:
    """An option that names a file or folder."""
    return opt(*names, help=help, parser=parse_path, metavar="PATH")


def flag(*names: str, help: str, **kwargs) -> typer.models.OptionInfo:
    """An on/off option: given or not, it takes no value."""
    return typer.Option(*names, help=help, metavar=" ", show_default=False, **kwargs)

SpecArg = Annotated[str, typer.Argument(
    metavar="SPEC", show_default=False,
    help="Baseline YAML, or the name of a shipped one (date recipes lists them).")]
PlanSpecArg = Annotated[Optional[str], typer.Argument(
    metavar="SPEC", show_default=False,
    help="Baseline YAML, or the name of a shipped one (date recipes lists them); or --from.")]
FromOpt = Annotated[Optional[Path], path_opt(
    "--from", help="Read the baseline from the run's own configuration instead of SPEC: Hugging "
    "Face's TrainingArguments as JSON (args.to_json_string()), timm's args.yaml, a nanoGPT "
    "config (config/x.py, read without running it), Megatron-LM flags or its launch script "
    "(*.sh, *.txt, *.args) or a Megatron-Bridge YAML; with --train-samples (and "
    "--baseline-devices where it ran on more than one).")]
TrainSamplesOpt = Annotated[Optional[int], opt(
    "--train-samples", min=1, help="With --from: the baseline's training samples per epoch "
    "(its dataset's length; for a language model, its sequences; the configuration does not "
    "record it).")]
BatchOpt = Annotated[str, opt("--batch", "-b", metavar="B",
                               help="Target global batch size B (8k = 8192).")]
NprocOpt = Annotated[int, typer.Option("--nproc", "-n", help="Processes (data-parallel replicas).")]
MicroOpt = Annotated[Optional[int], opt(
    "--micro-batch", help="Samples per process per pass (default: train.micro_batch, else the "
    "recipe's, fitted to B/nproc).")]
SetOpt = Annotated[Optional[list[str]], opt(
    "--set", metavar="KEY=VALUE", help="Override a spec value, e.g. --set baseline.lr=0.1 "
    "(repeatable).")]
ProbeOpt = Annotated[Optional[Path], path_opt(
    "--probe", help="probe.json from date probe of this baseline: forecast what holding its "
    "loss costs at BATCH; where its LR check fires the adaptive family's LR grows as √k "
    "(sets date.probe).")]
Parallel = TrainSpec.model_fields["parallel"].annotation
ParallelOpt = Annotated[Optional[Parallel], opt(
    "--parallel", metavar="|".join(get_args(Parallel)),
    help="ddp: every process holds the whole model; fsdp: parameters, gradients and optimizer "
    "state sharded over the processes (FSDP2), for models that do not fit one device (sets "
    "train.parallel).")]
BudgetOpt = Annotated[Optional[str], opt(
    "--budget", metavar="same-epochs|hold|ramp", help="same-epochs: the baseline's epochs "
    "(default); hold: the epochs the probe forecasts to reach the baseline's loss; ramp: a batch "
    "that doubles up to --batch as the noise scale grows, as the run measures it unless "
    "date.ramp is planned (sets date.budget).")]


OutputOpt = Annotated[Optional[Path], path_opt(
    "--output-dir", "-o", help="Run folder (default: train.output_dir, else "
    "runs/<recipe>-B<batch>[-hold|-ramp], then -2, -3, ... for each new run).")]
ResumeOpt = Annotated[bool, flag(
    "--resume", help="Continue from the newest valid checkpoint (of the newest default run "
    "folder, without --output-dir).")]
AutoResumeOpt = Annotated[bool, flag(
    "--auto-resume", help="Continue from the newest valid checkpoint if the run folder holds "
    "one, else start: for job scripts that run again when requeued. Under Slurm, a run stopped "
    "by SIGUSR1 (the time limit's signal) checkpoints and requeues its job.")]
ReplanOpt = Annotated[bool, flag(
    "--force-replan", help="Resume a checkpoint written for another plan (batch, processes, "
    "spec).")]
DryRunOpt = Annotated[bool, flag(
    "--dry-run", help="Validate everything, then 2 tiny steps on the CPU in a temporary folder.")]
MaxStepsOpt = Annotated[Optional[int], opt(
    "--max-steps", min=1, help="Stop after this optimizer step (checkpointed; the schedule is "
    "unchanged).")]
Precision = TrainSpec.model_fields["precision"].annotation  # the spec's Literal: one list
PrecisionOpt = Annotated[Optional[Precision], opt(
    "--precision", metavar="|".join(get_args(Precision)),
    help="CUDA only; default: train.precision.")]
CompileOpt = Annotated[bool, flag("--compile", help="torch.compile the model (CUDA only).")]
RecipeOpt = Annotated[Optional[str], opt(
    "--recipe", help="Recipe name or package.module:function (default: the spec's).")]
BackendOpt = Annotated[Optional[str], opt(
    "--backend", help="Process-group backend: gloo, nccl or mpi (default: nccl on CUDA, gloo on "
    "CPU).")]
NnodesOpt = Annotated[int, typer.Option("--nnodes", min=1, help="Nodes in the job.")]
NodeRankOpt = Annotated[Optional[int], opt(
    "--node-rank", help="This node's rank (static rendezvous at --master-addr).")]
RdzvEndpointOpt = Annotated[Optional[str], opt(
    "--rdzv-endpoint", help="host:port of the c10d rendezvous (multi-node).")]
RdzvIdOpt = Annotated[str, typer.Option("--rdzv-id", help="Job id shared by all nodes.")]
MasterAddrOpt = Annotated[Optional[str], opt("--master-addr", help="Static rendezvous host.")]
MasterPortOpt = Annotated[Optional[int], opt("--master-port", help="Static rendezvous port.")]
RestartsOpt = Annotated[int, typer.Option(
    "--max-restarts", min=0, help="Restart failed workers this often (they resume from the newest "
    "checkpoint).")]
ScaleJsonOpt = Annotated[bool, flag(
    "--json", help="At the end, print the run's plan and summary as one JSON object on stdout "
    "(everything else goes to stderr).")]
SCALE_EXAMPLES = ("Examples: date scale lenet-digits --batch 256 | date scale my.yaml --batch 8k "
                  "--nproc 8 | date scale my.yaml --batch 8k --dry-run --json | date scale my.yaml "
                  "--batch 8k --resume")

PointsOpt = Annotated[int, typer.Option(
    "--points", min=2, help="Noise-scale measurements kept, one per equal stretch of the probe.")]
ShareOpt = Annotated[float, typer.Option(
    "--share", min=0.001, max=1.0, help="Share of the baseline's optimizer steps to train.")]
MinutesOpt = Annotated[Optional[float], opt(
    "--budget-minutes", min=0.01, help="Stop after this many minutes of training, even before "
    "--share is reached (the LR check then trains as many steps again).")]
ProbeMicroOpt = Annotated[Optional[int], opt(
    "--micro-batch", help="Samples per process per pass (default: half the baseline's batch on one "
    "process, each process's share on several: two or more gradients per step).")]
LRCheckOpt = Annotated[bool, typer.Option(
    "--lr-check/--no-lr-check", help="Train the probe's steps again at twice the baseline's LR: "
    "where that does not lower the loss, the forecast expects no steps saved at a larger batch "
    "(about doubles the probe's time).")]
ProbeBatchOpt = Annotated[Optional[str], opt(
    "--batch", "-b", help="Target batch (e.g. 8192 or 8k): branch from the probe's checkpoints at "
    "the baseline's batch, 2×, 4×, ... up to it, and try the target's LR and second moment there; "
    "date plan then reads the measured critical batch and settings (docs/branches.md).")]
BranchPointsOpt = Annotated[int, typer.Option(
    "--branch-points", min=1, help="Checkpoints to branch from, spread over the probe's steps "
    "(fewer where the budget needs; the probe says so).")]
BranchSamplesOpt = Annotated[Optional[str], opt(
    "--branch-samples", help="The branches' budget in samples, all together (default: the larger "
    "of one baseline run and a tenth of the target's).")]
ProbeOutputOpt = Annotated[Optional[Path], path_opt(
    "--output-dir", "-o", help="Probe folder: probe.json, probe.png and the training run "
    "(default: runs/<recipe>-probe, then -2, -3, ...).")]



LinkOpt = Annotated[Optional[str], opt(
    "--link", metavar="BANDWIDTH,LATENCY", help="The fabric's all-reduce link, e.g. 25GB/s,5us "
    "(NVLink, InfiniBand), instead of the one measured here.")]
MicroBatchesOpt = Annotated[Optional[str], opt(
    "--micro-batches", help="Micro-batch sizes to time, comma-separated (default: the recipe's "
    "micro-batch and its half, quarter, eighth and sixteenth).")]


BatchesOpt = Annotated[str, opt(
    "--batches", help="Global batch sizes, comma-separated (8k = 8192). The baseline's batch is "
    "always run, as the reference.")]
SchemesOpt = Annotated[str, typer.Option(
    "--schemes", help="Comma-separated: date, paper, linear, none, lars, lamb, adam.")]
RepeatsOpt = Annotated[int, typer.Option(
    "--repeats", "-r", min=1, help="Seeds per cell: train.seed, train.seed + 1, ... (the "
    "report says how many would narrow a close call to the tolerance).")]
JobsOpt = Annotated[int, typer.Option(
    "--jobs", "-j", min=1, help="Cells trained at once (the CPU threads are shared out).")]
SweepOutputOpt = Annotated[Optional[Path], path_opt(
    "--output-dir", "-o", help="Sweep folder (default: sweeps/<spec name>).")]
GridOpt = Annotated[str, typer.Option(
    "--lr-grid", help="Peak LRs tried by lars, lamb and adam; the best per batch is kept.")]
ToleranceOpt = Annotated[str, typer.Option(
    "--tolerance", help="How close to the baseline's metric counts as holding it: an amount in "
    "the metric's units (0.3) or a percentage (5%); schemes whose seed-by-seed interval lies "
    "within it read level.")]
EvalsOpt = Annotated[int, typer.Option(
    "--evals", min=1, help="Evaluations per cell, evenly spaced (time-to-accuracy is read at "
    "them).")]
BudgetsOpt = Annotated[Optional[str], typer.Option(
    "--budgets", metavar="same-epochs,hold,ramp,ramp-planned", help="Train each scheme once "
    "per budget (date.budget; ramp-planned: a ramp with date.ramp planned), side by side as "
    "scheme+budget; all but same-epochs need --probe. Default: the spec's budget.")]
GridSetOpt = Annotated[Optional[list[str]], opt(
    "--grid-set", metavar="KEY=VALUE", help="An option of the optimizer lars, lamb and adam "
    "tune, e.g. --grid-set phi_bounds=[1,10] (repeatable).")]
ReportOnlyOpt = Annotated[bool, flag(
    "--report-only", help="Train nothing; write the report from the cells already run.")]



# ---------------------------------------------------------------------- date plan's own options

PlanJsonOpt = Annotated[bool, flag("--json", help="Print the plan as one JSON object.")]
PlotOpt = Annotated[Optional[Path], path_opt(
    "--plot", help="Also draw the LR curve into this PNG (or .pdf, .svg).")]
CompareOpt = Annotated[bool, flag(
    "--compare", help="Show beside it the other rule (the paper's, or DATE's default) and linear "
    "scaling + constant warmup (Goyal et al.).")]
DevicesOpt = Annotated[Optional[int], opt(
    "--devices", min=1, help="Split the batch over this many devices (as --nproc); with --bench, "
    "also forecast the wall-clock time on them.")]
BenchOpt = Annotated[Optional[Path], path_opt(
    "--bench", help="bench.json from date bench on your hardware: the step times the forecast is "
    "built from.")]
DeviceMemoryOpt = Annotated[Optional[str], opt(
    "--device-memory", metavar="SIZE", help="Memory of one device (80GiB, 40GB): with --bench, the "
    "largest micro-batch whose pass fits it, and the accumulation it implies.")]
BaselineDevicesOpt = Annotated[Optional[int], opt(
    "--baseline-devices", min=1, help="Devices the baseline runs on, for the speedup (default: "
    "its batch ÷ the micro-batch).")]
EmitOpt = Annotated[Optional[str], opt(
    "--emit", metavar="|".join(EMIT_TARGETS), help="Print the plan as settings for another "
    "trainer: hf-args (flags of Hugging Face's example scripts), lightning or accelerate (Python "
    "to paste), json (all of them); or a job that trains it: a Slurm script (slurm, slurm-cpu) or "
    "a Kubeflow TrainJob (k8s, k8s-cpu).")]
CommandOpt = Annotated[Optional[str], opt(
    "--command", help="With a job --emit: the job runs this command (your own training script, "
    "e.g. 'python train.py') under torchrun instead of date scale; with --from a TrainingArguments "
    "file, the plan's hf-args flags follow it.")]
CpusOpt = Annotated[int, opt(
    "--cpus-per-process", min=1, help="With a job --emit: CPU cores each training process gets "
    "(its data loading and host work); Slurm's --cpus-per-task.")]

# ---------------------------------------------------------------------- the other commands' own

SweepProbeOpt = Annotated[Optional[Path], path_opt(
    "--probe", help="probe.json of the baseline: the report puts each batch's forecast beside "
    "what its cells measured, --budgets hold and ramp train with it, and the date scheme's cells "
    "read its LR check (√k for the adaptive family where it fires).")]
SweepBenchOpt = Annotated[Optional[Path], path_opt(
    "--bench", help="bench.json from date bench on this machine: the report puts each cell's "
    "forecast training time beside the measured one.")]
BenchOutputOpt = Annotated[Path, path_opt("--output-dir", "-o", help="Folder for bench.json.")]
RecipesJsonOpt = Annotated[bool, flag("--json", help="A JSON list, one object per recipe.")]
CopyNameArg = Annotated[str, typer.Argument(
    help="A shipped baseline (date recipes lists the recipes; their YAMLs carry these names).",
    show_default=False)]
CopyDestArg = Annotated[Optional[Path], typer.Argument(
    help="Where to write it (default: NAME.yaml here).", show_default=False, parser=parse_path)]
ForceOpt = Annotated[bool, flag("--force", help="Overwrite DEST if it exists.")]
NewNameArg = Annotated[str, typer.Argument(
    help="The recipe's name: writes NAME.py (a recipe to fill in) and NAME.yaml (its baseline).",
    show_default=False)]
DataNameArg = Annotated[str, typer.Argument(
    help="mnist | fashion-mnist | shakespeare | shakespeare-text | shakespeare-chars | en-de",
    show_default=False)]
DataDestArg = Annotated[Path, typer.Argument(
    help="Folder to write (train.data_dir of the recipe).", show_default=False, parser=parse_path)]
SourceOpt = Annotated[Optional[Path], path_opt(
    "--source", help="Where the source lies, when not where it installs by default.")]
