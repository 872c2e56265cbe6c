"""Planted engine bugs: the 2026 bug classes, planted INSIDE a real engine, that ``resispec audit --plant`` must FAIL.

Each entry patches the engine's own code for the duration of one decoder call (nothing outside the call sees it),
so the audit runs the real engine with one line of it wrong -- a negative control of the audit's power:

=========================  ============================================================================  ==========
bug                        what is planted (transformers 5.x ``generate``, assisted decoding)            class
=========================  ============================================================================  ==========
``argmax_draft``           the assistant drafts greedily (``do_sample=False``) while verification       draft law
                           still scores each candidate with q = softmax(assistant scores)
``verifier_temperature``   the verifier's target logits are multiplied back by T: its temperature is    settings
                           hard-coded to 1 on verified positions only (plain steps keep T)
``first_draft_unverified`` the first drafted token of every round is committed without verification     commit
                           (its target law replaced by the draft's, so min(1, p/q) = 1)
``bias_dropped_verified``  the logit bias is removed from the target logits on verified positions       settings
                           only (the bonus and plain steps keep it)
=========================  ============================================================================  ==========

:func:`planted` wraps a registered engine; only options that verify drafts (``draft``) exercise the
verification patches.  These are engine-level twins of the decoder-level catalogue
(``exactness/decoder_mutants.py``), whose bugs have exact-law tests.
"""

from __future__ import annotations

import contextlib

from .base import Engine, EngineUnavailable, get_engine


@contextlib.contextmanager
def _patch(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _hf_verifier(transform):
    """Patch transformers' ``_speculative_sampling``: ``new_logits = transform(new_logits, candidate_logits, k)``."""
    import transformers.generation.utils as U

    orig = U._speculative_sampling

    def patched(candidate_input_ids, candidate_logits, candidate_length, new_logits, *a, **k):
        new_logits = transform(new_logits.clone(), candidate_logits, candidate_length)
        return orig(candidate_input_ids, candidate_logits, candidate_length, new_logits, *a, **k)

    return _patch(U, "_speculative_sampling", patched)


def _hf_argmax_draft(settings):
    import transformers.generation.candidate_generator as C

    orig = C.AssistedCandidateGenerator.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        self.generation_config.do_sample = False  # the draft is an argmax; its q is still softmax(scores)

    return _patch(C.AssistedCandidateGenerator, "__init__", init)


def _hf_verifier_temperature(settings):
    T = settings.temperature

    def f(new, cand, k):
        new[:, :k] = new[:, :k] * T  # l / T * T = l: T = 1 on the verified positions only
        return new
    return _hf_verifier(f)


def _hf_first_unverified(settings):
    def f(new, cand, k):
        new[:, 0] = cand[:, 0]  # p = q at the first drafted position: always accepted
        return new
    return _hf_verifier(f)


def _hf_bias_dropped(settings):
    T = settings.temperature

    def f(new, cand, k):
        for t, b in settings.logit_bias:
            new[:, :k, t] -= b / T  # the bias, added before the temperature, removed on verified positions
        return new
    return _hf_verifier(f)


#: engine -> the options whose decoding runs the patched code (the others would pass untouched: refused)
EXERCISED = {"transformers": ("draft",)}

#: engine -> bug -> (patch factory taking the settings, one-line description)
PLANTED = {
    "transformers": {
        "argmax_draft": (_hf_argmax_draft, "greedy draft scored with a softmax q"),
        "verifier_temperature": (_hf_verifier_temperature, "verifier temperature hard-coded to 1"),
        "first_draft_unverified": (_hf_first_unverified, "first drafted token committed unverified"),
        "bias_dropped_verified": (_hf_bias_dropped, "logit bias dropped on verified positions"),
    },
}


class _PlantedDecoder:
    def __init__(self, decoder, patch):
        self.decoder, self.patch = decoder, patch
        self.no_events_reason = getattr(decoder, "no_events_reason", "planted engine bug")

    def __call__(self, prompt, new_tokens, rng):
        with self.patch():
            return self.decoder(prompt, new_tokens, rng)


class PlantedEngine(Engine):
    """``engine`` with ``bug`` planted in its speculative decoder (its law is the unpatched engine's)."""

    def __init__(self, engine: Engine, bug: str):
        bugs = PLANTED.get(engine.name, {})
        if bug not in bugs:
            raise ValueError(f"no planted bug {bug!r} for {engine.name}; known: {', '.join(bugs) or 'none'}")
        self.base, self.bug = engine, bug
        self.factory = bugs[bug][0]
        self.name = f"{engine.name}+{bug}"
        for attr in ("distribution", "install", "order", "supported", "law_source", "formats", "context"):
            if hasattr(engine, attr):
                setattr(self, attr, getattr(engine, attr))
        run = ("off",) + EXERCISED.get(engine.name, tuple(engine.options))   # off: the unpatched control
        self.options = {o: d + (f" (planted: {bugs[bug][1]})" if o != "off" else "")
                        for o, d in engine.options.items() if o in run}

    def missing(self):
        return self.base.missing()

    def version(self):
        return self.base.version()

    def prepare(self, models, workdir):
        return self.base.prepare(models, workdir)

    def target(self, handle, settings, prompt_len):
        return self.base.target(handle, settings, prompt_len)

    def decoder(self, handle, settings, option):
        dec = self.base.decoder(handle, settings, option)
        return _PlantedDecoder(dec, lambda: self.factory(settings))

    def check_settings(self, settings):
        self.base.check_settings(settings)
        if self.bug == "bias_dropped_verified" and not settings.logit_bias:
            raise EngineUnavailable("bias_dropped_verified needs a logit_bias setting")


def planted(engine, bug: str) -> PlantedEngine:
    """The registered ``engine`` (name or instance) with ``bug`` of :data:`PLANTED` planted."""
    return PlantedEngine(get_engine(engine) if isinstance(engine, str) else engine, bug)
