"""pytest plugin (registered through the ``pytest11`` entry point): the ``exactness`` fixture.

Kept light: nothing heavy is imported until a test asks for the fixture.

Usage in any test suite (with this package installed)::

    def test_my_verifier_is_exact(exactness):
        exactness.assert_exact(MyVerifier(), k=(1, 2, 4))          # built-in small-V panel
        exactness.assert_exact(MyVerifier(), p, q, k=2, n=100_000)  # your own node

Options: ``--exactness-samples N`` (Monte Carlo draws per cell; default the
harness budget) and ``--exactness-alpha A`` (family-wise level, default 1e-3).
Without the entry point, add ``pytest_plugins = ["exactness.pytest_plugin"]``
to your root ``conftest.py``.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("exactness", "speculative-sampling exactness harness")
    group.addoption("--exactness-samples", type=_positive_int, default=None,
                    help="Monte Carlo draws per cell for the exactness fixture (default: harness budget)")
    group.addoption("--exactness-alpha", type=_level, default=1e-3,
                    help="family-wise level for the exactness fixture (default 1e-3)")


def _positive_int(text: str) -> int:
    """``--exactness-samples``: an integer >= 1 (a usage error otherwise, before any test runs)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 (Monte Carlo draws per cell), got {value}")
    return value


def _level(text: str) -> float:
    """``--exactness-alpha``: a level in (0, 1) (a usage error otherwise, before any test runs)."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a level in (0, 1), got {text}")
    return value


class ExactnessHelper:
    """What the ``exactness`` fixture returns: the harness with the session's options applied."""

    def __init__(self, samples, alpha):
        self.samples = samples
        self.alpha = alpha

    def assert_exact(self, verifier, p=None, q=None, k=(1, 2, 4), **kw):
        from .assertions import assert_exact

        kw.setdefault("n", self.samples)
        kw.setdefault("alpha", self.alpha)
        return assert_exact(verifier, p, q, k, **kw)

    def certify_verifier(self, verifier, p, q, k, **kw):
        from .verifier_cert import certify_verifier

        kw.setdefault("n", self.samples)
        kw.setdefault("alpha", self.alpha)
        return certify_verifier(verifier, p, q, k, **kw)

    def certify_sampler(self, sample, law, n, **kw):
        from .certificate import certify_sampler

        kw.setdefault("alpha", self.alpha)
        return certify_sampler(sample, law, n, **kw)


@pytest.fixture
def exactness(request):
    """The exactness harness (``assert_exact``, ``certify_verifier``, ``certify_sampler``)."""
    cfg = request.config
    try:
        samples = cfg.getoption("--exactness-samples")
        alpha = cfg.getoption("--exactness-alpha")
    except ValueError:  # plugin imported as a module, options not registered
        samples, alpha = None, 1e-3
    return ExactnessHelper(samples, alpha)
