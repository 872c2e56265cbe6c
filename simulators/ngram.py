"""A real draft/target pair: Kneser-Ney n-gram models of Python source code.

Corpus
    The Python standard library's own ``.py`` files, found with
    ``sysconfig.get_paths()["stdlib"]`` (every machine with Python has them).
    Files are walked in sorted order; ``site-packages``, ``dist-packages``,
    test directories (``test``, ``tests``, ``idle_test``), ``__pycache__`` and
    the ``encodings`` codec tables are skipped.  A file goes to the held-out
    set when ``crc32(relative path) % 10 == 0`` (about 10 %), else to training:
    a split by file, stable across machines with the same Python.

Tokenizer (documented vocabulary)
    A regex lexer for Python source (:data:`TOKEN_PATTERN`): a newline, a run
    of spaces (indentation), a run of tabs, an identifier or keyword, a run of
    digits, a multi-character operator (``**=``, ``->``, ``==`` ...), any
    other single character.  Concatenating the tokens gives back the text.
    The vocabulary is ``<unk>`` (id 0) followed by the ``vocab_size - 1`` most
    frequent training tokens (ties broken by the string); every other token
    encodes to ``<unk>``, which decodes to ``"\\ufffd"``.

Models
    Target ``p``: interpolated Kneser-Ney of order 4 (Kneser & Ney 1995;
    Chen & Goodman 1998, "An empirical study of smoothing techniques for
    language modeling", TR-10-98, interpolated form with one absolute
    discount ``D = n1 / (n1 + 2 n2)`` per order).  Draft ``q``: the same
    smoothing with a lower order (default 2, a bigram).  The highest order
    uses raw counts, lower orders continuation counts ``N1+(. h w)``, the
    unigram level is interpolated with the uniform law, so every token has
    positive probability under both models.

Cache
    Training counts are cached as one ``.npz`` in ``$XDG_CACHE_HOME/resispec``
    (default ``~/.cache/resispec``), keyed by the Python version, the stdlib
    path and the settings; written to a temporary file and renamed.  A cache
    that cannot be written (read-only home, no space) costs one warning and
    the counts are used uncached; a finished run is never lost to it.

Registers the pair family ``"ngram"`` (:func:`real_nodes`) in
:mod:`simulators.families`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sys
import sysconfig
import tempfile
import time
import warnings
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import sparse

from .families import PairFamily, register_family

#: Lexer for Python source; the alternatives are tried in this order.
TOKEN_PATTERN = (
    r"\n|[ ]+|\t+|[A-Za-z_][A-Za-z0-9_]*|[0-9]+"
    r"|\*\*=|//=|>>=|<<=|\.\.\.|->|:=|==|!=|<=|>=|\*\*|//|<<|>>|\+=|-=|\*=|/=|%=|&=|\|=|\^=|@="
    r"|\S|\s"
)
_TOKEN_RE = re.compile(TOKEN_PATTERN)
UNK = "<unk>"
UNK_TEXT = "\ufffd"
_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "encodings"})
_CACHE_FORMAT = 1


def tokenize(text: str) -> list[str]:
    """Split Python source into lexer tokens (:data:`TOKEN_PATTERN`); lossless."""
    return _TOKEN_RE.findall(text)


def corpus_files(root: str | os.PathLike | None = None) -> list[Path]:
    """Sorted list of the stdlib ``.py`` files the corpus uses (see module doc)."""
    root = Path(root if root is not None else sysconfig.get_paths()["stdlib"])
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS)
        out.extend(Path(d) / f for f in sorted(files) if f.endswith(".py"))
    return sorted(out)


def is_heldout(relpath: str) -> bool:
    """Held-out split rule: ``crc32(relative posix path) % 10 == 0``."""
    return zlib.crc32(relpath.encode()) % 10 == 0


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/resispec`` or ``~/.cache/resispec``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "resispec"


# ----------------------------------------------------------------------------
# training: counts
# ----------------------------------------------------------------------------

def _ngram_keys(streams: list[np.ndarray], n: int, V: int) -> np.ndarray:
    """All n-grams inside each stream, encoded base V, concatenated (int64)."""
    parts = []
    for s in streams:
        if s.size < n:
            continue
        key = np.zeros(s.size - n + 1, dtype=np.int64)
        for j in range(n):
            key = key * V + s[j: s.size - n + 1 + j]
        parts.append(key)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _train_counts(order: int, vocab_size: int, root: str | None, max_bytes: int | None) -> dict:
    files = corpus_files(root)
    base = Path(root if root is not None else sysconfig.get_paths()["stdlib"])
    train_tok, held_tok = [], []
    used = 0
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        used += len(text)
        rel = f.relative_to(base).as_posix()
        (held_tok if is_heldout(rel) else train_tok).append(tokenize(text))
        if max_bytes is not None and used >= max_bytes:
            break
    freq = Counter()
    for toks in train_tok:
        freq.update(toks)
    ranked = sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[: vocab_size - 1]
    vocab = [UNK] + [t for t, _ in ranked]
    index = {t: i for i, t in enumerate(vocab)}
    enc = lambda toks: np.fromiter((index.get(t, 0) for t in toks), dtype=np.int64, count=len(toks))
    train = [enc(t) for t in train_tok]
    held = [enc(t) for t in held_tok]
    V = len(vocab)
    out = {"vocab": np.array(vocab, dtype=object)}
    # raw counts of every order 1..order, continuation counts of 1..order-1
    for m in range(1, order + 1):
        k, c = np.unique(_ngram_keys(train, m, V), return_counts=True)
        out[f"raw{m}_keys"], out[f"raw{m}_counts"] = k, c.astype(np.int64)
        if m >= 2:
            # N1+(. w_2..w_m): distinct left extensions of each (m-1)-gram
            ck, cc = np.unique(k % (V ** (m - 1)), return_counts=True)
            out[f"cont{m - 1}_keys"], out[f"cont{m - 1}_counts"] = ck, cc.astype(np.int64)
    out["held_tokens"] = np.concatenate(held) if held else np.zeros(0, np.int64)
    out["held_starts"] = np.cumsum([0] + [h.size for h in held])[:-1].astype(np.int64)
    out["train_tokens"] = np.int64(sum(t.size for t in train))
    out["n_files"] = np.array([len(train), len(held)], dtype=np.int64)
    out["corpus_chars"] = np.int64(used)
    return out


# ----------------------------------------------------------------------------
# the model: per-order sparse tables
# ----------------------------------------------------------------------------

@dataclass
class _Level:
    """One order m >= 2 of an interpolated KN model (context length m - 1)."""

    ctx_keys: np.ndarray          # (C,) int64 sorted context keys
    gamma: np.ndarray             # (C,) float64 back-off weight D N1+(h.) / c(h)
    table: sparse.csr_matrix      # (C, V) float64 (c(hw) - D)_+ / c(h)
    m: int


def _discount(counts: np.ndarray) -> float:
    n1 = np.count_nonzero(counts == 1)
    n2 = np.count_nonzero(counts == 2)
    if n1 == 0:
        return 0.5
    return float(n1 / (n1 + 2 * max(n2, 1)))


def _level(keys: np.ndarray, counts: np.ndarray, m: int, V: int) -> _Level:
    D = _discount(counts)
    ctx = keys // V
    w = keys % V
    ctx_keys, inv, n_types = np.unique(ctx, return_inverse=True, return_counts=True)
    total = np.bincount(inv, weights=counts, minlength=ctx_keys.size)
    data = np.maximum(counts - D, 0.0) / total[inv]
    table = sparse.csr_matrix((data, (inv, w)), shape=(ctx_keys.size, V))
    table.sort_indices()
    return _Level(ctx_keys, D * n_types / total, table, m)


def _unigram(keys: np.ndarray, counts: np.ndarray, V: int) -> np.ndarray:
    D = _discount(counts)
    total = counts.sum()
    p = np.zeros(V)
    p[keys] = np.maximum(counts - D, 0.0) / total
    p += D * keys.size / total / V
    return p / p.sum()


@dataclass
class KNModel:
    """Interpolated Kneser-Ney model of a given order over a fixed vocabulary."""

    order: int
    V: int
    unigram: np.ndarray                       # (V,) float64
    levels: list = field(default_factory=list)  # _Level for m = 2..order

    @classmethod
    def from_counts(cls, counts: dict, order: int, V: int) -> "KNModel":
        if order == 1:
            uni = _unigram(counts["raw1_keys"], counts["raw1_counts"], V)
        else:
            uni = _unigram(counts["cont1_keys"], counts["cont1_counts"], V)
        levels = []
        for m in range(2, order + 1):
            kind = "raw" if m == order else "cont"
            levels.append(_level(counts[f"{kind}{m}_keys"], counts[f"{kind}{m}_counts"], m, V))
        return cls(order, V, uni, levels)

    def laws(self, ctx: np.ndarray, length: np.ndarray) -> np.ndarray:
        """Next-token laws, (n, V) float64, at contexts ``ctx`` (n, L) int64.

        ``ctx`` holds the last ``L`` tokens of each context right-aligned;
        ``length`` (n,) says how many of them are real (shorter contexts use
        only the orders they support).
        """
        n, L = ctx.shape
        P = np.broadcast_to(self.unigram, (n, self.V)).copy()
        for lv in self.levels:
            h = lv.m - 1
            if h > L:
                break
            rows_ok = length >= h
            key = np.zeros(n, dtype=np.int64)
            for j in range(L - h, L):
                key = key * self.V + ctx[:, j]
            pos = np.searchsorted(lv.ctx_keys, key)
            pos_c = np.minimum(pos, lv.ctx_keys.size - 1)
            found = rows_ok & (lv.ctx_keys[pos_c] == key)
            if not found.any():
                continue
            idx = np.flatnonzero(found)
            r = pos_c[idx]
            P[idx] *= lv.gamma[r][:, None]
            P[idx] += lv.table[r].toarray()
        P /= P.sum(axis=1, keepdims=True)
        return P


# ----------------------------------------------------------------------------
# the pair
# ----------------------------------------------------------------------------

class NGramPair:
    """Target ``p`` (KN order ``target_order``) and draft ``q`` (KN order ``draft_order``).

    Attributes
    ----------
    vocab : list of str, length ``V`` (``vocab[0] == "<unk>"``)
    V : int
    target, draft : KNModel
    heldout_tokens : ndarray (N,) int64, the held-out files concatenated
    heldout_starts : ndarray (F,) int64, start offset of each held-out file
    info : dict, corpus and build statistics
    """

    def __init__(self, counts: dict, *, target_order: int, draft_order: int, info: dict | None = None):
        self.vocab: list[str] = [str(t) for t in counts["vocab"]]
        self.V = len(self.vocab)
        self._index = {t: i for i, t in enumerate(self.vocab)}
        self.target = KNModel.from_counts(counts, target_order, self.V)
        self.draft = KNModel.from_counts(counts, draft_order, self.V)
        self.context_length = max(target_order, draft_order) - 1
        self.heldout_tokens = np.asarray(counts["held_tokens"], dtype=np.int64)
        self.heldout_starts = np.asarray(counts["held_starts"], dtype=np.int64)
        self.info = dict(info or {})
        self.info.update(V=self.V, train_tokens=int(counts["train_tokens"]),
                         heldout_tokens=int(self.heldout_tokens.size),
                         train_files=int(counts["n_files"][0]), heldout_files=int(counts["n_files"][1]),
                         corpus_chars=int(counts["corpus_chars"]),
                         target_order=target_order, draft_order=draft_order)
        # positions with a full context inside their own file
        L = self.context_length
        ends = np.append(self.heldout_starts[1:], self.heldout_tokens.size)
        valid = [np.arange(s + L, e) for s, e in zip(self.heldout_starts, ends) if e - s > L]
        self._positions = np.concatenate(valid) if valid else np.zeros(0, np.int64)

    # -- tokenizer ----------------------------------------------------------
    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text``, (n,) int64; tokens outside the vocabulary map to 0 (``<unk>``)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        toks = tokenize(text)
        return np.fromiter((self._index.get(t, 0) for t in toks), dtype=np.int64, count=len(toks))

    def decode(self, ids) -> str:
        """Text of token ids (``<unk>`` becomes U+FFFD); ValueError on ids outside [0, V)."""
        ids = self._check_ids(np.asarray(ids).ravel(), "ids")
        return "".join(UNK_TEXT if i == 0 else self.vocab[i] for i in ids.tolist())

    def _check_ids(self, a: np.ndarray, name: str) -> np.ndarray:
        if a.size == 0:
            return a.astype(np.int64)
        if not np.issubdtype(a.dtype, np.integer):
            if a.dtype == object or not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
                raise ValueError(f"{name} must be integer token ids in [0, {self.V}), got dtype {a.dtype}")
        a = a.astype(np.int64)
        if a.min() < 0 or a.max() >= self.V:
            raise ValueError(f"{name} has token ids outside the vocabulary [0, {self.V}): "
                             f"min {a.min()}, max {a.max()}")
        return a

    # -- laws -----------------------------------------------------------------
    def _contexts(self, contexts) -> tuple[np.ndarray, np.ndarray]:
        L = self.context_length
        if isinstance(contexts, np.ndarray) and contexts.ndim == 2:
            arr = self._check_ids(contexts, "contexts")
            n, w = arr.shape
            ctx = np.zeros((n, L), dtype=np.int64)
            t = min(w, L)
            if t:
                ctx[:, L - t:] = arr[:, w - t:]
            return ctx, np.full(n, t, dtype=np.int64)
        if isinstance(contexts, (str, bytes)) or not hasattr(contexts, "__len__"):
            raise TypeError("contexts must be a sequence of token-id sequences or an (n, L) integer array")
        n = len(contexts)
        ctx = np.zeros((n, L), dtype=np.int64)
        length = np.zeros(n, dtype=np.int64)
        for i, c in enumerate(contexts):
            a = np.asarray(c)
            if a.ndim != 1:
                raise ValueError(f"contexts[{i}] must be a 1-D sequence of token ids, got shape {a.shape}")
            a = self._check_ids(a, f"contexts[{i}]")
            t = min(a.size, L)
            if t:
                ctx[i, L - t:] = a[a.size - t:]
            length[i] = t
        return ctx, length

    def laws(self, contexts) -> tuple[np.ndarray, np.ndarray]:
        """Next-token laws of target and draft at each context.

        Parameters
        ----------
        contexts : (n, L) integer ndarray, or a sequence of n 1-D token-id
            sequences (any lengths; only the last ``context_length`` ids
            matter, shorter ones use the lower orders).

        Returns
        -------
        p, q : ndarray, shape (n, V), float64, rows sum to 1, all entries > 0.

        Raises
        ------
        ValueError
            Token ids outside ``[0, V)`` or non-integer ids.
        """
        ctx, length = self._contexts(contexts)
        if ctx.shape[0] == 0:
            return np.zeros((0, self.V)), np.zeros((0, self.V))
        return self.target.laws(ctx, length), self.draft.laws(ctx, length)

    def heldout_contexts(self, n: int, rng: np.random.Generator, *, return_next: bool = False):
        """``n`` random held-out contexts, (n, context_length) int64.

        Each is the ``context_length`` tokens before a held-out position in
        the same file; with ``return_next`` also the true next tokens (n,).
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy.random.Generator")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        pos = rng.choice(self._positions, size=int(n), replace=True)
        L = self.context_length
        ctx = self.heldout_tokens[pos[:, None] - L + np.arange(L)]
        return (ctx, self.heldout_tokens[pos]) if return_next else ctx

    def __repr__(self):
        return (f"NGramPair(V={self.V}, target=KN{self.target.order}, draft=KN{self.draft.order}, "
                f"train_tokens={self.info['train_tokens']:,})")


def _cache_key(settings: dict) -> str:
    blob = json.dumps({**settings, "python": sys.version, "format": _CACHE_FORMAT}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _save_atomic(path: Path, arrays: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **{k: (np.array(v, dtype=str) if k == "vocab" else v) for k, v in arrays.items()})
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _try_save(path: Path, counts: dict) -> bool:
    """Write the counts cache; on an OSError (read-only or full disk) warn once and return False."""
    try:
        _save_atomic(path, counts)
    except OSError as exc:
        warnings.warn(f"resispec: cannot write the n-gram cache {path} ({exc.__class__.__name__}: {exc}); "
                      "continuing without it (set XDG_CACHE_HOME to a writable folder to keep it)",
                      RuntimeWarning, stacklevel=3)
        return False
    return True


@functools.lru_cache(maxsize=4)
def load_pair(*, vocab_size: int = 4096, target_order: int = 4, draft_order: int = 2,
              max_bytes: int | None = None, root: str | None = None, use_cache: bool = True) -> NGramPair:
    """Build (or load from the cache) the stdlib n-gram draft/target pair.

    Parameters
    ----------
    vocab_size : int >= 2000
        Tokens in the vocabulary, ``<unk>`` included.
    target_order, draft_order : int in 1..6
        Kneser-Ney orders of the target ``p`` and draft ``q``.
    max_bytes : int, optional
        Stop reading corpus files after this many characters (default: all,
        about 10 MB on CPython 3.11).
    root : str, optional
        Corpus root (default the stdlib directory).
    use_cache : bool
        Read/write the counts cache (:func:`cache_dir`).  An unwritable
        cache gives one RuntimeWarning and ``info["cache_path"] = None``.

    Returns
    -------
    NGramPair  (memoised per argument set within a process)

    Raises
    ------
    ValueError
        Bad sizes or orders, or an empty corpus.
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2000:
        raise ValueError(f"vocab_size must be an integer >= 2000, got {vocab_size!r}")
    for name, o in (("target_order", target_order), ("draft_order", draft_order)):
        if isinstance(o, bool) or not isinstance(o, int) or not 1 <= o <= 6:
            raise ValueError(f"{name} must be an integer in 1..6, got {o!r}")
    if vocab_size ** max(target_order, draft_order) >= 2 ** 62:
        raise ValueError("vocab_size ** order overflows int64 n-gram keys; lower vocab_size or the orders")
    order = max(target_order, draft_order)
    settings = dict(vocab_size=vocab_size, order=order, max_bytes=max_bytes,
                    root=str(root if root is not None else sysconfig.get_paths()["stdlib"]))
    path = cache_dir() / f"ngram-{_cache_key(settings)}.npz"
    t0 = time.perf_counter()
    counts = None
    source = "built"
    if use_cache and path.exists():
        try:
            with np.load(path, allow_pickle=False) as z:
                counts = {k: z[k] for k in z.files}
            source = "cache"
        except Exception:  # corrupt cache: rebuild
            counts = None
    if counts is None:
        counts = _train_counts(order, vocab_size, root, max_bytes)
        if len(counts["vocab"]) < 2000:
            raise ValueError(f"corpus gives only {len(counts['vocab'])} distinct tokens; need >= 2000")
        if use_cache and not _try_save(path, counts):
            path = None
    pair = NGramPair(counts, target_order=target_order, draft_order=draft_order,
                     info={"source": source, "cache_path": str(path) if path is not None else None})
    pair.info["load_seconds"] = time.perf_counter() - t0
    return pair


def _temper(P: np.ndarray, T: float) -> np.ndarray:
    if T == 1.0:
        return P
    logp = np.log(P) / T
    logp -= logp.max(axis=1, keepdims=True)
    out = np.exp(logp)
    return out / out.sum(axis=1, keepdims=True)


def real_nodes(n: int, *, seed: int | np.random.Generator = 0, temperature: float = 1.0,
               pair: NGramPair | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(p, q) at ``n`` random held-out contexts of the stdlib n-gram pair.

    Temperature is applied identically to both: ``p**(1/T)`` renormalised.

    Returns
    -------
    p, q : ndarray, shape (n, V), float64

    Raises
    ------
    ValueError
        ``n < 1`` or a non-positive / non-finite temperature.
    """
    if not np.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be finite and > 0, got {temperature}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    pair = pair if pair is not None else load_pair()
    p, q = pair.laws(pair.heldout_contexts(n, rng))
    return _temper(p, float(temperature)), _temper(q, float(temperature))


def _sample(rng, n, V, T):
    pair = load_pair()
    return real_nodes(n, seed=rng, temperature=T, pair=pair)


def _vocab_size_default() -> int:
    return 4096


register_family(PairFamily(
    "ngram",
    "real nodes: KN 4-gram target vs KN bigram draft on the Python stdlib, held-out contexts",
    _sample, {}, fixed_vocab=_vocab_size_default(),
))

__all__ = ["KNModel", "NGramPair", "TOKEN_PATTERN", "cache_dir", "corpus_files", "load_pair", "real_nodes", "tokenize"]
