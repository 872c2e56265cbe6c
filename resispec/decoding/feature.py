"""A cheap draft that reads the target's own features: an EAGLE-style head, trained here on a CPU.

The seed's regime is a draft at ~1 % of the target's cost that agrees with
it in roughly 50-80 % of positions.  The n-gram draft (:mod:`.ngram`) is
cheap but agrees in ~30 %; the 0.5B model agrees in ~90 % but costs ~40 %
of a target pass here.  This draft sits between them by reusing what the
target computes anyway (EAGLE, Li et al., arXiv 2401.15077; Medusa, Cai et
al., arXiv 2401.10774): the target's last hidden state ``f_{t-1}`` (after the
final norm, the vector its lm_head reads) at the last verified position and
the embedding ``e(x_t)`` of the token emitted after it predict the next
feature, and the target's own lm_head rows of a sub-vocabulary ``S`` (the
most frequent corpus tokens) turn it into a law::

    u      = W_in [f_{t-1}; e(x_t) / rms(e(x_t))] + b_in       (H,)  fuse feature and token
    u      = u + W_dn silu(W_up u)                              (H,)  one residual MLP
    f_hat  = g * u / sqrt(mean(u^2) + eps)                      (H,)  RMS norm, g from the target's final norm
    q_S    = softmax(W_lm[S] f_hat)                             (|S|,) the target's lm_head rows of S
    q      = (1 - floor) q_S (on S) + floor b                   (V,)  b: the n-gram's unigram law, > 0 on all V

Deeper tree levels feed ``f_hat`` back in place of ``f`` (EAGLE's feature
recursion).  Before the target's first pass (the prompt prefill) there is no
feature, so the root law of the first step is ``b`` alone.  The verifier is
exact for ANY q (``docs/RESISPEC.md`` section 2): the head moves only the
acceptance rate, never the output law.

Training (:func:`build_head`): the target runs teacher-forced over chunks of
the Python standard library (the n-gram draft's corpus; never the HumanEval
prompts the benchmarks decode) and the head learns, at every position ``i``,
``(f_{i-1}, x_i) -> f_i`` by distillation: KL(softmax(W_lm[S] f_i) ||
q_S) plus ``smooth_l1(f_hat, f_i)`` (EAGLE's two losses).  Features and head
are cached under ``<model cache>/feature-draft/`` with sha256 sidecars
checked on every load; every step shows a progress bar.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .drafts import Draft, DraftSession, register_draft
from .laws import SamplingConfig, process_logits
from .tree import ROOT

FORMAT = 1


@dataclass(frozen=True)
class HeadConfig:
    """Parameters of the feature-head draft (all checked in ``__post_init__``).

    Attributes
    ----------
    tokens : int >= 64 -- training positions: target forwards over this many corpus tokens (the build's cost)
    seq_len : int in [16, 4096] -- tokens per teacher-forced target forward
    vocab : int >= 2 -- |S|, the head's sub-vocabulary (most frequent corpus tokens)
    hidden : int in [4, 65536] -- width of the residual MLP
    epochs : int >= 1
    lr : float in (0, 1] -- AdamW learning rate
    floor : float in [1e-6, 1) -- mass of the unigram law b mixed in, so q covers all V
    seed : int in [0, 2**32 - 1] -- chunk order and initialisation (the built head is deterministic given it)
    """

    tokens: int = 98304
    seq_len: int = 256
    vocab: int = 8192
    hidden: int = 2048
    epochs: int = 4
    lr: float = 1e-3
    floor: float = 0.01
    seed: int = 0

    def __post_init__(self):
        ints = {"tokens": (64, None), "seq_len": (16, 4096), "vocab": (2, None), "hidden": (4, 65536),
                "epochs": (1, 1000), "seed": (0, 2 ** 32 - 1)}
        for name, (lo, hi) in ints.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo or (hi is not None and v > hi):
                rng = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
                raise ValueError(f"head draft: {name} must be an integer {rng}, got {v!r}")
            object.__setattr__(self, name, int(v))               # numpy ints -> int (JSON cache keys)
        for name, lo, hi, lo_open, hi_open in (("lr", 0, 1, True, False), ("floor", 1e-6, 1, False, True)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not np.isfinite(v) \
                    or not ((lo < v if lo_open else lo <= v) and (v < hi if hi_open else v <= hi)):
                raise ValueError(f"head draft: {name} must be a number in {'(' if lo_open else '['}{lo:g}, {hi}"
                                 f"{')' if hi_open else ']'}, got {v!r}")
            object.__setattr__(self, name, float(v))


# ----------------------------------------------------------------- the head (torch)
def _head_module(H: int, width: int, norm_weight, eps: float):
    import torch
    from torch import nn

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fuse = nn.Linear(2 * H, H)
            self.up = nn.Linear(H, width, bias=False)
            self.down = nn.Linear(width, H, bias=False)
            self.g = nn.Parameter(torch.as_tensor(norm_weight, dtype=torch.float32).clone())
            self.eps = float(eps)

        def forward(self, f, e):                               # f, e: (B, H) -> f_hat (B, H)
            e = e * torch.rsqrt(e.pow(2).mean(-1, keepdim=True) + self.eps)  # e / rms(e): the embedding rows
            u = self.fuse(torch.cat([f, e], dim=-1))           # u = W_in [f; e/rms(e)] + b_in
            u = u + self.down(nn.functional.silu(self.up(u)))  # u + W_dn silu(W_up u)
            return self.g * u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + self.eps)  # RMS norm

    return Head()


def _parts(target):
    """(embedding (V, H), lm_head weight (V, H), final-norm weight (H,), eps) of a transformers causal LM."""
    base = target.base_model
    norm = getattr(base, "norm", None)
    if norm is None or not hasattr(norm, "weight"):
        raise ValueError(f"head draft: target {type(target).__name__} has no final norm at .base_model.norm; the "
                         "feature head supports Llama/Qwen-style decoders")
    eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
    return (target.get_input_embeddings().weight, target.get_output_embeddings().weight, norm.weight.detach(), eps)


def target_features(target, ids) -> "np.ndarray":
    """(T, H) float32 last hidden states (after the final norm) of one teacher-forced target forward over ``ids``."""
    import torch

    with torch.inference_mode():
        dev = target.get_input_embeddings().weight.device
        out = target.base_model(input_ids=torch.as_tensor(np.asarray(ids, dtype=np.int64), device=dev)[None],
                                use_cache=False)
    return out.last_hidden_state[0].float().cpu().numpy()


# ----------------------------------------------------------------- the draft
class HeadDraft(Draft):
    """The feature-head draft (see the module docstring); needs the target's features at verified positions.

    Parameters
    ----------
    target : transformers causal LM -- the target it reads embeddings, lm_head rows and final norm from
    state : dict -- the head's trained parameters (``torch`` state dict) and ``"vocab"`` (|S|,) int64 ids
    base : ndarray (V,) float64 -- the floor law b, > 0 on all V, sum 1
    config : HeadConfig
    vocab : dict, optional -- the tokenizer's token -> id map (checked against the target's)
    """

    kind = "head"
    needs_target_features = True

    def __init__(self, target, state: dict, base: np.ndarray, config: HeadConfig = HeadConfig(),
                 vocab: dict | None = None, name: str | None = None):
        import torch

        emb, lm, normw, eps = _parts(target)
        self.vocab_size = int(lm.shape[0])
        self.target_key = target_fingerprint(target)
        base = np.asarray(base, dtype=np.float64)
        if base.shape != (self.vocab_size,) or not np.all(np.isfinite(base)) or base.min() <= 0:
            raise ValueError(f"head draft: floor law must be ({self.vocab_size},) finite and > 0, got shape "
                             f"{base.shape}")
        self.base = base / base.sum()
        self.config, self._vocab = config, vocab
        self.S = torch.as_tensor(np.asarray(state["vocab"], dtype=np.int64))
        if self.S.numel() == 0 or int(self.S.min()) < 0 or int(self.S.max()) >= self.vocab_size:
            raise ValueError("head draft: its sub-vocabulary lies outside the target's vocabulary; rebuild it")
        H = int(emb.shape[1])
        self.H = H
        self.head = _head_module(H, config.hidden, normw.float().cpu(), eps)   # the head runs on the CPU
        self.head.load_state_dict({k: torch.as_tensor(v) for k, v in state.items() if k != "vocab"})
        self.head.eval()
        self.emb = emb
        self.W_S = lm.detach()[self.S.to(lm.device)].float().cpu()   # (|S|, H) rows of the target's lm_head
        self.name = name or "head:" + ",".join(f"{k}={v}" for k, v in asdict(config).items()
                                               if k in ("tokens", "vocab", "hidden"))
        self.weights = int(sum(p.numel() for p in self.head.parameters()) + self.W_S.numel())
        self.context_length = getattr(getattr(target, "config", None), "max_position_embeddings", None)

    def tokenizer_vocab(self):
        return self._vocab

    def check_target(self, target) -> None:
        """ValueError unless ``target`` is the model this head was built on (its embeddings and lm_head rows)."""
        try:
            same = target_fingerprint(target) == self.target_key
        except ValueError:
            same = False
        if not same:
            raise ValueError("head draft: it was built on another target model (it reads that model's embeddings "
                             "and lm_head rows); build the head draft with this target (make_draft('head', "
                             "target=..., tokenizer=...))")

    def laws(self, f, tokens) -> tuple:
        """Next-token laws and predicted features.

        Parameters
        ----------
        f : torch.Tensor (B, H) float32 -- features of the positions before ``tokens``
        tokens : sequence of int, length B

        Returns
        -------
        q : ndarray (B, V) float64, rows summing to 1, > 0 on all V
        f_hat : torch.Tensor (B, H) float32 -- predicted features of the ``tokens`` positions
        """
        import torch

        with torch.inference_mode():
            e = self.emb[torch.as_tensor(np.asarray(tokens, dtype=np.int64), device=self.emb.device)].float().cpu()
            f_hat = self.head(f.float().cpu(), e)
            qs = torch.softmax((f_hat @ self.W_S.T).double(), dim=-1).numpy()  # q_S = softmax(W_lm[S] f_hat), float64
        fl = float(self.config.floor)
        q = np.tile(fl * self.base, (len(qs), 1))                           # floor * b
        q[:, self.S.numpy()] += (1.0 - fl) * qs                             # + (1 - floor) q_S on S
        return q, f_hat

    def session(self, sampling: SamplingConfig) -> DraftSession:
        return _HeadSession(self, sampling)


class _HeadSession(DraftSession):
    needs_target_features = True

    def __init__(self, draft: HeadDraft, sampling: SamplingConfig):
        super().__init__(draft.vocab_size, sampling)
        self.draft = draft
        self.feature = None          # (1, H) target feature before the last committed token
        self.fhat: dict = {}         # node -> (1, H) predicted feature

    def observe_target(self, feature) -> None:
        """The engine's hook: ``feature`` (H,) = the target's last hidden state at the position before the
        last committed token (the last accepted node, or the last token before the tree)."""
        import torch

        f = torch.as_tensor(np.asarray(feature, dtype=np.float32))
        if f.numel() != self.draft.H:
            raise ValueError(f"head draft: observe_target got a feature of shape {tuple(f.shape)}, expected "
                             f"({self.draft.H},): the target's last hidden state at one position")
        self.feature = f.reshape(1, -1)

    def _level(self, ids, tree, nodes):
        self.calls += 1
        if nodes == [ROOT]:
            self.fhat = {}
            if self.feature is None:                    # before the first target pass: the floor law b
                return self._processed(self.draft.base[None])
            q, fh = self.draft.laws(self.feature, [ids[-1]])
            self.fhat[ROOT] = fh
            return self._processed(q)
        import torch

        par = [tree.parent[i] for i in nodes]
        if any(p not in self.fhat for p in par):        # the root had no feature yet: floor law below it too
            return self._processed(np.tile(self.draft.base, (len(nodes), 1)))
        f = torch.cat([self.fhat[p] for p in par], dim=0)
        q, fh = self.draft.laws(f, [tree.tokens[i] for i in nodes])
        for j, i in enumerate(nodes):
            self.fhat[i] = fh[j:j + 1]
        return self._processed(q)

    def _processed(self, q):
        s = self.sampling
        if s.temperature == 1 and s.top_k == 0 and s.top_p == 1:
            return q
        return process_logits(np.log(q), s)              # the target's temperature / top-k / top-p


# ----------------------------------------------------------------- build: features -> trained head, cached
def _digest(arrays: dict) -> str:
    """sha256 over the arrays' names, dtypes, shapes and bytes, in sorted key order."""
    h = hashlib.sha256()
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _load_checked(path: Path):
    """The arrays of ``path`` (dict) when it reads and its embedded sha256 matches, else None (rebuild)."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        want = str(arrays.pop("sha256"))
    except Exception:   # truncated / not an npz / no checksum: a cache miss, never an error
        return None
    return arrays if want == _digest(arrays) else None


def _save_checked(path: Path, arrays: dict) -> None:
    """Write ``arrays`` and their sha256 in ONE file, atomically (a kill leaves the old file or the new one)."""
    _save_arrays(path, {**arrays, "sha256": np.array(_digest(arrays))})


def target_fingerprint(target) -> str:
    """sha256 of the target's config and a strided sample of its lm_head and embedding weights."""
    emb, lm, normw, _ = _parts(target)
    h = hashlib.sha256(json.dumps(target.config.to_dict(), sort_keys=True, default=str).encode())
    for w in (emb, lm, normw):
        flat = w.detach().reshape(-1)
        h.update(flat[:: max(1, flat.numel() // 4096)].float().cpu().numpy().tobytes())
        h.update(str(tuple(w.shape)).encode())
    return h.hexdigest()


def collect_features(target, streams, config: HeadConfig, *, progress: bool = True, have: dict | None = None,
                     save=None) -> dict:
    """Teacher-forced target forwards over ``config.tokens`` corpus tokens in chunks of ``seq_len``.

    The chunks are the corpus's consecutive ``seq_len``-token pieces in a seeded order (``config.seed``), so a
    build of more tokens starts with the chunks of a smaller one.  ``have``: features collected before (a dict
    as returned), reused where its chunks are this build's first ones; ``save(dict)``: called with what is
    done every 16 chunks (a killed build keeps its work).

    Returns dict ``ids`` (C, seq_len) int64, ``feats`` (C, seq_len, H) float16 (features after the final
    norm), C = ceil(tokens / seq_len) or every chunk the corpus has, and ``complete`` (0-d bool: the latter).  Raises ValueError when no corpus file
    holds ``seq_len`` tokens.
    """
    from tqdm.auto import tqdm

    L = config.seq_len
    chunks = [s[i:i + L] for s in streams for i in range(0, s.size - L + 1, L)]
    if not chunks:
        raise ValueError(f"head draft: no corpus file holds {L} tokens; lower seq_len or give a larger corpus")
    order = np.random.default_rng(config.seed).permutation(len(chunks))
    n = min(len(chunks), -(-config.tokens // L))
    ids = np.stack([chunks[i] for i in order[:n]]).astype(np.int64)
    feats = []
    if have is not None:
        k = min(len(have["ids"]), n)
        if np.array_equal(have["ids"][:k], ids[:k]):
            feats = list(have["feats"][:k])
    for row in tqdm(ids[len(feats):], desc="head draft: target features", unit="chunk", initial=len(feats),
                    total=n, disable=not progress, file=sys.stderr):
        feats.append(target_features(target, row).astype(np.float16))
        if save is not None and len(feats) % 16 == 0 and len(feats) < n:
            save({"ids": ids[:len(feats)], "feats": np.stack(feats), "complete": np.array(False)})
    return {"ids": ids, "feats": np.stack(feats), "complete": np.array(n == len(chunks))}


def _save_arrays(path: Path, arrays: dict) -> None:
    from .._io import atomic_write_with

    atomic_write_with(path, lambda fh: np.savez(fh, **arrays))


def evaluate_head(head, pairs, lm, S, base, floor: float) -> dict:
    """Held-out single-draft acceptance of the head at temperature 1, against the target's FULL law.

    ``pairs`` = (f_prev (N, H), e (N, H), f_next (N, H)) float32; ``lm`` (V, H) the target's lm_head; ``S``
    (|S|,) int64; ``base`` (V,) float64 the floor law.  Returns ``accept`` = mean over positions of
    sum_V min(p, q) (p = softmax(lm f_next), q the draft law, both over all V), ``top1`` = arg-max agreement,
    ``positions`` = N.
    """
    import torch

    W = lm.detach().float().cpu()
    b = torch.as_tensor(base, dtype=torch.float32)
    acc, top1 = [], []
    with torch.no_grad():
        for s in range(0, pairs[0].shape[0], 256):
            fh = head(pairs[0][s:s + 256], pairs[1][s:s + 256])
            p = torch.softmax(pairs[2][s:s + 256] @ W.T, -1)                 # p = softmax(W_lm f_i), all V
            q = floor * b.expand_as(p).clone()
            q[:, S] += (1 - floor) * torch.softmax(fh @ W[S].T, -1)          # q = floor b + (1 - floor) q_S
            acc.append(torch.minimum(p, q).sum(-1))                          # sum_V min(p, q)
            top1.append((p.argmax(-1) == q.argmax(-1)).float())
    return {"accept": float(torch.cat(acc).mean()), "top1": float(torch.cat(top1).mean()),
            "positions": int(pairs[0].shape[0])}


def train_head(target, data: dict, S: np.ndarray, config: HeadConfig, base: np.ndarray, *,
               progress: bool = True) -> tuple:
    """Fit the head on (f_{i-1}, x_i) -> f_i over the collected chunks; last 10 % of chunks held out.

    Returns ``(state, report)``: the state dict (numpy arrays, ``"vocab"`` = S) and the held-out figures of
    :func:`evaluate_head` (``held_out`` False when there was one chunk only: then measured on the training set).
    """
    import torch
    from tqdm.auto import tqdm

    emb, lm, normw, eps = _parts(target)
    H = int(emb.shape[1])
    torch.manual_seed(config.seed)
    head = _head_module(H, config.hidden, normw.float().cpu(), eps)
    St = torch.as_tensor(S, dtype=torch.long)
    W_S = lm.detach()[St.to(lm.device)].float().cpu()
    ids = torch.as_tensor(data["ids"])
    F = torch.as_tensor(data["feats"]).float()
    C = ids.shape[0]
    n_val = max(1, C // 10) if C > 1 else 0

    def pairs(rows):
        f_prev = F[rows, :-1].reshape(-1, H)                 # f_{i-1}
        x = ids[rows, 1:].reshape(-1)                        # x_i
        f_next = F[rows, 1:].reshape(-1, H)                  # f_i
        with torch.no_grad():
            e = emb.detach()[x.to(emb.device)].float().cpu()
        return f_prev, e, f_next

    tr = pairs(list(range(C - n_val))) if C - n_val > 0 else pairs(list(range(C)))
    va = pairs(list(range(C - n_val, C))) if n_val else tr
    opt = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=0.0)
    N, B = tr[0].shape[0], 256
    steps = config.epochs * -(-N // B)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=config.lr, total_steps=steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(config.seed)
    bar = tqdm(total=steps, desc="head draft: training", unit="step", disable=not progress, file=sys.stderr)
    head.train()
    for _ in range(config.epochs):
        perm = torch.randperm(N, generator=gen)
        for s in range(0, N, B):
            b = perm[s:s + B]
            f, e, y = tr[0][b], tr[1][b], tr[2][b]
            fh = head(f, e)
            with torch.no_grad():
                p = torch.softmax(y @ W_S.T, dim=-1)         # p_S: the target's law restricted to S
            logq = torch.log_softmax(fh @ W_S.T, dim=-1)
            loss = -(p * logq).sum(-1).mean() + torch.nn.functional.smooth_l1_loss(fh, y)  # CE(p_S, q_S) + L1
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            bar.update(1)
    bar.close()
    head.eval()
    report = evaluate_head(head, va, lm, St, base, config.floor)
    report["held_out"] = bool(n_val)
    state = {k: v.detach().cpu().numpy() for k, v in head.state_dict().items()}
    state["vocab"] = np.asarray(S, dtype=np.int64)
    return state, report


def _check_options(opts) -> tuple[HeadConfig, object]:
    """(config, corpus) of head draft options; ValueError for an unknown option, a bad value or corpus."""
    from .ngram import corpus_options

    return corpus_options(opts, HeadConfig, "head")


def load_head(target, tokenizer, config: HeadConfig = HeadConfig(), *, corpus=None, cache: Path | None = None,
              progress: bool = True) -> HeadDraft:
    """The trained head draft for ``target``: built once (features, then training), cached, checksummed.

    Raises ValueError for a bad corpus (as :func:`resispec.decoding.ngram.load_counts`), a target without a
    final norm, or a sub-vocabulary larger than the corpus's distinct tokens allow.
    """
    from .fetch import cache_dir
    from .ngram import _tokenise, cache_key, corpus_files, default_corpus, load_counts, vocab_fingerprint

    V = int(target.get_output_embeddings().weight.shape[0])
    ctx = getattr(getattr(target, "config", None), "max_position_embeddings", None)
    if ctx is not None and config.seq_len > int(ctx):
        raise ValueError(f"head draft: seq_len={config.seq_len} exceeds the target's context of {ctx} tokens; "
                         f"give seq_len <= {ctx}")
    root = Path(corpus).expanduser() if corpus is not None else default_corpus()
    files = corpus_files(root)
    folder = Path(cache) if cache is not None else cache_dir() / "feature-draft"
    counts = load_counts(tokenizer, V, corpus=corpus, order=1, cache=folder if cache is not None else None,
                         progress=progress)
    distinct = int(np.count_nonzero(counts.unigram))
    if config.vocab > distinct:
        raise ValueError(f"head draft: vocab={config.vocab} exceeds the {distinct} distinct tokens of the corpus "
                         f"(target vocabulary {V}); lower vocab")
    base = (counts.unigram + 0.5) / (counts.unigram.sum() + 0.5 * V)          # add-delta unigram, > 0 on all V
    corpus_key = cache_key(files, root, vocab_fingerprint(tokenizer), V, 1)
    tkey = target_fingerprint(target)
    # one features file per (corpus, target, seq_len, seed): it only grows, a smaller build reads its first chunks
    fkey = hashlib.sha256(json.dumps({"format": FORMAT, "corpus": corpus_key, "target": tkey,
                                      "seq_len": config.seq_len, "seed": config.seed}).encode()).hexdigest()
    hkey = hashlib.sha256(json.dumps({"features": fkey, **asdict(config)}).encode()).hexdigest()
    hpath = folder / f"head-{hkey}.npz"
    z = _load_checked(hpath)
    if z is None:
        fpath = folder / f"features-{fkey}.npz"
        have = _load_checked(fpath)
        if have is not None:
            have = {"ids": have["ids"], "feats": have["feats"], "complete": have.get("complete", np.array(False))}
        want = -(-config.tokens // config.seq_len)
        if have is not None and (len(have["ids"]) >= want or bool(have["complete"])):
            data = {k: have[k][:want] for k in ("ids", "feats")}
        else:
            t0 = time.perf_counter()
            data = collect_features(target, _tokenise(files, tokenizer, progress), config, progress=progress,
                                    have=have, save=lambda d: _save_checked(fpath, d))
            _save_checked(fpath, data)
            if progress:
                print(f"head draft: {data['ids'].size} positions in {time.perf_counter() - t0:.0f} s -> {fpath}",
                      file=sys.stderr)
        S = np.argsort(-counts.unigram, kind="stable")[:config.vocab]       # the |S| most frequent tokens
        state, report = train_head(target, data, np.sort(S), config, base, progress=progress)
        _save_checked(hpath, {**state, "report": np.array(json.dumps(report))})
        if progress:
            print(f"head draft: held-out single-draft acceptance sum min(p, q) = {report['accept']:.3f}, top-1 agreement "
                  f"{report['top1']:.3f} over {report['positions']} positions -> {hpath}", file=sys.stderr)
        z = _load_checked(hpath)
    elif progress:
        print(f"head draft: loaded {hpath}", file=sys.stderr)
    state = {k: v for k, v in z.items() if k != "report"}
    return HeadDraft(target, state, base, config, tokenizer.get_vocab())


@register_draft("head", check=_check_options)
def _head_factory(opts, *, target=None, tokenizer=None, progress: bool = True, **_load):
    """``head[:tokens=98304,vocab=8192,hidden=2048,epochs=4,lr=0.001,floor=0.01,seed=0,corpus=PATH]``."""
    if tokenizer is None or target is None:
        raise ValueError("the head draft reads the target's features: pass target= and tokenizer=")
    cfg, corpus = _check_options(opts)
    return load_head(target, tokenizer, cfg, corpus=corpus, progress=progress)
