"""A faster CPU linear layer for the few-token passes of speculative decoding.

On this project's CPU (AMD EPYC, AVX2, torch's MKL build) ``F.linear(x, W)``
with ``x`` of 2..64 rows runs 2-5x slower than with one row: MKL's GEMM
packs the (out, in) weight for its transposed operand, so a 4-node tree
pass of Qwen2.5-Coder 1.5B cost 4.6x a 1-token pass and no speculative
method could beat target-only decoding.  Computing the same product as
``W @ x.T`` (the weight as the left, untransposed operand) reads the weight
once, at memory bandwidth, for any small number of rows: a 4-node pass then
costs about one 1-token pass (``benchmarks/cpu_linear.py`` prints the
ratios side by side).

Only the order of the float32 sums changes (about 1e-6 relative), as it does
between any two GEMM kernels or batch sizes; one row keeps ``F.linear`` (its
GEMV is the fastest there), so target-only decoding is never slowed down.
The model's laws are whatever it computes; the verifier's exactness
(``docs/RESISPEC.md`` section 2) does not depend on the kernel.

Kinds are registered (:data:`LINEAR_KINDS`): ``torch`` (leave the model as
is), ``small-batch`` (the rewrite above), ``auto`` (``small-batch`` on CPU
float32 weights, ``torch`` otherwise).
"""

from __future__ import annotations

#: rows (tokens) up to which the rewritten product is used; larger passes (prefill) keep F.linear
MAX_ROWS = 64


def _small_batch_linear_class():
    import torch

    class SmallBatchLinear(torch.nn.Linear):
        """``nn.Linear`` computing 2..MAX_ROWS rows on CPU as ``(W @ x.T).T`` (same parameters, same state dict)."""

        def forward(self, x):  # noqa: D401 - nn.Module API
            rows = x.numel() // max(x.shape[-1], 1)
            if x.device.type != "cpu" or not 2 <= rows <= MAX_ROWS or x.dtype != self.weight.dtype:
                return super().forward(x)
            x2 = x.reshape(rows, x.shape[-1])
            if self.bias is None:
                y = torch.mm(self.weight, x2.T)  # (out, rows) = W (out, in) @ x^T (in, rows)
            else:
                y = torch.addmm(self.bias[:, None], self.weight, x2.T)  # b + W x^T, bias broadcast over rows
            return y.T.reshape(*x.shape[:-1], self.weight.shape[0])

    return SmallBatchLinear


_CLASS = None


def small_batch_linear(model) -> int:
    """Rewrite every plain ``torch.nn.Linear`` of ``model`` in place; return how many.

    The parameters are shared (nothing is copied); the module's class changes
    to a subclass, so ``state_dict`` keys, ``isinstance(m, nn.Linear)`` and
    tied weights are unchanged.  Subclasses of ``nn.Linear`` (quantised or
    LoRA layers) are left alone.
    """
    global _CLASS
    import torch

    if _CLASS is None:
        _CLASS = _small_batch_linear_class()
    n = 0
    for mod in model.modules():
        if type(mod) is torch.nn.Linear:
            mod.__class__ = _CLASS
            n += 1
    return n


def _auto(model) -> int:
    import torch

    p = next(model.parameters(), None)
    if p is None or p.device.type != "cpu" or p.dtype != torch.float32:
        return 0
    return small_batch_linear(model)


#: linear-kernel kinds: name -> function(model) -> layers rewritten
LINEAR_KINDS = {"auto": _auto, "small-batch": small_batch_linear, "torch": lambda model: 0}


def apply_linear(model, kind: str = "auto") -> int:
    """Apply the linear-kernel ``kind`` (a key of :data:`LINEAR_KINDS`) to ``model``; return layers rewritten.

    Raises
    ------
    TypeError
        ``kind`` is not a string (e.g. a list).
    ValueError
        ``kind`` is not registered (the message lists the kinds).
    """
    return LINEAR_KINDS[check_linear(kind)](model)


def check_linear(kind) -> str:
    """``kind`` if it names a registered kind (:data:`LINEAR_KINDS`); TypeError / ValueError naming ``linear``."""
    if not isinstance(kind, str):
        raise TypeError(f"linear must be a string, one of {sorted(LINEAR_KINDS)}, got {kind!r}")
    if kind not in LINEAR_KINDS:
        raise ValueError(f"linear must be one of {sorted(LINEAR_KINDS)}, got {kind!r}")
    return kind
