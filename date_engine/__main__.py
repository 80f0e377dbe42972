"""``python -m date_engine`` runs the ``date`` command line."""

from date_engine.cli import main_engine

main_engine()
