"""Opt-in checks on the real downloaded models (``pytest -m realmodel``; needs ``resispec models fetch``)."""

import numpy as np
import pytest

from resispec import get_verifier
from resispec.decoding.engine import autoregressive_decode, check_pair, speculative_decode
from resispec.decoding.fetch import MODELS, is_verified, model_dir
from resispec.decoding.laws import SamplingConfig

pytestmark = pytest.mark.realmodel


def _need(name):
    spec = MODELS[name]
    if not is_verified(model_dir(name) / spec.filename, spec):
        pytest.skip(f"{name} not fetched; run: resispec models fetch {name}")


@pytest.fixture(scope="module")
def pair():
    from resispec.decoding.pair import load_pair

    _need("qwen2.5-coder-1.5b")
    _need("qwen2.5-coder-0.5b")
    return load_pair(device="cpu", progress=False)


def test_real_pair_greedy_speculative_equals_target_greedy(pair):
    from resispec.decoding.prompts import load_prompts

    ids = pair.encode(load_prompts("humaneval", limit=1)[0])
    greedy = autoregressive_decode(pair.target, ids, sampling=SamplingConfig(0.0), max_new_tokens=12,
                                   rng=np.random.default_rng(0)).tokens
    res = speculative_decode(pair.target, pair.draft, ids, get_verifier("resispec"), "2,2,1",
                             sampling=SamplingConfig(0.0), max_new_tokens=12, rng=np.random.default_rng(0))
    assert res.tokens == greedy
    assert res.block_efficiency > 1.5


def test_smollm_loads_and_refuses_to_pair_with_qwen(pair):
    from resispec.decoding.models import load_model

    _need("smollm2-135m")
    smol, tok = load_model("smollm2-135m", device="cpu", progress=False)
    out = autoregressive_decode(smol, tok("def add(a, b):")["input_ids"], sampling=SamplingConfig(0.0),
                                max_new_tokens=8, rng=np.random.default_rng(0))
    assert len(out.tokens) == 8
    with pytest.raises(ValueError, match="vocabulary"):
        check_pair(pair.target, smol)
