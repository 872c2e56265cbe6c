"""Contract, assert_exact, the pytest fixture, strategies and the certify command."""

import json

import numpy as np
import pytest
from hypothesis import given, settings

import exactness
import resispec
from exactness.mutants import CATALOGUE
from exactness.pytest_plugin import exactness as exactness_fixture  # noqa: F401  (fixture)
from exactness.strategies import cells, distribution_pairs
from resispec.cli import main

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.2, 0.6])


def test_certificate_fields():
    c = exactness.certify_sampler(lambda rng, m: rng.choice(3, size=m, p=P), P, 20_000, alpha=1e-3, seed=0)
    for f in ("passed", "statistic", "pvalue", "tv_estimate", "tv_upper", "detectable_tv", "n"):
        assert hasattr(c, f)
    assert c.passed and c.n == 20_000 and isinstance(c.passed, bool)


def test_certify_verifier_contract_and_determinism():
    v = resispec.get_verifier("resispec")
    a = exactness.certify_verifier(v, P, Q, 2, n=20_000, seed=1)
    b = exactness.certify_verifier(v, P, Q, 2, n=20_000, seed=1)
    assert a.passed and a.statistic == b.statistic and a.pvalue == b.pvalue
    for check in ("marginal", "exact_law", "joint", "accepted_count", "determinism", "batched",
                  "tree_bonus", "tree_two_level"):
        assert check in a.checks


def test_duck_typed_verifier():
    class Mine:
        drafting = "iid"

        def verify(self, p, q, candidates, rng):
            return resispec.get_verifier("rrs").verify(p, q, candidates, rng)

    c = exactness.certify_verifier(Mine(), P, Q, 2, n=20_000, seed=0)
    assert c.passed and "marginal" in c.checks


def test_assert_exact_passes_and_fails_with_cells():
    exactness.assert_exact(resispec.get_verifier("rrs"), P, Q, k=(1, 2), n=20_000)
    with pytest.raises(AssertionError, match=r"k = 1.*p_holm"):
        exactness.assert_exact(CATALOGUE["always_accept"], P, Q, k=(1,), n=20_000)
    with pytest.raises(AssertionError, match="sampler is not exact"):
        exactness.assert_exact(lambda rng, m: rng.choice(3, size=m, p=Q), P, n=20_000)


def test_pytest_fixture(exactness_fixture):
    exactness_fixture.assert_exact(resispec.get_verifier("sps"), P, Q, k=1, n=20_000)
    with pytest.raises(AssertionError):
        exactness_fixture.assert_exact(CATALOGUE["residual_is_p"], P, Q, k=1, n=20_000)


@settings(deadline=None, max_examples=50)
@given(distribution_pairs(max_V=7))
def test_strategy_pairs_are_laws(pq):
    p, q = pq
    for x in (p, q):
        assert x.ndim == 1 and np.all(x >= 0) and abs(x.sum() - 1) < 1e-12
    assert p.shape == q.shape


@settings(deadline=None, max_examples=30)
@given(cells(max_V=5, max_k=3, drafting="without_replacement"))
def test_strategy_cells_respect_support(cell):
    p, q, k = cell
    assert 1 <= k <= max(1, np.count_nonzero(q > 0))


def test_certify_command_pass_and_fail(tmp_path, capsys):
    out = tmp_path / "c.md"
    rc = main(["certify", "--verifier", "rrs", "--k", "1", "--k", "2", "--family", "softmax_noise",
               "--samples", "20000", "--no-mutants", "--no-progress", "--out", str(out)])
    assert rc == 0
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["passed"] and len(data["cells"]) == 2
    assert (tmp_path / "c_qq.png").stat().st_size > 0 and (tmp_path / "c_detectable_tv.png").exists()
    assert "QQ" in out.read_text()
    rc = main(["certify", "--verifier", "exactness.mutants:CATALOGUE.always_accept", "--k", "1",
               "--family", "zipf", "--samples", "20000", "--no-mutants", "--no-progress", "--out", str(out)])
    assert rc == 1
    assert "FAIL" in capsys.readouterr().out


def test_certify_command_bad_args(tmp_path, capsys):
    assert main(["certify", "--verifier", "nope", "--out", str(tmp_path / "x.md")]) == 2
    assert main(["certify", "--verifier", "no_such_module:thing", "--out", str(tmp_path / "x.md")]) == 2
    assert main(["certify", "--alpha", "2", "--out", str(tmp_path / "x.md")]) == 2
    assert not (tmp_path / "x.md").exists()
