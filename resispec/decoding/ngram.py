"""A cheap, weak draft: a smoothed n-gram over the target's own tokenizer.

Built from a real code corpus that every machine has -- the Python standard
library sources (``sysconfig.get_paths()["stdlib"]``, ``*.py`` files outside
``site-packages`` and the test folders) -- tokenised with the TARGET's
tokenizer, so its laws are over the target's vocabulary and nothing is
downloaded.  No model forward: a law costs a few vector operations over V.

Law of the next token after context ``h`` (interpolated Witten-Bell
smoothing, Witten & Bell 1991; Chen & Goodman 1998, "An empirical study of
smoothing techniques", section 2.5)::

    L_0(w)      = (c(w) + delta) / (N + delta V)          add-delta floor: L_0 > 0 on all V
    L_j(w | h)  = (c(h_j, w) + T(h_j) L_{j-1}(w)) / (c(h_j) + T(h_j)),   j = 1 .. order - 1

with ``h_j`` the last ``j`` tokens of the context, ``c`` counts, ``T`` the
number of distinct next tokens after ``h_j`` (a context never seen keeps
``L_{j-1}``).  With ``prompt_weight > 0`` the n-grams of the current context
itself (prompt + emitted tokens + drafted path) are added to the corpus
counts with that weight (prompt lookup decoding; REST, arXiv 2311.08252, and
the cache LM of Kuhn & De Mori 1990).  The law is then raised to ``power``
(default 2: sharper; the verifier is exact for ANY q, so this only moves the
acceptance rate) and renormalised.  Every law is normalised and covers V (> 0 on
all V unless an extreme power underflows the smallest entries, :meth:`NgramDraft.law`);
it depends only on the corpus, the tokenizer and the parameters (no seed).

The counts are built once and cached (``<model cache>/ngram-draft/<key>.npz``, the key
being the sha256 of the corpus file list with sizes, the tokenizer's vocab and
the parameters; a sidecar ``.sha256`` of the file is checked on every load,
a mismatch rebuilds), with a tqdm progress bar while tokenising.
"""

from __future__ import annotations

import hashlib
import json
import sys
import sysconfig
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .drafts import Draft, DraftSession, register_draft
from .laws import SamplingConfig, process_logits

FORMAT = 1
#: largest ``delta`` / ``prompt_weight`` accepted (pseudo-counts; far above any useful value, far below overflow)
_MAX_WEIGHT = 1e12
#: folders left out of the default corpus (third-party code and the very large test suites)
EXCLUDE_DIRS = ("site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__")


@dataclass(frozen=True)
class NgramConfig:
    """Parameters of the n-gram draft.

    Attributes
    ----------
    order : int in [1, 62 // bits(V) + 1] -- n (contexts of up to n - 1 tokens); default 4 (the most 18-bit ids fit)
    delta : float in (0, 1e12] -- add-delta floor of the unigram law (counts); default 0.5
    prompt_weight : float in [0, 1e12] -- weight of the context's own n-grams (0 = off); default 4
    power : float > 0 -- the law is raised to this power and renormalised (> 1 sharpens it; the
        verifier is exact for any q, so this only moves acceptance); default 2
    """

    order: int = 4
    delta: float = 0.5
    prompt_weight: float = 4.0
    power: float = 2.0

    def __post_init__(self):
        o = self.order
        if isinstance(o, bool) or not isinstance(o, (int, np.integer)) or o < 1:
            raise ValueError(f"ngram order must be an integer >= 1, got {o!r}")
        for name, lo_open in (("delta", True), ("prompt_weight", False), ("power", True)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not np.isfinite(v) \
                    or v < 0 or (lo_open and v == 0):
                raise ValueError(f"ngram {name} must be a finite number {'>' if lo_open else '>='} 0, got {v!r}")
        for name in ("delta", "prompt_weight"):     # counts times these must stay finite (corpus counts ~1e7)
            if getattr(self, name) > _MAX_WEIGHT:
                raise ValueError(f"ngram {name} must be at most {_MAX_WEIGHT:g} (a pseudo-count; larger overflows "
                                 f"the smoothed law), got {getattr(self, name)!r}")


def default_corpus() -> Path:
    """The Python standard library folder of the running interpreter."""
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(root) -> list[Path]:
    """Sorted ``*.py`` files under ``root`` (a folder) or ``[root]`` (a file), skipping :data:`EXCLUDE_DIRS`.

    Raises ValueError naming ``corpus`` when ``root`` does not exist or holds no ``.py`` file.
    """
    root = Path(root).expanduser()
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise ValueError(f"corpus {str(root)!r} is neither a folder nor a file; give a folder of .py sources")
    files = sorted(f for f in root.rglob("*.py")
                   if f.is_file() and not set(f.relative_to(root).parts[:-1]) & set(EXCLUDE_DIRS))
    if not files:
        raise ValueError(f"corpus {str(root)!r} holds no .py files; give a folder of Python sources")
    return files


def vocab_fingerprint(tokenizer) -> str:
    """sha256 of the tokenizer's sorted token -> id map."""
    items = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode("utf-8")).hexdigest()


def _bits(V: int) -> int:
    return max(1, int(V - 1).bit_length())


def _max_order(V: int) -> int:
    return 62 // _bits(V) + 1


class NgramCounts:
    """Count tables of orders 1..n over a vocabulary of V tokens.

    ``tables[j]`` (contexts of ``j`` tokens, j >= 1): ``keys`` (M,) int64
    sorted packed contexts, ``start`` (M + 1,) int64 offsets into ``nxt``
    (int64 next tokens) and ``cnt`` (float64 counts); ``unigram`` (V,) float64 counts.
    """

    def __init__(self, vocab_size: int, order: int, unigram: np.ndarray, tables: list):
        self.vocab_size, self.order = int(vocab_size), int(order)
        self.unigram, self.tables = unigram, tables
        self.bits = _bits(self.vocab_size)

    @classmethod
    def build(cls, streams, vocab_size: int, order: int) -> "NgramCounts":
        """Count n-grams of token ``streams`` (iterable of int arrays; n-grams never cross streams).

        Raises ValueError when a token lies outside [0, V), the order needs
        more than 62 bits per packed context, or there are no tokens.
        """
        V = int(vocab_size)
        if order > _max_order(V):
            raise ValueError(f"ngram order {order} is too large for a {V}-token vocabulary (at most {_max_order(V)})")
        streams = [np.asarray(s, dtype=np.int64).reshape(-1) for s in streams]
        streams = [s for s in streams if s.size]
        if not streams:
            raise ValueError("corpus is empty: it tokenises to no tokens; give a folder of non-empty sources")
        lo, hi = min(int(s.min()) for s in streams), max(int(s.max()) for s in streams)
        if lo < 0 or hi >= V:
            raise ValueError(f"corpus token ids lie in [{lo}, {hi}], outside the draft vocabulary [0, {V}); "
                             "the tokenizer does not match vocab_size")
        unigram = np.bincount(np.concatenate(streams), minlength=V).astype(np.float64)
        bits = _bits(V)
        tables = [None]
        for j in range(1, order):
            keys, nxt = [], []
            for s in streams:
                if s.size <= j:
                    continue
                k = np.zeros(s.size - j, dtype=np.int64)
                for a in range(j):  # context s[i-j .. i-1], most recent token in the low bits
                    k |= s[j - 1 - a:s.size - 1 - a] << (bits * a)
                keys.append(k)
                nxt.append(s[j:])
            tables.append(_table(np.concatenate(keys) if keys else np.zeros(0, np.int64),
                                 np.concatenate(nxt) if nxt else np.zeros(0, np.int64)))
        return cls(V, order, unigram, tables)

    def pack(self, ctx: np.ndarray, j: int) -> int:
        """Packed key of the last ``j`` tokens of ``ctx``."""
        k = 0
        for a in range(j):
            k |= int(ctx[-1 - a]) << (self.bits * a)
        return k

    def lookup(self, ctx: np.ndarray, j: int):
        """(next tokens, counts) after the last ``j`` tokens of ``ctx`` (empty arrays if unseen)."""
        keys, start, nxt, cnt = self.tables[j]
        key = self.pack(ctx, j)
        i = int(np.searchsorted(keys, key))
        if i < keys.size and keys[i] == key:
            return nxt[start[i]:start[i + 1]], cnt[start[i]:start[i + 1]]
        return nxt[:0], cnt[:0]

    def arrays(self) -> dict:
        out = {"unigram": self.unigram, "meta": np.array([self.vocab_size, self.order], dtype=np.int64)}
        for j in range(1, self.order):
            for name, a in zip(("keys", "start", "nxt", "cnt"), self.tables[j]):
                out[f"{name}{j}"] = a
        return out

    @classmethod
    def from_arrays(cls, z) -> "NgramCounts":
        V, order = (int(x) for x in z["meta"])
        tables = [None] + [tuple(z[f"{n}{j}"] for n in ("keys", "start", "nxt", "cnt")) for j in range(1, order)]
        return cls(V, order, np.asarray(z["unigram"], dtype=np.float64), tables)


def _table(keys: np.ndarray, nxt: np.ndarray):
    """Sorted unique (context, next) pairs with counts, grouped by context."""
    order = np.lexsort((nxt, keys))
    keys, nxt = keys[order], nxt[order]
    new = np.ones(keys.size, dtype=bool)
    new[1:] = (keys[1:] != keys[:-1]) | (nxt[1:] != nxt[:-1])
    first = np.flatnonzero(new)
    cnt = np.diff(np.append(first, keys.size)).astype(np.float64)
    keys, nxt = keys[first], nxt[first]
    ctx_new = np.ones(keys.size, dtype=bool)
    ctx_new[1:] = keys[1:] != keys[:-1]
    starts = np.flatnonzero(ctx_new)
    return keys[starts], np.append(starts, keys.size).astype(np.int64), nxt, cnt


def _context_counts(ctx: np.ndarray, j: int):
    """(next tokens, counts) of the occurrences of the last ``j`` tokens of ``ctx`` earlier in ``ctx``."""
    m = ctx.size
    if m <= j:
        return ctx[:0], np.zeros(0)
    if j == 0:
        return np.unique(ctx, return_counts=True)
    win = np.lib.stride_tricks.sliding_window_view(ctx[:-1], j)  # win[i] = ctx[i:i+j], next = ctx[i+j]
    hit = np.flatnonzero(np.all(win == ctx[-j:], axis=1))
    if not hit.size:
        return ctx[:0], np.zeros(0)
    return np.unique(ctx[hit + j], return_counts=True)


class NgramDraft(Draft):
    """Interpolated Witten-Bell n-gram draft over a tokenizer's vocabulary (see the module docstring).

    Parameters
    ----------
    counts : NgramCounts
    config : NgramConfig
    vocab : dict, optional -- the token -> id map it was built with (checked against the target's)
    name : str
    """

    kind = "ngram"
    weights = 0  # table lookups, no weight matrix read per level

    def __init__(self, counts: NgramCounts, config: NgramConfig = NgramConfig(), vocab: dict | None = None,
                 name: str = "ngram"):
        if config.order > counts.order:
            raise ValueError(f"ngram order {config.order} exceeds the counts' order {counts.order}")
        self.counts, self.config, self._vocab = counts, config, vocab
        self.vocab_size = counts.vocab_size
        self.name = name
        V, u = counts.vocab_size, counts.unigram
        self.base = (u + config.delta) / (u.sum() + config.delta * V)

    def tokenizer_vocab(self):
        return self._vocab

    def law(self, context) -> np.ndarray:
        """(V,) float64 law of the next token after ``context`` (sequence of int), sum 1.

        > 0 everywhere unless ``power`` is so large that ``L(w)^power`` underflows against the largest entry
        (``power * log(max L / L(w)) > ~700``, e.g. power >= ~48 with the default tables): then those entries
        are exactly 0 (a valid draft law; the verifier is exact for any q).  No error, no NaN.
        """
        L, power = self._smoothed(context), float(self.config.power)
        if power == 1:
            return L / L.sum()
        lo, hi = L.min(), L.max()
        if power * (np.log(hi) - np.log(lo)) < 700:       # L^power representable: the direct form
            P = L ** power
            return P / P.sum()
        g = power * np.log(L)                             # log L^power, finite; normalised in log space
        P = np.exp(g - g.max())
        return P / P.sum()

    def log_law(self, context) -> np.ndarray:
        """(V,) float64 ``power * log L`` up to a constant: the law's logits, finite even where :meth:`law`
        underflows to 0 (what temperature / top-k / top-p are applied to)."""
        L, power = self._smoothed(context), float(self.config.power)
        return power * np.log(L)

    def _smoothed(self, context) -> np.ndarray:
        """(V,) float64 interpolated Witten-Bell law before the power (not normalised), > 0 everywhere."""
        ctx = np.asarray(context, dtype=np.int64).reshape(-1)
        cfg, c = self.config, self.counts
        w = float(cfg.prompt_weight)
        L = self.base
        if w > 0 and ctx.size:
            L = self._mix(L, *_context_counts(ctx, 0), w)
        for j in range(1, cfg.order):
            if ctx.size < j:
                break
            nxt, cnt = c.lookup(ctx, j)
            if w > 0:
                n2, c2 = _context_counts(ctx, j)
                if n2.size:
                    nxt, cnt = np.concatenate([nxt, n2]), np.concatenate([cnt, w * c2])
            L = self._mix(L, nxt, cnt, 1.0)
        return L

    @staticmethod
    def _mix(L, nxt, cnt, weight):
        """Witten-Bell step: (weight * c(h, w) + T(h) L(w)) / (weight * c(h) + T(h))."""
        if not nxt.size:
            return L
        toks, inv = np.unique(nxt, return_inverse=True)
        c = np.bincount(inv, weights=cnt).astype(np.float64) * weight
        T, total = float(toks.size), float(c.sum())
        out = L * (T / (total + T))
        out[toks] += c / (total + T)
        return out

    def session(self, sampling: SamplingConfig) -> DraftSession:
        return _NgramSession(self, sampling)


class _NgramSession(DraftSession):
    def __init__(self, draft: NgramDraft, sampling: SamplingConfig):
        super().__init__(draft.vocab_size, sampling)
        self.draft = draft
        self.plain = sampling.temperature == 1 and sampling.top_k == 0 and sampling.top_p == 1

    def _level(self, ids, tree, nodes):
        base = list(ids)
        rows = np.stack([self.draft.law(base if i < 0 else base + [tree.tokens[a] for a in tree.ancestors(i)])
                         for i in nodes])
        self.calls += 1
        if self.plain:
            return rows
        if not np.all(rows > 0):              # an extreme power underflowed: the finite logits instead of log 0
            rows = np.stack([self.draft.log_law(base if i < 0 else base + [tree.tokens[a] for a in tree.ancestors(i)])
                             for i in nodes])
            return process_logits(rows, self.sampling)
        return process_logits(np.log(rows), self.sampling)  # the same temperature / top-k / top-p as the target


# ----------------------------------------------------------------- corpus -> cached counts
def _tokenise(files: list[Path], tokenizer, progress: bool) -> list[np.ndarray]:
    from tqdm.auto import tqdm

    streams, skipped = [], 0
    for f in tqdm(files, desc="ngram: tokenising corpus", unit="file", disable=not progress, file=sys.stderr):
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            skipped += 1  # a few stdlib test fixtures are deliberately not UTF-8
            continue
        except OSError as exc:
            raise ValueError(f"corpus file {f} cannot be read ({exc.strerror}); fix its permissions or choose "
                             "another corpus") from None
        if text:
            streams.append(np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64))
    if skipped and progress:
        print(f"ngram: skipped {skipped} non-UTF-8 file(s)", file=sys.stderr)
    return streams


def cache_key(files: list[Path], root: Path, fingerprint: str, vocab_size: int, order: int) -> str:
    """sha256 of the corpus file list (relative path, size), tokenizer fingerprint and parameters."""
    listing = [(str(f.relative_to(root)) if f != root else f.name, f.stat().st_size) for f in files]
    blob = json.dumps({"format": FORMAT, "files": listing, "root": str(root), "tokenizer": fingerprint,
                       "vocab": int(vocab_size), "order": int(order)})
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _read_stamp(stamp: Path) -> str | None:
    """The sidecar's hex digest, or None when it cannot be read as text (then the cache is rebuilt)."""
    try:
        return stamp.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_counts(tokenizer, vocab_size: int, *, corpus=None, order: int = 3, cache: Path | None = None,
                progress: bool = True) -> NgramCounts:
    """Count tables over ``corpus`` (default the stdlib) tokenised with ``tokenizer``; built once, cached.

    Parameters
    ----------
    tokenizer : transformers tokenizer (the target's) -- ``__call__`` and ``get_vocab``
    vocab_size : int -- the target's V (>= every id the tokenizer emits)
    corpus : folder or file, optional
    order : int
    cache : folder, optional -- default ``<model cache>/ngram-draft`` (:func:`resispec.decoding.fetch.cache_dir`)
    progress : bool -- tqdm bar while tokenising (stderr)

    Returns
    -------
    NgramCounts

    Raises
    ------
    ValueError
        Missing / empty / unreadable corpus, token ids outside [0, V), order too large.
    """
    from .._io import atomic_write, atomic_write_with
    from .fetch import cache_dir

    root = Path(corpus).expanduser() if corpus is not None else default_corpus()
    files = corpus_files(root)
    key = cache_key(files, root, vocab_fingerprint(tokenizer), vocab_size, order)
    folder = Path(cache) if cache is not None else cache_dir() / "ngram-draft"
    path, stamp = folder / f"{key}.npz", folder / f"{key}.sha256"
    if path.is_file() and stamp.is_file() and _read_stamp(stamp) == _sha256_file(path):
        with np.load(path) as z:
            return NgramCounts.from_arrays(z)
    counts = NgramCounts.build(_tokenise(files, tokenizer, progress), vocab_size, order)
    atomic_write_with(path, lambda fh: np.savez(fh, **counts.arrays()))
    atomic_write(stamp, _sha256_file(path) + "\n")
    if progress:
        print(f"ngram: {int(counts.unigram.sum())} tokens from {len(files)} files -> {path}", file=sys.stderr)
    return counts


#: The largest order any vocabulary allows (V = 2: 1-bit ids, 62 of them packed in an int64 key);
#: a real tokenizer allows far less (:func:`_max_order`, checked against V when the counts are built).
MAX_ORDER = _max_order(2)


def corpus_options(opts, config_cls, who: str) -> tuple:
    """(config, corpus) of a corpus-built draft's options: ``corpus`` popped, the rest given to ``config_cls``.

    Raises ValueError naming ``who`` for an unknown option, a bad value (``config_cls`` checks), an empty
    ``corpus=`` or a corpus path that does not exist.
    """
    opts = dict(opts)
    corpus = opts.pop("corpus", None)
    fields = set(config_cls.__dataclass_fields__)
    unknown = set(opts) - fields
    if unknown:
        raise ValueError(f"{who} draft: unknown option(s) {sorted(unknown)}; known: {sorted(fields | {'corpus'})}")
    cfg = config_cls(**opts)
    if corpus is not None and not str(corpus).strip():
        raise ValueError(f"{who} draft: corpus= is empty; give corpus=PATH (a folder of .py sources) or leave it "
                         "out for the Python standard library")
    root = Path(str(corpus)).expanduser() if corpus is not None else default_corpus()
    if not root.exists():
        raise ValueError(f"corpus {str(root)!r} does not exist; give a folder of .py sources")
    return cfg, corpus


def _check_options(opts) -> tuple[NgramConfig, object]:
    """(config, corpus) of ngram draft options, checked before any model loads.

    Raises ValueError for an unknown option, a bad value, an ``order`` outside
    ``[1, MAX_ORDER]`` (no vocabulary fits more), an empty ``corpus=`` or a missing corpus.
    """
    cfg, corpus = corpus_options(opts, NgramConfig, "ngram")
    if cfg.order > MAX_ORDER:
        raise ValueError(f"ngram order must be at most {MAX_ORDER} (contexts are packed in 62 bits; a real "
                         f"tokenizer allows about 4-5), got {cfg.order}")
    return cfg, corpus


@register_draft("ngram", check=_check_options)
def _ngram_factory(opts, *, target=None, tokenizer=None, progress: bool = True, **_load):
    """``ngram[:order=4,delta=0.5,prompt_weight=4,power=2,corpus=PATH]`` over the target's tokenizer."""
    if tokenizer is None or target is None:
        raise ValueError("the ngram draft is built over the target's tokenizer: pass target= and tokenizer=")
    cfg, corpus = _check_options(opts)
    V = int(target.get_output_embeddings().weight.shape[0])
    counts = load_counts(tokenizer, V, corpus=corpus, order=cfg.order, progress=progress)
    name = "ngram:" + ",".join(f"{k}={v}" for k, v in asdict(cfg).items())
    return NgramDraft(counts, cfg, tokenizer.get_vocab(), name=name)
