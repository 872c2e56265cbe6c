"""One interface every audited engine implements; the audit loop (``exactness.engines.audit``) knows no engine.

Modelled on transformers' candidate-generator split: the loop asks an :class:`Engine` for three things -- its
own non-speculative law (``target``), a speculative ``decoder`` under the ``certify_decoder`` contract, and the
engine-format models (``prepare``) -- and certifies each (setting, speculative option) cell.  An engine module
registers itself with :func:`register_engine`; ``ENGINES`` maps the ``resispec audit NAME`` to the class.

Subject rules (``docs/certify.md#exit-codes``): anything the ENGINE does wrong while decoding (raises, hangs,
returns a token outside V, fewer tokens) is a FAIL naming the cause; ``EngineUnavailable`` (not installed, cannot
load the model, a sampling setting it does not implement) makes the cell INCONCLUSIVE with the cause, never a pass.
"""

from __future__ import annotations

from pathlib import Path

#: name -> Engine subclass, filled by :func:`register_engine` (engine modules are imported by name, lazily).
ENGINES: dict[str, type] = {}

#: name -> module that registers it (imported on first use so a missing engine costs nothing).
ENGINE_MODULES = {
    "transformers": "exactness.engines.transformers_engine",
    "onnxruntime-genai": "exactness.engines.ortgenai",
    "mlx-lm": "exactness.engines.mlxlm",
    "llama-cpp-python": "exactness.engines.llamacpp",
    "vllm": "exactness.engines.vllm_engine",
}


def module_found(name: str) -> bool:
    """Whether module ``name`` is installed here (found, not imported: an engine takes seconds to import).  A folder
    of that name in the current directory (``--out vllm``) is a namespace package with no code: not the engine."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):      # a dotted name whose parent is missing
        return False
    return spec is not None and spec.origin is not None and spec.origin != "namespace"


class EngineUnavailable(RuntimeError):
    """The engine cannot run this cell (not installed, model not loadable, setting unsupported): INCONCLUSIVE."""


def register_engine(name: str):
    """Class decorator: ``@register_engine("transformers")`` adds the class to :data:`ENGINES`."""
    def deco(cls):
        cls.name = name
        ENGINES[name] = cls
        return cls
    return deco


def get_engine(name: str) -> "Engine":
    """An instance of the registered engine ``name``, or of ``"module:Class"`` (a user's ``Engine`` subclass).

    Raises ``ValueError`` naming the known engines for an unknown name, or naming the module / class that does
    not load (a ``module:Class`` IMPORTS AND RUNS that module, found from the current directory first).
    """
    import importlib

    if ":" in name:
        import os
        import sys

        mod, _, attr = name.partition(":")
        if os.getcwd() not in sys.path:      # the current directory first, as --verifier / --decoder (and pytest)
            sys.path.insert(0, os.getcwd())
        from .._checks import passes_through

        try:
            cls = getattr(importlib.import_module(mod), attr)
        except (Exception, KeyboardInterrupt) as exc:  # the caller's module: a failure to load it is bad input
            if passes_through(exc):   # the user's Ctrl-C while it loads (not the module's own): it stops the run
                raise
            raise ValueError(f"engine {name!r} does not load: {type(exc).__name__}: {exc}") from None
        try:
            eng = cls() if isinstance(cls, type) else cls
        except (Exception, KeyboardInterrupt) as exc:   # its own KeyboardInterrupt too (no Ctrl-C came)
            if passes_through(exc):
                raise
            raise ValueError(f"engine {name!r} could not be constructed: {type(exc).__name__}: {exc}") from None
        if not isinstance(eng, Engine):
            raise ValueError(f"engine {name!r} is not an exactness.engines.base.Engine subclass or instance")
        return eng
    if name not in ENGINES and name in ENGINE_MODULES:
        importlib.import_module(ENGINE_MODULES[name])
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(sorted(ENGINE_MODULES))} "
                         "(resispec audit list says which are installed)")
    return ENGINES[name]()


class Engine:
    """Base class of an audited inference engine (subclass it and ``@register_engine(name)``).

    Class attributes
    ----------------
    name : str            registry key (set by :func:`register_engine`)
    distribution : str    the pip distribution whose version is reported (``importlib.metadata.version``)
    install : str         the command a user runs to install it (shown by ``resispec audit list`` and in docs/audit.md)
    order : str           key of ``exactness.settings.ORDERS``: the engine's documented order of operations
    supported : frozenset[str]   ``SamplingSettings`` fields the engine implements (others: INCONCLUSIVE cell)
    options : dict[str, str]     speculative options: name -> one-line description (``draft``, ``ngram``, ...)
    formats : tuple[str, ...]    model formats :meth:`prepare` takes: ``"hf"`` (a Hugging Face folder) and/or
                                 ``"gguf"`` (a GGUF file, ``TinyModels.gguf``)
    """

    name = "?"
    distribution = "?"
    install = "?"
    order = "?"
    supported: frozenset = frozenset()
    options: dict = {}
    formats: tuple = ("hf",)

    def missing(self) -> str | None:
        """None when the engine imports here; else why not and how to install it."""
        found = module_found(self.distribution.replace("-", "_"))
        return None if found else f"{self.distribution} is not installed: {self.install}"

    def version(self) -> str:
        """The installed version of :attr:`distribution` (``"not installed"`` if absent)."""
        from importlib import metadata

        try:
            return metadata.version(self.distribution)
        except metadata.PackageNotFoundError:
            return "not installed"

    def prepare(self, models, workdir: Path):
        """Convert the shared tiny checkpoints (``exactness.engines.tiny.TinyModels``) to the engine's format.

        Returns an engine-specific handle passed back to :meth:`target` and :meth:`decoder`.  Raises
        :class:`EngineUnavailable` when the engine cannot load them.
        """
        raise NotImplementedError

    def target(self, handle, settings, prompt_len: int):
        """The engine's OWN non-speculative law: ``target(contexts (B, L) int64) -> (B, V) float64``.

        ``contexts[:, :prompt_len]`` is the prompt, the rest the tokens generated so far (penalties and
        min-new-tokens depend on the split).  Rows sum to 1.
        """
        raise NotImplementedError

    def decoder(self, handle, settings, option: str):
        """The engine's speculative decoder for ``option`` under the ``exactness.certify_decoder`` contract.

        ``decoder(prompt (L,) int64, new_tokens, rng) -> (new_tokens,) int64`` or an object with
        ``sample(prompts (B, L), new_tokens, rng) -> (B, new_tokens)``; every request seeded from ``rng``.
        """
        raise NotImplementedError

    def check_settings(self, settings) -> None:
        """Raise :class:`EngineUnavailable` naming the settings this engine does not implement."""
        extra = sorted(set(settings.active()) - set(self.supported))
        if extra:
            raise EngineUnavailable(f"{self.name} does not implement {', '.join(extra)} "
                                    f"(it implements {', '.join(sorted(self.supported))})")
