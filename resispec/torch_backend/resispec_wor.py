"""ResiSpec for without-replacement drafts on torch tensors (twin of :mod:`resispec.verifiers.resispec_wor`).

The rule's steps are the compiled CPU kernel :mod:`resispec._wor_fused` (or
the numpy reference), run on the host in float64: a CPU float64 batch is
passed to it without a copy (``Tensor.numpy()`` views); a batch on another
device or in float32 is copied to the host in float64 and the chain is copied
back in the working dtype.  There is no device-native implementation of this
rule yet; on a GPU the copies cost two (B, V) transfers per call.

Same decisions as the numpy verifier for the same uniforms on float64 tensors
(both run the same code on the same laws); in float32 the accept probabilities
are returned rounded to float32, as by every float32 torch verifier, so a
uniform within that rounding of a threshold may decide differently.  Source: ResiSpec (``docs/RESISPEC.md``
s.2 and s.4); RSD (Jeon et al. 2024, arXiv 2402.14160).
"""

from __future__ import annotations

import numpy as np
import torch

from .base import TorchVerifier


class ResiSpecWORTorch(TorchVerifier):
    """Torch twin of :class:`resispec.verifiers.resispec_wor.ResiSpecWOR`.

    Obtain it with ``get_verifier("resispec", backend="torch", drafting="without_replacement")``.

    Parameters
    ----------
    scales, solver
        As the numpy :class:`~resispec.verifiers.resispec_wor.ResiSpecWOR`.
    dtype : torch.float64 or torch.float32, default float64
        Working dtype of the returned chain for numpy inputs.
    device : str or torch.device, default "cpu"

    Raises
    ------
    ValueError, TypeError, ImportError
        As the numpy rule; a bad dtype or device.
    """

    name = "resispec"
    drafting = "without_replacement"

    def __init__(self, scales=(1.0,), solver: str = "auto", *, dtype=None, device=None):
        from ..verifiers.resispec_wor import ResiSpecWOR

        self._init_backend(dtype, device)
        self._rule = ResiSpecWOR(scales=scales, solver=solver)

    def options(self) -> dict:
        return {**self._rule.options(), "dtype": str(self.dtype).replace("torch.", ""), "device": str(self.device)}

    def _chain_t(self, p: torch.Tensor, q: torch.Tensor, c: torch.Tensor):
        return self._host_chain(p, q, c, None)

    def _chain_decided_t(self, p: torch.Tensor, q: torch.Tensor, c: torch.Tensor, u: torch.Tensor):
        """In float64 the steps after a row's first acceptance are skipped (as the numpy ``verify``): the same
        accept probabilities decide on both sides.  In float32 :func:`decide` compares the uniforms with the
        probabilities rounded to float32, so the full chain is kept."""
        if p.dtype != torch.float64:
            return self._chain_t(p, q, c)
        return self._host_chain(p, q, c, u.to("cpu").numpy())

    def _host_chain(self, p, q, c, u):
        """The numpy rule's chain on the host in float64 (``u`` (B, k + 1) float64 or None: the decided chain
        or the full one), returned on ``p``'s device in its dtype."""
        host = p.device.type == "cpu" and p.dtype == torch.float64
        P = p if host else p.to(device="cpu", dtype=torch.float64)
        Q = q if host else q.to(device="cpu", dtype=torch.float64)
        a, r = self._rule._chain_decided(np.ascontiguousarray(P.numpy()), np.ascontiguousarray(Q.numpy()),
                                         c.to("cpu").numpy().astype(np.int64, copy=False), u)
        return (torch.from_numpy(a).to(device=p.device, dtype=p.dtype),
                torch.from_numpy(r).to(device=p.device, dtype=p.dtype))
