"""The README's commands and examples are the ones that work."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def _bash_blocks(text):
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_ci_runs_the_readme_test_command():
    test_commands = [b.strip() for b in _bash_blocks(README) if "pytest" in b]
    assert len(test_commands) == 1, "README shows one test command"
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_commands[0] in ci


def test_readme_main_command_is_a_shipped_recipe():
    main = [b.strip() for b in _bash_blocks(README) if "pytest" not in b][0]
    recipe = re.search(r"date (?:plan|scale) (\S+)", main).group(1)
    assert (ROOT / recipe).is_file()


def test_readme_python_example_matches_its_comments():
    block = re.search(r"```python\n(.*?)```", README, flags=re.S).group(1)
    setup = block.split("for step")[0].replace("recipes/", str(ROOT / "recipes") + "/")
    scope: dict = {}
    exec(setup.split("plan.peak_lr,")[0], scope)
    plan, split = scope["plan"], scope["split"]
    claimed = re.search(r"# (.*)", block.split("plan.peak_lr,")[1]).group(1)
    shown = [float(x) for x in claimed.split(", ")]
    actual = [plan.peak_lr, plan.warmup_epochs, plan.total_iterations, split.accumulation_steps]
    assert [round(a, 7) for a in actual] == shown


def test_example_script_runs():
    out = subprocess.run(
        [sys.executable, "examples/plan_in_python.py", "recipes/lenet-mnist.yaml", "8192"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )
    from date_engine import derive_plan, load_spec

    plan = derive_plan(load_spec(ROOT / "recipes/lenet-mnist.yaml"), 8192)
    assert f"peak lr = {plan.peak_lr:.5g}" in out.stdout and "220 steps" in out.stdout


def test_relative_links_in_the_docs_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken
