"""The verifier contract and the sequential engine every verifier shares.

Glossary (used in every name below):

- target ``p``, draft ``q``: laws over the vocabulary, shape (B, V) float64.
- candidate ``x_i``: the i-th pre-sampled draft token of a node.
- accepted mass ``m_i``: the vector with ``0 <= m_i <= min(p_i, q_i)``;
  candidate ``i`` is accepted with probability ``m_i(x_i) / q_i(x_i)``.
- residual ``p_i``: the current target after ``i - 1`` rejections,
  ``p_{i+1} = (p_i - m_i) / (1 - sum(m_i))``; the token emitted when every
  candidate is rejected is drawn from the last residual.
- acceptance probabilities ``a``: (B, k), ``a[:, i]`` is the probability of
  accepting candidate ``i`` given that candidates ``0..i-1`` were rejected.

Exactness lemma (``docs/RESISPEC.md`` section 2): when ``m_i`` never looks
at ``x_i`` or later candidates, the emitted token has law ``p`` exactly.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from .._validation import as_candidates, as_node, as_uniforms, check_drafting, check_k, check_rng, shares_one_row
from .._xp import RESIDUAL_EPS, mass, reject_update, walk  # noqa: F401  (reject_update: re-exported, its one definition)
from ..sampling import _inverse_cdf

#: Below this remaining mass a rejection is treated as impossible and the
#: residual is kept unchanged (its weight in the output law is < 1e-13).
_RESIDUAL_EPS = RESIDUAL_EPS

@dataclass(frozen=True)
class VerifyResult:
    """Outcome of verifying a batch of nodes.

    Attributes
    ----------
    tokens : ndarray, shape (B,), int64
        The emitted token of each node (an accepted candidate or a residual
        token).
    accepted : ndarray, shape (B,), int64
        Index of the accepted candidate in ``0..k-1``, or -1 when every
        candidate was rejected and ``tokens`` came from the residual.
    """

    tokens: np.ndarray
    accepted: np.ndarray

    @property
    def acceptance_rate(self) -> float:
        """Fraction of nodes that accepted some candidate."""
        return float(np.mean(self.accepted >= 0))


@dataclass(frozen=True)
class Chain:
    """Everything a verifier decides, given the candidates, before any coin.

    Attributes
    ----------
    accept_probs : ndarray, shape (B, k), float64
        ``accept_probs[:, i]``: probability of accepting candidate ``i`` given
        that candidates ``0..i-1`` were rejected.
    residual : ndarray, shape (B, V), float64
        Law of the emitted token when all ``k`` candidates are rejected.
    """

    accept_probs: np.ndarray
    residual: np.ndarray


class Verifier(ABC):
    """A multi-candidate verifier for one token position (numpy backend).

    Subclasses implement :meth:`_chain`; :meth:`verify` and
    :meth:`conditional_law` follow from it, so the sampled and the exact
    paths can never disagree.

    Attributes
    ----------
    name : str
        Registry name.
    drafting : {"iid", "without_replacement", "any"}
        The candidate law under which the verifier is exact.
    backend : str
        ``"numpy"`` here.
    """

    name: str = "verifier"
    drafting: str = "iid"
    backend: str = "numpy"
    #: Listed by the benchmark tables that take every registered verifier by default (``bench-accept``).
    bench_default: bool = True
    #: Steps are compiled host kernels, not written against the array namespace: ``backend="torch"`` runs
    #: the rule on the host in float64 (:class:`resispec.torch_backend.base.TorchRule`).
    host_only: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _record_methods(cls)             # the methods it was created with: exactness.fast_paths.pristine

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({opts})" if opts else f"{type(self).__name__}()"

    def options(self) -> dict:
        """Options the verifier was built with (for reports)."""
        return {}

    # ------------------------------------------------------------------ API
    def chain(self, p, q, candidates) -> Chain:
        """Acceptance probabilities and residual for given candidates.

        Parameters
        ----------
        p, q : array_like, shape (V,) or (B, V), float64
            Or ``p`` a :class:`resispec._validation.Laws` (from ``as_node``) and
            ``q=None``: checked once at the door, not re-validated here (every
            public method of a verifier takes this form).
        candidates : array_like, shape (k,) or (B, k), int64

        Returns
        -------
        Chain
        """
        p2, q2, _ = as_node(p, q)
        c = as_candidates(candidates, q2, drafting=self.drafting)
        return Chain(*self._chain(p2, q2, c))

    def verify(self, p, q, candidates, rng: np.random.Generator | None = None, *, uniforms=None) -> VerifyResult:
        """Verify pre-sampled candidates and emit one token per node.

        Parameters
        ----------
        p : array_like, shape (B, V) or (V,), float64
            Target law per node, rows sum to 1.
        q : array_like, shape (B, V) or (V,), float64
            Draft law the candidates were sampled from (same processing as
            the drafts: temperature, top-k, top-p).  ``p`` may instead be a
            validated :class:`resispec._validation.Laws` with ``q=None``
            (trusted, see :meth:`chain`).
        candidates : array_like, shape (B, k) or (k,), int64
            Pre-sampled candidate ids, drawn per :attr:`drafting`.
        rng : numpy.random.Generator, optional
            Source of the uniforms; required unless ``uniforms`` is given.
        uniforms : array_like, shape (B, k + 1), float64 in [0, 1), optional
            Column ``i`` decides candidate ``i`` (accept when
            ``u < m_i(x_i) / q_i(x_i)``); column ``k`` draws the residual
            token by inverse CDF in token-id order.  Same uniforms, same
            decisions in every backend.

        Returns
        -------
        VerifyResult
            ``tokens`` (B,) int64, ``accepted`` (B,) int64 (-1 = none).

        Raises
        ------
        ValueError, TypeError
            Bad laws, shapes, candidate ids, uniforms or rng.

        Notes
        -----
        Rows that share one node -- ``p`` and ``q`` of row stride 0
        (``np.broadcast_to(p1, (B, V))``) or a list holding the same row
        object B times -- are checked once, and when
        :attr:`handles_shared_nodes` the chain is computed once per call
        (O(k V)), then O(k log V) per row (:func:`decide_shared`), with the
        same tokens as the per-row path under the same uniforms.
        """
        p2, q2, c, u = self._verify_inputs(p, q, candidates, rng, uniforms)
        if self.handles_shared_nodes and shares_one_row(p2) and shares_one_row(q2):
            table, r = self._node_table(p2[:1], q2[:1], c.shape[1])
            return decide_shared(table, r, c, u)
        a, r = self._chain_decided(p2, q2, c, u)
        return decide(a, r, c, u)

    #: True when :meth:`_node_table` is valid for this verifier: its chain depends on the candidates only
    #: through ``a_i(x_i)`` (per-step accept probabilities), so a batch whose rows all hold one node (row
    #: stride 0, ``np.broadcast_to``) is verified with O(k V) work per call and O(k log V) per row, with the
    #: same tokens as the per-row path (``decide_shared``).  Harnesses read it to size batches of such views.
    handles_shared_nodes: bool = False

    def _node_table(self, p1: np.ndarray, q1: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(A (k, V), r (V,))`` at one validated node ``p1, q1`` (1, V): ``_chain(p, q, c)`` is
        ``(A[i, c[:, i]], r)`` for every candidate tuple ``c``.  Only called when :attr:`handles_shared_nodes`."""
        raise NotImplementedError

    def _verify_inputs(self, p, q, candidates, rng, uniforms):
        """Validated ``(p (B, V), q (B, V), candidates (B, k), uniforms (B, k + 1))`` for :meth:`verify`."""
        p2, q2, _ = as_node(p, q)
        c = as_candidates(candidates, q2, drafting=self.drafting)
        B, k = c.shape
        if uniforms is None:
            if rng is None:
                raise ValueError("pass rng (a numpy.random.Generator) or explicit uniforms")
            u = check_rng(rng).random((B, k + 1))
        else:
            u = as_uniforms(uniforms, B, k)
        return p2, q2, c, u

    def conditional_law(self, p, q, candidates) -> np.ndarray:
        """Exact law of the emitted token given the candidates (no sampling).

        Parameters
        ----------
        p, q : array_like, shape (B, V) or (V,), float64
        candidates : array_like, shape (B, k) or (k,), int64

        Returns
        -------
        ndarray, shape (B, V), float64 (shape (V,) for 1-D input)
        """
        p2, q2, squeeze = as_node(p, q)
        c = as_candidates(candidates, q2, drafting=self.drafting)
        law = law_from_chain(*self._chain(p2, q2, c), c)
        return law[0] if squeeze and law.shape[0] == 1 else law

    def step_acceptance(self, p, q, k: int) -> np.ndarray | None:
        """Per-step acceptance when it does not depend on the candidates.

        Returns ``beta`` of shape (B, k) with ``beta[:, i]`` the probability
        of accepting candidate ``i`` given candidates ``0..i-1`` were
        rejected, averaged over the draft law -- or ``None`` when that
        depends on which candidates were rejected (then the exact acceptance
        needs enumeration).
        """
        return None

    def closed_form_split(self, p, q, k: int, drafting: str | None = None):
        """Exact split of the emitted law in closed form (any V), or ``None``.

        Parameters
        ----------
        p, q : array_like, shape (V,) or (B, V), float64
        k : int >= 1
        drafting : {"iid", "without_replacement", "any"}, optional
            Candidate law (default: the verifier's; ``"any"`` means iid).

        Returns
        -------
        (M, R) : two ndarrays of shape (B, V), float64, or None
            ``M[b, x]``: probability that a candidate equal to ``x`` is
            accepted; ``R[b, x]``: probability that every candidate is
            rejected and the residual emits ``x``.  ``M.sum(1)`` is the
            acceptance, ``M + R`` the emitted law.  ``None`` when no closed
            form is known for this verifier and drafting (then exact
            analysis enumerates the candidate tuples).  Subclasses override
            it; each closed form is tested against enumeration
            (``tests/test_hardening_numerics.py``).

        Raises
        ------
        ValueError, TypeError
            Bad ``k`` or ``drafting`` -- checked even where no closed form exists (it returned None).
        """
        check_k(k)
        self._candidate_law(drafting)
        return None

    def acceptance_closed_form(self, p, q, k: int, drafting: str | None = None) -> np.ndarray | None:
        """Exact acceptance per node (B,) from :meth:`closed_form_split`, or ``None``."""
        split = self.closed_form_split(p, q, k, drafting)
        return None if split is None else np.clip(split[0].sum(axis=1), 0.0, 1.0)

    def chain_until_accept(self, p, q, candidates, uniforms) -> Chain:
        """:meth:`chain` cut at each row's first accepted candidate under ``uniforms``.

        Parameters
        ----------
        p, q, candidates : as :meth:`chain`
        uniforms : array_like, shape (B, k + 1), float64 in [0, 1)
            As in :meth:`verify` (column ``i`` accepts candidate ``i`` when ``u < a_i``).

        Returns
        -------
        Chain
            ``accept_probs`` (B, k) equal to :meth:`chain`'s up to each row's first accepted step ``i``
            (``u_i < a_i``) and 0 after it; ``residual`` (B, V) equal to :meth:`chain`'s on rows that
            accept nothing, 0 on the others.  So :func:`decide` gives the same tokens as with
            :meth:`chain`; a rule whose later steps depend on the rejected candidates (ResiSpec for
            without-replacement drafts) skips them.  Default: :meth:`chain`, then cut.

        Raises
        ------
        ValueError, TypeError
            Bad laws, shapes, candidate ids or uniforms (named in the message).
        """
        p2, q2, _ = as_node(p, q)
        c = as_candidates(candidates, q2, drafting=self.drafting)
        u = as_uniforms(uniforms, *c.shape)
        return Chain(*cut_at_first_accept(*self._chain_decided(p2, q2, c, u), u))

    def _chain_decided(self, p, q, c, u):
        """A chain that agrees with ``_chain`` up to each row's first accepted step under ``u`` (B, k + 1)
        (what :func:`decide` reads); a rule may skip the later steps.  Default: the full ``_chain`` (``verify``
        needs no cut; :meth:`chain_until_accept` applies it)."""
        return self._chain(p, q, c)

    def _candidate_law(self, drafting: str | None) -> str:
        """``drafting`` resolved against the verifier's (``"any"`` -> ``"iid"``)."""
        d = self.drafting if drafting is None else check_drafting(drafting)
        return "iid" if d == "any" else d

    # ------------------------------------------------------ implementation
    @abstractmethod
    def _chain(self, p: np.ndarray, q: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(accept_probs (B, k), residual (B, V))`` for validated input."""


def takes_laws(verifier, method: str) -> bool:
    """True when ``verifier.<method>`` is resispec's own, so it takes a trusted ``Laws`` as ``p`` (``q=None``).

    The method must be defined in a ``resispec.`` module (a built-in, or a
    user subclass of :class:`Verifier` that keeps the base method).  Any
    other ``verify`` / ``chain`` / ``closed_form_split`` (a black box, a
    mutant, a user override) is handed plain arrays, exactly as a user would
    pass them, and checks them itself.
    """
    fn = getattr(type(verifier), method, None)
    return isinstance(verifier, Verifier) and getattr(fn, "__module__", "").startswith("resispec.")


def cut_at_first_accept(a: np.ndarray, r: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(a, r)`` with ``a`` zeroed after each row's first accepted step (``u_i < a_i``) and ``r`` zeroed on
    the rows that accept: the :meth:`Verifier.chain_until_accept` form, same :func:`decide` tokens.

    ``a``: (B, k) float64, ``r``: (B, V) float64, ``u``: (B, k + 1) float64; new arrays are returned.
    """
    acc = u[:, : a.shape[1]] < a
    after = np.cumsum(acc, axis=1) - acc > 0                 # a step after the row's first acceptance
    return np.where(after, 0.0, a), np.where(acc.any(axis=1)[:, None], 0.0, r)


def decide(a: np.ndarray, r: np.ndarray, c: np.ndarray, u: np.ndarray) -> VerifyResult:
    """Turn a chain and uniforms into tokens (shared by every numpy verifier).

    ``a``: (B, k) acceptance probabilities, ``r``: (B, V) residual, ``c``:
    (B, k) candidates, ``u``: (B, k + 1) uniforms.
    """
    B, k = c.shape
    acc = u[:, :k] < a
    hit = acc.any(axis=1)
    first = np.argmax(acc, axis=1)
    rows = np.arange(B)
    tokens = c[rows, first].copy()
    accepted = np.where(hit, first, -1).astype(np.int64)
    miss = ~hit
    if np.any(miss):
        tokens[miss] = _inverse_cdf(r[miss], u[miss, k])
    return VerifyResult(tokens=tokens.astype(np.int64), accepted=accepted)


def decide_shared(table: np.ndarray, r: np.ndarray, c: np.ndarray, u: np.ndarray) -> VerifyResult:
    """:func:`decide` for B rows that share one node: O(k log V) per row after an O(V) CDF.

    ``table`` (k, V): ``a_i(x)`` for every step ``i`` and token ``x``; ``r``
    (V,): the residual; ``c`` (B, k); ``u`` (B, k + 1).  Same tokens as
    ``decide(table[i, c[:, i]], r broadcast, c, u)`` bit for bit: the same
    float64 comparisons, and ``searchsorted(cumsum(r), u * sum, "right")``
    counts the CDF entries ``<= u * sum`` exactly as :func:`resispec.sampling.inverse_cdf`.
    """
    B, k = c.shape
    a = table[np.arange(k)[None, :], c]
    acc = u[:, :k] < a
    hit = acc.any(axis=1)
    first = np.argmax(acc, axis=1)
    tokens = c[np.arange(B), first].astype(np.int64)
    miss = ~hit
    if np.any(miss):
        cdf = np.cumsum(r)
        last = r.size - 1 - int(np.argmax(r[::-1] > 0))
        tokens[miss] = np.minimum(np.searchsorted(cdf, u[miss, k] * cdf[-1], side="right"), last)
    return VerifyResult(tokens=tokens, accepted=np.where(hit, first, -1).astype(np.int64))


def law_from_chain(a: np.ndarray, r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Exact emitted-token law (B, V) from a chain and its candidates."""
    B, k = c.shape
    rows = np.arange(B)
    reach = np.ones(B)
    law = np.zeros_like(r, dtype=np.float64)
    for i in range(k):
        law[rows, c[:, i]] += reach * a[:, i]
        reach = reach * (1.0 - a[:, i])
    law += reach[:, None] * r
    return law


def sum_of_others(v: np.ndarray) -> np.ndarray:
    """``sum_{y != x} v(y)`` for every token ``x`` (B, V), ``v >= 0``, without cancellation.

    ``1 - q(x)`` (or ``Omega - w(x)/(1 - q(x))``) loses every digit when the
    entry ``x`` holds nearly all the row (a peaked or float32-softmax draft),
    and it is the normaliser of ``q^(x)``.  Off the row maximum
    ``sum(v) - v(x) >= max(v) >= v(x)`` loses at most one bit; at the maximum
    the other entries are summed.
    """
    B = v.shape[0]
    rows = np.arange(B)
    out = v.sum(axis=1, keepdims=True) - v
    top = np.argmax(v, axis=1)
    rest = v.copy()
    rest[rows, top] = 0.0
    out[rows, top] = rest.sum(axis=1)
    return np.maximum(out, 0.0)


def _record_methods(cls) -> None:
    """Keep the methods ``cls`` was created with (``_as_defined``), so that the exactness harness can tell a
    built-in rule from one whose methods were replaced later (``exactness.fast_paths.pristine``)."""
    cls._as_defined = {n: v for n, v in vars(cls).items() if callable(v)}


_record_methods(Verifier)


class MassVerifier(Verifier):
    """A sequential verifier defined by its accepted-mass rule ``m_i``.

    Subclasses implement :meth:`accepted_mass`; the engine (:func:`resispec._xp.walk`, the same for numpy and
    torch) walks the candidates, keeps the residual ``p_i`` and (for without-replacement drafting) the
    renormalised draft ``q_i``.  An ``accepted_mass`` that also takes ``state=`` gets a dict that lives for
    one walk over a batch's candidates (steps ``0..k-1`` in order, the same rows throughout), where it may
    keep a plan made at its first step and read at the later ones (ResiSpec's look-ahead schedule: one solve
    a node instead of one a candidate); it is passed explicitly, so a rule's output stays a function of its
    inputs and a verifier shared by threads decides as one thread.
    """

    #: True when ``accepted_mass`` ignores the rejected candidates, so that
    #: under iid drafting the chain is the same for every candidate tuple.
    candidate_independent: bool = True

    @abstractmethod
    def accepted_mass(self, i: int, k: int, p_i: np.ndarray, q_i: np.ndarray, *, q: np.ndarray,
                      rejected: np.ndarray) -> np.ndarray:
        """Accepted mass ``m_i``, shape (B, V), with ``0 <= m_i <= min(p_i, q_i)``.

        ``i`` is 0-based; ``rejected`` (B, i) holds the candidates already
        rejected (never ``x_i`` or later ones).
        """

    def masses(self, p, q, candidates):
        """Per-step accepted masses and residuals, for drift analysis.

        Returns
        -------
        m : ndarray, shape (B, k, V)   accepted mass of each step
        p_steps : ndarray, shape (B, k + 1, V)   residual before each step and the final one
        q_steps : ndarray, shape (B, k, V)   draft law of each step
        """
        p2, q2, _ = as_node(p, q)
        c = as_candidates(candidates, q2, drafting=self.drafting)
        ms, ps, qs = [], [], []
        self._walk(p2, q2, c, ms, ps, qs)
        return np.stack(ms, 1), np.stack(ps, 1), np.stack(qs, 1)

    def _walk(self, p, q, c, ms=None, ps=None, qs=None):
        return walk(self, p, q, c, ms, ps, qs)           # the one engine (resispec._xp.walk), numpy or torch

    def _chain(self, p, q, c):
        return self._walk(p, q, c)

    @property
    def handles_shared_nodes(self) -> bool:
        """Candidate-independent built-in rules under iid drafts (a user's ``accepted_mass`` is never trusted
        to ignore ``rejected``: it keeps the per-row path)."""
        own = getattr(type(self).accepted_mass, "__module__", "").startswith("resispec.verifiers.")
        return own and self.drafting == "iid" and self.candidate_independent

    def _node_table(self, p1, q1, k):
        """The steps of :meth:`_walk` at one node with no rejected candidates, every token's ratio kept."""
        a = np.empty((k, p1.shape[1]))
        p_i = p1
        safe = np.where(q1 > 0, q1, 1.0)
        empty = np.zeros((1, 0), dtype=np.int64)
        state: dict = {}
        for i in range(k):
            m = mass(self, i, k, p_i, q1, q=q1, rejected=empty, state=state)
            a[i] = np.clip(np.where(q1 > 0, m / safe, 0.0), 0.0, 1.0)[0]
            p_i = reject_update(p_i, m)
        return a, p_i[0]

    def closed_form_split(self, p, q, k, drafting=None):
        """``M = sum_i prod_{j<i}(1 - beta_j) m_i``, ``R = prod_i (1 - beta_i) p_{k+1}`` (iid drafts).

        For a candidate-independent rule under iid drafting the accepted
        masses ``m_i`` and residuals ``p_i`` do not depend on the candidates,
        and candidate ``i`` is reached with probability
        ``prod_{j<i} (1 - beta_j)``, ``beta_j = sum m_j`` (lemma of
        ``docs/RESISPEC.md`` section 2; SpecInfer, arXiv 2305.09781).
        ``None`` for without-replacement drafts or candidate-dependent rules (``k`` and ``drafting`` checked).
        """
        k = check_k(k)
        if self._candidate_law(drafting) != "iid" or self.drafting != "iid" or not self.candidate_independent:
            return None
        p2, q2, _ = as_node(p, q)
        B = p2.shape[0]
        M = np.zeros(p2.shape)
        reach = np.ones(B)
        p_i = p2
        empty = np.zeros((B, 0), dtype=np.int64)
        state: dict = {}
        for i in range(k):
            m = mass(self, i, k, p_i, q2, q=q2, rejected=empty, state=state)
            M += reach[:, None] * m
            reach = reach * np.clip(1.0 - m.sum(axis=1), 0.0, 1.0)
            p_i = reject_update(p_i, m)
        return M, reach[:, None] * p_i

    def step_acceptance(self, p, q, k):
        if self.drafting != "iid" or not self.candidate_independent:
            return None
        p2, q2, _ = as_node(p, q)
        k = check_k(k)
        B = p2.shape[0]
        beta = np.empty((B, k))
        p_i = p2
        empty = np.zeros((B, 0), dtype=np.int64)
        state: dict = {}
        for i in range(k):
            m = mass(self, i, k, p_i, q2, q=q2, rejected=empty, state=state)
            beta[:, i] = m.sum(axis=1)
            p_i = reject_update(p_i, m)
        return np.clip(beta, 0.0, 1.0)
