"""One front door: ``exactness.certify(subject, ...)`` picks the certification route from what it is given.

Each route is a row of :data:`ROUTES` (a registry, not an if-chain): the keywords that select it, the subject it
takes, and the function that certifies.  How many draws is one :class:`Budget` (``n`` or ``tv``, fixed or
sequential, ``alpha``, ``power``); how they run is one :class:`Run` (``workers``, ``executor``, ``time_limit``);
both mean the same on every route, and a route that cannot honour a field refuses it (``ValueError`` naming the
route and the field) rather than ignoring it.  Every certificate returned has the shared names of
:mod:`exactness.result` (``passed``, ``outcome``, ``pvalue``, ``tv_estimate``, ``tv_upper``, ``detectable_tv``,
``n``, ``alpha``, ``checks``, ``summary()``); the engine route returns the audit's report (a table of such cells).

Routes, first match wins (``route=NAME`` picks one by name)::

    certify(counts=..., p=...)                          collected counts          -> exactness.certify_counts
    certify(tokens=..., p=...)                          collected tokens          -> exactness.certify_samples
    certify(kernel, reference=, p=, q=, k=, p_child=, q_child=)  tree kernel vs rule  -> certify_coupled_tree
    certify(kernel, reference=, p=, q=, k=)             kernel vs its reference   -> exactness.certify_coupled
    certify(decoder, target=, prompts=)                 a whole decoder           -> exactness.certify_decoder
    certify(verifier, pair=, branching=)                a tree-level rule         -> certify_tree_rule
    certify(verifier, pair=, L=)                        a path-level rule         -> certify_path
    certify(sample, law=)                               a sampler, ``sample(rng, m)``  -> exactness.certify_sampler
    certify(verifier, p=, q=, k=)                       a verifier declaring ``step_plan``  -> certify_stepwise
    certify(verifier, p=, q=, k=)                       any node verifier         -> exactness.certify_verifier
    certify("vllm") / certify(Engine())                 an inference engine       -> exactness.engines.audit.audit

Docs: ``docs/certify.md#one-front-door``.
"""

from __future__ import annotations

import importlib
import inspect
import math
from dataclasses import dataclass, fields
from typing import Callable


def _is_int(x) -> bool:
    from ._checks import is_int

    return is_int(x)


def _is_number(x) -> bool:
    from ._checks import is_number

    return is_number(x)


@dataclass(frozen=True)
class Budget:
    """How many draws a certificate may make; the same fields on every route.

    Attributes
    ----------
    n : int >= 1, optional        draws (samples, coupled draws, decoding steps, continuations per prompt)
    tv : float in (0, 1), optional  plan ``n`` so that this TV is detected with probability ``power``
    sequential : bool             anytime-valid sequential test (routes that have one: the node verifier)
    alpha : float in (0, 1)       level of the test (default 1e-3)
    power : float in (0, 1)       power the detectable TV is stated at (default 0.99)

    Raises ``ValueError`` naming the field for a value out of range.
    """

    n: int | None = None
    tv: float | None = None
    sequential: bool = False
    alpha: float = 1e-3
    power: float = 0.99

    def __post_init__(self):
        if self.n is not None:
            if not _is_int(self.n) or self.n < 1:
                raise ValueError(f"Budget.n must be an integer >= 1 (draws), got {self.n!r}")
            object.__setattr__(self, "n", int(self.n))          # numpy integers become a Python int
        for name in ("tv", "alpha", "power"):
            v = getattr(self, name)
            if v is None and name == "tv":
                continue
            if not _is_number(v) or not (math.isfinite(float(v)) and 0 < float(v) < 1):
                raise ValueError(f"Budget.{name} must be a number in (0, 1), got {v!r}")
            object.__setattr__(self, name, float(v))
        if not isinstance(self.sequential, bool):
            raise ValueError(f"Budget.sequential must be True or False, got {self.sequential!r}")


@dataclass(frozen=True)
class Run:
    """How the draws run; the same fields on every route.

    Attributes
    ----------
    workers : int >= 1              processes / threads drawing in parallel (routes that parallelise)
    executor : str                  ``"local"``, ``"process"`` or ``"ray"`` (``exactness.executors``)
    time_limit : float > 0, optional  seconds the certificate may take (the route's ``time_limit`` / ``timeout``)

    Raises ``ValueError`` naming the field for a value out of range.
    """

    workers: int = 1
    executor: str = "process"
    time_limit: float | None = None

    def __post_init__(self):
        if not _is_int(self.workers) or self.workers < 1:
            raise ValueError(f"Run.workers must be an integer >= 1, got {self.workers!r}")
        object.__setattr__(self, "workers", int(self.workers))
        from .executors import EXECUTORS

        if not isinstance(self.executor, str) or self.executor not in EXECUTORS:
            raise ValueError(f"Run.executor must be one of {sorted(EXECUTORS)} (exactness.executors), got "
                             f"{self.executor!r}")
        t = self.time_limit
        if t is not None:
            if not _is_number(t) or not (math.isfinite(float(t)) and t > 0):
                raise ValueError(f"Run.time_limit must be a positive number of seconds, got {t!r}")
            object.__setattr__(self, "time_limit", float(t))


def _has(name: str) -> Callable[[object], bool]:
    return lambda subject: callable(getattr(subject, name, None))


def _declares_steps(subject) -> bool:
    """A verifier for the stepwise route: it declares its steps (``step_plan``) and its ``verify`` takes the
    ``uniforms`` that route replays (an exact rule without ``uniforms=`` FAILed there; it goes to ``verifier``)."""
    from .sampling import takes_uniforms

    return callable(getattr(subject, "step_plan", None)) and takes_uniforms(subject)


def _is_engine(subject) -> bool:
    if isinstance(subject, str):
        from .engines.base import ENGINE_MODULES

        return subject in ENGINE_MODULES or ":" in subject
    from .engines.base import Engine

    return isinstance(subject, Engine)


@dataclass(frozen=True)
class Route:
    """One way to certify: ``function(subject?, *args, **optional)`` when every keyword of ``given`` is given and
    ``applies(subject)`` holds.

    ``function`` is ``"module:name"`` under ``exactness`` (imported on first use); ``args`` are passed in order
    (``"subject"`` is the subject); ``optional`` keywords are passed when given.
    """

    name: str
    function: str
    given: tuple
    args: tuple
    optional: tuple = ()
    applies: Callable[[object], bool] = staticmethod(lambda subject: subject is not None)
    what: str = ""

    def load(self):
        mod, _, attr = self.function.partition(":")
        return getattr(importlib.import_module(f"{__package__}.{mod}"), attr)


#: The routes, in the order they are tried (first match wins; ``route=NAME`` picks one).
ROUTES = (
    Route("counts", "collected:certify_counts", ("counts", "p"), ("counts", "p"), ("q", "k", "drafting"),
          applies=lambda s: s is None, what="token counts collected elsewhere"),
    Route("samples", "collected:certify_samples", ("tokens", "p"), ("tokens", "p"),
          ("accepted", "candidates", "q", "k", "drafting"), applies=lambda s: s is None,
          what="emitted tokens collected elsewhere"),
    Route("coupled_tree", "coupled.tree:certify_coupled_tree", ("reference", "p", "q", "p_child", "q_child", "k"),
          ("subject", "reference", "p", "q", "p_child", "q_child", "k"), ("convention",),
          what="a tree kernel against a registry rule under the same coins"),
    Route("coupled", "coupled:certify_coupled", ("reference", "p", "q", "k"), ("subject", "reference", "p", "q", "k"),
          ("convention",), what="a kernel against its reference rule under the same coins"),
    Route("decoder", "decoder_cert:certify_decoder", ("target", "prompts"), ("subject", "target", "prompts"),
          ("new_tokens",), what="a whole speculative decoder against its target"),
    Route("tree_rule", "pathlevel:certify_tree_rule", ("pair", "branching"), ("subject", "pair", "branching"),
          ("context",), what="a tree-level rule on a Markov pair"),
    Route("path", "pathlevel:certify_path", ("pair", "L"), ("subject", "pair", "L"), ("context",),
          what="a path-level (chain) rule on a Markov pair"),
    Route("sampler", "certificate:certify_sampler", ("law",), ("subject", "law"), (),
          what="a sampler sample(rng, m) -> (m,) tokens against a law"),
    Route("stepwise", "stepwise:certify_stepwise", ("p", "q", "k"), ("subject", "p", "q", "k"),
          applies=_declares_steps, what="a node verifier that declares its steps (step_plan) and takes uniforms="),
    Route("verifier", "verifier_cert:certify_verifier", ("p", "q", "k"), ("subject", "p", "q", "k"),
          applies=_has("verify"), what="a node verifier (verify)"),
    Route("engine", "engines.audit:audit", (), ("subject",),
          ("settings", "options", "new_tokens", "out", "models", "shrink", "workdir", "cell_seconds"),
          applies=_is_engine, what="an inference engine's speculative decoding (the audit)"),
)

#: Route keyword -> the names a route function may call it (the first it has wins).
_ALIASES = {"time_limit": ("time_limit", "timeout"), "n": ("n",), "tv": ("tv",), "sequential": ("sequential",),
            "alpha": ("alpha",), "power": ("power",), "workers": ("workers",), "executor": ("executor",)}
_INPUTS = sorted({x for r in ROUTES for x in r.given + r.args + r.optional} - {"subject"})


def routes_table() -> str:
    """The routes as a markdown table (route, selected by, subject, function); docs/certify.md embeds it."""
    rows = ["| route | selected by | subject | function |", "|---|---|---|---|"]
    for r in ROUTES:
        given = ", ".join(f"`{g}`" for g in r.given) or "the subject alone"
        rows.append(f"| `{r.name}` | {given} | {r.what} | `exactness.{r.function.replace(':', '.')}` |")
    return "\n".join(rows)


def _pick(subject, given: dict, route: str | None) -> Route:
    if route is not None:
        named = [r for r in ROUTES if r.name == route]
        if not named:
            raise ValueError(f"route={route!r} is not a route; routes: {', '.join(r.name for r in ROUTES)}")
        r = named[0]
        missing = [g for g in r.given if g not in given]
        if missing:
            raise ValueError(f"route {r.name!r} ({r.what}) needs {', '.join(missing)}")
        if not r.applies(subject):              # a subject the route would drop or could not run: never ignored
            what = "no subject" if subject is None else f"a {type(subject).__name__} subject"
            raise ValueError(f"route {r.name!r} ({r.what}) does not take {what}; leave out route= to pick the route "
                             "from what is given, or give the subject the route needs")
        return r
    for r in ROUTES:
        if all(g in given for g in r.given) and r.applies(subject):
            return r
    if isinstance(subject, str) and not given:
        from .engines.base import ENGINE_MODULES

        raise ValueError(f"{subject!r} is not an engine; engines: {', '.join(sorted(ENGINE_MODULES))}, or "
                         "'module:Class' (your own Engine); a registry verifier is certified as "
                         "certify(resispec.get_verifier(name), p=..., q=..., k=...)")
    have = ", ".join(sorted(given)) or "no keywords"
    raise ValueError(f"nothing to certify from a {type(subject).__name__} subject with {have}; give one of: "
                     + "; ".join(f"{r.name}: {', '.join(r.given) or 'an engine name or Engine'}" for r in ROUTES)
                     + " (exactness.front_door.ROUTES)")


def certify(subject=None, *, budget: Budget | None = None, run: Run | None = None, seed=0, route: str | None = None,
            **inputs):
    """Certify ``subject`` by the route that fits what is given (module docstring; ``ROUTES``).

    Parameters
    ----------
    subject : verifier, kernel, decoder, sampler callable, engine name / ``Engine``, or None (collected outputs)
    budget : Budget, optional      draws (default: each route's own default budget)
    run : Run, optional            workers, executor, time limit (default: each route's own)
    seed : int or numpy Generator  the draws' seed
    route : str, optional          a route of :data:`ROUTES` by name (else the first that fits)
    **inputs
        What the route takes: ``p``, ``q`` ((V,) or (B, V) float laws), ``k`` (int), ``reference`` (registry
        name or kernel), ``p_child`` / ``q_child``, ``target`` / ``prompts`` ((P, L) int64), ``pair`` / ``L`` /
        ``branching``, ``law`` ((V,) float), ``counts`` / ``tokens`` (int arrays), and each route's options
        (``convention``, ``new_tokens``, ``drafting``, ``context``, ``accepted``, ``candidates``; the engine's
        ``settings``, ``options``, ``out``, ``models``).

    Returns
    -------
    A certificate with the shared names of :mod:`exactness.result` (the engine route: its ``AuditReport``).

    Raises
    ------
    ValueError
        No route fits what was given; an input or a budget / run field the chosen route does not take (naming
        both); a ``Budget`` / ``Run`` field out of range; and whatever the route itself refuses.
    TypeError
        ``budget`` / ``run`` not a ``Budget`` / ``Run``.
    """
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget must be an exactness.Budget(n=..., tv=...), got {type(budget).__name__}")
    if run is not None and not isinstance(run, Run):
        raise TypeError(f"run must be an exactness.Run(workers=..., time_limit=...), got {type(run).__name__}")
    given = {k: v for k, v in inputs.items() if v is not None}
    r = _pick(subject, given, route)
    fn = r.load()
    params = inspect.signature(fn).parameters
    unused = sorted(set(given) - set(r.args) - set(r.optional))
    if unused:
        wrong = [u for u in unused if u not in _INPUTS and u not in params]
        hint = f" (not an input of any route: {', '.join(wrong)})" if wrong else ""
        takes = ", ".join(a for a in r.args if a != "subject") or "the subject alone"
        raise ValueError(f"route {r.name!r} ({r.what}) does not use {', '.join(unused)}{hint}; it takes {takes}"
                         + (f" and optionally {', '.join(r.optional)}" if r.optional else ""))
    args = [subject if a == "subject" else given[a] for a in r.args]
    kw = {a: given[a] for a in r.optional if a in given}
    if "seed" in params:
        kw["seed"] = seed
    elif not (_is_int(seed) and seed == 0):
        raise ValueError(f"route {r.name!r} ({r.what}) draws nothing, so it takes no seed")
    for obj, defaults in ((budget, Budget()), (run, Run())):
        for f in fields(defaults):
            value = getattr(obj, f.name) if obj is not None else getattr(defaults, f.name)
            if value == getattr(defaults, f.name):
                continue                                # left at its default: the route's own default holds
            target = next((a for a in _ALIASES[f.name] if a in params), None)
            if target is None:
                raise ValueError(f"route {r.name!r} ({r.what}) takes no {type(defaults).__name__}.{f.name}; leave "
                                 f"it at its default ({getattr(defaults, f.name)!r})")
            kw[target] = value
    if r.name == "sampler" and "n" not in kw:
        raise ValueError("route 'sampler' needs a number of draws: budget=exactness.Budget(n=...)")
    return fn(*args, **kw)
