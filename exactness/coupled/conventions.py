"""Coin conventions: how one set of uniforms becomes a verifier's decisions.

A coin convention fixes (1) the coins drawn per node, (2) how a kernel
receives them and (3) how the reference rule turns them into decisions.
Every registry rule runs under every convention through its ``chain``
(accept probabilities ``a`` (B, k) and residual ``r`` (B, V)), so a kernel
can be checked against the rule it claims, in the kernel's own layout.

``resispec`` (ours; :meth:`resispec.Verifier.verify`)
    coins ``uniforms`` (B, k + 1) float64 in [0, 1); the kernel is called
    ``verify(p, q, candidates, None, uniforms=U)``.  Column ``i`` decides
    candidate ``i``: accepted when ``U[:, i] < a[:, i]`` (the first such
    ``i`` wins); when all ``k`` are rejected, column ``k`` draws the
    residual token by inverse CDF in token-id order,
    ``min{j : cumsum(r)[j] > U[:, k] * sum(r)}`` (``resispec.sampling``).

``sglang`` (the FlashInfer / SGLang tree kernels' ``uniform_samples`` layout)
    coins ``uniform_samples`` (B, k + 1) and
    ``uniform_samples_for_final_sampling`` (B,); the kernel is called
    ``verify(p, q, candidates, None, uniform_samples=US,
    uniform_samples_for_final_sampling=UF)``.  The node is the root of a
    depth-1 tree whose k children are the candidates in sibling order; slot
    0 is the root, slot ``1 + i`` is child ``i``.  ONE coin per tree node
    decides among that node's children: the root's coin ``US[:, 0]``
    accepts child ``j`` when ``W_{j-1} <= US[:, 0] < W_j`` with ``W_j = 1 -
    prod_{l <= j} (1 - a_l)`` (the chance that the chain stops at or before
    ``j``); for SGLang's target-only rule on deterministic drafts, ``a_j =
    p(x_j) / (1 - sum_{l<j} p(x_l))`` so ``W_j`` is the running sum of the
    siblings' target probabilities, which is the comparison their kernel
    makes.  Slots ``1..k`` are the children's own coins (used for deeper
    levels of a tree; unused at depth 1).  When no child is accepted, the
    final token is drawn from the residual by inverse CDF in token-id order
    with ``UF``.  Inferred (not copied) from the public signatures and tests
    of ``sgl_kernel.tree_speculative_sampling_target_only`` and FlashInfer's
    ``chain_speculative_sampling`` docs (``uniform_samples`` shape
    ``(batch, num_draft_tokens)``, coins indexed by the tree slot of the
    node being expanded, a separate ``(batch,)`` coin for the final
    sample); their kernels compare ``coin <= threshold`` in float32, a
    measure-zero difference at float64 coins that this reference does not
    model.  Trees in this layout (``candidates``, ``retrive_next_token``,
    ``retrive_next_sibling``, ``target_probs`` per slot, ``uniform_samples``
    (B, num_draft_tokens)): :mod:`exactness.coupled.tree`.

``generator`` (engines that take a ``numpy.random.Generator`` / ``torch.Generator``)
    coins: one integer seed per batch; the kernel is called ``verify(p, q,
    candidates, numpy.random.default_rng(seed))`` and the reference draws
    ``U = default_rng(seed).random((B, k + 1))`` and decides as ``resispec``
    (which is exactly what :meth:`resispec.Verifier.verify` does when given
    ``rng`` and no uniforms).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONVENTIONS = ("resispec", "sglang", "generator")
#: The keyword arguments in which a kernel's ``verify`` receives its coins, by convention.
COIN_NAMES = {"resispec": ("uniforms",), "sglang": ("uniform_samples", "uniform_samples_for_final_sampling"),
              "generator": ()}


def check_convention(convention) -> str:
    """Validate a convention name; ValueError naming the choices."""
    if not isinstance(convention, str) or convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {list(CONVENTIONS)}, got {convention!r}")
    return convention


@dataclass
class Coins:
    """The coins of a batch of ``B`` nodes under one convention.

    ``arrays``: name -> ndarray (first axis B) for array conventions;
    ``seed``: int for ``generator`` (the coins of row b then depend on B).
    """

    convention: str
    B: int
    k: int
    arrays: dict
    seed: int | None = None

    def rows(self, idx) -> "Coins":
        """The coins of rows ``idx`` (array conventions only)."""
        if self.convention == "generator":
            raise ValueError("generator coins cannot be split by row (they depend on the whole batch)")
        idx = np.atleast_1d(np.asarray(idx))
        return Coins(self.convention, idx.size, self.k, {n: a[idx].copy() for n, a in self.arrays.items()})


def draw_coins(convention: str, rng: np.random.Generator, B: int, k: int) -> Coins:
    """Fresh coins for ``B`` nodes with ``k`` candidates."""
    convention = check_convention(convention)
    if convention == "resispec":
        return Coins(convention, B, k, {"uniforms": rng.random((B, k + 1))})
    if convention == "sglang":
        return Coins(convention, B, k, {"uniform_samples": rng.random((B, k + 1)),
                                        "uniform_samples_for_final_sampling": rng.random(B)})
    return Coins(convention, B, k, {}, seed=int(rng.integers(0, 2**62)))


def kernel_kwargs(coins: Coins) -> tuple[object, dict]:
    """``(rng, keyword arguments)`` with which a kernel's ``verify`` receives these coins."""
    if coins.convention == "generator":
        return np.random.default_rng(coins.seed), {}
    return None, dict(coins.arrays)


def decisions(coins: Coins, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reference's decisions: ``accepted`` (B,) int64 (-1 = residual) and the residual coin (B,).

    ``a`` (B, k): accept probabilities of the rule (``Verifier.chain``).
    """
    B, k = a.shape
    if coins.convention in ("resispec", "generator"):
        u = coins.arrays["uniforms"] if coins.convention == "resispec" else \
            np.random.default_rng(coins.seed).random((B, k + 1))
        acc = u[:, :k] < a
        res_u = u[:, k]
    else:
        stop = 1.0 - np.cumprod(1.0 - a, axis=1)          # W_j, non-decreasing in j
        acc = coins.arrays["uniform_samples"][:, :1] < stop
        res_u = coins.arrays["uniform_samples_for_final_sampling"]
    hit = acc.any(axis=1)
    return np.where(hit, np.argmax(acc, axis=1), -1).astype(np.int64), res_u


def to_python(coins: Coins) -> str:
    """Python source that rebuilds these coins as ``rng, kw`` for ``kernel.verify(p, q, c, rng, **kw)``."""
    if coins.convention == "generator":
        return f"rng, kw = np.random.default_rng({coins.seed}), {{}}"
    parts = ", ".join(f"{n!r}: np.array({a.tolist()!r})" for n, a in coins.arrays.items())
    return f"rng, kw = None, {{{parts}}}"


class SGLangKernel:
    """Any registry rule as a kernel in the ``sglang`` layout (the reference implementation there).

    ``verify(p, q, candidates, rng=None, *, uniform_samples (B, k + 1), uniform_samples_for_final_sampling (B,))``:
    walks the siblings in order adding each one's stop probability
    ``reach_j * a_j`` to a running total and accepts the first child whose
    total exceeds the root coin (the comparison the SGLang tree kernel
    makes); otherwise draws the residual by inverse CDF with the final coin.
    ``a`` and the residual come from ``verifier.chain``.
    """

    def __init__(self, verifier):
        self.verifier = verifier
        self.drafting = getattr(verifier, "drafting", "iid")
        self.name = f"sglang:{getattr(verifier, 'name', type(verifier).__name__)}"

    def verify(self, p, q, candidates, rng=None, *, uniform_samples, uniform_samples_for_final_sampling):
        from resispec.sampling import inverse_cdf
        from resispec.verifiers.base import VerifyResult

        ch = self.verifier.chain(p, q, candidates)
        c = np.asarray(candidates, dtype=np.int64).reshape(ch.accept_probs.shape)
        B, k = c.shape
        coin = np.asarray(uniform_samples, dtype=np.float64)[:, 0]
        acc = np.full(B, -1, dtype=np.int64)
        total, reach = np.zeros(B), np.ones(B)
        for j in range(k):
            total = total + reach * ch.accept_probs[:, j]
            reach = reach * (1.0 - ch.accept_probs[:, j])
            acc = np.where((acc < 0) & (coin < total), j, acc)
        tokens = c[np.arange(B), np.maximum(acc, 0)].copy()
        miss = acc < 0
        if np.any(miss):
            tokens[miss] = inverse_cdf(ch.residual[miss], np.asarray(uniform_samples_for_final_sampling)[miss])
        return VerifyResult(tokens=tokens, accepted=acc)


def reference_kernel(verifier, convention: str):
    """The rule ``verifier`` as a kernel that takes its coins in ``convention``'s layout.

    Parameters
    ----------
    verifier : str or resispec.Verifier
        A registry name or ``name[option=value,...]`` (``"rrs"``, ``"resispec[drafting=without_replacement]"``),
        or a verifier with ``chain(p, q, candidates)`` (every :class:`resispec.Verifier`).
    convention : {"resispec", "sglang", "generator"}

    Returns
    -------
    object with ``verify``: :class:`SGLangKernel` for ``"sglang"``; the verifier itself otherwise.

    Raises
    ------
    TypeError
        ``verifier`` is neither a name nor a verifier with ``chain``.
    ValueError
        An unknown ``convention`` or verifier name.
    """
    from ..sampling import has_chain

    convention = check_convention(convention)
    if isinstance(verifier, str):
        from ..certify_run import load_verifier

        try:
            verifier = load_verifier(verifier)[1]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"verifier {verifier!r}: {exc}") from exc
    if not has_chain(verifier):
        raise TypeError(f"verifier must be a registry name (e.g. 'rrs') or a resispec.Verifier with "
                        f"chain(p, q, candidates), got {type(verifier).__name__}")
    return SGLangKernel(verifier) if convention == "sglang" else verifier
