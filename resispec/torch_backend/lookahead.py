"""Look-ahead reserve for ResiSpec on torch (``docs/RESISPEC.md`` s.4-5).

Torch twin of :mod:`resispec.verifiers.lookahead` (same rule, same numbers
to round-off): for candidates ``i < k``::

    m_i = min(q, (p_i - gamma Lambda_i q)_+),     Lambda_i = L_1 of the schedule of (p_i, q, k - i),

the last candidate greedy.  The schedule ``L_0 .. L_k`` solves the backward
recursion ``psi(L_{i-1}) = psi(L_i) + L_i - L_{i+1}`` with
``psi(L) = L - sum_x min(p, q L)`` (non-decreasing, piecewise linear with
knots at the sorted ratios ``p/q``), ``L_k = 0``, ``L_{k-1} = t`` and ``t``
fixed by ``L_0 - L_1 = 1`` (bisection on ``t``, :data:`BISECT` halvings).

On CPU tensors (numba installed) the reserve and the accepted mass come from
the compiled kernel of :mod:`resispec._lookahead_fused`, as in numpy (float64).
On other devices, batched over the ``B`` nodes: one ``torch.sort`` of the ratios ``p/q``
(O(V log V) per row), cumulative sums and a ``cummax`` for the knot values of
``psi``; ``psi`` and its inverse are then ``torch.searchsorted`` look-ups,
O(log V) per query (the numpy reference counts over the ``V`` knots, O(V)).
The bisection on ``t`` runs for every row at once: cost
O(V log V + BISECT * k * log V) per node and candidate, no host
synchronisation.

Exactness: ``Lambda_i`` depends on ``p_i``, ``q`` and the number of
candidates left only -- never on ``x_i`` or later candidates -- and
``0 <= m_i <= min(p_i, q)``, so the sequential lemma (section 2) holds
whatever the solver's round-off (float32 included); accuracy only moves the
acceptance.  Builds on SpecInfer (Miao et al. 2024, arXiv 2305.09781) and
the optimal-transport view of multi-draft verification (SpecTr, Sun et al.
2023, arXiv 2310.15141; Khisti et al. 2025, arXiv 2410.18234).
"""

from __future__ import annotations

import torch

from .._reserve_tol import LOOKAHEAD_TOL
from ..verifiers.lookahead import _PLAN_KEY, _REACH_EPS
from ..verifiers.registry import register
from .base import TorchMassVerifier

#: Bisection halvings on ``t`` (as the numpy reference).
BISECT = 80


class PsiTable:
    """``psi`` and its inverse for a batch of rows (B, V), by sorted knots and ``searchsorted``.

    Parameters
    ----------
    p, q : Tensor, shape (B, V), float64 or float32, same device
        Residual target and draft (rows sum to 1).
    """

    def __init__(self, p: torch.Tensor, q: torch.Tensor):
        pos = q > 0
        inf = torch.full_like(p, float("inf"))
        ratio = torch.where(pos, p / torch.where(pos, q, torch.ones_like(q)), inf)
        r, order = torch.sort(ratio, dim=1, stable=True)
        fin = torch.isfinite(r)                                   # q > 0 tokens: a prefix of each row
        zero = torch.zeros_like(p)
        qs = torch.where(fin, torch.gather(q, 1, order), zero)
        ps = torch.where(fin, torch.gather(p, 1, order), zero)
        self.Qc = torch.cumsum(qs, dim=1)                          # q-mass with ratio <= knot j
        self.Pc = torch.cumsum(ps, dim=1)
        self.knots = r.contiguous()                                 # ascending, +inf where q = 0
        psi_k = torch.where(fin, torch.where(fin, r, zero) * self.Qc - self.Pc, -inf)
        psi_k = torch.cummax(psi_k, dim=1).values                   # monotone despite round-off
        self.psi_knots = torch.where(fin, psi_k, inf).contiguous()
        self.V = p.shape[1]

    def _at(self, table: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        """``table[row, j - 1]`` (B,), 0 where ``j = 0``."""
        jm = (j - 1).clamp(0, self.V - 1).unsqueeze(1)
        val = torch.gather(table, 1, jm).squeeze(1)
        return torch.where(j > 0, val, torch.zeros_like(val))

    def psi(self, L: torch.Tensor) -> torch.Tensor:
        """``psi(L) = L * Q(L) - P(L)`` for ``L`` (B,) >= 0, shape (B,)."""
        j = torch.searchsorted(self.knots, L.unsqueeze(1).contiguous(), right=True).squeeze(1)  # knots <= L
        return L * self._at(self.Qc, j) - self._at(self.Pc, j)

    def psi_inv(self, y: torch.Tensor) -> torch.Tensor:
        """Smallest ``L >= 0`` with ``psi(L) >= y`` (B,), for ``y`` (B,)."""
        y = y.clamp(min=0.0)
        j = torch.searchsorted(self.psi_knots, y.unsqueeze(1).contiguous(), right=False).squeeze(1)  # knots < y
        base_L = self._at(self.knots, j)
        base_psi = self._at(self.psi_knots, j)
        slope = self._at(self.Qc, j)
        pos = slope > 0
        L = torch.where(pos, base_L + (y - base_psi) / torch.where(pos, slope, torch.ones_like(slope)), base_L)
        return torch.where(y <= 0, torch.zeros_like(L), L)


def lookahead_schedule_t(p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
    """Tail sums ``L_0 .. L_k`` (B, k + 1) of the look-ahead reserve, with ``L_0 - L_1 = 1``.

    Torch port of :func:`resispec.verifiers.lookahead.lookahead_schedule`.

    Parameters
    ----------
    p, q : Tensor, shape (B, V), float64 or float32
        Current residual target and draft (rows sum to 1).
    k : int >= 1
        Candidates still to verify (including the current one).

    Returns
    -------
    Tensor, shape (B, k + 1), dtype of ``p``

    Raises
    ------
    ValueError
        ``k`` not an integer >= 1.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1 (candidates left), got {k!r}")
    B = p.shape[0]
    out = torch.zeros((B, k + 1), dtype=p.dtype, device=p.device)
    if k == 1:
        out[:, 0] = 1.0
        return out
    f = PsiTable(p, q)

    def run(t):
        L = torch.zeros((B, k + 1), dtype=p.dtype, device=p.device)
        L[:, k - 1] = t
        psi_next = f.psi(t)
        for i in range(k - 1, 0, -1):            # L_{i-1} from L_i, L_{i+1}
            target = psi_next + L[:, i] - L[:, i + 1]
            L[:, i - 1] = torch.maximum(f.psi_inv(target), L[:, i])
            psi_next = f.psi(L[:, i - 1])
        return L

    lo = torch.zeros(B, dtype=p.dtype, device=p.device)
    hi = torch.ones(B, dtype=p.dtype, device=p.device)
    for _ in range(BISECT):
        mid = 0.5 * (lo + hi)
        L = run(mid)
        big = (L[:, 0] - L[:, 1]) >= 1.0 - LOOKAHEAD_TOL     # tie rule: the smallest such t
        hi = torch.where(big, mid, hi)
        lo = torch.where(big, lo, mid)
    return front_load_saturated_t(run(hi), p, q)


def front_load_saturated_t(L: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Torch twin of :func:`resispec.verifiers.lookahead.front_load_saturated` (saturated rows front-loaded;
    no host synchronisation: every row is computed and the saturated ones selected with ``where``)."""
    from .._lookahead_fused import SAT_TOL

    n = L.shape[1] - 1
    if n < 2:
        return L
    pos = q > 0
    zero = torch.zeros_like(p)
    off = torch.where(pos, zero, p).sum(dim=1)
    on = torch.where(pos, p, zero).sum(dim=1)
    phi0 = torch.minimum(p, q * L[:, :1]).sum(dim=1)                  # phi(L_0) = sum min(p, q L_0)
    rmax = torch.where(pos, p / torch.where(pos, q, torch.ones_like(q)), zero).amax(dim=1)
    l1 = (rmax - 1.0).clamp(min=0.0)
    tol = SAT_TOL if p.dtype == torch.float64 else 64 * torch.finfo(p.dtype).eps
    sat = (off <= tol * (on + off)) & (phi0 >= on * (1.0 - tol)) & (l1 < L[:, 1])
    F = torch.zeros_like(L)
    F[:, 1] = l1
    F[:, 0] = 1.0 + l1
    for i in range(1, n - 1):
        F[:, i + 1] = (F[:, i:i + 1] * q - p).clamp(min=0.0).sum(dim=1)   # L_{i+1} = psi(L_i)
    return torch.where(sat.unsqueeze(1), F, L)


def _fused_ok(p_i: torch.Tensor) -> bool:
    """The compiled kernel of :mod:`resispec._lookahead_fused` runs on CPU tensors (numba installed)."""
    if p_i.device.type != "cpu":
        return False
    from .. import _lookahead_fused

    return _lookahead_fused.AVAILABLE


def _as_np64(t: torch.Tensor):
    """A C-contiguous float64 numpy view (or copy) of a CPU tensor."""
    import numpy as np

    return np.ascontiguousarray(t.detach().numpy(), dtype=np.float64)


def lookahead_reserve_t(p_i: torch.Tensor, q: torch.Tensor, k_left: int) -> torch.Tensor:
    """Reserve ``Lambda`` (B,) of the current candidate with ``k_left`` candidates left (itself included).

    ``p_i``, ``q``: (B, V) tensors; 0 when ``k_left <= 1`` (the last candidate is greedy).  On CPU
    (numba installed) the fused kernel of :mod:`resispec._lookahead_fused` (float64, the numpy
    backend's numbers); elsewhere the ``searchsorted`` port :func:`lookahead_schedule_t`.  The two agree
    up to round-off and the tie rule of ``docs/verifiers.md``.
    """
    if k_left <= 1:
        return torch.zeros(p_i.shape[0], dtype=p_i.dtype, device=p_i.device)
    if _fused_ok(p_i):
        from .._lookahead_fused import lookahead_rows

        sched = lookahead_rows(_as_np64(p_i), _as_np64(q), int(k_left))
        return torch.from_numpy(sched[:, 1].copy()).to(p_i.dtype)
    return _lookahead_reserve_tensor(p_i, q, k_left)


def _lookahead_reserve_tensor(p_i: torch.Tensor, q: torch.Tensor, k_left: int) -> torch.Tensor:
    """The tensor-op reserve (any device): ``L_1`` of :func:`lookahead_schedule_t`."""
    if k_left <= 1:
        return torch.zeros(p_i.shape[0], dtype=p_i.dtype, device=p_i.device)
    B = p_i.shape[0]
    if B > 1 and p_i.device.type == "cpu" and bool((p_i == p_i[:1]).all()) and bool((q == q[:1]).all()):
        # identical nodes (e.g. a tiled Monte Carlo batch) share one schedule; CPU only, so that
        # accelerators never wait on this host-side check
        return lookahead_schedule_t(p_i[:1], q[:1], k_left)[:, 1].expand(B).contiguous()
    return lookahead_schedule_t(p_i, q, k_left)[:, 1]


@register("resispec_lookahead", backend="torch", ours=True)
class ResiSpecLookaheadTorch(TorchMassVerifier):
    """ResiSpec with the look-ahead reserve on torch (iid drafts).

    Torch twin of :class:`resispec.verifiers.resispec.ResiSpecLookahead`
    (``get_verifier("resispec_lookahead", backend="torch")``).

    Parameters
    ----------
    proxy : {"draft"}, default "draft"
        The look-ahead reserve is along the draft itself.
    gamma : float >= 0, default 1
        Reserve scale, ``lambda_i = gamma * Lambda_i``; ``gamma = 0`` gives ``rrs``.
    proxy_options : None
        Accepted for signature parity with the numpy class; must be empty.
    drafting : {"iid"}
    reserve : {"lookahead"}
        Only the look-ahead rule (the fixed point is ``get_verifier("resispec_myopic", backend="torch")``).
    dtype, device
        Working dtype / device for numpy inputs (tensors keep theirs).

    Raises
    ------
    ValueError, TypeError
        As the numpy class (bad gamma, proxy other than "draft", drafting
        other than "iid"), or ``reserve`` other than "lookahead".
    """

    drafting = "iid"

    def __init__(self, proxy="draft", gamma: float = 1.0, proxy_options: dict | None = None,
                 drafting: str = "iid", reserve: str = "lookahead", *, dtype=None, device=None):
        from ..verifiers.resispec import ResiSpecLookahead

        if reserve not in ("auto", "lookahead"):
            raise ValueError(f"resispec_lookahead (torch) supports reserve='lookahead' only, got {reserve!r}; "
                             "for the fixed-point reserve use get_verifier('resispec_myopic', backend='torch')")
        ResiSpecLookahead(proxy=proxy, gamma=gamma, proxy_options=proxy_options, drafting=drafting,
                          reserve="lookahead")             # same checks as numpy
        self._init_backend(dtype, device)
        self.gamma = float(gamma)
        self.proxy_name = "draft"

    def options(self):
        return {"proxy": self.proxy_name, "gamma": self.gamma, "reserve": "lookahead"}

    def _planned(self, plan: dict, k_left: int, p_i: torch.Tensor, q_i: torch.Tensor, out):
        """``m`` of the walk's step with ``k_left`` candidates left, from the schedule of its first step.

        Torch twin of :func:`resispec.verifiers.lookahead.planned_step` (``gamma = 1``; the same plan,
        the same numbers): one schedule solve a node, then ``Lambda_j = L_j / (L_{j-1} - L_j)``.
        """
        got = plan.get(_PLAN_KEY)
        if got is not None:
            k0, sched = got
            j = k0 - k_left
            if sched.shape[0] == p_i.shape[0] and 0 < j < k0 - 1:
                L_prev, L_next = sched[:, j], sched[:, j + 1]
                reach = L_prev - L_next                                      # R_{j+1}
                ok = reach > _REACH_EPS
                lam = torch.where(ok, L_next / torch.where(ok, reach, torch.ones_like(reach)),
                                  torch.zeros_like(reach))
                m = torch.addcmul(p_i, q_i, lam.unsqueeze(1), value=-1.0, out=out).clamp_(min=0.0)  # (p_i - lam q)_+
                return torch.minimum(m, q_i, out=m)
        if p_i.dtype == torch.float64 and _fused_ok(p_i) and p_i.is_contiguous() and q_i.is_contiguous():
            from .._lookahead_fused import lookahead_rows

            buf = out if (out is not None and out.is_contiguous() and out.dtype == torch.float64) \
                else torch.empty_like(p_i)
            sched, _ = lookahead_rows(p_i.detach().numpy(), q_i.detach().numpy(), k_left, gamma=1.0,
                                      out=buf.numpy())
            plan[_PLAN_KEY] = (k_left, torch.from_numpy(sched))
            return buf
        if _fused_ok(p_i):
            from .._lookahead_fused import lookahead_rows

            sched = torch.from_numpy(lookahead_rows(_as_np64(p_i), _as_np64(q_i), k_left)).to(p_i.dtype)
        else:
            sched = lookahead_schedule_t(p_i, q_i, k_left)
        plan[_PLAN_KEY] = (k_left, sched)
        lam = sched[:, 1]
        m = torch.addcmul(p_i, q_i, lam.unsqueeze(1), value=-1.0, out=out).clamp_(min=0.0)   # (p_i - Lambda q)_+
        return torch.minimum(m, q_i, out=m)

    def reserve(self, i: int, k: int, p_i: torch.Tensor, q_i: torch.Tensor):
        """Proxy ``rho_i = q_i`` (B, V) and reserve ``lambda_i`` (B,) for 0-based step ``i``."""
        return q_i, self.gamma * lookahead_reserve_t(p_i, q_i, k - i)

    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected, out=None, state=None):
        if i == k - 1 or self.gamma == 0:
            return torch.minimum(p_i, q_i, out=out)
        if self.gamma == 1.0 and state is not None:
            return self._planned(state, k - i, p_i, q_i, out)
        if p_i.dtype == torch.float64 and _fused_ok(p_i) and p_i.is_contiguous() and q_i.is_contiguous():
            from .._lookahead_fused import lookahead_rows    # reserve and mass in one compiled pass per row

            buf = out if (out is not None and out.is_contiguous() and out.dtype == torch.float64) \
                else torch.empty_like(p_i)
            lookahead_rows(p_i.detach().numpy(), q_i.detach().numpy(), k - i, gamma=self.gamma,
                           out=buf.numpy())
            return buf
        rho, lam = self.reserve(i, k, p_i, q_i)
        m = torch.addcmul(p_i, rho, lam.unsqueeze(1), value=-1.0, out=out).clamp_(min=0.0)   # (p_i - lam q)_+
        return torch.minimum(m, q_i, out=m)
