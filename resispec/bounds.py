"""Reference optima by linear programming (scipy HiGHS), for small cases.

- :func:`optimal_acceptance_lp`: alpha* as the best coupling of the draft
  tuple law and ``p`` (checks :func:`resispec.optimal_acceptance`).
- :func:`sequential_optimum_iid`: the best *sequential* verifier for iid
  drafts (``docs/RESISPEC.md`` section 5).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from ._validation import as_laws, check_drafting, check_k
from .enumeration import candidate_tuples

#: Largest (tuples x V) LP the coupling bound will build.
MAX_LP_VARIABLES = 400_000

#: HiGHS tolerances tighter than the 1e-7 defaults, so the optima are good to
#: about 1e-9 (the defaults let the objective overshoot by ~5e-8 on laws with
#: tiny entries).
_HIGHS_OPTIONS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def _linprog(c, **kw):
    """``scipy.optimize.linprog`` with HiGHS; on a numerical solve error (status 4) it retries with the
    dual simplex, then the interior-point method (HiGHS's default choice occasionally stops with
    "Solve error" at the tight tolerances above); any other status is returned as is."""
    res = None
    for method in ("highs", "highs-ds", "highs-ipm"):
        res = linprog(c, method=method, options=_HIGHS_OPTIONS, **kw)
        if res.status != 4:
            return res
    return res


def _one(p, q):
    p2, q2, _ = as_laws(p, q)
    if p2.shape[0] != 1:
        raise ValueError("p and q must be one node, shape (V,)")
    return p2[0], q2[0]


def optimal_acceptance_lp(p, q, k: int, drafting: str = "iid") -> float:
    """alpha* by the coupling linear programme (small V and k only).

    Maximise ``P(y in {x_1..x_k})`` over couplings ``pi(t, y)`` of the draft
    tuple law ``Q(t)`` and the target ``p(y)``.  Sun et al. 2023 (SpecTr,
    arXiv 2310.15141), section 3.  Solved with the margins as ``<=``
    (sub-couplings): any sub-coupling extends to a coupling without losing
    hits, so the optimum is the same and round-off cannot make it infeasible.

    Parameters
    ----------
    p, q : array_like, shape (V,), float64
    k : int >= 1
    drafting : {"iid", "without_replacement"}

    Returns
    -------
    float

    Raises
    ------
    ValueError
        More than ``MAX_LP_VARIABLES`` variables, bad laws, or an LP failure.
    """
    p1, q1 = _one(p, q)
    k = check_k(k)
    check_drafting(drafting)
    V = p1.size
    tuples, probs = [], []
    for t, w in candidate_tuples(q1, k, "iid" if drafting == "any" else drafting):
        tuples.append(t), probs.append(w)
    T = np.concatenate(tuples)
    W = np.concatenate(probs)
    n = T.shape[0]
    if n * V > MAX_LP_VARIABLES:
        raise ValueError(f"coupling LP would have {n * V:,} variables (limit {MAX_LP_VARIABLES:,}); use smaller V or k")
    # variable index: t * V + y
    hit = np.zeros((n, V))
    hit[np.arange(n)[:, None], T] = 1.0
    c = -hit.ravel()
    rows_t = np.repeat(np.arange(n), V)
    cols = np.arange(n * V)
    rows_y = n + np.tile(np.arange(V), n)
    A = coo_matrix((np.ones(2 * n * V), (np.concatenate([rows_t, rows_y]), np.concatenate([cols, cols]))),
                   shape=(n + V, n * V)).tocsr()
    b = np.concatenate([W, p1])
    # Margins as "<=": any sub-coupling extends to a full coupling without
    # losing hits, so the optimum is the same, and round-off in sum(W) vs
    # sum(p) (tuple probabilities down to 1e-10) cannot make it infeasible.
    res = _linprog(c, A_ub=A, b_ub=b, bounds=(0, None))
    if res.status != 0:
        raise ValueError(f"coupling LP failed: {res.message}")
    return float(-res.fun)


def sequential_optimum_iid(p, q, k: int, *, return_masses: bool = False):
    """Best acceptance of any sequential verifier on iid drafts (an LP).

    With ``M_i(x)`` the probability of accepting candidate ``i`` as token
    ``x`` and ``s_i = sum_x M_i(x)``::

        maximise sum_i s_i  s.t.  M_i(x) >= 0,  sum_i M_i(x) <= p(x),
                                  M_i(x) <= q(x) (1 - sum_{j<i} s_j).

    ``docs/RESISPEC.md`` section 5 (a candidate-dependent residual cannot
    beat it for iid drafts).  Sparse formulation with auxiliary ``s_i``:
    about ``k V`` variables and ``k^2 V`` non-zeros; V = 1000, k = 8 takes
    about a second with HiGHS.

    Parameters
    ----------
    p, q : array_like, shape (V,), float64
    k : int >= 1
    return_masses : bool
        Also return ``M`` of shape (k, V).

    Returns
    -------
    float (and ndarray (k, V) when ``return_masses``)

    Raises
    ------
    ValueError
        Bad laws or an LP failure.
    """
    p1, q1 = _one(p, q)
    k = check_k(k)
    V = p1.size
    nM = k * V
    nvar = nM + k                      # M (k*V) then s (k)
    c = np.zeros(nvar)
    c[nM:] = -1.0
    rows, cols, vals = [], [], []
    # sum_i M_i(x) <= p(x)
    r = 0
    for i in range(k):
        rows.append(np.arange(V)), cols.append(i * V + np.arange(V)), vals.append(np.ones(V))
    r += V
    # M_i(x) + q(x) sum_{j<i} s_j <= q(x)
    for i in range(k):
        rr = r + np.arange(V)
        rows.append(rr), cols.append(i * V + np.arange(V)), vals.append(np.ones(V))
        for j in range(i):
            rows.append(rr), cols.append(np.full(V, nM + j)), vals.append(q1.copy())
        r += V
    A_ub = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, nvar)).tocsr()
    b_ub = np.concatenate([p1, np.tile(q1, k)])
    # s_i - sum_x M_i(x) = 0
    erows = np.concatenate([np.repeat(np.arange(k), V), np.arange(k)])
    ecols = np.concatenate([np.arange(nM), nM + np.arange(k)])
    evals = np.concatenate([-np.ones(nM), np.ones(k)])
    A_eq = coo_matrix((evals, (erows, ecols)), shape=(k, nvar)).tocsr()
    res = _linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=np.zeros(k), bounds=(0, None))
    if res.status != 0:
        raise ValueError(f"sequential LP failed: {res.message}")
    val = float(-res.fun)
    if return_masses:
        return val, res.x[:nM].reshape(k, V)
    return val


#: Largest number of LP variables :func:`sequential_optimum` will build.
MAX_SEQ_LP_VARIABLES = 300_000


def _histories(q: np.ndarray, k: int, drafting: str):
    """Rejection histories of depth 0..k-1 with their draft law ``q_h``.

    Returns a list of ``(history tuple, parent index, last token, q_h (V,))``
    in breadth-first order (index 0 is the root).
    """
    out = [((), -1, -1, q)]
    level = [0]
    for _ in range(k - 1):
        nxt = []
        for idx in level:
            h, _, _, qh = out[idx]
            for x in np.flatnonzero(qh > 0):
                if drafting == "without_replacement":
                    qc = qh.copy()
                    qc[x] = 0.0
                    z = qc.sum()
                    if z <= 0:
                        continue
                    qc = qc / z
                else:
                    qc = q
                out.append((h + (int(x),), idx, int(x), qc))
                nxt.append(len(out) - 1)
        level = nxt
    return out


def sequential_optimum(p, q, k: int, drafting: str = "iid", *, return_details: bool = False):
    """Best acceptance of any sequential verifier with candidate-dependent residuals (an LP).

    A sequential verifier walks the candidates; at a node ``h`` of the
    rejection tree (the ordered candidates rejected so far) it may use any
    accepted mass ``m_h`` and, after rejecting ``x``, any residual
    ``r^(x)`` with ``sum_x (q_h(x) - m_h(x)) r^(x) = p_h - m_h``
    (``docs/RESISPEC.md`` sections 2 and 4).  In unnormalised variables
    ``P_h = P(reach h) p_h`` and ``M_h = P(reach h) m_h`` the best such
    verifier solves::

        maximise   sum_h sum_x M_h(x)
        subject to P_root = p,  0 <= M_h <= P_h,  M_h(x) <= q_h(x) sum_y P_h(y),
                   sum_y P_{hx}(y) = q_h(x) sum_y P_h(y) - M_h(x)    (child mass),
                   sum_x P_{hx} = P_h - M_h,  P >= 0                (transport),

    over histories of depth ``< k`` (the last residual is free).  ``q_h`` is
    the draft renormalised without the rejected tokens for
    ``drafting="without_replacement"`` (RSD, arXiv 2402.14160), ``q`` for
    iid drafts, where the optimum equals :func:`sequential_optimum_iid`.
    Solved with scipy's HiGHS.  Size: (number of histories) x 2V variables,
    e.g. V = 6, k = 3 without replacement: 37 histories.

    Parameters
    ----------
    p, q : array_like, shape (V,), float64
    k : int >= 1
    drafting : {"iid", "without_replacement"}
    return_details : bool
        Also return a dict with ``histories`` (list of tuples) and ``M``
        (n_histories, V) unnormalised accepted masses.

    Returns
    -------
    float (and dict when ``return_details``)

    Raises
    ------
    ValueError
        More than ``MAX_SEQ_LP_VARIABLES`` variables, k above the draft
        support (without replacement), bad laws, or an LP failure.
    """
    p1, q1 = _one(p, q)
    k = check_k(k)
    check_drafting(drafting)
    drafting = "iid" if drafting == "any" else drafting
    V = p1.size
    n_sup = int(np.count_nonzero(q1 > 0))
    if drafting == "without_replacement" and k > n_sup:
        raise ValueError(f"k = {k} exceeds the draft support ({n_sup} tokens) for without-replacement drafting")
    n_est = sum(n_sup ** d for d in range(k))
    if 2 * V * n_est > MAX_SEQ_LP_VARIABLES:
        raise ValueError(f"sequential LP would need about {2 * V * n_est:,} variables "
                         f"(limit {MAX_SEQ_LP_VARIABLES:,}); use smaller V or k")
    hist = _histories(q1, k, drafting)
    H = len(hist)
    nvar = 2 * H * V                       # P_h then M_h, per history
    Pv = lambda h: 2 * h * V + np.arange(V)          # noqa: E731
    Mv = lambda h: 2 * h * V + V + np.arange(V)      # noqa: E731
    ub_r, ub_c, ub_v = [], [], []
    eq_r, eq_c, eq_v = [], [], []
    b_eq = []
    nub = 0
    children: dict[int, list[tuple[int, int]]] = {}
    for idx, (h, parent, x, qh) in enumerate(hist):
        if parent >= 0:
            children.setdefault(parent, []).append((idx, x))
    for idx, (h, parent, x, qh) in enumerate(hist):
        # M_h - P_h <= 0
        rr = nub + np.arange(V)
        ub_r += [rr, rr]; ub_c += [Mv(idx), Pv(idx)]; ub_v += [np.ones(V), -np.ones(V)]
        nub += V
        # M_h(x) - q_h(x) sum_y P_h(y) <= 0
        rr = nub + np.arange(V)
        ub_r += [rr, np.repeat(rr, V)]
        ub_c += [Mv(idx), np.tile(Pv(idx), V)]
        ub_v += [np.ones(V), -np.repeat(qh, V)]
        nub += V
        kids = children.get(idx, [])
        if not kids:
            continue
        neq = len(b_eq)
        for j, (cidx, cx) in enumerate(kids):  # child mass
            r = neq + j
            eq_r += [np.full(V, r), np.full(V, r), np.array([r])]
            eq_c += [Pv(cidx), Pv(idx), np.array([Mv(idx)[cx]])]
            eq_v += [np.ones(V), -np.full(V, qh[cx]), np.ones(1)]
            b_eq.append(0.0)
        neq = len(b_eq)
        rr = neq + np.arange(V)                  # transport
        for cidx, _ in kids:
            eq_r.append(rr); eq_c.append(Pv(cidx)); eq_v.append(np.ones(V))
        eq_r += [rr, rr]; eq_c += [Mv(idx), Pv(idx)]; eq_v += [np.ones(V), -np.ones(V)]
        b_eq += [0.0] * V
    A_ub = coo_matrix((np.concatenate(ub_v), (np.concatenate(ub_r), np.concatenate(ub_c))), shape=(nub, nvar)).tocsr()
    A_eq = (coo_matrix((np.concatenate(eq_v), (np.concatenate(eq_r), np.concatenate(eq_c))),
                       shape=(len(b_eq), nvar)).tocsr() if b_eq else None)
    bounds = np.zeros((nvar, 2))
    bounds[:, 1] = np.inf
    bounds[Pv(0), 0] = p1
    bounds[Pv(0), 1] = p1
    c = np.zeros(nvar)
    for idx in range(H):
        c[Mv(idx)] = -1.0
    res = _linprog(c, A_ub=A_ub, b_ub=np.zeros(nub), A_eq=A_eq, b_eq=np.asarray(b_eq) if b_eq else None,
                   bounds=bounds)
    if res.status != 0:
        raise ValueError(f"sequential LP failed: {res.message}")
    val = float(-res.fun)
    if return_details:
        M = np.stack([res.x[Mv(i)] for i in range(H)])
        return val, {"histories": [h for h, *_ in hist], "M": M}
    return val
