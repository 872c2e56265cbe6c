"""Every limit of the harness, in one place: how many draws, how long, how much at once.

Each module reads these at the moment it applies them (``limits.MAX_SECONDS``, never a copy taken at import), so
raising one here -- or ``monkeypatch.setattr(exactness.limits, "MAX_SECONDS", ...)`` in a test -- changes what
is enforced and what the refusal message says together.  Defaults of keyword arguments (``timeout=
DEFAULT_TIMEOUT``) are the one exception: they are bound when the function is defined.

Units: draws (one emitted token of a node, or one continuation of a decoder) and seconds of wall-clock time.
"""

from __future__ import annotations

# --- memory: draws held at once ---------------------------------------------------------------------------------
#: Largest number of draws requested from a sampler in one call (uniforms of shape (CHUNK, 2k + 1) at a node).
CHUNK = 1 << 20
#: Largest ``n`` of a sequential ``certify_verifier``: its tokens and accepted indices are kept (16 bytes per
#: draw: 2 GiB).
MAX_SAMPLES = 1 << 27
#: Largest ``n`` of a fixed-n ``certify_verifier``: draws are counted chunk by chunk and never kept, so only time
#: bounds them; this caps a mistyped ``n`` (``MAX_SECONDS`` applies too).
MAX_COUNTED = 1 << 33
#: Largest Monte Carlo budget per cell that ``resispec certify`` accepts (``--samples``).
MAX_CELL_SAMPLES = 10**9

# --- time ---------------------------------------------------------------------------------------------------------
#: Above this many draws a timed pilot (``PILOT`` draws, own seed) estimates the run time before anything else.
PILOT_ABOVE = 1 << 24
#: Draws in that timed pilot.
PILOT = 2_000
#: Longest estimated run (seconds) the harness starts: 1 hour (raise it for longer planned runs).
MAX_SECONDS = 3600.0
#: Default hard time limit (seconds) of ``certify_verifier``, ``certify_sampler``, ``validate_proxy`` and
#: ``assert_exact``: twice ``MAX_SECONDS``, the longest run a budget admits, so only a subject that never returns
#: (or a run far past its estimate) meets it.  ``timeout=`` sets another (``0`` or ``None``: none).
DEFAULT_TIMEOUT = 2 * MAX_SECONDS
#: Default wall-clock limit per cell of ``resispec certify`` (``--time-limit``; a default cell takes ~1-2 s).
CELL_TIMEOUT = 600.0
#: Default ``time_limit`` (seconds) of the routes that take one: ``certify_decoder``, ``certify_coupled``,
#: ``certify_path`` / ``certify_tree_rule`` (a subject that never returns is stopped and is the cause of a FAIL;
#: generous: real models at the planned n take minutes).
DEFAULT_TIME_LIMIT = 3600.0
#: Shortest ``--time-limit`` the CLI takes (0 = none aside): a shorter limit stops an exact verifier's cell before its
#: first draws, a FAIL that would be the caller's limit and not the verifier's doing.
MIN_CELL_TIMEOUT = 1.0

# --- the law check at a mismatch (stepwise, coupled) --------------------------------------------------------------
#: Most fresh-coin ``verify`` draws at a mismatching draw's candidates, for the check that tells another coupling
#: of the coins from a verify off its declared law (fewer at large V: ``2**25 // V``).
LAW_DRAWS = 200_000

# --- processes ------------------------------------------------------------------------------------------------
#: Most forked worker processes per CPU of this machine that the process executor starts (``workers`` above it run
#: on that many): more only add forks, which alone outlast a short time limit that then blames the subject (200
#: workers on 2 CPUs, a 10 s limit: a FAIL of an exact verifier).  A Ray cluster (``executor="ray"``) is not capped.
WORKERS_PER_CPU = 4

__all__ = ["CELL_TIMEOUT", "CHUNK", "DEFAULT_TIME_LIMIT", "DEFAULT_TIMEOUT", "LAW_DRAWS", "MAX_CELL_SAMPLES",
           "MAX_COUNTED", "MAX_SAMPLES", "MAX_SECONDS", "MIN_CELL_TIMEOUT", "PILOT", "PILOT_ABOVE", "WORKERS_PER_CPU"]
