"""Validate a rejection-dependent proxy ``proxy(R, q, x, *, step)`` at one node: exact TV, transport, acceptance.

Floor 4 (it uses the Monte Carlo harness, :func:`exactness.certify_verifier`).  The rule, the exactness
condition and the default proxy are in :mod:`resispec.verifiers.rejection_proxy`; the user guide is
``docs/verifiers.md`` ("Rejection-dependent proxies").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from resispec._validation import check_k
from resispec.analysis import acceptance_probability, exact_output_law, optimal_acceptance
from resispec.bounds import sequential_optimum_iid
from resispec.enumeration import count_tuples
from resispec.verifiers.registry import get_verifier
from resispec.verifiers.rejection_proxy import RejectionProxy, proxy_name, transport_residual

from ._checks import SubjectError
from .certificate import Certificate, subject_time_limit, timed_out_cause
from .limits import DEFAULT_TIMEOUT
from .sampling import call_subject, door_node
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
    cause : str
        "" unless the proxy misbehaved (raised, returned something that is not a law, ran past the time
        limit): then the cause, ``exact`` is False ("FAILED" in ``summary()``) and the numbers not reached
        are None / NaN.
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
    cause: str = ""

    def summary(self) -> str:
        """A few lines for a terminal: verdict, TV, transport condition, acceptances."""
        f = lambda v: "n/a" if v is None or v != v else f"{v:.6g}"  # noqa: E731
        if self.cause:
            return f"proxy {self.proxy} at k = {self.k}: FAILED: {self.cause}"
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


def validate_proxy(proxy, p, q, k: int, *, n: int | None = None, seed=0, certify: bool = True,
                   timeout: float | None = DEFAULT_TIMEOUT, progress: bool = True) -> ProxyValidation:
    """Judge a rejection-dependent proxy at one node: exact TV, transport condition, acceptance, certificate.

    Parameters
    ----------
    proxy : callable ``(R (B, V), q (B, V), x (B,) int64, *, step: int) -> (B, V) or (V,)`` law
        The rule of :class:`resispec.verifiers.rejection_proxy.RejectionProxy` (a user's, exact or not).
    p, q : array_like, shape (V,), float64
        Target and draft laws of one node (iid drafts from ``q``).  Checked once and divided by their sums
        (:func:`exactness.sampling.door_node`), so float32 and float16 laws get the verdict of their float64
        renormalisations (the exact TV is compared with ``EXACT_TOL`` = 1e-9).
    k : int >= 1
        Candidates per node.
    n : int, optional
        Monte Carlo draws of the certificate (default: ``certify_verifier``'s budget).
    seed : int or sequence of ints, default 0
    certify : bool, default True
        Run the Monte Carlo certificate (the slow part).
    timeout : float or None, default ``exactness.limits.DEFAULT_TIMEOUT`` (2 h)
        Hard wall-clock limit in seconds for the whole call (``0`` / None: none; SIGALRM, main thread on
        POSIX); a proxy that never returns is stopped and the result FAILS naming it.
    progress : bool, default True
        A step that runs longer than 10 s says so on stderr every 10 s (transport condition, enumeration,
        Monte Carlo certificate); shorter calls print nothing.

    Returns
    -------
    ProxyValidation
        A proxy that misbehaves -- raises, returns something that is not a law (negative, non-finite, wrong
        shape, rows not summing to 1), or runs past ``timeout`` -- gives ``exact`` False and ``cause`` naming
        it (``summary()``: "FAILED: <cause>"), never an exception.

    Raises
    ------
    TypeError
        ``proxy`` is not callable.
    ValueError
        Bad laws, ``k``, ``n`` or ``timeout``.

    Notes
    -----
    The exact TV enumerates the ``V^k`` iid candidate tuples when they number at most ``ENUMERATION_LIMIT``;
    the transport residual costs one proxy call per rejectable token (O(V^2)) at any V.
    """
    from ._progress import Heartbeat
    from ._timeout import TimeLimitExceeded, check_timeout

    verifier = RejectionProxy(proxy)
    node = door_node(p, q)
    if node.shape[0] != 1:
        raise ValueError(f"p and q must describe one node, shape (V,); got {node.shape[0]} rows")
    k = check_k(k)
    if n is not None:
        from ._checks import check_n

        check_n(n)
    timeout = check_timeout(timeout)
    from ._checks import as_seed_sequence

    as_seed_sequence(seed)                        # checked even when certify=False draws nothing
    name = proxy_name(proxy)
    beat = Heartbeat(f"validate_proxy({name}, k = {k})", enabled=bool(progress))
    try:
        with subject_time_limit(timeout) as armed, beat:
            return _validate(proxy, verifier, node, k, n=n, seed=seed, certify=certify, beat=beat)
    except SubjectError as exc:
        return _failed(name, k, exc.cause)
    except TimeLimitExceeded as exc:
        if not armed:
            raise
        return _failed(name, k, timed_out_cause(f"proxy {name} (validate_proxy, step: {beat.label})", timeout,
                                                 exc, proxy))


def _failed(name: str, k: int, cause: str) -> ProxyValidation:
    """The result for a proxy that misbehaved: ``exact`` False, ``cause`` set, the numbers not reached NaN."""
    nan = float("nan")
    return ProxyValidation(proxy=name, k=k, tv=None, tv_reason=cause, transport_residual=nan, failing_tokens=(),
                           acceptance=None, rrs_acceptance=nan, sequential_optimum=nan, alpha_star=nan,
                           certificate=None, exact=False, cause=cause)


def _validate(proxy, verifier, node, k: int, *, n, seed, certify: bool, beat) -> ProxyValidation:
    """:func:`validate_proxy` on checked arguments; a misbehaving proxy raises :class:`exactness.SubjectError`."""
    p1, q1 = node.p[0], node.q[0]
    name = proxy_name(proxy)
    calls = int(np.count_nonzero(q1 > p1))
    beat.step(f"transport condition at the first rejection ({calls} proxy call{'' if calls == 1 else 's'})")
    resid, failing = call_subject(transport_residual, f"proxy {name} (transport condition)", proxy, p1, q1,
                                  tol=EXACT_TOL)
    tuples = count_tuples(int(np.count_nonzero(q1 > 0)), k, "iid")
    if tuples <= ENUMERATION_LIMIT:
        beat.step(f"exact law by enumeration of {tuples:,} candidate tuples")
        what = f"proxy {name} (exact law by enumeration)"
        law = call_subject(exact_output_law, what, verifier, node, None, k, method="enumeration",
                           limit=ENUMERATION_LIMIT)
        tv, reason = 0.5 * float(np.abs(law - p1).sum()), ""
        acc = call_subject(acceptance_probability, what, verifier, node, None, k, method="enumeration",
                           limit=ENUMERATION_LIMIT)
    else:
        tv, acc = None, None
        reason = f"{tuples:,} candidate tuples exceed the enumeration limit {ENUMERATION_LIMIT:,}"
    cert = None
    if certify:
        beat.step(f"Monte Carlo certificate ({'default budget' if n is None else f'{n:,} draws'})")
        cert = certify_verifier(verifier, node, None, k, n=n, seed=seed, timeout=None)  # this call's limit governs
        cause = (cert.details.get("subject") or {}).get("error") if "subject" in cert.checks else None
        if cause:
            raise SubjectError(f"proxy {name} (Monte Carlo certificate): {cause}")
    exact = (resid <= EXACT_TOL and (tv is None or tv <= EXACT_TOL) and (cert is None or cert.passed))
    if exact and k > 1 and tv is None and cert is None:
        exact = None  # only the first rejection was checked: no evidence about the later ones
        reason += "; with certify=False nothing checked the rejections after the first: exactness undecided"
    beat.step("acceptance bounds (rrs, sequential optimum, alpha*)")
    return ProxyValidation(
        proxy=name, k=k, tv=tv, tv_reason=reason, transport_residual=resid,
        failing_tokens=tuple(int(t) for t in failing), acceptance=None if acc is None else float(acc),
        rrs_acceptance=float(acceptance_probability(get_verifier("rrs"), node, None, k)),
        sequential_optimum=float(sequential_optimum_iid(p1, q1, k)),
        alpha_star=float(optimal_acceptance(node, None, k)), certificate=cert, exact=None if exact is None else bool(exact))
