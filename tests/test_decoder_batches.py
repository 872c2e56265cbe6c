"""The ``small_batches`` check: a decoder wrong at one row position of a batch fails; exact ones pass."""

import warnings

import numpy as np
import pytest
from scipy import stats

import exactness
import exactness.decoder as dec
from exactness.chain import ChainDecoder, token_chain_kernel
from exactness.decoder_batches import small_batch_check
from exactness.decoder_mutants import Shifted, batch_row

from _decoder_cases import setup


_row = batch_row


def _certify(decoder, target, prompts, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", exactness.ExactnessWarning)
        return exactness.certify_decoder(decoder, target, prompts, **kw)


@pytest.mark.parametrize("seed", [2, 3])
def test_a_decoder_wrong_only_in_batch_row_2_fails_small_batches(seed):
    """Breaker (session 33): row 2 of each 4,096-row batch was 38 of 153,528 rows, which the pooled joint test
    could not see (these seeds passed); the small batches test row 2 on its own (514 rows). (The main sample now
    also cycles batch sizes down to 9 rows, so its joint test sees more of row 2 too.)"""
    model, target, prompts = setup()
    cert = _certify(Shifted(model, _row(2)), target, prompts, new_tokens=3, seed=seed)
    assert not cert.passed and "small_batches" in cert.failed_checks(), cert.summary()
    assert cert.details["small_batches"]["worst"] == "row 2"


def test_a_decoder_wrong_only_in_the_last_row_fails_through_the_pit_at_large_vocabulary(monkeypatch):
    monkeypatch.setattr(dec, "JOINT_MAX", 1)      # no joint law: the PIT of the first token, per row group
    model, target, prompts = setup(V=8)
    cert = _certify(Shifted(model, _row("last")), target, prompts, new_tokens=2, n=3000, seed=1)
    assert not cert.passed and "small_batches" in cert.failed_checks(), cert.summary()
    assert cert.details["small_batches"]["worst"] == "last row"


def test_exact_decoders_pass_and_the_row_groups_are_calibrated():
    """Under exactness every row group's p-value is uniform (KS over 30 seeds x 9 groups) and the Bonferroni
    p-value is never below alpha."""
    model, target, prompts = setup()
    laws = [dec.joint_law(target, prompts[i], 2) for i in range(prompts.shape[0])]
    d = ChainDecoder(token_chain_kernel, model)
    raw, combined = [], []
    for seed in range(30):
        pv, det = small_batch_check(d.sample, prompts, 2, 2, laws, target, 4, np.random.default_rng(seed), 150, 1e-3)
        combined.append(pv)
        raw += [g["pvalue"] for g in det["groups"]]
    assert min(combined) >= 1e-3
    assert stats.kstest(raw, "uniform").pvalue > 1e-3, sorted(raw)[:10]


def test_too_few_rows_give_no_verdict_which_the_certificate_lists_as_skipped():
    model, target, prompts = setup()
    d = ChainDecoder(token_chain_kernel, model)
    pv, det = small_batch_check(d.sample, prompts, 2, 0, [], target, 4, np.random.default_rng(0), 2, 1e-3)
    assert pv is None and "no degree of freedom" in det["reason"]


def test_an_unbatched_decoder_says_why_small_batches_is_skipped():
    model, target, prompts = setup()
    d = ChainDecoder(token_chain_kernel, model)
    cert = _certify(lambda prompt, m, rng: d.sample(prompt[None], m, rng)[0], target, prompts, new_tokens=2,
                    n=2000, seeded=False)
    assert "one prompt per call" in cert.skipped["small_batches"]


def test_a_decoder_wrong_only_in_mid_sized_batches_fails():
    """Breaker (session 34): exact in batches of 1-8 and of 4,096 rows, every token shifted in batches of 9 to
    4,095 rows; the main sample ran in 4,096-row batches only and passed it."""
    model, target, prompts = setup()
    cert = _certify(Shifted(model, lambda pr, B: np.full(B, 9 <= B < 4096)), target, prompts, new_tokens=2, n=4096,
                    seed=0)
    assert not cert.passed and "joint" in cert.failed_checks(), cert.summary()


def test_sample_must_match_sample_events_on_a_large_probe():
    """Breaker (session 34): the main sample comes from sample_events; a sample() that differs on 9 % of the rows
    passed an 8-row probe. The probe now has up to 4,096 rows."""

    class Differs(ChainDecoder):
        def sample(self, prompts, new_tokens, rng):
            out = np.array(super().sample(prompts, new_tokens, rng))
            flip = np.arange(out.shape[0]) % 11 == 10
            out[flip, -1] = (out[flip, -1] + 1) % self.model.P.shape[0]
            return out

    model, target, prompts = setup()
    cert = _certify(Differs(token_chain_kernel, model), target, prompts, new_tokens=2, n=3000, seed=0)
    assert not cert.passed and "sample_events and decoder.sample return different tokens" in \
        cert.details["subject"]["error"]


def test_row_2_wrong_only_at_the_last_token_fails_small_batches():
    """Breaker (session 34): small_batches tested only the first tokens of each row group."""
    model, target, prompts = setup()
    dec = Shifted(model, lambda pr, B: np.arange(B) == 2, tokens=-1)
    cert = _certify(dec, target, prompts, new_tokens=4, seed=0)
    assert not cert.passed and "small_batches" in cert.failed_checks(), cert.summary()
    assert cert.details["small_batches"]["worst_test"] == "token 4"


def test_a_decoder_wrong_only_in_batches_sharing_one_prompt_fails():
    """Breaker (session 34): wrong only when 9+ rows of a batch share a prompt; with several prompts the shuffled
    batches never did. The main sample starts with one batch of each prompt alone, also tested on its own."""
    model, target, prompts = setup()
    dec = Shifted(model, lambda pr, B: np.full(B, B >= 9 and bool((pr == pr[0]).all())), tokens=-1)
    cert = _certify(dec, target, prompts, new_tokens=3, seed=0)
    assert not cert.passed and "homogeneous" in cert.failed_checks(), cert.summary()


def test_sample_events_is_compared_with_sample_at_every_main_batch_size():
    """Breaker (session 34): a sample() that differs from sample_events only in batches of 9-4,095 rows passed a
    single 4,096-row probe."""

    class MidSizes(ChainDecoder):
        def sample(self, prompts, new_tokens, rng):
            out = np.array(super().sample(prompts, new_tokens, rng))
            if 9 <= out.shape[0] < 4096:
                out[:, -1] = (out[:, -1] + 1) % self.model.P.shape[0]
            return out

    model, target, prompts = setup()
    cert = _certify(MidSizes(token_chain_kernel, model), target, prompts, new_tokens=2, n=3000, seed=0)
    assert not cert.passed and "return different tokens under the same rng" in cert.details["subject"]["error"]


def test_an_unseeded_sample_beside_sample_events_says_the_comparison_did_not_run():
    class Unseeded(ChainDecoder):
        def sample(self, prompts, new_tokens, rng):
            return super().sample(prompts, new_tokens, np.random.default_rng())

    model, target, prompts = setup()
    cert = _certify(Unseeded(token_chain_kernel, model), target, prompts, new_tokens=2, n=3000, seed=0)
    assert "events_vs_sample" in cert.skipped and "seeded" in cert.skipped


def test_a_homogeneous_sample_with_no_degree_of_freedom_is_skipped_not_passed(monkeypatch):
    monkeypatch.setattr(dec, "HOMOGENEOUS", 1)        # one row per prompt: pooling leaves nothing to test
    model, target, prompts = setup()
    cert = _certify(ChainDecoder(token_chain_kernel, model), target, prompts, new_tokens=1, n=200, seeded=False)
    assert "homogeneous" not in cert.checks and "no degree of freedom" in cert.skipped["homogeneous"]
    assert cert.details["single"]["df"] > 0


# --------------------------------------------------------------------------- tile_rows (main sample by place)
@pytest.mark.parametrize("when, label", [(lambda pr, B: np.arange(B) == 1024, "-row tile"),
                                         (lambda pr, B: np.arange(B) % 512 == 0, "-row tile"),
                                         (lambda pr, B: (np.arange(B) == B - 1) & (B > 8), "batch of 9+")])
def test_a_decoder_wrong_at_a_tile_boundary_of_large_batches_fails_tile_rows(when, label):
    """Breaker (round 4): wrong only at row 1,024 (or every 512th row, or the last row of batches past 8 rows):
    a few hundred rows in 153,528, and neither the pooled tests nor the 2-8-row small_batches could see them
    (row 1,024 passed with p 0.007 at seed 1). tile_rows tests those rows of the main sample on their own."""
    model, target, prompts = setup()
    cert = _certify(Shifted(model, when), target, prompts, new_tokens=3, seed=1)
    assert not cert.passed and "tile_rows" in cert.failed_checks(), cert.summary()
    assert label in cert.details["tile_rows"]["worst"]


def test_tile_rows_is_calibrated_on_an_exact_decoder():
    """Under exactness one group's p-value per seed (a group drawn at random: the groups nest, so their p-values
    in one run are dependent) is uniform (KS over 40 seeds); the Bonferroni p-value never falls below alpha."""
    from exactness.decoder_batches import tile_groups, tile_rows_check

    model, target, prompts = setup()
    laws = [dec.joint_law(target, prompts[i], 2) for i in range(prompts.shape[0])]
    d = ChainDecoder(token_chain_kernel, model)
    picked, combined = [], []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        seqs, _, places = dec._draw_mixed(d.sample, True, prompts, 6000, 3, rng, 4)
        pits, _ = dec._pit_values(dec._Target(target), d, prompts, seqs, dec._joint_lookup(laws, 4, 2), rng,
                                  ["id"], 4)
        pv, det = tile_rows_check(seqs, places, pits, laws, 2, 4, 1e-3)
        combined.append(pv)
        picked.append(det["groups"][rng.integers(len(det["groups"]))]["pvalue"])
    assert min(combined) >= 1e-3
    assert stats.kstest(picked, "uniform").pvalue > 1e-3, sorted(picked)[:10]
    assert len(tile_groups(places)) == 4 * 9 + 6 + 1
    # a group too small for the joint test (a few rows per prompt) is tested through the PIT, not dropped
    # (round-5 breaker: "first row of each 2,048-row tile" was silently skipped at the default n)
    assert any(g["test"] == "token 1" for g in det["groups"]), det["groups"]     # mj = 2: token 1 only so


def test_tile_rows_with_no_degree_of_freedom_is_skipped_not_passed():
    from exactness.decoder_batches import tile_rows_check

    seqs = np.zeros((1, 4, 2), dtype=np.int64)
    places = np.stack([np.arange(4), np.full(4, 4)], axis=1)[None]        # one batch of 4 rows
    pv, det = tile_rows_check(seqs, places, {(0, "id"): np.full(4, .5), (1, "id"): np.full(4, .5)}, [], 0, 4, 1e-3)
    assert pv is None and "raise n" in det["reason"]
