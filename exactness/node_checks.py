"""The checks of a node certificate (:func:`exactness.certify_verifier`) as objects (issue 39, item 3).

Each check is a :class:`NodeCheck`: its ``names`` (the p-values it records in ``Certificate.checks``), what it
``detects``, when it applies (else the reason it is skipped, in ``Certificate.skipped``), how it runs on the
shared :class:`NodeRun`, its design twins in the manner of TFP's ``statistical_testing`` (:meth:`NodeCheck.
detectable_tv`: the smallest TV it detects at ``n``; :meth:`NodeCheck.n_for_tv`: the ``n`` for a TV), and the
planted bug it must catch (``mutant``, a key of :data:`exactness.node_mutants.NODE_MUTANTS`;
``tests/test_node_checks.py`` certifies every one and asserts that the check fails it).  ``certify_verifier``
is then a short plan: the ``before`` stage of every check (the exact law), the Monte Carlo draws, the ``run``
stage of every check in :data:`NODE_CHECKS` order, the certificate.

The marginal test (the certificate's own chi-square / G-test of the emitted tokens against ``p``) is not here:
:func:`exactness.certificate.certificate_from_counts` computes it from the counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from resispec import Verifier
from resispec._validation import Laws
from resispec.enumeration import count_tuples

from ._checks import SubjectError, passes_through, plural
from ._timeout import check_deadline
from .exact import MAX_TUPLES, ChainError, certify_exact, enumerable, exact_tol
from .gof import gof_test
from .power import DesignTwins
from .sampling import (_ELEMS, NodeSampler, call_subject, candidate_law, draw_node_candidates, drafting_of,
                       emitted_result, has_chain, subject_cause, takes_laws, takes_uniforms)
from .tree import tree_check

#: Largest vocabulary for the tree checks.
TREE_MAX_V = 16
#: Largest number of sampled pairs per tree check.
TREE_N = 50_000
#: Nodes in the batched == one-at-a-time check.
BATCH_ROWS = 16
#: Largest number of draws in the black-box ``batched_rows`` check.
BATCH_N = 50_000
#: Draws of the black-box ``small_batches`` check (verify on batches of 1..``SMALL_B`` rows of the node).
SMALL_N = 2_000
SMALL_B = 8
#: Draws compared twice under one seed by ``determinism``.
DETERMINISM_N = 500
#: Reason a check needing the accepted index was skipped when ``verify``'s accepted indices broke their contract.
BAD_ACCEPTED_SKIP = "verify's accepted indices do not name its candidates (see notes): not usable"


@dataclass
class NodeRun:
    """What the checks of one node certificate share, filled in plan order (one direction of data: the plan
    writes ``mc`` once; each check reads what it needs and writes only its own entries).

    verifier        the subject;  node: the one-node ``Laws`` checked at the door (p, q: (1, V) float64)
    k               candidates per node;  sampler: its ``exactness.sampling.NodeSampler``
    n               Monte Carlo draws;  alpha, power: the certificate's
    exact, tree     whether the exact-law and tree checks were asked for
    seeds           ``{"det", "batch", "tree"}``: the SeedSequence of each check that draws on its own
    m_max           the most p-values Holm can count here (the acceptance bound states its power at alpha / m_max)
    J               (k + 1, V) float64 exact joint law of (stop, token) from the verifier's chain, or None
    mc              the Monte Carlo counts (``exactness.chunks``): tokens (V,), joint ((k + 1) V,) or None,
                    by_batch (S, V) or None, note (a broken accepted-index contract) or None
    checks, skipped, details, mc_df   the certificate's entries
    """

    verifier: object
    node: Laws
    k: int
    sampler: NodeSampler
    n: int
    alpha: float
    power: float
    exact: bool
    tree: bool
    seeds: dict
    m_max: int
    J: np.ndarray | None = None
    mc: object = None
    checks: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    mc_df: dict = field(default_factory=dict)

    @property
    def p(self) -> np.ndarray:
        return self.node.p[0]

    @property
    def q(self) -> np.ndarray:
        return self.node.q[0]

    @property
    def V(self) -> int:
        return int(self.node.p.shape[1])

    def chi_square(self, name: str, counts: np.ndarray, law: np.ndarray) -> None:
        """A pooled chi-square / G-test of ``counts`` (C,) against ``law`` (C,) recorded under ``name``."""
        res = gof_test(counts, law)
        m = int(counts.sum())
        self.details[name] = {"statistic": res.statistic, "df": res.df, "pvalue": res.pvalue, "n": m,
                              "tv": 0.5 * float(np.abs(counts / m - law).sum()) if m else None}
        self.mc_df[name] = res.df
        if res.df == 0 and res.impossible == 0 and _support(law) > 1:
            self.skipped[name] = f"df 0 after pooling ({plural(m, 'sample')}): the test cannot fail"
        else:
            self.checks[name] = res.pvalue


class NodeCheck(DesignTwins):
    """One check of a node certificate (module docstring).  Subclasses set the class attributes and ``run``."""

    #: the p-values it records (``Certificate.checks`` keys)
    names: tuple = ()
    #: what it can detect, in a sentence
    detects: str = ""
    #: the planted bug it must catch (``exactness.node_mutants.NODE_MUTANTS``)
    mutant: str = ""

    def before(self, st: NodeRun) -> None:
        """Work before the Monte Carlo draws (default: none)."""

    def run(self, st: NodeRun) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.names)})"


class ExactLaw(NodeCheck):
    names = ("exact_law",)
    detects = ("a verifier whose declared chain(p, q, candidates) does not emit p exactly (TV above the round-off "
               "tolerance, by enumeration of every candidate tuple or the built-in accept table), or accepts more "
               "than alpha*; sampling-free")
    mutant = "residual_is_p"
    deterministic = True

    def before(self, st: NodeRun) -> None:
        v, V, k = st.verifier, st.V, st.k
        if not st.exact:
            st.skipped["exact_law"] = "exact=False"
        elif not has_chain(v):
            st.skipped["exact_law"] = "black box: no chain(p, q, candidates) (not a resispec.Verifier)"
        elif not (enumerable(v, st.q, k) or st.sampler.table is not None):
            d = drafting_of(v)
            m = count_tuples(_support(candidate_law(v, st.node.q)[0]), k, "iid" if d == "any" else d)
            st.skipped["exact_law"] = (f"{m:,} candidate tuples (V = {V}, k = {k}) exceed MAX_TUPLES = "
                                       f"{MAX_TUPLES:,} and no built-in accept table")
        else:
            try:
                ex = certify_exact(v, st.node, None, k, limit=MAX_TUPLES)
            except ChainError as e:
                st.checks["exact_law"] = 0.0
                st.details["exact"] = {"tv": None, "error": str(e)}
            except SubjectError:
                raise
            except BaseException as e:    # the verifier's own chain (or hooks) failed: a FAIL naming it
                if passes_through(e):             # Ctrl-C, the harness's time limit
                    raise
                raise SubjectError(subject_cause(f"{type(v).__name__}.chain (exact law)", e)) from e
            else:
                st.J = ex.joint                                                  # (k + 1, V) float64
                st.checks["exact_law"] = 1.0 if ex.passed else 0.0
                st.details["exact"] = {"tv": ex.tv, "acceptance": ex.acceptance, "alpha_star": ex.alpha_star,
                                       "tol": exact_tol(st.p, st.q)}

    def run(self, st: NodeRun) -> None:
        """All its work is done before the draws."""


class BatchSizes(NodeCheck):
    names = ("batch_sizes",)
    detects = ("a verify wrong only for some batch sizes (a kernel path for 9-190 rows, a padding bug at powers "
               "of two), which the pooled marginal dilutes; generic (black-box) path only")
    mutant = "power_of_two_bias"

    def run(self, st: NodeRun) -> None:
        if st.mc.by_batch is None:       # not the generic path: verify is not what draws the main sample
            return
        pv, info = _batch_sizes(st.mc.by_batch, st.sampler.batch_sizes, st.p)
        st.details["batch_sizes"] = info
        if pv is None:
            st.skipped["batch_sizes"] = (f"no batch size could be compared with the others "
                                         f"({plural(info['n'], 'draw')}): df 0 after pooling")
        else:
            st.checks["batch_sizes"] = pv


class ChainJoint(NodeCheck):
    names = ("joint", "accepted_count", "residual")
    detects = ("a verify that disagrees with its own declared chain: the sampled (stop, token) pairs, the "
               "accepted index and the residual token against the chain's exact joint law (a reused uniform, "
               "an accepted index by token match)")
    mutant = "accepted_by_match"

    def before(self, st: NodeRun) -> None:
        if st.J is None:
            why = "failed: chain invalid)" if "error" in st.details.get("exact", {}) else "not run)"
            for name in self.names:
                st.skipped[name] = "needs the exact joint law (exact_law " + why

    def run(self, st: NodeRun) -> None:
        J, mc, k, V, n = st.J, st.mc, st.k, st.V, st.n
        if J is None:
            return
        if mc.joint is None:
            for name in self.names:
                st.skipped[name] = "verify returned no .accepted" if mc.note is None else BAD_ACCEPTED_SKIP
            return
        by_stop = mc.joint.reshape(k + 1, V)                  # (k + 1, V): row i stops at candidate i, k residual
        st.chi_square("joint", mc.joint, J.ravel())
        st.chi_square("accepted_count", by_stop.sum(axis=1), J.sum(axis=1))
        rmass = J[k].sum()                                    # P(every candidate rejected)
        nres = int(by_stop[k].sum())
        if rmass > 0 and nres > 0:
            st.chi_square("residual", by_stop[k].copy(), J[k] / rmass)
        else:
            st.skipped["residual"] = ("the chain's residual has zero mass" if rmass <= 0
                                      else "no draw ended at the residual")
        st.details["acceptance_mc"] = (n - nres) / n
        st.details["chain_consistency"] = {
            "tv_joint": 0.5 * float(np.abs(mc.joint / n - J.ravel()).sum()),
            "tv_marginal": 0.5 * float(np.abs(mc.tokens / n - J.sum(axis=0)).sum())}


class AcceptanceBoundCheck(NodeCheck):
    names = ("acceptance_bound",)
    detects = ("a rule that accepts more often than alpha*, the most any exact rule can (exactness."
               "acceptance_bound): biased from its acceptance alone, whatever its histogram")
    mutant = "too_generous"

    def run(self, st: NodeRun) -> None:
        from .acceptance_bound import ACCEPTANCE_BOUND as AB

        why = AB.skip_reason(st.mc.joint is not None, drafting_of(st.verifier))
        if why is None:
            res = AB.run_node(st.mc.joint, st.node, None, st.k, drafting_of(st.verifier), st.alpha, st.power)
            # its power is stated at alpha / (the most checks Holm can count): what the certificate itself detects
            res = replace(res, detectable_excess=AB.detectable_excess(res.n, res.bound, st.alpha / st.m_max,
                                                                      st.power))
            st.details[AB.name] = res.as_dict()
            if math.isinf(res.detectable_excess):
                why = f"{res.n:,} draws against alpha* = {res.bound:.4g}: no accepted count can fail the test"
            else:
                st.checks[AB.name] = res.pvalue
        if why is not None:
            st.skipped[AB.name] = why


class Determinism(NodeCheck):
    names = ("determinism",)
    detects = f"a verifier ignoring its seed: the same seed twice, {DETERMINISM_N} draws, different tokens"
    mutant = "unseeded_residual"
    deterministic = True

    def run(self, st: NodeRun) -> None:
        seed = st.seeds["det"]
        a = st.sampler.draws(np.random.default_rng(seed), DETERMINISM_N)
        b = st.sampler.draws(np.random.default_rng(seed), DETERMINISM_N)
        same = np.array_equal(a.tokens, b.tokens) and np.array_equal(a.accepted, b.accepted)
        st.checks["determinism"] = 1.0 if same else 0.0
        if st.sampler.guard is not None:   # the fast path's run-time recheck against verify and chain
            st.details["fast_path_check"] = dict(st.sampler.guard)
        if not same:
            st.details["determinism"] = {"reason": "the same seed gave different draws"}


def _is_coupled(verifier) -> bool:
    return isinstance(verifier, Verifier) and takes_uniforms(verifier)


class Batched(NodeCheck):
    names = ("batched",)
    detects = (f"a verify whose rows interact: a batch of {BATCH_ROWS} distinct nodes against one node at a time "
               "under the same uniforms (rows mixed, broadcast, reordered)")
    mutant = "batch_broadcast"
    deterministic = True

    def run(self, st: NodeRun) -> None:
        v = st.verifier
        if not isinstance(v, Verifier):
            st.skipped["batched"] = "not a resispec.Verifier (needs verify(..., uniforms=)); batched_rows ran instead"
        elif not takes_uniforms(v):
            st.skipped["batched"] = "verify takes no uniforms keyword (black-box path); batched_rows ran instead"
        else:
            b, info = _batched(v, st.p, st.q, st.k, np.random.default_rng(st.seeds["batch"]))
            st.checks["batched"] = b
            if info:
                st.details["batched"] = info


class BlackBoxBatches(NodeCheck):
    names = ("batched_rows", "small_batches")
    detects = (f"for a black box (no uniforms to couple): rows mixed in batches of {BATCH_ROWS} distinct nodes, "
               f"each row against its own law, and a verify wrong on batches of 1..{SMALL_B} rows")
    mutant = "row_mixer"

    def run(self, st: NodeRun) -> None:
        if _is_coupled(st.verifier):      # Batched compares coin for coin instead
            return
        v, p, q, k, n, s_batch = st.verifier, st.p, st.q, st.k, st.n, st.seeds["batch"]
        for name, (pv, info), why in (
                ("batched_rows", _batched_rows(v, p, q, k, min(n, BATCH_N),
                                               np.random.default_rng(s_batch.spawn(1)[0])), f" over {BATCH_ROWS} rows"),
                ("small_batches", _small_batches(st.sampler, p, min(n, SMALL_N),
                                                 np.random.default_rng(s_batch.spawn(1)[0])), "")):
            st.details[name] = info
            st.mc_df[name] = info["df"]
            if pv is None:
                st.skipped[name] = f"df 0 after pooling ({plural(info['n'], 'draw')}{why})"
            else:
                st.checks[name] = pv


class Tree(NodeCheck):
    names = ("tree_bonus", "tree_two_level")
    detects = ("the joint law of two successive tokens on a small tree: depth 1 (the bonus token after a full "
               "accept, e.g. drawn from the residual) and depth 2; exact TV folded in; V <= TREE_MAX_V")
    mutant = "bonus_from_residual"

    def run(self, st: NodeRun) -> None:
        v, V, k, n = st.verifier, st.V, st.k, st.n
        if not st.tree:
            st.skipped.update({t: "tree=False" for t in self.names})
            return
        if st.mc.note is not None:
            st.skipped.update({t: BAD_ACCEPTED_SKIP + " (a full accept leads to the bonus token)" for t in self.names})
            return
        if V > TREE_MAX_V:
            st.skipped.update({t: f"V = {V} > TREE_MAX_V = {TREE_MAX_V}" for t in self.names})
            return
        rng_t = np.random.default_rng(st.seeds["tree"])
        n_tree = max(1, min(n // 2, TREE_N))
        can_exact = (st.exact and has_chain(v) and enumerable(v, st.q, k)
                     and "error" not in st.details.get("exact", {}))
        for name, depth in (("tree_bonus", 1), ("tree_two_level", 2)):
            try:
                tr = tree_check(v, st.node, None, k, n_tree, rng_t, depth=depth, exact=can_exact)
            except ChainError as e:
                st.checks[name] = 0.0
                st.details[name] = {"exact_tv": None, "error": str(e)}
                continue
            except SubjectError:
                raise
            except BaseException as e:    # its hooks (sample_bonus, bonus_law) or chain failed: a FAIL
                if passes_through(e):             # Ctrl-C, the harness's time limit
                    raise
                raise SubjectError(subject_cause(f"{type(v).__name__} (the {name} check)", e)) from e
            st.details[name] = {"exact_tv": tr.exact_tv, "pvalue_mc": tr.pvalue, "n": tr.n,
                                "statistic": tr.statistic, "df": tr.df, "tv_mc": tr.tv_mc}
            st.mc_df[name] = tr.df
            if tr.exact_tv is not None:
                st.checks[name] = tr.pvalue if tr.exact_tv < 2 * exact_tol(st.p, st.q) else 0.0
                if tr.df == 0:
                    st.details[name]["reason"] = "Monte Carlo part has df 0; exact part tested"
            elif tr.df == 0 and tr.pvalue > 0:   # p = 0 at df 0: an impossible pair was drawn, a FAIL
                st.skipped[name] = (f"no exact law and df 0 after pooling ({plural(tr.n, 'pair')}): the test "
                                    "cannot fail")
            else:
                st.checks[name] = tr.pvalue
        if not can_exact:
            st.skipped["tree_exact"] = "tree checks ran by Monte Carlo only (no enumerable chain)"


#: The node checks in plan order (``certify_verifier``): their ``before`` stages, the draws, their ``run`` stages.
NODE_CHECKS: tuple[NodeCheck, ...] = (ExactLaw(), BatchSizes(), ChainJoint(), AcceptanceBoundCheck(),
                                      Determinism(), Batched(), BlackBoxBatches(), Tree())


# ----------------------------------------------------------------------------------- the checks' arithmetic

def _batched(verifier, p, q, k, rng) -> float | None:
    """1.0 when a batch of distinct nodes verifies like one node at a time, else the failing row in a dict."""
    V = p.size
    B = BATCH_ROWS
    perms = np.stack([rng.permutation(V) for _ in range(B)])
    P, Q = p[perms], q[perms]
    d = drafting_of(verifier)
    cl = candidate_law(verifier, Q)
    cand = np.stack([draw_node_candidates(cl[b], k, d, rng.random((1, k)))[0] for b in range(B)])
    u = rng.random((B, k + 1))
    # permuted rows of a checked node are laws: resispec's own verify gets them as a trusted Laws
    laws = takes_laws(verifier, "verify")

    def pq(rows):
        return (Laws(P[rows].copy(), Q[rows].copy()), None) if laws else (P[rows].copy(), Q[rows].copy())

    name = f"{type(verifier).__name__}.verify"
    whole = call_subject(verifier.verify, name, *pq(slice(None)), cand.copy(), uniforms=u)
    wt, wa, _ = emitted_result(whole, B, k, V, verifier, cand)
    for b in range(B):
        one = call_subject(verifier.verify, name, *pq(slice(b, b + 1)), cand[b:b + 1].copy(), uniforms=u[b:b + 1])
        ot, oa, _ = emitted_result(one, 1, k, V, verifier, cand[b:b + 1])
        same_acc = oa[0] == wa[b] or min(oa[0], wa[b]) < -1   # unusable accepted indices: the tokens are compared
        if ot[0] != wt[b] or not same_acc:
            return 0.0, {"reason": f"verify on a batch of {B} distinct nodes differs from one node at a time at "
                                   f"row {b} (token {wt[b]} vs {ot[0]}, same uniforms)"}
    return 1.0, {}


def _batched_rows(verifier, p, q, k, n, rng) -> tuple[float, dict]:
    """Black-box batch check: ``verify`` on batches of ``BATCH_ROWS`` distinct nodes, each row against its own law.

    Node ``b`` is ``(p, q)`` permuted by ``perms[b]``; batch row ``r`` holds node
    ``r % B``, so every call mixes all ``B`` nodes (at least ``B`` rows a call).
    Under exactness, ``perms[b][token]`` of a row of node ``b`` follows ``p``;
    the per-node pooled chi-squares (``gof_test``) are summed (statistic and df)
    and referred to ``scipy.stats.chi2``.  Returns ``(p-value, details)``; df 0
    gives ``(None, details)`` (the caller lists it as skipped).
    """
    from scipy import stats

    V, B = p.size, BATCH_ROWS
    perms = np.stack([rng.permutation(V) for _ in range(B)])
    P, Q = p[perms], q[perms]
    d = drafting_of(verifier)
    cl = candidate_law(verifier, Q)
    m = max(1, n // B)
    cand = np.empty((m, B, k), dtype=np.int64)
    for b in range(B):
        cand[:, b] = draw_node_candidates(cl[b], k, d, rng.random((m, k)))
    cand = cand.reshape(m * B, k)
    node = np.tile(np.arange(B), m)
    uses_u, laws = takes_uniforms(verifier), takes_laws(verifier, "verify")
    rows_per_call = max(B, (_ELEMS // V) // B * B)
    toks = []
    for s in range(0, m * B, rows_per_call):
        idx = node[s:s + rows_per_call]
        c = cand[s:s + rows_per_call]
        Pr, Qr = P[idx], Q[idx]
        args = (Laws(Pr, Qr), None) if laws else (Pr, Qr)
        kw = {"uniforms": rng.random((idx.size, k + 1))} if uses_u else {}
        check_deadline()              # past a cell's soft deadline (run_cell) no new call starts: RunOutOfTime
        try:
            res = verifier.verify(*args, c.copy(), rng, **kw)
        except SubjectError:
            raise
        except BaseException as e:    # the subject failed: a FAIL naming it
            if passes_through(e):             # Ctrl-C, the harness's time limit
                raise
            raise SubjectError(f"{type(verifier).__name__}.verify failed on a batch of {idx.size} rows of {B} "
                               f"distinct nodes ({subject_cause(type(verifier).__name__ + '.verify', e)}); p and q "
                               "are (B, V) float64 with a different law in each row") from e
        t, _, _ = emitted_result(res, idx.size, k, V, verifier, c)
        toks.append(t)
    t = np.concatenate(toks)
    x = perms[node, t]  # back to the labels of p
    stat, df, tv = 0.0, 0, 0.0
    for b in range(B):
        cb = np.bincount(x[node == b], minlength=V)
        r = gof_test(cb, p)
        if r.impossible:
            return 0.0, {"statistic": float("inf"), "df": df, "n": int(t.size), "rows": B,
                         "reason": f"row {b} of the batch emitted a token its own target gives probability 0"}
        stat += r.statistic
        df += r.df
        tv = max(tv, 0.5 * float(np.abs(cb / cb.sum() - p).sum()))
    info = {"statistic": stat, "df": df, "n": int(t.size), "rows": B, "tv": tv}
    if df == 0:
        return None, info
    pv = float(stats.chi2.sf(stat, df))
    info["pvalue"] = pv
    return pv, info


def _small_batches(sampler: NodeSampler, p, n: int, rng) -> tuple[float | None, dict]:
    """Black-box check: ``n`` draws through ``verify`` on batches of 1, 2, .., ``SMALL_B`` rows (the main sample
    and ``batched_rows`` call it with thousands of rows or at least ``BATCH_ROWS``), tested against ``p`` by the
    pooled chi-square.  Catches a ``verify`` that is wrong only on small batches (a single-row fast path, a
    padding bug): with ``SMALL_N`` draws, a bias of TV ~0.1 or more.  ``(None, details)`` when df is 0."""
    k, V = sampler.k, sampler.V
    toks, s, b = [], 0, 0
    while s < n:
        B = min(1 + b % SMALL_B, n - s)
        uc, uv = rng.random((B, k)), rng.random((B, k + 1))
        cand = draw_node_candidates(sampler.cand_law, k, sampler.drafting, uc)
        toks.append(sampler._generic(cand, uv, rng).tokens)
        s, b = s + B, b + 1
    counts = np.bincount(np.concatenate(toks), minlength=V)
    r = gof_test(counts, p)
    info = {"statistic": r.statistic, "df": r.df, "n": int(n), "largest_batch": SMALL_B,
            "tv": 0.5 * float(np.abs(counts / n - p).sum())}
    if r.impossible:
        info["reason"] = "a small batch emitted a token the target gives probability 0"
        return 0.0, info
    if r.df == 0:
        return None, info
    info["pvalue"] = r.pvalue
    return r.pvalue, info


def _cells_by_mass(p, m: int) -> np.ndarray:
    """Cell of each token (V,) int64, pooling tokens by decreasing ``p`` so that ``m`` draws expect at least
    ``MIN_EXPECTED`` in every cell (the last, short cell merged into the one before); tokens of ``p = 0`` share
    the last cell (the marginal check fails them at once)."""
    from .gof import MIN_EXPECTED

    order = np.argsort(-p, kind="stable")
    start = np.cumsum(p[order]) - p[order]
    cid = np.floor(start * m / MIN_EXPECTED).astype(np.int64)
    _, cid = np.unique(cid, return_inverse=True)
    if cid.max() > 0 and p[order][cid == cid.max()].sum() * m < MIN_EXPECTED:
        cid[cid == cid.max()] -= 1
    cells = np.empty(p.size, dtype=np.int64)
    cells[order] = cid
    return cells


def _batch_sizes(by_batch: np.ndarray, sizes, p) -> tuple[float | None, dict]:
    """The ``batch_sizes`` check: is the law of the emitted tokens the same at every batch size?  ``by_batch``
    (S, V) counts the main sample's tokens by the size class of the ``verify`` call that emitted them (row ``j``:
    calls of ``sizes[j]`` rows).  Each class is compared with the rest of the sample by a chi-square test of
    homogeneity (``scipy.stats.chi2_contingency`` on the 2 x C table of tokens pooled into cells of at least
    ``MIN_EXPECTED`` expected draws, :func:`_cells_by_mass`), Bonferroni over the classes tested:
    ``p = min(1, m * min_j p_j)``.  Catches a ``verify`` wrong only for some batch sizes (a kernel path for 9-190
    rows, a padding bug at powers of two), which the pooled marginal dilutes; a bias the same at every size is
    the marginal's (this check stays quiet on it).  ``(None, details)`` when no class could be tested."""
    from scipy import stats

    total = by_batch.sum(axis=0)
    N = int(total.sum())
    rows, worst = [], None
    for size, c in zip(sizes, by_batch):
        m = int(c.sum())
        if not m:
            continue
        row = {"rows": int(size), "n": m, "tv": 0.5 * float(np.abs(c / m - p).sum()), "df": 0, "pvalue": None}
        rows.append(row)
        rest = total - c
        if N - m <= 0:
            continue
        cells = _cells_by_mass(p, min(m, N - m))
        C = int(cells.max()) + 1
        if C < 2:
            continue
        table = np.stack([np.bincount(cells, weights=c, minlength=C), np.bincount(cells, weights=rest, minlength=C)])
        table = table[:, table.sum(axis=0) > 0]
        if table.shape[1] < 2:
            continue
        stat, pv, df, _ = stats.chi2_contingency(table, correction=False)
        row.update(df=int(df), statistic=float(stat), pvalue=float(pv))
        if worst is None or pv < worst["pvalue"]:
            worst = row
    tested = sum(1 for r in rows if r["pvalue"] is not None)
    info = {"classes": rows, "n": N, "df": sum(r["df"] for r in rows)}
    if worst is None:
        return None, info
    pv = min(1.0, tested * worst["pvalue"])
    info.update(pvalue=pv, tv=worst["tv"], statistic=worst["statistic"], df=worst["df"],
                reason=f"worst of {tested} batch sizes: verify on batches of {worst['rows']:,} rows "
                       f"({plural(worst['n'], 'draw')}) against the other sizes, Bonferroni")
    return pv, info


def _support(law) -> int:
    return int(np.count_nonzero(np.asarray(law) > 0))

