"""Coupled certification of a depth-2 tree verifier: one set of coins per tree node, in the kernel's layout.

The tree: a root node with ``k`` candidates; candidate ``j`` has its own
child node (laws ``p_child[j], q_child[j]``) with ``k`` candidates of its
own.  Pass ``R`` distinct trees as ``p_root`` (R, V) and ``p_child`` (R, k, V):
draw ``t`` uses tree ``t % R``, so a kernel that mixes rows of a batch
mismatches at its own row.  A path is two tokens: ``tokens`` and
``accepted`` of shape (B, 2) int64; ``accepted[:, d]`` is the index of the
accepted candidate among that node's ``k`` children in sibling order, -1
when the token at depth ``d + 1`` is a residual token; after a residual
token the path ends (second token -1, second accepted -2).

Tree slots (both layouts): slot 0 is the root, slot ``1 + j`` is root
child ``j``, slot ``1 + k + j k + l`` is child ``l`` of child ``j`` (breadth
first, siblings in candidate order); ``N = 1 + k + k^2`` slots.  The coins
of the node at slot ``s`` decide among that node's children.

``convention="resispec"``
    ``kernel.verify_tree(p_root (B, V), q_root (B, V), p_child (B, k, V),
    q_child (B, k, V), c_root (B, k), c_child (B, k, k), *, uniforms (B, 1 + k,
    k + 1))``: ``uniforms[:, s]`` (slot ``s`` = 0 or 1 + j) are that node's
    coins in the ``resispec`` layout (column ``i`` decides child ``i``, column
    ``k`` draws that node's residual token).

``convention="sglang"`` (the SGLang / FlashInfer tree kernel's layout, see
:mod:`exactness.coupled.conventions`)
    ``kernel.verify_tree(candidates (B, N), retrive_index (B, N),
    retrive_next_token (B, N), retrive_next_sibling (B, N), target_probs (B,
    N, V), draft_probs (B, N, V), *, uniform_samples (B, N),
    uniform_samples_for_final_sampling (B,))``, all int64 / float64:

    - ``candidates[:, s]``: the draft token at slot ``s`` (``c_root[:, j]`` at
      slot ``1 + j``, ``c_child[:, j, l]`` at slot ``1 + k + j k + l``); slot 0
      holds -1 (the root is the last verified token, not a draft);
    - ``retrive_index[b, s] = b N + s`` (the slot's row in the flattened batch);
    - ``retrive_next_token[:, s]``: first child's slot, -1 for a leaf;
    - ``retrive_next_sibling[:, s]``: next sibling's slot, -1 for the last one;
    - ``target_probs[:, s]`` / ``draft_probs[:, s]``: the target / draft law
      over slot ``s``'s children (root: ``p_root``, ``q_root``; slot ``1 + j``:
      ``p_child[j]``, ``q_child[j]``; leaves: the uniform law 1/V, never read
      by a depth-2 walk);
    - ``uniform_samples[:, s]``: ONE coin for the node at slot ``s``; child
      ``j`` (in sibling order) is accepted when ``W_{j-1} <= coin < W_j``,
      ``W_j = 1 - prod_{l <= j} (1 - a_l)`` from the rule's accept
      probabilities ``a`` at that node (the running sum of the siblings'
      target probabilities for SGLang's target-only rule);
    - ``uniform_samples_for_final_sampling`` (B,): the coin of the one
      residual token of the path, drawn by inverse CDF in token-id order at
      the node where the walk stops (root or child).

A mismatch names its tree row, depth and slot, so a kernel that reads the
wrong node's coins or laws shows at depth 2, one that mixes rows at its row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from resispec._validation import as_laws, check_k

from .._checks import SubjectError, as_generator, check_alpha, check_n, subject_call
from ..limits import DEFAULT_TIME_LIMIT
from .._timeout import TimeLimitExceeded, hard_limit, own_limit
from .._timeout import time_limit as _time_limit
from ..sampling import draw_node_candidates
from .certify import check_min_draws, tv_upper_bound
from .conventions import Coins, check_convention
from .run import check_time_limit, run_reference

TREE_CONVENTIONS = ("resispec", "sglang")


@dataclass(frozen=True)
class TreeCertificate:
    """Result of :func:`certify_coupled_tree`.

    ``passed``, ``mismatches``, ``n``, ``tv_upper`` (bound on the TV of the
    two-token path law), ``seconds``, ``first_mismatch`` (``draw``, ``row``
    (tree row), ``depth`` (1 or 2), ``slot`` (tree slot of the node whose
    decision differs, by the reference's path), ``candidates_root``,
    ``kernel`` and ``reference`` paths), ``verdict`` (a paragraph), ``convention``, ``alpha``; and the shared
    names of every certificate (``exactness.result.VOCABULARY``: ``outcome``, ``pvalue``, ``checks``,
    ``tv_estimate`` None, ``detectable_tv``, ``summary()``).
    """

    passed: bool
    mismatches: int
    n: int
    tv_upper: float
    seconds: float
    first_mismatch: dict | None
    verdict: str
    convention: str = "resispec"
    alpha: float = 1e-3

    @property
    def outcome(self) -> str:
        """``"PASS"`` or ``"FAIL"`` (the shared names: ``exactness.result.VOCABULARY``)."""
        return "PASS" if self.passed else "FAIL"

    @property
    def checks(self) -> dict:
        """``coupled``: 1.0 with zero mismatching paths, 0.0 with any or when the kernel ignored its coins (a
        deterministic comparison)."""
        return {"coupled": 1.0 if self.passed else 0.0}

    @property
    def pvalue(self) -> float:
        """1.0 for a pass, 0.0 for a failure (:attr:`checks`: deterministic)."""
        return self.checks["coupled"]

    @property
    def tv_estimate(self) -> None:
        """None: coupled draws bound the path-law TV (:attr:`tv_upper`), they do not estimate it."""
        return None

    @property
    def detectable_tv(self) -> float:
        """Smallest path-law TV(kernel, reference) seen as a mismatch with probability 0.99 in :attr:`n` draws."""
        from ..result import detectable_mismatch_rate

        return detectable_mismatch_rate(self.n)

    def summary(self) -> str:
        """The verdict in one line (its first line)."""
        return self.verdict.splitlines()[0] if self.verdict else self.outcome

    def __str__(self):
        return self.verdict


def _node_coins(convention: str, coins: dict, sel, slot, k: int) -> Coins:
    """Coins of the node at tree slot ``slot`` (int or (n,) array) for batch rows ``sel``."""
    if convention == "resispec":
        return Coins("resispec", len(sel), k, {"uniforms": coins["uniforms"][sel, slot]})
    return Coins("sglang", len(sel), k, {"uniform_samples": coins["uniform_samples"][sel, slot][:, None],
                                         "uniform_samples_for_final_sampling":
                                             coins["uniform_samples_for_final_sampling"][sel]})


def reference_tree(reference, p0, q0, p1, q1, c0, c1, uniforms=None, *, convention="resispec", coins=None):
    """The reference's path ``(tokens (B, 2), accepted (B, 2))`` int64.

    ``p0, q0`` (B, V), ``p1, q1`` (B, k, V), ``c0`` (B, k), ``c1`` (B, k, k);
    coins: ``uniforms`` (B, 1 + k, k + 1) for ``resispec``, or ``coins`` a dict
    of the convention's arrays (``sglang``: ``uniform_samples`` (B, N),
    ``uniform_samples_for_final_sampling`` (B,)).
    """
    B, k = c0.shape
    coins = {"uniforms": uniforms} if coins is None else coins
    rows = np.arange(B)
    t0, a0 = run_reference(reference, p0, q0, c0, _node_coins(convention, coins, rows, 0, k))
    tokens = np.stack([t0, np.full(B, -1)], 1)
    acc = np.stack([a0, np.full(B, -2)], 1)
    for j in range(k):
        sel = np.flatnonzero(a0 == j)
        if sel.size:
            t1, a1 = run_reference(reference, p1[sel, j], q1[sel, j], c1[sel, j],
                                   _node_coins(convention, coins, sel, 1 + j, k))
            tokens[sel, 1], acc[sel, 1] = t1, a1
    return tokens.astype(np.int64), acc.astype(np.int64)


def sglang_tree(p0, q0, p1, q1, c0, c1):
    """The tree in the ``sglang`` layout (module docstring): a dict of the kernel's array arguments (no coins).

    ``p0, q0`` (B, V), ``p1, q1`` (B, k, V), ``c0`` (B, k), ``c1`` (B, k, k).
    """
    B, k = c0.shape
    V = p0.shape[1]
    N = 1 + k + k * k
    nxt = np.full(N, -1, dtype=np.int64)
    sib = np.full(N, -1, dtype=np.int64)
    nxt[0] = 1
    for j in range(k):
        nxt[1 + j] = 1 + k + j * k
        sib[1 + j] = 2 + j if j + 1 < k else -1
        for l in range(k - 1):
            sib[1 + k + j * k + l] = 2 + k + j * k + l
    leaf = np.full((B, k * k, V), 1.0 / V)
    return {"candidates": np.concatenate([np.full((B, 1), -1), c0, c1.reshape(B, k * k)], 1).astype(np.int64),
            "retrive_index": np.arange(B * N, dtype=np.int64).reshape(B, N),
            "retrive_next_token": np.tile(nxt, (B, 1)), "retrive_next_sibling": np.tile(sib, (B, 1)),
            "target_probs": np.concatenate([p0[:, None], p1, leaf], 1),
            "draft_probs": np.concatenate([q0[:, None], q1, leaf], 1)}


def walk_sglang(reference, candidates, retrive_next_token, retrive_next_sibling, target_probs, draft_probs,
                uniform_samples, uniform_samples_for_final_sampling, depth: int = 2):
    """Any rule walked over a tree given in the ``sglang`` layout: ``(tokens, accepted)`` (B, depth) int64.

    From slot 0, each step collects the current node's children by
    ``retrive_next_token`` then ``retrive_next_sibling`` (a full k-ary tree),
    runs the rule's chain on ``target_probs`` / ``draft_probs`` at the
    node's slot, decides with ``uniform_samples`` at that slot (and the
    final coin for a residual token) as :func:`exactness.coupled.conventions.decisions`
    says, and moves to the accepted child's slot.
    """
    B = candidates.shape[0]
    k, slot = 1, retrive_next_token[0, 0]                                 # children of row 0's root
    while retrive_next_sibling[0, slot] != -1 and k < candidates.shape[1]:
        slot, k = retrive_next_sibling[0, slot], k + 1
    tokens = np.full((B, depth), -1, dtype=np.int64)
    acc = np.full((B, depth), -2, dtype=np.int64)
    cur = np.zeros(B, dtype=np.int64)
    alive = np.arange(B)
    coins = {"uniform_samples": uniform_samples, "uniform_samples_for_final_sampling": uniform_samples_for_final_sampling}
    for d in range(depth):
        if not alive.size:
            break
        slots = [retrive_next_token[alive, cur[alive]]]
        for _ in range(k - 1):
            slots.append(retrive_next_sibling[alive, slots[-1]])
        slots = np.stack(slots, 1)                                          # (n, k) child slots
        c = candidates[alive[:, None], slots]
        t, a = run_reference(reference, target_probs[alive, cur[alive]], draft_probs[alive, cur[alive]], c,
                             _node_coins("sglang", coins, alive, cur[alive], k))
        tokens[alive, d], acc[alive, d] = t, a
        hit = a >= 0
        cur[alive[hit]] = slots[hit, a[hit]]
        alive = alive[hit]
    return tokens, acc


class ReferenceTreeKernel:
    """Any registry rule as a tree kernel in ``convention``'s layout (the reference implementation there)."""

    def __init__(self, verifier, convention: str = "resispec"):
        if convention not in TREE_CONVENTIONS:
            raise ValueError(f"tree convention must be one of {list(TREE_CONVENTIONS)}, got {convention!r}")
        self.verifier, self.convention = verifier, convention

    def verify_tree(self, *args, **coins):
        from resispec.verifiers.base import VerifyResult

        if self.convention == "resispec":
            t, a = reference_tree(self.verifier, *args, coins["uniforms"])
        else:
            cand, _index, nxt, sib, tp, dp = args
            t, a = walk_sglang(self.verifier, cand, nxt, sib, tp, dp, coins["uniform_samples"],
                               coins["uniform_samples_for_final_sampling"])
        return VerifyResult(tokens=t, accepted=a)


def _tree_laws(p_root, q_root, p_child, q_child, k):
    p0, q0, _ = as_laws(p_root, q_root, names=("p_root", "q_root"))
    R, V = p0.shape
    p1, q1 = np.asarray(p_child), np.asarray(q_child)
    p1, q1 = (p1[None] if p1.ndim == 2 else p1), (q1[None] if q1.ndim == 2 else q1)
    if p1.shape != (R, k, V) or np.shape(q1) != (R, k, V):
        raise ValueError(f"p_child, q_child must have shape (k, V) = ({k}, {V}) for one tree, or (R, k, V) = "
                         f"({R}, {k}, {V}) for R trees like p_root {np.shape(p_root)}; got {np.shape(p_child)} and "
                         f"{np.shape(q_child)}")
    a, b, _ = as_laws(p1.reshape(R * k, V), np.reshape(q1, (R * k, V)), names=("p_child", "q_child"))
    return p0, q0, a.reshape(R, k, V), b.reshape(R, k, V)


def _run_tree_kernel(kernel, args, coins: dict, convention: str, B: int):
    """``kernel.verify_tree`` on copies of the inputs: ``(tokens (B, 2), accepted (B, 2))`` int, checked; a kernel
    that raises (any ``BaseException`` but Ctrl-C and the time limit) or returns another shape or dtype is a
    :class:`exactness.SubjectError` naming it (a FAIL, never bad input)."""
    what = f"tree kernel {type(kernel).__name__}.verify_tree (called in the {convention!r} tree layout, see " \
           "exactness.coupled.tree)"
    res = subject_call(kernel.verify_tree, what, *(np.array(a) for a in args),
                       **{m: np.array(a) for m, a in coins.items()})
    out = []
    for name in ("tokens", "accepted"):
        x = subject_call(lambda: np.asarray(getattr(res, name, None)), f"{what}'s result .{name}")
        if x.dtype == object or x.dtype == bool or not np.issubdtype(x.dtype, np.integer):
            raise SubjectError(f"{what} returned {name} of dtype {x.dtype}; expected int64 of shape ({B}, 2)")
        if x.shape != (B, 2):
            raise SubjectError(f"{what} returned {name} of shape {x.shape}; expected ({B}, 2)")
        out.append(x)
    return out[0], out[1]


def certify_coupled_tree(kernel, reference, p_root, q_root, p_child, q_child, k: int, *, n: int = 20_000,
                         alpha: float = 1e-3, seed=0, convention: str = "resispec",
                         time_limit: float | None = DEFAULT_TIME_LIMIT) -> TreeCertificate:
    """Coupled certification of a depth-2 tree kernel against a registry rule (see the module docstring).

    Parameters
    ----------
    kernel : object with ``verify_tree`` taking ``convention``'s arguments (module docstring)
    reference : str or resispec.Verifier (iid drafting)
    p_root, q_root : array_like (V,) or (R, V), float64
    p_child, q_child : array_like (k, V) or (R, k, V), float64
        Laws at the root's children; R distinct trees: draw t uses tree t % R.
    k, n, alpha, seed : as :func:`exactness.certify_coupled`
    convention : {"resispec", "sglang"}
    time_limit : float or None, default ``exactness.limits.DEFAULT_TIME_LIMIT`` (3,600 s)
        A kernel (or reference) call still running :func:`exactness._timeout.hard_limit` seconds after the
        start (``time_limit + max(10 s, time_limit)``) is stopped and the certificate FAILs naming the hang.
        None: no limit.  ``SIGALRM`` in the main thread (POSIX).

    Raises
    ------
    TypeError, ValueError
        Bad laws or arguments; a ``reference`` that is not a registry name or a Verifier
        (TypeError) or that drafts without replacement (ValueError: these trees draw i.i.d.
        candidates); a kernel without ``verify_tree``.  A kernel that raises or returns the wrong shape or
        dtype is not bad input: a FAIL certificate naming the cause (``verdict`` "FAIL (subject error): ...").
    """
    from ..certify_run import load_verifier

    t_start = time.perf_counter()
    ref = load_verifier(reference)[1] if isinstance(reference, str) else reference
    if not (callable(getattr(ref, "verify", None)) and callable(getattr(ref, "chain", None))):
        raise TypeError(f"reference must be a registry name (e.g. 'rrs') or a resispec Verifier (an object with "
                        f"verify and chain), got {type(reference).__name__}")
    if getattr(ref, "drafting", "iid") not in ("iid", "any"):
        raise ValueError(f"reference {getattr(ref, 'name', reference)!r} is exact for {ref.drafting} drafts, but "
                         "trees here draw i.i.d. candidates at every node: pick an i.i.d. rule (rrs, kseq, "
                         "resispec, ...)")
    if not callable(getattr(kernel, "verify_tree", None)):
        raise TypeError("kernel must have verify_tree(...) taking the tree in the convention's layout "
                        f"(exactness.coupled.tree), got {type(kernel).__name__}")
    if check_convention(convention) not in TREE_CONVENTIONS:
        raise ValueError(f"tree convention must be one of {list(TREE_CONVENTIONS)}, got {convention!r}")
    k, n, alpha = check_k(k), check_n(n), check_alpha(alpha)
    check_min_draws(n, alpha)
    p0, q0, p1, q1 = _tree_laws(p_root, q_root, p_child, q_child, k)
    rng = as_generator(seed)
    check_time_limit(time_limit)
    hard = None if time_limit is None else own_limit(hard_limit(time_limit))
    try:
        with _time_limit(hard):
            return _coupled_tree_loop(kernel, ref, p0, q0, p1, q1, k, n, alpha, rng, convention, t_start)
    except SubjectError as exc:                 # the kernel misbehaved: a FAIL naming it, never bad input
        return TreeCertificate(False, 0, 0, 1.0, time.perf_counter() - t_start, None,
                               f"FAIL (subject error): {exc.cause}", convention, alpha)
    except TimeLimitExceeded:
        if hard is None:
            raise                               # the caller's own (outer) limit
        return TreeCertificate(False, 0, 0, 1.0, time.perf_counter() - t_start, None,
                               f"FAIL (subject error): the tree kernel (or the reference) did not return: stopped at "
                               f"the hard time limit of {hard:g} s (time_limit = {time_limit:g} s plus a grace of "
                               f"{hard - time_limit:g} s)", convention, alpha)


def _coupled_tree_loop(kernel, ref, p0, q0, p1, q1, k: int, n: int, alpha: float, rng, convention: str,
                       t_start: float) -> TreeCertificate:
    """The coupled draws of :func:`certify_coupled_tree` (its arguments checked), in batches of ``step``."""
    R, V = p0.shape
    N = 1 + k + k * k
    done = mism = 0
    first = None
    step = max(1, (1 << 20) // (V * N))
    while done < n:
        B = min(step, n - done)
        node = (done + np.arange(B)) % R
        c0 = np.empty((B, k), dtype=np.int64)
        c1 = np.empty((B, k, k), dtype=np.int64)
        uc0, uc1 = rng.random((B, k)), rng.random((B, k, k))
        for r in range(R):
            sel = node == r
            c0[sel] = draw_node_candidates(q0[r], k, "iid", uc0[sel])
            for j in range(k):
                c1[sel, j] = draw_node_candidates(q1[r, j], k, "iid", uc1[sel, j])
        P0, Q0, P1, Q1 = p0[node], q0[node], p1[node], q1[node]
        if convention == "resispec":
            coins = {"uniforms": rng.random((B, 1 + k, k + 1))}
            args = (P0, Q0, P1, Q1, c0, c1)
        else:
            coins = {"uniform_samples": rng.random((B, N)), "uniform_samples_for_final_sampling": rng.random(B)}
            args = tuple(sglang_tree(P0, Q0, P1, Q1, c0, c1).values())
        kt, ka = _run_tree_kernel(kernel, args, coins, convention, B)
        if done == 0:                       # the first batch twice: a kernel must be a function of its coins
            kt2, ka2 = _run_tree_kernel(kernel, args, coins, convention, B)
            if not (np.array_equal(kt, kt2) and np.array_equal(ka, ka2)):
                name = getattr(ref, "name", ref)
                return TreeCertificate(False, 0, 0, 1.0, time.perf_counter() - t_start, None,
                                       f"FAIL: tree kernel vs {name!r}: the kernel returned different outputs for "
                                       "the same inputs and coins (it ignores the coins it is given, or draws its "
                                       "own randomness); coupled certification needs a kernel that is a function "
                                       "of its coins", convention, alpha)
        rt, ra = reference_tree(ref, P0, Q0, P1, Q1, c0, c1, convention=convention, coins=coins)
        bad = (kt != rt) | (ka != ra)
        rows = np.flatnonzero(bad.any(axis=1))
        if rows.size and first is None:
            b = int(rows[0])
            depth = int(np.argmax(bad[b])) + 1
            first = {"draw": done + b, "row": int(node[b]), "depth": depth,
                     "slot": 0 if depth == 1 else 1 + int(ra[b, 0]), "candidates_root": c0[b].tolist(),
                     "kernel": (kt[b].tolist(), ka[b].tolist()), "reference": (rt[b].tolist(), ra[b].tolist())}
        mism += int(rows.size)
        done += B
    tv = tv_upper_bound(mism, done, alpha)
    sec = time.perf_counter() - t_start
    name = getattr(ref, "name", ref)
    if mism == 0:
        verdict = (f"NO BIAS DETECTED: tree kernel vs {name!r} ({convention!r} tree layout, {R} tree(s)): 0 mismatches in "
                   f"{done:,} coupled paths; TV of the two-token path law <= {tv:.3g} at confidence {1 - alpha:g}")
    else:
        verdict = (f"FAIL: tree kernel vs {name!r} ({convention!r} tree layout): {mism:,} mismatching paths in "
                   f"{done:,}; first at draw {first['draw']:,}, tree row {first['row']}, depth {first['depth']}, "
                   f"slot {first['slot']}: kernel {first['kernel']}, reference {first['reference']}")
    return TreeCertificate(mism == 0, mism, done, tv, sec, first, verdict, convention, alpha)
