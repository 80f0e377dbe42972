"""Presentation: what date_engine shows a person. Nothing here decides a number.

- :mod:`.plan`: a plan as rich tables and a terminal chart (``date plan``, ``date scale``);
- :mod:`.chart`: line charts in braille characters;
- :mod:`.plots`: PNG figures with matplotlib (optional; imported only when a figure is drawn);
- :mod:`.progress`: the training progress bar and the run's summary table;
- :mod:`.sweep`: the live table of a sweep's cells and its report.md.
"""
