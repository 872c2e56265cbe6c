"""Name -> path-level verifier registry (``block``, ``token``).  Adding a rule touches one file and one line."""

from __future__ import annotations

from typing import Callable

_PATH_REGISTRY: dict[str, Callable] = {}


def register_path(name: str, *, ours: bool = False):
    """Class decorator: register a path-level verifier factory under ``name``.

    ``ours=True`` marks a rule of this project (never a "baseline" in reports: ``resispec.is_ours``).
    """

    def deco(cls):
        _PATH_REGISTRY[name] = cls
        cls.name = name
        if ours:
            from ..verifiers.registry import mark_ours

            mark_ours(name)
        return cls

    return deco


def available_path_verifiers() -> list[str]:
    """Names of the registered path-level verifiers."""
    return sorted(_PATH_REGISTRY)


def get_path_verifier(name: str, **options):
    """Build a registered path-level verifier (``block``: Sun et al. 2024; ``token``: Leviathan et al. 2023).

    Raises
    ------
    TypeError
        ``name`` not a string, or an option the rule does not take.
    ValueError
        Unknown name (the message lists the known ones).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a path-level verifier name (str), got {type(name).__name__}")
    if name not in _PATH_REGISTRY:
        raise ValueError(f"unknown path-level verifier {name!r}; choose one of {available_path_verifiers()} "
                         "(node-level rules such as 'rrs' live in resispec.get_verifier)")
    try:
        return _PATH_REGISTRY[name](**options)
    except TypeError as exc:
        raise TypeError(f"path-level verifier {name!r}: {exc}") from exc


def get_any_verifier(name: str, **options):
    """A path-level verifier when ``name`` is one (``block``, ``token``), else ``resispec.get_verifier(name)``.

    For front ends that take either kind by name (``resispec decode --verifier``, ``bench-decode --verifiers``).
    Raises as :func:`get_path_verifier` / :func:`resispec.get_verifier`.
    """
    if isinstance(name, str) and name in _PATH_REGISTRY:
        return get_path_verifier(name, **options)
    from ..verifiers.registry import get_verifier

    return get_verifier(name, **options)
