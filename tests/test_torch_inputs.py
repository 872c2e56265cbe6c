"""Bad input to the torch backend: clear errors, or documented up-casting."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import resispec  # noqa: E402
from resispec.torch_backend import draw_candidates  # noqa: E402


def _laws(B=3, V=6, dtype=torch.float64, seed=0):
    rng = np.random.default_rng(seed)
    p = torch.from_numpy(rng.dirichlet(np.ones(V), size=B)).to(dtype)
    q = torch.from_numpy(rng.dirichlet(np.ones(V), size=B)).to(dtype)
    return p, q


@pytest.fixture
def v():
    return resispec.get_verifier("resispec", backend="torch")


def test_registry_lists_every_numpy_verifier():
    assert resispec.available_verifiers("torch") == resispec.available_verifiers("numpy")


def test_mixed_dtypes(v):
    p, q = _laws()
    with pytest.raises(TypeError, match="dtype"):
        v.verify(p, q.float(), torch.zeros((3, 2), dtype=torch.int64), uniforms=np.zeros((3, 3)))


def test_mixed_devices(v):
    p, q = _laws()
    with pytest.raises(ValueError, match="device"):
        v.verify(p, q.to("meta"), torch.zeros((3, 2), dtype=torch.int64), uniforms=np.zeros((3, 3)))


def test_candidates_on_other_device(v):
    p, q = _laws()
    with pytest.raises(ValueError, match="device"):
        v.verify(p, q, torch.zeros((3, 2), dtype=torch.int64, device="meta"), uniforms=np.zeros((3, 3)))


def test_non_contiguous(v):
    p, q = _laws(B=6)
    with pytest.raises(ValueError, match="contiguous"):
        v.chain(p.t().contiguous().t(), q, torch.zeros((6, 2), dtype=torch.int64))


def test_wrong_shapes(v):
    p, q = _laws()
    with pytest.raises(ValueError, match="shape"):
        v.chain(p[:, :5].contiguous(), q, torch.zeros((3, 2), dtype=torch.int64))
    with pytest.raises(ValueError, match="shape"):
        v.chain(p.reshape(3, 2, 3), q.reshape(3, 2, 3), torch.zeros((3, 2), dtype=torch.int64))
    with pytest.raises(ValueError, match="rows"):
        v.chain(p, q, torch.zeros((2, 2), dtype=torch.int64))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_rows_must_sum_to_one(v, dtype):
    p, q = _laws(dtype=dtype)
    bad = (p.float() * 1.1).to(dtype)
    with pytest.raises(ValueError, match="sums to"):
        v.chain(bad, q, torch.zeros((3, 2), dtype=torch.int64))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_upcast_and_renormalised(v, dtype):
    """Documented up-casting: a half row acts exactly as its float32 renormalisation."""
    p, q = _laws(dtype=dtype)
    p32 = p.float() / p.float().sum(1, keepdim=True)
    q32 = q.float() / q.float().sum(1, keepdim=True)
    c = draw_candidates(q32, 2, "iid", torch.Generator().manual_seed(0))
    ch, ch32 = v.chain(p, q, c), v.chain(p32, q32, c)
    assert ch.residual.dtype == torch.float32
    torch.testing.assert_close(ch.accept_probs, ch32.accept_probs, rtol=0, atol=0)
    torch.testing.assert_close(ch.residual, ch32.residual, rtol=0, atol=0)


def test_float32_rows_off_by_more_than_tolerance(v):
    p, q = _laws(dtype=torch.float32)
    with pytest.raises(ValueError, match="normalise"):
        v.chain(p * 1.001, q, torch.zeros((3, 2), dtype=torch.int64))


@pytest.mark.parametrize("bad, match", [(float("nan"), "NaN"), (-0.1, "negative")])
def test_nan_and_negative(v, bad, match):
    p, q = _laws()
    p[0, 0] = bad
    with pytest.raises(ValueError, match=match):
        v.chain(p, q, torch.zeros((3, 2), dtype=torch.int64))


def test_candidate_checks():
    p, q = _laws()
    v = resispec.get_verifier("rrs_wor", backend="torch")
    with pytest.raises(TypeError, match="integer"):
        v.chain(p, q, torch.zeros((3, 2)))
    with pytest.raises(ValueError, match="outside"):
        v.chain(p, q, torch.full((3, 2), 6, dtype=torch.int64))
    q2 = q.clone()
    q2[:, 0] = 0.0
    q2 = q2 / q2.sum(1, keepdim=True)
    with pytest.raises(ValueError, match="draft probability q = 0"):
        v.chain(p, q2, torch.zeros((3, 1), dtype=torch.int64))
    with pytest.raises(ValueError, match="repeat"):
        v.chain(p, q, torch.ones((3, 2), dtype=torch.int64))


def test_uniforms_and_rng_checks(v):
    p, q = _laws()
    c = torch.zeros((3, 2), dtype=torch.int64)
    with pytest.raises(ValueError, match="shape"):
        v.verify(p, q, c, uniforms=np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        v.verify(p, q, c, uniforms=np.ones((3, 3)))
    with pytest.raises(ValueError, match="rng"):
        v.verify(p, q, c)
    with pytest.raises(TypeError, match="torch.Generator"):
        v.verify(p, q, c, np.random.default_rng(0))


def test_options_are_validated():
    with pytest.raises(ValueError, match="solver"):
        resispec.get_verifier("resispec", backend="torch", solver="magic")
    with pytest.raises(ValueError, match="gamma"):
        resispec.get_verifier("resispec", backend="torch", gamma=-1.0)
    with pytest.raises(ValueError, match="unknown proxy"):
        resispec.get_verifier("resispec", backend="torch", proxy="nope")
    with pytest.raises(ValueError, match="dtype"):
        resispec.get_verifier("rrs", backend="torch", dtype=torch.float16)
    with pytest.raises(TypeError):
        resispec.get_verifier("rrs", backend="torch", gamma=1.0)


def test_bad_callable_proxy_output():
    p, q = _laws()
    v = resispec.get_verifier("resispec", backend="torch", proxy=lambda q_i, *, step, k, p_i: -q_i)
    with pytest.raises(ValueError, match="negative"):
        v.chain(p, q, torch.zeros((3, 2), dtype=torch.int64))


def test_numpy_inputs_are_accepted_as_float64_cpu(v):
    p, q = _laws()
    out = v.verify(p.numpy(), q.numpy(), np.zeros((3, 2), dtype=np.int64), uniforms=np.full((3, 3), 0.5))
    assert out.tokens.dtype == torch.int64 and out.tokens.shape == (3,)
    law = v.conditional_law(p[0].numpy(), q[0].numpy(), np.array([0, 1]))
    assert law.shape == (6,)


def test_draw_candidates_checks():
    p, q = _laws()
    with pytest.raises(ValueError, match="support"):
        draw_candidates(torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64), 3, "without_replacement",
                        torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="rng"):
        draw_candidates(q, 2, "iid")


def test_ragged_uniforms_name_the_argument_and_analysis_does_not_warn():
    """Breaker (session 37): ragged uniforms raised numpy's bare message; exact_output_law on a torch verifier
    warned about wrapping a read-only array."""
    import warnings

    import resispec

    vt = resispec.get_verifier("resispec", backend="torch", drafting="without_replacement")
    p, q = np.array([.4, .3, .2, .1]), np.array([.1, .2, .3, .4])
    with pytest.raises(ValueError, match="uniforms"):
        vt.verify(torch.tensor(p), torch.tensor(q), torch.tensor([0, 1]), uniforms=[[0.1, 0.2], [0.3]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        law = resispec.exact_output_law(vt, p, q, 3, drafting="without_replacement")
    assert np.abs(law - p).max() < 1e-12
