"""The torch verifier contract and the batched sequential engine.

Same glossary and exactness lemma as :mod:`resispec.verifiers.base` (target
``p``, draft ``q``, candidate ``x_i``, accepted mass ``m_i``, residual
``p_i``; ``docs/RESISPEC.md`` section 2).  Everything is batched over the
``B`` nodes and the ``V`` tokens with tensor ops; the only Python loop runs
over the ``k`` candidates.

Decisions (:func:`decide`) are made in float64 whatever the working dtype:
``accept_probs`` are up-cast before ``u < a`` and the residual is up-cast
before its inverse CDF, so the same uniforms give the same decisions as the
numpy backend, up to the tie rule of :mod:`resispec.torch_backend`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch

from .._validation import c_writable
from .._xp import walk
from ..verifiers.base import Chain as NumpyChain
from ..verifiers.base import MassVerifier
from ._validation import as_candidates_t, as_laws_t, as_uniforms_t, check_generator
from .sampling import inverse_cdf


@dataclass(frozen=True)
class TorchVerifyResult:
    """Outcome of verifying a batch of nodes (torch).

    Attributes
    ----------
    tokens : Tensor, shape (B,), int64
        Emitted token of each node (accepted candidate or residual token).
    accepted : Tensor, shape (B,), int64
        Index of the accepted candidate in ``0..k-1``, or -1 when every
        candidate was rejected.
    """

    tokens: torch.Tensor
    accepted: torch.Tensor

    @property
    def acceptance_rate(self) -> float:
        """Fraction of nodes that accepted some candidate."""
        return float((self.accepted >= 0).to(torch.float64).mean())

    def numpy(self):
        """The same result as numpy arrays (:class:`resispec.VerifyResult`)."""
        from ..verifiers.base import VerifyResult

        return VerifyResult(tokens=self.tokens.cpu().numpy(), accepted=self.accepted.cpu().numpy())


@dataclass(frozen=True)
class TorchChain:
    """Acceptance probabilities ``(B, k)`` and residual ``(B, V)`` tensors (working dtype)."""

    accept_probs: torch.Tensor
    residual: torch.Tensor


class TorchVerifier(ABC):
    """A batched multi-candidate verifier on torch tensors.

    Subclasses implement :meth:`_chain_t`; :meth:`verify`, :meth:`chain` and
    :meth:`conditional_law` follow from it.  A numpy-compatible
    :meth:`_chain` (numpy in, float64 numpy out, computed in ``dtype`` on
    ``device``) lets :func:`resispec.exact_output_law` enumerate this
    verifier exactly.

    Parameters (every subclass)
    ---------------------------
    dtype : torch.dtype, default torch.float64
        Working dtype for numpy inputs (tensors keep their own dtype).
    device : str or torch.device, default "cpu"
        Device for numpy inputs (tensors stay where they are).
    """

    name: str = "verifier"
    drafting: str = "iid"
    backend: str = "torch"

    def _init_backend(self, dtype=None, device=None):
        dtype = torch.float64 if dtype is None else dtype
        if dtype not in (torch.float64, torch.float32):
            raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype!r}")
        self.dtype = dtype
        try:
            self.device = torch.device("cpu" if device is None else device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device {device!r} is not a torch device ({exc}); use 'cpu', 'cuda' or 'cuda:N'") from exc
        if self.device.type == "meta":
            raise ValueError("device 'meta' holds no values to verify; use device='cpu' or 'cuda'")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {device!r} requested but torch.cuda.is_available() is False; use device='cpu'")

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({opts})"

    def options(self) -> dict:
        """Options the verifier was built with (for reports)."""
        return {}

    # ------------------------------------------------------------------ API
    def _prepare(self, p, q, candidates):
        p2, q2, squeeze = as_laws_t(p, q, dtype=getattr(self, "dtype", torch.float64),
                                    device=getattr(self, "device", "cpu"))
        c = as_candidates_t(candidates, q2, drafting=self.drafting)
        return p2, q2, c, squeeze

    def chain(self, p, q, candidates) -> TorchChain:
        """Acceptance probabilities ``(B, k)`` and residual ``(B, V)`` for given candidates."""
        p2, q2, c, _ = self._prepare(p, q, candidates)
        return TorchChain(*self._chain_t(p2, q2, c))

    def verify(self, p, q, candidates, rng: torch.Generator | None = None, *, uniforms=None) -> TorchVerifyResult:
        """Verify pre-sampled candidates and emit one token per node.

        Parameters
        ----------
        p, q : Tensor, shape (B, V) or (V,), float64/float32 (half up-cast)
            Target and draft laws on one device, rows sum to 1.
        candidates : Tensor, shape (B, k) or (k,), integer
        rng : torch.Generator on the laws' device, optional
            Source of the uniforms; required unless ``uniforms`` is given.
        uniforms : Tensor or array, shape (B, k + 1), float64 in [0, 1)
            Column ``i`` decides candidate ``i`` (accept when
            ``u < m_i(x_i) / q_i(x_i)``), column ``k`` draws the residual
            token by inverse CDF in token-id order -- as the numpy backend.

        Returns
        -------
        TorchVerifyResult
            ``tokens`` (B,) int64, ``accepted`` (B,) int64 (-1 = none), on the laws' device.

        Raises
        ------
        TypeError, ValueError
            Mixed devices / dtypes, bad shapes, non-contiguous tensors, bad
            values, rng or uniforms (see :mod:`resispec.torch_backend._validation`).
        """
        p2, q2, c, _ = self._prepare(p, q, candidates)
        B, k = c.shape
        if uniforms is None:
            if rng is None:
                raise ValueError("pass rng (a torch.Generator) or explicit uniforms")
            u = torch.rand((B, k + 1), generator=check_generator(rng, p2.device), dtype=torch.float64,
                           device=p2.device)
        else:
            u = as_uniforms_t(uniforms, B, k, p2.device)
        a, r = self._chain_decided_t(p2, q2, c, u)
        return decide(a, r, c, u)

    def conditional_law(self, p, q, candidates) -> torch.Tensor:
        """Exact law ``(B, V)`` (``(V,)`` for 1-D input) of the emitted token given the candidates."""
        p2, q2, c, squeeze = self._prepare(p, q, candidates)
        law = law_from_chain(*self._chain_t(p2, q2, c), c)
        return law[0] if squeeze and law.shape[0] == 1 else law

    def _chain(self, p: np.ndarray, q: np.ndarray, c: np.ndarray):
        """numpy adapter for :mod:`resispec.analysis`: float64 numpy in and out."""
        dev = getattr(self, "device", torch.device("cpu"))
        dt = getattr(self, "dtype", torch.float64)
        P = torch.as_tensor(c_writable(p), device=dev).to(dt)
        Q = torch.as_tensor(c_writable(q), device=dev).to(dt)
        C = torch.as_tensor(np.ascontiguousarray(c, dtype=np.int64), device=dev)
        a, r = self._chain_t(P, Q, C)
        return a.to(torch.float64).cpu().numpy(), r.to(torch.float64).cpu().numpy()

    def numpy_chain(self, p, q, candidates) -> NumpyChain:
        """:meth:`chain` as a numpy :class:`resispec.Chain` (float64)."""
        ch = self.chain(p, q, candidates)
        return NumpyChain(ch.accept_probs.double().cpu().numpy(), ch.residual.double().cpu().numpy())

    def _chain_decided_t(self, p: torch.Tensor, q: torch.Tensor, c: torch.Tensor, u: torch.Tensor):
        """A chain that agrees with :meth:`_chain_t` up to each row's first accepted step under ``u``
        (B, k + 1) float64 (all that :func:`decide` reads); a rule may skip the later steps (the numpy
        :meth:`resispec.verifiers.base.Verifier._chain_decided`).  Default: the full chain."""
        return self._chain_t(p, q, c)

    # ------------------------------------------------------ implementation
    @abstractmethod
    def _chain_t(self, p: torch.Tensor, q: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(accept_probs (B, k), residual (B, V))`` for validated tensors."""


def decide(a: torch.Tensor, r: torch.Tensor, c: torch.Tensor, u: torch.Tensor) -> TorchVerifyResult:
    """Chain + uniforms -> tokens, in float64 (mirror of :func:`resispec.verifiers.base.decide`).

    ``a`` (B, k), ``r`` (B, V), ``c`` (B, k) int64, ``u`` (B, k + 1) float64.
    No host synchronisation: the residual token is drawn for every row and
    used where no candidate was accepted.
    """
    B, k = c.shape
    acc = u[:, :k] < a.to(torch.float64)                       # (B, k)
    hit = acc.any(dim=1)
    first = torch.argmax(acc.to(torch.uint8), dim=1)            # first accepted index (0 if none)
    cand_tok = torch.gather(c, 1, first.unsqueeze(1)).squeeze(1)
    resid_tok = inverse_cdf(r, u[:, k])
    tokens = torch.where(hit, cand_tok, resid_tok)
    accepted = torch.where(hit, first, torch.full_like(first, -1))
    return TorchVerifyResult(tokens=tokens.to(torch.int64), accepted=accepted.to(torch.int64))


def law_from_chain(a: torch.Tensor, r: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Exact emitted-token law (B, V), float64, from a chain and its candidates."""
    B, k = c.shape
    a64 = a.to(torch.float64)
    reach = torch.ones(B, dtype=torch.float64, device=a.device)
    law = torch.zeros(r.shape, dtype=torch.float64, device=r.device)
    for i in range(k):
        law.scatter_add_(1, c[:, i:i + 1], (reach * a64[:, i]).unsqueeze(1))
        reach = reach * (1.0 - a64[:, i])
    law += reach.unsqueeze(1) * r.to(torch.float64)
    return law


class TorchMassVerifier(TorchVerifier):
    """A sequential verifier defined by its accepted-mass rule ``m_i`` (torch).

    Subclasses implement :meth:`accepted_mass` with the signature of the
    numpy :meth:`resispec.MassVerifier.accepted_mass`, on tensors.
    """

    @abstractmethod
    def accepted_mass(self, i: int, k: int, p_i: torch.Tensor, q_i: torch.Tensor, *, q: torch.Tensor,
                      rejected: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Accepted mass ``m_i`` (B, V), ``0 <= m_i <= min(p_i, q_i)``; never reads ``x_i`` or later.

        ``out``: optional (B, V) buffer to write ``m_i`` into (it never aliases ``p_i`` or ``q_i``).
        """

    def masses(self, p, q, candidates):
        """Per-step ``m`` (B, k, V), residuals ``p_steps`` (B, k + 1, V) and drafts ``q_steps`` (B, k, V)."""
        p2, q2, c, _ = self._prepare(p, q, candidates)
        ms, ps, qs = [], [], []
        self._walk(p2, q2, c, ms, ps, qs)
        return torch.stack(ms, 1), torch.stack(ps, 1), torch.stack(qs, 1)

    def _walk(self, p, q, c, ms=None, ps=None, qs=None):
        return walk(self, p, q, c, ms, ps, qs, state=self._walk_state(p))   # the one engine (resispec._xp.walk)

    def _walk_state(self, p) -> dict:
        """The state a walk over ``p`` (B, V) starts with (a rule may seed solver buffers); default empty."""
        return {}

    def _chain_t(self, p, q, c):
        return self._walk(p, q, c)


class TorchRule(TorchVerifier):
    """A rule written once against the array namespace (:mod:`resispec._xp`), run on tensors.

    ``get_verifier(name, backend="torch", dtype=, device=, **options)`` for such a rule builds the numpy
    registry's class with ``options`` and calls its own ``_chain`` on validated tensors: the same lines,
    no twin.  Validation, the generator, the float64 decisions and the inverse CDF are
    :class:`TorchVerifier`'s.  A rule whose steps are compiled host kernels (``host_only``, e.g. ResiSpec's
    without-replacement rule) runs on the host in float64: a CPU float64 batch without a copy, any other
    batch copied there and its chain copied back in the working dtype.  The rule's reserve and solver
    attributes (:data:`SHARED`) read through.
    """

    rule_class: type = None
    #: Attributes of the rule that the torch verifier shows as its own.
    SHARED = frozenset({"gamma", "solver", "solver_for", "last_reserve", "proxy", "proxy_name", "reserve",
                        "reserve_rule", "scales"})

    def __init__(self, *, dtype=None, device=None, **options):
        self._init_backend(dtype, device)
        self.rule = self.rule_class(**options)
        self.drafting = self.rule.drafting

    def __getattr__(self, attr):
        rule = self.__dict__.get("rule")
        if rule is None or attr not in TorchRule.SHARED:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")
        return getattr(rule, attr)

    def __setattr__(self, attr, value):
        if attr in TorchRule.SHARED and "rule" in self.__dict__:
            setattr(self.rule, attr, value)          # the rule's option: set where the rule reads it
        else:
            object.__setattr__(self, attr, value)

    def options(self) -> dict:
        return self.rule.options()

    def _chain_t(self, p, q, c):
        if self.rule.host_only:
            return self._host_chain(p, q, c, None)
        return self.rule._chain(p, q, c)

    def _chain_decided_t(self, p, q, c, u):
        """A host-only rule in float64 skips the steps after a row's first acceptance (as its numpy
        ``verify``); in float32 :func:`decide` compares the uniforms with rounded probabilities, so the full
        chain is kept."""
        if self.rule.host_only and p.dtype == torch.float64:
            return self._host_chain(p, q, c, u.to("cpu").numpy())
        return self._chain_t(p, q, c)

    def _host_chain(self, p, q, c, u):
        """The rule's chain on the host in float64 (``u`` (B, k + 1) or None: the decided chain or the full
        one), returned on ``p``'s device in its dtype."""
        P, Q = (np.ascontiguousarray(t.detach().to(device="cpu", dtype=torch.float64).numpy()) for t in (p, q))
        a, r = self.rule._chain_decided(P, Q, c.to("cpu").numpy().astype(np.int64, copy=False), u)
        return (torch.from_numpy(a).to(device=p.device, dtype=p.dtype),
                torch.from_numpy(r).to(device=p.device, dtype=p.dtype))

    def masses(self, p, q, candidates):
        """Per-step ``m`` (B, k, V), residuals ``p_steps`` (B, k + 1, V) and drafts ``q_steps`` (B, k, V).

        Raises
        ------
        TypeError
            The rule is not an accepted-mass rule (no per-step masses).
        """
        if not isinstance(self.rule, MassVerifier):
            raise TypeError(f"{self.name!r} is not an accepted-mass rule: it has no per-step masses")
        p2, q2, c, _ = self._prepare(p, q, candidates)
        ms, ps, qs = [], [], []
        self.rule._walk(p2, q2, c, ms, ps, qs)
        return torch.stack(ms, 1), torch.stack(ps, 1), torch.stack(qs, 1)


def on_torch(name: str) -> type:
    """Register the numpy registry's rule ``name`` (written once, :mod:`resispec._xp`) for ``backend="torch"``;
    returns the torch class (a :class:`TorchRule` running that rule's own ``_chain``).

    Raises
    ------
    ValueError
        ``name`` is not a registered numpy verifier (``@register`` it first).
    """
    from ..verifiers.registry import _REGISTRY, register

    if name not in _REGISTRY["numpy"]:
        raise ValueError(f"on_torch({name!r}): no numpy verifier of that name is registered; decorate its class "
                         "with resispec.verifiers.registry.register first")
    cls = _REGISTRY["numpy"][name]
    twin = type(f"{cls.__name__}Torch", (TorchRule,), {
        "rule_class": cls, "drafting": cls.drafting, "__module__": __name__,
        "__doc__": f"``{name}`` on torch tensors: the numpy rule's own lines ({cls.__module__}.{cls.__name__})."})
    globals()[twin.__name__] = twin          # importable by name, so instances pickle (spawned workers, Ray)
    return register(name, backend="torch")(twin)
