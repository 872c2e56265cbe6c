"""The 2026 bug classes of the decoder catalogue (issue 38, item 5): each biased decoder of
``exactness.decoder_mutants.MUTANTS_2026`` has an exact-law test of its bias and FAILs ``certify_decoder`` at its
default budget; the exact settings-aware chain decoder (``CORRECT_2026["settings_chain"]``) has the target law exactly
and passes.

Exact laws: the joint law of the first two new tokens is enumerated over every draft path of every round the
decoder runs (gamma = 2), with the acceptance probabilities and residuals of token-level chain verification read
off the rows the decoder itself hands its kernel (its own law stack and ``verify_inputs``); batches of two rows
are enumerated jointly (the reorder bug needs the other row's draft).  The target law is computed here, directly
from ``exactness.settings.processed_law`` of the Markov pair's logits ``log P``.
"""

import inspect
import itertools
import time
from collections import defaultdict

import numpy as np
import pytest
from scipy import stats

import exactness
from exactness.decoder_mutants import (CORRECT, CORRECT_2026, MUTANTS, MUTANTS_2026, SETTINGS_DEFAULT,
                                       SettingsChainDecoder,
                                       settings_target)
from exactness.settings import SamplingSettings, processed_law
from simulators.autoregressive import MarkovPair

V, GAMMA, M = 4, 2, 2                       # vocabulary, drafts per round, tokens whose joint law is enumerated
PROMPTS = np.array([[0, 2], [1, 3], [3, 1]], dtype=np.int64)
TOL = 1e-12


def pair(V=V, seed=0, noise=2.0):
    return MarkovPair.random(np.random.default_rng(seed), V, noise=noise)


# --------------------------------------------------------------------------- exact laws
def target_joint(model, prompt, settings=SETTINGS_DEFAULT, m=M):
    """{(x_1..x_m): prob} of the non-speculative sampler: processed_law of log P, computed here."""
    L = len(prompt)
    out = {(): 1.0}
    for _ in range(m):
        nxt = {}
        for seq, pr in out.items():
            ctx = np.array(list(prompt) + list(seq), dtype=np.int64)
            law = processed_law(np.log(model.P[ctx[-1]])[None, :], ctx[None, :], L, settings, "transformers")[0]
            for x in range(law.size):
                nxt[seq + (x,)] = pr * law[x]
        out = nxt
    return out


def _kernel_law(tp, dp, d):
    """Exact law of one token-level chain call on one row: [(emitted tokens, prob)] (Leviathan et al. 2023)."""
    g, out, alive = d.size, [], 1.0
    for k in range(g + 1):
        if k == g:
            law = tp[g]
        else:
            qd = dp[k, d[k]]
            a = min(1.0, tp[k, d[k]] / qd) if qd > 0 else 0.0
            res = np.maximum(tp[k] - dp[k], 0.0)
            law = res / res.sum() if res.sum() > 1e-12 else tp[k]
            rej, alive = alive * (1.0 - a), alive * a
        w = alive if k == g else rej
        if w > 0:
            out += [(tuple(int(t) for t in d[:k]) + (x,), w * law[x]) for x in range(law.size) if law[x] > 0]
        if k < g and alive == 0:
            break
    return out


def decoder_joint(dec, prompts, row=0, m=M):
    """{(x_1..x_m): prob} of row ``row`` of a batch ``prompts`` (B, L) decoded by ``dec`` (a SettingsChainDecoder),
    enumerated over every joint draft path of every round (rows stay active until they hold ``m`` tokens)."""
    prompts = np.asarray(prompts, dtype=np.int64)
    L, g = prompts.shape[1], dec.gamma
    dec.stack.prompt_len = L
    memo = {}

    def draft_paths(ctx):
        paths = [((), 1.0)]
        for _ in range(g):
            nxt = []
            for dd, pr in paths:
                q = dec.pick(dec.stack.laws([ctx + dd])[0], dec.DRAFT)[0]
                nxt += [(dd + (x,), pr * q[x]) for x in range(q.size) if q[x] > 0]
            paths = nxt
        return paths

    def rec(state):                       # state: ((row id, context), ...) of the active rows, in batch order
        if state in memo:
            return memo[state]
        res = defaultdict(float)
        per_row = [draft_paths(ctx) for _, ctx in state]
        for joint in itertools.product(*per_row):
            pr = np.prod([w for _, w in joint])
            d = np.array([dd for dd, _ in joint], dtype=np.int64)
            ps, qs = [], []
            for i in range(g + 1):            # the calls ChainDecoder._run makes, in its order
                p, q = dec.stack.laws([ctx + tuple(dd[:i]) for (_, ctx), (dd, _) in zip(state, joint)])
                ps.append(p)
                if i < g:
                    qs.append(q)
            tp, dp, di = dec.verify_inputs(np.stack(ps, axis=1), np.stack(qs, axis=1), d)
            nexts = []
            for b, (rid, ctx) in enumerate(state):
                nx = defaultdict(float)
                for em, w in _kernel_law(tp[b], dp[b], di[b]):
                    new = ctx + em
                    done = len(new) - L >= m
                    key = (new[L:L + m], True) if rid == row and done else (None, True) if done else (new, False)
                    nx[key] += w
                nexts.append([(rid, k, w) for k, w in nx.items()])
            for combo in itertools.product(*nexts):
                w = pr * np.prod([c[2] for c in combo])
                if w == 0:
                    continue
                mine = next(c for c in combo if c[0] == row)
                if mine[1][1]:
                    res[mine[1][0]] += w
                    continue
                nxt_state = tuple((rid, k[0]) for rid, k, _ in combo if not k[1])
                for seq, v in rec(nxt_state).items():
                    res[seq] += w * v
        memo[state] = dict(res)
        return memo[state]

    return rec(tuple((b, tuple(int(t) for t in p)) for b, p in enumerate(prompts)))


def tv(a, b):
    keys = set(a) | set(b)
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys)


def chi2_pvalue(counts: dict, law: dict, n: int) -> float:
    """Pearson chi-square p-value of observed ``counts`` against ``law`` (cells of expectation < 5 pooled)."""
    keys = sorted(law, key=lambda k: -law[k])
    exp = np.array([n * law[k] for k in keys])
    obs = np.array([counts.get(k, 0) for k in keys], dtype=float)
    small = exp < 5
    if small.any():
        exp = np.append(exp[~small], exp[small].sum())
        obs = np.append(obs[~small], obs[small].sum())
    extra = n - obs.sum()                                      # tokens outside the law's support
    if extra:
        return 0.0
    return float(stats.chisquare(obs, exp).pvalue)


#: the model of the catalogue tests (V = 4, draft noise 2) and the cases whose laws are enumerated
MODEL_SEED = 1
SINGLE = [[i] for i in range(len(PROMPTS))]                   # batches of one row, one per prompt
#: the reorder bug needs a batch whose prompts are out of sorted order: row 0 = prompt (3, 1), row 1 = (0, 2)
REORDERED = [2, 0]
SORTED = [0, 2]


def cases(name):
    return [REORDERED] if name == "draft_misaligned_after_reorder" else SINGLE


#: exact TV of each mutant's joint law of the first 2 new tokens (row 0) to the target's, per case above,
#: at SETTINGS_DEFAULT (temperature 0.7, repetition penalty 1.5, logit bias +1 on token 1), gamma 2
EXACT_TV = {
    "settings_bonus_only": (0.40330, 0.05034, 0.23184),
    "settings_dropped_by_verifier": (0.35353, 0.10338, 0.19407),
    "penalty_history_off_by_one": (0.09789, 0.00723, 0.14123),
    "verifier_temperature_hardcoded": (0.10078, 0.17405, 0.14669),
    "first_draft_unverified": (0.93104, 0.86811, 0.92374),
    "draft_misaligned_after_reorder": (0.90934,),
}


@pytest.fixture(scope="module")
def model():
    return pair(seed=MODEL_SEED)


# --------------------------------------------------------------------------- (a) exact laws
def test_the_catalogue_names_the_2026_classes():
    assert set(MUTANTS_2026) == set(EXACT_TV)
    assert {"argmax_draft_raw_q", "rows_mixed"} <= set(MUTANTS)   # the two classes the first catalogue has
    assert "settings_chain" not in CORRECT  # CORRECT's decoders are certified against chain_target
    assert isinstance(CORRECT_2026["settings_chain"](pair()), SettingsChainDecoder)


@pytest.mark.parametrize("settings", [
    SETTINGS_DEFAULT,
    SamplingSettings(temperature=0.8, top_k=3),
    SamplingSettings(min_p=0.1, repetition_penalty=1.3),
    SamplingSettings(temperature=1.3, top_p=0.8, logit_bias=((2, -1.5),)),
], ids=lambda s: s.label())
def test_exact_settings_chain_has_the_target_law(model, settings):
    dec = CORRECT_2026["settings_chain"](model, GAMMA, settings)
    for rows in SINGLE + [REORDERED, SORTED]:
        law = decoder_joint(dec, PROMPTS[rows])
        want = target_joint(model, PROMPTS[rows[0]], settings)
        assert max(abs(law.get(k, 0.0) - want[k]) for k in set(law) | set(want)) < TOL, (rows, tv(law, want))
    # settings_target is the same law (it is what certify_decoder is handed)
    tgt = settings_target(model, settings, PROMPTS.shape[1])
    ctx = np.array([[0, 2, 3], [1, 3, 3]])
    for b in range(2):
        want = processed_law(np.log(model.P[ctx[b, -1]])[None], ctx[b:b + 1], 2, settings, "transformers")[0]
        assert np.allclose(tgt(ctx)[b], want, rtol=0, atol=TOL)


@pytest.mark.parametrize("name", sorted(MUTANTS_2026))
def test_mutant_bias_has_an_exact_law(model, name):
    dec = MUTANTS_2026[name](model, GAMMA)
    got = []
    for rows in cases(name):
        got.append(tv(decoder_joint(dec, PROMPTS[rows]), target_joint(model, PROMPTS[rows[0]])))
    print(f"{name}: exact TV of the first {M} tokens' joint law = {', '.join(f'{x:.5f}' for x in got)}")
    assert all(x > 5e-3 for x in got), got
    assert got == pytest.approx(EXACT_TV[name], abs=1e-5)


def test_reorder_bug_spares_batches_of_one_and_sorted_batches(model):
    dec = MUTANTS_2026["draft_misaligned_after_reorder"](model, GAMMA)
    for rows in SINGLE + [SORTED, [1, 1]]:
        law = decoder_joint(dec, PROMPTS[rows])
        assert tv(law, target_joint(model, PROMPTS[rows[0]])) < TOL, rows


def test_bonus_only_with_a_truncating_setting_emits_banned_tokens(model):
    # min_p removes tokens from the processed law; verified rows without it put mass on them
    s = SamplingSettings(min_p=0.2)
    dec = MUTANTS_2026["settings_bonus_only"](model, GAMMA, s)
    law, want = decoder_joint(dec, PROMPTS[[0]]), target_joint(model, PROMPTS[0], s)
    banned = sum(v for k, v in law.items() if want.get(k, 0.0) == 0)
    assert banned > 1e-3 and tv(law, want) >= banned - TOL, (banned, tv(law, want))


@pytest.mark.parametrize("name", sorted(MUTANTS_2026) + ["settings_chain"])
def test_enumerated_law_is_the_decoders_own(model, name):
    # the enumeration reads the decoder's rows; its sampler must follow the enumerated law (chi-square, fixed seed)
    make = {**MUTANTS_2026, **CORRECT_2026}[name]
    dec = make(model, GAMMA)
    rng = np.random.default_rng(38)
    if name == "draft_misaligned_after_reorder":
        law = decoder_joint(dec, PROMPTS[REORDERED])
        n = 3000
        toks = np.stack([dec.sample(PROMPTS[REORDERED], M, rng)[0] for _ in range(n)])
    else:
        law = decoder_joint(dec, PROMPTS[[0]])
        n = 20000
        toks = dec.sample(np.repeat(PROMPTS[[0]], n, axis=0), M, rng)
    counts = defaultdict(int)
    for t in map(tuple, toks.tolist()):
        counts[t] += 1
    assert chi2_pvalue(counts, law, n) > 1e-4


# --------------------------------------------------------------------------- (b) default budget
def _certify(model, make):
    t = time.perf_counter()
    cert = exactness.certify_decoder(make(model, GAMMA), settings_target(model, SETTINGS_DEFAULT, PROMPTS.shape[1]),
                                     PROMPTS, new_tokens=M)
    return cert, time.perf_counter() - t


def test_exact_settings_chain_passes_at_the_default_budget(model):
    cert, secs = _certify(model, CORRECT_2026["settings_chain"])
    print(f"settings_chain: n = {cert.n}, p = {cert.pvalue:.3g}, detectable TV {cert.detectable_tv:.4f}, {secs:.1f} s")
    assert cert.passed, cert.summary()
    assert cert.detectable_tv <= 0.02 + 1e-9


@pytest.mark.parametrize("name", sorted(MUTANTS_2026))
def test_mutant_fails_at_the_default_budget(model, name):
    cert, secs = _certify(model, MUTANTS_2026[name])
    print(f"{name}: n = {cert.n}, p = {cert.pvalue:.3g}, {secs:.1f} s; {cert.summary().splitlines()[0]}")
    assert not cert.passed, cert.summary()
    assert cert.detectable_tv <= 0.02 + 1e-9


# --------------------------------------------------------------------------- (c) certify_decoder's own claims
#: certify_decoder's signature and docstring as of issue 38 (this catalogue does not change exactness/decoder.py)
CERTIFY_SIGNATURE = ("(decoder, target, prompts, *, new_tokens: 'int' = 2, n: 'int | None' = None, tv: 'float | None' "
                     "= None, alpha: 'float' = 0.001, seed=0, seeded: 'bool | None' = None, "
                     "time_limit: 'float | None' = 3600.0, progress=False) -> 'Certificate'")
CERTIFY_DOC_SHA256 = "e4acf60e900bec29bc75bd622c1abe169246034ab7cd20f0afa769fe4d2c27d5"


def test_certify_decoder_claims_are_unchanged():
    import hashlib

    import exactness.decoder as dec

    doc = inspect.getdoc(exactness.certify_decoder)
    assert str(inspect.signature(exactness.certify_decoder)) == CERTIFY_SIGNATURE
    assert hashlib.sha256(doc.encode()).hexdigest() == CERTIFY_DOC_SHA256, "certify_decoder's docstring changed"
    assert "detects TV ``tv`` (default ``DEFAULT_TV`` = 0.02) with power 0.99" in " ".join(doc.split())
    assert (dec.DEFAULT_TV, dec.POWER, dec.JOINT_TOKENS, dec.JOINT_MAX) == (0.02, 0.99, 3, 1_000_000)
