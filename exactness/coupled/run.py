"""Run a kernel and its reference rule on the same candidates and coins; hard time limits for both certifiers."""

from __future__ import annotations

import inspect
import traceback
from types import SimpleNamespace

import numpy as np

from resispec.verifiers.base import law_from_chain
from resispec.sampling import _inverse_cdf

from .._checks import SubjectError, passes_through
from ..certificate import call_subject, subject_cause
from ..sampling import _builtin, _checked_result, _last_positive, _searchsorted_rows, accept_table, as_numpy_verifier
from .conventions import COIN_NAMES, Coins, decisions, kernel_kwargs


def check_time_limit(time_limit) -> float | None:
    """A run's ``time_limit``: None (no limit) or seconds in ``(0, MAX_TIMEOUT / 2]`` (its :func:`hard_limit`, up to
    twice it, stays within ``exactness._timeout.MAX_TIMEOUT``); else ValueError naming ``time_limit``."""
    from .._timeout import MAX_TIMEOUT

    if time_limit is not None and (isinstance(time_limit, bool) or not isinstance(time_limit, (int, float))
                                   or not 0 < time_limit <= MAX_TIMEOUT / 2):
        raise ValueError(f"time_limit must be a number of seconds in (0, {MAX_TIMEOUT / 2:g}] or None (no limit), "
                         f"got {time_limit!r}")
    return time_limit


def hung_call(exc: BaseException, names: dict) -> str | None:
    """The subject's call a ``TimeLimitExceeded`` interrupted: the first of ``names`` (function name ->
    label) found in its traceback, innermost first; None if none."""
    frames = [f.name for f in traceback.extract_tb(exc.__traceback__)]
    for fn in reversed(frames):
        if fn in names:
            return names[fn]
    return None


def takes_coins(kernel, convention: str) -> bool | None:
    """Whether ``kernel.verify`` accepts the keyword coins of ``convention`` (``uniforms=`` for ``resispec``;
    ``uniform_samples=`` and ``uniform_samples_for_final_sampling=`` for ``sglang``; always True for
    ``generator``); None when its signature cannot be read (then it is assumed to)."""
    names = COIN_NAMES[convention]
    if not names:
        return True
    try:
        params = inspect.signature(_verify_fn(kernel)).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    ok = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return all(n in params and params[n].kind in ok for n in names)


def _verify_fn(kernel):
    fn = getattr(kernel, "verify", None)
    if callable(fn):
        return fn
    if callable(kernel):
        return kernel
    raise TypeError(f"kernel must have a verify(p, q, candidates, rng, ...) method or be callable, "
                    f"got {type(kernel).__name__}")


#: The cause of a kernel that writes into the read-only views the harness passes (``copies=False``): the
#: subject misbehaving (a FAIL, exit 1), with the option that gives it writable copies.
WRITES_INPUTS = ("kernel {name}.verify wrote into its read-only inputs ({exc}): certify_coupled passes p, q, "
                 "candidates and the coins as read-only views, without copying (one node's p, q broadcast to all B "
                 "rows, row stride 0); copies=True (CLI: --copies) gives the kernel writable (B, V) copies")


def read_result(res, what: str):
    """``res`` with its ``.tokens`` and ``.accepted`` read once, as a namespace (``res`` itself when it has no
    ``.tokens``, so the contract check names its type).

    A property of the result that raises (or calls ``sys.exit``) is the subject misbehaving:
    :class:`exactness.SubjectError` ``"<what> returned a R whose .tokens raised RuntimeError: ..."``.
    """
    vals = {}
    for attr in ("tokens", "accepted"):
        try:
            vals[attr] = getattr(res, attr)
        except AttributeError:
            pass
        except BaseException as exc:
            if passes_through(exc):             # Ctrl-C, the harness's time limit
                raise
            raise SubjectError(subject_cause(f"{what} returned a {type(res).__name__} whose .{attr}", exc)) from exc
    return SimpleNamespace(**vals) if "tokens" in vals else res


def _read_only(x):
    v = np.asarray(x).view()
    v.flags.writeable = False
    return v


def run_kernel(kernel, p, q, c, coins: Coins, *, copies: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Call ``kernel.verify(p, q, c, rng, **coins)`` as the convention says; validated ``(tokens, accepted)``.

    Parameters
    ----------
    kernel : object with ``verify`` (or a callable with that signature)
    p, q : ndarray, shape (B, V), float64
    c : ndarray, shape (B, k), int64
    coins : Coins
        ``resispec``: passes ``uniforms=``; ``sglang``: ``uniform_samples=`` and
        ``uniform_samples_for_final_sampling=``; ``generator``: a seeded
        ``numpy.random.Generator`` as ``rng``.
    copies : bool
        True: pass writable copies (a kernel may normalise in place).
        False: pass read-only views, no copy (``p, q`` may be one node
        broadcast to B rows, row stride 0); a kernel that writes into them
        misbehaves (:class:`exactness.SubjectError` naming ``copies=True``).

    Returns
    -------
    tokens, accepted : ndarray, shape (B,), int64

    Raises
    ------
    exactness.SubjectError
        The kernel raised or called ``sys.exit`` (chained from its exception), wrote into the read-only
        views of ``copies=False`` (the cause names ``copies=True``), returned the wrong type, dtype or
        shape, a result whose ``.tokens`` / ``.accepted`` raise, ids outside ``[0, V)``, no ``.accepted``,
        or an ``accepted`` that is not the index of the emitted candidate: the cause names
        ``<Kernel>.verify`` and what it did.
    """
    kernel = as_numpy_verifier(kernel)
    fn = _verify_fn(kernel)
    B, k = c.shape
    rng, kw = kernel_kwargs(coins)
    # candidates and coins are (B, k)-sized: the kernel always gets its own copies, so a kernel that
    # writes into them (through torch.as_tensor, or by flipping the writeable flag) cannot change what
    # the reference decides from; p, q (B, V) are read-only views when copies=False, checked by the caller
    c_k = np.array(c)
    if copies:
        p, q = np.array(p), np.array(q)
        kw = {n: np.array(a) for n, a in kw.items()}
    else:
        p, q, c_k = _read_only(p), _read_only(q), _read_only(c_k)
        kw = {n: _read_only(np.array(a)) for n, a in kw.items()}
    try:
        res = fn(p, q, c_k, rng, **kw)
    except BaseException as exc:
        if passes_through(exc):             # Ctrl-C, the harness's time limit
            raise
        call = ", ".join(["p", "q", "candidates", "rng"] + [f"{n}=..." for n in kw])
        if not copies and isinstance(exc, ValueError) and "read-only" in str(exc):
            raise SubjectError(WRITES_INPUTS.format(name=type(kernel).__name__, exc=exc)) from exc
        if isinstance(exc, SubjectError):
            raise
        if isinstance(exc, SystemExit):
            raise SubjectError(f"kernel {type(kernel).__name__}.verify called sys.exit({exc.code!r}) -- called as "
                               f"verify({call}) under the {coins.convention!r} coin convention") from exc
        hint = (" (a kernel that takes no coin arrays: convention='generator', or leave convention out)"
                if isinstance(exc, TypeError) and "keyword" in str(exc) and coins.convention != "generator" else "")
        raise SubjectError(f"kernel {type(kernel).__name__}.verify raised {type(exc).__name__}: {exc} -- called as "
                           f"verify({call}) with p, q of shape ({B}, {p.shape[1]}) float64 and candidates "
                           f"({B}, {k}) int64 under the {coins.convention!r} coin convention "
                           f"(see exactness.coupled.conventions){hint}") from exc
    name = type(kernel).__name__
    try:
        t, a = _checked_result(read_result(res, f"kernel {name}.verify"), B, k, p.shape[1], kernel, c)
    except SubjectError as exc:
        raise SubjectError(exc.cause if exc.cause.startswith("kernel ") else f"kernel {exc.cause}") from exc
    except BaseException as exc:       # the result's own conversion (np.asarray of it) raised
        if passes_through(exc):             # Ctrl-C, the harness's time limit
            raise
        raise SubjectError(subject_cause(f"kernel {name}.verify returned a {type(res).__name__} that", exc)) from exc
    if np.any(a == -2):
        raise SubjectError(f"kernel {type(kernel).__name__}.verify returned no .accepted; coupled certification "
                           "compares the accepted index too: return .tokens and .accepted (B,) int64")
    return t, a


def run_reference(reference, p, q, c, coins: Coins) -> tuple[np.ndarray, np.ndarray]:
    """The reference rule's ``(tokens, accepted)`` (B,) int64 under ``coins`` (through ``reference.chain``).

    ``p, q`` (B, V) float64, ``c`` (B, k) int64; ``reference`` is a
    :class:`resispec.Verifier` (its ``chain`` gives the accept
    probabilities and the residual; the decisions follow
    :func:`exactness.coupled.conventions.decisions`).  Under the
    ``resispec`` convention ``chain_until_accept`` is used: the same
    decisions, without the steps after each row's first acceptance.
    """
    cut = getattr(reference, "chain_until_accept", None)
    name = f"reference {type(reference).__name__}"
    if coins.convention == "resispec" and cut is not None:
        # the same decisions as reference.chain: steps after a row's first accepted candidate are skipped
        ch = call_subject(cut, f"{name}.chain_until_accept", p, q, c, coins.arrays["uniforms"])
    else:
        ch = call_subject(reference.chain, f"{name}.chain", p, q, c)
    acc, res_u = decisions(coins, ch.accept_probs)
    rows = np.arange(c.shape[0])
    tokens = c[rows, np.maximum(acc, 0)].astype(np.int64)
    miss = acc < 0
    if np.any(miss):
        tokens[miss] = _inverse_cdf(np.asarray(ch.residual, dtype=np.float64)[miss], res_u[miss])
    return tokens, acc


def joint_law(reference, p1, q1, c1) -> np.ndarray:
    """Exact law (k + V,) of (stop, token) given one node's candidates ``c1`` (k,).

    Cells ``0..k-1``: candidate i accepted; cell ``k + j``: residual token j.
    """
    ch = reference.chain(p1[None], q1[None], c1[None])
    a, r = ch.accept_probs[0], ch.residual[0]
    k = a.size
    reach = np.concatenate([[1.0], np.cumprod(1.0 - a)])
    return np.concatenate([reach[:k] * a, reach[k] * r])


class TableReference:
    """The reference at one or more node rows via per-node accept tables: O(k log V) per draw.

    Built only for built-in rules whose chain depends on the candidates
    through ``a_i(x_i)`` alone (:func:`exactness.sampling.accept_table`);
    :meth:`build` returns None otherwise.
    """

    def __init__(self, tables):
        self.a = np.stack([t[0] for t in tables])                 # (R, k, V)
        self.cdf = [np.cumsum(t[1]) for t in tables]
        self.last = [_last_positive(t[1]) for t in tables]

    @classmethod
    def build(cls, reference, p2, q2, k):
        if not _builtin(reference) or p2.shape[0] * k * p2.shape[1] > (1 << 25):
            return None
        tables = [accept_table(reference, p2[r], q2[r], k) for r in range(p2.shape[0])]
        return None if any(t is None for t in tables) else cls(tables)

    def __call__(self, node, c, coins: Coins):
        B, k = c.shape
        a = self.a[node[:, None], np.arange(k)[None, :], c]
        acc, res_u = decisions(coins, a)
        tokens = c[np.arange(B), np.maximum(acc, 0)].astype(np.int64)
        for r in np.unique(node[acc < 0]):
            sel = (acc < 0) & (node == r)
            tokens[sel] = _searchsorted_rows(self.cdf[r], res_u[sel], self.last[r])
        return tokens, acc


__all__ = ["run_kernel", "run_reference", "joint_law", "TableReference", "law_from_chain"]
