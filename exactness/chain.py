"""Chain verifiers in the style of serving-engine rejection samplers, and decoders built on them.

The kernel signature (batched, as vLLM / SGLang / FlashInfer rejection samplers are)::

    kernel(target_probs, draft_probs, draft_ids, rng) -> out
        target_probs : ndarray (B, gamma + 1, V) float64   # target law after each draft prefix
        draft_probs  : ndarray (B, gamma, V) float64, or None (one-hot drafts, e.g. n-gram / EAGLE argmax)
        draft_ids    : ndarray (B, gamma) int64            # the drafted tokens
        rng          : numpy.random.Generator              # the kernel's own random stream
        out          : ndarray (B, gamma + 1) int64        # per request: the accepted prefix of draft_ids,
                                                           # then ONE token (residual or bonus), then -1 padding

Row ``b`` of ``target_probs`` holds ``p(. | context, d_1..d_i)`` at index ``i``
(``i = 0..gamma``); row ``i`` of ``draft_probs`` the law ``d_{i+1}`` was drawn
from.  A per-request kernel (shapes without ``B``, returning the accepted
prefix plus one token, length ``1..gamma+1``) is turned into this form by
:func:`per_request`.

Built-in references (both exact; certified in ``tests/test_decoder_chain.py``):

- :func:`token_chain_kernel`: token-level chain verification (Leviathan et al.
  2023, arXiv 2211.17192, Algorithm 1): accept ``d_i`` with probability
  ``min(1, p_i(d_i) / q_i(d_i))`` until the first rejection, then draw from the
  residual ``norm(max(p_i - q_i, 0))``; after a full path the bonus token from
  ``p_gamma``.
- :func:`block_kernel`: block verification (Sun et al. 2024, arXiv 2403.10444,
  Algorithm "block verification"), derived from the paper's description: weights
  ``w_0 = 1``, ``w_i = min(1, w_{i-1} p_{i-1}(d_i) / q_{i-1}(d_i))``; for ``i < gamma``
  ``h_i = s_i / (s_i + 1 - w_i)`` with ``s_i = sum_x max(w_i p_i(x) - q_i(x), 0)``,
  ``h_gamma = w_gamma``; with ``eta_i ~ U(0, 1)`` the accepted length ``tau`` is the
  LAST ``i`` with ``eta_i <= h_i`` (0 if none); the extra token is drawn from
  ``p_gamma`` when ``tau = gamma``, else from ``norm(max(w_tau p_tau - q_tau, 0))``.

:class:`ChainDecoder` (via :func:`chain_decoder`) turns a kernel plus a
draft/target model (any object with ``laws(contexts) -> (p, q)``, e.g.
``simulators.autoregressive.MarkovPair``) into a decoder for
:func:`exactness.certify_decoder`; :func:`chain_target` gives the matching
``target``.
"""

from __future__ import annotations

import numpy as np

from resispec.sampling import _inverse_cdf

#: Below this total a residual is treated as empty and the target row is used instead
#: (its weight in the output law is < 1e-12: a rejection there has probability ~0).
RESIDUAL_EPS = 1e-12


def _sample_rows(law: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draw, token-id order: law (B, V) float64, u (B,) in [0, 1) -> (B,) int64."""
    return _inverse_cdf(np.ascontiguousarray(law, dtype=np.float64), u)


def _normalise_or(res: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    s = res.sum(axis=1, keepdims=True)
    return np.where(s > RESIDUAL_EPS, res / np.where(s > RESIDUAL_EPS, s, 1.0), fallback)


def _draft_q(draft_probs, draft_ids, V: int) -> np.ndarray:
    """(B, gamma, V) draft laws; one-hot rows at ``draft_ids`` when ``draft_probs`` is None."""
    if draft_probs is not None:
        return np.asarray(draft_probs, dtype=np.float64)
    B, g = draft_ids.shape
    q = np.zeros((B, g, V))
    np.put_along_axis(q, draft_ids[:, :, None], 1.0, axis=2)
    return q


def _emit(draft_ids: np.ndarray, n_acc: np.ndarray, token: np.ndarray) -> np.ndarray:
    """(B, gamma + 1): the first ``n_acc`` drafts, then ``token``, then -1."""
    B, g = draft_ids.shape
    out = np.full((B, g + 1), -1, dtype=np.int64)
    cols = np.arange(g + 1)[None, :]
    out[:, :g] = np.where(cols[:, :g] < n_acc[:, None], draft_ids, -1)
    out[np.arange(B), n_acc] = token
    return out


def _rule(name):
    def deco(f):
        f.rule = name
        return f
    return deco


@_rule("rrs")
def token_chain_kernel(target_probs, draft_probs, draft_ids, rng: np.random.Generator) -> np.ndarray:
    """Token-level chain verification (Leviathan et al. 2023, arXiv 2211.17192).

    Parameters and return value: see the module docstring (kernel signature).
    Uniforms: ``rng.random((B, gamma))`` decides acceptances, then
    ``rng.random(B)`` draws the extra token (inverse CDF in token-id order).
    """
    p = np.asarray(target_probs, dtype=np.float64)
    d = np.asarray(draft_ids, dtype=np.int64)
    B, g1, V = p.shape
    g = g1 - 1
    q = _draft_q(draft_probs, d, V)
    rows = np.arange(B)[:, None]
    pos = np.arange(g)[None, :]
    pd = p[rows, pos, d]
    qd = q[rows, pos, d]
    ratio = np.where(qd > 0, pd / np.where(qd > 0, qd, 1.0), 0.0)
    acc = rng.random((B, g)) < np.minimum(1.0, ratio)
    n_acc = np.cumprod(acc, axis=1).sum(axis=1)
    at = np.minimum(n_acc, g - 1)
    p_at, q_at = p[np.arange(B), at], q[np.arange(B), at]
    residual = _normalise_or(np.maximum(p_at - q_at, 0.0), p_at)
    law = np.where((n_acc == g)[:, None], p[:, g], residual)
    return _emit(d, n_acc, _sample_rows(law, rng.random(B)))


def block_weights(p: np.ndarray, q: np.ndarray, d: np.ndarray):
    """Block-verification weights ``w`` (B, gamma + 1) and stop probabilities ``h`` (B, gamma + 1).

    ``h[:, 0]`` is unused (0).  See the module docstring for the rule (Sun et al. 2024).
    """
    B, g1, V = p.shape
    g = g1 - 1
    w = np.ones((B, g1))
    h = np.zeros((B, g1))
    ar = np.arange(B)
    for i in range(1, g1):
        x = d[:, i - 1]
        pd, qd = p[ar, i - 1, x], q[ar, i - 1, x]
        w[:, i] = np.minimum(1.0, w[:, i - 1] * np.where(qd > 0, pd / np.where(qd > 0, qd, 1.0), 0.0))
        if i < g:
            s = np.maximum(w[:, i, None] * p[:, i] - q[:, i], 0.0).sum(axis=1)
            den = s + 1.0 - w[:, i]
            h[:, i] = np.where(den > 0, s / np.where(den > 0, den, 1.0), 1.0)
        else:
            h[:, i] = w[:, i]
    return w, h


@_rule("block")
def block_kernel(target_probs, draft_probs, draft_ids, rng: np.random.Generator) -> np.ndarray:
    """Block verification (Sun et al. 2024, arXiv 2403.10444), exact for every gamma.

    Parameters and return value: see the module docstring.  Uniforms:
    ``rng.random((B, gamma))`` for ``eta``, then ``rng.random(B)`` for the extra token.
    """
    p, q, d, w, tau = block_stop(target_probs, draft_probs, draft_ids, rng)
    return _emit(d, tau, _sample_rows(_block_residual(p, q, w, tau), rng.random(p.shape[0])))


def block_stop(target_probs, draft_probs, draft_ids, rng: np.random.Generator):
    """Block verification's stop stage: ``(p (B, g+1, V), q (B, g, V), ids (B, g), w, tau (B,))``.

    ``tau`` is the largest ``i`` with ``eta_i <= h_i`` (0 if none), ``eta = rng.random((B, g))``
    (Sun et al. 2024, arXiv 2403.10444); shared by :func:`block_kernel` and its mutants.
    """
    p = np.asarray(target_probs, dtype=np.float64)
    d = np.asarray(draft_ids, dtype=np.int64)
    B, g1, V = p.shape
    g = g1 - 1
    q = _draft_q(draft_probs, d, V)
    w, h = block_weights(p, q, d)
    hit = rng.random((B, g)) <= h[:, 1:]
    tau = np.where(hit.any(axis=1), g - np.argmax(hit[:, ::-1], axis=1), 0)
    return p, q, d, w, tau


def _block_residual(p, q, w, tau):
    B, g1, V = p.shape
    g = g1 - 1
    ar = np.arange(B)
    at = np.minimum(tau, g - 1)
    p_at = p[ar, at]
    res = _normalise_or(np.maximum(w[ar, at, None] * p_at - q[ar, at], 0.0), p_at)
    return np.where((tau == g)[:, None], p[:, g], res)


def per_request(kernel):
    """Wrap a per-request kernel ``f(target_probs (gamma+1, V), draft_probs (gamma, V) or None,
    draft_ids (gamma,), rng) -> (a + 1,) int64`` (accepted prefix plus one token) as a batched kernel.

    Raises ``ValueError`` (when called) if ``f`` returns a length outside ``1..gamma+1``
    or ids that do not start with the accepted draft prefix.
    """
    def batched(target_probs, draft_probs, draft_ids, rng):
        B, g = np.asarray(draft_ids).shape
        out = np.full((B, g + 1), -1, dtype=np.int64)
        for b in range(B):
            r = np.asarray(kernel(target_probs[b], None if draft_probs is None else draft_probs[b],
                                  draft_ids[b], rng.gens[b] if isinstance(rng, _RowStreams) else rng))
            if r.ndim != 1 or not 1 <= r.size <= g + 1:
                raise ValueError(f"chain kernel returned shape {r.shape}; it must return the accepted prefix "
                                 f"plus one token, a (a + 1,) int64 array with 0 <= a <= gamma = {g}")
            if not np.array_equal(r[:-1], draft_ids[b][: r.size - 1]):
                raise ValueError("chain kernel returned tokens that do not start with the accepted draft "
                                 "prefix; return draft_ids[:a] followed by one token")
            out[b, : r.size] = r
        return out

    batched.__name__ = getattr(kernel, "__name__", "per_request_kernel")
    batched.__per_request__ = True
    batched.rule = getattr(kernel, "rule", None)
    if getattr(kernel, "plan", None) is not None:   # the per-request plan it declares (ChainDecoder.kernel_plan);
        batched.plan = kernel.plan                  # passed on as declared: one that is not callable is a FAIL there
    return batched


def _is_markov(model) -> bool:
    return getattr(model, "state_kind", None) == "last" and all(hasattr(model, a) for a in ("P", "Q", "p0", "q0"))


def model_laws(model, contexts: list) -> tuple[np.ndarray, np.ndarray]:
    """``(p, q)`` (B, V) float64 at each context (a list of int sequences); vectorised for Markov pairs."""
    if _is_markov(model):
        last = np.array([c[-1] if len(c) else -1 for c in contexts], dtype=np.int64)
        m = last >= 0
        p = np.where(m[:, None], model.P[np.maximum(last, 0)], model.p0)
        q = np.where(m[:, None], model.Q[np.maximum(last, 0)], model.q0)
        return p, q
    p, q = model.laws([tuple(int(t) for t in c) for c in contexts])
    return np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)


def chain_target(model):
    """The ``target(contexts (B, L) int64) -> (B, V) float64`` of a draft/target model, for certify_decoder."""
    def target(contexts):
        ctx = np.asarray(contexts)
        return model_laws(model, [row for row in ctx])[0]

    return target


def _vocab(model, prompts: np.ndarray) -> int:
    """V of a draft/target model: ``vocab_size``, ``P.shape[1]`` (Markov) or the width of its laws."""
    V = getattr(model, "vocab_size", None)
    if V is None and _is_markov(model):
        V = model.P.shape[1]
    if V is None:
        V = model_laws(model, [prompts[0] if len(prompts) else []])[0].shape[1]
    return int(V)


def check_sample_args(model, prompts, new_tokens) -> np.ndarray:
    """Check ``sample``'s ``prompts`` (B, L) integer ids in [0, V) and ``new_tokens`` (int >= 1).

    Shared by :class:`ChainDecoder` and :class:`exactness.tree_decoder.TreeDecoder`.
    Returns the prompts as (B, L) int64.  Raises TypeError for a non-integer prompt dtype,
    ValueError for prompts not 2-D, ids outside [0, V) or ``new_tokens`` not an integer >= 1.
    """
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, (int, np.integer)) or new_tokens < 1:
        raise ValueError(f"new_tokens must be an integer >= 1 (tokens to generate per prompt), got {new_tokens!r}")
    arr = np.asarray(prompts)
    if arr.ndim != 2:
        raise ValueError(f"prompts must be a 2-D (B, L) array of token ids (one row per prompt), got shape "
                         f"{arr.shape}; wrap a single prompt as [prompt]")
    if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"prompts must hold integer token ids, got dtype {arr.dtype}; pass an int64 array")
    arr = arr.astype(np.int64, copy=False)
    if arr.size:
        V = _vocab(model, arr)
        bad = (arr < 0) | (arr >= V)
        if bad.any():
            b, j = map(int, np.argwhere(bad)[0])
            raise ValueError(f"prompts[{b}, {j}] = {int(arr[b, j])} lies outside the vocabulary [0, {V}); "
                             "give token ids the model knows")
    return arr


def check_rng(rng, B: int, per_row: bool):
    """``rng`` must be a numpy Generator (or, with ``per_row``, a list of B of them); TypeError otherwise."""
    if isinstance(rng, np.random.Generator):
        return rng
    if per_row and isinstance(rng, (list, tuple)):
        if len(rng) == B and all(isinstance(r, np.random.Generator) for r in rng):
            return list(rng)
    what = f"a numpy Generator or a list of B = {B} of them (one per row)" if per_row else "a numpy Generator"
    n = f" of length {len(rng)}" if isinstance(rng, (list, tuple)) else ""
    raise TypeError(f"rng must be {what}, e.g. numpy.random.default_rng(0); got {type(rng).__name__}{n}")


def _kernel_name(kernel) -> str:
    return getattr(kernel, "__name__", type(kernel).__name__)


def _own(cls, message: str) -> Exception:
    """``cls(message)`` marked as naming the kernel's own failure (``exactness._checks.subject_cause`` then reports
    the message itself, not "decoder.sample raised ValueError: ...")."""
    err = cls(message)
    err.names_itself = True
    return err


def _call_kernel(kernel, tp, dp, di, rng) -> np.ndarray:
    """Run a chain kernel and check its output: (A, g + 1) integer ids in [-1, V), prefix = ``di``.

    Raises ValueError/TypeError (chained from the kernel's own exception) naming the kernel and its
    signature; :class:`exactness.SubjectError` when the kernel calls ``sys.exit`` (raises ``SystemExit``);
    TypeError for a non-integer output; ValueError for a bad shape, ids, or prefix.
    """
    name = _kernel_name(kernel)
    A, g = di.shape
    V = tp.shape[-1]
    if getattr(kernel, "__per_request__", False):   # per_request's wrapper: the user's kernel saw one row at a time
        call = (f"called per row as kernel(target_probs ({g + 1}, {V}) float64, draft_probs ({g}, {V}) float64 or "
                f"None, draft_ids ({g},) int64, rng) through per_request, see exactness.chain")
    else:
        call = (f"called as kernel(target_probs ({A}, {g + 1}, {V}) float64, draft_probs ({A}, {g}, {V}) float64 "
                f"or None, draft_ids ({A}, {g}) int64, rng), see exactness.chain")
    try:   # copies: a kernel may write into its inputs (GPU samplers reuse buffers); the harness reads them after
        out = np.asarray(kernel(tp.copy(), None if dp is None else dp.copy(), di.copy(), rng))
    except Exception as exc:
        from ._checks import exception_line

        cls = ValueError if isinstance(exc, ValueError) else TypeError
        raise _own(cls, f"chain kernel {name} raised {exception_line(exc)} ({call})") from exc
    except BaseException as exc:     # sys.exit(2), GeneratorExit, asyncio.CancelledError in a kernel: a FAIL naming it
        from ._checks import SubjectError, passes_through, subject_cause

        if passes_through(exc):      # Ctrl-C, the harness's time limit
            raise
        raise SubjectError(f"{subject_cause(f'chain kernel {name}', exc)} ({call})") from exc
    if out.shape != (A, g + 1):
        raise _own(ValueError, f"chain kernel {name} returned shape {out.shape}, expected ({A}, {g + 1})")
    if out.dtype == bool or not np.issubdtype(out.dtype, np.integer):
        raise _own(TypeError, f"chain kernel {name} returned dtype {out.dtype}; it must return integer token ids "
                   "(int64), -1 as padding")
    out = out.astype(np.int64, copy=False)
    if np.any(out >= V) or np.any(out < -1):
        bad = out[(out >= V) | (out < -1)][0]
        raise _own(ValueError, f"chain kernel {name} returned token id {int(bad)}, outside [0, {V}) (and -1 "
                   "padding)")
    k = (out >= 0).sum(axis=1)
    if np.any(k < 1) or np.any(np.cumprod(out >= 0, axis=1).sum(axis=1) != k):
        raise _own(ValueError, f"chain kernel {name}: output rows must hold the accepted prefix plus one token, "
                   "then -1 padding (at least one token per row)")
    cols = np.arange(g)[None, :]
    wrong = (cols < (k - 1)[:, None]) & (out[:, :g] != di)
    if wrong.any():
        b = int(np.flatnonzero(wrong.any(axis=1))[0])
        raise _own(ValueError, f"chain kernel {name}: row {b} returned {out[b].tolist()}, whose accepted prefix is "
                   f"not draft_ids[{b}] = {di[b].tolist()}; return draft_ids[:a] followed by one token")
    return out


class _Contexts:
    """Growing contexts of a batch: ``seq`` (A, W) int64 padded with -1 beyond ``length`` (A,)."""

    def __init__(self, model, seq, length):
        self.model, self.seq, self.length = model, seq.copy(), length.copy()
        self.markov = _is_markov(model)

    def laws(self):
        if self.markov:
            last = np.where(self.length > 0, self.seq[np.arange(self.seq.shape[0]), np.maximum(self.length - 1, 0)], -1)
            m = last >= 0
            idx = np.maximum(last, 0)
            return (np.where(m[:, None], self.model.P[idx], self.model.p0),
                    np.where(m[:, None], self.model.Q[idx], self.model.q0))
        return model_laws(self.model, [r[:n] for r, n in zip(self.seq, self.length)])

    def push(self, tokens):
        if self.seq.shape[1] <= int(self.length.max()):
            self.seq = np.concatenate([self.seq, np.full((self.seq.shape[0], 1), -1, dtype=np.int64)], axis=1)
        self.seq[np.arange(self.seq.shape[0]), self.length] = tokens
        self.length = self.length + 1


class _RowStreams:
    """One generator per batch row behind the ``rng.random(shape)`` a chain kernel calls.

    ``random((B, ...))`` draws row b's values from generator b alone, so a row's draws do not
    depend on the other rows of its batch; :meth:`rows` selects the still-active rows.
    Kernels handed this must draw through ``random`` only (as the built-in ones do).
    """

    def __init__(self, gens):
        self.gens = list(gens)

    def rows(self, idx) -> "_RowStreams":
        return _RowStreams([self.gens[i] for i in idx])

    def random(self, size=None):
        size = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
        if not size or size[0] != len(self.gens):
            raise ValueError(f"per-row random streams: the first axis of random({size}) must be the batch "
                             f"({len(self.gens)} rows)")
        return np.stack([g.random(size[1:]) for g in self.gens]) if self.gens else np.zeros(size)

    def __getattr__(self, name):
        raise AttributeError(f"the chain kernel called rng.{name}: with one generator per row (per_row_rng) a "
                             "kernel may draw through rng.random((B, ...)) only; draw uniforms with rng.random, or "
                             "set per_row_rng = False on the decoder")


class ChainDecoder:
    """A speculative decoder: draft ``gamma`` tokens from ``q``, verify them with a chain ``kernel``.

    Satisfies the :func:`exactness.certify_decoder` contract: ``sample(prompts (B, L) int64,
    new_tokens, rng) -> (B, new_tokens) int64`` and ``__call__(prompt (L,), new_tokens, rng)
    -> (new_tokens,)``.  Reports its draft law through ``draft_law(contexts (B, L)) -> (B, V)``
    (used by the harness for the draft-to-target ratio order).

    Random streams: ``rng.spawn(2)`` gives one stream for drafting and one for the kernel
    (:meth:`streams`); subclasses in :mod:`exactness.decoder_mutants` override the hooks
    :meth:`streams`, :meth:`draft`, :meth:`verify_inputs` to plant bugs.
    """

    #: ``sample`` takes a list of B Generators as ``rng``, one per row (checked by ``certify_decoder``).
    per_row_rng = True
    #: Set by ``certify_decoder`` around its main draw when the kernel declares a plan: every kernel call's
    #: outcome is scored under that plan (``exactness.plan_check``, check ``plan_sampler``).
    plan_collector = None

    def __init__(self, kernel, model, *, gamma: int = 2, one_hot: bool = False, rule="kernel"):
        if not callable(kernel):
            raise TypeError(f"kernel must be a callable chain verifier, got {type(kernel).__name__}")
        if isinstance(gamma, bool) or not isinstance(gamma, (int, np.integer)) or gamma < 1:
            raise ValueError(f"gamma must be an integer >= 1 (draft tokens per target call), got {gamma!r}")
        if not hasattr(model, "laws"):
            raise TypeError("model must have laws(contexts) -> (p, q), e.g. simulators.autoregressive.MarkovPair")
        self.kernel, self.model, self.gamma, self.one_hot = kernel, model, int(gamma), bool(one_hot)
        self.name = f"chain[{getattr(kernel, '__name__', 'kernel')}, gamma={self.gamma}]"
        #: the node rule (``sample_events``): "rrs" (token-level chain), "block", or None (unknown)
        self.rule = getattr(kernel, "rule", None) if rule == "kernel" else rule
        #: the q its decisions were verified with: the draft law, or a point mass (one_hot)
        self.events_q = "one_hot" if self.one_hot else "draft_law"

    # -- hooks -------------------------------------------------------------
    def streams(self, rng: np.random.Generator):
        """(draft stream, kernel stream): independent children of ``rng``."""
        a, b = rng.spawn(2)
        return a, b

    def draft(self, q: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Draft one token per row from ``q`` (B, V) with uniforms ``u`` (B,): inverse CDF."""
        return _sample_rows(q, u)

    def verify_inputs(self, p, q, d):
        """What the kernel is handed: ``(target_probs, draft_probs or None, draft_ids)``."""
        return p, (None if self.one_hot else q), d

    @property
    def kernel_plan(self):
        """The kernel's declared per-request plan, ``plan(target_probs (g+1, V), draft_probs (g, V), draft_ids
        (g,)) -> resispec.pathlevel.base.PathPlan`` (one-hot draft rows when drafts are one-hot), or None."""
        plan = getattr(self.kernel, "plan", None)
        return plan if callable(plan) else None

    def _score_plan(self, tp, dp, di, out) -> None:
        """Feed each call's outcome ``(accepted count, extra token)`` to :attr:`plan_collector`."""
        col = self.plan_collector
        tp = np.asarray(tp, dtype=np.float64)
        q = _draft_q(dp, di, tp.shape[-1])                 # (A, g, V): one-hot rows when dp is None
        k = (out >= 0).sum(axis=1)
        for b in range(out.shape[0]):
            if col.error:
                return
            args = (tp[b], q[b], di[b])
            col.observe(args, int(k[b] - 1), int(out[b, k[b] - 1]), di[b].tolist(),
                        key=(tp[b].tobytes(), q[b].tobytes(), di[b].tobytes()))

    # -- the decoder ---------------------------------------------------------
    def draft_law(self, contexts) -> np.ndarray:
        """The draft law ``q`` (B, V) float64 reported to the verifier at each context (B, L)."""
        return model_laws(self.model, [row for row in np.asarray(contexts)])[1]

    def sample(self, prompts, new_tokens: int, rng) -> np.ndarray:
        """``new_tokens`` tokens per prompt row: (B, L) int64 -> (B, new_tokens) int64.

        ``rng``: one ``numpy.random.Generator`` for the batch, or a list of B of them, one per row
        (``per_row_rng``: row b then draws only from ``rng[b]``, so it comes out the same in any batch).

        Raises
        ------
        TypeError
            ``rng`` not a Generator (or list of B); non-integer prompts; a kernel returning a
            non-integer dtype, or raising (chained, naming the kernel and its call signature).
        ValueError
            Prompts not 2-D or with ids outside [0, V); ``new_tokens`` < 1; a kernel output of
            the wrong shape, with ids outside [-1, V), or whose accepted prefix is not ``draft_ids``.
        """
        return self._run(prompts, new_tokens, rng, False)[0]

    def sample_events(self, prompts, new_tokens: int, rng):
        """As :meth:`sample`, plus the decisions: ``(tokens (B, new_tokens) int64, DecoderEvents)``.

        Read off the kernel's output per target call: each accepted draft an entry with candidate
        ``[d_i]`` and ``accepted = 0``; the token after the accepted prefix an entry with candidate
        ``[d_a]`` and ``accepted = -1`` (a rejection) or, after a full path, no candidates (the bonus
        draw).  Entries past ``new_tokens`` are left out.
        """
        return self._run(prompts, new_tokens, rng, True)

    def _run(self, prompts, new_tokens, rng, events):
        from .decoder_events import DecoderEvents

        prompts = check_sample_args(self.model, prompts, new_tokens)
        B, L = prompts.shape
        g = self.gamma
        rng = check_rng(rng, B, self.per_row_rng)
        if isinstance(rng, np.random.Generator):
            drng, krng = self.streams(rng)
        else:
            pairs = [self.streams(r) for r in rng]
            drng, krng = _RowStreams([a for a, _ in pairs]), _RowStreams([b for _, b in pairs])
        seq = np.concatenate([prompts, np.full((B, new_tokens + g + 1), -1, dtype=np.int64)], axis=1)
        length = np.full(B, L, dtype=np.int64)
        active = np.arange(B)
        log, calls = [], 0
        while active.size:
            A = active.size
            dr, kr = (drng, krng) if isinstance(drng, np.random.Generator) else (drng.rows(active), krng.rows(active))
            u = dr.random((A, g))
            d = np.empty((A, g), dtype=np.int64)
            ps, qs = [], []
            ctx = _Contexts(self.model, seq[active], length[active])
            for i in range(g):
                p, q = ctx.laws()
                ps.append(p)
                qs.append(q)
                d[:, i] = self.draft(q, u[:, i])
                ctx.push(d[:, i])
            ps.append(ctx.laws()[0])
            tp, dp, di = self.verify_inputs(np.stack(ps, axis=1), np.stack(qs, axis=1), d)
            out = _call_kernel(self.kernel, tp, dp, np.asarray(di, dtype=np.int64), kr)
            if self.plan_collector is not None:
                self._score_plan(tp, dp, np.asarray(di, dtype=np.int64), out)
            k = (out >= 0).sum(axis=1)
            if events:
                log.append((active, length[active] - L, d, k - 1, out, calls + np.arange(A)))
                calls += A
            cols = length[active, None] + np.arange(g + 1)[None, :]
            keep = out >= 0
            seq[np.repeat(active, g + 1)[keep.ravel()], cols[keep]] = out[keep]
            length[active] += k
            active = active[length[active] - L < new_tokens]
        tokens = seq[:, L:L + new_tokens].copy()
        if not events:
            return tokens, None
        parts = []
        for rows, start, d, n_acc, out, cid in log:
            i = np.arange(g + 1)[None, :]
            keep = i <= n_acc[:, None]                            # accepted prefix + the one extra token
            r, j = np.nonzero(keep)
            cand = np.where(j < g, d[r, np.minimum(j, g - 1)], -1)[:, None]
            parts.append(DecoderEvents(rows[r], start[r] + j, cand, np.where(j < n_acc[r], 0, -1), out[r, j],
                                       cid[r]))
        ev = DecoderEvents.concat(parts)
        return tokens, ev.take(ev.position < new_tokens)

    def __call__(self, prompt, new_tokens: int, rng: np.random.Generator) -> np.ndarray:
        return self.sample(np.asarray(prompt, dtype=np.int64)[None, :], new_tokens, rng)[0]

    def __repr__(self) -> str:
        return self.name


def chain_decoder(kernel, model, *, gamma: int = 2, one_hot: bool = False) -> ChainDecoder:
    """A decoder for :func:`exactness.certify_decoder` from a chain ``kernel`` and a draft/target ``model``.

    Parameters
    ----------
    kernel : callable
        Batched chain verifier (module docstring); wrap a per-request one with :func:`per_request`.
    model : object with ``laws(contexts) -> (p (B, V), q (B, V))``
        E.g. ``simulators.autoregressive.MarkovPair.random(rng, 8)``.
    gamma : int >= 1
        Draft tokens per target call.
    one_hot : bool
        Hand the kernel ``draft_probs=None`` (one-hot drafts); drafts are still sampled from ``q``.

    Returns
    -------
    ChainDecoder

    Raises
    ------
    TypeError, ValueError
        Kernel not callable, model without ``laws``, ``gamma`` not an integer >= 1.
    """
    return ChainDecoder(kernel, model, gamma=gamma, one_hot=one_hot)
