"""Validate a rejection-dependent proxy ``proxy(R, q, x, *, step)`` at one node: exact TV, transport, acceptance.

Floor 4 (it uses the Monte Carlo harness, :func:`exactness.certify_verifier`).  The rule, the exactness
condition and the default proxy are in :mod:`resispec.verifiers.rejection_proxy`; the user guide is
``docs/verifiers.md`` ("Rejection-dependent proxies").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from resispec._validation import as_node, check_k
from resispec.analysis import acceptance_probability, exact_output_law, optimal_acceptance
from resispec.bounds import sequential_optimum_iid
from resispec.enumeration import count_tuples
from resispec.verifiers.registry import get_verifier
from resispec.verifiers.rejection_proxy import RejectionProxy, proxy_name, transport_residual

from .certificate import Certificate
from .verifier_cert import certify_verifier

#: Largest number of iid candidate tuples enumerated for the exact TV and acceptance.
ENUMERATION_LIMIT = 200_000
#: Exact TV (and transport residual) at or below this is exact to round-off.
EXACT_TOL = 1e-9


@dataclass(frozen=True)
class ProxyValidation:
    """What :func:`validate_proxy` found for one proxy at one node ``(p, q, k)``.

    Attributes
    ----------
    proxy : str
        The proxy's name.
    k : int
    tv : float or None
        Exact total variation between the emitted law and ``p`` (enumeration), or None (see ``tv_reason``).
    tv_reason : str
        Why ``tv`` is None ("" when it was computed).
    transport_residual : float
        ``max_y |sum_x (q(x) - p(x))_+ R^(x)(y) - (p - q)_+(y)|`` for the FIRST rejection (exact, any V).
    failing_tokens : tuple of int
        Token ids ``y`` where that exceeds ``EXACT_TOL`` (the condition fails there).
    acceptance, rrs_acceptance, sequential_optimum, alpha_star : float or None
        Exact acceptance of the proxy's verifier (None when enumeration does not fit), of ``rrs``, the best
        sequential verifier on iid drafts (LP, :func:`resispec.bounds.sequential_optimum_iid`) and alpha*.
    certificate : exactness.Certificate or None
        Monte Carlo certificate (:func:`exactness.certify_verifier`), None when ``certify=False``.
    exact : bool or None
        True iff the transport condition holds, the exact TV (when computed) is <= ``EXACT_TOL`` and the
        certificate (when run) passed.  At ``k = 1`` the transport condition alone decides exactness; at
        ``k > 1`` it is checked at the first rejection only, so ``exact`` is None (undecided, "UNDECIDED"
        in ``summary()``) when neither ``tv`` nor a certificate was computed and the first rejection holds.
    """

    proxy: str
    k: int
    tv: float | None
    tv_reason: str
    transport_residual: float
    failing_tokens: tuple
    acceptance: float | None
    rrs_acceptance: float
    sequential_optimum: float
    alpha_star: float
    certificate: Certificate | None
    exact: bool

    def summary(self) -> str:
        """A few lines for a terminal: verdict, TV, transport condition, acceptances."""
        f = lambda v: "n/a" if v is None else f"{v:.6g}"  # noqa: E731
        verdict = "UNDECIDED" if self.exact is None else "EXACT" if self.exact else "BIASED"
        lines = [f"proxy {self.proxy} at k = {self.k}: {verdict}",
                 f"  exact TV(output, p): {f(self.tv)}" + (f" ({self.tv_reason})" if self.tv is None else ""),
                 f"  transport residual (first rejection): {self.transport_residual:.3g}"
                 + (f", fails at tokens {list(self.failing_tokens)}" if self.failing_tokens else ", holds"),
                 f"  acceptance {f(self.acceptance)}  rrs {f(self.rrs_acceptance)}  sequential optimum "
                 f"{f(self.sequential_optimum)}  alpha* {f(self.alpha_star)}"]
        if self.certificate is not None:
            c = self.certificate
            lines.append(f"  Monte Carlo certificate: {'passed' if c.passed else 'FAILED'} (p = {c.pvalue:.3g}, "
                         f"detectable TV {c.detectable_tv:.3g})")
        return "\n".join(lines)


def validate_proxy(proxy, p, q, k: int, *, n: int | None = None, seed=0, certify: bool = True) -> ProxyValidation:
    """Judge a rejection-dependent proxy at one node: exact TV, transport condition, acceptance, certificate.

    Parameters
    ----------
    proxy : callable ``(R (B, V), q (B, V), x (B,) int64, *, step: int) -> (B, V) or (V,)`` law
        The rule of :class:`resispec.verifiers.rejection_proxy.RejectionProxy` (a user's, exact or not).
    p, q : array_like, shape (V,), float64
        Target and draft laws of one node (iid drafts from ``q``).
    k : int >= 1
        Candidates per node.
    n : int, optional
        Monte Carlo draws of the certificate (default: ``certify_verifier``'s budget).
    seed : int or sequence of ints, default 0
    certify : bool, default True
        Run the Monte Carlo certificate (the slow part).

    Returns
    -------
    ProxyValidation

    Raises
    ------
    TypeError
        ``proxy`` is not callable.
    ValueError
        Bad laws or ``k``; the proxy returned something that is not a law (negative, non-finite, wrong shape,
        rows not summing to 1), naming the proxy and the step.

    Notes
    -----
    The exact TV enumerates the ``V^k`` iid candidate tuples when they number at most ``ENUMERATION_LIMIT``;
    the transport residual costs one proxy call per rejectable token (O(V^2)) at any V.
    """
    verifier = RejectionProxy(proxy)
    node = as_node(p, q)
    if node.shape[0] != 1:
        raise ValueError(f"p and q must describe one node, shape (V,); got {node.shape[0]} rows")
    k = check_k(k)
    p1, q1 = node.p[0], node.q[0]
    resid, failing = transport_residual(proxy, p1, q1, tol=EXACT_TOL)
    tuples = count_tuples(int(np.count_nonzero(q1 > 0)), k, "iid")
    if tuples <= ENUMERATION_LIMIT:
        law = exact_output_law(verifier, p1, q1, k, method="enumeration", limit=ENUMERATION_LIMIT)
        tv, reason = 0.5 * float(np.abs(law - p1).sum()), ""
        acc = acceptance_probability(verifier, p1, q1, k, method="enumeration", limit=ENUMERATION_LIMIT)
    else:
        tv, acc = None, None
        reason = f"{tuples:,} candidate tuples exceed the enumeration limit {ENUMERATION_LIMIT:,}"
    cert = certify_verifier(verifier, p1, q1, k, n=n, seed=seed) if certify else None
    exact = (resid <= EXACT_TOL and (tv is None or tv <= EXACT_TOL) and (cert is None or cert.passed))
    if exact and k > 1 and tv is None and cert is None:
        exact = None  # only the first rejection was checked: no evidence about the later ones
        reason += "; with certify=False nothing checked the rejections after the first: exactness undecided"
    return ProxyValidation(
        proxy=proxy_name(proxy), k=k, tv=tv, tv_reason=reason, transport_residual=resid,
        failing_tokens=tuple(int(t) for t in failing), acceptance=None if acc is None else float(acc),
        rrs_acceptance=float(acceptance_probability(get_verifier("rrs"), p1, q1, k)),
        sequential_optimum=float(sequential_optimum_iid(p1, q1, k)),
        alpha_star=float(optimal_acceptance(p1, q1, k)), certificate=cert, exact=None if exact is None else bool(exact))
