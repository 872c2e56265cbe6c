"""Shared helpers of the torch-backend tests."""

from __future__ import annotations

import numpy as np

#: Verifier options exercised by the exactness and parity tests.
CONFIGS = [
    ("sps", {}),
    ("rrs", {}),
    ("rrs_wor", {}),
    ("target_only", {}),
    ("kseq", {}),
    ("resispec", {}),                                   # the look-ahead (the default)
    ("resispec_myopic", {}),                            # the fixed point
    ("resispec", {"gamma": 0.5}),
    ("resispec", {"gamma": 0.0}),
    ("resispec", {"gamma": 1.5}),                       # gamma > 1: sort solver
    ("resispec_myopic", {"solver": "sort"}),
    ("resispec_myopic", {"solver": "newton"}),                 # tensor-op Newton (the GPU path), on CPU
    ("resispec_myopic", {"solver": "newton", "gamma": 0.5}),
    ("resispec_myopic", {"solver": "fused"}),                  # the compiled CPU kernel (auto on CPU)
    ("resispec", {"proxy": "tempered", "proxy_options": {"tau": 2.0}}),
    ("resispec", {"proxy": "topk", "proxy_options": {"top_k": 2}}),
    ("resispec", {"proxy": "uniform_mix"}),
    ("resispec", {"proxy": "coverage"}),
    ("resispec", {"proxy": lambda q_i, *, step, k, p_i: 0.5 * q_i + 0.5 * p_i}),   # user callable
]


def config_id(cfg) -> str:
    name, opts = cfg
    bits = [f"{k}={getattr(v, '__name__', v)}" for k, v in opts.items() if k != "proxy_options"]
    return name + ("[" + ",".join(bits) + "]" if bits else "")


def numpy_options(opts: dict) -> dict:
    """Drop the torch-only options."""
    return {k: v for k, v in opts.items() if k not in ("solver", "dtype", "device")}


def near_tie_rows(a: np.ndarray, r: np.ndarray, u: np.ndarray, delta: float) -> np.ndarray:
    """Rows (B,) where some uniform lies within ``delta`` of its threshold (numpy chain ``a``, ``r``)."""
    k = a.shape[1]
    near = (np.abs(u[:, :k] - a) <= delta).any(axis=1)
    cdf = np.cumsum(r, axis=1)
    target = u[:, k:k + 1] * cdf[:, -1:]
    near |= (np.abs(cdf - target) <= delta).any(axis=1)
    return near
