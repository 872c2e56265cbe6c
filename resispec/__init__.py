"""ResiSpec: exact multi-candidate speculative sampling.

Glossary (the same words in code, CLI and reports):

target ``p``
    The large model's next-token law (after temperature / top-k / top-p).
draft ``q``
    The small model's law, after the SAME processing used to sample drafts.
candidate ``x_i``
    The i-th pre-sampled draft token at a node (iid or without replacement).
accepted mass ``m_i``
    Vector ``0 <= m_i <= min(p_i, q_i)``; candidate ``i`` is accepted with
    probability ``m_i(x_i) / q_i(x_i)``.
residual ``p_i``
    The target after ``i - 1`` rejections; the emitted token when every
    candidate is rejected is drawn from the last residual.
proxy ``rho``
    ResiSpec's auxiliary stand-in for the draft density of the candidates
    still to come; reserve ``lambda`` is the mass kept back for them.
acceptance rate
    Probability that some candidate is accepted at a node.
block efficiency
    Mean tokens emitted per target call on a token tree.
alpha*
    The largest acceptance any exact verifier can reach.

The contract::

    get_verifier(name, **options) -> Verifier
    Verifier.verify(p, q, candidates, rng, *, uniforms=None) -> VerifyResult
    Verifier.conditional_law(p, q, candidates) -> (B, V)
    draw_candidates(q, k, drafting, rng) -> (B, k) int64
    exact_output_law(verifier, p, q, k) -> (V,)
    acceptance_probability(verifier, p, q, k) -> float
    optimal_acceptance(p, q, k, drafting="iid") -> float

Mathematics: ``docs/RESISPEC.md``; references in each docstring.
"""

from .analysis import acceptance_probability, exact_output_law, optimal_acceptance
from .proxies import PROXIES, get_proxy
from .sampling import draw_candidates, inverse_cdf
from .verifiers import Chain, MassVerifier, Verifier, VerifyResult, available_verifiers, get_verifier, register

__version__ = "0.1.0"

__all__ = [
    "Chain", "MassVerifier", "PROXIES", "Verifier", "VerifyResult", "acceptance_probability",
    "available_verifiers", "draw_candidates", "exact_output_law", "get_proxy", "get_verifier",
    "inverse_cdf", "optimal_acceptance", "register",
]
