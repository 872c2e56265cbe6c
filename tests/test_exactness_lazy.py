"""``import exactness`` is light (PEP 562): no numpy, scipy or numba until a name is used; every public name and
every submodule resolves as an attribute, as the docs use them (``exactness.coupled.tv_upper_bound``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import exactness


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_import_loads_no_numerical_library():
    res = _fresh("import sys, exactness, exactness.limits; "
                 "print(sorted(m for m in ('numpy', 'scipy', 'numba', 'torch') if m in sys.modules))")
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stderr


def test_submodules_resolve_as_attributes_in_a_fresh_interpreter():
    code = ("import exactness; exactness.coupled.tv_upper_bound; exactness.decoder.joint_tokens; "
            "exactness.certificate.door_node; exactness.decoder_mutants.MUTANTS_2026; exactness.pit; "
            "exactness.limits.MAX_SECONDS; exactness.protocols.HOOKS; print('ok')")
    res = _fresh(code)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


@pytest.mark.parametrize("name", exactness.__all__)
def test_every_public_name_resolves(name):
    obj = getattr(exactness, name)
    assert obj is getattr(__import__("exactness", fromlist=[name]), name)


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        exactness.nonexistent  # noqa: B018
