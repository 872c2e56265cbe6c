"""Vectorised Monte Carlo of a verifier at one node: candidates, uniforms, tokens.

One random stream for every path: per draw, ``k`` uniforms pick the
candidates by inverse CDF of the draft law, then ``k + 1`` uniforms go to
``verifier.verify(..., uniforms=...)``.  Two paths produce the SAME tokens
from the same stream:

- **generic**: tiles ``p, q`` into batches and calls ``verifier.verify`` (any
  object with the Verifier interface; O(V) per draw), the batch sizes cycling
  through ``MAIN_SIZES`` (9 to 4,096 rows, :func:`batch_cycle`) and each draw
  labelled with its call's size class (``Draws.batch``);
- **table** (fast): for built-in verifiers whose accept rule depends only on
  the token at each step (``sps``, ``rrs``, ``resispec`` and ``kseq`` with iid
  drafts), the per-step accept probabilities ``a_i(x)`` and the residual are
  computed once per node, and each draw costs O(k log V).  The first
  ``GUARD`` draws of a sampler's first call are recomputed through ``verify``
  and must agree bit for bit, or ``RuntimeError`` is raised;
- **fast paths** (:mod:`exactness.fast_paths`): closed-form O(k log V) samplers
  of built-in rules whose state changes with each rejected candidate
  (``target_only``); the same ``GUARD`` recheck through ``verify``, plus the
  path's accept probabilities and residual on those candidates against
  ``verifier.chain`` (``check_against_chain``).  ``NodeSampler.path`` names the
  path that ran (``"table"``, a fast path's name, or ``"generic"``) and
  ``NodeSampler.guard`` what the recheck compared.

Optional verifier hooks the harness honours (used by :mod:`exactness.mutants`,
open to users whose pipeline drafts differently):

- ``draft_law(q) -> (B, V)``: the law the candidates are really drawn from
  (e.g. a top-k processed draft) while ``verify`` receives ``q``;
- ``bonus_law(p, q) -> (B, V)``: law of the bonus token after a full accept
  on a tree (default ``p``), see :mod:`exactness.tree`;
- ``sample_bonus(p, q, rng) -> (B,) int64``: the verifier's OWN draw of the
  bonus token from the next node's laws ``p, q`` (B, V); when present the tree
  checks use these draws instead of drawing the bonus themselves;
- ``supported_k``: the candidate counts the verifier handles, a collection of
  ints (``(1, 2)``) or a method ``supported_k(k) -> bool`` (:func:`k_support`).
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass

import numpy as np

from resispec import Verifier
from resispec._validation import DRAFTINGS, Laws, as_node, check_k
from resispec.verifiers.base import MassVerifier, takes_laws
from resispec.verifiers.registry import _REGISTRY

from . import limits
from ._checks import SubjectError, passes_through
from ._timeout import check_deadline
from ._search import GuidedCDF
from .certificate import call_subject, door_law, door_node, subject_cause  # noqa: F401 (re-exported)
from .fast_paths import check_against_chain, fast_path_for

#: Draws re-checked through ``verify`` on a sampler's first call when the table or a fast path is used.
GUARD = 64
#: Draws re-checked through ``verify`` and ``chain`` on a fast path in each later call :func:`rechecked` picks.
RECHECK = 4
#: After its first ``RECHECK_EVERY`` calls, a fast-path sampler rechecks every ``RECHECK_EVERY``-th call (chunk).
RECHECK_EVERY = 16


def rechecked(call: int) -> bool:
    """Whether call number ``call`` (1-based) of a fast-path sampler rechecks ``RECHECK`` draws: calls
    1..``RECHECK_EVERY``, then every ``RECHECK_EVERY``-th (a run of 2^20-draw chunks stays within a few % of
    its draw time while every part of the run is sampled)."""
    return call <= RECHECK_EVERY or call % RECHECK_EVERY == 0


def rechecks_in(n: int) -> int:
    """Calls that recheck in a run of ``n`` draws drawn in ``exactness.limits.CHUNK`` chunks."""
    calls = -(-int(min(n, 10**18)) // limits.CHUNK)
    return min(calls, RECHECK_EVERY) + max(0, calls // RECHECK_EVERY - 1)
#: Upper bound on (rows x V) elements per generic verify call.
_ELEMS = 1 << 21
#: Rows per ``verify`` call for a black box declaring ``handles_shared_nodes = True`` (read-only broadcast views).
SHARED_ROWS = 1 << 16
#: Rows of the generic path's ``verify`` calls, one class after another (each at most the path's row cap): the
#: sizes serving engines use (powers of two) and odd ones between them, so every size range in 9..4,096 is
#: called (a box biased only for batches of 9 to ~190 rows passed when every call held thousands of rows; the
#: ``batch_sizes`` check of :func:`exactness.certify_verifier` tests each class on its own).
MAIN_SIZES = (9, 16, 31, 32, 64, 127, 128, 256, 509, 512, 1024, 1531, 2048, 4096)
#: Rows each class gets per cycle at least (a class of ``s`` rows is called ``ceil(CLASS_ROWS / s)`` times).
CLASS_ROWS = 256


def batch_cycle(cap: int, shared: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(sizes, cycle)`` of the generic path's ``verify`` calls for a row cap ``cap``: ``sizes`` the distinct
    batch-size classes (``MAIN_SIZES`` capped at ``cap``, plus ``cap`` itself for a box that declares
    ``handles_shared_nodes``, whose calls cost O(V) each, not O(rows): most of its draws come in large calls),
    ascending; ``cycle`` the class index of each call,
    in order (class ``j`` repeated ``ceil(CLASS_ROWS / sizes[j])`` times).  The cycle restarts at each call
    of :meth:`NodeSampler._generic`, so the split of a chunk depends only on its draw count."""
    cap = max(1, int(cap))
    sizes = sorted({min(s, cap) for s in MAIN_SIZES} | ({cap} if shared else set()))
    cycle = tuple(j for j, sz in enumerate(sizes) for _ in range(-(-CLASS_ROWS // sz)))
    return tuple(sizes), cycle


@dataclass(frozen=True)
class Draws:
    """Monte Carlo draws at one node.

    Attributes
    ----------
    tokens : ndarray, shape (n,), int64
    accepted : ndarray, shape (n,), int64, accepted candidate index or -1; ``NO_ACCEPTED`` (-2) where verify
        returned no ``.accepted``, ``BAD_ACCEPTED`` (-3) where its ``.accepted`` broke the contract
    batch : ndarray, shape (n,), int8, or None
        The batch-size class (index into ``NodeSampler.batch_sizes``) of the ``verify`` call that emitted each
        draw, on the generic path; None where the draws did not come from ``verify`` (table, fast paths)
    """

    tokens: np.ndarray
    accepted: np.ndarray
    batch: np.ndarray | None = None


def concat_draws(parts) -> Draws:
    """The draws of ``parts`` (a sequence of :class:`Draws`) one after another (``batch`` kept when every part
    has it)."""
    parts = list(parts)
    batch = (np.concatenate([d.batch for d in parts]) if parts and all(d.batch is not None for d in parts)
             else None)
    return Draws(np.concatenate([d.tokens for d in parts]), np.concatenate([d.accepted for d in parts]), batch)


def candidate_law(verifier, q2: np.ndarray) -> np.ndarray:
    """Law the candidates are drawn from: ``verifier.draft_law(q)`` if defined, else ``q``."""
    hook = getattr(verifier, "draft_law", None)
    if hook is None:
        return q2
    name = f"{type(verifier).__name__}.draft_law(q)"
    ql = call_subject(lambda: np.asarray(hook(q2), dtype=np.float64), name)
    if ql.shape != q2.shape or not np.all(np.isfinite(ql)) or np.any(ql < 0) or np.any(ql.sum(axis=1) <= 0):
        raise SubjectError(f"{name} must return a non-negative, finite (B, V) law with positive rows, got "
                           f"shape {ql.shape}")
    return ql / ql.sum(axis=1, keepdims=True)


def drafting_of(verifier) -> str:
    """``verifier.drafting``: how the candidates are drawn ("iid", "without_replacement" or "any").

    Raises
    ------
    TypeError
        The verifier has no ``drafting`` attribute (it is never guessed: an
        iid guess for a without-replacement verifier would certify the wrong law).
    ValueError
        ``drafting`` is not one of the three choices.
    """
    if not hasattr(verifier, "drafting"):
        raise TypeError(f"{type(verifier).__name__} has no 'drafting' attribute: set verifier.drafting to 'iid', "
                        "'without_replacement' or 'any' (how its candidates are drawn)")
    d = verifier.drafting
    if not isinstance(d, str) or d not in DRAFTINGS:
        raise ValueError(f"verifier.drafting must be 'iid', 'without_replacement' or 'any', got {d!r}")
    return d


class UnsupportedK(ValueError):
    """The verifier declares (``supported_k``) that it does not handle this ``k``."""


def k_support(verifier, k: int) -> str | None:
    """``None`` when ``verifier`` handles ``k`` candidates, else the reason (from its ``supported_k``).

    ``supported_k`` is optional: absent (or ``None``) means every ``k``.  It is
    either a collection of ints >= 1 (``supported_k = (1, 2)``) or a callable
    ``supported_k(k) -> bool`` (a method).

    Raises
    ------
    TypeError
        ``supported_k`` is neither (a string, floats, an empty collection), or
        the method returns something other than a bool (a malformed declaration).
    exactness.SubjectError
        The method raises (the subject misbehaved: a FAIL).
    """
    decl = getattr(verifier, "supported_k", None)
    if decl is None:
        return None
    name = type(verifier).__name__
    if callable(decl):
        ok = call_subject(decl, f"{name}.supported_k({k})", k)
        if not isinstance(ok, (bool, np.bool_)):
            raise TypeError(f"{name}.supported_k({k}) returned {ok!r}; it must return True or False")
        return None if ok else f"k = {k} is not supported ({name}.supported_k({k}) is False)"
    bad = TypeError(f"{name}.supported_k must be a collection of ints >= 1 such as (1, 2), or a method "
                    f"supported_k(k) -> bool; got {decl!r}")
    if isinstance(decl, (str, bytes)):
        raise bad
    try:
        ks = tuple(decl)
    except TypeError:
        raise bad from None
    if not ks or not all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) and x >= 1
                         for x in ks):
        raise bad
    if int(k) in {int(x) for x in ks}:
        return None
    return f"k = {k} is not supported ({name}.supported_k = {tuple(int(x) for x in ks)})"


def has_chain(verifier) -> bool:
    """True when ``verifier.chain(p, q, candidates)`` is the Chain contract of :class:`resispec.Verifier`.

    A ``resispec.Verifier`` always qualifies; another object only when its
    ``chain`` is callable with three positional arguments ``(p, q,
    candidates)`` (an unrelated attribute named ``chain`` makes it a black
    box: Monte Carlo checks only).
    """
    if isinstance(verifier, Verifier):
        return True
    ch = getattr(verifier, "chain", None)
    if not callable(ch):
        return False
    try:
        inspect.signature(ch).bind(None, None, None)
    except (TypeError, ValueError):
        return False
    return True


def takes_uniforms(verifier) -> bool:
    """True when ``verifier.verify`` accepts the keyword ``uniforms`` (inspected signature)."""
    try:
        params = inspect.signature(verifier.verify).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(pr.name == "uniforms" and pr.kind in (pr.KEYWORD_ONLY, pr.POSITIONAL_OR_KEYWORD)
               or pr.kind == pr.VAR_KEYWORD for pr in params)


def as_numpy_verifier(verifier):
    """A torch verifier wrapped in :class:`resispec.torch_backend.NumpyFacade`; anything else unchanged.

    torch is imported only when it is already loaded (a torch verifier
    cannot exist otherwise), so the harness never imports torch itself.
    """
    if "torch" not in sys.modules or isinstance(verifier, Verifier):
        return verifier
    from resispec.torch_backend import NumpyFacade, TorchVerifier

    return NumpyFacade(verifier) if isinstance(verifier, TorchVerifier) else verifier


def _builtin(verifier) -> bool:
    return type(verifier).__module__.startswith("resispec.")


def _searchsorted_rows(cdf: np.ndarray, u: np.ndarray, last: int) -> np.ndarray:
    """Inverse CDF for one law (cdf (V,)) and many uniforms: same ids as ``resispec.inverse_cdf``."""
    return np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"), last)


def _last_positive(law: np.ndarray) -> int:
    return int(law.size - 1 - np.argmax(law[::-1] > 0))


def draw_node_candidates(cl: np.ndarray, k: int, drafting: str, uc: np.ndarray) -> np.ndarray:
    """Candidates (n, k) int64 at one node from uniforms ``uc`` (n, k).

    ``cl`` (V,) is the candidate law; without-replacement drafting is
    successive sampling (RSD, arXiv 2402.14160), done row by row in blocks.
    """
    n = uc.shape[0]
    if drafting != "without_replacement":
        cdf = np.cumsum(cl)
        return _searchsorted_rows(cdf, uc, _last_positive(cl))
    support = int(np.count_nonzero(cl > 0))
    if k > support:
        raise ValueError(f"k = {k} exceeds the draft support ({support} tokens) for without-replacement drafting")
    V = cl.size
    out = np.empty((n, k), dtype=np.int64)
    step = max(1, _ELEMS // V)
    rows_all = np.arange(n)
    for s in range(0, n, step):
        rows = rows_all[s:s + step] - s
        qi = np.broadcast_to(cl, (rows.size, V)).copy()
        for i in range(k):
            cdf = np.cumsum(qi, axis=1)
            x = (cdf <= (uc[s:s + step, i] * cdf[:, -1])[:, None]).sum(axis=1)
            last = V - 1 - np.argmax(qi[:, ::-1] > 0, axis=1)
            x = np.minimum(x, last)
            out[s + rows, i] = x
            qi[rows, x] = 0.0
    return out


def _table_types():
    out = set()
    for cls in _REGISTRY.get("numpy", {}).values():
        if (issubclass(cls, MassVerifier) and cls.candidate_independent and cls.drafting == "iid"
                and cls.__module__.startswith("resispec.verifiers.")):  # built-ins only, never user classes
            out.add(cls)
    from resispec.verifiers.kseq import KSeq

    out.add(KSeq)
    return tuple(out)


def accept_table(verifier, p: np.ndarray, q: np.ndarray, k: int):
    """Per-step accept probabilities ``a (k, V)`` and residual ``r (V,)``, or None.

    Only for built-in verifiers whose chain depends on the candidates only
    through ``a_i(x_i)`` (iid drafting, no ``draft_law`` hook); ``None``
    otherwise.
    """
    if type(verifier) not in _table_types() or getattr(verifier, "drafting", None) != "iid":
        return None
    from .fast_paths import pristine

    if not pristine(verifier):               # a replaced verify (instance, patched class): sample through it
        return None
    if hasattr(verifier, "draft_law") or hasattr(verifier, "bonus_law"):
        return None
    from resispec.verifiers.kseq import KSeq, kseq_rho

    safe_q = np.where(q > 0, q, 1.0)
    if isinstance(verifier, KSeq):
        p2, q2 = p[None], q[None]
        x0 = np.full((1, k), int(np.argmax(q)))
        _, r = verifier._chain(p2, q2, x0)
        rho, _ = kseq_rho(p2, q2, k)
        a1 = np.where(q > 0, np.minimum(1.0, p / (rho[0] * safe_q)), 0.0)
        return np.repeat(a1[None], k, axis=0), r[0]
    x0 = np.full((1, k), int(np.argmax(q)))
    m, p_steps, _ = verifier.masses(Laws(p[None], q[None], True), None, x0)  # built-in: checked at the door
    a = np.clip(np.where(q > 0, m[0] / safe_q, 0.0), 0.0, 1.0)
    return a, p_steps[0, k]


def _checked_result(res, B: int, k: int, V: int, verifier, candidates=None) -> tuple[np.ndarray, np.ndarray]:
    """Validate what ``verifier.verify`` returned for ``B`` nodes, strictly.

    tokens (B,) integer ids in [0, V); accepted (B,) integers in [-1, k);
    and, when ``candidates`` (B, k) is given, ``tokens[b] ==
    candidates[b, accepted[b]]`` wherever ``accepted[b] >= 0`` (an index,
    not an accept flag).  Returns int64 copies (accepted all ``-2`` when the
    result has no ``.accepted``).

    Raises
    ------
    exactness.SubjectError
        Anything outside that contract, naming the verifier and the first bad
        row: the subject misbehaved (a FAIL, never "bad input").  The Monte
        Carlo of :func:`exactness.certify_verifier` uses :func:`emitted_result`
        instead, which certifies a verifier whose accepted indices do not name
        its candidates on the tokens it emits.
    """
    t, a, why = emitted_result(res, B, k, V, verifier, candidates)
    if why:
        raise SubjectError(why)
    return t, a


#: ``accepted`` code of :func:`emitted_result`: verify returned no ``.accepted``.
NO_ACCEPTED = -2
#: ``accepted`` code of :func:`emitted_result`: ``.accepted`` broke its contract (out of range, not an index of
#: the emitted candidate, wrong dtype or shape); the tokens are still certified.
BAD_ACCEPTED = -3


def emitted_result(res, B: int, k: int, V: int, verifier, candidates=None) -> tuple[np.ndarray, np.ndarray,
                                                                                    str | None]:
    """``(tokens, accepted, why)`` from what ``verifier.verify`` returned for ``B`` nodes.

    The tokens must be (B,) integer ids in [0, V), else :class:`exactness.SubjectError` (the verifier emitted
    something that is not a token).  The accepted indices are auxiliary: when they break their contract
    (integers in ``[-1, k)`` naming the emitted candidate of ``candidates`` (B, k)) the tokens are kept,
    ``accepted`` is all ``BAD_ACCEPTED`` and ``why`` says what was wrong (a pipeline that drafts its own
    candidates reports indices into THOSE: it is certified on what it emits).  No ``.accepted``: all
    ``NO_ACCEPTED`` and ``why`` None.
    """
    name = type(verifier).__name__
    if not hasattr(res, "tokens"):
        raise SubjectError(f"{name}.verify returned {type(res).__name__}; it must return an object with .tokens "
                           "(B,) int64 and .accepted (B,) int64 (e.g. resispec.VerifyResult)")
    t = np.asarray(res.tokens)
    if t.dtype == bool or not np.issubdtype(t.dtype, np.integer):
        raise SubjectError(f"{name}.verify returned tokens of dtype {t.dtype}; token ids must be integers (int64)")
    if t.shape != (B,):
        raise SubjectError(f"{name}.verify returned tokens of shape {t.shape} for {B} nodes; expected ({B},)")
    if B and (t.min() < 0 or t.max() >= V):
        bad = int(np.flatnonzero((t < 0) | (t >= V))[0])
        raise SubjectError(f"{name}.verify returned token ids in [{t.min()}, {t.max()}] (tokens[{bad}] = {t[bad]}), "
                           f"outside the vocabulary [0, {V})")
    t = t.astype(np.int64)
    if not hasattr(res, "accepted"):
        return t, np.full(B, NO_ACCEPTED, dtype=np.int64), None
    a = np.asarray(res.accepted)
    why = None
    if a.dtype == bool or not np.issubdtype(a.dtype, np.integer):
        why = f"{name}.verify returned accepted of dtype {a.dtype}; it must be integer indices (int64)"
    elif a.shape != (B,):
        why = f"{name}.verify returned accepted of shape {a.shape} for {B} nodes; expected ({B},)"
    elif B:
        why = accepted_problem(t, a, k, candidates, f"{name}.verify returned ")
    if why:
        return t, np.full(B, BAD_ACCEPTED, dtype=np.int64), why
    return t, a.astype(np.int64), None


def accepted_problem(t: np.ndarray, a: np.ndarray, k: int, candidates, what: str = "") -> str | None:
    """Why the accepted indices ``a`` (n,) break their contract, or None: each must lie in ``[-1, k)`` and name
    the emitted token ``t`` (n,) among ``candidates`` (n, k) (None: only the range is checked); ``what``
    prefixes the message (e.g. ``"rrs.verify returned "``)."""
    if a.size and (a.min() < -1 or a.max() >= k):
        return (f"{what}accepted indices in [{a.min()}, {a.max()}]; they must lie in [-1, {k}) "
                "(-1 = residual token)")
    if candidates is not None and a.size:
        hit = np.flatnonzero(a >= 0)
        bad = hit[t[hit] != candidates[hit, a[hit]]]
        if bad.size:
            b = int(bad[0])
            return (f"{what}accepted[{b}] = {a[b]} but tokens[{b}] = {t[b]} != candidates[{b}, {a[b]}] = "
                    f"{candidates[b, a[b]]} ({bad.size} of the {a.size} rows of this call); accepted must be the index of the "
                    "emitted candidate (or -1 for a residual token), not a flag")
    return None


def check_accepted(t: np.ndarray, a: np.ndarray, k: int, candidates, what: str = "") -> None:
    """ValueError unless every accepted index ``a`` (n,) lies in ``[-1, k)`` and names the emitted token
    (:func:`accepted_problem`, whose message it raises)."""
    why = accepted_problem(t, a, k, candidates, what)
    if why:
        raise ValueError(why)


class NodeSampler:
    """Draw tokens from ``verifier`` at one node ``(p, q)`` with ``k`` candidates.

    Parameters
    ----------
    verifier : Verifier or any object with ``verify`` and ``drafting``
    p, q : array_like, shape (V,), float64
        Or ``p`` a one-node :class:`resispec._validation.Laws` and ``q=None``
        (checked once at the door, trusted here).
    k : int >= 1
    fast : bool, default True
        Use the table path when the verifier allows it.

    Calling ``sampler(rng, n)`` returns the (n,) int64 tokens (the
    :func:`exactness.certify_sampler` contract); :meth:`draws` also returns
    the accepted indices.

    A black box (not a built-in) whose ``handles_shared_nodes`` is ``True``
    declares that its ``verify`` spends O(V) a call on rows that share one node
    (``np.broadcast_to``, row stride 0) and does not write into ``P, Q``: it gets
    read-only broadcast views in batches of ``SHARED_ROWS`` rows (large batches,
    no copies), e.g. a wrapper of a built-in verifier or a GPU verifier.

    ``verify`` is called as ``verify(P, Q, c, rng, uniforms=U)`` when its
    signature takes ``uniforms`` (shared stream, table path, batched check),
    else as ``verify(P, Q, c, rng)`` (black box).  Built-in verifiers get
    read-only broadcast views of ``p, q``; any other verifier gets writable
    copies of ``P, Q`` (B, V) and ``c`` (B, k), so in-place normalisation is
    allowed and cannot corrupt the harness's arrays.  Anything ``verify``
    raises, and tokens of the wrong dtype or shape or outside ``[0, V)``, are
    an :class:`exactness.SubjectError` naming the cause (a ``ValueError``,
    ``TypeError`` or ``IndexError`` of a user's ``verify`` with the batch
    contract stated), chained from the original.  Accepted indices that break
    their contract (a pipeline drafting its own candidates) are replaced by
    ``BAD_ACCEPTED`` and the reason kept in ``accepted_note``: the tokens are
    still certified.
    """

    def __init__(self, verifier, p, q, k: int, *, fast: bool = True):
        verifier = as_numpy_verifier(verifier)
        if not callable(getattr(verifier, "verify", None)):
            raise TypeError(f"verifier must have a verify(p, q, candidates, rng) method, got {type(verifier).__name__}")
        p2, q2, _ = as_node(p, q)
        if p2.shape[0] != 1:
            raise ValueError(f"p and q must describe one node, shape (V,); got {p2.shape[0]} rows")
        self.verifier = verifier
        self.p, self.q = np.ascontiguousarray(p2[0]), np.ascontiguousarray(q2[0])
        self.k = check_k(k)
        self.V = self.p.size
        self.drafting = drafting_of(verifier)
        self.cand_law = candidate_law(verifier, q2)[0]
        self.table = accept_table(verifier, self.p, self.q, self.k) if fast else None
        self.fast_path = (fast_path_for(verifier, self.p, self.q, self.k)
                          if fast and self.table is None and isinstance(verifier, Verifier) else None)
        #: What the run-time recheck of the fast path compared (None before the first draws / generic path).
        self.guard: dict | None = None
        self.uses_uniforms = takes_uniforms(verifier)
        # a black box that declares handles_shared_nodes = True gets read-only broadcast views of the one node in
        # batches of SHARED_ROWS (its verify does O(V) work a call, not a row); any other gets writable copies
        self._shared = not _builtin(verifier) and getattr(verifier, "handles_shared_nodes", False) is True
        self._copies = not _builtin(verifier) and not self._shared
        self._laws = takes_laws(verifier, "verify")
        self._guarded = False
        #: Why ``verify``'s accepted indices were unusable (:func:`emitted_result`), first batch only; None if fine.
        self.accepted_note: str | None = None
        self._recheck = True    # False only on the timing copy of pilot_sampler
        self._calls = 0         # calls of _draws (chunks) so far
        if self.drafting != "without_replacement":  # iid candidates: one guided inverse CDF, same ids
            cdf = np.cumsum(self.cand_law)
            self._cand_cdf, self._cand_total, self._cand_last = GuidedCDF(cdf), cdf[-1], _last_positive(self.cand_law)
        if self.table is not None:
            a, r = self.table
            self._r_cdf, self._r_last = GuidedCDF(np.cumsum(r)), _last_positive(r)
            self._offsets = (np.arange(self.k) * self.V)[None, :]

    @property
    def path(self) -> str:
        """``"table"``, the fast path's name (:mod:`exactness.fast_paths`) or ``"generic"`` (O(V) ``verify``)."""
        if self.table is not None:
            return "table"
        return self.fast_path.name if self.fast_path is not None else "generic"

    def pilot_sampler(self) -> tuple[NodeSampler, float]:
        """``(copy, seconds)`` for timing a pilot: a copy that has paid its first call's recheck (and any
        compilation) and skips the per-call recheck, and the measured seconds of one per-chunk recheck
        (``RECHECK`` draws through ``verify`` and ``chain``; 0 off the fast paths), so that a plan of ``n`` draws
        costs about ``pilot(n) + ceil(n / CHUNK) * seconds`` (a 2,000-draw pilot would otherwise charge a
        chunk's recheck to 2,000 draws)."""
        import copy
        import time

        warm = copy.copy(self)
        warm.draws(np.random.default_rng(1), GUARD)
        t0 = time.perf_counter()
        fast = self.fast_path is not None or self.table is not None
        if fast:
            warm.draws(np.random.default_rng(2), RECHECK)
        per_chunk = time.perf_counter() - t0 if fast else 0.0
        quiet = copy.copy(warm)
        quiet._recheck = False
        if quiet.fast_path is not None:  # time the loops a long run uses (compiled), not the small-call ones
            quiet.fast_path = copy.copy(quiet.fast_path)
            quiet.fast_path.always_compiled = True
        # one untimed call first on every path: the process's first quiet call pays one-off costs (~0.13 s for
        # the table path: imports, compilation), which a 2,000-draw pilot charged to every draw (a 7.5e8-draw
        # plan for rrs read 6-8 hours instead of ~2 minutes and was refused)
        quiet.draws(np.random.default_rng(3), limits.PILOT if fast else 64)     # the pilot's size where draws are cheap
        return quiet, per_chunk

    def __call__(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.draws(rng, n).tokens

    def draws(self, rng: np.random.Generator, n: int) -> Draws:
        """``n`` draws: tokens (n,) int64 and accepted indices (n,) int64.

        Sampled in chunks of at most ``exactness.limits.CHUNK`` draws (memory O(CHUNK k) for
        the uniforms, plus 16 bytes per draw for the result); for ``n <=
        CHUNK`` the random stream is exactly that of one call.
        """
        chunk = limits.CHUNK
        if n <= chunk:
            return self._draws(rng, n)
        return concat_draws(self._draws(rng, min(chunk, n - s)) for s in range(0, n, chunk))

    def _draws(self, rng: np.random.Generator, n: int) -> Draws:
        k = self.k
        uc = rng.random((n, k))
        uv = rng.random((n, k + 1))
        fast_cand = getattr(self.fast_path, "candidates", None)
        # fast paths: GUARD draws of the first call, then RECHECK of every later call (chunk) through verify
        self._calls += 1
        if self._guarded:
            g = min(n, RECHECK) if ((self.fast_path is not None or self.table is not None) and self._recheck
                                    and rechecked(self._calls)) else 0
        else:
            g = min(n, GUARD)
        if fast_cand is None and self.drafting != "without_replacement":
            # = draw_node_candidates(self.cand_law, k, self.drafting, uc), id for id
            cand = np.minimum(self._cand_cdf.search((uc * self._cand_total).ravel()).reshape(n, k), self._cand_last)
        elif fast_cand is None:
            cand = draw_node_candidates(self.cand_law, k, self.drafting, uc)
        else:  # the path's O(k log V) successive sampling, rechecked against the reference on the first draws
            lazy = getattr(self.fast_path, "draw_lazy", None)
            lazy_out = lazy(uc, uv) if lazy is not None else None   # candidates drawn inside, only when reached
            cand = fast_cand(uc if lazy_out is None else uc[:g])
            if g and not np.array_equal(cand[:g], draw_node_candidates(self.cand_law, k, self.drafting, uc[:g])):
                raise RuntimeError(f"{self.path} path draws other candidates than draw_node_candidates; "
                                   "use NodeSampler(..., fast=False)")
        if self.table is None and self.fast_path is None:
            return self._generic(cand, uv, rng)
        if self.table is not None:
            out = self._table(cand, uv)
        elif fast_cand is not None and lazy_out is not None:
            out = Draws(*lazy_out)
        else:
            out = Draws(*self.fast_path.draw(cand, uv))
        if g:
            self._guarded = True
            ref = self._generic(cand[:g], uv[:g], rng)
            if not (np.array_equal(ref.tokens, out.tokens[:g]) and np.array_equal(ref.accepted, out.accepted[:g])):
                raise RuntimeError(f"{self.path} path disagrees with {type(self.verifier).__name__}.verify; "
                                   "use NodeSampler(..., fast=False)")
            gd = self.guard = dict(self.guard or {"path": self.path, "verify_draws": 0, "agreed": True,
                                                  "candidates_rechecked": fast_cand is not None})
            gd["verify_draws"] += g
            if self.fast_path is not None:
                a, r = self.fast_path.chain(cand[:g])
                err = check_against_chain(self.verifier, self.p, self.q, cand[:g], a, r)
                gd["chain_tuples"] = gd.get("chain_tuples", 0) + g
                gd["chain_max_diff"] = max(gd.get("chain_max_diff", 0.0), err)
        return out

    def _table(self, cand, uv) -> Draws:
        a, _ = self.table
        n, k = cand.shape
        acc = uv[:, :k] < a.ravel()[cand + self._offsets]
        hit = acc.any(axis=1)
        first = np.argmax(acc, axis=1)
        tokens = cand[np.arange(n), first]
        miss = ~hit
        if np.any(miss):
            r_cdf = self._r_cdf  # = _searchsorted_rows(cumsum(r), u, last), id for id
            tokens[miss] = np.minimum(r_cdf.search(uv[miss, k] * r_cdf.cdf[-1]), self._r_last)
        return Draws(tokens.astype(np.int64), np.where(hit, first, -1).astype(np.int64))

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """The batch-size classes of the generic path's ``verify`` calls (:func:`batch_cycle`), ascending."""
        return batch_cycle(self._row_cap, self._shared)[0]

    @property
    def _row_cap(self) -> int:
        return SHARED_ROWS if self._shared else max(1, _ELEMS // self.V)

    def _generic(self, cand, uv, rng) -> Draws:
        """``verify`` on the draws' candidates and uniforms, in calls whose rows cycle through the batch-size
        classes (:func:`batch_cycle`, from the smallest: a short run still calls the small sizes); each draw
        labelled with its call's class (``Draws.batch``)."""
        n, k = cand.shape
        sizes, cycle = batch_cycle(self._row_cap, self._shared)
        toks, accs, labels = [], [], np.empty(n, dtype=np.int8)
        s, i = 0, 0
        while s < n:
            j = cycle[i % len(cycle)]
            step = sizes[j]
            labels[s:s + step] = j
            i += 1
            c = cand[s:s + step]
            P = np.broadcast_to(self.p, (c.shape[0], self.V))
            Q = np.broadcast_to(self.q, (c.shape[0], self.V))
            if self._copies:
                P, Q, c_in = P.copy(), Q.copy(), c.copy()
            else:
                c_in = c
            if self._laws:  # resispec's own verify: the laws were checked at the door
                P, Q = Laws(P, Q), None
            check_deadline()          # past a cell's soft deadline (run_cell) no new call starts: RunOutOfTime
            try:
                if self.uses_uniforms:
                    res = self.verifier.verify(P, Q, c_in, rng, uniforms=uv[s:s + step])
                else:
                    res = self.verifier.verify(P, Q, c_in, rng)
            except SubjectError:
                raise
            except BaseException as e:   # the subject failed: a FAIL naming it, never "bad input"
                if passes_through(e):             # Ctrl-C, the harness's time limit
                    raise
                name = type(self.verifier).__name__
                cause = subject_cause(f"{name}.verify", e)
                if isinstance(e, (ValueError, TypeError, IndexError)) and (self._copies or self._shared):
                    kw = ", uniforms=U (B, k + 1)" if self.uses_uniforms else ""
                    cause = (
                        f"{name}.verify failed on a batch of B = {c.shape[0]} nodes ({cause}). "
                        f"The harness calls verify(p, q, candidates, rng{kw}) on batches: p and q of shape (B, V) = "
                        f"({c.shape[0]}, {self.V}) float64, candidates of shape (B, k) = ({c.shape[0]}, {k}) int64; "
                        "it must return .tokens and .accepted of shape (B,) int64. A verify written for one node "
                        "(p of shape (V,)) fails like this.")
                raise SubjectError(cause) from e
            t, a, why = emitted_result(res, c.shape[0], k, self.V, self.verifier, c)
            if why and self.accepted_note is None:
                self.accepted_note = why
            toks.append(t)
            accs.append(a)
            s += step
        if not toks:
            return Draws(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), labels)
        return Draws(np.concatenate(toks), np.concatenate(accs).astype(np.int64), labels)
