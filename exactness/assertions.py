"""``assert_exact``: certification as a test assertion, for other projects' test suites."""

from __future__ import annotations

import numpy as np

from ._checks import base_seed, sub_seed
from .certificate import Certificate, certify_sampler
from .limits import DEFAULT_TIMEOUT
from .grid import adjust
from .verifier_cert import certify_verifier

#: Default panel when no (p, q) is given: (family, V, params) as in ``resispec certify``.
DEFAULT_PANEL = (("softmax_noise", 8, {}), ("zipf", 8, {}))
DEFAULT_KS = (1, 2, 4)


def _panel(seed: int):
    from .certify_run import family_nodes

    nodes, _ = family_nodes(seed, DEFAULT_PANEL)
    return list(nodes.items())


def assert_exact(verifier, p=None, q=None, k=DEFAULT_KS, *, n: int | None = None, alpha: float = 1e-3,
                 seed: int = 0, tv: float | None = None, timeout: float | None = DEFAULT_TIMEOUT) -> list[Certificate]:
    """Assert that a verifier (or a sampler) emits exactly the target law.

    Two forms:

    - ``assert_exact(verifier, p, q, k=(1, 2, 4))``: certify ``verifier`` at
      the node ``(p, q)`` for every ``k`` (``p, q`` omitted: a built-in panel
      of small-V nodes, softmax-noise and Zipf pairs at V = 8);
    - ``assert_exact(sample, law, n=...)``: a black-box sampler
      ``sample(rng, m) -> (m,) int64`` against ``law`` (:func:`certify_sampler`).

    Cell p-values are Holm-corrected at ``alpha`` over all cells.

    Parameters
    ----------
    verifier : Verifier, or a sampler callable (second form)
    p, q : array_like, shape (V,), float64, optional
    k : int or iterable of int
    n : int, optional, Monte Carlo draws per cell (default budget if None;
        required for a sampler)
    alpha : float, family-wise level
    seed : int, sequence of ints (``[0, i]``) or SeedSequence
    tv : float, optional, smallest TV to detect (warns if ``n`` is too small)
    timeout : float or None, hard wall-clock limit in seconds per cell (default
        ``exactness.limits.DEFAULT_TIMEOUT``; ``0`` / None: none)

    Returns
    -------
    list of Certificate, one per cell (when every cell passes)

    Raises
    ------
    AssertionError
        Some cell fails; the message lists each failing cell with its
        Holm-adjusted p-value, failing checks, exact TV and detectable TV.
        A verifier or sampler that misbehaves (raises, returns the wrong
        shape, emits a token outside ``[0, V)`` or of target probability 0,
        runs past ``timeout``) fails its cell with the cause.
    ValueError, TypeError
        Bad input (as :func:`certify_verifier` / :func:`certify_sampler`).
    """
    if not hasattr(verifier, "verify"):
        if not callable(verifier) or p is None:
            raise TypeError("assert_exact needs a verifier (with verify) or a sampler callable and its law")
        if n is None:
            raise ValueError("assert_exact(sample, law, n=...): give the number of samples n for a sampler")
        cert = certify_sampler(verifier, p, n, alpha=alpha, seed=seed, tv=tv, timeout=timeout)
        if not cert.passed:
            cause = (cert.details.get("subject") or {}).get("error") if "subject" in cert.checks else None
            raise AssertionError(f"sampler misbehaved: {cause}" if cause else f"sampler is not exact: {cert.summary()}")
        return [cert]
    if isinstance(k, bool) or not (isinstance(k, (int, np.integer)) or (
            isinstance(k, (tuple, list, range)) and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool)
                                                        for x in k))):
        raise TypeError(f"k must be an int or a tuple / list of ints (candidates per node), got {k!r}")
    ks = (k,) if isinstance(k, (int, np.integer)) else tuple(k)
    if not ks:
        raise ValueError("k is empty: give at least one candidate count, e.g. k=(1, 2, 4) (an empty k would pass vacuously)")
    seed = base_seed(seed)  # TypeError / ValueError naming seed
    if (p is None) != (q is None):
        raise ValueError("give both p and q (one node), or neither (built-in panel)")
    nodes = [("given", (p, q))] if p is not None else _panel(seed)
    labels, certs = [], []
    for i, (name, (pp, qq)) in enumerate(nodes):
        for kk in ks:
            labels.append(f"{name} node, k = {kk}")
            certs.append(certify_verifier(verifier, pp, qq, kk, n=n, alpha=alpha,
                                          seed=sub_seed(seed, i, kk), tv=tv, timeout=timeout))
    holm = adjust([c.pvalue for c in certs], "holm")
    bad = [(lab, c, h) for lab, c, h in zip(labels, certs, holm) if h < alpha]
    if bad:
        lines = [f"{len(bad)} of {len(certs)} cells reject exactness of {verifier!r} at alpha = {alpha:g} (Holm):"]
        for lab, c, h in bad:
            ex = c.details.get("exact", {}).get("tv")
            failing = {name: round(pv, 6) for name, pv in c.failed_checks().items()}
            cause = (c.details.get("subject") or {}).get("error") if "subject" in c.checks else None
            if cause:
                lines.append(f"  {lab}: the subject misbehaved: {cause}")
                continue
            lines.append(f"  {lab}: p_holm = {h:.3g}, failing checks {failing}, "
                         f"exact TV {ex if ex is None else format(ex, '.3g')}, TV estimate {c.tv_estimate:.3g}, "
                         f"detectable TV {c.detectable_tv:.3g}, n = {c.n:,}")
            lines += [f"    {c.describe(name)}" for name in c.failed_checks()]
            lines += [f"    skipped {name}: {why}" for name, why in c.skipped.items()]
            lines += [f"    note: {note}" for note in c.notes]
        raise AssertionError("\n".join(lines))
    return certs


def assert_coupled(kernel, reference, p, q, k: int, *, tv: float = 1e-4, alpha: float = 1e-3, seed=0,
                   convention: str | None = None, **kw):
    """Assert that ``kernel`` implements ``reference`` draw by draw under shared coins (a pytest form).

    Runs :func:`exactness.certify_coupled` with enough coupled draws for the requested bound:
    ``n = ceil(ln(1 / alpha) / tv)`` (zero mismatches in ``n`` draws bounds TV(kernel, reference)
    by ``tv`` at confidence ``1 - alpha``, the exact binomial bound :func:`exactness.coupled.certify.
    tv_upper_bound`).  ``kw`` go to ``certify_coupled`` (e.g. ``copies=True``, ``time_limit=``).

    Parameters
    ----------
    kernel : object with ``verify`` or a callable (see ``certify_coupled``)
    reference : str or resispec Verifier
        A registry name (``"rrs"``) or a verifier: the rule the kernel must implement.
    p, q : array_like, shape (V,) or (R, V), float64
    k : int
    tv : float in (0, 1), default 1e-4
        TV bound a pass must establish.
    alpha, seed, convention : as ``certify_coupled`` (``convention`` None: from the kernel's signature)

    Returns
    -------
    CoupledCertificate
        When it passed with zero mismatches.  ``cert.reference_law`` says what the pass means for ``p``
        (a registry rule, or a user's reference checked in the same run).

    Raises
    ------
    AssertionError
        Any mismatch (also "not the same coupling", INCONCLUSIVE, and with ``fallback=True`` even when
        ``certify_verifier`` of the kernel passes: the bound ``tv`` holds only draw by draw), a user's
        reference whose own law is biased or, with ``reference_check="none"``, not checked
        (INCONCLUSIVE), or a kernel that raises, hangs or breaks its output contract: the message is the
        certificate's verdict (naming the cause) followed by the shrunk counterexample (a few lines of
        Python reproducing it against both sides).
    ValueError
        ``tv`` outside (0, 1); bad arguments as ``certify_coupled`` raises them.
    """
    from .coupled import certify_coupled
    from .coupled.certify import draws_for_tv

    from ._checks import check_alpha
    from .limits import MAX_COUNTED

    alpha = check_alpha(alpha)
    if "n" in kw:
        raise TypeError("assert_coupled plans n from tv and alpha (n = ceil(ln(1 / alpha) / tv)); pass tv=, not n=")
    n = draws_for_tv(tv, alpha)                       # zero mismatches in n draws: P(mismatch) <= ln(1/alpha) / n
    if n > MAX_COUNTED:
        raise ValueError(f"tv = {tv:g} at alpha = {alpha:g} needs n = {n:,} coupled draws, over "
                         f"exactness.limits.MAX_COUNTED = {MAX_COUNTED:,}; ask a larger tv")
    cert = certify_coupled(kernel, reference, p, q, k, n=n, alpha=alpha, seed=seed, convention=convention, **kw)
    if not (cert.passed and cert.mismatches == 0):   # a fallback pass is not the draw-by-draw bound asked for
        msg = cert.verdict + ("\n\ncounterexample:\n" + cert.counterexample if cert.counterexample else "")
        raise AssertionError(msg)
    return cert
