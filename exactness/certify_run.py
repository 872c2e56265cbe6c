"""The ``resispec certify`` run: which cells, which mutants, in what budget.

Everything here is data: ``FAMILIES`` lists the pair families (synthetic at
small V, where exact enumeration fits, and the real n-gram pair),
``K_VALUES`` the candidate counts, ``MUTANT_KS`` the mutant panel.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field

import numpy as np

from ._checks import base_seed, ctrl_c, sub_seed
from .limits import CELL_TIMEOUT
from .grid import Cell, GridResult, adjust, run_grid
from .verifier_cert import certify_verifier

#: (family name, vocabulary size or None for a fixed-vocabulary family, family parameters).
#: Small V keeps exact enumeration in reach; ``shifted`` bumps half the tokens
#: at V = 8 (its default 10 % would often bump none, giving p == q).
FAMILIES: tuple[tuple, ...] = (
    ("softmax_noise", 8, {}), ("zipf", 8, {}), ("shifted", 8, {"fraction": 0.5}), ("ngram", None, {}),
)
K_VALUES = (1, 2, 4, 8)
#: Candidate counts of the mutant panel (every mutant is biased at one of them).
MUTANT_KS = (1, 2, 4)
#: Family and V of the mutant panel.
MUTANT_FAMILY = ("softmax_noise", 8, {})


def import_object(spec: str, flag: str, example: str):
    """The object named by ``module:attr.attr...`` (dotted parts may index dicts), for ``flag`` (e.g. ``--verifier``).

    IMPORTS AND RUNS the module; the current directory is put first on ``sys.path``
    (if absent).  Raises ``ValueError`` naming ``flag`` and ``spec`` for ANY failure
    (an exception of any type, ``SyntaxError``, ``SystemExit``), chained from it.
    """
    import os
    import sys

    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise ValueError(f"{flag} {spec!r}: write module:object, e.g. {example}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        if exc.name and (mod_name == exc.name or mod_name.startswith(exc.name + ".")):
            raise ValueError(f"{flag} {spec!r}: cannot import module {mod_name!r} ({_describe(exc)}; searched "
                             f"the current directory {cwd!r} and sys.path)") from exc
        raise ValueError(f"{flag} {spec!r}: importing module {mod_name!r} failed: {_describe(exc)}") from exc
    except BaseException as exc:  # SyntaxError, any error at import, sys.exit() at import: never a silent exit
        if ctrl_c(exc):  # the user's Ctrl-C while loading: it stops the run
            raise
        raise ValueError(f"{flag} {spec!r}: importing module {mod_name!r} failed: {_describe(exc)}") from exc
    for part in attr.split("."):
        try:
            if isinstance(obj, dict) and part in obj:
                obj = obj[part]
            elif hasattr(obj, part):
                obj = getattr(obj, part)
            else:
                raise ValueError(f"{flag} {spec!r}: module {mod_name!r} has no attribute {attr!r}")
        except ValueError:
            raise
        except BaseException as exc:  # a property or __getattr__ that raises
            if ctrl_c(exc):  # the user's Ctrl-C while loading: it stops the run
                raise
            raise ValueError(f"{flag} {spec!r}: looking up {part!r} failed: {_describe(exc)}") from exc
    return obj


def load_proxy(spec: str, flag: str = "--proxy"):
    """A rejection-dependent proxy ``proxy(R, q, x, *, step)`` from a ``module:object`` import path.

    IMPORTS AND RUNS the module (:func:`import_object`).  Used by ``resispec certify --proxy module:object``
    and ``--verifier rejection_proxy[proxy=module:object]`` (``resispec.verifiers.rejection_proxy``).

    Raises
    ------
    ValueError
        Any failure to import the module or find the object (naming ``flag`` and ``spec``), or an object
        that is not callable.
    """
    obj = import_object(spec, flag, "mymodule:my_proxy")
    if not callable(obj):
        raise ValueError(f"{flag} {spec!r} is {type(obj).__name__}, not a callable proxy(R, q, x, *, step) "
                         "returning the residual after rejecting x")
    return obj


def load_verifier(spec: str, flag: str = "--verifier"):
    """A verifier from a registry name, ``name[option=value,...]`` or a ``module:object`` import path (``flag``: the
    option that named it, quoted in every refusal: ``--verifier``, ``--reference``).

    ``module:object`` may name a Verifier instance, a class or a factory
    (called with no arguments); dotted parts may index dicts
    (``exactness.mutants:CATALOGUE.always_accept``).  This IMPORTS AND RUNS
    the named module (and the class or factory), like ``python -c "import
    module"``; the current directory is put first on ``sys.path`` (if absent),
    as pytest does, so a ``mine.py`` next to you is found.

    Returns
    -------
    (spec, verifier) : (str, object with ``verify``)

    Raises
    ------
    ValueError
        Unknown name, or ANY failure to import the module or build the
        object -- an exception of any type, a ``SyntaxError``, even
        ``SystemExit`` (``sys.exit(0)`` at import) or ``KeyboardInterrupt`` --
        with the spec and the original exception's type and message (chained
        from it); or an object without ``verify``.
    """

    import resispec

    if not isinstance(spec, str) or not spec:
        raise ValueError(f"{flag} must be a name, name[option=value,...] or module:object, got {spec!r}")
    from resispec.verifiers.registry import parse_spec

    if "[" in spec or "]" in spec:   # name[option=value,...], e.g. resispec[proxy=tempered,gamma=0.5]
        name, opts = parse_spec(spec, flag)
        if name == "rejection_proxy" and isinstance(opts.get("proxy"), str):
            opts["proxy"] = load_proxy(opts["proxy"], flag)
        return spec, resispec.get_verifier(name, **opts)
    if ":" not in spec:
        return spec, resispec.get_verifier(spec)
    obj = import_object(spec, flag, "mymodule:MyVerifier")
    attr = spec.partition(":")[2]
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "verify")):
        try:
            obj = obj()
        except BaseException as exc:
            if ctrl_c(exc):  # the user's Ctrl-C while loading: it stops the run
                raise
            raise ValueError(f"{flag} {spec!r}: building the verifier ({attr}()) failed: {_describe(exc)}") from exc
    if not hasattr(obj, "verify"):
        raise ValueError(f"{flag} {spec!r} is not a verifier (needs verify(p, q, candidates, rng) and drafting)")
    try:
        drafting = getattr(obj, "drafting")
    except AttributeError:
        raise ValueError(f"{flag} {spec!r} has no 'drafting' attribute: set it to 'iid', 'without_replacement' "
                         "or 'any' (the candidate law under which the verifier claims exactness)") from None
    except BaseException as exc:
        if ctrl_c(exc):  # the user's Ctrl-C while loading: it stops the run
            raise
        raise ValueError(f"{flag} {spec!r}: reading its 'drafting' failed: {_describe(exc)}") from exc
    if drafting not in ("iid", "without_replacement", "any"):
        raise ValueError(f"{flag} {spec!r} has drafting = {drafting!r}; it must be 'iid', 'without_replacement' "
                         "or 'any'")
    return spec, obj


def _describe(exc: BaseException) -> str:
    """``"RuntimeError: boom"``; ``SystemExit`` as ``"SystemExit: called sys.exit(0)"``."""
    if isinstance(exc, SystemExit):
        return f"SystemExit: called sys.exit({exc.code!r})"
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} ({exc.filename}, line {exc.lineno})"
    msg = str(exc)
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def sample_memory(n: int, k: int, chunk: int | None = None) -> int:
    """Estimated peak memory in bytes of one Monte Carlo cell with ``n`` draws and ``k`` candidates.

    The harness keeps the sampled tokens and accepted indices (int64 each:
    ``16 n`` bytes) and draws the uniforms (float64, ``2k + 1`` per draw) in
    chunks of ``chunk`` draws (default ``exactness.limits.CHUNK``):
    ``16 n + 8 min(n, chunk) (2k + 1)``.  An estimate for refusing absurd
    budgets up front, not a measurement.
    """
    from .limits import CHUNK

    chunk = CHUNK if chunk is None else chunk
    return 16 * n + 8 * min(n, chunk) * (2 * k + 1)


def family_nodes(seed: int, families=FAMILIES, temperature: float = 1.0) -> tuple[dict, list[str]]:
    """One (p, q) node per family: ``{family: (p, q)}`` and notes on families left out."""
    from simulators.families import get_family

    nodes, notes = {}, []
    for i, (name, V, params) in enumerate(families):
        rng = np.random.default_rng(sub_seed(seed, 1000 + i))
        try:
            fam = get_family(name)
        except ValueError as exc:
            notes.append(f"family {name!r} not available: {exc}")
            continue
        kw = {} if fam.fixed_vocab is not None or V is None else {"V": V}
        p, q = fam.sample(rng, n=1, temperature=temperature, **kw, **params)
        nodes[name] = (np.asarray(p[0], dtype=np.float64), np.asarray(q[0], dtype=np.float64))
    return nodes, notes


def build_cells(verifiers: list[tuple[str, object]], nodes: dict, ks=K_VALUES) -> list[Cell]:
    """The grid: every verifier x node x k."""
    return [Cell(name, v, fam, k, p, q) for name, v in verifiers for fam, (p, q) in nodes.items() for k in ks]


@dataclass
class MutantResult:
    """Detection of one mutant over seeds: flagged by any check, and by Monte Carlo checks alone."""

    name: str
    bug: str
    caught_by: str
    runs: int
    flagged: int
    flagged_mc: int
    failing_checks: dict = field(default_factory=dict)

    @property
    def power(self) -> float:
        return self.flagged / self.runs if self.runs else 0.0

    @property
    def power_mc(self) -> float:
        return self.flagged_mc / self.runs if self.runs else 0.0


#: Checks that are statistical (Monte Carlo) rather than exact or deterministic.
_MC_ONLY = ("marginal", "joint", "accepted_count", "residual")


def run_mutants(*, seeds: int = 1, n: int | None = None, alpha: float = 1e-3, seed: int = 0,
                names=None, progress: bool = False) -> list[MutantResult]:
    """Run the mutant panel ``seeds`` times per mutant; a run flags when a panel cell fails.

    Within one run the panel's cell p-values (k in ``MUTANT_KS``) are
    Holm-corrected at ``alpha``.  ``flagged_mc`` counts runs flagged by the
    Monte Carlo checks alone (exact, deterministic and tree checks removed).
    ``progress``: as in ``exactness.grid.run_grid`` (a bar on a terminal,
    plain lines on stderr otherwise).
    """
    from . import mutants as M
    from ._progress import Progress, progress_mode

    seed = base_seed(seed)
    fam = MUTANT_FAMILY[0]
    nodes, _ = family_nodes(seed, (MUTANT_FAMILY,))
    p, q = nodes[fam]
    names = list(M.CATALOGUE) if names is None else list(names)
    out = []
    bar = Progress(len(names) * seeds, "mutants", "run", mode=progress_mode(progress))
    for name in names:
        v = M.CATALOGUE[name]
        ks = [k for k in MUTANT_KS if k >= M.MIN_K.get(name, 1)]
        flagged = flagged_mc = 0
        failing: dict[str, int] = {}
        for s in range(seeds):
            certs = [certify_verifier(v, p, q, k, n=n, alpha=alpha, seed=sub_seed(seed, s, k))
                     for k in ks]
            holm = adjust([c.pvalue for c in certs], "holm")
            if np.any(holm < alpha):
                flagged += 1
            mc = []
            for c in certs:
                mc += [c.checks[x] for x in _MC_ONLY if x in c.checks]
                for chk in c.failed_checks():
                    failing[chk] = failing.get(chk, 0) + 1
            if mc and np.any(adjust(mc, "holm") < alpha):
                flagged_mc += 1
            bar.step(f"{name} seed {s}")
        out.append(MutantResult(name, M.describe(name), M.CAUGHT_BY.get(name, ""), seeds, flagged, flagged_mc,
                                failing))
    bar.close()
    return out


def _load_watched(spec: str, timeout: float | None):
    """``load_verifier(spec)``, its import watched (``exactness._timeout.loading``): under the CLI's supervisor a
    module whose import or factory hangs is the run's FAIL, after ``2 max(timeout, LOAD_GRACE)`` seconds."""
    from ._timeout import loading

    with loading(timeout, f"loading --verifier {spec}"):
        return load_verifier(spec)


def _compile_built_ins(verifiers: list[tuple[str, object]], timeout: float | None = None) -> None:
    """Run each built-in verifier once on a tiny node, before any cell's time limit is armed: its numba kernels
    compile here (about 20 s on a cold cache) rather than under a cell's ``--time-limit``, whose alarm would stop an
    exact verifier mid-compile (a FAIL) and leave numba's compiler state broken for the cells after it.  A
    user's code is never run here -- a spec naming a module anywhere (``rejection_proxy[proxy=mine:f]``) is left to
    its cells --, and the warm-up is watched like a load (:func:`exactness._timeout.loading`); anything raised is
    left to the cells."""
    import resispec

    from ._timeout import loading
    from .verifier_cert import certify_verifier

    built_in = set(resispec.available_verifiers())
    p = np.array([0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05])        # (V,) float64
    q = np.array([0.1, 0.1, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1])
    for spec, v in verifiers:
        if spec.split("[", 1)[0] not in built_in or ":" in spec:    # a user's module (a proxy's): its cells run it
            continue
        try:                                                        # every path a cell takes, on a tiny budget
            with loading(timeout, f"compiling the built-in {spec}"):
                certify_verifier(v, p, q, 2, n=2_000, seed=0)
        except Exception:                                           # the cells will meet it, and say so
            pass


def run_certify(verifier_specs: list[str] | None = None, *, ks=K_VALUES, n: int | None = None,
                alpha: float = 1e-3, seed: int = 0, families=FAMILIES, progress: bool | str = False,
                timeout: float | None = CELL_TIMEOUT, workers: int = 1, executor="process",
                address: str | None = None, tv: float | None = None, sequential: bool = False) -> GridResult:
    """The full certify grid (built-in verifiers by default).

    ``timeout``: wall-clock seconds per cell (None or 0 = none); a cell that
    runs past it, or raises, is a failed cell (``exactness.grid.run_cell``).
    ``workers``: processes for each cell's Monte Carlo draws (``certify_verifier(..., workers=)``).
    ``executor``, ``address``: who runs the cells and their chunks (``exactness.grid.run_grid``; ``"ray"`` runs
    every cell as a Ray task, on a local cluster or the one at ``address``).
    ``seed``: an int, a sequence of ints or a SeedSequence.
    ``tv``, ``sequential``: per cell, ``certify_verifier(..., tv=, sequential=)`` (``tv`` plans ``n`` when ``n`` is None).
    Raises ValueError when a verifier cannot be loaded (``load_verifier``).
    """
    import resispec

    seed = base_seed(seed)
    specs = verifier_specs or resispec.available_verifiers()
    verifiers = [_load_watched(s, timeout) for s in specs]
    if timeout:
        _compile_built_ins(verifiers, timeout)
    t0 = time.perf_counter()
    nodes, notes = family_nodes(seed, families)
    if not nodes:
        raise ValueError(f"no pair family could be built ({'; '.join(notes) or 'none given'}); "
                         "pass --families with a registered family")
    grid = run_grid(build_cells(verifiers, nodes, ks), n=n, alpha=alpha, seed=seed, progress=progress,
                    timeout=timeout, workers=workers, executor=executor, address=address, tv=tv,
                    sequential=sequential)
    grid.notes.extend(notes)
    grid.seconds = time.perf_counter() - t0
    return grid
