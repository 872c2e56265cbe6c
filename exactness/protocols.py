"""Every plug-in hook the harness honours, as documented protocols, in one place.

A subject is duck-typed: the harness asks ``getattr(subject, HOOK, None)`` and uses the hook when it is there.
This module is the list of those hooks -- :data:`HOOKS` maps (subject kind, attribute) to what the harness does
with it and where -- and the :class:`typing.Protocol` classes that type-check a subject you write.
``tests/test_protocols.py`` parses every ``getattr`` / ``hasattr`` on a subject in ``exactness/`` and fails when
one reads an attribute that is not listed here, so the list stays complete.

Kinds of subject (the variable names the harness gives them):

- ``verifier`` (also ``ref`` / ``reference`` as a coupled reference): a node rule, ``resispec.Verifier``;
- ``kernel``: a user kernel coupled to a reference (``exactness.certify_coupled``) or a chain kernel
  (``exactness.chain``);
- ``decoder``: a whole speculative decoder (``exactness.certify_decoder``);
- ``engine``: an audited inference engine (``exactness.engines.base.Engine``).

Arrays: ``p``, ``q`` (B, V) float64 target / draft laws, rows summing to 1; ``candidates`` (B, k) int64;
``uniforms`` (B, k + 1) float64 in [0, 1); ``prompts`` (B, L) int64; ``contexts`` (B, L') int64.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

#: (kind, attribute) -> (required?, what the harness does with it, module(s) that read it).
HOOKS: dict[tuple[str, str], tuple[bool, str, str]] = {
    # --- node verifiers ------------------------------------------------------------------------------------------
    ("verifier", "verify"): (True, "verify(p, q, candidates, rng, *, uniforms=None) -> VerifyResult (tokens (B,), "
                                   "accepted (B,) int64, -1 = residual): the decisions certified",
                             "sampling, stepwise"),
    ("verifier", "drafting"): (True, "'iid', 'without_replacement' or 'any': how the harness draws the candidates "
                                     "(never guessed)", "sampling, grid, fast_paths, certify_run"),
    ("verifier", "draft_law"): (False, "draft_law(q) -> (B, V): the law the candidates are drawn from instead of q "
                                       "(a verifier that reshapes its proposal); disables the table fast path",
                                "sampling, exact, grid, fast_paths, coupled"),
    ("verifier", "bonus_law"): (False, "bonus_law(p, q) -> (B, V): the law of the bonus token after a full accept "
                                       "(default p) in the tree checks", "tree, sampling"),
    ("verifier", "sample_bonus"): (False, "the verifier draws its own bonus token after a full accept (the tree "
                                          "check at depth 1 uses its draws instead of bonus_law)", "tree"),
    ("verifier", "supported_k"): (False, "a collection of ints >= 1, or supported_k(k) -> bool: a k it declines is "
                                         "refused (UnsupportedK) by certify_verifier / assert_exact and a skipped "
                                         "cell in resispec certify, never a FAIL", "sampling"),
    ("verifier", "chain"): (False, "chain(p, q, candidates, uniforms): the step-by-step decisions (coupled "
                                   "certification's reference, the table fast path's cross-check)",
                            "sampling, coupled"),
    ("verifier", "chain_until_accept"): (False, "the same decisions as chain without the steps after each row's "
                                                "first acceptance (a faster coupled reference)", "coupled.run"),
    ("verifier", "handles_shared_nodes"): (False, "True: verify may receive read-only broadcast views of one node "
                                                  "(fewer copies)", "sampling, coupled"),
    ("verifier", "step_plan"): (False, "step_plan(p_i (V,), q_i (V,), *, last) -> StepPlan: the step verify "
                                       "takes at one node, checked by certify_stepwise at every visited state",
                                "stepwise, verifier_cert"),
    ("verifier", "plan"): (False, "plan(p (L+1, V), q (L, V), drafts (L,)) -> PathPlan(stop (L+1,), laws (L+1, V)): a "
                                  "path-level rule's declared decision law; certify_path analyses it exactly (its "
                                  "E[accepted] against the LP bound over exact rules; a plan that is not a law "
                                  "FAILs)", "acceptance_bound, pathlevel"),
    ("verifier", "plan_tree"): (False, "plan_tree(p (N+1, V), q (N+1, V), parent (N,), tokens (N,)) -> PathPlan(stop "
                                       "(N+1,), laws (N+1, V)): a tree rule's declared decision law; "
                                       "certify_tree_rule analyses it exactly (E[accepted] against the LP bound) "
                                       "and checks verify_tree against it", "acceptance_bound, pathlevel, plan_check"),
    ("verifier", "name"): (False, "registry name: a built-in rule's name selects its exact fast path",
                           "coupled, fast_paths"),
    ("verifier", "options"): (False, "options() -> dict: a built-in with non-default options is treated as a "
                                     "black box", "coupled"),
    ("verifier", "proxy"): (False, "the reserve proxy of a ResiSpec rule (selects its fast path)", "fast_paths"),
    ("verifier", "verifier"): (False, "an object wrapping a verifier (the executors look inside for picklability)",
                               "executors"),
    # --- kernels -------------------------------------------------------------------------------------------------
    ("kernel", "verify"): (True, "the kernel's decisions under the reference's coins", "coupled.run"),
    ("kernel", "verify_tree"): (False, "verify_tree(...): a tree kernel's decisions (certify_coupled_tree)",
                                "coupled.tree"),
    ("kernel", "rule"): (False, "the registry name of the per-node rule the kernel implements (enables the "
                                "per-decision checks)", "chain"),
    ("kernel", "drafting"): (False, "how the kernel expects its candidates drawn (default: the reference's)",
                             "coupled"),
    ("kernel", "handles_shared_nodes"): (False, "as for a verifier", "coupled"),
    # --- decoders ------------------------------------------------------------------------------------------------
    ("decoder", "sample"): (False, "sample(prompts, new_tokens, rng) -> (B, new_tokens) int64: batched decoding "
                                   "(else decoder(prompt, new_tokens, rng) per row)", "decoder, engines.audit"),
    ("decoder", "sample_events"): (False, "sample_events(prompts, new_tokens, rng) -> (tokens, DecoderEvents): "
                                          "the node decisions, for the per-decision checks", "decoder"),
    ("decoder", "rule"): (False, "the registry name each node decision follows (None: no per-decision checks)",
                          "decoder"),
    ("decoder", "draft_law"): (False, "draft_law(contexts) -> (B, V): the q each decision was verified with",
                               "decoder"),
    ("decoder", "gamma"): (False, "drafts of a chain per target call: the acceptance-bound check (LP over exact rules)",
                           "decoder_checks"),
    ("decoder", "events_q"): (False, "'draft_law' (default) or 'one_hot': the q of the decisions", "decoder_events"),
    ("decoder", "per_row_rng"): (False, "True: each row draws from its own generator (the batch_rows check runs)",
                                 "decoder"),
    ("kernel", "plan"): (False, "plan(target_probs (L+1, V), draft_probs (L, V), draft_ids (L,)) -> PathPlan: a chain "
                         "kernel's per-request plan; each call of certify_decoder's main draw is scored under it "
                         "(per_request passes it on)", "chain"),
    ("decoder", "kernel_plan"): (False, "the chain kernel's declared plan or None (ChainDecoder): the plan_sampler "
                                 "check runs when it is one", "decoder"),
    ("decoder", "plan_collector"): (False, "set by certify_decoder around its main draw: the decoder feeds each "
                                    "kernel call's outcome to it (ChainDecoder)", "decoder"),
    ("decoder", "no_events_reason"): (False, "why the decoder reports no events (shown as the skip reason)",
                                      "decoder, engines"),
    # --- engines (exactness.engines.base.Engine: prepare, target, decoder are required methods) -----------------
    ("engine", "acceptance"): (False, "acceptance(decoder) -> dict (accepted, drafted, rate): the engine's own "
                                      "counters, reported beside the verdict", "engines.audit"),
    ("engine", "law_source"): (False, "one line naming where the engine's law comes from (report header)",
                               "engines.audit"),
    ("engine", "formats"): (False, "tuple of the model formats prepare() takes: 'hf' (a Hugging Face folder) and/or "
                                   "'gguf' (a GGUF file); default ('hf',): a GGUF is refused (exit 2)", "engines.audit"),
    ("engine", "context"): (False, "int: the most tokens a prompt plus its new tokens may hold; more is refused up "
                                   "front (exit 2)", "engines.audit"),
    ("engine", "repro_script"): (False, "repro_script(models, settings, option, offending, report) -> str: a "
                                        "standalone script per FAIL", "engines.audit"),
    ("engine", "own_law_options"): (False, "set of options that run a model of their own (e.g. an MTP model): the "
                                           "audit certifies their cells against target(handle, settings, prompt_len, "
                                           "option=o) instead of the shared law", "engines.audit"),
}

#: Variable names the harness gives each kind of subject (what tests/test_protocols.py scans for).
SUBJECT_NAMES = {"verifier": "verifier", "ref": "verifier", "reference": "verifier", "v": "verifier",
                 "obj": "verifier", "kernel": "kernel", "kernel_obj": "kernel", "decoder": "decoder",
                 "engine": "engine", "eng": "engine"}


@runtime_checkable
class NodeVerifier(Protocol):
    """A node rule (``resispec.Verifier``); optional hooks: the ``("verifier", ...)`` rows of :data:`HOOKS`."""

    drafting: str

    def verify(self, p: np.ndarray, q: np.ndarray, candidates: np.ndarray, uniforms: np.ndarray) -> Any:
        """(B, V), (B, V), (B, k) int64, (B, k + 1) float64 -> result with ``tokens`` and ``accepted`` (B,)."""


@runtime_checkable
class Decoder(Protocol):
    """A whole decoder under ``certify_decoder``: call it per row, or give it ``sample`` (batched)."""

    def __call__(self, prompt: np.ndarray, new_tokens: int, rng: np.random.Generator) -> np.ndarray:
        """(L,) int64 prompt -> (new_tokens,) int64 continuation, every random number from ``rng``."""


@runtime_checkable
class BatchedDecoder(Protocol):
    """A decoder that decodes several prompts at once (optional hooks: the ``("decoder", ...)`` rows)."""

    def sample(self, prompts: np.ndarray, new_tokens: int, rng: np.random.Generator) -> np.ndarray:
        """(B, L) int64 -> (B, new_tokens) int64."""


@runtime_checkable
class DecoderWithEvents(BatchedDecoder, Protocol):
    """A decoder reporting its node decisions (per-decision checks: accepted count, residual token, bonus)."""

    rule: str | None

    def sample_events(self, prompts: np.ndarray, new_tokens: int, rng: np.random.Generator) -> tuple:
        """(B, L) int64 -> ((B, new_tokens) int64 tokens, ``exactness.decoder_events.DecoderEvents``)."""

    def draft_law(self, contexts: np.ndarray) -> np.ndarray:
        """(B, L') int64 -> (B, V) float64: the q each decision was verified with."""


@runtime_checkable
class CoupledKernel(Protocol):
    """A kernel certified against its reference under the same coins (``exactness.certify_coupled``)."""

    def verify(self, p: np.ndarray, q: np.ndarray, candidates: np.ndarray, uniforms: np.ndarray) -> Any:
        """The same call and result as :class:`NodeVerifier`."""


def hooks_of(kind: str) -> dict[str, str]:
    """``{attribute: what the harness does with it}`` for one kind of subject (``verifier``, ``kernel``,
    ``decoder``, ``engine``); ValueError naming the kinds for another."""
    kinds = sorted({k for k, _ in HOOKS})
    if kind not in kinds:
        raise ValueError(f"kind must be one of {', '.join(kinds)}, got {kind!r}")
    return {attr: (("required: " if req else "") + what) for (k, attr), (req, what, _) in HOOKS.items()
            if k == kind}


def table() -> str:
    """The Markdown table of :data:`HOOKS` (docs/hooks.md embeds it; a test keeps the two equal)."""
    rows = ["| subject | attribute | required | what the harness does with it | read in `exactness.` |",
            "|---|---|---|---|---|"]
    rows += [f"| {k} | `{a}` | {'yes' if req else 'no'} | {what} | {where} |"
             for (k, a), (req, what, where) in HOOKS.items()]
    return "\n".join(rows) + "\n"
