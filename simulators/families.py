"""Named families of (target p, draft q) pairs, with a registry.

A family samples ``n`` nodes: ``family.sample(rng, n=..., V=..., temperature=...)
-> (p, q)``, both (n, V) float64 rows summing to 1, the same temperature
applied to both logits.  Synthetic families follow the set-ups used to
evaluate multi-draft verifiers (SpecTr, arXiv 2310.15141; Khisti et al. 2025,
arXiv 2410.18234).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.special import softmax

from resispec._validation import as_laws


@dataclass(frozen=True)
class PairFamily:
    """A named generator of target/draft pairs.

    Attributes
    ----------
    name : str
    description : str
    sampler : callable ``(rng, n, V, temperature, **params) -> (p, q)``
    params : dict
        Default parameters (e.g. the draft's logit noise) -- the dial for
        the divergence between ``p`` and ``q``.
    fixed_vocab : int or None
        Vocabulary size of families that cannot change it (real models).
    """

    name: str
    description: str
    sampler: Callable
    params: dict = field(default_factory=dict)
    fixed_vocab: int | None = None

    def sample(self, rng: np.random.Generator, *, n: int = 1, V: int | None = None,
               temperature: float = 1.0, **params) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``n`` (p, q) pairs.

        Returns
        -------
        p, q : ndarray, shape (n, V), float64

        Raises
        ------
        ValueError
            ``n < 1``, ``V < 2``, non-positive temperature, unknown parameter.
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy.random.Generator")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.integer, np.floating)):
            raise TypeError(f"temperature must be a real number > 0, got {temperature!r}")
        if not np.isfinite(temperature) or temperature <= 0:
            raise ValueError(f"temperature must be finite and > 0, got {temperature}")
        if self.fixed_vocab is None:
            if V is None:
                V = 1000
            if isinstance(V, bool) or not isinstance(V, (int, np.integer)) or V < 2:
                raise ValueError(f"V must be an integer >= 2, got {V!r}")
        elif V not in (None, self.fixed_vocab):
            raise ValueError(f"family {self.name!r} has a fixed vocabulary of {self.fixed_vocab}; got V={V}")
        unknown = set(params) - set(self.params)
        if unknown:
            raise ValueError(f"family {self.name!r} has no parameter(s) {sorted(unknown)}; known: {sorted(self.params)}")
        for key, val in params.items():
            default = self.params[key]
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                if isinstance(val, bool) or not isinstance(val, (int, float, np.integer, np.floating)):
                    raise TypeError(f"family {self.name!r}: parameter {key} must be a real number, got {val!r}")
                if not np.isfinite(val):
                    raise ValueError(f"family {self.name!r}: parameter {key} must be finite, got {val}")
        kw = {**self.params, **params}
        p, q = self.sampler(rng, int(n), V if self.fixed_vocab is None else self.fixed_vocab, float(temperature), **kw)
        try:  # never hand out NaN or unnormalised laws, whatever the parameters
            as_laws(p, q)
        except ValueError as exc:
            raise ValueError(f"family {self.name!r} with parameters {params or 'default'} and temperature "
                             f"{temperature} produced an invalid law ({exc}); choose other parameter values") from exc
        return p, q


FAMILIES: dict[str, PairFamily] = {}


def register_family(family: PairFamily) -> PairFamily:
    """Add a family to :data:`FAMILIES` (replacing one of the same name)."""
    FAMILIES[family.name] = family
    return family


def get_family(name: str) -> PairFamily:
    """Look up a family by name; ValueError lists the known names."""
    if name not in FAMILIES:
        _load_lazy()
    if name not in FAMILIES:
        raise ValueError(f"unknown family {name!r}; choose one of {sorted(FAMILIES)}")
    return FAMILIES[name]


def _load_lazy():
    """Import modules that register families on import (real-data ones)."""
    import importlib

    for mod in ("simulators.ngram", "simulators.captured"):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass


def _in_range(family, name, value, lo, hi):
    if not lo <= value <= hi:
        raise ValueError(f"family {family!r}: {name} must lie in [{lo:g}, {hi:g}], got {value}")


def _pair(zp, zq, T):
    return softmax(zp / T, axis=1), softmax(zq / T, axis=1)


def _softmax_noise(rng, n, V, T, scale=3.0, noise=1.0):
    z = scale * rng.standard_normal((n, V))
    return _pair(z, z + noise * rng.standard_normal((n, V)), T)


def _zipf(rng, n, V, T, exponent=1.1, noise=0.5):
    ranks = np.arange(1, V + 1)
    base = -exponent * np.log(ranks)
    zp = np.empty((n, V))
    zq = np.empty((n, V))
    for b in range(n):
        perm = rng.permutation(V)
        zp[b, perm] = base
        zq[b, perm] = base + noise * rng.standard_normal(V)
    return _pair(zp, zq, T)


def _shifted(rng, n, V, T, scale=3.0, shift=1.5, fraction=0.1):
    _in_range("shifted", "fraction", fraction, 0.0, 1.0)
    z = scale * rng.standard_normal((n, V))
    bump = (rng.random((n, V)) < fraction) * shift
    return _pair(z, z + bump, T)


register_family(PairFamily("softmax_noise", "p = softmax(z/T), q = softmax((z + noise*eps)/T), z ~ scale*N(0,1)",
                           _softmax_noise, {"scale": 3.0, "noise": 1.0}))
register_family(PairFamily("zipf", "Zipf-ranked logits -exponent*log(rank) in random order; draft adds logit noise",
                           _zipf, {"exponent": 1.1, "noise": 0.5}))
register_family(PairFamily("shifted", "draft over-weights a random fraction of tokens by +shift logits",
                           _shifted, {"scale": 3.0, "shift": 1.5, "fraction": 0.1}))


# --------------------------------------------------------------------------
# More synthetic families (additive): Dirichlet pairs and temperature mismatch.
# --------------------------------------------------------------------------

def _dirichlet(rng, n, V, T, concentration=0.1, mix=0.3):
    """p ~ Dir(concentration); q = (1 - mix) p + mix * Dir(concentration), both tempered."""
    if concentration <= 0:
        raise ValueError(f"family 'dirichlet': concentration must be > 0, got {concentration}")
    _in_range("dirichlet", "mix", mix, 0.0, 1.0)
    a = np.full(V, float(concentration))
    base = rng.dirichlet(a, size=n)
    other = rng.dirichlet(a, size=n)
    p = base
    q = (1.0 - mix) * base + mix * other
    tiny = 1e-300
    return _pair(np.log(np.maximum(p, tiny)), np.log(np.maximum(q, tiny)), T)


def _temp_mismatch(rng, n, V, T, scale=3.0, ratio=0.7):
    """Same logits, the draft at temperature ``ratio * T`` (over-confident when ratio < 1)."""
    if ratio <= 0:
        raise ValueError(f"family 'temp_mismatch': ratio must be > 0, got {ratio}")
    z = scale * rng.standard_normal((n, V))
    return softmax(z / T, axis=1), softmax(z / (ratio * T), axis=1)


register_family(PairFamily("dirichlet", "p ~ Dirichlet(concentration); q mixes p with an independent Dirichlet draw "
                           "(weight mix); both tempered by T", _dirichlet, {"concentration": 0.1, "mix": 0.3}))
register_family(PairFamily("temp_mismatch", "same logits z ~ scale*N(0,1); p = softmax(z/T), q = softmax(z/(ratio*T))",
                           _temp_mismatch, {"scale": 3.0, "ratio": 0.7}))
