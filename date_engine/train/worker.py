"""One training process of a job started by torch's elastic agent:
``python -m date_engine.train.worker --config <launch config>.json``."""

from __future__ import annotations

import argparse
import sys

from date_engine.errors import as_command_line
from date_engine.train.config import RunConfig
from date_engine.train.runtime import die_with_parent
from date_engine.train.trainer import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="the run's config, as JSON")
    args = parser.parse_args(argv)
    die_with_parent()
    with as_command_line():  # errors name date scale's flags
        return run(RunConfig.read(args.config))


if __name__ == "__main__":
    sys.exit(main())
