"""Name -> verifier registry.  Adding a verifier touches one file and one line."""

from __future__ import annotations

from typing import Callable

_REGISTRY: dict[str, dict[str, Callable]] = {"numpy": {}}
#: Modules imported on first use of a backend (keeps torch optional).
_LAZY_BACKENDS = {"torch": "resispec.torch_backend"}
#: Names of this project's own rules (ResiSpec's reserves, the rejection-proxy family): never a "baseline".
_OURS: set[str] = set()


def register(name: str, backend: str = "numpy", *, ours: bool = False):
    """Class decorator: register a verifier factory under ``name``.

    ``ours=True`` marks a rule of this project (reports compare it against the best of the others, the
    published baselines; :func:`is_ours`).
    """

    def deco(cls):
        _REGISTRY.setdefault(backend, {})[name] = cls
        cls.name = name
        if ours:
            _OURS.add(name)
        return cls

    return deco


def mark_ours(name: str) -> None:
    """Mark ``name`` as this project's rule (:func:`is_ours`); used by registries of other kinds of rule."""
    _OURS.add(name)


def is_ours(name: str) -> bool:
    """True for this project's own rules (``resispec``, ``resispec_lookahead``, ``resispec_myopic``,
    ``rejection_proxy``), False for published baselines (``sps``, ``rrs``, ``rrs_wor``, ``kseq``,
    ``target_only``, the path-level rules) and unknown names."""
    return name in _OURS


def _backend_table(backend: str) -> dict[str, Callable]:
    if backend not in _REGISTRY and backend in _LAZY_BACKENDS:
        import importlib

        try:
            importlib.import_module(_LAZY_BACKENDS[backend])
        except ImportError as exc:
            raise ValueError(
                f"backend={backend!r} needs an optional dependency that is missing ({exc}); "
                "install it with: pip install torch==2.13.0"
            ) from exc
    if backend not in _REGISTRY:
        known = sorted(set(_REGISTRY) | set(_LAZY_BACKENDS))
        raise ValueError(f"unknown backend {backend!r}; choose one of {known}")
    return _REGISTRY[backend]


def available_verifiers(backend: str = "numpy") -> list[str]:
    """Names of the registered verifiers for ``backend``."""
    return sorted(_backend_table(backend))


def get_verifier(name: str, *, backend: str = "numpy", **options):
    """Build a registered verifier.

    Parameters
    ----------
    name : str
        One of :func:`available_verifiers` (``sps``, ``rrs``, ``rrs_wor``,
        ``target_only``, ``kseq``, ``resispec``).
    backend : {"numpy", "torch"}
        ``numpy`` is the float64 reference.
    **options
        Verifier options, e.g. ``proxy=`` and ``gamma=`` for ``resispec``.

    Returns
    -------
    Verifier

    Raises
    ------
    ValueError
        Unknown name, backend or option value.
    TypeError
        An option the verifier does not take.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a verifier name (str), got {type(name).__name__}")
    table = _backend_table(backend)
    if name not in table:
        if backend != "numpy" and name in _REGISTRY["numpy"]:
            raise ValueError(f"verifier {name!r} is registered for numpy only; a rule written once against the array "
                             f"namespace runs on {backend} after resispec.torch_backend.base.on_torch({name!r}) "
                             "(docs/architecture.md, 'Where new code goes')")
        several = " (several verifiers: repeat the option, one name each)" if "," in name else ""
        raise ValueError(f"unknown verifier {name!r}; choose one of {sorted(table)}{several}")
    try:
        return table[name](**options)
    except TypeError as exc:
        raise TypeError(f"verifier {name!r}: {exc}") from exc


def parse_spec(spec: str, flag: str = "--verifier") -> tuple[str, dict]:
    """``"resispec[proxy=tempered,gamma=0.5]"`` -> ``("resispec", {"proxy": "tempered", "gamma": 0.5})``; a plain
    name -> ``(name, {})``.  Values are Python literals where they parse (``0.5``, ``2``, ``True``), else strings
    (a proxy name).  ValueError naming ``flag`` for a malformed spec (``name[gamma]``, ``name[x=1``)."""
    import ast
    import re

    m = re.fullmatch(r"(\w+)\[(.*)\]", spec)
    if not m:
        if "[" in spec or "]" in spec:
            raise ValueError(f"{flag} {spec!r}: malformed options; write name[option=value,...]")
        return spec, {}
    if not m.group(2).replace(",", "").strip():        # name[] or name[,]: brackets that say nothing
        raise ValueError(f"{flag} {spec!r}: empty options; write {m.group(1)} alone, or {m.group(1)}[option=value,...]")
    opts = {}
    for kv in filter(None, m.group(2).split(",")):
        key, eq, val = kv.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"{flag} {spec!r}: options must be written name[option=value,...], got {kv!r}")
        if key.strip() in opts:
            raise ValueError(f"{flag} {spec!r} gives {key.strip()} twice; give each option once")
        try:
            opts[key.strip()] = ast.literal_eval(val.strip())
        except (ValueError, SyntaxError):
            opts[key.strip()] = val.strip()
    return m.group(1), opts
