"""The small-batch CPU linear (resispec.decoding.cpu_linear): same products, same model, same laws."""

import numpy as np
import pytest
import torch

from resispec import get_verifier
from resispec.decoding.cpu_linear import (LINEAR_KINDS, MAX_ROWS, STREAMED_MAX_ROWS, apply_linear, small_batch_linear,
                                         streamed_linear, streamed_matmul)
from resispec.decoding.engine import autoregressive_decode, speculative_decode
from resispec.decoding.laws import SamplingConfig

from _decoding_tiny import tiny_model
from test_decoding_exact import PROMPT, V, chi_square_pvalue, exact_two_token_law, sample_counts

torch.set_num_threads(1)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 7), (2, 7), (3, 5, 7), (1, MAX_ROWS, 7), (1, MAX_ROWS + 1, 7), (7,)])
def test_same_product_as_torch_linear(bias, shape):
    torch.manual_seed(0)
    lin = torch.nn.Linear(7, 11, bias=bias)
    x = torch.randn(*shape)
    want = lin(x)
    assert small_batch_linear(lin) == 1
    got = lin(x)
    assert type(lin).__name__ == "SmallBatchLinear" and isinstance(lin, torch.nn.Linear)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_parameters_shared_and_tied_weights_kept():
    model = tiny_model("qwen2", vocab=16, seed=3)
    model.lm_head.weight = model.model.embed_tokens.weight  # tie
    keys = list(model.state_dict())
    ptrs = {n: p.data_ptr() for n, p in model.named_parameters()}
    n = apply_linear(model, "small-batch")
    assert n == 2 * 7 + 1  # 7 linears per layer, 2 layers, lm_head
    assert list(model.state_dict()) == keys
    assert {n: p.data_ptr() for n, p in model.named_parameters()} == ptrs
    assert model.lm_head.weight is model.model.embed_tokens.weight


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 7), (2, 7), (3, 5, 7), (1, STREAMED_MAX_ROWS, 7), (1, STREAMED_MAX_ROWS + 1, 7),
                                   (7,), (2, 3, 1)])
@pytest.mark.parametrize("out", [11, 4, 3, 1])
def test_streamed_same_product_as_torch_linear(bias, shape, out):
    """Every row count (1..16 through the kernel, 17 through F.linear), every remainder of the 4-row blocks."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(shape[-1], out, bias=bias)
    x = torch.randn(*shape)
    with torch.no_grad():
        want = torch.nn.functional.linear(x, lin.weight, lin.bias)
        assert streamed_linear(lin) == 1
        got = lin(x)
    assert type(lin).__name__ == "StreamedLinear" and isinstance(lin, torch.nn.Linear)
    assert got.shape == want.shape and got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows", range(1, STREAMED_MAX_ROWS + 1))
def test_streamed_every_row_count_and_grouping_agrees_with_float64(rows):
    """Each input-row count (the kernel groups rows as one, pairs, and a leading triple for odd counts; weight rows
    in blocks of 4 plus a remainder) gives every output entry, each from its own row and weight row."""
    rng = np.random.default_rng(rows)
    W = rng.standard_normal((11, 37)).astype(np.float32)
    x = rng.standard_normal((rows, 37)).astype(np.float32)
    b = rng.standard_normal(11).astype(np.float32)
    want = x.astype(np.float64) @ W.T.astype(np.float64)
    np.testing.assert_allclose(streamed_matmul(W, x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(streamed_matmul(W, x, b), want + b, rtol=1e-5, atol=1e-5)
    # each output row depends on its own input row only: permuting the inputs permutes the outputs
    perm = rng.permutation(rows)
    np.testing.assert_allclose(streamed_matmul(W, x[perm]), want[perm], rtol=1e-5, atol=1e-5)


def test_streamed_threads_and_large_shapes_agree_with_numpy():
    """The thread-pool split (several chunks of output rows) gives the same product as one call, and as numpy."""
    rng = np.random.default_rng(0)
    W = rng.standard_normal((5003, 96)).astype(np.float32)
    x = rng.standard_normal((5, 96)).astype(np.float32)
    b = rng.standard_normal(5003).astype(np.float32)
    want = x.astype(np.float64) @ W.T.astype(np.float64) + b
    one, two = streamed_matmul(W, x, b, threads=1), streamed_matmul(W, x, b, threads=2)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(one, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(streamed_matmul(W, x[:, ::1].T.copy().T), x @ W.T, rtol=1e-4, atol=1e-4)


def test_streamed_bad_input_names_the_argument():
    W = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match="float32"):
        streamed_matmul(W.astype(np.float64), np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError, match=r"x \(M, I\)"):
        streamed_matmul(W, np.zeros((1, 5), np.float32))
    with pytest.raises(ValueError, match="bias must be a float32 array"):
        streamed_matmul(W, np.zeros((1, 3), np.float32), np.zeros(3, np.float32))


def test_streamed_keeps_autograd_and_other_dtypes_on_torch():
    """Training (grad enabled on a weight that needs it) and float64 inputs keep F.linear."""
    lin = torch.nn.Linear(6, 5)
    streamed_linear(lin)
    x = torch.randn(2, 6)
    y = lin(x)
    y.sum().backward()
    assert lin.weight.grad is not None
    lin64 = torch.nn.Linear(6, 5).double()
    streamed_linear(lin64)
    with torch.no_grad():
        torch.testing.assert_close(lin64(x.double()), torch.nn.functional.linear(x.double(), lin64.weight, lin64.bias))


def test_auto_only_rewrites_cpu_float32():
    assert apply_linear(tiny_model("qwen2", vocab=16, dtype=torch.float64), "auto") == 0
    assert apply_linear(tiny_model("qwen2", vocab=16), "torch") == 0
    m = tiny_model("qwen2", vocab=16)
    assert apply_linear(m, "auto") == 15
    assert type(m.lm_head).__name__ == "StreamedLinear"


def test_unknown_kind_is_an_error_naming_the_kinds():
    with pytest.raises(ValueError, match=r"linear must be one of \['auto', 'small-batch', 'streamed', 'torch'\]"):
        apply_linear(tiny_model("qwen2", vocab=16), "mkl")
    assert sorted(LINEAR_KINDS) == ["auto", "small-batch", "streamed", "torch"]


@pytest.mark.parametrize("kind", ["small-batch", "streamed"])
def test_tree_pass_logits_match_torch_kernel(kind):
    """One tree pass (2..MAX_ROWS tokens) gives the same logits with either kernel."""
    from resispec.decoding.kv import CachedModel

    a, b = tiny_model("qwen2", vocab=64, seed=5), tiny_model("qwen2", vocab=64, seed=5)
    apply_linear(b, kind)
    outs = []
    for m in (a, b):
        P = CachedModel(m)
        P.forward([1, 2, 3], np.arange(3), np.tril(np.ones((3, 3), bool)))
        P.commit(range(3))
        outs.append(P.forward([4, 5, 6, 7], [3, 3, 4, 4], np.array([[1, 0, 0, 0], [0, 1, 0, 0], [1, 0, 1, 0],
                                                                      [0, 1, 0, 1]], bool)))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["small-batch", "streamed"])
def test_joint_law_of_two_tokens_with_small_batch_models(kind):
    """Exact enumeration of the target's two-token law vs the decoder on rewritten models (chi-square)."""
    target = tiny_model("qwen2", vocab=V, seed=11, scale=3.0)
    draft = tiny_model("qwen2", vocab=V, seed=12, scale=3.0)
    for m in (target, draft):
        apply_linear(m, kind)
    sampling = SamplingConfig(1.0)
    law = exact_two_token_law(target, sampling)
    counts = sample_counts(target, draft, get_verifier("resispec"), "2,1", sampling, 400, seed=3)
    assert chi_square_pvalue(counts, law) > 1e-3


@pytest.mark.parametrize("kind", ["small-batch", "streamed"])
def test_greedy_output_equals_target_greedy_with_small_batch(kind):
    target, draft = tiny_model("qwen2", vocab=64, seed=1, scale=4.0), tiny_model("qwen2", vocab=64, seed=2)
    ref = autoregressive_decode(target, [3, 4, 5], sampling=SamplingConfig(0.0), max_new_tokens=12,
                                rng=np.random.default_rng(0)).tokens
    for m in (target, draft):
        apply_linear(m, kind)
    got = speculative_decode(target, draft, [3, 4, 5], get_verifier("resispec"), "3,2,1", sampling=SamplingConfig(0.0),
                             max_new_tokens=12, rng=np.random.default_rng(0)).tokens
    assert got == ref


def test_load_model_checks_linear_before_loading(tmp_path):
    from resispec.decoding.models import load_model

    with pytest.raises(ValueError, match="linear must be one of"):
        load_model(str(tmp_path / "absent"), device="cpu", linear="mkl")


def _streamed(in_f=16, out_f=9):
    torch.manual_seed(0)
    lin = torch.nn.Linear(in_f, out_f)
    streamed_linear(lin)
    return lin


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_streamed_falls_back_wherever_torch_semantics_matter():
    """Bias-only training, forward-mode AD, tracing, autocast and vmap keep F.linear (a breaker's findings)."""
    import torch.autograd.forward_ad as fwAD

    lin, x, t = _streamed(), torch.randn(3, 16), torch.randn(3, 16)
    lin.weight.requires_grad_(False)
    lin(x).sum().backward()                                       # the bias alone is trained
    assert lin.bias.grad is not None
    with torch.no_grad(), fwAD.dual_level():
        tangent = fwAD.unpack_dual(lin(fwAD.make_dual(x, t))).tangent
    torch.testing.assert_close(tangent, t @ lin.weight.T)
    lin.requires_grad_(False)
    traced = torch.jit.trace(lin, x)
    x2 = torch.randn(3, 16)
    torch.testing.assert_close(traced(x2), lin(x2))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert lin(x).dtype == torch.bfloat16
    with torch.no_grad():
        torch.testing.assert_close(torch.func.vmap(lin)(torch.randn(4, 3, 16)).shape, torch.Size([4, 3, 9]))
        with pytest.raises(RuntimeError):                         # torch's own error for a wrong width
            lin(torch.randn(3, 15))


def test_streamed_matmul_bad_types_name_the_argument():
    W, x = np.zeros((4, 3), np.float32), np.zeros((1, 3), np.float32)
    for bad in (0, -3, 2.9, "3", None, True):
        with pytest.raises(ValueError, match="threads must be an integer >= 1"):
            streamed_matmul(W, x, threads=bad)
    with pytest.raises(ValueError, match="bias must be a float32 array"):
        streamed_matmul(W, x, [0.0] * 4)
    with pytest.raises(ValueError, match="numpy arrays"):
        streamed_matmul(torch.zeros(4, 3), x)


def test_run_chunks_checks_bounds_and_waits_for_every_chunk():
    import threading
    import time

    from resispec._reserve_fused import _pool, run_chunks

    with pytest.raises(ValueError, match="bounds must go from 0"):
        run_chunks(lambda lo, hi: None, (), 10, 2, bounds=[2, 5])
    with pytest.raises(ValueError, match="B must be >= 0"):
        run_chunks(lambda lo, hi: None, (), -3, 2)
    done = []

    def chunk(lo, hi):
        if lo == 0:
            raise RuntimeError("chunk failed")
        time.sleep(0.2)
        done.append((lo, hi, threading.current_thread().name))

    with pytest.raises(RuntimeError, match="chunk failed"):
        run_chunks(chunk, (), 10, 2, bounds=[0, 5, 10])
    assert [d[:2] for d in done] == [(5, 10)]                     # the sibling finished before the raise
    assert _pool(2) is _pool(2) and _pool(3) is not _pool(2)      # one pool per size, kept
