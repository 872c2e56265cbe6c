"""A numpy-in, numpy-out view of a torch verifier.

Harnesses written against the numpy contract (``exactness.certify_verifier``,
``resispec.exact_output_law``, ``resispec.acceptance_probability``) can then
certify the torch path itself: the chain, the float64 decisions and the
inverse CDF all run in torch (in the wrapped verifier's ``dtype`` on its
``device``); only the uniforms come from the numpy ``Generator``.
"""

from __future__ import annotations

import numpy as np
import torch

from .._validation import as_candidates, as_node, c_writable
from ..verifiers.base import Chain, Verifier, VerifyResult
from .base import TorchVerifier


class NumpyFacade(Verifier):
    """Wrap a :class:`TorchVerifier` so that it takes and returns numpy arrays.

    Parameters
    ----------
    verifier : TorchVerifier
        E.g. ``get_verifier("resispec", backend="torch", dtype=torch.float32)``.

    Raises
    ------
    TypeError
        ``verifier`` is not a torch verifier.
    """

    backend = "torch"

    def __init__(self, verifier: TorchVerifier):
        if not isinstance(verifier, TorchVerifier):
            raise TypeError(f"NumpyFacade wraps a torch verifier, got {type(verifier).__name__}")
        self.inner = verifier
        self.name = verifier.name
        self.drafting = verifier.drafting

    def options(self) -> dict:
        return {**self.inner.options(), "dtype": str(self.inner.dtype), "device": str(self.inner.device)}

    def _tensors(self, p2, q2, c):
        dev, dt = self.inner.device, self.inner.dtype
        P = torch.as_tensor(c_writable(p2), device=dev).to(dt)      # a read-only view (broadcast rows) is copied
        Q = torch.as_tensor(c_writable(q2), device=dev).to(dt)
        return P, Q, torch.as_tensor(np.ascontiguousarray(c), device=dev)

    def _chain(self, p, q, c):
        return self.inner._chain(p, q, c)

    def chain(self, p, q, candidates) -> Chain:
        p2, q2, _ = as_node(p, q)
        c = as_candidates(candidates, q2, drafting=self.drafting)
        return Chain(*self.inner._chain(p2, q2, c))

    def verify(self, p, q, candidates, rng: np.random.Generator | None = None, *, uniforms=None) -> VerifyResult:
        """As :meth:`resispec.Verifier.verify`; decisions made by the torch verifier."""
        p2, q2, c, u = self._verify_inputs(p, q, candidates, rng, uniforms)
        P, Q, C = self._tensors(p2, q2, c)
        res = self.inner.verify(P, Q, C, uniforms=torch.as_tensor(u, device=self.inner.device))
        return res.numpy()

    def conditional_law(self, p, q, candidates) -> np.ndarray:
        p2, q2, squeeze = as_node(p, q)
        c = as_candidates(candidates, q2, drafting=self.drafting)
        law = self.inner.conditional_law(*self._tensors(p2, q2, c)).cpu().numpy()
        return law[0] if squeeze and law.shape[0] == 1 else law
