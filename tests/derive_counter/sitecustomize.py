"""Counts derive_plan calls in every process of a command: with this folder first on PYTHONPATH,
each interpreter (the command's and each torchrun worker's) appends a line per call to the file
DATE_TEST_DERIVES names. Used by tests/test_fit.py."""

import os

if os.environ.get("DATE_TEST_DERIVES"):
    import date_engine.plan as _plan

    _derive = _plan.derive_plan

    def _counted(*args, **kwargs):
        with open(os.environ["DATE_TEST_DERIVES"], "a") as log:
            log.write(f"{os.getpid()}\n")
        return _derive(*args, **kwargs)

    _plan.derive_plan = _counted
