"""Autoregressive draft/target pairs: next-token laws at any context.

Interface (:class:`AutoregressivePair`)::

    pair.vocab_size -> int
    pair.laws(contexts) -> (p, q)      # (B, V) float64 each, one row per context
    pair.state(context) -> hashable    # contexts with equal state have equal laws

A context is a sequence of token ids in ``[0, V)`` (possibly empty).  The
tree simulators (:mod:`simulators.trees`) use :meth:`state` to merge
equivalent branches, so exact recursion over a Markov pair costs at most
``V`` nodes per depth.

Built in: :class:`StaticPair` (the same (p, q) at every context: i.i.d.
per-node pairs), :class:`MarkovPair` (first-order Markov target and draft
with a controllable divergence), and :func:`as_autoregressive`, which
adapts any object with ``laws(contexts)`` -- e.g. the real n-gram pair
``simulators.ngram.NGramPair``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Hashable, Sequence

import numpy as np
from scipy.special import softmax

from resispec._validation import as_laws


def check_contexts(contexts, V: int) -> list[tuple[int, ...]]:
    """Validate contexts: a sequence of token-id sequences (or a (B, L) int array).

    Returns a list of tuples of int.

    Raises
    ------
    TypeError
        A context that is not a sequence of integers.
    ValueError
        No contexts, or a token id outside ``[0, V)``.
    """
    if isinstance(contexts, np.ndarray):
        if contexts.ndim != 2:
            raise ValueError(f"contexts array must have shape (B, L), got {contexts.shape}")
        if contexts.size and contexts.dtype != bool and np.issubdtype(contexts.dtype, np.integer) \
                and contexts.min() >= 0 and contexts.max() < V:   # valid as a whole: no per-row checks
            return list(map(tuple, contexts.astype(np.int64, copy=False).tolist()))
        contexts = contexts.tolist()
    elif isinstance(contexts, list) and contexts and isinstance(contexts[0], (tuple, list)) and len(contexts[0]):
        try:                                  # equal-length integer contexts: checked as one (B, L) array
            arr = np.array(contexts)
        except (ValueError, TypeError):       # ragged or odd: the per-context checks below name the culprit
            arr = None
        if arr is not None and arr.ndim == 2 and arr.dtype != bool and np.issubdtype(arr.dtype, np.integer) \
                and arr.min() >= 0 and arr.max() < V:
            return list(map(tuple, arr.tolist()))
    if isinstance(contexts, (str, bytes)) or not isinstance(contexts, Sequence):
        raise TypeError(f"contexts must be a list of token-id sequences, got {type(contexts).__name__}")
    if len(contexts) == 0:
        raise ValueError("contexts is empty; pass at least one context (use [()] for the empty context)")
    out = []
    for b, ctx in enumerate(contexts):
        if isinstance(ctx, (str, bytes)) or not isinstance(ctx, (Sequence, np.ndarray)):
            raise TypeError(f"context {b} must be a sequence of token ids, got {type(ctx).__name__}")
        arr = np.asarray(ctx)
        if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"context {b} must hold integer token ids, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= V):
            bad = int(arr[(arr < 0) | (arr >= V)][0])
            raise ValueError(f"context {b} holds token id {bad}, outside the vocabulary [0, {V}); "
                             "contexts must index the pair's vocabulary")
        out.append(tuple(int(t) for t in arr.reshape(-1)))
    return out


class AutoregressivePair(ABC):
    """A target/draft model pair exposing next-token laws at any context.

    Attributes
    ----------
    vocab_size : int
    """

    vocab_size: int
    #: How :meth:`state` depends on the context, for vectorised merging in
    #: the tree recursion: ``"static"`` (never), ``"last"`` (last token only)
    #: or ``None`` (use :meth:`state`).
    state_kind: str | None = None

    def laws(self, contexts) -> tuple[np.ndarray, np.ndarray]:
        """Next-token target and draft laws.

        Parameters
        ----------
        contexts : sequence of sequences of int, or ndarray (B, L) int64

        Returns
        -------
        p, q : ndarray, shape (B, V), float64, rows summing to 1

        Raises
        ------
        TypeError, ValueError
            Malformed contexts or token ids outside ``[0, V)``.
        """
        ctx = check_contexts(contexts, self.vocab_size)
        return self._laws(ctx)

    @abstractmethod
    def _laws(self, contexts: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
        """Laws for validated contexts."""

    def state(self, context: tuple[int, ...]) -> Hashable:
        """A key such that contexts with equal keys have equal laws (default: the context)."""
        return tuple(context)


class StaticPair(AutoregressivePair):
    """The same (p, q) at every context: i.i.d. per-node pairs.

    Parameters
    ----------
    p, q : array_like, shape (V,), float64
    """

    state_kind = "static"

    def __init__(self, p, q):
        p2, q2, _ = as_laws(p, q)
        if p2.shape[0] != 1:
            raise ValueError("StaticPair takes one pair, p and q of shape (V,)")
        self.p, self.q = p2[0].copy(), q2[0].copy()
        self.vocab_size = self.p.size

    def _laws(self, contexts):
        B = len(contexts)
        return np.tile(self.p, (B, 1)), np.tile(self.q, (B, 1))

    def state(self, context):
        return ()


class MarkovPair(AutoregressivePair):
    """First-order Markov target and draft: laws depend on the last token only.

    Parameters
    ----------
    P, Q : array_like, shape (V, V), float64
        Transition matrices, ``P[a, b] = p(next = b | last = a)``; rows sum to 1.
    p0, q0 : array_like, shape (V,), optional
        Laws at the empty context (default: uniform average of the rows).

    Raises
    ------
    ValueError
        Non-square or mismatched matrices, rows not summing to 1.
    """

    state_kind = "last"

    def __init__(self, P, Q, p0=None, q0=None):
        P2, Q2, _ = as_laws(P, Q, names=("P", "Q"))
        if P2.shape[0] != P2.shape[1]:
            raise ValueError(f"P and Q must be square (V, V) transition matrices, got {P2.shape}")
        self.P, self.Q = np.array(P2), np.array(Q2)
        V = self.P.shape[0]
        p0 = self.P.mean(axis=0) if p0 is None else p0
        q0 = self.Q.mean(axis=0) if q0 is None else q0
        a, b, _ = as_laws(p0, q0, names=("p0", "q0"))
        if a.shape[1] != V:
            raise ValueError(f"p0 and q0 must have shape ({V},), got {a.shape[1:]}")
        self.p0, self.q0 = a[0].copy(), b[0].copy()
        self.vocab_size = V

    @classmethod
    def random(cls, rng: np.random.Generator, V: int, *, scale: float = 3.0, noise: float = 1.0,
               temperature: float = 1.0) -> "MarkovPair":
        """Random transition logits ``Z ~ scale N(0, 1)`` (V, V); target ``softmax(Z / T)``,
        draft ``softmax((Z + noise * eps) / T)``: ``noise`` dials the draft/target
        divergence (0 gives identical models).

        Raises ValueError for ``V < 2``, negative ``noise`` or non-positive ``temperature``.
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy.random.Generator")
        if isinstance(V, bool) or not isinstance(V, (int, np.integer)) or V < 2:
            raise ValueError(f"V must be an integer >= 2, got {V!r}")
        if not np.isfinite(noise) or noise < 0:
            raise ValueError(f"noise must be finite and >= 0, got {noise}")
        if not np.isfinite(temperature) or temperature <= 0:
            raise ValueError(f"temperature must be finite and > 0, got {temperature}")
        Z = scale * rng.standard_normal((V + 1, V))
        E = noise * rng.standard_normal((V + 1, V))
        P = softmax(Z / temperature, axis=1)
        Q = softmax((Z + E) / temperature, axis=1)
        return cls(P[:V], Q[:V], P[V], Q[V])

    def _laws(self, contexts):
        last = np.array([c[-1] if c else -1 for c in contexts])
        p = np.where(last[:, None] >= 0, self.P[np.maximum(last, 0)], self.p0)
        q = np.where(last[:, None] >= 0, self.Q[np.maximum(last, 0)], self.q0)
        return p, q

    def state(self, context):
        return context[-1] if context else -1


class _Adapter(AutoregressivePair):
    def __init__(self, obj, vocab_size, order):
        self.obj, self.vocab_size, self.order = obj, int(vocab_size), order

    def _laws(self, contexts):
        p, q = self.obj.laws(contexts)
        p2, q2, _ = as_laws(p, q)
        if p2.shape != (len(contexts), self.vocab_size):
            raise ValueError(f"wrapped pair returned laws of shape {p2.shape}, expected ({len(contexts)}, {self.vocab_size})")
        return p2, q2

    def state(self, context):
        if self.order is None:
            return tuple(context)
        return tuple(context[-(self.order - 1):]) if self.order > 1 else ()


def as_autoregressive(obj) -> AutoregressivePair:
    """Adapt ``obj`` to :class:`AutoregressivePair`.

    ``obj`` is returned as is if it already is one; otherwise it needs
    ``laws(contexts) -> (p, q)`` and a vocabulary size attribute
    (``vocab_size`` or ``V``); an ``order`` attribute (n of an n-gram) or a
    ``context_length`` attribute (n - 1) lets the tree simulators merge
    contexts sharing their last ``n - 1`` tokens.

    Raises
    ------
    TypeError
        ``obj`` has no ``laws`` method or no vocabulary size.
    """
    if isinstance(obj, AutoregressivePair):
        return obj
    if not callable(getattr(obj, "laws", None)):
        raise TypeError(f"{type(obj).__name__} has no laws(contexts) -> (p, q) method")
    V = getattr(obj, "vocab_size", None) or getattr(obj, "V", None)
    if V is None:
        raise TypeError(f"{type(obj).__name__} has no vocab_size (or V) attribute")
    order = getattr(obj, "order", None) or getattr(obj, "n", None)
    if order is None and isinstance(getattr(obj, "context_length", None), (int, np.integer)):
        order = int(obj.context_length) + 1
    return _Adapter(obj, V, order if isinstance(order, (int, np.integer)) else None)


def ngram_pair(**load_options) -> AutoregressivePair:
    """The real n-gram draft/target pair (:class:`simulators.ngram.NGramPair`) as an autoregressive pair.

    Target: Kneser-Ney 4-gram, draft: Kneser-Ney bigram of Python standard
    library source (built on first use, then cached; see
    :func:`simulators.ngram.load_pair`, whose options are passed through).
    Contexts sharing their last ``context_length`` tokens share a state.
    """
    from .ngram import load_pair

    return as_autoregressive(load_pair(**load_options))
