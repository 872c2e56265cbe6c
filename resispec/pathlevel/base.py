"""The path-level verifier contract: decide a whole drafted chain at once.

Glossary (``docs/pathlevel.md``):

- drafted path ``d = (d_1, ..., d_L)``: the chain of draft tokens, ``d_{i+1} ~ q_i``;
- node ``i`` (``i = 0..L``): the context after the first ``i`` drafts; ``p_i`` is the
  target law there (row ``i`` of ``p``, shape (L + 1, V)), ``q_i`` the draft law
  (row ``i`` of ``q``, shape (L, V); none at the last node);
- accepted length ``tau`` in ``0..L``: the rule keeps ``d_1..d_tau`` and emits one more
  token ``y`` (a correction drawn from a residual, or the bonus token from ``p_L`` when
  ``tau = L``), so a step emits ``tau + 1`` tokens.

A rule is a :class:`PathPlan`: the law of ``tau`` given the drafts and, for each ``tau``,
the law of ``y``.  Sampling (:meth:`PathVerifier.verify`) and exact analysis
(:meth:`PathVerifier.block_law`, :mod:`resispec.pathlevel.analysis`) both read the plan,
so the sampled and the exact paths cannot disagree.

Exactness (the property every rule here must have; proved for ``block`` in
``docs/pathlevel.md``): the emitted ``tau + 1`` tokens, continued by the target up to
``L + 1`` tokens, have the target's joint law of ``L + 1`` tokens.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from .._validation import as_law, check_rng
from ..sampling import _inverse_cdf

#: Below this mass a residual is treated as empty and the node's target row is used instead
#: (its weight in the output law is below ``_RESIDUAL_EPS``: the rule stops there with probability ~0).
from .._reserve_tol import RESIDUAL_EPS as _RESIDUAL_EPS  # noqa: E402  (the one value)


@dataclass(frozen=True)
class PathPlan:
    """What a path-level rule decides, given the drafts, before any coin.

    Attributes
    ----------
    stop : ndarray, shape (L + 1,), float64
        ``stop[i] = P(tau = i | drafts)``, sums to 1.
    laws : ndarray, shape (L + 1, V), float64
        Row ``i``: law of the emitted token ``y`` given ``tau = i`` (rows sum to 1).
    """

    stop: np.ndarray
    laws: np.ndarray


@dataclass(frozen=True)
class PathResult:
    """Outcome of one path-level verification.

    Attributes
    ----------
    accepted : int
        ``tau``, the number of accepted drafts (``0..L``).
    token : int
        The extra token emitted after them (correction, or bonus when ``accepted == L``).
    """

    accepted: int
    token: int

    def emitted(self, drafts) -> np.ndarray:
        """The ``accepted + 1`` emitted tokens, (accepted + 1,) int64: ``drafts[:accepted]`` then ``token``."""
        d = np.asarray(drafts, dtype=np.int64)
        return np.concatenate([d[: self.accepted], np.array([self.token], dtype=np.int64)])


def check_path(p, q, drafts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate one drafted chain; return ``(p (L+1, V), q (L, V), drafts (L,))`` as float64/int64.

    Raises
    ------
    TypeError
        Non-numeric laws, non-integer drafts.
    ValueError
        Laws not 2-D, rows not laws (negative, NaN, not summing to 1), ``p`` not one row
        longer than ``q``, vocabularies that differ, drafts that are not one token per
        position (a tree, a batch), ids outside ``[0, V)`` or with ``q_i(d_{i+1}) = 0``.
    """
    for name, x in (("p", p), ("q", q)):
        if isinstance(x, (str, bytes)) or x is None:
            raise TypeError(f"{name} must be an array of probabilities, got {type(x).__name__}")
        nd = np.ndim(x)
        if nd != 2:
            what = "a batch or a tree of paths" if nd > 2 else "one node"
            raise ValueError(f"{name} has shape {np.shape(x)} ({what}); a path-level verifier takes one chain: "
                             f"p of shape (L + 1, V) (target at each node of the path, the last one for the bonus) "
                             f"and q of shape (L, V); loop over paths")
    p2 = np.array(as_law(p, name="p"))
    q2 = np.array(as_law(q, name="q"))
    if p2.shape[1] != q2.shape[1]:
        raise ValueError(f"p has V = {p2.shape[1]} tokens but q has V = {q2.shape[1]}; both laws must be over the "
                         "same vocabulary")
    L = q2.shape[0]
    if p2.shape[0] != L + 1:
        raise ValueError(f"p has {p2.shape[0]} rows but q has {L}: p needs L + 1 = {L + 1} rows (one per node of the "
                         "drafted path plus the node after the last draft, for the bonus token)")
    d = np.asarray(drafts)
    if d.size and (d.dtype == bool or not np.issubdtype(d.dtype, np.integer)):
        raise TypeError(f"drafts must be integer token ids, got dtype {d.dtype}; pass an int64 array")
    if d.ndim != 1:
        raise ValueError(f"drafts has shape {d.shape}: a path-level verifier decides a chain with one draft per "
                         "position, shape (L,); a tree (several candidates per node) is not a chain -- use a "
                         "node-level verifier (resispec.get_verifier) for trees")
    if d.size != L:
        raise ValueError(f"drafts has {d.size} tokens but q has {L} rows; pass one draft per row of q")
    d = d.astype(np.int64)
    V = p2.shape[1]
    if np.any((d < 0) | (d >= V)):
        i = int(np.flatnonzero((d < 0) | (d >= V))[0])
        raise ValueError(f"drafts[{i}] = {int(d[i])} lies outside the vocabulary [0, {V})")
    zero = q2[np.arange(L), d] <= 0
    if np.any(zero):
        i = int(np.flatnonzero(zero)[0])
        raise ValueError(f"drafts[{i}] = {int(d[i])} has draft probability q[{i}, {int(d[i])}] = 0, so it cannot "
                         "have been drawn from q; pass the law each draft was sampled from")
    return p2, q2, d


class PathVerifier(ABC):
    """A path-level verifier for one drafted chain (numpy, float64).

    Subclasses implement :meth:`_plan`; :meth:`verify` and :meth:`block_law` follow from it.

    Attributes
    ----------
    name : str
        Registry name (:func:`resispec.pathlevel.get_path_verifier`).
    """

    name: str = "path"
    #: One candidate per node: iid and without-replacement drafting coincide, so either tree law serves
    #: (the engine reads this as it reads ``Verifier.drafting``).
    drafting: str = "any"

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def plan(self, p, q, drafts) -> PathPlan:
        """The rule's decision law for one drafted chain.

        Parameters
        ----------
        p : array_like, shape (L + 1, V), float64
            Target law at each node of the path: row ``i`` is ``p(. | context, d_1..d_i)``.
        q : array_like, shape (L, V), float64
            Draft law each draft was drawn from: row ``i`` is ``q(. | context, d_1..d_i)``.
        drafts : array_like, shape (L,), int64
            The drafted tokens, ``drafts[i] ~ q[i]``.

        Returns
        -------
        PathPlan

        Raises
        ------
        TypeError, ValueError
            See :func:`check_path`.
        """
        p2, q2, d = check_path(p, q, drafts)
        return PathPlan(*self._plan(p2, q2, d))

    def verify(self, p, q, drafts, rng: np.random.Generator | None = None, *, uniforms=None) -> PathResult:
        """Verify one drafted chain: how many drafts to keep and the token that follows them.

        Parameters
        ----------
        p, q, drafts
            As in :meth:`plan`.
        rng : numpy.random.Generator, optional
            Source of the two uniforms; required unless ``uniforms`` is given.
        uniforms : array_like, shape (2,), float64 in [0, 1), optional
            ``uniforms[0]`` draws ``tau`` from ``plan.stop`` and ``uniforms[1]`` the token from
            ``plan.laws[tau]``, both by inverse CDF in index order.

        Returns
        -------
        PathResult
            ``accepted`` (``tau``, int) and ``token`` (int).

        Raises
        ------
        TypeError, ValueError
            Bad laws or drafts (:func:`check_path`), bad rng or uniforms.
        """
        plan = self.plan(p, q, drafts)
        if uniforms is None:
            if rng is None:
                raise ValueError("pass rng (a numpy.random.Generator) or explicit uniforms of shape (2,)")
            u = check_rng(rng).random(2)
        else:
            u = np.asarray(uniforms, dtype=np.float64)
            if u.shape != (2,) or not np.all((u >= 0) & (u < 1)):
                raise ValueError(f"uniforms must be 2 floats in [0, 1) (one for tau, one for the token), got {u!r}")
        tau = int(_inverse_cdf(plan.stop[None, :], u[:1])[0])
        token = int(_inverse_cdf(plan.laws[tau][None, :], u[1:])[0])
        return PathResult(tau, token)

    def block_law(self, p, q, drafts) -> np.ndarray:
        """Exact law of ``(tau, token)`` given the drafts, (L + 1, V) float64: ``stop[i] * laws[i, y]``."""
        plan = self.plan(p, q, drafts)
        return plan.stop[:, None] * plan.laws          # P(tau = i, y | d) = P(tau = i | d) P(y | tau = i, d)

    @abstractmethod
    def _plan(self, p: np.ndarray, q: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(stop (L+1,), laws (L+1, V))`` for validated ``p (L+1, V)``, ``q (L, V)``, ``d (L,)``."""


def normalise_rows(excess: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Rows of ``excess`` (n, V) divided by their sums; ``fallback`` rows where the sum is below ``_RESIDUAL_EPS``."""
    s = excess.sum(axis=1, keepdims=True)
    ok = s > _RESIDUAL_EPS
    return np.where(ok, excess / np.where(ok, s, 1.0), fallback)
