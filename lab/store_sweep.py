"""Store a finished `date sweep` as data: its results.json -> docs/results/sweeps/NAME.jsonl.

    python -m lab.store_sweep sweeps/lenet-mnist-rules [--name NAME]
    python -m lab.store_sweep sweeps/vit-mnist-cosine --study schedule-shape

The first line holds the sweep's settings (command, machine, schemes, budgets, tolerance, metric);
every other line is one cell (lab/results_data.py reads them back). With ``--study``, the
sweep's lines go into one study's file, docs/results/studies/STUDY.jsonl, beside the study's other
sweeps (a sweep stored again replaces its lines there).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from date_engine.sweep.schemes import split_label
from lab.results_data import RESULTS


def lines(name: str, results: dict[str, Any]) -> list[str]:
    """The JSON Lines of one sweep's results.json."""
    settings, summary = results["settings"], results["summary"]
    header = {"sweep": name, "metric": summary["metric"],
              "higher_is_better": summary["higher_is_better"], "settings": settings}
    out = [json.dumps(header, separators=(",", ":"))]
    for cell in results["cells"]:
        scheme, budget = split_label(cell["scheme"])
        row = {"sweep": name, "recipe": settings["recipe"], "overrides": settings["overrides"],
               "scheme": scheme, "budget": budget}
        row.update({k: v for k, v in cell.items() if k != "scheme"})
        row.update({"machine": settings["machine"], "command": settings["command"]})
        out.append(json.dumps(row, separators=(",", ":")))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the sweep's output folder (date sweep -o)")
    parser.add_argument("--name", help="the data file's name (default: the folder's)")
    parser.add_argument("--study", help="the study file whose sweeps this one joins")
    args = parser.parse_args()
    name = args.name or args.folder.name
    results = json.loads((args.folder / "results.json").read_text())
    new = lines(name, results)
    if args.study is None:
        path = RESULTS / "sweeps" / f"{name}.jsonl"
    else:
        path = RESULTS / "studies" / f"{args.study}.jsonl"
        path.parent.mkdir(exist_ok=True)
        kept = [line for line in (path.read_text().splitlines() if path.exists() else [])
                if json.loads(line).get("sweep") != name]
        new = kept + new
    path.write_text("\n".join(new) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
