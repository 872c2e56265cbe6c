"""Draft/target pair simulators: synthetic families, real n-gram pairs, trees, drift.

Glossary (as in :mod:`resispec`): target ``p``, draft ``q``, candidate,
accepted mass ``m_i``, residual ``p_i``, proxy ``rho``, reserve scale
``gamma``, acceptance rate, per-token acceptance mass ``M(x)`` (probability
that a candidate equal to ``x`` is accepted), block efficiency (expected
tokens emitted per target call on a token tree), TV.

Modules (one idea each):

- :mod:`simulators.families`: named (p, q) pair families (registry):
  ``get_family(name).sample(rng, n=, V=, temperature=, **params)``.
- :mod:`simulators.truncation`: top-k / top-p applied identically to p and q.
- :mod:`simulators.divergence`: TV / KL of each family (dial the divergence).
- :mod:`simulators.autoregressive`: next-token laws at any context
  (``MarkovPair``, ``StaticPair``, ``ngram_pair``, ``as_autoregressive``).
- :mod:`simulators.acceptance`: per-token acceptance mass (closed forms,
  enumeration, Monte Carlo).
- :mod:`simulators.trees`: exact block efficiency (``block_efficiency``,
  ``block_efficiency_iid``), Monte Carlo tree decoding (``decode_tree``),
  exact two-token law and ``certify_tree``.
- :mod:`simulators.drift`: residual drift per chain step (``residual_drift``,
  ``drift_sweep``); its plots and tables are :mod:`resispec.bench.drift`.
- :mod:`simulators.ngram`: the real Kneser-Ney n-gram pair (family ``ngram``).

The benchmarks built on these simulators (block efficiency on trees,
acceptance tables, ...) live in the benchmark wing :mod:`resispec.bench`,
which imports this package; nothing here imports the wing.
"""

from .families import FAMILIES, PairFamily, get_family, register_family
from .truncation import truncate, truncated_family
from .divergence import Divergence, divergence, family_divergence, divergence_table

__all__ = ["FAMILIES", "PairFamily", "get_family", "register_family", "truncate", "truncated_family",
           "Divergence", "divergence", "family_divergence", "divergence_table"]
