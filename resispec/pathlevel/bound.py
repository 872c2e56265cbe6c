"""The best expected accepted length of ANY exact rule, for a drafted chain or small tree: an LP.

Set-up (``docs/pathlevel.md`` section 4).  A tree of shape ``(k_1, ..., k_D)`` (a chain is
``(1,) * L``) is drafted with iid children: every node at depth ``j`` gets ``k_{j+1}`` children
drawn independently from the draft law ``q`` at that node, so a drafted tree ``T`` has
probability ``Q(T) = prod_n q(T_n | path to the parent of n)``.  A verification rule sees ``T``
(and every law) and, with its own coins, picks a node ``n`` (its path ``x_{1:|n|}`` is kept:
``|n|`` accepted drafts; the root keeps none) and one more token ``y``.  Write
``pi(T, n, y) = Q(T) P(n, y | T) >= 0``.  The rule is exact iff the emitted ``|n| + 1`` tokens,
continued by the target, have the target's law of ``D + 1`` tokens:

    sum_{T, n, y : path(T, n) = z_{1:|n|}, y = z_{|n|+1}} pi(T, n, y) P(z_{|n|+2..D+1} | z_{1:|n|+1}) = P(z)

for every ``z`` in ``V^(D+1)``, and ``sum_{n, y} pi(T, n, y) = Q(T)`` for every ``T``.  The LP
maximises ``E|n| = sum pi(T, n, y) |n|`` over these couplings.  Its optimum bounds every exact
rule -- node-level (``rrs``, ``resispec``, ...) and path-level (``block``, traversal) alike.
Block verification attains it on chains (Sun et al. 2024, arXiv 2403.10444, Theorem 2;
``tests/test_pathlevel.py``); on trees the gap to node-level rules is measured in
``benchmarks/pathlevel.py``.

Size: ``V^N`` drafted trees (``N`` drafted nodes) times ``(N + 1) V`` outcomes each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trees import TreeShape
from .analysis import check_pair, continuation, enumerate_trees, prefix_laws, tree_nodes

#: Largest LP (number of variables) :func:`optimal_accepted` builds.
MAX_VARIABLES = 600_000
#: Largest number of constraint nonzeros (estimated): the solver's cost grows with them, not with the variables.
MAX_NONZEROS = 8_000_000
#: Feasibility tolerances tried in turn (HiGHS dual simplex); the first that solves is reported.
LP_TOLERANCES = (1e-10, 1e-9, 1e-7)


@dataclass(frozen=True)
class PathBound:
    """The LP optimum.

    Attributes
    ----------
    expected_accepted : float
        Largest ``E[accepted drafts]`` over all exact rules (block efficiency is this + 1).
    branching : tuple of int
        The tree shape (``(1,) * L`` for a chain).
    variables : int
        LP size.
    tolerance : float
        The HiGHS feasibility tolerance the solve used (``LP_TOLERANCES``); the optimum is good to
        about this much.
    """

    expected_accepted: float
    branching: tuple
    variables: int
    tolerance: float


def _approx(n: int) -> str:
    """``"~1.23e+07"`` for a count of any size (``float`` overflows past ~1e308: ``"~10^1234"`` there)."""
    return f"~{float(n):.3g}" if n < 10 ** 300 else f"~10^{len(str(n)) - 1}"


def lp_nonzeros(V: int, branching) -> int:
    """Estimated constraint nonzeros of :func:`optimal_accepted`'s LP for vocabulary ``V`` and a tree of shape
    ``branching`` (tuple of int): ``V^N V sum_r V^(D - depth r)`` (``N`` drafted nodes, depth ``D``; each outcome
    of row ``r`` spreads over the ``V^(D - depth r)`` horizon cells it fixes a prefix of).  The solver's memory and
    time grow with it (:data:`MAX_NONZEROS`)."""
    parent, depth = tree_nodes(tuple(branching))
    D = len(branching)
    return V ** (len(parent) - 1) * V * sum(V ** (D - int(d)) for d in depth)


def optimal_accepted(pair, branching, context=()) -> PathBound:
    """Largest expected accepted length of any exact rule, for iid-drafted trees of shape ``branching``.

    Parameters
    ----------
    pair : object with ``vocab_size`` and ``laws(contexts) -> (p (B, V), q (B, V))``
        E.g. ``simulators.autoregressive.MarkovPair``.
    branching : tuple of int, str or resispec.TreeShape
        Children per depth; ``(1, 1, 1)`` (or ``"1,1,1"``) is a chain of L = 3 drafts.
    context : sequence of int
        Tokens before the step.

    Returns
    -------
    PathBound

    Raises
    ------
    TypeError, ValueError
        Bad pair or shape, a without-replacement shape, an LP over ``MAX_VARIABLES``, or a
        solver failure (message from ``scipy.optimize.linprog``).
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    shape = TreeShape.parse(branching)
    if shape.drafting != "iid":
        raise ValueError("optimal_accepted models iid-drafted trees only; pass a shape with drafting='iid'")
    D = len(shape.branching)
    V = check_pair(pair, D)
    parent, depth = tree_nodes(shape.branching)
    N = len(parent) - 1
    n_var = V ** N * (N + 1) * V
    if n_var > MAX_VARIABLES:
        raise ValueError(f"the LP would have {_approx(n_var)} variables (V = {V}, {N} drafted nodes), over {MAX_VARIABLES}; "
                         "use a smaller V or tree")
    nnz = lp_nonzeros(V, shape.branching)
    if nnz > MAX_NONZEROS:                                       # horizon cells: the solver's memory and time
        raise ValueError(f"the LP would have {_approx(nnz)} constraint nonzeros (V = {V}, {N} drafted nodes, depth "
                         f"{D}), over MAX_NONZEROS = {MAX_NONZEROS:,} (V = 30 at L = 2 took 2 minutes and 4 GB); use a "
                         "smaller V or tree")
    laws = prefix_laws(pair, D, context)
    cont = continuation(laws, V, D + 1)
    target = cont[0].ravel()
    zstride = V ** np.arange(D, -1, -1)                                     # flat index of z in V^(D+1)
    rows, cols, vals, qT, obj = [], [], [], [], []
    n_T = 0
    for T, paths, prob in enumerate_trees(laws, V, parent):
        t = n_T
        n_T += 1
        qT.append(prob)
        for n in range(N + 1):
            m = depth[n] + 1                                                  # tokens fixed: path, then y
            c = cont[m][paths[n]]                                             # (V,) * (D + 2 - m)
            ext = np.arange(V ** (D + 1 - m))
            base = sum(paths[n][j] * zstride[j] for j in range(depth[n]))
            for y in range(V):
                var = (t * (N + 1) + n) * V + y
                z = base + y * zstride[depth[n]] + ext                        # every z with this prefix
                rows.append(z)
                cols.append(np.full(z.size, var))
                vals.append(c[y].ravel())
                obj.append(-depth[n])                                         # maximise E|n|
    n_var = n_T * (N + 1) * V
    Z = V ** (D + 1)
    A_law = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(Z, n_var))
    A_sum = coo_matrix((np.ones(n_var), (np.repeat(np.arange(n_T), (N + 1) * V), np.arange(n_var))),
                       shape=(n_T, n_var))
    from scipy.sparse import vstack

    # Dual simplex without presolve: HiGHS's presolve declares some well-posed instances (probabilities
    # ~1e-6 .. 1e-27) infeasible.  Tolerances are tightened as far as the instance allows.
    A, b, c = vstack([A_law, A_sum]).tocsr(), np.concatenate([target, qT]), np.asarray(obj, dtype=np.float64)
    for scaled in (False, True):
        if scaled:
            # HiGHS drops matrix entries below its small_matrix_value (1e-9): continuation probabilities of a pair
            # with exact zeros reach 1e-14, and the rows they sit in turned "infeasible" (a breaker's: V = 4, L = 3,
            # a draft with zeros; the point Q(T) p(y) is feasible to 1e-16).  Each row divided by its largest
            # entry keeps the same solutions; tried only when the plain solve fails, so its optima are unchanged.
            from scipy.sparse import diags

            big = np.asarray(abs(A).max(axis=1).todense()).ravel()
            scale = np.where(big > 0, 1.0 / np.where(big > 0, big, 1.0), 1.0)
            A, b = (diags(scale) @ A).tocsr(), b * scale
        for tol in LP_TOLERANCES:
            res = linprog(c, A_eq=A, b_eq=b, bounds=(0, None), method="highs-ds",
                          options={"presolve": False, "primal_feasibility_tolerance": tol,
                                   "dual_feasibility_tolerance": tol})
            if res.status == 0:
                break
        if res.status == 0:
            break
    if res.status != 0:
        raise ValueError(f"path-level LP failed at every tolerance {LP_TOLERANCES}: {res.message}")
    return PathBound(float(-res.fun), shape.branching, int(n_var), tol)
