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

On an AVX2-only EPYC (no AVX-512) that rewrite still costs 1.6x a 1-token
pass at 2-4 rows: BLAS's small-M GEMM does not reach memory bandwidth there.
``streamed`` is a compiled kernel (numba, :func:`streamed_matmul`) that streams
each block of 4 weight rows once and takes its dot products with the pass's
rows in register-resident pairs (8 x float32 lanes, re-associated sums): on
that CPU a pass of the 1.5B target costs 0.94x torch's 1-token pass at one
row, 1.10x at 2 rows, 1.24x at 3 and 1.93x at 8
(``benchmarks/cpu_linear.py --kinds torch streamed --sizes 1 2 3 4 8``).  It serves
1..``STREAMED_MAX_ROWS`` (12) rows, target-only decoding's one-row passes
included, so both sides of a speed-up use it.

Kinds are registered (:data:`LINEAR_KINDS`): ``torch`` (leave the model as
is), ``small-batch`` (the rewrite above), ``streamed`` (the compiled kernel;
needs numba), ``auto`` (``streamed`` on CPU float32 weights when numba is
installed, else ``small-batch``; ``torch`` for other devices and dtypes).
"""

from __future__ import annotations

import numpy as np

#: rows (tokens) up to which the rewritten product is used; larger passes (prefill) keep F.linear
MAX_ROWS = 64
#: rows up to which the ``streamed`` kernel is used (above, its FMAs outweigh one read of the weight)
STREAMED_MAX_ROWS = 12
#: fewest weight rows per thread task of the ``streamed`` kernel (smaller layers run in the caller's thread)
_MIN_CHUNK_ROWS = 512


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


_KERNEL = None


def _streamed_kernel():
    """The compiled block kernel (numba, nogil; compiled once and cached on disk)."""
    global _KERNEL
    if _KERNEL is None:
        import numba

        fm = {"reassoc", "contract", "nsz"}
        f32 = np.float32

        # Dot products of 4 weight rows W[o:o+4] with 1, 2 or 3 input rows x[m:m+g], all accumulators in
        # registers (4 g vector sums of 8 float32 lanes), so each weight element is loaded once per group.
        @numba.njit(cache=True, nogil=True, fastmath=fm, inline="always")
        def dot1(W, x, o, m):  # pragma: no cover - compiled
            a0 = a1 = a2 = a3 = f32(0.0)
            for i in range(W.shape[1]):
                xa = x[m, i]
                a0 += W[o, i] * xa
                a1 += W[o + 1, i] * xa
                a2 += W[o + 2, i] * xa
                a3 += W[o + 3, i] * xa
            return a0, a1, a2, a3

        @numba.njit(cache=True, nogil=True, fastmath=fm, inline="always")
        def dot2(W, x, o, m):  # pragma: no cover - compiled
            a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = f32(0.0)
            for i in range(W.shape[1]):
                xa, xb = x[m, i], x[m + 1, i]
                w0, w1, w2, w3 = W[o, i], W[o + 1, i], W[o + 2, i], W[o + 3, i]
                a0 += w0 * xa
                a1 += w1 * xa
                a2 += w2 * xa
                a3 += w3 * xa
                b0 += w0 * xb
                b1 += w1 * xb
                b2 += w2 * xb
                b3 += w3 * xb
            return a0, a1, a2, a3, b0, b1, b2, b3

        @numba.njit(cache=True, nogil=True, fastmath=fm, inline="always")
        def dot3(W, x, o, m):  # pragma: no cover - compiled
            a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = c0 = c1 = c2 = c3 = f32(0.0)
            for i in range(W.shape[1]):
                xa, xb, xc = x[m, i], x[m + 1, i], x[m + 2, i]
                w0, w1, w2, w3 = W[o, i], W[o + 1, i], W[o + 2, i], W[o + 3, i]
                a0 += w0 * xa
                a1 += w1 * xa
                a2 += w2 * xa
                a3 += w3 * xa
                b0 += w0 * xb
                b1 += w1 * xb
                b2 += w2 * xb
                b3 += w3 * xb
                c0 += w0 * xc
                c1 += w1 * xc
                c2 += w2 * xc
                c3 += w3 * xc
            return a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3

        @numba.njit(cache=True, nogil=True, fastmath=fm)
        def put(y, m, o, v, bias, has_bias):  # pragma: no cover - compiled
            # y[m + t, o + r] = v[4 t + r] (+ bias[o + r]) for the group's rows t and the 4 weight rows r
            for t in range(len(v) // 4):
                for r in range(4):
                    y[m + t, o + r] = v[4 * t + r] + (bias[o + r] if has_bias else f32(0.0))

        @numba.njit(cache=True, nogil=True, fastmath=fm)
        def block(W, x, bias, has_bias, y, o0, o1):  # pragma: no cover - compiled
            # y[m, o] = sum_i W[o, i] x[m, i] (+ bias[o]) for o in [o0, o1), all m: 4 weight rows at a time,
            # the input rows in pairs (an odd M >= 3 starts with a triple, whose 12 accumulators spill
            # registers but hide it behind the first read from memory; later groups re-read the block from L1
            # / L2, where pairs are faster), so each weight block is streamed from memory once
            M = x.shape[0]
            o = o0
            while o + 4 <= o1:
                m = 0
                if M >= 3 and M % 2 == 1:
                    put(y, 0, o, dot3(W, x, o, 0), bias, has_bias)
                    m = 3
                while M - m >= 2:
                    put(y, m, o, dot2(W, x, o, m), bias, has_bias)
                    m += 2
                if m < M:
                    put(y, m, o, dot1(W, x, o, m), bias, has_bias)
                o += 4
            while o < o1:
                for m in range(M):
                    a = f32(0.0)
                    for i in range(W.shape[1]):
                        a += W[o, i] * x[m, i]
                    y[m, o] = a + (bias[o] if has_bias else f32(0.0))
                o += 1

        _KERNEL = block
    return _KERNEL


def streamed_matmul(W: np.ndarray, x: np.ndarray, bias: np.ndarray | None = None, threads: int = 1) -> np.ndarray:
    """``x @ W.T (+ bias)`` for a few rows ``x``, reading the weight once (compiled kernel).

    Parameters
    ----------
    W : ndarray, shape (O, I), float32, C-contiguous
        Weight (``nn.Linear.weight``).
    x : ndarray, shape (M, I), float32
        Input rows (copied to C order if needed); M >= 1.
    bias : ndarray, shape (O,), float32, optional
    threads : int >= 1
        Output rows are split into ``threads`` equal chunks (multiples of 4 rows, at least
        ``_MIN_CHUNK_ROWS``) run on a thread pool (the kernel releases the GIL); 1 runs in the
        caller's thread.

    Returns
    -------
    ndarray, shape (M, O), float32.  Same products as ``F.linear`` up to float32 re-association
    (about 1e-6 relative).

    Raises
    ------
    ValueError
        Shapes or dtypes that do not match (the message names the argument).
    """
    if not isinstance(W, np.ndarray) or not isinstance(x, np.ndarray):
        raise ValueError(f"streamed_matmul needs numpy arrays W (O, I) and x (M, I), got W {type(W).__name__} and "
                         f"x {type(x).__name__} (pass tensor.numpy())")
    if W.dtype != np.float32 or x.dtype != np.float32 or W.ndim != 2 or x.ndim != 2 or x.shape[1] != W.shape[1]:
        raise ValueError(f"streamed_matmul needs W (O, I) and x (M, I) float32, got W {W.dtype}{W.shape} "
                         f"and x {x.dtype}{x.shape}")
    if bias is not None and (not isinstance(bias, np.ndarray) or bias.dtype != np.float32
                             or bias.shape != (W.shape[0],)):
        raise ValueError(f"bias must be a float32 array of shape ({W.shape[0]},), got "
                         f"{getattr(bias, 'dtype', type(bias).__name__)}{getattr(bias, 'shape', '')}")
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    W = np.ascontiguousarray(W)
    x = np.ascontiguousarray(x)
    O = W.shape[0]
    y = np.empty((x.shape[0], O), dtype=np.float32)
    b = bias if bias is not None else np.zeros(1, dtype=np.float32)
    kernel = _streamed_kernel()
    n = min(int(threads), O // _MIN_CHUNK_ROWS)
    if n <= 1:
        kernel(W, x, b, bias is not None, y, 0, O)
        return y
    from .._reserve_fused import run_chunks

    step = ((O + n - 1) // n + 3) // 4 * 4                # ceil(O / n) rounded up to a multiple of 4
    run_chunks(kernel, (W, x, b, bias is not None, y), O, n, bounds=list(range(0, O, step)) + [O])
    return y


def _kernel_serves(layer, x) -> bool:
    """True when ``layer(x)`` may go through :func:`streamed_matmul`: a plain strided CPU float32 tensor of
    1..STREAMED_MAX_ROWS rows and the layer's width, in inference (no gradient wanted for the input or any
    parameter, no forward-mode AD, vmap / jvp, tracing or autocast).  Anything else keeps ``F.linear``, which
    also raises torch's own errors (a wrong width is torch's RuntimeError)."""
    import torch

    if torch.jit.is_tracing():
        return False
    if type(x) is not torch.Tensor or x.layout != torch.strided or x.is_nested or x.device.type != "cpu" \
            or x.dtype != torch.float32 or layer.weight.dtype != torch.float32 or x.dim() == 0 \
            or x.shape[-1] != layer.in_features or x.is_neg() or x.is_conj():
        return False
    rows = x.numel() // max(x.shape[-1], 1)
    if not 1 <= rows <= STREAMED_MAX_ROWS:
        return False
    if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in layer.parameters())):
        return False
    if torch.is_autocast_enabled("cpu"):
        return False
    from torch.autograd import forward_ad

    if forward_ad._current_level >= 0 or torch._C._functorch.is_functorch_wrapped_tensor(x):
        return False
    return True


def _streamed_linear_class():
    import torch

    class StreamedLinear(torch.nn.Linear):
        """``nn.Linear`` computing 1..STREAMED_MAX_ROWS rows on CPU float32 by :func:`streamed_matmul`."""

        def forward(self, x):  # noqa: D401 - nn.Module API
            if not _kernel_serves(self, x):
                return super().forward(x)
            rows = x.numel() // max(x.shape[-1], 1)
            W = self.weight.detach().numpy()
            b = None if self.bias is None else self.bias.detach().numpy()
            y = streamed_matmul(W, x.detach().reshape(rows, x.shape[-1]).numpy(), b, max(1, torch.get_num_threads()))
            return torch.from_numpy(y).reshape(*x.shape[:-1], self.weight.shape[0])

    return StreamedLinear


_STREAMED_CLASS = None


def streamed_linear(model) -> int:
    """Rewrite every plain ``torch.nn.Linear`` of ``model`` to the ``streamed`` kernel in place; return how many.

    Parameters shared, state dict and tied weights unchanged (as :func:`small_batch_linear`).

    Raises
    ------
    ImportError
        numba is not installed (``pip install numba``, or choose ``linear="small-batch"``).
    """
    global _STREAMED_CLASS
    try:
        import numba  # noqa: F401
    except ImportError as exc:  # pragma: no cover - numba is a declared dependency
        raise ImportError("linear='streamed' needs numba: pip install numba, or use linear='small-batch'") from exc
    if _STREAMED_CLASS is None:
        _STREAMED_CLASS = _streamed_linear_class()
    return _swap_linear_class(model, _STREAMED_CLASS)


def _swap_linear_class(model, cls) -> int:
    """Set the class of every plain ``torch.nn.Linear`` of ``model`` to ``cls``; return how many."""
    import torch

    n = 0
    for mod in model.modules():
        if type(mod) is torch.nn.Linear:
            mod.__class__ = cls
            n += 1
    return n


_CLASS = None


def small_batch_linear(model) -> int:
    """Rewrite every plain ``torch.nn.Linear`` of ``model`` in place; return how many.

    The parameters are shared (nothing is copied); the module's class changes
    to a subclass, so ``state_dict`` keys, ``isinstance(m, nn.Linear)`` and
    tied weights are unchanged.  Subclasses of ``nn.Linear`` (quantised or
    LoRA layers) are left alone.
    """
    global _CLASS
    if _CLASS is None:
        _CLASS = _small_batch_linear_class()
    return _swap_linear_class(model, _CLASS)


def _auto(model) -> int:
    import torch

    p = next(model.parameters(), None)
    if p is None or p.device.type != "cpu" or p.dtype != torch.float32:
        return 0
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - numba is a declared dependency
        return small_batch_linear(model)
    return streamed_linear(model)


#: linear-kernel kinds: name -> function(model) -> layers rewritten
LINEAR_KINDS = {"auto": _auto, "small-batch": small_batch_linear, "streamed": streamed_linear,
                "torch": lambda model: 0}


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
