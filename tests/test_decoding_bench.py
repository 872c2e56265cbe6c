"""bench-decode and capture plumbing on tiny models; the captured family reads the file."""

import json
import os

import numpy as np
import pytest
import torch

from resispec.bench.decode import format_table, run_bench, write_report
from resispec.decoding.laws import SamplingConfig
from resispec.decoding.pair import ModelPair
from simulators.captured import load_capture, save_capture, sparsify
from simulators.families import get_family

from _decoding_tiny import tiny_model

torch.set_num_threads(1)


class _Tok:
    eos_token_id = None

    def get_vocab(self):
        return {str(i): i for i in range(64)}


def test_bench_runs_every_method_and_writes_reports_and_capture(tmp_path):
    pair = ModelPair(tiny_model("qwen2", seed=1, scale=3.0), tiny_model("qwen2", seed=2, scale=3.0), _Tok(), "t", "d")
    cap = []
    res = run_bench(pair, [[1, 2, 3], [4, 5]], trees=["2,1", "3"], sampling=SamplingConfig(1.0), max_new_tokens=6,
                    seeds=[0], progress=False, capture=cap)
    table = res.table()
    assert [(r["method"], r["tree"]) for r in table][:2] == [("autoregressive", "-"), ("rrs", "2,1")]
    assert len(table) == 1 + 5 * 2
    ar = table[0]
    assert ar["block_efficiency"] == 1.0 and ar["target_calls"] == 12 and ar["tokens"] == 12
    for r in table[1:]:
        assert r["tokens"] == 12 and r["target_calls"] <= 12 and r["block_efficiency"] >= 1.0
    md, js = tmp_path / "decode.md", tmp_path / "decode.json"
    write_report(res, md, js, command="resispec bench-decode")
    assert "resispec" in md.read_text() and json.loads(js.read_text())["rows"][0]["method"] == "autoregressive"
    assert "| method |" in format_table(res) and "memory-bound speed-up" in format_table(res)
    # memory-bound speed-up (arXiv 2402.14160): BE / (1 + c L), c = draft / target weights, L = draft forwards/call
    c = res.config["draft_weights"] / res.config["target_weights"]
    assert res.config["draft_weights"] == sum(t.numel() for t in pair.draft.parameters()) > 0
    assert ar["speedup_memory_bound"] == 1.0
    for r in table[1:]:
        runs = [x for x in res.runs if x["tree"] == r["tree"]]
        L = sum(x["draft_calls"] for x in runs) / sum(x["target_calls"] for x in runs)
        assert r["draft_forwards_per_call"] == pytest.approx(L) and L >= 1
        be = r["block_efficiency_rb"] if r["block_efficiency_rb"] is not None else r["block_efficiency"]
        assert r["speedup_memory_bound"] == pytest.approx(be / (1 + c * L))
    path = save_capture(tmp_path / "c.npz", *(np.concatenate([c[j] for c in cap]) for j in range(4)), {"x": 1})
    c = load_capture(str(path))
    assert len(c) == sum(len(x[0]) for x in cap) > 0
    np.testing.assert_allclose(c.p.sum(axis=1), 1.0, atol=1e-12)
    # V = 64 <= 2 * top_n: the union keeps every token, so nothing is lost
    np.testing.assert_allclose(c.covered_p, 1.0, atol=1e-5)
    p, q = get_family("captured").sample(np.random.default_rng(0), n=5, path=str(path), temperature=0.7)
    assert p.shape == q.shape == (5, c.vocab)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)


def test_sparsify_keeps_the_top_tokens_of_both_laws():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(50), size=3)
    q = rng.dirichlet(np.ones(50), size=3)
    idx, pv, qv = sparsify(p, q, 4)
    assert idx.shape == (3, 8)
    for b in range(3):
        kept = set(idx[b][idx[b] >= 0])
        assert set(np.argsort(-p[b])[:4]) <= kept and set(np.argsort(-q[b])[:4]) <= kept
        np.testing.assert_allclose(pv[b][idx[b] >= 0], p[b, idx[b][idx[b] >= 0]], rtol=1e-6)
    with pytest.raises(ValueError, match="top_n"):
        sparsify(p, q, 0)


def test_builtin_captured_family_is_a_real_capture():
    fam = get_family("captured")
    p, q = fam.sample(np.random.default_rng(1), n=20)
    assert p.shape == (20, fam.fixed_vocab)
    np.testing.assert_allclose(q.sum(axis=1), 1.0)
    cap = load_capture()
    assert cap.meta["target"] == "qwen2.5-coder-1.5b" and cap.meta["draft"] == "qwen2.5-coder-0.5b"
    assert len(cap) >= 50 and np.median(cap.covered_p) > 0.5


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_device_script_runs_without_a_bare_python(tmp_path, device):
    """From a clean environment (no venv active, no `python` on PATH) the device scripts use python3.

    On CPU the torch-backend check (device_verify, CUDA only) is skipped with a message, never "failed".
    """
    import os
    import shutil
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    if (repo / ".venv").exists():
        pytest.skip("this checkout has its own .venv, which the script prefers")
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("bash", "dirname", "timeout"):
        os.symlink(shutil.which(tool), fake / tool)
    log = tmp_path / "calls.log"
    (fake / "python3").write_text(f'#!/bin/sh\necho "$@" >> {log}\ncase "$1" in -c) echo {device};; esac\n')
    (fake / "python3").chmod(0o755)
    out = subprocess.run(["bash", str(repo / "benchmarks/device_decode.sh"), "--nodes", "1"], capture_output=True,
                         text=True, env={"PATH": str(fake)}, timeout=60)
    assert out.returncode == 0, out.stderr
    calls = log.read_text()
    assert f"benchmarks/device_decode.py --device {device}" in calls
    assert "failed" not in out.stdout
    if device == "cpu":
        assert "device_verify: skipped" in out.stdout and "device_verify.py" not in calls
    elif (repo / "benchmarks/device_verify.sh").exists():
        assert "benchmarks/device_verify.py" in calls


def _strict_load(path):
    def no_nan(x):
        raise AssertionError(f"bare {x} in JSON")
    return json.loads(path.read_text(), parse_constant=no_nan)


def test_a_killed_benchmark_leaves_a_readable_partial_strict_json(tmp_path, capsys):
    pair = ModelPair(tiny_model("qwen2", seed=1, scale=3.0), tiny_model("qwen2", seed=2, scale=3.0), _Tok(), "t", "d")
    md, js = tmp_path / "b.md", tmp_path / "b.json"
    seen = []

    def write_then_die(partial):
        write_report(partial, md, js)
        seen.append(len(partial.runs))
        if len(partial.runs) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_bench(pair, [[1, 2, 3], [4, 5]], trees=["2,1"], verifiers=["rrs", "resispec"], max_new_tokens=4,
                  progress=False, on_run=write_then_die)
    assert "estimate" in capsys.readouterr().err  # printed before the first run
    got = _strict_load(js)  # NaN ratios of the runs not yet done are null, not bare NaN
    assert got["complete"] is False and len(got["runs"]) == 3 == seen[-1]
    assert "PARTIAL" in md.read_text()
    res = run_bench(pair, [[1, 2, 3], [4, 5]], trees=["2,1"], verifiers=["rrs", "resispec"], max_new_tokens=4,
                    progress=False, repeats=2, estimate=False)
    write_report(res, md, js)
    got = _strict_load(js)
    assert got["complete"] is True and len(got["runs"]) == 3 * 2 * 2
    first = [r["method"] for r in got["runs"][:6]]
    assert first[:3] == ["autoregressive", "rrs", "resispec"] and first[3:] == ["rrs", "resispec", "autoregressive"]
    ar, rrs = got["rows"][0], got["rows"][1]
    assert ar["speedup_paired"] == pytest.approx(1.0) and ar["speedup_paired_se"] == pytest.approx(0.0, abs=1e-12)
    assert rrs["paired_units"] == 4 and rrs["speedup_paired_se"] is not None and rrs["tps_median"] > 0
    assert ar["speedup_paired_cpu"] == pytest.approx(1.0) and rrs["speedup_paired_cpu"] > 0
    assert all(r["cpu_seconds"] > 0 for r in got["runs"])  # CPU time measured per run, beside wall-clock
    assert "CPU time" in md.read_text()


def test_a_tree_too_large_for_the_context_fails_before_any_run(tmp_path):
    """Checked for every prompt and tree before target-only decoding starts: no run, no partial report."""
    pair = ModelPair(tiny_model("qwen2", seed=1, ctx=16), tiny_model("qwen2", seed=2, ctx=16), _Tok(), "t", "d")
    runs = []
    with pytest.raises(ValueError, match="tree 4,4 has 20 nodes"):
        run_bench(pair, [[1, 2, 3]], trees=["2", "4,4"], verifiers=["rrs"], max_new_tokens=2, progress=False,
                  estimate=False, on_run=lambda partial: runs.append(1))
    assert not runs


def test_bench_decode_out_must_not_be_its_own_json(tmp_path, capsys):
    from resispec.cli import main

    out = tmp_path / "o.json"
    assert main(["bench-decode", "--draft", "ngram", "--out", str(out), "--target", "/nonexistent"]) == 2
    assert "give a .md path" in capsys.readouterr().err and not out.exists()


def test_bench_decode_default_output_is_not_the_shipped_report():
    from resispec.cli import parse

    _, args = parse(["bench", "decode"])
    assert not str(args.out).startswith("reports")


def test_decode_histogram_counts_only_the_tokens_kept(monkeypatch, capsys):
    """A target call whose tokens run past --new-tokens is counted with the tokens it kept."""
    from resispec.cli import main
    from resispec.commands import decode as cmd

    m = tiny_model("qwen2", seed=1, scale=3.0)

    class Tok(_Tok):
        def decode(self, ids, skip_special_tokens=True):
            return " ".join(map(str, ids))

    pair = ModelPair(m, m, Tok(), "t", "t")  # draft == target: every candidate is accepted
    pair.encode = lambda text, chat=False: [1, 2, 3]
    monkeypatch.setattr(cmd, "check_models", lambda args: None)
    monkeypatch.setattr(cmd, "load_pair", lambda args: pair)
    assert main(["decode", "--prompt", "x", "--tree", "2,2", "--temperature", "0", "--new-tokens", "4"]) == 0
    err = capsys.readouterr().err
    assert "4 tokens / 2 target calls" in err
    assert "histogram (1..): [1, 0, 1]" in err  # 3 tokens, then 1 of 3 kept; was [0, 0, 2] (6 tokens for 4)


def test_from_json_renders_one_table_from_finished_runs(tmp_path, capsys):
    """``bench-decode --from-json``: the same rows as the runs' own tables, one section per run, strict JSON."""
    from resispec.bench.decode_summary import load_result
    from resispec.cli import main

    pair = ModelPair(tiny_model("qwen2", seed=1, scale=3.0), tiny_model("qwen2", seed=2, scale=3.0), _Tok(), "t", "d")
    paths = []
    for T in (0.7, 1.0):
        res = run_bench(pair, [[1, 2, 3], [4, 5]], trees=["1,1", "2"], verifiers=["resispec"], score=["rrs", "block"],
                        sampling=SamplingConfig(T), max_new_tokens=4, progress=False, estimate=False)
        write_report(res, tmp_path / f"T{T}.md", tmp_path / f"T{T}.json")
        paths.append(tmp_path / f"T{T}.json")
        back = load_result(paths[-1])
        assert [r["block_efficiency_rb"] for r in back.table()] == [r["block_efficiency_rb"] for r in res.table()]
        assert [r["speedup_memory_bound"] for r in back.table()] == [r["speedup_memory_bound"] for r in res.table()]
    out = tmp_path / "sum.md"
    assert main(["bench-decode", "--from-json", *map(str, paths), "--out", str(out)]) == 0
    md = out.read_text()
    assert md.count("## T = ") == 2 and "memory-bound speed-up" in md and "block" in md and "(ran)" in md
    got = _strict_load(out.with_suffix(".json"))
    assert [r["config"]["temperature"] for r in got["runs"]] == [0.7, 1.0]
    # bad input: a missing file, a file that is not a bench-decode JSON, the output naming an input
    bad = tmp_path / "bad.json"
    bad.write_text("{\"rows\": []}")
    run = json.loads(paths[0].read_text())

    def variant(name, **change):
        d = json.loads(json.dumps(run))
        cfg = change.pop("config", {})
        d["config"] = None if cfg is None else {**d["config"], **cfg}
        d.update(change)
        (tmp_path / name).write_text(json.dumps(d))
        return str(tmp_path / name)

    for args, msg in (([str(tmp_path / "nope.json")], "does not exist"),
                      ([str(bad)], "not a bench-decode run JSON"),
                      ([variant("neg.json", config={"target_weights": -10})], "target_weights"),
                      ([variant("cfg.json", config=None)], "not a bench-decode run JSON"),
                      ([variant("cpl.json", complete="false")], "complete"),
                      ([variant("empty.json", runs=[])], "no finished speculative run"),
                      ([str(out.with_suffix(".json"))], "is a summary"),
                      ([str(paths[0]), str(paths[0])], "twice"),
                      ([str(paths[0]), "--trees", "9,9"], "drop --trees")):
        assert main(["bench-decode", "--from-json", *args, "--out", str(tmp_path / "x.md")]) == 2
        assert msg in capsys.readouterr().err and not (tmp_path / "x.md").exists()
    # corrupt runs (breaker findings): NaN, a negative count, a huge integer, a duplicated run, an older file
    # with no per-run data, deep nesting, a hard link to an input, a FIFO
    spec = next(i for i, x in enumerate(run["runs"]) if "rb" in x)
    nan = paths[0].read_text().replace('"calls": ', '"calls": NaN, "x": ', 1)
    (tmp_path / "nan.json").write_text(nan)
    neg, huge = json.loads(json.dumps(run["runs"])), json.loads(json.dumps(run["runs"]))
    neg[spec]["calls"] = -5
    huge[spec]["calls"] = 10 ** 400
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    (tmp_path / "hard.json").hardlink_to(paths[0])
    os.mkfifo(tmp_path / "fifo.json")
    old = json.loads(json.dumps(run))
    del old["runs"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    for args, msg in (([str(tmp_path / "nan.json")], "non-finite"),
                      ([variant("negc.json", runs=neg)], "finite numbers >= 0"),
                      ([variant("huge.json", runs=huge)], "not a bench-decode run JSON"),
                      ([variant("dup.json", runs=run["runs"] + run["runs"][1:2])], "repeats"),
                      ([str(tmp_path / "old.json")], "older bench-decode"),
                      ([str(tmp_path / "deep.json")], "not a bench-decode run JSON"),
                      ([str(paths[0]), str(tmp_path / "hard.json")], "twice"),
                      ([str(tmp_path / "fifo.json")], "not a regular file")):
        assert main(["bench-decode", "--from-json", *args, "--out", str(tmp_path / "x.md")]) == 2, msg
        assert msg in capsys.readouterr().err and not (tmp_path / "x.md").exists()
    # --from-json given twice: both lists are rendered, none dropped
    assert main(["bench-decode", "--from-json", str(paths[0]), "--from-json", str(paths[1]),
                 "--out", str(tmp_path / "two.md")]) == 0
    assert (tmp_path / "two.md").read_text().count("## T = ") == 2
    assert main(["bench-decode", "--from-json", str(paths[0]), "--out", str(tmp_path / "T0.7.md")]) == 2
    assert "one of the --from-json inputs" in capsys.readouterr().err
    # the JSON beside --out holds another RUN: refused, the run kept
    before = paths[1].read_bytes()
    assert main(["bench-decode", "--from-json", str(paths[0]), "--out", str(tmp_path / "T1.0.md")]) == 2
    assert "holds a bench-decode RUN" in capsys.readouterr().err and paths[1].read_bytes() == before
    # an unknown draft size reads "unknown", never 0
    assert main(["bench-decode", "--from-json", variant("unk.json", config={"draft_weights": None}),
                 "--out", str(tmp_path / "u.md")]) == 0
    assert "c = unknown" in (tmp_path / "u.md").read_text()


def test_device_projection_reads_a_summary_and_a_run(tmp_path):
    """benchmarks/device_decode.py projects every row of reports/decode.json, summary (runs per T) or one run."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "device_decode.py"
    spec = importlib.util.spec_from_file_location("device_decode", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = [{"method": "autoregressive", "tree": "-", "block_efficiency": 1.0},
            {"method": "rrs", "tree": "2,1", "block_efficiency": 2.0, "block_efficiency_rb": 2.5},
            {"method": "block", "tree": "1,1", "block_efficiency": None, "block_efficiency_rb": 2.2}]
    tt, td = {1: 1.0, 4: 2.0}, {1: 0.5, 4: 0.75}
    one = mod.project({"config": {"temperature": 1.0}, "rows": rows}, tt, td, 1)
    assert [(p["method"], p["tree"]) for p in one] == [("rrs", "2,1"), ("block", "1,1")]
    # 2,1: 3 nodes -> the 4-node target step; draft levels of width 1 (root) and 2 (-> the 1-node entry)
    assert one[0]["projected_speedup"] == pytest.approx(2.5 * 1.0 / (2.0 + 0.5 + 0.5))
    summary = {"runs": [{"source": "a", "config": {"temperature": 0.7}, "rows": rows},
                        {"source": "b", "config": {"temperature": 1.0}, "rows": rows}]}
    both = mod.project(summary, tt, td, 1)
    assert [p["temperature"] for p in both] == [0.7, 0.7, 1.0, 1.0]
    # a weightless draft (the n-gram) costs no device forward: only the target's tree step counts
    ngram = mod.project({"config": {"temperature": 1.0, "draft": "ngram", "draft_weights": 0}, "rows": rows},
                        tt, td, 1)
    assert ngram[0]["projected_speedup"] == pytest.approx(2.5 * 1.0 / 2.0) and ngram[0]["draft"] == "ngram"
    assert ngram[0]["draft_cost"] == "none" and one[0]["draft_cost"] == "measured"
    # a weighted draft other than the measured model (the feature head) is costed by weights read per level:
    # 2,1 has two drafted levels, each 0.01 x t_target(1); never the measured 0.5B draft's step times
    head = mod.project({"config": {"temperature": 1.0, "draft": "head", "draft_weights": 10, "target_weights": 1000},
                        "rows": rows}, tt, td, 1, "qwen2.5-coder-0.5b")
    assert head[0]["projected_speedup"] == pytest.approx(2.5 * 1.0 / (2.0 + 2 * 0.01 * 1.0))
    assert head[0]["draft_cost"] == "by weights"
    for bad in ({"draft_weights": 10}, {"draft_weights": 10, "target_weights": 0}, {"target_weights": 1000},
                {"draft_weights": -10, "target_weights": 1000}, {"draft_weights": None, "target_weights": 1000}):
        p = mod.project({"config": {"temperature": 1.0, "draft": "head", **bad}, "rows": rows}, tt, td, 1,
                        "qwen2.5-coder-0.5b")[0]
        assert p["draft_cost"] == "unknown" and p["projected_speedup"] is None, bad


def test_resume_keeps_finished_units_and_reruns_the_rest(tmp_path):
    """--resume: a run killed mid-unit keeps its finished units (not run again), reruns the half-done unit whole,
    and ends with the same tokens and counts as an uninterrupted run; other settings are refused by name."""
    from resispec.bench.decode_summary import load_result

    pair = ModelPair(tiny_model("qwen2", seed=1, scale=3.0), tiny_model("qwen2", seed=2, scale=3.0), _Tok(), "t", "d")
    kw = dict(trees=["2,1"], verifiers=["rrs", "resispec"], sampling=SamplingConfig(1.0), max_new_tokens=5,
              seeds=[0], progress=False, estimate=False, stop_at_eos=False)
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8]]
    full = run_bench(pair, prompts, **kw)
    md, js = tmp_path / "r.md", tmp_path / "r.json"

    class Killed(Exception):
        pass

    def kill_after(n):
        def on_run(partial):
            write_report(partial, md, js)
            if len(partial.runs) == n:
                raise Killed
        return on_run

    with pytest.raises(Killed):                       # 3 methods per unit: unit 0 done, unit 1 half-done
        run_bench(pair, prompts, on_run=kill_after(5), **kw)
    old = load_result(js, need_speculative=True)
    assert not old.complete and len(old.runs) == 5
    ran = []
    res = run_bench(pair, prompts, resume=old, on_run=lambda r: ran.append((r.runs[-1]["unit"], r.runs[-1]["method"])),
                    **kw)
    assert res.complete and res.config["resumed_units"] == 1
    assert {u for u, _ in ran} == {1, 2} and len(ran) == 6          # unit 0 kept, unit 1 rerun whole
    key = lambda x: (x["unit"], x["method"], x["tree"])             # noqa: E731
    got, want = sorted(res.runs, key=key), sorted(full.runs, key=key)
    assert [(key(x), x["tokens"], x["target_calls"], x.get("obs"), x.get("rb")) for x in got] == \
        [(key(x), x["tokens"], x["target_calls"], x.get("obs"), x.get("rb")) for x in want]
    assert [(r["method"], r["tokens"], r["target_calls"]) for r in res.table()] == \
        [(r["method"], r["tokens"], r["target_calls"]) for r in full.table()]
    with pytest.raises(ValueError, match="max_new_tokens: 5 there, 6 now"):
        run_bench(pair, prompts, resume=old, **{**kw, "max_new_tokens": 6})
    with pytest.raises(ValueError, match="stop_at_eos"):
        run_bench(pair, prompts, resume=old, **{**kw, "stop_at_eos": True})
    with pytest.raises(ValueError, match="complete"):
        run_bench(pair, prompts, resume=res, **kw)
    with pytest.raises(ValueError, match="--capture"):
        run_bench(pair, prompts, resume=old, capture=[], **kw)
    # the command: a complete run or a missing JSON is refused before any model is loaded
    from resispec.cli import main

    write_report(res, md, js)
    assert main(["bench-decode", "--resume", "--ignore-eos", "--out", str(md)]) == 2
    assert main(["bench-decode", "--resume", "--out", str(tmp_path / "none.md")]) == 2
    assert not (tmp_path / "none.json").exists()


def test_resume_refuses_what_it_cannot_vouch_for(tmp_path, capsys):
    """Breaker findings: a setting stored as null (proxy) or another machine / thread count / prompt text, stray
    stored runs, impossible counts and non-finite times are refused; the command checks its options against the
    stopped run before any model is loaded."""
    from resispec.bench.decode_summary import load_result
    from resispec.cli import main

    pair = ModelPair(tiny_model("qwen2", seed=1, scale=3.0), tiny_model("qwen2", seed=2, scale=3.0), _Tok(), "t", "d")
    kw = dict(trees=["2,1"], verifiers=["rrs"], sampling=SamplingConfig(1.0), max_new_tokens=4, seeds=[0],
              progress=False, estimate=False, stop_at_eos=False)
    prompts = [[1, 2, 3], [4, 5]]
    md, js = tmp_path / "r.md", tmp_path / "r.json"

    def stopped(**edit):
        res = run_bench(pair, prompts, **kw)
        res.complete = False
        res.runs = res.runs[:3]
        res.config.update(edit)
        write_report(res, md, js, command="resispec bench-decode --ignore-eos --max-new-tokens 4 --trees 2,1")
        return load_result(js, need_speculative=False)

    assert stopped()  # sanity: a clean stopped run resumes
    assert run_bench(pair, prompts, resume=stopped(), **kw).config["resumed_units"] == 1
    with pytest.raises(ValueError, match="proxy: None there, 'coverage' now"):
        run_bench(pair, prompts, resume=stopped(), **{**kw, "verifiers": ["resispec"], "proxy": "coverage"})
    with pytest.raises(ValueError, match="machine: 'aarch64' there"):
        run_bench(pair, prompts, resume=stopped(machine="aarch64"), **kw)
    here = run_bench(pair, prompts, **kw).config["cpu"]
    other = {**here, "capability": "AVX2" if here.get("capability") != "AVX2" else "AVX512"}
    with pytest.raises(ValueError, match="cpu: "):              # another CPU (AVX2 vs AVX512): timings differ
        run_bench(pair, prompts, resume=stopped(cpu=other), **kw)
    with pytest.raises(ValueError, match="threads"):
        run_bench(pair, prompts, resume=stopped(threads=64), **kw)
    with pytest.raises(ValueError, match="prompt_sha256"):
        run_bench(pair, [[9, 9, 9], [8, 8]], resume=stopped(), **kw)
    old = stopped()
    old.runs[0]["seed"] = "0"
    with pytest.raises(ValueError, match="match no"):
        run_bench(pair, prompts, resume=old, **kw)
    # impossible stored counts are refused when the file is read
    good = json.loads(js.read_text())
    for field, value, why in (("draft_seconds", -5, ">= 0"), ("tokens", 500, "exceeds"), ("tokens", 2.5, "integer"),
                              ("target_seconds", "x", ">= 0"), ("draft_seconds", 1e999, ">= 0")):
        bad = json.loads(json.dumps(good))
        run = next(x for x in bad["runs"] if x["method"] != "autoregressive")
        run[field] = value
        (tmp_path / "bad.json").write_text(json.dumps(bad).replace("Infinity", "1e999"))
        with pytest.raises(ValueError, match=why):
            load_result(tmp_path / "bad.json", need_speculative=False)
    bad = json.loads(json.dumps(good))
    next(x for x in bad["runs"] if x["method"] == "autoregressive")["target_calls"] = 0
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="one token per call"):
        load_result(tmp_path / "bad.json", need_speculative=False)
    # an unmeasured target-only run (0 CPU seconds) leaves its unit out of the mean AND the s.e., no NaN
    res = run_bench(pair, prompts, **kw)
    next(x for x in res.runs if x["method"] == "autoregressive")["cpu_seconds"] = 0.0
    row = next(r for r in res.table() if r["method"] == "rrs")
    assert row["speedup_paired_cpu"] == row["speedup_paired_cpu"] and row["speedup_paired_cpu_se"] is None
    # the command: options checked against the stopped run before any model is loaded
    stopped()
    capsys.readouterr()
    assert main(["bench-decode", "--resume", "--ignore-eos", "--target", "t", "--draft", "d", "--trees", "2,1",
                 "--verifiers", "rrs", "--max-new-tokens", "7", "--out", str(md)]) == 2
    err = capsys.readouterr().err
    assert "max_new_tokens: 4 there, 7 now" in err and "its command was" in err


def test_ctrl_c_keeps_the_report_and_names_the_resume_command(tmp_path, monkeypatch, capsys):
    """New-user finding: Ctrl-C printed a raw KeyboardInterrupt traceback; now a line says what was kept and the
    command that continues it (rc 130), and the PARTIAL report is there."""
    import resispec.bench.decode as bd
    import resispec.commands.bench_decode as cmd
    from resispec.cli import main

    pair = ModelPair(tiny_model("qwen2", seed=1, scale=3.0), tiny_model("qwen2", seed=2, scale=3.0), _Tok(), "t", "d")
    monkeypatch.setattr(cmd, "check_models", lambda args: None)
    monkeypatch.setattr(cmd, "prompt_texts", lambda args: ["a", "b"])
    monkeypatch.setattr(cmd, "load_pair", lambda args: pair)
    monkeypatch.setattr(cmd, "encode_prompts", lambda p, texts, args: [[1, 2, 3], [4, 5]])
    real = bd.run_bench

    def interrupted(*a, on_run=None, **k):
        def stop(partial):
            on_run(partial)
            if len(partial.runs) == 2:
                raise KeyboardInterrupt
        return real(*a, on_run=stop, **k)

    monkeypatch.setattr(bd, "run_bench", interrupted)
    md = tmp_path / "r.md"
    assert main(["bench-decode", "--trees", "2,1", "--verifiers", "rrs", "--max-new-tokens", "3", "--ignore-eos",
                 "--out", str(md)]) == 130
    err = capsys.readouterr().err
    assert "interrupted:" in err and "2 finished runs" in err and "--resume" in err and "Traceback" not in err
    assert "PARTIAL" in md.read_text() and json.loads(md.with_suffix(".json").read_text())["complete"] is False


def test_probe_step_is_the_difference_over_the_steps_and_none_under_load(monkeypatch):
    """The start-up estimate's step time: (longer decode - fastest prefill) / steps; a loaded probe whose
    difference is not positive says so instead of printing "0 ms" (a user's loaded run did)."""
    from resispec.bench import decode as bd

    assert bd._probe_step([3.0, 3.2], 5.0, steps=4) == pytest.approx(0.5)
    assert bd._probe_step([3.4, 3.0], 2.9, steps=4) is None
    clock = iter([0.0, 2.0, 10.0, 13.3, 20.0, 23.0, 30.0, 32.9])   # warm-up, two prefills, the 5-token decode
    monkeypatch.setattr(bd, "autoregressive_decode", lambda *a, **k: None)
    monkeypatch.setattr("time.perf_counter", lambda: next(clock))
    from resispec.trees import TreeShape

    class _Pair:
        target = None
    jobs = [("autoregressive", None), ("resispec", TreeShape.parse("1,1,1"))]
    msg = bd._estimate(_Pair(), [[1, 2]], jobs, units=1, max_new_tokens=8, sampling=None)
    assert "not measurable" in msg and "0 ms" not in msg
    # step 0.5 s; the 1,1,1 tree's prefill with 3 more tokens takes 1 s more: a 1.5 s verify pass
    clock = iter([0.0, 2.0, 10.0, 13.3, 20.0, 23.0, 30.0, 35.0, 40.0, 44.0])
    msg = bd._estimate(_Pair(), [[1, 2]], jobs, units=2, max_new_tokens=16, sampling=None)
    # per unit: target-only 3 + 16 x 0.5 = 11 s; the tree 3 + 16/4 x 1.5 = 9 s .. 3 + 16 x 1.5 = 27 s
    assert "one target step 500 ms, a `1,1,1` verify pass 1500 ms" in msg and "estimate ~0.7-1.3 min" in msg, msg


def test_best_baseline_ties_and_zero_formatting():
    """Rules that coincide on a tree (block and traversal on a chain; every iid rule on one candidate) tie to
    round-off: the best-baseline label goes to a node-level rule first, then by name, not to whichever rounding
    came out larger; a difference that rounds to zero prints without a sign (no "-0.000")."""
    from resispec.bench._report import fmt
    from resispec.bench.decode import _best_baseline

    assert _best_baseline({"traversal": 1.4480000000000002, "block": 1.448, "rrs": 1.445}) == "block"
    assert _best_baseline({"traversal": 1.4, "rrs": 1.4 + 1e-15, "kseq": 1.4}) == "kseq"
    assert _best_baseline({"rrs": 1.40, "traversal": 1.41}) == "traversal"
    assert _best_baseline({}) is None
    assert fmt(-1e-12, 3) == "0.000" and fmt(-0.0004, 3) == "0.000" and fmt(-0.0006, 3) == "-0.001"
    signed = lambda x: fmt(x, 3, sign=True)  # noqa: E731
    assert signed(-1e-12) == "0.000" == signed(1e-12) and signed(0.0123) == "+0.012" and signed(-0.02) == "-0.020"


def test_bench_decode_refuses_what_would_lose_data_or_fake_a_standard_error(tmp_path, capsys):
    """Breaker findings: a new run silently overwrote a stopped run in --out; repeated --trees / --seeds counted
    one unit twice (an s.e. of 0.000); a --score rule no tree serves was dropped without a word; --proxy with no
    resispec verifier was ignored. Each is refused before any model loads."""
    from resispec.cli import main

    base = ["bench-decode", "--target", "t", "--draft", "d", "--ignore-eos"]
    md = tmp_path / "run.md"
    md.with_suffix(".json").write_text(json.dumps({"raw": [], "runs": [{"method": "rrs"}], "complete": False}))
    assert main(base + ["--trees", "2,1", "--out", str(md)]) == 2
    assert "holds a stopped bench-decode run" in capsys.readouterr().err
    out = str(tmp_path / "x.md")
    for extra, msg in ((["--trees", "1,1", "1,1"], "--trees: lists '1,1' twice"),
                       (["--trees", "2,1", "--seeds", "1", "1"], "--seeds: lists '1' twice"),
                       (["--trees", "2,1", "--verifiers", "resispec", "--score", "block"], "--scores block: exact for none"),
                       (["--trees", "wor:2", "--verifiers", "resispec", "--score", "rrs"], "--scores rrs: exact for none"),
                       (["--trees", "1,1", "--verifiers", "traversal", "--proxy", "topk"], "applies to the resispec")):
        assert main(base + extra + ["--out", out]) == 2, extra
        assert msg in capsys.readouterr().err, extra


def test_decode_refuses_resispec_options_for_other_verifiers(capsys):
    from resispec.cli import main

    for extra in (["--verifier", "traversal_resispec[gamma=nan]", "--tree", "2,1"],
                  ["--verifier", "block[proxy=nosuch]", "--tree", "1,1"]):
        assert main(["decode", "--target", "t", "--draft", "d", "--prompt", "x"] + extra) == 2
        assert "takes no options" in capsys.readouterr().err
    assert main(["decode", "--target", "t", "--draft", "d", "--prompt", "x", "--verifier", "rrs[gamma=2]"]) == 2
    assert "--verifier rrs[gamma=2]: verifier 'rrs': RecursiveRejection() takes no arguments" in capsys.readouterr().err
    assert main(["decode", "--target", "t", "--draft", "d", "--prompt", "x", "--verifier", "resispec[gamma]"]) == 2
    assert "options must be written name[option=value,...]" in capsys.readouterr().err


def test_a_run_with_more_tokens_than_its_calls_can_emit_is_refused(tmp_path):
    """Breaker: a tampered stopped run (4 tokens in 0 target calls) resumed and reported block efficiency 2.667."""
    from pathlib import Path

    from resispec.bench.decode_summary import load_result

    src = Path(__file__).resolve().parents[1] / "reports" / "decode_head_T1.json"
    data = json.loads(src.read_text())
    run = next(x for x in data["runs"] if x["method"] != "autoregressive")
    run["target_calls"] = 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="target calls on tree"):
        load_result(bad)
    assert load_result(src).complete


@pytest.mark.parametrize("spelling", ["resispec bench decode", "resispec bench-decode"])
def test_resume_reads_the_command_as_typed_in_either_spelling(tmp_path, capsys, spelling):
    """Round 6 (breaker): a stopped run started as `resispec bench decode` (what a user types, and what the run
    records) was refused by --resume: "does not record the bench-decode command that made it"."""
    from resispec.cli import main

    pair = ModelPair(tiny_model("qwen2", seed=1, scale=3.0), tiny_model("qwen2", seed=2, scale=3.0), _Tok(), "t", "d")
    res = run_bench(pair, [[1, 2, 3], [4, 5]], trees=["2,1"], verifiers=["rrs"], sampling=SamplingConfig(1.0),
                    max_new_tokens=4, seeds=[0], progress=False, estimate=False, stop_at_eos=False)
    res.complete, res.runs = False, res.runs[:3]
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    write_report(res, md, js, command=f"{spelling} --ignore-eos --max-new-tokens 4 --trees 2,1")
    assert main(["bench", "decode", "--resume", "--ignore-eos", "--target", "t", "--draft", "d", "--trees", "2,1",
                 "--verifiers", "rrs", "--max-new-tokens", "7", "--out", str(md)]) == 2
    err = capsys.readouterr().err
    assert "does not record" not in err and "max_new_tokens: 4 there, 7 now" in err, err
