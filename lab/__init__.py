"""The accuracy studies behind docs/results.md, apart from the benchmarks a user runs: the held-out
check of a fitted rule (``holdout``), storing a sweep's compact table (``store_sweep``), the tables
and figures generated from the stored data (``results_data``, ``results_tables``,
``results_figures``), and the measurements the rules were chosen by (``short_branches``,
``layer_ratio_digits``, ``vit_layer_ratio``). They import date_engine; date_engine never imports
them (tests/test_docs.py)."""
