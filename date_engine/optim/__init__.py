"""Optimizers: DATE over any torch optimizer, and LARS and LAMB for comparisons. Imports torch."""

from date_engine.optim.date import DATE
from date_engine.optim.lamb import LAMB
from date_engine.optim.lars import LARS
from date_engine.optim.ratios import RatioRule, layer_ratios, trust_ratio

__all__ = ["DATE", "LAMB", "LARS", "RatioRule", "layer_ratios", "trust_ratio"]
