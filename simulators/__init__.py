"""Draft/target pair simulators: synthetic families, real n-gram pairs, trees, drift.

- :mod:`simulators.families`: named (p, q) pair families (registry).
- :mod:`simulators.truncation`: top-k / top-p applied identically to p and q.
- :mod:`simulators.divergence`: TV / KL of each family (dial the divergence).
- :mod:`simulators.autoregressive`: next-token laws at any context (Markov, n-gram).
- :mod:`simulators.trees`: exact block efficiency and Monte Carlo tree decoding.
- :mod:`simulators.drift`: residual drift per chain step.
"""

from .families import FAMILIES, PairFamily, get_family, register_family
from .truncation import truncate, truncated_family
from .divergence import Divergence, divergence, family_divergence, divergence_table

__all__ = ["FAMILIES", "PairFamily", "get_family", "register_family", "truncate", "truncated_family",
           "Divergence", "divergence", "family_divergence", "divergence_table"]
