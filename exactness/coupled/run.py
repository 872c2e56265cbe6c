"""Run a kernel and its reference rule on the same candidates and coins."""

from __future__ import annotations

import numpy as np

from resispec.verifiers.base import law_from_chain
from resispec.sampling import _inverse_cdf

from ..sampling import _builtin, _checked_result, _last_positive, _searchsorted_rows, accept_table, as_numpy_verifier
from .conventions import Coins, decisions, kernel_kwargs


def _verify_fn(kernel):
    fn = getattr(kernel, "verify", None)
    if callable(fn):
        return fn
    if callable(kernel):
        return kernel
    raise TypeError(f"kernel must have a verify(p, q, candidates, rng, ...) method or be callable, "
                    f"got {type(kernel).__name__}")


#: The error for a kernel that writes into the read-only views the harness passes (``copies=False``).
WRITES_INPUTS = ("kernel {name} wrote into its inputs ({exc}): certify_coupled passes p, q, candidates and the "
                 "coins as read-only views, without copying (one node's p, q broadcast to all B rows, row stride "
                 "0); pass copies=True (CLI: --copies) to give the kernel writable (B, V) copies")


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
        gets a TypeError saying to pass ``copies=True``.

    Returns
    -------
    tokens, accepted : ndarray, shape (B,), int64

    Raises
    ------
    TypeError
        The kernel raised (chained from its exception) or returned the wrong
        type or dtype.
    ValueError
        The kernel returned the wrong shape, ids outside ``[0, V)`` or an
        ``accepted`` that is not the index of the emitted candidate.
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
    except Exception as exc:
        call = ", ".join(["p", "q", "candidates", "rng"] + [f"{n}=..." for n in kw])
        if not copies and isinstance(exc, ValueError) and "read-only" in str(exc):
            raise TypeError(WRITES_INPUTS.format(name=type(kernel).__name__, exc=exc)) from exc
        raise TypeError(f"kernel {type(kernel).__name__} raised {type(exc).__name__}: {exc} -- called as "
                        f"verify({call}) with p, q of shape ({B}, {p.shape[1]}) float64 and candidates "
                        f"({B}, {k}) int64 under the {coins.convention!r} coin convention "
                        "(see exactness.coupled.conventions)") from exc
    t, a = _checked_result(res, B, k, p.shape[1], kernel, c)
    if np.any(a == -2):
        raise TypeError(f"kernel {type(kernel).__name__}.verify returned no .accepted; coupled certification "
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
    if coins.convention == "resispec" and cut is not None:
        # the same decisions as reference.chain: steps after a row's first accepted candidate are skipped
        ch = cut(p, q, c, coins.arrays["uniforms"])
    else:
        ch = reference.chain(p, q, c)
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
