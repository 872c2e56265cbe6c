import numpy as np
import pytest

import resispec


@pytest.mark.parametrize("name", resispec.available_verifiers())
def test_exact_law_small(name):
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(5))
    q = rng.dirichlet(np.ones(5))
    v = resispec.get_verifier(name)
    law = resispec.exact_output_law(v, p, q, 3)
    assert np.max(np.abs(law - p)) < 1e-12
