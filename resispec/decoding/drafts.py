"""The draft interface: anything that maps a tree level of contexts to draft laws q.

Speculative decoding needs from its draft only the law ``q`` of the next
token at each drafted node; the verifier's per-node lemma holds for ANY q
(``docs/RESISPEC.md`` section 2), so exactness never depends on which draft
is used -- only speed does.  A :class:`Draft` is the factory (built once per
target); :meth:`Draft.session` gives a :class:`DraftSession` for one decode,
which the engine asks level by level::

    s = draft.session(sampling)
    q = s.level(ids, tree, [ROOT])          # (1, V) float64: the root's law
    q = s.level(ids, tree, new_nodes)       # (B, V): one row per node of the next depth
    s.commit(ids, tree, accepted_path)      # after verification (KV pruning etc.)

The context of node ``i`` is ``ids + [tree.tokens[a] for a in tree.ancestors(i)]``
(``ROOT`` = ``ids``).  Every row is checked (finite, non-negative, summing to
1 within 1e-6, then renormalised in float64) before a candidate is drawn from it.
Each session keeps its own cost: ``levels`` (level calls), ``calls`` (draft
model forwards, or level calls for a model-free draft) and ``seconds``.

Implementations are registered by kind (:func:`register_draft`, no
if-chains): ``model`` (a transformers causal LM sharing the target's
tokenizer, :class:`ModelDraft`), ``ngram`` (:mod:`.ngram`, a smoothed
n-gram over the target's own tokenizer, built from the Python standard library)
and ``head`` (:mod:`.feature`, an EAGLE-style head that reads the target's own
features: its sessions set ``needs_target_features`` and the engine calls
``observe_target`` after every verification).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Callable

import numpy as np

from .laws import SamplingConfig, process_logits
from .tree import ROOT, DraftTree

from .._validation import SUM_TOL  # noqa: E402  (tolerance on a draft law's row sums before it is renormalised)


class DraftSession(ABC):
    """One decode's drafting state and cost.

    Attributes
    ----------
    levels : int
        :meth:`level` calls (drafted tree levels, roots included).
    calls : int
        Draft forward passes (a model-free draft counts one per level).
    seconds : float
        Wall-clock time spent inside :meth:`level` (seconds).
    """

    def __init__(self, vocab_size: int, sampling: SamplingConfig):
        self.vocab_size = int(vocab_size)
        self.sampling = sampling
        self.levels = 0
        self.calls = 0
        self.seconds = 0.0

    def level(self, ids: list, tree: DraftTree, nodes: list) -> np.ndarray:
        """Draft laws of a batch of nodes of equal depth.

        Parameters
        ----------
        ids : list of int -- the committed tokens (prompt + emitted)
        tree : DraftTree -- the tree drafted so far this step
        nodes : list of int -- ``[ROOT]`` or node ids of one depth

        Returns
        -------
        ndarray, shape (len(nodes), V), float64 -- checked and renormalised rows

        Raises
        ------
        ValueError
            The implementation returned a wrong shape, NaN/inf, negative mass
            or rows not summing to 1.
        """
        t0 = time.perf_counter()
        q = self._level(ids, tree, list(nodes))
        self.seconds += time.perf_counter() - t0
        self.levels += 1
        return check_draft_laws(q, len(nodes), self.vocab_size, type(self).__name__)

    @abstractmethod
    def _level(self, ids: list, tree: DraftTree, nodes: list) -> np.ndarray:
        """(len(nodes), V) laws; see :meth:`level`."""

    def commit(self, ids: list, tree: DraftTree, path: list) -> None:
        """Called after verification with the committed ``ids`` (before extension) and the accepted node path."""

    #: True for a draft that reads the target's features (:mod:`.feature`): the engine then keeps the target's
    #: last hidden states and calls :meth:`observe_target` after every verification, before :meth:`commit`.
    needs_target_features = False

    def observe_target(self, feature) -> None:
        """``feature`` (H,) float32: the target's last hidden state (after its final norm) at the position
        before the next token to be fed (the last accepted node, or the tree's root when none was accepted)."""


class Draft(ABC):
    """A draft over the target's vocabulary (factory of :class:`DraftSession`).

    Attributes
    ----------
    kind : str -- registry kind
    name : str -- label for reports
    vocab_size : int -- size V of the laws it returns
    weights : int or None -- the draft's parameter count, its size in the memory-bound speed-up (Jeon et
        al., arXiv 2402.14160, take model sizes); every tensor once, the input embedding table included
        although a forward reads only a few of its rows; 0 for a draft with no weights (an n-gram table
        lookup), None unknown
    """

    kind = "abstract"
    name = "draft"
    vocab_size = 0
    context_length: int | None = None
    weights: int | None = None

    @abstractmethod
    def session(self, sampling: SamplingConfig) -> DraftSession:
        """A fresh session for one decode, applying ``sampling`` to its laws."""

    def tokenizer_vocab(self) -> dict | None:
        """The token -> id map the draft was built with (None: unknown; checked when known)."""
        return None


def count_weights(model) -> int:
    """Parameter count of a torch module (its size), each shared tensor (tied embeddings) counted once; an
    untied input embedding table counts in full (a forward reads only a few of its rows)."""
    return int(sum(p.numel() for p in model.parameters()))  # Module.parameters() yields a tied tensor once


def check_draft_laws(q, rows: int, vocab: int, who: str) -> np.ndarray:
    """Validate (rows, V) draft laws; returns them as float64, each row renormalised.

    Raises ValueError naming ``who`` for a wrong shape, NaN/inf, negative
    mass, or a row sum off 1 by more than :data:`SUM_TOL`.
    """
    q = np.asarray(q, dtype=np.float64)
    if q.shape != (rows, vocab):
        raise ValueError(f"draft {who} returned laws of shape {q.shape}, expected ({rows}, {vocab}): one law over "
                         "the target's vocabulary per node")
    if not np.all(np.isfinite(q)):
        raise ValueError(f"draft {who} returned a law with NaN or inf mass; a draft law must be finite")
    if q.min() < 0:
        raise ValueError(f"draft {who} returned a law with negative mass ({q.min():.3g}); probabilities are >= 0")
    s = q.sum(axis=1)
    bad = np.flatnonzero(np.abs(s - 1.0) > SUM_TOL)
    if bad.size:
        raise ValueError(f"draft {who} returned a law summing to {s[bad[0]]!r} (row {bad[0]}); draft laws must be "
                         "normalised (sum 1)")
    return q / s[:, None]


# ----------------------------------------------------------------- the transformers draft
class ModelDraft(Draft):
    """A transformers causal LM as draft: one batched forward per tree level, KV cache reused.

    ``model`` must share the target's tokenizer (checked by
    :func:`resispec.decoding.engine.check_pair`).
    """

    kind = "model"

    def __init__(self, model, name: str = "model", tokenizer=None):
        self.model = model
        self.name = str(name)
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.context_length = getattr(model.config, "max_position_embeddings", None)
        self._tokenizer = tokenizer
        self.weights = count_weights(model)

    def tokenizer_vocab(self):
        return None if self._tokenizer is None else self._tokenizer.get_vocab()

    def session(self, sampling):
        return _ModelSession(self, sampling)


class _ModelSession(DraftSession):
    def __init__(self, draft: ModelDraft, sampling):
        from .kv import CachedModel

        super().__init__(draft.vocab_size, sampling)
        self.Q = CachedModel(draft.model)
        self.fed: list[int] = []
        self.n_pend = 0

    def _level(self, ids, tree, nodes):
        Q = self.Q
        if nodes == [ROOT]:
            pend = ids[Q.length:]
            n = len(pend)
            logits = Q.forward(pend, np.arange(Q.length, len(ids)), np.tril(np.ones((n, n), dtype=bool)))[-1:]
            self.fed, self.n_pend = [], n
        else:
            # visibility of [fed tree nodes | new nodes]; the pending tokens are all visible
            vis = np.concatenate([np.ones((len(nodes), self.n_pend), dtype=bool),
                                  tree.visibility(nodes, self.fed + nodes)], axis=1)
            logits = Q.forward([tree.tokens[i] for i in nodes], [len(ids) - 1 + tree.depth[i] for i in nodes], vis)
            self.fed.extend(nodes)
        self.calls = Q.calls
        return process_logits(logits, self.sampling)

    def commit(self, ids, tree, path):
        Q = self.Q
        Q.commit(list(range(len(ids) - Q.length)) + [len(ids) - Q.length + self.fed.index(i) for i in path
                                                      if i in self.fed])


# ----------------------------------------------------------------- registry
#: kind -> factory(options: dict, *, target, tokenizer, **load) -> Draft
DRAFT_KINDS: dict[str, Callable] = {}
#: kind -> check(options: dict) raising ValueError, without loading or building anything
DRAFT_CHECKS: dict[str, Callable] = {}


#: Modules that register built-in draft kinds on import (loaded on first lookup: no import cycle).
BUILTIN_KIND_MODULES = ("resispec.decoding.ngram", "resispec.decoding.feature")


def _load_builtin_kinds() -> None:
    import importlib

    for mod in BUILTIN_KIND_MODULES:
        importlib.import_module(mod)


def register_draft(kind: str, check: Callable | None = None):
    """Decorator registering a draft factory under ``kind`` (a ValueError if taken).

    ``check(options)``: optional cheap validation run by :func:`check_draft_spec`.
    """
    def deco(factory):
        if kind in DRAFT_KINDS:
            raise ValueError(f"draft kind {kind!r} is already registered")
        DRAFT_KINDS[kind] = factory
        if check is not None:
            DRAFT_CHECKS[kind] = check
        return factory
    return deco


def check_draft_spec(spec: str) -> str:
    """Validate a draft spec without loading anything; returns its kind.

    Raises ValueError (a bad option, a missing corpus...) as the kind's check does.
    """
    kind, opts = parse_draft_spec(spec)
    if kind in DRAFT_CHECKS:
        DRAFT_CHECKS[kind](opts)
    return kind


def parse_draft_spec(spec: str) -> tuple[str, dict]:
    """``"ngram"`` / ``"ngram:order=4,prompt_weight=2"`` -> (kind, options); anything else is a model.

    A spec whose part before ``:`` is a registered kind other than ``model``
    names that kind; every other string is a model name or path (kind
    ``model``, option ``name``).  Option values are parsed as int, then float,
    else kept as strings.

    Raises ValueError for an empty spec or a malformed option.
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError("draft must be a non-empty string: a model name/path or a draft kind like 'ngram'")
    _load_builtin_kinds()
    kind, _, rest = spec.partition(":")
    if kind == "model" or kind not in DRAFT_KINDS:
        return "model", {"name": spec[len("model:"):] if kind == "model" else spec}
    opts = {}
    for item in rest.split(",") if rest else []:
        key, eq, val = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"draft {spec!r}: option {item!r} must be key=value (e.g. {kind}:name=value; docs/decoding.md lists each kind's options)")
        if key.strip() in opts:
            raise ValueError(f"draft {spec!r}: option {key.strip()!r} is given twice; give each option once")
        opts[key.strip()] = _value(val.strip())
    return kind, opts


def _value(s: str):
    for cast in (int, float):
        try:
            return cast(s)
        except ValueError:
            pass
    return s


def make_draft(spec, *, target=None, tokenizer=None, **load) -> Draft:
    """Build a draft from a spec string (see :func:`parse_draft_spec`), a Draft, or a transformers model.

    ``target``/``tokenizer``: the target model and its tokenizer (the n-gram
    draft is built over that tokenizer); ``load``: passed to the model loader.
    Raises ValueError for an unknown option (the factory names it).
    """
    if isinstance(spec, Draft):
        return spec
    if not isinstance(spec, str):
        return ModelDraft(spec)
    kind, opts = parse_draft_spec(spec)
    return DRAFT_KINDS[kind](opts, target=target, tokenizer=tokenizer, **load)


@register_draft("model")
def _model_factory(opts, *, target=None, tokenizer=None, **load):
    from .models import load_model

    unknown = set(opts) - {"name"}
    if unknown:
        raise ValueError(f"model draft takes no options {sorted(unknown)}")
    model, tok = load_model(opts["name"], **load)
    return ModelDraft(model, opts["name"], tok)


def as_draft(draft) -> Draft:
    """A Draft as is; a transformers model wrapped in :class:`ModelDraft`."""
    return draft if isinstance(draft, Draft) else ModelDraft(draft)

