"""The randomised probability-integral transform (PIT) of emitted tokens and its binned test.

Shared by :mod:`exactness.decoder` (the per-position PIT checks) and :mod:`exactness.decoder_events`
(the conditional checks).  ``u = F(y-) + U p(y)`` with ``F`` the CDF of the law ``p`` in a token order
and ``U ~ U(0, 1)`` is exactly uniform when ``y ~ p`` (Brockwell 2007; Czado, Gneiting and Held 2009).
"""

from __future__ import annotations

import numpy as np

from .gof import gof_test
from .power import detectable_tv

#: Equal-width bins of the randomised PIT.
PIT_BINS = 16
#: Largest batch of contexts handed to ``decoder.draft_law``.
BATCH = 4096
#: Power at which detectable TVs are stated.
POWER = 0.99


def pit(p: np.ndarray, y: np.ndarray, key: np.ndarray | None, u: np.ndarray) -> np.ndarray:
    """Randomised PIT of tokens ``y`` (N,) under laws ``p`` (N, V) in the order of ascending ``key``
    (None: token id).  Returns (N,) in [0, 1]."""
    N, V = p.shape
    if key is None:
        order = np.broadcast_to(np.arange(V), (N, V))
    else:
        order = np.argsort(key, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(V), (N, V)).copy(), axis=1)
    ps = np.take_along_axis(p, order, axis=1)
    cdf = np.cumsum(ps, axis=1)
    r = rank[np.arange(N), y]
    py = p[np.arange(N), y]
    below = cdf[np.arange(N), r] - ps[np.arange(N), r]
    return np.clip(below + u * py, 0.0, 1.0)



def pit_check(uvals: np.ndarray, alpha: float) -> dict:
    n = uvals.size
    bins = np.minimum((uvals * PIT_BINS).astype(np.int64), PIT_BINS - 1)
    counts = np.bincount(bins, minlength=PIT_BINS)
    r = gof_test(counts, np.full(PIT_BINS, 1.0 / PIT_BINS))
    return dict(statistic=r.statistic, df=r.df, pvalue=r.pvalue, g_statistic=r.g_statistic, g_pvalue=r.g_pvalue,
                tv=float(0.5 * np.abs(counts / n - 1.0 / PIT_BINS).sum()), n=n,
                detectable_tv=detectable_tv(n, PIT_BINS - 1, alpha=alpha, power=POWER))



def draft_laws(decoder, ctx, V):
    out = []
    rows = max(1, min(BATCH, (1 << 22) // V))                      # (rows, V) float64 a call
    for s in range(0, ctx.shape[0], rows):
        q = np.asarray(decoder.draft_law(ctx[s:s + rows]), dtype=np.float64)
        if q.shape != (min(rows, ctx.shape[0] - s), V) or not np.all(np.isfinite(q)) or np.any(q < 0):
            raise ValueError(f"decoder.draft_law(contexts) returned shape {q.shape} or non-finite / negative values; "
                             f"it must return the (B, V) = (.., {V}) draft law handed to the verifier")
        out.append(q)
    return np.concatenate(out)


__all__ = ["pit", "pit_check", "draft_laws", "PIT_BINS", "BATCH", "POWER"]
