"""The small-batch CPU linear (resispec.decoding.cpu_linear): same products, same model, same laws."""

import numpy as np
import pytest
import torch

from resispec import get_verifier
from resispec.decoding.cpu_linear import LINEAR_KINDS, MAX_ROWS, apply_linear, small_batch_linear
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


def test_auto_only_rewrites_cpu_float32():
    assert apply_linear(tiny_model("qwen2", vocab=16, dtype=torch.float64), "auto") == 0
    assert apply_linear(tiny_model("qwen2", vocab=16), "torch") == 0
    assert apply_linear(tiny_model("qwen2", vocab=16), "auto") == 15


def test_unknown_kind_is_an_error_naming_the_kinds():
    with pytest.raises(ValueError, match=r"linear must be one of \['auto', 'small-batch', 'torch'\]"):
        apply_linear(tiny_model("qwen2", vocab=16), "mkl")
    assert sorted(LINEAR_KINDS) == ["auto", "small-batch", "torch"]


def test_tree_pass_logits_match_torch_kernel():
    """One tree pass (2..MAX_ROWS tokens) gives the same logits with either kernel."""
    from resispec.decoding.kv import CachedModel

    a, b = tiny_model("qwen2", vocab=64, seed=5), tiny_model("qwen2", vocab=64, seed=5)
    apply_linear(b, "small-batch")
    outs = []
    for m in (a, b):
        P = CachedModel(m)
        P.forward([1, 2, 3], np.arange(3), np.tril(np.ones((3, 3), bool)))
        P.commit(range(3))
        outs.append(P.forward([4, 5, 6, 7], [3, 3, 4, 4], np.array([[1, 0, 0, 0], [0, 1, 0, 0], [1, 0, 1, 0],
                                                                      [0, 1, 0, 1]], bool)))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)


def test_joint_law_of_two_tokens_with_small_batch_models():
    """Exact enumeration of the target's two-token law vs the decoder on rewritten models (chi-square)."""
    target = tiny_model("qwen2", vocab=V, seed=11, scale=3.0)
    draft = tiny_model("qwen2", vocab=V, seed=12, scale=3.0)
    for m in (target, draft):
        apply_linear(m, "small-batch")
    sampling = SamplingConfig(1.0)
    law = exact_two_token_law(target, sampling)
    counts = sample_counts(target, draft, get_verifier("resispec"), "2,1", sampling, 400, seed=3)
    assert chi_square_pvalue(counts, law) > 1e-3


def test_greedy_output_equals_target_greedy_with_small_batch():
    target, draft = tiny_model("qwen2", vocab=64, seed=1, scale=4.0), tiny_model("qwen2", vocab=64, seed=2)
    ref = autoregressive_decode(target, [3, 4, 5], sampling=SamplingConfig(0.0), max_new_tokens=12,
                                rng=np.random.default_rng(0)).tokens
    for m in (target, draft):
        apply_linear(m, "small-batch")
    got = speculative_decode(target, draft, [3, 4, 5], get_verifier("resispec"), "3,2,1", sampling=SamplingConfig(0.0),
                             max_new_tokens=12, rng=np.random.default_rng(0)).tokens
    assert got == ref


def test_load_model_checks_linear_before_loading(tmp_path):
    from resispec.decoding.models import load_model

    with pytest.raises(ValueError, match="linear must be one of"):
        load_model(str(tmp_path / "absent"), device="cpu", linear="mkl")
