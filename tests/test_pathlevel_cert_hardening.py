"""exactness.pathlevel (certify_path, certify_tree_rule, PathCertificate): no wrong pass, a stated
detectable TV, and clear errors for bad input (breaker findings)."""

import numpy as np
import pytest

from exactness.pathlevel import PathCertificate, certify_path, certify_tree_rule
from resispec.pathlevel import get_path_verifier
from resispec.pathlevel.base import PathResult
from simulators.autoregressive import MarkovPair

PAIR = MarkovPair.random(np.random.default_rng(1), 3, noise=2.0, scale=2.0)


class AlwaysZero:
    """Grossly biased chain rule: keeps no draft, always emits token 0."""

    def verify(self, p, q, d, rng=None):
        return PathResult(0, 0)


class AlwaysZeroTree:
    def verify_tree(self, p, q, parent, tokens, rng):
        return [], 0


class Ret:
    def __init__(self, accepted, token):
        self.accepted, self.token = accepted, token

    def verify(self, p, q, d, rng=None):
        return PathResult(self.accepted, self.token)


class TreeRet:
    def __init__(self, kept, token):
        self.kept, self.token = kept, token

    def verify_tree(self, p, q, parent, tokens, rng):
        return self.kept, self.token


# ------------------------------------------------------------ 1. alpha is validated
@pytest.mark.parametrize("alpha", [0.0, -1.0, 1.0, 2.0, float("nan")])
def test_alpha_outside_unit_interval_is_refused(alpha):
    """alpha = 0 or -1 used to pass a rule that always emits token 0 (p = 0.0 >= alpha)."""
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\)"):
        certify_path(AlwaysZero(), PAIR, 2, n=200, alpha=alpha)
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\)"):
        certify_tree_rule(AlwaysZeroTree(), PAIR, (2, 1), n=200, alpha=alpha)


def test_alpha_of_wrong_type_is_refused():
    with pytest.raises(TypeError, match="alpha must be a float"):
        certify_path(AlwaysZero(), PAIR, 2, n=200, alpha="0.01")


def test_biased_rule_fails_at_valid_alpha():
    assert not certify_path(AlwaysZero(), PAIR, 2, n=200).passed
    assert not certify_tree_rule(AlwaysZeroTree(), PAIR, (2, 1), n=200).passed


# ------------------------------------------------------------ 2. no degree of freedom is an error
@pytest.mark.parametrize("n", [1, 3, 10])
def test_no_degree_of_freedom_is_an_error_not_a_pass(n):
    """n = 3 pooled every outcome into one cell and passed with p = 1.0."""
    with pytest.raises(ValueError, match=r"n is too small.*no degrees of freedom.*use n >= \d+"):
        certify_path(AlwaysZero(), PAIR, 2, n=n)
    with pytest.raises(ValueError, match=r"n is too small.*no degrees of freedom.*use n >= \d+"):
        certify_tree_rule(AlwaysZeroTree(), PAIR, (2, 1), n=n)


def test_huge_tree_with_tiny_n_is_refused_before_sampling():
    """certify_tree_rule(traversal, pair, (100000,), n=2) passed; it is refused up front (no 1e5-node draws): a tree
    past MAX_TREE_NODES for its size, a tree within it for the tiny n."""
    with pytest.raises(ValueError, match="MAX_TREE_NODES"):
        certify_tree_rule(get_path_verifier("traversal"), PAIR, (100000,), n=2)
    with pytest.raises(ValueError, match="n is too small"):
        certify_tree_rule(get_path_verifier("traversal"), PAIR, (4000,), n=2)


# ------------------------------------------------------------ 3. the certificate states what it detects
def test_certificate_states_detectable_tv():
    from exactness.power import detectable_tv

    c = certify_path(get_path_verifier("block"), PAIR, 2, n=600, seed=3)
    assert isinstance(c, PathCertificate)
    assert c.passed and not hasattr(c, "p_value") and c.n == 600 and c.counts.sum() == 600
    assert c.df >= 1 and np.isfinite(c.statistic) and c.alpha == 1e-3 and c.power == 0.99
    assert c.sampled == len([k for k in c.checks if k in ("horizon", "acceptance_bound", "plan_sampler")]) == 3
    # stated at Holm's first level (at alpha it was power 0.98 under Holm: 4th breaker round)
    assert c.detectable_tv == pytest.approx(detectable_tv(600, c.df, alpha=1e-3 / c.sampled, power=0.99))
    assert 0 <= c.tv_estimate <= c.tv_upper <= 1
    s = c.summary()
    assert s.startswith("NO BIAS DETECTED (detectable TV") and "power 0.99" in s and len(s) <= 120, s
    assert f"df {c.df}" in c.report() and c.summary() == s and str(c) == c.report()

    t = certify_tree_rule(AlwaysZeroTree(), PAIR, (2, 1), n=300, alpha=0.01)
    assert not t.passed and t.alpha == 0.01 and t.df >= 1 and 0 < t.detectable_tv < 1
    assert t.summary().startswith("FAIL")


# ------------------------------------------------------------ 4. a rule that misbehaves is a FAIL naming it
def _fails_with(cert, match):
    """A misbehaving rule: FAIL (never a pass, never "bad input"), the cause naming what it returned."""
    import re

    assert not cert.passed and cert.outcome == "FAIL" and cert.pvalue == 0.0
    assert cert.cause is not None and re.search(match, cert.cause), cert.cause
    assert cert.summary().startswith("FAIL: subject: ") and cert.checks == {"subject": 0.0}


@pytest.mark.parametrize("token", [99, -1, 1.7, 3])
def test_token_out_of_range(token):
    """Used to be a bare KeyError from the prefix-law dict, then a ValueError (exit 2); now a FAIL."""
    _fails_with(certify_path(Ret(0, token), PAIR, 2, n=200),
                r"Ret.verify\(\.\.\.\)\.token .*must be an integer in \[0, 2\]")
    _fails_with(certify_tree_rule(TreeRet([], token), PAIR, (2, 1), n=200),
                r"verify_tree token .*must be an integer in \[0, 2\]")


@pytest.mark.parametrize("accepted", [-1, 3, 5, 1.0])
def test_accepted_outside_zero_to_L(accepted):
    """accepted = -1 or > L used to be silently sliced."""
    _fails_with(certify_path(Ret(accepted, 0), PAIR, 2, n=200),
                r"accepted \(drafts kept, L = 2\) must be an integer in \[0, 2\]")


@pytest.mark.parametrize("kept, match", [
    ([5], r"kept node ids .*must be an integer in \[0, 3\], got 5"),        # IndexError before
    ([-1], r"kept node ids .*got -1"),                                       # wrapped to the last node before
    ([0, 1, 2], r"kept 3 nodes .*at most 2"),                                # numpy multi_index error before
    ([2], r"not a root path"),                                               # a depth-2 node without its parent
    ([0, 3], r"not a root path"),                                            # node 3 is a child of node 1
    (None, r"must return \(kept node ids, token\)"),
])
def test_kept_nodes_must_be_a_root_path(kept, match):
    rule = TreeRet(kept, 0) if kept is not None else type("Bad", (), {"verify_tree": lambda *a: 7})()
    _fails_with(certify_tree_rule(rule, PAIR, (2, 1), n=200), match)


class Raises:
    """Raises on its 50th call (a rule that crashes mid-run)."""

    def __init__(self):
        self.calls = 0

    def verify(self, p, q, d, rng=None):
        self.calls += 1
        if self.calls == 50:
            raise ZeroDivisionError("boom")
        return get_path_verifier("block").verify(p, q, d, rng)

    def verify_tree(self, p, q, parent, tokens, rng):
        self.calls += 1
        if self.calls == 50:
            raise SystemExit(2)
        return get_path_verifier("traversal").verify_tree(p, q, parent, tokens, rng)


def test_a_rule_that_raises_is_a_fail_naming_it():
    """Used to propagate the rule's own exception (a traceback, exit 2 in the CLI)."""
    c = certify_path(Raises(), PAIR, 2, n=200)
    _fails_with(c, r"Raises.verify raised ZeroDivisionError: boom")
    assert c.n == 49
    t = certify_tree_rule(Raises(), PAIR, (2, 1), n=200)
    _fails_with(t, r"Raises.verify_tree called sys.exit\(2\)")


def test_a_result_without_fields_is_a_fail():
    bad = type("Bad", (), {"verify": lambda self, p, q, d, rng=None: (0, 1)})()
    _fails_with(certify_path(bad, PAIR, 2, n=200), r"must return a PathResult\(accepted, token\), got tuple")


def test_valid_root_path_is_accepted():
    c = certify_tree_rule(TreeRet([1, 3], 0), PAIR, (2, 1), n=100)   # node 3 is node 1's child in (2, 1)
    assert not c.passed


def test_branching_string_is_accepted():
    """"2,1" gave "invalid literal for int()"; tree strings are accepted as in resispec.trees.TreeShape.parse."""
    ver = get_path_verifier("traversal")
    a = certify_tree_rule(ver, PAIR, "2,1", n=150, seed=4)
    b = certify_tree_rule(ver, PAIR, (2, 1), n=150, seed=4)
    assert np.array_equal(a.counts, b.counts) and a.pvalue == b.pvalue


@pytest.mark.parametrize("branching, exc, match", [
    ((0, 1), ValueError, r"branching \(0, 1\) is not a tree shape.*depth 0 is 0"),
    ((-1,), ValueError, r"branching \(-1,\) is not a tree shape"),
    ((), ValueError, r"branching \(\) is not a tree shape"),
    ("2,,1", ValueError, r"branching '2,,1' is not a tree shape"),
    ("wor:2,1", ValueError, r"branching 'wor:2,1' drafts without replacement"),
    (2, TypeError, r"branching must be a tree shape such as '2,1'"),
    ((2.5, 1), TypeError, r"branching \(2.5, 1\) is not a tree shape"),
])
def test_bad_branching_names_branching(branching, exc, match):
    with pytest.raises(exc, match=match):
        certify_tree_rule(get_path_verifier("traversal"), PAIR, branching, n=200)


def test_rule_without_verify_tree_or_verify():
    with pytest.raises(TypeError, match=r"verifier must have a verify_tree\(\.\.\.\) method"):
        certify_tree_rule(get_path_verifier("block"), PAIR, (2, 1), n=200)
    with pytest.raises(TypeError, match=r"verifier must have a verify\(\.\.\.\) method"):
        certify_path(AlwaysZeroTree(), PAIR, 2, n=200)


@pytest.mark.parametrize("seed, exc, match", [(-1, ValueError, "seed must be >= 0"),
                                              (1.5, TypeError, "seed must be an int >= 0")])
def test_bad_seed(seed, exc, match):
    with pytest.raises(exc, match=match):
        certify_path(get_path_verifier("block"), PAIR, 2, n=200, seed=seed)
    with pytest.raises(exc, match=match):
        certify_tree_rule(get_path_verifier("traversal"), PAIR, (2, 1), n=200, seed=seed)


def test_bad_n_and_min_expected():
    with pytest.raises(ValueError, match="n must be >= 1"):
        certify_path(get_path_verifier("block"), PAIR, 2, n=-5)
    with pytest.raises(TypeError, match="n must be an integer"):
        certify_tree_rule(get_path_verifier("traversal"), PAIR, (2, 1), n=200.0)
    with pytest.raises(ValueError, match="min_expected must be a finite number > 0"):
        certify_path(get_path_verifier("block"), PAIR, 2, n=200, min_expected=0)
