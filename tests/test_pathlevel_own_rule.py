"""docs/pathlevel.md section 11 ("Write your own path-level rule"): its code runs and prints what the page says.

Issue 40 item 3: a rule written elsewhere (plain torch, its own coins) wrapped into the PathVerifier form and the
chain-kernel form; every check the page lists runs on it.
"""

import contextlib
import io
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

DOC = Path(__file__).resolve().parents[1] / "docs" / "pathlevel.md"


def _section() -> str:
    text = DOC.read_text()
    start = text.index("## 11. Write your own path-level rule")
    return text[start:text.index("\n## 12.", start)]


def test_the_worked_example_runs_and_prints_what_the_page_says():
    sec = _section()
    blocks = re.findall(r"```python\n(.*?)```", sec, flags=re.S)
    assert len(blocks) == 2, "the section has the PathVerifier form and the chain-kernel form"
    ns: dict = {"__name__": "own_rule_example"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for b in blocks:
            exec(compile(b, str(DOC), "exec"), ns)
    lines = out.getvalue().splitlines()
    assert float(lines[0]) < 1e-12                                   # the declared plan is exact
    cert, dcert = ns["cert"], ns["dcert"]
    assert cert.passed and set(cert.checks) == {"horizon", "acceptance_bound", "exact_bound", "exact_law", "plan_sampler"}
    assert lines[1] == cert.summary() and lines[1].split(", TV")[0] in sec       # the page quotes the printed summary
    assert dcert.passed and "bonus" in dcert.checks and "decoder.rule is None" in dcert.skipped["accepted_count"]
    assert lines[3].startswith("NO BIAS DETECTED (joint test") and lines[3][:60] in sec
    assert "plan_sampler" in dcert.checks and lines[4] == dcert.details["plan_sampler"]["reason"]
    assert lines[4].startswith("sampler vs plan: p = ") and lines[4][:40] in sec.replace("\n", " ")


def test_the_wrapped_rule_made_too_generous_fails():
    """The same wrapper around a rule that accepts with min(1, 1.5 p / q): the checks the page lists catch it."""
    sec = _section()
    block = re.findall(r"```python\n(.*?)```", sec, flags=re.S)[0]
    block = block.replace("target_probs[i, x] / draft_probs[i, x]", "1.5 * target_probs[i, x] / draft_probs[i, x]")
    block = block.replace("a = np.minimum(1.0, p[", "a = np.minimum(1.0, 1.5 * p[")
    assert block.count("1.5") == 2
    ns: dict = {"__name__": "own_rule_example"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(block, str(DOC), "exec"), ns)
    cert = ns["cert"]
    failed = {k for k, v in cert.checks.items() if v < cert.alpha}
    assert not cert.passed and {"acceptance_bound", "exact_bound"} <= failed, cert.checks
