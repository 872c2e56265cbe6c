"""exactness: certify that a speculative verifier emits exactly the target's law.

Glossary (as in :mod:`resispec`): target ``p``, draft ``q``, candidate,
accepted index (stop position; -1 = residual), residual, acceptance rate,
TV (total variation), detectable TV (smallest bias found with the stated
power), cell (one (p, q, k, verifier) configuration).

The front door (``exactness.front_door``: picks the route below from what it is given)::

    certify(subject, *, budget=Budget(n=..., tv=...), run=Run(workers=..., time_limit=...), seed=0, **inputs)

The routes::

    certify_sampler(sample, law, n, *, alpha=1e-3, seed=0) -> Certificate
    certify_verifier(verifier, p, q, k, *, n=None, alpha=1e-3, seed=0, workers=1,
                     tv=None, sequential=False) -> Certificate   # tv= plans n; sequential: anytime-valid
    certify_counts(counts, p, q=None, k=None, *, alpha=1e-3) -> Certificate   # outputs collected elsewhere
    certify_samples(tokens, p, *, accepted=None, candidates=None, q=None, k=None, alpha=1e-3) -> Certificate
    certify_decoder(decoder, target, prompts, *, new_tokens=2, n=None, tv=None, alpha=1e-3, seed=0)  # exactness.decoder_cert
    certify_coupled(kernel, reference, p, q, k, *, n, alpha, seed, convention="resispec")  # exactness.coupled
    certify_stepwise(verifier, p, q, k, *, n=None, tv=None, alpha=1e-3, seed=0)  # declared steps, O(V) a state
    mutants.CATALOGUE  # name -> biased Verifier
    assert_exact(verifier, ...)  # AssertionError listing failing cells + p-values
    validate_proxy(proxy, p, q, k, *, n=None, seed=0) -> ProxyValidation  # a rejection-dependent proxy

Modules: :mod:`~exactness.gof` (pooled chi-square / G-test, TV bounds),
:mod:`~exactness.power` (detectable TV, sample-size planner),
:mod:`~exactness.budget` (``tv=``: planned n, timed pilot, refusals),
:mod:`~exactness.sequential` (anytime-valid e-process, its planner),
:mod:`~exactness.exact` (exact joint law), :mod:`~exactness.tree`
(two-token tree law), :mod:`~exactness.sampling` (vectorised Monte Carlo),
:mod:`~exactness.verifier_cert`, :mod:`~exactness.collected` (outputs already collected),
:mod:`~exactness.grid` (many cells,
multiple testing, calibration), :mod:`~exactness.mutants`,
:mod:`~exactness.strategies` (hypothesis), :mod:`~exactness.pytest_plugin`,
:mod:`~exactness.decoder` (whole decoders: multi-token laws),
:mod:`~exactness.decoder_events` (a decoder's reported node decisions: conditional checks), :mod:`~exactness.chain`
(serving-engine chain kernels), :mod:`~exactness.adapters` (Hugging Face ``generate``,
this project's engine), :mod:`~exactness.coupled` (kernel vs reference under the same coins),
:mod:`~exactness.stepwise` (a verifier's declared steps checked at every state a run visits).
"""

#: public name -> module that defines it; imported on first use, so ``import exactness`` (and
#: ``import exactness.limits``) stays light: scipy.stats alone costs about a second.
_PUBLIC = {
    "ExactnessWarning": "_checks", "SubjectError": "_checks",
    "Certificate": "certificate", "certify_sampler": "certificate",
    "certify_counts": "collected", "certify_samples": "collected",
    "certify_decoder": "decoder_cert",
    "chi2_power": "power", "detectable_tv": "power", "samples_for_tv": "power",
    "certify_verifier": "verifier_cert",
    "certify_coupled": "coupled",
    "assert_exact": "assertions", "assert_coupled": "assertions",
    "certify_stepwise": "stepwise", "StepwiseCertificate": "stepwise",
    "validate_proxy": "proxy_validation", "ProxyValidation": "proxy_validation",
    "certify": "front_door", "Budget": "front_door", "Run": "front_door",
}
#: submodules listed by ``dir(exactness)``; every submodule (``exactness.coupled``, ``exactness.decoder``, ...) is
#: reachable as an attribute without an explicit import.
_SUBMODULES = ("mutants", "strategies", "grid", "exact", "tree", "gof", "power", "sampling", "sequential", "budget",
               "stepwise", "limits", "protocols", "coupled", "decoder", "decoder_cert", "decoder_checks", "decoder_mutants", "certificate", "collected",
               "verifier_cert", "chain", "adapters", "engines", "settings", "front_door", "result")


def __getattr__(name):  # PEP 562: resolve a public name (or submodule) on first use
    import importlib
    import importlib.util

    if name in _PUBLIC:
        value = getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    if not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")  # a submodule (it binds itself on the package)
    raise AttributeError(f"module 'exactness' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC) | set(_SUBMODULES))


__all__ = ["Budget", "Run", "certify", "Certificate", "ExactnessWarning", "SubjectError", "assert_coupled", "assert_exact", "certify_counts", "certify_coupled", "certify_decoder",
           "certify_samples", "certify_sampler", "certify_stepwise", "certify_verifier", "chi2_power", "detectable_tv", "samples_for_tv", "validate_proxy"]
