"""exactness.protocols lists every hook the harness honours: a scan of exactness/ finds no unlisted one.

Every ``getattr(SUBJECT, "attr", ...)`` / ``hasattr(SUBJECT, "attr")`` in ``exactness/`` (the engine adapters
excepted: their subjects are the engines' own objects) on a variable named as a subject
(``exactness.protocols.SUBJECT_NAMES``) must be a row of ``HOOKS``; docs/hooks.md embeds ``table()`` verbatim;
the protocols recognise the built-in subjects.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from exactness import protocols

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = {"transformers_engine.py", "ortgenai.py", "mlxlm.py", "llamacpp.py", "vllm_engine.py", "tiny.py"}


#: calls that read a hook by name: getattr / hasattr, and the plan readers that wrap them
#: (``exactness.plan_check.declared``, ``exactness.pathlevel._declared_plan``)
HOOK_READERS = ("getattr", "hasattr", "declared", "_declared_plan")


def _hook_reads():
    for path in sorted((ROOT / "exactness").rglob("*.py")):
        if path.parent.name == "engines" and path.name in ADAPTERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in HOOK_READERS and len(node.args) >= 2
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in protocols.SUBJECT_NAMES
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                    and not node.args[1].value.startswith("__")):
                yield (protocols.SUBJECT_NAMES[node.args[0].id], node.args[1].value,
                       f"{path.relative_to(ROOT)}:{node.lineno}")


def test_every_hook_the_harness_reads_is_listed():
    reads = list(_hook_reads())
    assert len(reads) > 30  # the scan sees the harness (a broken scan would pass vacuously)
    missing = sorted({f"{kind}.{attr} ({where})" for kind, attr, where in reads
                      if (kind, attr) not in protocols.HOOKS})
    assert not missing, "hooks read by the harness but not in exactness.protocols.HOOKS: " + "; ".join(missing)


def test_every_listed_hook_is_read_somewhere():
    reads = {(k, a) for k, a, _ in _hook_reads()}
    stale = sorted(f"{k}.{a}" for k, a in protocols.HOOKS if (k, a) not in reads)
    assert not stale, f"HOOKS rows no scan finds (remove them, or read them through getattr): {stale}"


def test_docs_embed_the_table():
    page = (ROOT / "docs" / "hooks.md").read_text()
    start, end = "<!-- hooks-table -->\n", "<!-- /hooks-table -->"
    assert page[page.index(start) + len(start):page.index(end)] == protocols.table()


def test_hooks_of_and_bad_kind():
    assert "verify" in protocols.hooks_of("verifier") and protocols.hooks_of("verifier")["verify"].startswith(
        "required")
    with pytest.raises(ValueError, match="kind must be one of decoder, engine, kernel, verifier"):
        protocols.hooks_of("tokenizer")


def test_protocols_recognise_subjects():
    import resispec

    class Batched:
        def sample(self, prompts, new_tokens, rng):
            return np.zeros((len(prompts), new_tokens), dtype=np.int64)

    assert isinstance(resispec.get_verifier("rrs"), protocols.NodeVerifier)
    assert isinstance(resispec.get_verifier("rrs"), protocols.CoupledKernel)
    assert not isinstance(np.zeros(3), protocols.NodeVerifier)
    assert isinstance(Batched(), protocols.BatchedDecoder)
    assert not isinstance(Batched(), protocols.DecoderWithEvents)  # no sample_events / rule / draft_law
