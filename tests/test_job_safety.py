"""The jobs `date plan --emit slurm|k8s` writes are data, never code: every argument a user or a
pipeline passes (the spec's path, a --set value, --command, the recipe's name, the command line
itself) is fed a newline, `$(...)`, backticks, quotes, `#`, `---` and a NUL. What cannot be carried
as data is refused in one sentence with exit 2; everything else comes out as written: the script
passes `bash -n`, its every `#SBATCH` line comes before its first command, the program it execs
gets the argument exactly as given (run here with stand-ins for python, torchrun, srun and
scontrol that record their argv), and the manifest is exactly one TrainJob."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from date_engine.cli import app
from date_engine.view.jobs import dns_name, job_for, job_name, k8s_manifest, slurm_script
from tests.conftest import RECIPES
from tests.test_bad_input import refused as refused_in_one_sentence

DIGITS = RECIPES / "lenet-digits.yaml"
PAYLOADS = {
    "newline": "a\ntouch pwned #",
    "carriage return": "a\rtouch pwned",
    "NUL": "a\x00b",
    "line separator": "a\u2028b",
    "substitution": "a$(touch pwned)b",
    "backticks": "a`touch pwned`b",
    "quotes": "a'b\"c",
    "comment": "a #b",
    "document": "---",
    "semicolon": "a; touch pwned",
    "glob": "*",
}
BREAKING = {"newline", "carriage return", "NUL", "line separator"}
"""The payloads a job file cannot carry as data: refused."""


def emit(monkeypatch, *args):
    """`date plan ... --emit` in this process, as if typed (the script's comment line is the
    command line)."""
    words = [str(a) for a in args]
    monkeypatch.setattr(sys, "argv", ["date", "plan", *words])
    return CliRunner().invoke(app, ["plan", *words], env={"COLUMNS": "200"})


def refused(result, *words):
    """test_bad_input's refusal (exit 2, no traceback, the words), in one line."""
    refused_in_one_sentence(result, *words)
    assert len(result.output.strip().splitlines()) == 1, result.output


def commands_after_headers(script: str) -> list[str]:
    """The script's lines from its first command on; fails if an #SBATCH line comes after it
    (sbatch stops reading them there)."""
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    first = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    assert not [line for line in lines[first:] if line.startswith("#SBATCH")], script
    return lines[first:]


@pytest.fixture
def run_script(tmp_path):
    """Run a Slurm script with stand-ins on PATH that write their argv to a file; returns
    {program: argv}."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "argv.jsonl"
    for program in ("python", "torchrun", "srun", "scontrol"):
        stand_in = bin_dir / program
        stand_in.write_text(
            f"#!{sys.executable}\nimport json, os, sys\n"
            f"open({str(record)!r}, 'a').write(json.dumps([os.path.basename(sys.argv[0]), "
            "*sys.argv[1:]]) + '\\n')\n"
            "if sys.argv[1:3] == ['show', 'hostnames']: print('node1')\n")
        stand_in.chmod(0o755)

    def run(script: str) -> dict[str, list[str]]:
        path = tmp_path / "job.sh"
        path.write_text(script)
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
        record.unlink(missing_ok=True)
        done = subprocess.run(["bash", str(path)], cwd=tmp_path, capture_output=True, text=True,
                              env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "7",
                                   "SLURM_JOB_NODELIST": "node1"})
        assert done.returncode == 0, done.stderr
        assert not (tmp_path / "pwned").exists()
        return {argv[0]: argv[1:] for argv in map(json.loads, record.read_text().splitlines())}
    return run


def one_trainjob(text: str) -> dict:
    documents = [d for d in yaml.safe_load_all(text) if d is not None]
    assert len(documents) == 1 and documents[0]["kind"] == "TrainJob", documents
    name = documents[0]["metadata"]["name"]
    assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name), name
    return documents[0]


@pytest.mark.parametrize("payload", PAYLOADS, ids=list(PAYLOADS))
@pytest.mark.parametrize("nodes", [1, 2])
def test_command(monkeypatch, run_script, payload, nodes):
    command = f"python train.py --note {shlex.quote(PAYLOADS[payload])}"
    common = [DIGITS, "--batch", 256, "--devices", 2 * nodes, "--nnodes", nodes,
              "--command", command]
    slurm = emit(monkeypatch, *common, "--emit", "slurm-cpu")
    k8s = emit(monkeypatch, *common, "--emit", "k8s-cpu")
    if payload in BREAKING:
        refused(slurm, "--command", "control character")
        refused(k8s, "--command", "control character")
        return
    assert slurm.exit_code == 0, slurm.output
    given = ["train.py", "--note", PAYLOADS[payload]]
    commands_after_headers(slurm.stdout)
    ran = run_script(slurm.stdout)
    launched = ran["srun"] if nodes > 1 else ran["torchrun"]  # srun torchrun ... across nodes
    assert launched[-3:] == given, ran
    job = one_trainjob(k8s.stdout)
    assert job["spec"]["trainer"]["command"] == ["torchrun", *given]


@pytest.mark.parametrize("payload", PAYLOADS, ids=list(PAYLOADS))
def test_spec_path_and_set_value(monkeypatch, tmp_path, run_script, payload):
    """The spec's path and a --set value reach date scale in the job as given (or are refused),
    and so does the command line in the script's first comment."""
    text = PAYLOADS[payload]
    if payload == "NUL":  # no file name holds a NUL: the --set value carries it alone
        spec = tmp_path / "spec.yaml"
    else:
        spec = tmp_path / f"spec{text}.yaml".replace("/", "-")
    shutil.copy(DIGITS, spec)
    data_dir = f"train.data_dir=/data/{text}"
    common = [spec, "--batch", 256, "--devices", 2, "--set", data_dir]
    slurm = emit(monkeypatch, *common, "--emit", "slurm-cpu")
    k8s = emit(monkeypatch, *common, "--emit", "k8s-cpu")
    if payload in BREAKING:  # refused by the job, or as a --set value that YAML cannot hold
        refused(slurm)
        refused(k8s)
        return
    assert slurm.exit_code == 0, slurm.output
    commands_after_headers(slurm.stdout)
    ran = run_script(slurm.stdout)["python"]
    assert ran[:4] == ["-m", "date_engine", "scale", str(spec)], ran
    assert ran[ran.index("--set") + 1] == data_dir
    command = one_trainjob(k8s.stdout)["spec"]["trainer"]["command"]
    assert command[4] == str(spec) and command[command.index("--set") + 1] == data_dir


@pytest.mark.parametrize("name", [*PAYLOADS.values(), "my_model", "My Model", "-x-", "9lives",
                                  "a" * 80, "ÿ"], ids=[*PAYLOADS, "underscore", "space",
                                                       "dashes", "digit", "long", "latin"])
def test_recipe_name(run_script, name):
    """A recipe's name becomes a safe job name and folder (Slurm) and a DNS-1123 name (k8s),
    the name itself kept in a comment; one with a line break is refused."""
    from date_engine.api import plan_for
    from date_engine.errors import DateError
    from date_engine.spec import load_spec

    run = plan_for(load_spec(DIGITS), 256, devices=2)
    args = ([str(DIGITS), "--batch", "256"], None, [])
    if any(c in name for c in "\n\r\x00\u2028"):
        with pytest.raises(DateError, match="recipe's name"):
            job_for(run, "slurm-cpu", 1, "date plan", name, *args)
        return
    job = job_for(run, "slurm-cpu", 1, "date plan", name, *args)
    assert re.fullmatch(r"[A-Za-z0-9._-]+-B256", job.name), job.name
    script = slurm_script(job)
    ran = run_script(script)["python"]
    assert ran[ran.index("-o") + 1] == f"runs/{job.name}"
    assert f"#SBATCH --job-name=date-{job.name}\n" in script
    one_trainjob(k8s_manifest(job))


def test_names():
    assert dns_name("date-my_model-B256") == "date-my-model-b256"
    assert dns_name("9") == "x-9" and len(dns_name("a" * 100)) == 63
    assert job_name("a$(b) c") == "a-b-c" and job_name("...") == "run"


def test_refusals_name_the_argument(monkeypatch):
    refused(emit(monkeypatch, DIGITS, "--batch", 256, "--emit", "slurm",
                 "--command", "python 'train.py"), "--command", "close its quotes")
    refused(emit(monkeypatch, DIGITS, "--batch", 256, "--emit", "slurm", "--command", " "),
            "--command is empty")


def test_shipped_spec_by_name_and_cores(monkeypatch):
    """A shipped baseline's path becomes its name (the path exists only in a checkout);
    --cpus-per-process sets the cores of each process."""
    done = emit(monkeypatch, DIGITS, "--batch", 256, "--devices", 2, "--cpus-per-process", 4,
                "--emit", "slurm-cpu")
    assert done.exit_code == 0, done.output
    assert "scale lenet-digits --batch 256" in done.stdout
    assert "#SBATCH --cpus-per-task=8" in done.stdout
    done = emit(monkeypatch, DIGITS, "--batch", 256, "--devices", 4, "--nnodes", 2,
                "--cpus-per-process", 4, "--emit", "slurm-cpu")
    assert "#SBATCH --ntasks-per-node=2\n#SBATCH --cpus-per-task=4" in done.stdout


def test_own_script_gets_the_run_folder(monkeypatch, tmp_path):
    """--from with --command: HF's scripts continue from the newest checkpoint in --output_dir,
    so the job gives one (unless the command does)."""
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"per_device_train_batch_size": 16, "learning_rate": 1e-3,
                                "num_train_epochs": 2, "output_dir": "out"}))
    base = ["--from", args, "--train-samples", 1024, "--batch", 64, "--emit", "slurm-cpu"]
    done = emit(monkeypatch, *base, "--command", "python train.py")
    assert done.exit_code == 0, done.output
    assert "--output_dir runs/run-B64" in done.stdout
    done = emit(monkeypatch, *base, "--command", "python train.py --output_dir mine")
    assert "--output_dir mine" in done.stdout and "runs/run-B64" not in done.stdout
