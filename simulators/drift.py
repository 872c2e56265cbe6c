"""Residual drift: how the residual moves away from the draft along a chain.

For candidate step ``i`` (``docs/RESISPEC.md`` section 4) of a sequential
mass verifier (:class:`resispec.verifiers.base.MassVerifier`):

- ``beta_i = sum(m_i)``: viability of candidate ``i`` (its acceptance
  probability given the chain reached it);
- ``TV(p_i, q_i)`` between the residual and the law of candidate ``i``;
- ``top_mass_i = p_i(S_i)``: residual mass inside the draft's top-mass set
  ``S_i`` (smallest set of most likely tokens with ``q_i(S_i) >= level``);
- cumulative acceptance ``P(some candidate <= i accepted)``.

Step statistics are averaged over pairs (and, for candidate-dependent
verifiers such as ``rrs_wor``, over sampled candidate tuples) weighted by the
probability of reaching the step.  Greedy recursive rejection (SpecInfer,
arXiv 2305.09781; RSD, arXiv 2402.14160) drains ``p_i`` where the draft is
confident; ResiSpec keeps a reserve there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from resispec._validation import as_laws, check_k, check_rng
from resispec.analysis import optimal_acceptance
from resispec.proxies import PROXIES
from resispec.sampling import draw_candidates
from resispec.verifiers import get_verifier
from resispec.verifiers.base import MassVerifier


@dataclass(frozen=True)
class DriftResult:
    """Per-step drift statistics of one verifier.

    Attributes
    ----------
    label : str
    options : dict
    beta, tv, top_mass, cumulative_acceptance, reach : ndarray, shape (k,), float64
        Viability ``beta_i``, ``TV(p_i, q_i)``, residual mass in the draft's
        top-mass set, ``P(accepted by step i)``, ``P(reach step i)``.  The
        first three are averaged over pairs weighted by the reach; a step
        that no pair reaches gets the unweighted mean (never NaN).
    top_level : float
        Draft mass of the top-mass set.
    method : str
        ``exact`` (candidate-independent iid) or ``monte_carlo (n=...)``.
    """

    label: str
    options: dict
    beta: np.ndarray
    tv: np.ndarray
    top_mass: np.ndarray
    cumulative_acceptance: np.ndarray
    reach: np.ndarray
    top_level: float
    method: str

    @property
    def acceptance(self) -> float:
        """Acceptance rate with all ``k`` candidates."""
        return float(self.cumulative_acceptance[-1])

    def to_dict(self) -> dict:
        d = asdict(self)
        for key, val in d.items():
            if isinstance(val, np.ndarray):
                d[key] = [float(x) for x in val]
        return d


def top_mass_set_mass(p_i: np.ndarray, q_i: np.ndarray, level: float) -> np.ndarray:
    """``p_i(S)`` with ``S`` the smallest set of top tokens of ``q_i`` holding ``>= level`` of it.

    ``p_i``, ``q_i``: (..., V) float64.  Returns (...,) float64.
    """
    order = np.argsort(-q_i, axis=-1, kind="stable")
    qs = np.take_along_axis(q_i, order, axis=-1)
    ps = np.take_along_axis(p_i, order, axis=-1)
    inside = (np.cumsum(qs, axis=-1) - qs) < level
    return np.where(inside, ps, 0.0).sum(axis=-1)


def residual_drift(verifier, p, q, k: int, *, top_level: float = 0.9, rng: np.random.Generator | None = None,
                   n_samples: int = 64, label: str | None = None) -> DriftResult:
    """Residual drift of a sequential mass verifier over ``k`` candidate steps.

    Parameters
    ----------
    verifier : MassVerifier
        E.g. ``get_verifier("resispec", proxy="tempered", gamma=0.5)``.
    p, q : array_like, shape (V,) or (B, V), float64
    k : int >= 1
    top_level : float in (0, 1]
        Draft mass of the top-mass set (default 0.9).
    rng : numpy.random.Generator
        Needed for candidate-dependent verifiers (``rrs_wor``): their steps
        are averaged over ``n_samples`` sampled candidate tuples per pair.
    n_samples : int
    label : str, optional

    Returns
    -------
    DriftResult

    Raises
    ------
    TypeError
        ``verifier`` is not a :class:`MassVerifier` (its per-step masses are
        undefined, e.g. ``kseq``, ``target_only``), or rng missing when needed.
    ValueError
        Bad laws, ``k``, ``top_level``.
    """
    if not isinstance(verifier, MassVerifier):
        raise TypeError(f"residual_drift needs a MassVerifier (per-step accepted masses m_i); "
                        f"{type(verifier).__name__} has none")
    if not np.isfinite(top_level) or not 0 < top_level <= 1:
        raise ValueError(f"top_level must lie in (0, 1], got {top_level}")
    p2, q2, _ = as_laws(p, q)
    k = check_k(k)
    B, V = p2.shape
    exact = verifier.drafting == "iid" and verifier.candidate_independent
    if exact:
        cand = np.repeat(np.argmax(q2, axis=1)[:, None], k, axis=1)   # any ids with q > 0: m_i ignores them
        m, ps, qs = verifier.masses(p2, q2, cand)
        beta = m.sum(axis=2)                                           # (B, k)
        reach = np.cumprod(np.c_[np.ones(B), 1.0 - beta[:, :-1]], axis=1)
        method = "exact"
    else:
        rng = check_rng(rng)
        P = np.repeat(p2, n_samples, axis=0)
        Q = np.repeat(q2, n_samples, axis=0)
        cand = draw_candidates(Q, k, verifier.drafting, rng)
        m, ps, qs = verifier.masses(P, Q, cand)
        beta = m.sum(axis=2)
        rows = np.arange(P.shape[0])
        mx = m[rows[:, None], np.arange(k)[None, :], cand]
        qx = qs[rows[:, None], np.arange(k)[None, :], cand]
        a = np.clip(mx / qx, 0.0, 1.0)
        reach = np.cumprod(np.c_[np.ones(P.shape[0]), 1.0 - a[:, :-1]], axis=1)
        method = f"monte_carlo (n={n_samples} candidate tuples per pair)"
    ps = ps[:, :k]
    tv = 0.5 * np.abs(ps - qs).sum(axis=2)
    top = top_mass_set_mass(ps, qs, top_level)
    w = reach.sum(axis=0)
    # A step no pair can reach (e.g. p == q: the first candidate is always
    # accepted) gets the plain mean over pairs (the residual is then unchanged),
    # never NaN: the JSON/markdown reports and plots stay finite.
    avg = lambda x: np.where(w > 0, (reach * x).sum(axis=0) / np.where(w > 0, w, 1.0), x.mean(axis=0))  # noqa: E731
    cum = 1.0 - (reach * (1.0 - (beta if exact else a))).mean(axis=0)
    name = label or getattr(verifier, "name", type(verifier).__name__)
    return DriftResult(name, dict(verifier.options()), avg(beta), avg(tv), avg(top), cum, reach.mean(axis=0),
                       float(top_level), method)


@dataclass(frozen=True)
class DriftSweep:
    """Drift of every verifier / proxy / gamma on one set of pairs.

    Attributes
    ----------
    results : list of DriftResult
    alpha_star : float
        Mean optimal acceptance ``alpha*`` (iid drafts) of the pairs.
    settings : dict
    """

    results: list
    alpha_star: float
    settings: dict = field(default_factory=dict)


def drift_sweep(p, q, k: int, *, gammas=(0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0), proxies=None,
                baselines=("sps", "rrs", "rrs_wor"), top_level: float = 0.9,
                rng: np.random.Generator | None = None, n_samples: int = 32) -> DriftSweep:
    """Residual drift of the baselines and of ResiSpec for every proxy and reserve scale gamma.

    Parameters
    ----------
    p, q : array_like, shape (B, V), float64
    k : int >= 1
    gammas : sequence of float >= 0
    proxies : sequence of str, optional
        Built-in proxy names (default: all of :data:`resispec.proxies.PROXIES`).
    baselines : sequence of str
        Registered MassVerifier names.
    rng : numpy.random.Generator
        For candidate-dependent baselines (``rrs_wor``).

    Returns
    -------
    DriftSweep

    Raises
    ------
    ValueError
        Unknown proxy or verifier, negative gamma, bad laws.
    """
    p2, q2, _ = as_laws(p, q)
    proxies = sorted(PROXIES) if proxies is None else list(proxies)
    for pr in proxies:
        if pr not in PROXIES:
            raise ValueError(f"unknown proxy {pr!r}; choose from {sorted(PROXIES)}")
    out = []
    for name in baselines:
        out.append(residual_drift(get_verifier(name), p2, q2, k, top_level=top_level, rng=rng,
                                  n_samples=n_samples, label=name))
    for pr in proxies:
        for g in gammas:
            v = get_verifier("resispec", proxy=pr, gamma=float(g))
            out.append(residual_drift(v, p2, q2, k, top_level=top_level, label=f"resispec[{pr}, gamma={g:g}]"))
    alpha = float(np.mean(optimal_acceptance(p2, q2, k)))
    return DriftSweep(out, alpha, {"k": k, "B": p2.shape[0], "V": p2.shape[1], "top_level": top_level,
                                   "gammas": [float(g) for g in gammas], "proxies": proxies})
