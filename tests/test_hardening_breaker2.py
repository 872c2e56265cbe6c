"""Bad input found by an adversarial tester: a clear ValueError/TypeError naming the argument, never a traceback.

Covers exactness.chain.ChainDecoder, exactness.tree_decoder.TreeDecoder,
exactness.coupled.tree.certify_coupled_tree, ``resispec certify-coupled`` and the n-gram draft's option check.
"""

import numpy as np
import pytest

from exactness.chain import chain_decoder, token_chain_kernel
from exactness.coupled.tree import ReferenceTreeKernel, certify_coupled_tree
from exactness.tree_decoder import TreeDecoder
from resispec import get_verifier
from resispec.cli import main
from resispec.decoding.drafts import check_draft_spec
from simulators.autoregressive import MarkovPair

PAIR = MarkovPair.random(np.random.default_rng(0), 4, noise=2)
PROMPTS = np.array([[0], [1], [3]])


def _rng():
    return np.random.default_rng(0)


# -- 1. ChainDecoder: kernel output --------------------------------------------------------------
def k_oob(tp, dp, di, rng):
    out = token_chain_kernel(tp, dp, di, rng)
    out[:, 0] = 7                                   # vocabulary is 4
    return out


def k_below(tp, dp, di, rng):
    out = token_chain_kernel(tp, dp, di, rng)
    out[:, -1] = -2
    return out


def k_float(tp, dp, di, rng):
    return token_chain_kernel(tp, dp, di, rng).astype(float)


def k_bool(tp, dp, di, rng):
    return token_chain_kernel(tp, dp, di, rng) >= 0


def k_not_prefix(tp, dp, di, rng):
    out = np.full((di.shape[0], di.shape[1] + 1), -1, dtype=np.int64)
    out[:, :2] = (di[:, :2] + 1) % tp.shape[-1]     # claims d_1 accepted but emits another token
    return out


def k_raises(tp, dp, di, rng):
    raise RuntimeError("boom")


@pytest.mark.parametrize("kernel, exc, match", [
    (k_oob, ValueError, r"k_oob returned token id 7, outside \[0, 4\)"),
    (k_below, ValueError, r"k_below returned token id -2"),
    (k_float, TypeError, r"k_float returned dtype float64.*integer"),
    (k_bool, TypeError, r"k_bool returned dtype bool"),
    (k_not_prefix, ValueError, r"k_not_prefix: row 0 .*accepted prefix is not draft_ids\[0\]"),
    (k_raises, TypeError, r"chain kernel k_raises raised RuntimeError: boom \(in k_raises, .*\) \(called as kernel\(target_probs"),
])
def test_chain_kernel_output_checked(kernel, exc, match):
    with pytest.raises(exc, match=match):
        chain_decoder(kernel, PAIR, gamma=2).sample(PROMPTS, 3, _rng())


def test_chain_kernel_exception_is_chained():
    with pytest.raises(TypeError) as info:
        chain_decoder(k_raises, PAIR).sample(PROMPTS, 2, _rng())
    assert isinstance(info.value.__cause__, RuntimeError)


# -- 1./2. sample arguments, both decoders ---------------------------------------------------------
DECODERS = [lambda: chain_decoder(token_chain_kernel, PAIR), lambda: TreeDecoder(PAIR, (2, 1))]


@pytest.mark.parametrize("make", DECODERS, ids=["chain", "tree"])
@pytest.mark.parametrize("rng", [0, None, "seed", np.random.RandomState(0)])
def test_sample_rng_must_be_generator(make, rng):
    with pytest.raises(TypeError, match="rng must be a numpy Generator"):
        make().sample(PROMPTS, 2, rng)


def test_chain_per_row_rng_list_length_checked():
    with pytest.raises(TypeError, match="list of B = 3"):
        chain_decoder(token_chain_kernel, PAIR).sample(PROMPTS, 2, [_rng(), _rng()])
    out = chain_decoder(token_chain_kernel, PAIR).sample(PROMPTS, 2, [_rng(), _rng(), _rng()])
    assert out.shape == (3, 2)


def test_tree_rejects_rng_list():
    with pytest.raises(TypeError, match="rng must be a numpy Generator"):
        TreeDecoder(PAIR).sample(PROMPTS[:1], 2, [_rng()])


@pytest.mark.parametrize("make", DECODERS, ids=["chain", "tree"])
@pytest.mark.parametrize("prompts, new_tokens, exc, match", [
    (np.array([0, 1]), 2, ValueError, "prompts must be a 2-D"),
    (np.zeros((1, 1, 1), dtype=int), 2, ValueError, "prompts must be a 2-D"),
    (np.array([[1.0]]), 2, TypeError, "prompts must hold integer token ids"),
    (np.array([[True]]), 2, TypeError, "prompts must hold integer token ids"),
    (np.array([[0], [7]]), 2, ValueError, r"prompts\[1, 0\] = 7 lies outside the vocabulary \[0, 4\)"),
    (np.array([[-1]]), 2, ValueError, r"prompts\[0, 0\] = -1"),
    (PROMPTS, 0, ValueError, "new_tokens must be an integer >= 1"),
    (PROMPTS, 2.0, ValueError, "new_tokens must be an integer >= 1"),
])
def test_sample_prompts_and_new_tokens_checked(make, prompts, new_tokens, exc, match):
    with pytest.raises(exc, match=match):
        make().sample(prompts, new_tokens, _rng())


# -- 2. TreeDecoder constructor --------------------------------------------------------------------
@pytest.mark.parametrize("verifier", [123, None, object(), "rrs".encode()])
def test_tree_verifier_type_checked(verifier):
    with pytest.raises(TypeError, match="verifier must be a registry name"):
        TreeDecoder(PAIR, (2, 1), verifier)


@pytest.mark.parametrize("branching", [(2.5,), ("2",), (2, "1"), (65,), (2 ** 40,), "65"])
def test_tree_branching_entries_checked(branching):
    with pytest.raises(ValueError, match=r"integers in \[1, 64\]"):
        TreeDecoder(PAIR, branching)


def test_tree_branching_valid_forms_still_work():
    assert TreeDecoder(PAIR, "2,1").branching == (2, 1)
    assert TreeDecoder(PAIR, np.array([64])).branching == (64,)


# -- 3. certify_coupled_tree reference -------------------------------------------------------------
def _tree_laws():
    rng = np.random.default_rng(1)
    return rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6), 2), \
        rng.dirichlet(np.ones(6), 2)


@pytest.mark.parametrize("reference", [object(), 5, None])
def test_coupled_tree_reference_type(reference):
    kernel = ReferenceTreeKernel(get_verifier("rrs"), "resispec")
    with pytest.raises(TypeError, match="reference must be a registry name"):
        certify_coupled_tree(kernel, reference, *_tree_laws(), 2, n=50)


@pytest.mark.parametrize("reference", ["rrs_wor", get_verifier("rrs_wor")])
def test_coupled_tree_refuses_without_replacement_reference(reference):
    kernel = ReferenceTreeKernel(get_verifier("rrs_wor"), "resispec")
    with pytest.raises(ValueError, match="trees here draw i.i.d. candidates"):
        certify_coupled_tree(kernel, reference, *_tree_laws(), 2, n=50)


# -- 4. CLI certify-coupled ------------------------------------------------------------------------
def _cli(*args):
    return main(["certify-coupled", "--verifier", "rrs", "--n", "2000", *args])


def test_cli_counterexample_path_checked_before_running(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert _cli("--out", str(tmp_path)) == 2
    assert "--out" in capsys.readouterr().err
    assert _cli("--out", str(tmp_path / "afile" / "ce.py")) == 2
    err = capsys.readouterr()
    assert "--out" in err.err and "NO BIAS DETECTED" not in err.out     # refused before any draw


def test_cli_seed_sequence_and_bad_seed(capsys):
    assert _cli("--seed", "0,3", "--V", "8") == 0
    assert "NO BIAS DETECTED" in capsys.readouterr().out
    for bad in ("a", "-1", "0,-3", "1.5"):
        assert _cli("--seed", bad) == 2
        assert "--seed" in capsys.readouterr().err


def test_cli_pq_conflicts_with_V(tmp_path, capsys):
    path = tmp_path / "node.npz"
    np.savez(path, p=np.full(4, 0.25), q=np.array([0.4, 0.3, 0.2, 0.1]))
    assert _cli("--pq", str(path), "--V", "8") == 2
    assert "--V conflicts with --pq" in capsys.readouterr().err
    assert _cli("--pq", str(path)) == 0


# -- 5. ngram draft option check ---------------------------------------------------------------------
@pytest.mark.parametrize("spec, match", [
    ("ngram:order=64", "order must be at most 63"),
    ("ngram:order=1000", "order must be at most 63"),
    ("ngram:corpus=", "corpus= is empty"),
    ("ngram:order=3,corpus=  ", "corpus= is empty"),
])
def test_ngram_option_check(spec, match):
    with pytest.raises(ValueError, match=match):
        check_draft_spec(spec)


def test_ngram_valid_orders_still_pass():
    assert check_draft_spec("ngram:order=5") == "ngram"
    assert check_draft_spec("ngram:order=63") == "ngram"


@pytest.mark.parametrize("spec", ["ngram:,,", "ngram:order=2,order=3", "ngram:order=2,", "ngram: =3"])
def test_draft_spec_duplicates_and_empty_items(spec):
    from resispec.decoding.drafts import parse_draft_spec

    with pytest.raises(ValueError, match="twice|key=value"):
        parse_draft_spec(spec)
