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


def load_verifier(spec: str):
    """A verifier from a registry name, ``name[option=value,...]`` or a ``module:object`` import path.

    ``module:object`` may name a Verifier instance, a class or a factory
    (called with no arguments); dotted parts may index dicts
    (``exactness.mutants:CATALOGUE.always_accept``).

    Raises
    ------
    ValueError
        Unknown name, import failure, or an object without ``verify``.
    """
    import re

    import resispec

    if not isinstance(spec, str) or not spec:
        raise ValueError(f"--verifier must be a name, name[option=value,...] or module:object, got {spec!r}")
    m = re.fullmatch(r"(\w+)\[(.*)\]", spec)
    if m:  # name[option=value,...], e.g. resispec[proxy=tempered,gamma=0.5]
        opts = {}
        for kv in filter(None, m.group(2).split(",")):
            key, eq, val = kv.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"--verifier {spec!r}: options must be written name[option=value,...], got {kv!r}")
            opts[key.strip()] = _option_value(val.strip())
        return spec, resispec.get_verifier(m.group(1), **opts)
    if "[" in spec or "]" in spec:
        raise ValueError(f"--verifier {spec!r}: malformed options; write name[option=value,...]")
    if ":" not in spec:
        return spec, resispec.get_verifier(spec)
    mod_name, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ValueError(f"--verifier {spec!r}: cannot import module {mod_name!r} ({exc})") from exc
    for part in attr.split("."):
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif hasattr(obj, part):
            obj = getattr(obj, part)
        else:
            raise ValueError(f"--verifier {spec!r}: module {mod_name!r} has no attribute {attr!r}")
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "verify")):
        obj = obj()
    if not hasattr(obj, "verify"):
        raise ValueError(f"--verifier {spec!r} is not a verifier (needs verify(p, q, candidates, rng) and drafting)")
    return spec, obj


def _option_value(text: str):
    """``"0.5"`` -> 0.5, ``"2"`` -> 2, ``"True"`` -> True; anything else stays a string (a proxy name)."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def family_nodes(seed: int, families=FAMILIES, temperature: float = 1.0) -> tuple[dict, list[str]]:
    """One (p, q) node per family: ``{family: (p, q)}`` and notes on families left out."""
    from simulators.families import get_family

    nodes, notes = {}, []
    for i, (name, V, params) in enumerate(families):
        rng = np.random.default_rng([seed, 1000 + i])
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
    """
    from . import mutants as M

    fam = MUTANT_FAMILY[0]
    nodes, _ = family_nodes(seed, (MUTANT_FAMILY,))
    p, q = nodes[fam]
    names = list(M.CATALOGUE) if names is None else list(names)
    out = []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(names) * seeds, desc="mutants", unit="run", leave=False)
    for name in names:
        v = M.CATALOGUE[name]
        ks = [k for k in MUTANT_KS if k >= M.MIN_K.get(name, 1)]
        flagged = flagged_mc = 0
        failing: dict[str, int] = {}
        for s in range(seeds):
            certs = [certify_verifier(v, p, q, k, n=n, alpha=alpha, seed=np.random.SeedSequence([seed, s, k]))
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
            if bar is not None:
                bar.update(1)
        out.append(MutantResult(name, M.describe(name), M.CAUGHT_BY.get(name, ""), seeds, flagged, flagged_mc,
                                failing))
    if bar is not None:
        bar.close()
    return out


def run_certify(verifier_specs: list[str] | None = None, *, ks=K_VALUES, n: int | None = None,
                alpha: float = 1e-3, seed: int = 0, families=FAMILIES, progress: bool = False) -> GridResult:
    """The full certify grid (built-in verifiers by default)."""
    import resispec

    specs = verifier_specs or resispec.available_verifiers()
    verifiers = [load_verifier(s) for s in specs]
    t0 = time.perf_counter()
    nodes, notes = family_nodes(seed, families)
    if not nodes:
        raise ValueError(f"no pair family could be built ({'; '.join(notes) or 'none given'}); "
                         "pass --family with a registered family")
    grid = run_grid(build_cells(verifiers, nodes, ks), n=n, alpha=alpha, seed=seed, progress=progress)
    grid.notes.extend(notes)
    grid.seconds = time.perf_counter() - t0
    return grid
