"""Path-level verifiers: rules that decide a whole drafted chain at once (``docs/pathlevel.md``).

``get_path_verifier("block")`` (Sun et al. 2024, arXiv 2403.10444), ``"token"`` (token-wise
chain verification, Leviathan et al. 2023) and ``"traversal"`` (trees, after Weng et al. 2025,
arXiv 2505.12398), ``"traversal_resispec"`` (traversal with ResiSpec's reserve at the siblings, ours);
:func:`analyse_tree` for trees; :func:`analyse_path` for exact laws and expected
accepted lengths; :func:`optimal_accepted` for the LP bound over all exact rules.
"""

from .analysis import PathAnalysis, analyse_path, analyse_tree
from .base import PathPlan, PathResult, PathVerifier, check_path
from .bound import PathBound, optimal_accepted
from .registry import available_path_verifiers, get_any_verifier, get_path_verifier, register_path
from . import block, tokenwise, traversal, traversal_node  # noqa: F401  (register the built-ins)

__all__ = ["PathAnalysis", "PathBound", "PathPlan", "PathResult", "PathVerifier", "analyse_path", "analyse_tree",
           "available_path_verifiers", "check_path", "get_any_verifier", "get_path_verifier", "optimal_accepted", "register_path"]
