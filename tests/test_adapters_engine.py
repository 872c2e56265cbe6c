"""exactness.adapters.engine: our tree speculative decoder as a certify_decoder ``decoder`` / ``target`` pair.

Correct verifiers (iid and without-replacement trees) pass the exact two-token joint law check; a biased
verifier fails the same check through the adapter; the target callable equals the engine's processed law;
bad input gets clear errors.
"""

import numpy as np
import pytest
import torch

import exactness
from exactness.adapters import certify_joint, joint_law, sequence_index
from exactness.adapters.engine import EngineDecoder, engine_target, every_engine_decoder, parse_tree
from resispec.decoding.laws import SamplingConfig, process_logits
from resispec.verifiers.base import Verifier

from _decoding_tiny import full_logits, tiny_model

torch.set_num_threads(1)
V = 4
PROMPT = np.array([1, 2, 3], dtype=np.int64)
N = 80  # per certificate (~0.15 s a decode on a loaded 2-core machine); the mutant test shows its power


@pytest.fixture(scope="module")
def pair():
    return tiny_model("qwen2", vocab=V, seed=21, scale=10.0), tiny_model("qwen2", vocab=V, seed=22, scale=10.0)


def test_target_is_the_processed_last_position_law(pair):
    target, _ = pair
    s = SamplingConfig(0.8, top_k=3)
    ctx = np.array([[1, 2, 3], [3, 0, 2]], dtype=np.int64)
    rows = engine_target(target, s)(ctx)
    assert rows.shape == (2, V) and rows.dtype == np.float64
    for i in range(2):
        np.testing.assert_allclose(rows[i], process_logits(full_logits(target, ctx[i])[None], s)[0], atol=1e-6)
    assert (np.count_nonzero(rows, axis=1) == 3).all()


def test_joint_law_is_the_chain_rule(pair):
    target, _ = pair
    tgt = engine_target(target)
    law = joint_law(tgt, PROMPT, 2)
    p1 = tgt(PROMPT[None])[0]
    p2 = tgt(np.array([[1, 2, 3, 2]], dtype=np.int64))[0]
    assert law.shape == (V * V,)
    np.testing.assert_allclose(law[sequence_index([2, 3], V)], p1[2] * p2[3], rtol=1e-6)  # float32 forwards of a batch and of one row differ by ~1e-7
    assert abs(law.sum() - 1) < 1e-12


def test_decoder_output_and_seeding(pair):
    dec = EngineDecoder(*pair, "rrs", "2,1")
    out = dec(PROMPT, 3, np.random.default_rng(5))
    assert out.shape == (3,) and out.dtype == np.int64 and ((0 <= out) & (out < V)).all()
    again = dec(PROMPT, 3, np.random.default_rng(5))
    np.testing.assert_array_equal(out, again)
    draws = {tuple(dec(PROMPT, 3, np.random.default_rng(s))) for s in range(10)}
    assert len(draws) > 1  # it samples


@pytest.mark.parametrize("verifier,tree,sampling", [
    ("rrs", "2,1", SamplingConfig(1.0)),
    ("rrs_wor", "wor:2,1", SamplingConfig(0.7)),
    ("resispec", "3", SamplingConfig(1.0, top_k=3)),
    ("target_only", "wor:1,2", SamplingConfig(1.0)),
    ("block", "1,1", SamplingConfig(1.0)),                     # path-level rules by name, through the engine
    ("traversal_resispec", "2,1", SamplingConfig(1.0)),
])
def test_engine_verifiers_pass_the_two_token_law(pair, verifier, tree, sampling):
    target, draft = pair
    dec = EngineDecoder(target, draft, verifier, tree, sampling=sampling)
    cert = certify_joint(dec, engine_target(target, sampling), PROMPT, N, seed=3)
    assert cert.passed, cert.summary()


class _AlwaysAcceptFirst(Verifier):
    """Biased mutant: emits the first candidate, so the draft's law."""

    name = "accept_first"
    drafting = "iid"

    def _chain(self, p, q, c):
        a = np.zeros(c.shape)
        a[:, 0] = 1.0
        return a, p


def test_a_biased_tree_rule_fails_through_the_adapter(pair):
    """The planted traversal_resispec bug (no 'keeps nothing' outcome) is flagged by the same check."""
    from exactness.path_mutants import TREE_MUTANTS

    target, draft = pair
    cert = certify_joint(EngineDecoder(target, draft, TREE_MUTANTS["traversal_resispec_no_bottom"](), "2,1"),
                         engine_target(target), PROMPT, 200, seed=3)
    assert not cert.passed, cert.summary()


def test_a_biased_verifier_fails_through_the_adapter(pair):
    target, draft = pair
    tv = 0.5 * np.abs(joint_law(engine_target(target), PROMPT) - joint_law(engine_target(draft), PROMPT)).sum()
    assert tv > 0.4  # the draft's two-token law is far from the target's: a real bias to find
    cert = certify_joint(EngineDecoder(target, draft, _AlwaysAcceptFirst(), "2,1"), engine_target(target),
                         PROMPT, 60, seed=3)
    assert not cert.passed, cert.summary()


@pytest.mark.skipif(not hasattr(exactness, "certify_decoder"), reason="exactness.certify_decoder not in this checkout")
def test_through_certify_decoder(pair):
    target, draft = pair
    s = SamplingConfig(0.7)
    good = exactness.certify_decoder(EngineDecoder(target, draft, "rrs_wor", "wor:2,1", sampling=s),
                                     engine_target(target, s), PROMPT[None], new_tokens=2, n=N, seed=1)
    assert good.passed, good.summary()
    bad = exactness.certify_decoder(EngineDecoder(target, draft, _AlwaysAcceptFirst(), "2,1"), engine_target(target),
                                    PROMPT[None], new_tokens=2, n=N, seed=1)
    assert not bad.passed, bad.summary()


def test_every_engine_decoder_pairs_verifiers_with_their_trees(pair):
    decs = every_engine_decoder(*pair, trees=("2,1", "wor:2,1"))
    assert {"rrs@2,1", "resispec@2,1", "kseq@2,1", "rrs_wor@wor:2,1", "target_only@2,1",
            "target_only@wor:2,1"} <= set(decs)
    assert "rrs@wor:2,1" not in decs and "rrs_wor@2,1" not in decs  # biased pairings are never built
    assert decs["rrs_wor@wor:2,1"](PROMPT, 2, np.random.default_rng(0)).shape == (2,)


def test_parse_tree():
    assert parse_tree("wor:4,2").drafting == "without_replacement"
    assert parse_tree("4,2").branching == (4, 2) and parse_tree("4,2").drafting == "iid"
    with pytest.raises(ValueError, match="malformed tree shape"):
        parse_tree("wor:")


def test_bad_input(pair):
    target, draft = pair
    other = tiny_model("qwen2", vocab=V + 4, seed=23)
    with pytest.raises(ValueError, match="vocabulary"):
        EngineDecoder(target, other, "rrs", "2,1")
    with pytest.raises(ValueError, match="exact only for 'iid'"):
        EngineDecoder(target, draft, "rrs", "wor:2,1")  # rrs on without-replacement drafts is biased
    with pytest.raises(TypeError, match="SamplingConfig"):
        EngineDecoder(target, draft, "rrs", "2,1", sampling=0.7)
    dec = EngineDecoder(target, draft, "rrs", "2,1")
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError, match="dtype int64"):
        dec(PROMPT.astype(np.int32), 2, rng)
    with pytest.raises(TypeError, match="ndarray"):
        dec([1, 2, 3], 2, rng)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 4\)"):
        dec(np.array([1, 9], dtype=np.int64), 2, rng)
    with pytest.raises(ValueError, match="shape"):
        dec(PROMPT[None], 2, rng)
    with pytest.raises(ValueError, match="new_tokens"):
        dec(PROMPT, 0, rng)
    with pytest.raises(TypeError, match="Generator"):
        dec(PROMPT, 2, 0)
    tgt = engine_target(target)
    with pytest.raises(TypeError, match="int64"):
        tgt(PROMPT[None].astype(float))
    with pytest.raises(ValueError, match="shape"):
        tgt(PROMPT)
    with pytest.raises(TypeError, match="dtype int64"):
        certify_joint(dec, tgt, PROMPT.astype(np.int32), 10)


def test_joint_law_and_certify_joint_reject_bad_plugins():
    flat = lambda ctx: np.full((len(ctx), V), 1.0 / V)  # noqa: E731
    with pytest.raises(ValueError, match="do not sum to 1"):
        joint_law(lambda ctx: np.full((len(ctx), V), 0.3), PROMPT)
    with pytest.raises(ValueError, match="must return shape"):
        joint_law(lambda ctx: np.full((1, V), 1.0 / V), PROMPT)  # ignores the batch of contexts
    with pytest.raises(ValueError, match="MAX_JOINT"):
        joint_law(lambda ctx: np.full((len(ctx), 1 << 11), 1.0 / (1 << 11)), PROMPT, 2)
    # a decoder that misbehaves is a FAIL naming the cause, not "bad input" (issue 37 item 3)
    for dec, match in ((lambda p, m, rng: np.array([0]), "returned 1 new tokens, expected 2"),
                       (lambda p, m, rng: np.array([0.0, 1.0]), "integer token ids"),
                       (lambda p, m, rng: np.array([0, 7]), "outside [0, 4)")):
        cert = certify_joint(dec, flat, PROMPT, 50)
        assert not cert.passed and match in cert.details["subject"]["error"]
    assert certify_joint(lambda p, m, rng: rng.integers(0, V, m), flat, PROMPT, 400, seed=0).passed


def test_engine_reports_its_node_decisions(pair):
    target, draft = pair
    dec = EngineDecoder(target, draft, "rrs", "2,1")
    pr = np.array([[1, 2, 3], [3, 0, 2]], dtype=np.int64)
    tokens, ev = dec.sample_events(pr, 4, np.random.default_rng(7))
    np.testing.assert_array_equal(tokens[0], dec(pr[0], 4, np.random.default_rng(7)))  # the same draws
    from exactness.decoder_events import check_events

    out = check_events(ev, tokens, V)
    assert out.row.size == 8 and out.candidates.shape[1] == 2  # one entry per token; root node: 2 candidates
    assert dec.rule == "rrs" and dec.draft_law(pr).shape == (2, V)


def test_conditional_checks_through_the_engine(pair):
    target, draft = pair
    good = exactness.certify_decoder(EngineDecoder(target, draft, "rrs", "2,1"), engine_target(target),
                                     PROMPT[None], new_tokens=2, n=N, seed=2)
    assert good.passed, good.summary()
    assert {"accepted_count", "after_rejection"} <= set(good.checks)

    class Liar(_AlwaysAcceptFirst):  # claims to be rrs: its decisions are checked against rrs's node law
        name = "rrs"

    bad = exactness.certify_decoder(EngineDecoder(target, draft, Liar(), "2,1"), engine_target(target),
                                    PROMPT[None], new_tokens=2, n=N, seed=2)
    assert "accepted_count" in bad.failed_checks(), bad.summary()
