"""The house rules: no import circle among the project's modules, and the floors hold.

How the import graph is built (``docs/architecture.md`` describes the layout):

- Nodes: every module under ``resispec/``, ``exactness/`` and ``simulators/``;
  a package is its ``__init__`` module, named by the package
  (``resispec.verifiers``).
- Edges: every ``import`` / ``from ... import`` statement anywhere in a file:
  module level, inside functions, ``try`` / ``if`` blocks, ``__getattr__``
  (a deferred import still closes a circle the moment it runs).  Relative
  imports are resolved against the importing module's package.
  ``from a.b import c`` is an edge to the module ``a.b.c`` when that is a
  module, else to ``a.b`` (``c`` is a name defined there).
- Implied parent imports: importing ``a.b.c`` first runs ``a/__init__`` and
  ``a/b/__init__``.  These count as edges too, except to the importer's own
  enclosing packages, which are always already being imported when one of
  their submodules runs (Python imports parents first), so they add no new
  order.  An explicit ``import a`` / ``from a import name`` of an enclosing
  package does count: that is a real re-entry into a half-built package.
- Package ``__init__`` re-exports are ordinary edges (the ``__init__`` imports
  the submodule).

A circle is a strongly connected component with more than one module.

Imports by computed name (``importlib.import_module(...)``) are invisible to
``ast``; every one of them must be listed in :data:`DYNAMIC_IMPORTS` with what
it loads (``test_dynamic_imports_are_declared``).  Two of them are
registration hooks that, by design, point back up: a registry loads its
plug-ins by name on first use, and each plug-in imports the registry to
register itself (``resispec.verifiers.registry`` -> ``resispec.torch_backend``;
``simulators.families`` -> ``simulators.ngram`` / ``simulators.captured``;
``resispec.decoding.drafts`` -> ``resispec.decoding.ngram``).
They run only after the registry module has finished importing, so they
cannot meet a half-built module; they are the only sanctioned back-edges.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("resispec", "exactness", "simulators")


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def _package_of(name: str, path: Path) -> str:
    """The package a module's relative imports resolve against."""
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _targets(name: str, path: Path, mods: dict) -> set[str]:
    """Project modules that ``name`` imports (explicit edges only)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name, path).split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                out.add(sub if sub in mods else mod)
    found = set()
    for t in out:
        while t and t not in mods:          # `import resispec.x.Name`-style leftovers: nearest module
            t = t.rpartition(".")[0]
        if t:
            found.add(t)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> set of project modules it imports (explicit and implied parent edges)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        parts = name.split(".")
        enclosing = {".".join(parts[:i]) for i in range(1, len(parts) + (path.name == "__init__.py"))}
        edges = set()
        for t in _targets(name, path, mods):
            edges.add(t)
            tp = t.split(".")
            for i in range(1, len(tp)):
                parent = ".".join(tp[:i])
                if parent not in enclosing:
                    edges.add(parent)
        edges.discard(name)
        graph[name] = edges
    return graph


def _cycle_in(component: list[str], graph: dict) -> list[str]:
    """One import circle through the first module of a strongly connected component."""
    comp = set(component)
    start = component[0]
    prev = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for u in frontier:
            for v in sorted(graph[u] & comp):
                if v == start:
                    path = [u]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if v not in prev:
                    prev[v] = u
                    nxt.append(v)
        frontier = nxt
    return component


def import_cycles(graph: dict) -> list[list[str]]:
    """Strongly connected components with more than one module (scipy's Tarjan)."""
    names = sorted(graph)
    idx = {n: i for i, n in enumerate(names)}
    rows = [idx[a] for a in names for b in graph[a]]
    cols = [idx[b] for a in names for b in graph[a]]
    adj = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(names), len(names)))
    _, labels = connected_components(adj, directed=True, connection="strong")
    comps = {}
    for n, lab in zip(names, labels):
        comps.setdefault(lab, []).append(n)
    return [sorted(c) for c in comps.values() if len(c) > 1]


#: Every import by computed name in the project: importer -> what it loads.
DYNAMIC_IMPORTS = {
    "resispec.cli": "resispec.commands.<name>, one per subcommand (discovery)",
    "resispec.verifiers.registry": "resispec.torch_backend on get_verifier(..., backend='torch') (plug-in hook)",
    "simulators.families": "simulators.ngram, simulators.captured on get_family (plug-in hook)",
    "resispec.decoding.drafts": "resispec.decoding.ngram on parse_draft_spec (plug-in hook: the ngram draft kind)",
    "exactness": "exactness.<submodule> as a lazy attribute of the package",
    "exactness.certify_run": "a user's module named by --verifier module:attr",
    "exactness.engines.base": "exactness.engines.<engine> on get_engine (plug-in hook: one module per engine)",
    "exactness.front_door": "the module of the chosen route (ROUTES names each as 'module:function'), incl. "
                            "exactness.engines.audit",
}


def _dynamic_importers(mods) -> set[str]:
    found = set()
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if fname in ("import_module", "__import__"):
                    found.add(name)
    return found


def test_dynamic_imports_are_declared():
    assert _dynamic_importers(_modules()) == set(DYNAMIC_IMPORTS)


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_graph_sees_the_project(graph):
    assert {"resispec", "resispec.verifiers.resispec", "exactness.certificate", "simulators.families"} <= set(graph)
    # explicit, relative, function-level and `from pkg import submodule` edges are all found
    assert "resispec.verifiers.base" in graph["resispec.verifiers.resispec"]
    assert "resispec._reserve_fused" in graph["resispec.verifiers.reserve"]       # function-level
    assert "resispec.verifiers" in graph["resispec"]                             # package re-export


def test_cycle_finder_finds_a_planted_circle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    (comp,) = import_cycles(g)
    assert comp == ["a", "b", "c"]
    assert _cycle_in(comp, g) == ["a", "b", "c", "a"]


def test_no_import_circle(graph):
    cycles = import_cycles(graph)
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(_cycle_in(c, graph)) for c in cycles)


def _imports_from(graph, importer_prefix, target_prefix):
    def under(m, p):
        return m == p or m.startswith(p + ".")
    return sorted((a, b) for a, bs in graph.items() if under(a, importer_prefix)
                  for b in bs if under(b, target_prefix))


#: The top floor of ``resispec``: front ends that may import simulators and exactness.
UPPER = ("resispec.bench", "resispec.commands", "resispec.cli", "resispec.__main__", "resispec.decoding")


def _under(m, prefixes):
    return any(m == p or m.startswith(p + ".") for p in prefixes)


def _imports_from(graph, importers, targets):
    return sorted((a, b) for a, bs in graph.items() if _under(a, importers) for b in bs if _under(b, targets))


def test_resispec_core_is_the_ground_floor(graph):
    """Verifiers, torch backend, analysis, ...: import only each other (never simulators, exactness, UPPER)."""
    core = [m for m in graph if m.split(".")[0] == "resispec" and not _under(m, UPPER)]
    assert "resispec.verifiers.resispec" in core and "resispec.torch_backend" in core
    bad = sorted((a, b) for a in core for b in graph[a] if _under(b, ("simulators", "exactness") + UPPER))
    assert bad == []


@pytest.mark.parametrize("importer, target", [
    ("simulators", UPPER),                       # the wing and the CLI sit above the simulators
    ("exactness", UPPER),                        # ... and above the harness
    ("resispec.bench", ("resispec.commands", "resispec.cli")),    # the CLI wraps the wing, not back
    ("resispec.decoding", ("resispec.bench", "resispec.commands", "resispec.cli")),
])
def test_floors(graph, importer, target):
    found = _imports_from(graph, (importer,), target)
    if importer == "exactness":  # the decoder adapters sit above the decoding floor (test below)
        found = [(a, b) for a, b in found if not _under(a, (ADAPTERS, ENGINES, FRONT_DOOR))]
    assert found == []


#: ``exactness.adapters``: wrap real decoders (``resispec.decoding``, transformers) for ``certify_decoder``.
ADAPTERS = "exactness.adapters"
#: ``exactness.engines``: the engine audit, on the adapters' floor (its transformers engine uses them).
ENGINES = "exactness.engines"
#: ``exactness.front_door``: ``exactness.certify``, the harness's own front, routes to the audit too.
FRONT_DOOR = "exactness.front_door"


def test_adapters_floor(graph):
    """The adapters import the decoding floor but never the wing or the CLI; nothing below them imports them."""
    assert "exactness.adapters.engine" in graph
    assert _imports_from(graph, (ADAPTERS,), ("resispec.bench", "resispec.commands", "resispec.cli",
                                              "resispec.__main__")) == []
    below = [m for m in graph if not _under(m, (ADAPTERS, ENGINES, "resispec.bench", "resispec.commands",
                                                "resispec.cli", "resispec.__main__"))]
    assert sorted((a, b) for a in below for b in graph[a] if _under(b, (ADAPTERS,))) == []


def test_engines_floor(graph):
    """The engine audit imports the harness and the adapters, never the wing or the CLI; only the CLI imports it."""
    assert "exactness.engines.audit" in graph
    assert _imports_from(graph, (ENGINES,), ("resispec.bench", "resispec.commands", "resispec.cli",
                                             "resispec.__main__")) == []
    below = [m for m in graph if not _under(m, (ENGINES, FRONT_DOOR, "resispec.commands", "resispec.cli",
                                                 "resispec.__main__"))]
    assert sorted((a, b) for a in below for b in graph[a] if _under(b, (ENGINES,))) == []


def test_kernel_is_the_floor(graph):
    """The compiled reserve kernel imports only its constants module, which imports nothing of ours."""
    assert graph["resispec._reserve_fused"] == {"resispec._reserve_tol"}
    assert graph["resispec._reserve_tol"] == set()
    # the other kernels sit on it too, never on the verifiers that call them
    for kernel in ("resispec._lookahead_fused", "resispec._wor_fused"):
        assert graph[kernel] <= {"resispec._reserve_fused", "resispec._reserve_tol"}, kernel


def test_import_resispec_does_not_load_numba():
    import subprocess
    import sys

    code = "import resispec, sys; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
