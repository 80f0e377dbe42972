"""The ``date`` command shares its name with the system's ``date``: what is not one of ours goes to
that one, unchanged.

Inside a virtualenv with date_engine installed, ``date`` on PATH is this tool — and job scripts,
Slurm prologues and shell prompts that stamp times with ``date``, ``date +%s`` or ``date -u`` would
break. So ``date`` with no arguments, with an option or format that is not ours (``+%s``, ``-u``,
``--iso-8601``, ``-d ...``) or with digits (setting the clock) runs the first other ``date`` on PATH
(``/bin/date`` as a last resort) in this process's place: same output, same exit code. The
``date-engine`` command and ``python -m date_engine`` never hand over.

``date --help`` is date_engine's (a person asking what this ``date`` is); ``date --version`` is
the system's, since scripts run it to tell GNU's date from BSD's (``date-engine --version`` gives
date_engine's). This module is the ``date`` console script's entry point and imports only the
standard library's ``os`` and ``sys``, so that handing over costs one Python start-up and nothing
more (benchmarks/date_handover.py).
"""

from __future__ import annotations

import os
import sys

__all__ = ["hand_over", "is_for_system_date", "main", "system_date"]

OURS = ("plan", "scale", "probe", "sweep", "recipes", "data", "--help")


def is_for_system_date(args: list[str]) -> bool:
    """Whether ``date ARGS`` is a call of the system's date: no arguments, an option or ``+FORMAT``
    date_engine does not have, or digits; a word is one of our commands (or a typo of one)."""
    if not args:
        return True
    first = args[0]
    if first in OURS:
        return False
    return first.startswith(("+", "-")) or first[:1].isdigit()


def main() -> None:
    """The ``date`` console script: the system's date for what is not date_engine's (decided
    before anything else is imported), else date_engine's command line."""
    if is_for_system_date(sys.argv[1:]):
        hand_over(sys.argv[1:])
    from date_engine.cli import main as engine

    engine()


def system_date(own: str) -> str | None:
    """The first ``date`` on PATH that is not this program (``own``), else /bin/date or
    /usr/bin/date; None if there is none."""
    own_path = os.path.realpath(own)
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder, "date") if folder else None
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK) \
                and os.path.realpath(candidate) != own_path and not _is_ours(candidate):
            return candidate
    for fallback in ("/bin/date", "/usr/bin/date"):
        if os.access(fallback, os.X_OK) and not _is_ours(fallback):
            return fallback
    return None


def hand_over(args: list[str]) -> None:
    """Replace this process with the system's date (never returns), or say there is none."""
    found = system_date(sys.argv[0])
    if found is None:
        sys.stderr.write("date: this is date_engine's `date`, and no system date was found on "
                         "PATH; run `date-engine --help` for date_engine.\n")
        sys.exit(127)
    os.execv(found, [found, *args])


def _is_ours(path: str) -> bool:
    """A console script of date_engine (any virtualenv's), not a system binary."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return b"date_engine" in head
