"""The exact (Rao-Blackwellised) expected accepted length and the paired block-efficiency estimator."""

import json
import math

import numpy as np
import pytest
import torch

from resispec.decoding.engine import _verify_walk, speculative_decode
from resispec.decoding.expected import expected_accepted, target_laws
from resispec.decoding.laws import SamplingConfig
from resispec.decoding.pair import ModelPair
from resispec.decoding.tree import ROOT, DraftTree
from resispec.sampling import draw_candidates
from resispec.verifiers.registry import get_verifier

from _decoding_tiny import tiny_model

torch.set_num_threads(1)
V = 8
T1 = SamplingConfig(1.0)


def _fixed_tree(branching, drafting, seed):
    """A drafted tree over V tokens, random draft laws at every node and target logits near them."""
    rng = np.random.default_rng(seed)
    t, q_rows, logits = DraftTree(), {}, {}
    frontier = [ROOT]
    for k in branching:
        new = []
        for n in frontier:
            q_rows[n] = rng.dirichlet(np.ones(V))
            logits[n] = np.log(q_rows[n]) + rng.normal(size=V) * 0.8  # p near q: every accept prob in play
            for tok in draw_candidates(q_rows[n], k, drafting, rng)[0]:
                new.append(t.add(n, int(tok)))
        frontier = new
    for n in frontier:
        logits[n] = rng.normal(size=V)
    return t, logits, q_rows


@pytest.mark.parametrize("drafting,names", [("iid", ["rrs", "kseq", "target_only", "resispec"]),
                                            ("without_replacement", ["rrs_wor", "target_only"])])
def test_expected_accepted_matches_monte_carlo_of_the_walk(drafting, names):
    t, logits, q_rows = _fixed_tree((3, 2, 1), drafting, seed=4)
    laws = target_laws(t, logits, T1)
    n = 600
    for name in names:
        v = get_verifier(name)
        exact = expected_accepted(t, logits, q_rows, v, T1)
        assert exact == pytest.approx(expected_accepted(t, laws, q_rows, v))  # logits or processed laws alike
        rng = np.random.default_rng(7)
        lens = np.array([len(_verify_walk(t, logits, q_rows, v, T1, rng, None)[1]) for _ in range(n)])
        se = lens.std(ddof=1) / math.sqrt(n)
        assert 0 < exact < 3 and se > 0
        assert abs(lens.mean() - exact) < 4 * se, (name, lens.mean(), exact, se)


def test_expected_accepted_by_hand():
    """target_only accepts x_1 w.p. p(x_1), else x_2 w.p. p(x_2) / (1 - p(x_1)): a node accepts w.p. p(x_1) + p(x_2)."""
    t = DraftTree()
    a, b = t.add(ROOT, 1), t.add(ROOT, 2)
    c = t.add(a, 3)
    p = {ROOT: np.array([0.1, 0.3, 0.2, 0.4]), a: np.array([0.25, 0.25, 0.0, 0.5])}
    q = {ROOT: np.array([0.1, 0.5, 0.2, 0.2]), a: np.full(4, 0.25)}
    # root: accept a w.p. 0.3 (then c w.p. 0.5), accept b w.p. 0.2 (a leaf)
    assert expected_accepted(t, p, q, get_verifier("target_only")) == pytest.approx(0.3 * 1.5 + 0.2 * 1.0)
    # rrs: accept x_1 = 1 w.p. min(1, 0.3 / 0.5) = 0.6; the residual norm(max(p - q, 0)) = e_3 gives x_2 = 2 no
    # chance; at a, x = 3 has p / q = 0.5 / 0.25 >= 1: always accepted.  E = 0.6 (1 + 1)
    assert expected_accepted(t, p, q, get_verifier("rrs")) == pytest.approx(1.2)
    with pytest.raises(ValueError, match="missing"):
        expected_accepted(t, {ROOT: p[ROOT]}, q, get_verifier("rrs"))
    with pytest.raises(TypeError, match="Verifier"):
        expected_accepted(t, p, q, "rrs")


def _pair(vocab=16):
    return tiny_model("qwen2", vocab=vocab, seed=1, scale=3.0), tiny_model("qwen2", vocab=vocab, seed=2, scale=3.0)


def _runs(target, draft, driver, also, n, tree="2,1", tokens=4):
    """Per call (1 + accepted) observed, per call (1 + expected) per name, and the run each call belongs to."""
    obs, rb, run = [], {}, []
    for s in range(n):
        res = speculative_decode(target, draft, [1 + s % 7, 2 + s % 5], driver, tree, sampling=T1,
                                 max_new_tokens=tokens, rng=np.random.default_rng([s, 99]), also=also)
        obs += [1 + a for a in res.accepted]
        run += [s] * len(res.accepted)
        for name, xs in res.expected.items():
            rb.setdefault(name, []).extend(1 + x for x in xs)
    return np.array(obs, float), {k: np.array(v) for k, v in rb.items()}, np.array(run)


def _cluster_se(x, run):
    """s.e. of the mean of x over calls, clustered by run (calls of one run are dependent)."""
    ids = np.unique(run)
    tot = np.array([x[run == r].sum() for r in ids])
    cnt = np.array([(run == r).sum() for r in ids])
    z = (tot - x.mean() * cnt) / cnt.mean()
    return z.std(ddof=1) / math.sqrt(len(ids))


def test_rb_estimate_is_unbiased_paired_and_tighter_on_a_tiny_model():
    target, draft = _pair()
    rrs, res_v, ko, to, wor = (get_verifier(n) for n in ("rrs", "resispec", "kseq", "target_only", "rrs_wor"))
    obs, rb, run = _runs(target, draft, rrs, [res_v, ko, to, wor], 100)
    assert set(rb) == {"rrs", "resispec", "kseq", "target_only"}  # rrs_wor is not exact on iid trees: skipped
    assert all(len(x) == len(obs) for x in rb.values())
    # (b) the driver's RB values average to its observed tokens per call (the same calls)
    d = obs - rb["rrs"]
    assert abs(d.mean()) < 4 * _cluster_se(d, run), (obs.mean(), rb["rrs"].mean())
    # ... and resispec's RB values on rrs-driven trees match resispec's OWN observed counts (independent runs)
    obs2, rb2, run2 = _runs(target, draft, res_v, [], 100)
    diff = rb["resispec"].mean() - obs2.mean()
    se = math.hypot(_cluster_se(rb["resispec"], run), _cluster_se(obs2, run2))
    assert abs(diff) < 4 * se, (rb["resispec"].mean(), obs2.mean(), se)
    assert abs(rb2["resispec"].mean() - obs2.mean()) < 4 * _cluster_se(obs2 - rb2["resispec"], run2)
    # (c) on the same run, the RB estimate has the smaller standard error
    assert _cluster_se(rb["rrs"], run) < _cluster_se(obs, run)
    assert rb["rrs"].std() < obs.std()


def test_also_leaves_the_decode_unchanged_and_rejects_bad_input():
    target, draft = _pair()
    rrs = get_verifier("rrs")
    kw = dict(sampling=T1, max_new_tokens=6, rng=None)
    plain = speculative_decode(target, draft, [1, 2], rrs, "2,1", **{**kw, "rng": np.random.default_rng(3)})
    scored = speculative_decode(target, draft, [1, 2], rrs, "2,1", **{**kw, "rng": np.random.default_rng(3)},
                                also=[get_verifier("kseq")])
    assert plain.tokens == scored.tokens and plain.expected == {}
    assert set(scored.expected) == {"rrs", "kseq"} and len(scored.expected["rrs"]) == scored.target_calls
    assert scored.expected_seconds > 0
    assert all(0 <= x <= 2 for x in scored.expected["kseq"])
    wor = speculative_decode(target, draft, [1, 2], get_verifier("rrs_wor"), "2,1",
                             **{**kw, "rng": np.random.default_rng(3)}, also=[rrs, get_verifier("target_only")])
    assert set(wor.expected) == {"rrs_wor", "target_only"}
    with pytest.raises(TypeError, match="also must"):
        speculative_decode(target, draft, [1, 2], rrs, "2,1", **{**kw, "rng": np.random.default_rng(3)}, also=rrs)
    with pytest.raises(TypeError, match="Verifier objects"):
        speculative_decode(target, draft, [1, 2], rrs, "2,1", **{**kw, "rng": np.random.default_rng(3)},
                           also=["kseq"])
    with pytest.raises(ValueError, match="share the name"):
        speculative_decode(target, draft, [1, 2], rrs, "2,1", **{**kw, "rng": np.random.default_rng(3)},
                           also=[get_verifier("rrs")])


class _Tok:
    eos_token_id = None

    def get_vocab(self):
        return {str(i): i for i in range(16)}


def test_bench_decode_reports_the_paired_rb_estimator(tmp_path):
    from resispec.bench.decode import format_table, run_bench, write_report

    target, draft = _pair()
    pair = ModelPair(target, draft, _Tok(), "t", "d")
    kw = dict(trees=["2,1"], verifiers=["rrs", "rrs_wor", "kseq", "resispec"], sampling=T1, max_new_tokens=6,
              seeds=[0, 1], progress=False, estimate=False)
    res = run_bench(pair, [[1, 2, 3], [4, 5], [6]], **kw)
    md, js = tmp_path / "d.md", tmp_path / "d.json"
    write_report(res, md, js)
    got = json.loads(js.read_text())
    rows = {r["method"]: r for r in got["rows"]}
    assert rows["autoregressive"]["block_efficiency_rb"] is None
    iid = [x for x in got["runs"] if x["method"] in ("rrs", "kseq", "resispec")]
    for m in ("rrs", "kseq", "resispec"):  # every iid-drafted run scores every iid verifier
        r = rows[m]
        assert r["rb_calls"] == sum(x["calls"] for x in iid)
        assert r["block_efficiency_rb"] == pytest.approx(sum(x["rb"][m] for x in iid) / r["rb_calls"])
        assert 1 <= r["block_efficiency_rb"] <= 3 and r["block_efficiency_rb_se"] > 0
        assert r["rb_se_gain"] > 1 and r["rb_vs_rrs_se"] is not None and r["rb_vs_best_baseline_se"] is not None
    assert rows["rrs_wor"]["rb_calls"] == sum(x["calls"] for x in got["runs"] if x["method"] == "rrs_wor")
    assert all("rrs_wor" not in x["rb"] for x in iid)
    assert rows["rrs"]["rb_vs_rrs"] == 0 and rows["resispec"]["rb_vs_rrs"] == pytest.approx(
        rows["resispec"]["block_efficiency_rb"] - rows["rrs"]["block_efficiency_rb"])
    # a paired difference is tighter than the two separate s.e. combined (same trees)
    assert rows["resispec"]["rb_vs_rrs_se"] < math.hypot(rows["resispec"]["block_efficiency_rb_se"],
                                                         rows["rrs"]["block_efficiency_rb_se"])
    # the observed difference to the best baseline (both drove runs here): its s.e. from the two verifiers' own
    # runs, paired by cluster only; the RB difference on the same trees is tighter
    r = rows["resispec"]
    best = rows[r["rb_best_baseline"]]
    assert r["obs_vs_best_baseline"] == pytest.approx(r["block_efficiency_calls"] - best["block_efficiency_calls"])
    assert r["rb_diff_se_gain"] == pytest.approx(r["obs_vs_best_baseline_se"] / r["rb_vs_best_baseline_se"])
    assert r["rb_diff_se_gain"] > 1
    assert best["obs_vs_best_baseline"] is None and best["rb_diff_se_gain"] is None   # not against itself
    for col in ("block eff. RB, pooled (± s.e.)", "RB - best baseline (± s.e.)", "RB - rrs (± s.e.)",
                "observed - best baseline (± s.e.)", "s.e. gain of RB: level / difference",
                "block eff. (± s.e.)", "same, CPU time (± s.e.)"):
        assert col in format_table(res) and col in md.read_text()
    off = run_bench(pair, [[1, 2, 3]], **{**kw, "seeds": [0], "paired": False})
    assert all(r["block_efficiency_rb"] is None for r in off.table()) and "rb" not in off.runs[1]


def test_bench_decode_scores_verifiers_it_does_not_run_and_wor_shapes(tmp_path):
    """``score=``: RB rows with no runs, a projected speed-up; ``wor:`` shapes run only the rules exact for them."""
    from resispec.bench.decode import format_table, run_bench, score_names

    target, draft = _pair()
    pair = ModelPair(target, draft, _Tok(), "t", "d")
    res = run_bench(pair, [[1, 2, 3], [4, 5]], trees=["2,1", "wor:2,1"], verifiers=["resispec", "rrs"],
                    score=["kseq", "target_only", "rrs", "rrs_wor"], sampling=T1, max_new_tokens=6, seeds=[0, 1],
                    progress=False, estimate=False)
    rows = {(r["method"], r["tree"]): r for r in res.table()}
    ran = {(x["method"], x["tree"]) for x in res.runs}
    # rrs has no without-replacement rule: it does not run on the wor: shape; resispec runs there as ResiSpec WOR
    assert ran == {("autoregressive", "-"), ("resispec", "2,1"), ("rrs", "2,1"), ("resispec", "wor:2,1")}
    assert ("rrs", "wor:2,1") not in rows and ("kseq", "wor:2,1") not in rows
    assert ("rrs_wor", "2,1") not in rows  # scored only, and no run on 2,1 drafts without replacement
    assert rows[("rrs_wor", "wor:2,1")]["block_efficiency_rb"] >= 1
    wor = [x for x in res.runs if x["tree"] == "wor:2,1"]
    assert {m for x in wor for m in x["rb"]} == {"resispec", "target_only", "rrs_wor"}
    for m in ("kseq", "target_only"):  # scored only: RB value, no runs, a projection from a driver
        r = rows[(m, "2,1")]
        assert r["tokens"] == 0 and r["block_efficiency"] is None and r["speedup_paired"] is None
        assert r["block_efficiency_rb"] >= 1
        d = rows[(r["projected_from"], "2,1")]
        assert r["speedup_projected"] == pytest.approx(
            d["speedup_paired"] * r["block_efficiency_rb"] / d["block_efficiency_rb"])
    own = rows[("resispec", "2,1")]  # a method that ran is projected from itself: its measured speed-up
    assert own["projected_from"] == "resispec" and own["speedup_projected"] == pytest.approx(own["speedup_paired"])
    assert rows[("target_only", "wor:2,1")]["projected_from"] == "resispec"
    assert "projected speed-up, wall / CPU" in format_table(res) and "wor:2,1" in format_table(res)
    assert "rejection_proxy" not in score_names(["all"]) and "resispec_lookahead" in score_names(["all"])
    # the best baseline is a published rule, never one of ResiSpec's own (its look-ahead scored beside it)
    res2 = run_bench(pair, [[1, 2, 3], [4, 5]], trees=["2,1"], verifiers=["resispec", "rrs"],
                     score=["resispec_lookahead", "kseq"], sampling=T1, max_new_tokens=6, seeds=[0, 1],
                     progress=False, estimate=False)
    rows2 = {r["method"]: r for r in res2.table()}
    assert {r["rb_best_baseline"] for r in rows2.values() if r["rb_best_baseline"]} <= {"rrs", "kseq"}
    best = max(("rrs", "kseq"), key=lambda m: rows2[m]["block_efficiency_rb"])
    assert rows2["resispec_lookahead"]["rb_vs_best_baseline"] == pytest.approx(
        rows2["resispec_lookahead"]["block_efficiency_rb"] - rows2[best]["block_efficiency_rb"])
    assert rows2["resispec"]["block_eff_vs_best_baseline"] == pytest.approx(
        rows2["resispec"]["block_efficiency"] / rows2["rrs"]["block_efficiency"])   # rrs: the one baseline run
    with pytest.raises(ValueError, match="unknown verifier|not a registered|Unknown"):
        score_names(["nope"])
    with pytest.raises(ValueError, match="no verifier .* is exact for tree"):  # rrs has no wor rule: nothing to run
        run_bench(pair, [[1, 2]], trees=["wor:2,1"], verifiers=["rrs"], sampling=T1, max_new_tokens=2,
                  progress=False, estimate=False)


def test_tree_shape_reads_the_wor_prefix():
    from resispec.trees import TreeShape

    s = TreeShape.parse("wor:4,1")
    assert s.branching == (4, 1) and s.drafting == "without_replacement" and s.label == "wor:4,1"
    assert TreeShape.parse(s.label) == s and TreeShape.parse("4,1").label == "4,1"
    with pytest.raises(ValueError, match="malformed tree shape"):
        TreeShape.parse("wor:")


def _run(method, prompt, calls, obs, rb):
    return {"method": method, "tree": "2,1", "seed": 0, "prompt": prompt, "calls": calls, "obs": obs, "rb": rb}


def test_observed_difference_uses_only_the_prompts_both_verifiers_drove():
    """Breaker finding: resispec drove prompts 0-2, rrs only prompt 0; the observed difference must compare the
    two on prompt 0 alone (both make 3 tokens per call there), not the easy prompts only one of them ran."""
    from resispec.bench.decode import _rb_keys, _rb_tree

    runs = [_run("resispec", 0, 10, 30.0, {"resispec": 30.0, "rrs": 29.0}),
            _run("resispec", 1, 10, 10.0, {"resispec": 10.0, "rrs": 9.5}),
            _run("resispec", 2, 10, 20.0, {"resispec": 20.0, "rrs": 19.0}),
            _run("rrs", 0, 10, 30.0, {"resispec": 31.0, "rrs": 30.0})]
    keys = _rb_keys(_rb_tree(runs, "2,1"), "resispec")
    assert keys["rb_best_baseline"] == "rrs"
    assert keys["obs_vs_best_baseline"] == pytest.approx(0.0)
    assert keys["obs_vs_best_baseline_se"] is None and keys["rb_diff_se_gain"] is None   # one shared prompt
    # two shared prompts: the difference and its s.e. from those two only
    runs.append(_run("rrs", 1, 10, 12.0, {"resispec": 12.5, "rrs": 12.0}))
    keys = _rb_keys(_rb_tree(runs, "2,1"), "resispec")
    assert keys["obs_vs_best_baseline"] == pytest.approx((30 + 10) / 20 - (30 + 12) / 20)
    assert keys["obs_vs_best_baseline_se"] > 0 and keys["rb_diff_se_gain"] > 0


def test_no_se_gain_from_a_rounding_level_tie():
    """Two verifiers whose RB values agree to rounding (a chain, where rules tie): no 1e15 'gain'."""
    from resispec.bench.decode import _rb_keys, _rb_tree

    e = 1e-15
    runs = [_run(m, u, 10, 20.0 + u + (m == "kseq"), {"kseq": 20.0 + u + e * u, "rrs": 20.0 + u})
            for u in range(4) for m in ("kseq", "rrs")]
    keys = _rb_keys(_rb_tree(runs, "2,1"), "kseq" if _rb_keys(_rb_tree(runs, "2,1"), "rrs")["rb_best_baseline"]
                    == "rrs" else "rrs")
    assert keys["obs_vs_best_baseline_se"] is not None and keys["rb_diff_se_gain"] is None


def test_no_se_gain_when_two_drivers_followed_identical_paths():
    """New-user finding: kseq and rrs drove the same tokens on every prompt (observed s.e. 0): no '0.000' gain."""
    from resispec.bench.decode import _rb_keys, _rb_tree

    runs = [_run(m, u, 10, 20.0 + u, {"kseq": 20.0 + u - 0.1 * u * u, "rrs": 20.0 + u}) for u in range(4)
            for m in ("kseq", "rrs")]
    keys = _rb_keys(_rb_tree(runs, "2,1"), "kseq")
    assert keys["rb_best_baseline"] == "rrs" and keys["obs_vs_best_baseline_se"] == 0
    assert keys["rb_vs_best_baseline_se"] > 0 and keys["rb_diff_se_gain"] is None


def test_draft_cost_per_level_and_measured_speedup_in_the_summary():
    """The draft's measured cost per drafted level over a 1-token target pass (issue 19's "draft cost per level
    as a fraction of a target pass, measured in the same run"), and the (ran) row's measured speed-up with its
    s.e. in the --from-json summary."""
    from resispec.bench.decode import BenchResult, BenchRow
    from resispec.bench.decode_summary import summary_rows

    def run(method, tree, unit, seconds, target_seconds, draft_seconds, calls, levels):
        return {"unit": unit, "method": method, "tree": tree, "seed": 0, "prompt": unit, "repeat": 0, "tokens": 8,
                "target_calls": calls, "draft_levels": levels, "draft_calls": levels, "seconds": seconds,
                "cpu_seconds": seconds, "target_seconds": target_seconds, "draft_seconds": draft_seconds,
                "calls": calls, "obs": 8.0, "rb": {"resispec": 8.0, "rrs": 7.5}}

    runs = []
    for u, slow in enumerate((1.0, 1.5)):
        runs.append(run("autoregressive", "-", u, 8 * slow, 8 * slow, 0.0, 8, 0))     # 1 s per 1-token pass
        runs[-1].pop("rb")
        runs.append(run("resispec", "1,1", u, 4 * slow, 4 * slow, 0.08 * slow, 4, 8))
    rows = [BenchRow("autoregressive", "-"), BenchRow("resispec", "1,1")]
    for r in rows:
        for x in runs:
            if x["method"] == r.method:
                r.tokens += x["tokens"]; r.target_calls += x["target_calls"]; r.seconds += x["seconds"]
                r.cpu_seconds += x["cpu_seconds"]; r.runs += 1
    res = BenchResult(rows, {"temperature": 1.0}, runs=runs, complete=True)
    spec = next(r for r in res.table() if r["method"] == "resispec")
    # draft 0.2 s over 16 levels / (20 s over 16 one-token target calls)
    assert spec["draft_cost_per_level"] == pytest.approx((0.08 + 0.12) / 16 / ((8 + 12) / 16))
    assert spec["speedup_paired"] == pytest.approx(2.0) and spec["speedup_paired_se"] == pytest.approx(0.0)
    ran = next(c for c in summary_rows(res) if c[1].startswith("resispec (ran)"))
    assert ran[5] == "2.000 ± 0.000 (2.000 ± 0.000) measured"
