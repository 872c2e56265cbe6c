"""Adversarial inputs to the torch backend (regression tests)."""

import pytest

torch = pytest.importorskip("torch")

import resispec  # noqa: E402

P = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
Q = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)


@pytest.mark.parametrize("name", ["sps", "rrs", "rrs_wor", "target_only", "kseq", "resispec"])
def test_autograd_inputs_are_detached(name):
    v = resispec.get_verifier(name, backend="torch")
    u = torch.tensor([[0.3, 0.3, 0.3]], dtype=torch.float64)
    ref = v.verify(P, Q, torch.tensor([0, 1]), uniforms=u)
    out = v.verify(P.clone().requires_grad_(True), Q, torch.tensor([0, 1]), uniforms=u)
    assert torch.equal(ref.tokens, out.tokens) and torch.equal(ref.accepted, out.accepted)


def test_uniforms_string():
    with pytest.raises(TypeError, match="uniforms"):
        resispec.get_verifier("rrs", backend="torch").verify(P, Q, torch.tensor([0, 1]), uniforms="abc")


def test_proxy_returning_none():
    v = resispec.get_verifier("resispec", backend="torch", proxy=lambda q_i, **kw: None)
    with pytest.raises(TypeError, match="proxy"):
        v.verify(P, Q, torch.tensor([0, 1, 2]), torch.Generator().manual_seed(0))


def test_proxy_writing_into_its_input():
    v = resispec.get_verifier("resispec", backend="torch", proxy=lambda q_i, **kw: q_i.mul_(2))
    with pytest.raises(ValueError, match="in-place"):
        v.verify(P, Q.clone(), torch.tensor([0, 1, 2]), torch.Generator().manual_seed(0))


def test_builtin_proxy_under_inference_mode():
    v = resispec.get_verifier("resispec", backend="torch", proxy=lambda q_i, **kw: q_i * 1.0)
    with torch.inference_mode():
        out = v.verify(P.clone(), Q.clone(), torch.tensor([0, 1, 2]), torch.Generator().manual_seed(0))
    assert out.tokens.shape == (1,)


@pytest.mark.parametrize("device", ["nosuch", 3.5])
def test_bad_device_option(device):
    with pytest.raises(ValueError, match="device"):
        resispec.get_verifier("rrs", backend="torch", device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda():
    with pytest.raises(ValueError, match="cuda"):
        resispec.get_verifier("resispec", backend="torch", device="cuda")
