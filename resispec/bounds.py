"""Reference optima by linear programming (scipy HiGHS), for small cases.

- :func:`optimal_acceptance_lp`: alpha* as the best coupling of the draft
  tuple law and ``p`` (checks :func:`resispec.optimal_acceptance`).
- :func:`sequential_optimum_iid`: the best *sequential* verifier for iid
  drafts (``shared/RESISPEC.md`` section 5).
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


def _one(p, q):
    p2, q2, _ = as_laws(p, q)
    if p2.shape[0] != 1:
        raise ValueError("p and q must be one node, shape (V,)")
    return p2[0], q2[0]


def optimal_acceptance_lp(p, q, k: int, drafting: str = "iid") -> float:
    """alpha* by the coupling linear programme (small V and k only).

    Maximise ``P(y in {x_1..x_k})`` over couplings ``pi(t, y)`` of the draft
    tuple law ``Q(t)`` and the target ``p(y)``.  Sun et al. 2023 (SpecTr,
    arXiv 2310.15141), section 3.

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
    res = linprog(c, A_ub=A, b_ub=b, bounds=(0, None), method="highs", options=_HIGHS_OPTIONS)
    if res.status != 0:
        raise ValueError(f"coupling LP failed: {res.message}")
    return float(-res.fun)


def sequential_optimum_iid(p, q, k: int, *, return_masses: bool = False):
    """Best acceptance of any sequential verifier on iid drafts (an LP).

    With ``M_i(x)`` the probability of accepting candidate ``i`` as token
    ``x`` and ``s_i = sum_x M_i(x)``::

        maximise sum_i s_i  s.t.  M_i(x) >= 0,  sum_i M_i(x) <= p(x),
                                  M_i(x) <= q(x) (1 - sum_{j<i} s_j).

    ``shared/RESISPEC.md`` section 5 (a candidate-dependent residual cannot
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
    res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=np.zeros(k), bounds=(0, None), method="highs",
                  options=_HIGHS_OPTIONS)
    if res.status != 0:
        raise ValueError(f"sequential LP failed: {res.message}")
    val = float(-res.fun)
    if return_masses:
        return val, res.x[:nM].reshape(k, V)
    return val
