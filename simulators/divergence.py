"""Measured divergence of each pair family, so users can dial it.

``TV(p, q) = 1/2 sum |p - q|`` (so ``1 - TV`` is the single-draft
acceptance of Leviathan et al. 2023, arXiv 2211.17192) and
``KL(p || q) = sum p log(p / q)`` in nats (``inf`` when p puts mass where q
has none, e.g. after truncation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .families import FAMILIES, get_family


@dataclass(frozen=True)
class Divergence:
    """Per-pair divergences.

    Attributes
    ----------
    tv : ndarray, shape (B,), float64 in [0, 1]
    kl : ndarray, shape (B,), float64 >= 0 (nats; may be inf)
        ``KL(p || q)``.
    """

    tv: np.ndarray
    kl: np.ndarray


def divergence(p, q) -> Divergence:
    """TV and KL(p || q) of each row.

    Parameters
    ----------
    p, q : array_like, shape (V,) or (B, V), float64, rows summing to 1

    Returns
    -------
    Divergence with (B,) arrays.

    Raises
    ------
    ValueError, TypeError
        Invalid laws (see :func:`resispec._validation.as_laws`).
    """
    from resispec._validation import as_laws

    p2, q2, _ = as_laws(p, q)
    tv = 0.5 * np.abs(p2 - q2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p2 > 0, p2 * (np.log(np.where(p2 > 0, p2, 1.0)) - np.log(q2)), 0.0)
    kl = np.where(np.any((p2 > 0) & (q2 == 0), axis=1), np.inf, terms.sum(axis=1))
    return Divergence(tv=tv, kl=np.maximum(kl, 0.0))


@dataclass(frozen=True)
class FamilyDivergence:
    """Mean divergence of a family at one setting.

    Attributes
    ----------
    family : str
    temperature : float
    V : int
    tv, tv_sd : float   mean and standard deviation of TV over the sampled pairs
    kl : float          mean KL(p || q) in nats (inf if any pair is inf)
    params : dict       the parameters used
    """

    family: str
    temperature: float
    V: int
    tv: float
    tv_sd: float
    kl: float
    params: dict


def family_divergence(name: str, rng: np.random.Generator, *, n: int = 64, V: int | None = 1000,
                      temperature: float = 1.0, **params) -> FamilyDivergence:
    """Sample ``n`` pairs of family ``name`` and measure their mean TV and KL.

    Raises ValueError for an unknown family or bad sampling parameters.
    """
    fam = get_family(name)
    p, q = fam.sample(rng, n=n, V=V if fam.fixed_vocab is None else None, temperature=temperature, **params)
    d = divergence(p, q)
    return FamilyDivergence(name, float(temperature), int(p.shape[1]), float(d.tv.mean()), float(d.tv.std()),
                            float(d.kl.mean()), {**fam.params, **params})


def divergence_table(families=None, temperatures=(0.7, 1.0, 1.5), *, V: int = 1000, n: int = 64,
                     seed: int = 0) -> tuple[list[FamilyDivergence], str]:
    """Mean TV / KL for every family and temperature, and a markdown table.

    Returns
    -------
    rows : list of FamilyDivergence
    markdown : str
    """
    if families is None:
        from .families import _load_lazy

        _load_lazy()                          # real-data families (ngram) register on import
    names = sorted(FAMILIES) if families is None else list(families)
    rows = []
    for i, name in enumerate(names):
        for j, T in enumerate(temperatures):
            rng = np.random.default_rng([seed, i, j])
            rows.append(family_divergence(name, rng, n=n, V=V, temperature=T))
    lines = ["| family | T | V | TV (mean ± sd) | KL(p‖q) nats | parameters |", "|---|---|---|---|---|---|"]
    for r in rows:
        params = ", ".join(f"{k}={v}" for k, v in r.params.items())
        lines.append(f"| `{r.family}` | {r.temperature:g} | {r.V} | {r.tv:.3f} ± {r.tv_sd:.3f} | {r.kl:.3f} | {params} |")
    return rows, "\n".join(lines)
