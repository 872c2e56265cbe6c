"""Path-level rules in ``resispec bench``: the paired Rao-Blackwellised estimator of
:mod:`resispec.bench.path_rules` (exact per tree, unbiased over trees) and its report."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from resispec import get_verifier
from resispec.bench.path_rules import path_efficiency, rule_expected, sample_tree, walk_expected
from resispec.bench.trees import run_bench, to_markdown
from resispec.decoding.expected import expected_accepted
from resispec.decoding.tree import ROOT, DraftTree
from resispec.pathlevel.registry import get_path_verifier
from resispec.trees import TreeShape


def _pairs(n=3, V=4, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(V) * 0.7, size=n)
    q = rng.dirichlet(np.ones(V) * 0.7, size=n)
    return p, q


def _as_draft_tree(par, tok):
    t = DraftTree()
    for a, x in zip(par, tok):
        t.add(int(a) if a >= 0 else ROOT, int(x))
    return t


@pytest.mark.parametrize("shape", ["1,1,1", "2,2", "3,1"])
@pytest.mark.parametrize("name", ["rrs", "resispec"])
def test_walk_matches_the_decoding_estimator(shape, name):
    """The bench's sampled trees map onto the engine's DraftTree rows as the decoder's estimator reads them
    (tree built here independently of ``walk_expected``'s own mapping)."""
    p, q = _pairs(V=6)
    rng = np.random.default_rng(1)
    rrs = get_verifier(name)
    for _ in range(20):
        P, Q, par, tok, _ = sample_tree(p, q, TreeShape.parse(shape), rng)
        tree = _as_draft_tree(par, tok)
        rows_p = {ROOT: P[0], **{i: P[i + 1] for i in range(tok.size)}}
        rows_q = {ROOT: Q[0], **{i: Q[i + 1] for i in range(tok.size)}}
        inner = {n for n, kids in tree.children.items() if kids}
        want = expected_accepted(tree, {n: rows_p[n] for n in inner}, {n: rows_q[n] for n in inner}, rrs)
        assert walk_expected(P, Q, par, tok, rrs) == pytest.approx(want, abs=1e-12)


def test_token_is_rrs_on_every_chain_and_block_dominates_on_average():
    p, q = _pairs()
    rng = np.random.default_rng(2)
    token = get_path_verifier("token")
    for _ in range(50):
        P, Q, par, tok, depth = sample_tree(p, q, TreeShape.parse("1,1,1,1"), rng)
        want = walk_expected(P, Q, par, tok, get_verifier("rrs"))
        assert rule_expected(token, P, Q, par, tok, depth) == pytest.approx(want, abs=1e-12)
    # block verification is optimal in expectation over the drafts, not draft by draft (exact enumeration)
    p, q = _pairs(n=2, V=3, seed=5)
    assert _exact_path_be(get_path_verifier("block"), p, q, "1,1") > _exact_path_be(token, p, q, "1,1") + 1e-3


def _exact_mean(value, p, q, shape):
    """E[value(P, Q, parent, tokens, depth)] by enumeration over every pair pick and drafted token (tiny sizes)."""
    n, V = p.shape
    P0, Q0, par, tok0, depth = sample_tree(p, q, TreeShape.parse(shape), np.random.default_rng(0))  # structure
    N = tok0.size
    total = 0.0
    for picks in itertools.product(range(n), repeat=N + 1):
        P, Q = p[list(picks)], q[list(picks)]
        for toks in itertools.product(range(V), repeat=N):
            tok = np.array(toks)
            w = np.prod(Q[par + 1, tok]) / n ** (N + 1)
            if w > 0:
                total += w * value(P, Q, par, tok, depth)
    return total


def _exact_path_be(rule, p, q, shape):
    """Exact block efficiency of a path rule."""
    return 1.0 + _exact_mean(lambda P, Q, par, tok, depth: rule_expected(rule, P, Q, par, tok, depth), p, q, shape)


@pytest.mark.parametrize("rule,shape", [("block", "1,1"), ("traversal", "2"), ("traversal", "2,1"),
                                        ("traversal_resispec", "2,1"), ("traversal_resispec", "3")])
def test_estimate_is_unbiased_against_exact_enumeration(rule, shape):
    p, q = _pairs(n=2, V=3, seed=3)
    exact = _exact_path_be(get_path_verifier(rule), p, q, shape)
    sh = TreeShape.parse(shape)
    # the closed-form block efficiencies of the controls (rrs, resispec walks), by the same enumeration
    walks = {n: 1.0 + _exact_walk(p, q, sh, get_verifier(n)) for n in ("rrs", "resispec")}
    est, se = path_efficiency(p, q, sh, walks, rules=(rule,), n_trees=3000, rng=np.random.default_rng(4))[rule]
    if shape == "3":                                     # one level: traversal_resispec IS the resispec walk
        assert est == pytest.approx(exact, abs=1e-9) and se < 1e-9
    else:
        assert se > 0
        assert abs(est - exact) < 4 * se + 1e-12, (est, exact, se)
    with pytest.raises(ValueError, match="rrs"):
        path_efficiency(p, q, sh, {"resispec": 1.0}, rules=(rule,), n_trees=2)


def _exact_walk(p, q, sh, verifier):
    """Exact expected accepted nodes of a node-level walk."""
    return _exact_mean(lambda P, Q, par, tok, depth: walk_expected(P, Q, par, tok, verifier), p, q, sh)


def test_bench_reports_path_rules_and_block_beats_the_per_node_bound():
    rows = run_bench(families=["zipf"], temperatures=[1.0], shapes=["1,1,1,1", "2,2", "wor:2,2"], V=200, n=8,
                     n_samples=8, progress=False, n_trees=256)
    chain = next(r for r in rows if r.shape == "1x4 chain")
    assert {"block", "token", "traversal"} <= set(chain.efficiency)
    assert chain.efficiency["token"] == pytest.approx(chain.efficiency["rrs"], abs=1e-9)
    assert chain.efficiency["block"] - chain.bound > 3 * chain.stderr["block"]   # above the chained alpha* bound
    tree = next(r for r in rows if r.shape == "2,2")
    assert "traversal" in tree.efficiency and "block" not in tree.efficiency
    assert not {"block", "traversal"} & set(next(r for r in rows if r.shape == "wor:2,2").efficiency)
    assert chain.best_baseline not in ("block", "token", "traversal")            # node-level baselines only
    md = to_markdown(rows, {"families": ["zipf"], "temperatures": [1.0], "V": 200, "n": 8, "n_samples": 8, "seed": 0})
    assert "## Path-level rules" in md and "### `block`" in md
    off = run_bench(families=["zipf"], temperatures=[1.0], shapes=["1,1"], V=50, n=4, n_samples=8, progress=False,
                    path_rules=())
    assert "block" not in off[0].efficiency


@pytest.mark.parametrize("kw,match", [({"path_rules": ("bogus",)}, "path_rules"), ({"n_trees": 1}, "n_trees"),
                                      ({"n_trees": True}, "n_trees")])
def test_bad_path_options(kw, match):
    with pytest.raises(ValueError, match=match):
        run_bench(families=["zipf"], temperatures=[1.0], shapes=["1,1"], V=50, n=4, n_samples=8, progress=False, **kw)


def test_cli_bad_path_rules(tmp_path, capsys):
    from resispec.cli import main

    assert main(["bench", "--families", "zipf", "--trees", "1,1", "--path-rules", "bogus", "--out", str(tmp_path)]) == 2
    assert "--path-rules" in capsys.readouterr().err
    assert main(["bench", "--families", "zipf", "--trees", "1,1", "--n", "1", "--out", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())                                          # nothing half-written


def test_path_rule_options_and_bad_inputs():
    kw = dict(families=["zipf"], temperatures=[1.0], shapes=["1,1"], V=50, n=4, n_samples=8, progress=False)
    one = run_bench(path_rules="block", n_trees=4, **kw)[0]                    # a bare name is one rule
    assert "block" in one.efficiency and "traversal" not in one.efficiency
    assert "block" not in run_bench(path_rules="none", n_trees=1, **kw)[0].efficiency   # no rules: n_trees unused
    p, q = _pairs()
    sh = TreeShape.parse("1,1")
    for bad, err, match in ((dict(exact={"rrs": float("nan")}), ValueError, "finite"),
                            (dict(rng=0), TypeError, "Generator"),
                            (dict(p=p[0]), ValueError, "same shape"),
                            (dict(q=q[:2]), ValueError, "same shape"),
                            (dict(shape="1,x"), ValueError, "tree shape"),
                            (dict(p=p * 2), ValueError, "sum")):
        args = dict(p=p, q=q, shape=sh, exact={"rrs": 2.0}, rules=("block",), n_trees=4)
        args.update(bad)
        with pytest.raises(err, match=match):
            path_efficiency(**args)


def test_bench_from_json_renders_like_the_run(tmp_path):
    """Re-rendering a stored bench JSON gives the same report (the ResiSpec variants' sections included)."""
    from resispec.cli import main

    argv = ["bench", "--families", "zipf", "--temperatures", "1", "--trees", "1,1", "2", "wor:2", "--V", "50",
            "--nodes", "4", "--n", "8", "--no-progress", "--out", str(tmp_path / "a")]
    assert main(argv) == 0
    first = (tmp_path / "a" / "bench.md").read_text()
    assert main(["bench", "--from-json", str(tmp_path / "a" / "bench.json"), "--out", str(tmp_path / "b")]) == 0
    again = (tmp_path / "b" / "bench.md").read_text()
    assert again.split("\n", 3)[3] == first.split("\n", 3)[3]                 # same body (the command line differs)
    assert "resispec_myopic` against the best baseline" in again and "## Path-level rules" in again
    assert main(["bench", "--from-json", str(tmp_path / "nope.json"), "--out", str(tmp_path / "c")]) == 2


def test_traversal_resispec_laws_are_laws():
    """Every plan row is a law (sums to 1), also where the kept mass is tiny."""
    p, q = _pairs(n=4, V=5, seed=7)
    rng = np.random.default_rng(8)
    rule = get_path_verifier("traversal_resispec")
    for _ in range(200):
        P, Q, par, tok, _ = sample_tree(p, q, TreeShape.parse("2,1"), rng)
        plan = rule.plan_tree(P, Q, par, tok)
        np.testing.assert_allclose(plan.laws.sum(axis=1), 1.0, atol=1e-12)
        assert abs(plan.stop.sum() - 1.0) < 1e-12


def test_walk_expected_refuses_malformed_trees():
    """Breaker finding: a parent of -2 wrapped around, mismatched lengths were cut by zip, float ids truncated."""
    p, q = _pairs(V=4)
    P, Q, par, tok, _ = sample_tree(p, q, TreeShape.parse("2,1"), np.random.default_rng(0))
    rrs = get_verifier("rrs")
    for bad_par, bad_tok, msg in ((np.array([-1, -2, 0, 1]), tok, "parent"),
                                  (par, tok[:-1], "one length"),
                                  (par.astype(float), tok, "integer"),
                                  (np.array([-1, 2, 0, 1]), tok, "parent")):
        with pytest.raises(ValueError, match=msg):
            walk_expected(P, Q, bad_par, bad_tok, rrs)
    with pytest.raises(ValueError, match="one row per node"):
        walk_expected(P[:-1], Q, par, tok, rrs)
