"""The engine audit: an engine's speculative decoding certified against its own law, over a grid of settings.

For one :class:`~exactness.engines.base.Engine` (the loop knows no engine):

1. build the tiny local models (``exactness.engines.tiny.build_tiny``) and convert them (``engine.prepare``);
2. per sampling setting: the engine's OWN non-speculative law (``engine.target``), cross-checked against the
   independent float64 law (``exactness.settings.processed_law`` on ``tiny.float64_logits``, in the engine's
   documented order); a mismatch is a finding about the law, reported in its own column, never used silently;
3. per (setting, speculative option): a pilot (``PILOT`` calls of one continuation, or one batch of ``PILOT_ROWS``
   for a batched decoder) measures the engine's rate, the budget
   is the ``n`` detecting ``tv`` per position (``exactness.samples_for_tv``) capped by ``cell_seconds``, and
   ``exactness.certify_decoder`` certifies it against the engine's law;
4. per FAIL: the smallest setting that still fails (each active field dropped in turn, kept out while the
   cell still fails), the offending token (the position of smallest p-value, its most frequent prefix: the
   observed vs exact law of that token), and a reproduction script (``engine.repro_script`` when the engine has
   one: it runs without this project).

A cell is PASS (no bias detected, with its detectable TV), FAIL (the engine is biased, or raised / hung while
decoding: ``certify_decoder`` names the cause) or INCONCLUSIVE (the engine cannot run it: a setting it does not
implement, a model it cannot load -- :class:`~exactness.engines.base.EngineUnavailable`).  The report is
written after every cell, so a crash of the engine loses no finished cell.
"""

from __future__ import annotations

import math
import os
import platform
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .base import Engine, EngineUnavailable, get_engine
from .tiny import PROMPTS, TinyModels

#: Settings certified by default (engine-neutral): those an engine does not implement are left out of its default
#: grid (the report lists them); named by the caller, such a setting is an INCONCLUSIVE cell.
DEFAULT_SETTINGS = ("T=1", "temperature=0.7", "top_k=3", "top_p=0.8", "min_p=0.1", "repetition_penalty=1.5",
                    "presence_penalty=0.5,frequency_penalty=0.5", "logit_bias=2:2 3:-2", "bad_words=4|5 6",
                    "temperature=0.7,top_k=5,top_p=0.9,repetition_penalty=1.3")
DEFAULT_TV = 0.02          # detectable TV per position to reach (issue 38: 0.02 on tiny models)
CELL_SECONDS = 600.0       # engine time per cell the budget may use
PILOT = 16                 # continuations timed before planning n (one per call)
PILOT_ROWS = 256           # rows of the one timed call of a batched decoder (``sample``) before planning n
MIN_N = 200                # fewest continuations per prompt the planner uses
MIN_USER_N = 20            # fewest a caller may ask for (below it the checks have no degree of freedom)
LAW_TOL = 1e-4             # TV between the engine's law and the float64 law above which it is a finding
NEW_TOKENS = 3
VOCAB = 16
LOW_ACCEPTANCE = 0.05      # a PASS whose engine accepted fewer drafted tokens barely exercised verification
HANG_SLACK = 300.0         # seconds past the cell's budget before a call that has not returned is a hang
#: The engine attributes the audit reads (each a declared hook of exactness.protocols).
ENGINE_ATTRS = ("name", "options", "supported", "order", "context", "formats", "own_law_options")
#: The status of a report while the engine converts the models (a supervisor allows PREPARE_SECONDS for it).
PREPARING = "running: preparing the models"
#: Environment variable naming the run (``resispec audit`` sets it for its child): the report records it.
RUN_ENV = "RESISPEC_AUDIT_RUN"
AUDIT_ALPHA = 1e-3         # the level of every cell's certificate
MIN_TV = 1e-4              # the smallest detectable TV an audit may aim at (1e-300 overflowed the planner)
PREPARE_SECONDS = 1800.0   # converting the tiny models (a hang past it: every cell INCONCLUSIVE)


@dataclass
class Cell:
    """One (setting, option) of the audit; TVs and p-values are None where nothing was measured."""

    setting: str
    option: str
    verdict: str                      # PASS, FAIL or INCONCLUSIVE
    cause: str = ""                   # FAIL: the failing line; INCONCLUSIVE: why it could not run
    pvalue: float | None = None
    tv_estimate: float | None = None
    tv_upper: float | None = None
    detectable_tv: float | None = None            # of the main check (joint law of the first tokens)
    position_detectable_tv: float | None = None   # the largest per-position detectable TV
    n: int = 0                        # continuations in all (pooled over prompts)
    seconds: float = 0.0
    rate: float | None = None         # continuations per second through the adapter (pilot)
    law_tv: float | None = None       # max TV between the engine's law and the independent float64 law
    smallest_setting: str | None = None
    offending: dict | None = None
    repro: str | None = None
    acceptance: dict | None = None    # the engine's own speculative counters, where it reports them
    own_law: bool = False             # the option runs a model of its own (engine.own_law_options): its own law


@dataclass
class AuditReport:
    """What :func:`audit` found; ``write(out)`` writes ``audit_<engine>.md/json/png`` under ``out``."""

    engine: str
    version: str
    order: str
    platform: str
    vocab: int
    new_tokens: int
    prompts: list
    tv: float
    cell_seconds: float
    command: str
    cells: list = field(default_factory=list)
    seconds: float = 0.0
    law_source: str = ""
    status: str = "complete"          # "running: <setting> / <option>" while a cell runs (a stopped run says so)
    user_models: bool = False         # --target: the user's checkpoints, not the built tiny pair
    n_given: int | None = None        # --n: continuations per prompt the caller fixed (no planned budget)
    models_note: str = ""             # what the models are when they are not the tiny pair (GGUF files)
    write_error: str = ""             # a report write that failed (the run went on; the CLI exits 3 and prints it)
    python: str = ""                  # the interpreter that ran the audit (the one its reproduction scripts need)
    left_out: list = field(default_factory=list)   # default-grid settings the engine does not implement (not run)
    run_id: str = ""                  # the run that wrote it (RESISPEC_AUDIT_RUN): a supervisor reads only its own

    @property
    def law_findings(self) -> list:
        """Cells whose engine law differs from the independent float64 law by more than ``LAW_TOL`` in TV."""
        return [c for c in self.cells if c.law_tv is not None and c.law_tv > LAW_TOL]

    @property
    def failed(self) -> bool:
        return any(c.verdict == "FAIL" for c in self.cells)

    @property
    def inconclusive(self) -> bool:
        return any(c.verdict == "INCONCLUSIVE" for c in self.cells)

    @property
    def outcome(self) -> str:
        """``"PASS"``, ``"FAIL"`` or ``"INCONCLUSIVE"`` of the whole audit (:attr:`exit_code` 0, 1, 3)."""
        return {0: "PASS", 1: "FAIL"}.get(self.exit_code, "INCONCLUSIVE")

    @property
    def passed(self) -> bool:
        """Every cell passed, no law finding, the run complete (:attr:`outcome` ``"PASS"``)."""
        return self.exit_code == 0

    # -- the shared result vocabulary (exactness.result.VOCABULARY): the audit read as one certificate ----------
    @property
    def checks(self) -> dict:
        """``"setting / option"`` -> the cell's p-value (0.0 for a FAIL without one: a crash, an impossible token);
        INCONCLUSIVE cells are not checks."""
        return {f"{c.setting} / {c.option}": (c.pvalue if c.pvalue is not None else 0.0)
                for c in self.cells if c.verdict != "INCONCLUSIVE"}

    @property
    def pvalue(self) -> float:
        """The smallest cell p-value (each cell is its own certificate at ``alpha``; 1.0 with no cell run)."""
        return min(self.checks.values(), default=1.0)

    @property
    def tv_estimate(self) -> float | None:
        """The largest cell TV estimate (None: no cell estimated one)."""
        return max((c.tv_estimate for c in self.cells if c.tv_estimate is not None), default=None)

    @property
    def tv_upper(self) -> float:
        """The largest cell upper bound on TV (1.0: no cell bounded it)."""
        return max((c.tv_upper for c in self.cells if c.tv_upper is not None), default=1.0)

    @property
    def detectable_tv(self) -> float:
        """The largest detectable TV (joint law of the new tokens) over the cells: what every cell detects."""
        return max((c.detectable_tv for c in self.cells if c.detectable_tv is not None), default=1.0)

    @property
    def position_detectable_tv(self) -> float:
        """The largest per-position detectable TV over the cells (what ``Budget(tv=...)`` / ``--tv`` plans for; a CI
        gate on the audit's power reads this one, :attr:`detectable_tv` being of the joint law)."""
        return max((c.position_detectable_tv for c in self.cells if c.position_detectable_tv is not None),
                   default=1.0)

    @property
    def n(self) -> int:
        """Continuations drawn over all cells."""
        return sum(int(c.n or 0) for c in self.cells)

    @property
    def alpha(self) -> float:
        """The level of every cell's certificate."""
        return AUDIT_ALPHA

    def summary(self) -> str:
        """One line: the outcome, cells by verdict, the smallest p-value, the detectable TV per position."""
        count = {v: sum(c.verdict == v for c in self.cells) for v in ("PASS", "FAIL", "INCONCLUSIVE")}
        first = next((c for c in self.cells if c.verdict == "FAIL"), None) or \
            next((c for c in self.cells if c.verdict == "INCONCLUSIVE"), None)
        cause = f"; {first.setting} / {first.option}: {first.cause}" if first is not None and first.cause else ""
        weak = self.underpowered
        if weak and not cause:
            cause = (f"; {len(weak)} PASS cell(s) short of the asked detectable TV {self.tv:g} per position (first: "
                     f"{weak[0].setting} / {weak[0].option} at {weak[0].position_detectable_tv:.3g})")
        return (f"{self.outcome}: {self.engine} {self.version}, {len(self.cells)} cells ({count['PASS']} PASS, "
                f"{count['FAIL']} FAIL, {count['INCONCLUSIVE']} INCONCLUSIVE), smallest p = {self.pvalue:.3g}, "
                f"detectable TV per position <= {self.position_detectable_tv:.3g}, n = {self.n:,}"
                + ("" if self.status == "complete" else f"; INCOMPLETE RUN ({self.status})") + cause[:400])

    @classmethod
    def from_json(cls, data: dict) -> "AuditReport":
        """The report a ``to_json`` wrote (``ValueError`` naming a missing field otherwise)."""
        try:
            cells = [Cell(**c) for c in data["cells"]]
            return cls(**{**{k: v for k, v in data.items() if k != "cells"}, "cells": cells})
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not an audit report JSON: {exc}") from None

    def to_json(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k != "cells"}, "cells": [asdict(c) for c in self.cells]}

    def _notes(self) -> list:
        """The report's notes under the table: settings left out, weak or idle PASS cells, the law findings."""
        lines: list = []
        if self.left_out:
            lines += ["", f"Left out of the default grid (settings {self.engine} does not implement; name one with "
                      f"--settings to see its INCONCLUSIVE cell): {', '.join(self.left_out)}."]
        weak = [c for c in self.cells if c.verdict == "PASS" and (c.position_detectable_tv or 1) > self.tv]
        if weak and self.n_given is None:
            lines += ["", f"{len(weak)} PASS cell(s) did not reach the asked detectable TV {self.tv:g} per position "
                      f"({self.cell_seconds:g} s at the engine's rate capped n): such a pass rules out only the TV in "
                      "its row, and the audit exits 3 (raise --cell-seconds, or ask a larger --tv)."]
        elif weak:
            lines += ["", f"{len(weak)} PASS cell(s) rule out only the TV in their row (n was given: no TV was "
                      f"asked; the default asks {self.tv:g} per position)."]
        idle = [c for c in self.cells if c.verdict == "PASS" and c.option != "off" and c.acceptance
                and c.acceptance.get("rate") is not None and c.acceptance["rate"] < LOW_ACCEPTANCE]
        if idle:
            lines += ["", f"{len(idle)} PASS cell(s) accepted fewer than {LOW_ACCEPTANCE:.0%} of drafted tokens "
                      "(the engine's own counters): their speculative path was barely exercised, so their PASS says "
                      "little about it: " + ", ".join(f"{c.setting} / {c.option}" for c in idle) + "."]
        if self.models_note and any(c.law_tv is None for c in self.cells if c.verdict != "INCONCLUSIVE"):
            lines += ["", "No independent float64 law: GGUF weights have no float64 twin here, so the "
                      "engine's own plain law is used unchecked ('law TV' -)."]
        elif any(c.law_tv is None and not c.own_law for c in self.cells if c.verdict != "INCONCLUSIVE"):
            lines += ["", f"No independent float64 law: the engine declares no order in `exactness.settings.ORDERS` "
                      f"(`{self.order}`), so its own law is used unchecked ('law TV' -)."]
        own = sorted({c.option for c in self.cells if c.own_law})
        if own:
            lines += ["", f"Option(s) {', '.join(own)} run a model of their own (the engine's `own_law_options`): "
                      "their cells are certified against that model's own law (speculation off), which has no float64 "
                      "twin in the audit ('law TV' -; the adapter's tests cross-check it)."]
        if self.law_findings:
            worst = max(c.law_tv for c in self.law_findings)
            lines += ["", "## Law findings", "",
                      f"In {len(self.law_findings)} cell(s) the engine's own law (speculation off) differs from the "
                      f"independent float64 law by more than TV {LAW_TOL:g} (largest {worst:.2e}): the engine does not "
                      "sample the law its settings and documented order give. The cells are certified against the "
                      "engine's own law; the mismatch makes the audit exit 3 unless a cell FAILs.", ""]
            lines += [f"- {c.setting} / {c.option}: law TV {c.law_tv:.2e}" for c in self.law_findings]
        return lines

    def _failing(self) -> list:
        """The report's section on failing and inconclusive cells (cause, smallest setting, offending token, reproduction)."""
        lines: list = []
        bad = [c for c in self.cells if c.verdict != "PASS"]
        if bad:
            lines += ["", "## Failing and inconclusive cells", ""]
            for c in bad:
                lines.append(f"- {c.setting} / {c.option}: {c.verdict}: {c.cause}")
                if c.smallest_setting is not None:
                    lines.append(f"  - smallest setting that still fails: `{c.smallest_setting}`")
                if c.offending:
                    o = c.offending
                    lines.append(f"  - offending token: position {o['position']}, prompt {o['prompt']}, prefix "
                                 f"{o['prefix']}: token {o['token']} observed {o['observed']:.4f} vs exact "
                                 f"{o['exact']:.4f} ({o['count']:,} draws with that prefix over all the cell's calls, pilot and side checks included; TV {o['tv']:.3f}, "
                                 f"p = {o['pvalue']:.3g})" if o["exact"] > 0 else
                                 f"  - offending token: position {o['position']}, prompt {o['prompt']}, prefix "
                                 f"{o['prefix']}: token {o['token']} of exact probability 0 was emitted "
                                 f"({o['observed']:.4f} of {o['count']:,} continuations)")
                if c.repro:
                    crashed = c.cause.startswith("subject:") and c.offending is None and "raised" in c.cause
                    lines.append(f"  - reproduction: `{self.python or 'python'} {c.repro} [N draws per path]` (run "
                                 "with the engine's Python; exit 1: " + ("the engine failed again" if crashed else
                                                                         "bias reproduced")
                                 + ", 0: not at this N, 2: could not run)")
        return lines

    def to_markdown(self) -> str:
        def num(x, spec=".3g"):
            return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)

        lines = [f"# Audit: {self.engine} {self.version}", ""]
        if self.status != "complete":
            lines += [f"**INCOMPLETE RUN**: running, or stopped, while {self.status.removeprefix('running: ')} ran "
                      "(rewritten after every cell: while the audit runs this is its progress; if no audit is running, "
                      "the engine exited or the run was interrupted); the cells below are the finished ones.", ""]
        models = (self.models_note if self.models_note else
                  f"The user's checkpoints (vocabulary {self.vocab})" if self.user_models else
                  f"Tiny local models (Llama, vocabulary {self.vocab}, hidden 32, target 2 layers, draft 1 layer; "
                  "`exactness.engines.tiny`)")
        lines += [f"{self.platform}. Command: `{self.command}`. Run time {self.seconds:.0f} s.", "",
                 f"{models}, prompts {self.prompts}, {self.new_tokens} new tokens per "
                 f"continuation. Law: the engine's own non-speculative sampler ({self.law_source}); "
                 + ("" if self.models_note else
                    f"the column 'law TV' is its TV to the independent float64 law (transformers float64 logits, "
                    f"the engine's order `{self.order}` in `exactness.settings`). ")
                 + (f"Budget per cell: n = {self.n_given:,} continuations per prompt, given by the caller (--n). "
                    if self.n_given is not None else
                    f"Budget per cell: the n detecting TV {self.tv:g} per position (alpha 1e-3, power 0.99), capped "
                    f"by {self.cell_seconds:g} s of engine time. ") +
                 "Columns: 'p-value' the smallest Holm-adjusted p-value of the cell's checks; 'TV estimate (upper)' "
                 "the plug-in TV of the sampled joint law of the first new tokens and its upper confidence bound "
                 "(biased upward by sampling noise: read it with the verdict); 'detectable TV joint (per position)' "
                 "the smallest TV the joint check, and (in brackets) each position's check, detects with power "
                 "0.99; 'n' continuations in all (both prompts); 'cont./s' continuations per second through the "
                 "adapter (pilot; '-' when n was given: no pilot); 's' seconds the cell took; 'acceptance' the engine's own acceptance rate where it reports one (accepted over the drafted tokens its verifier checked; each engine's acceptance() says which counts; the JSON has them; "
                 "'-': none, or the engine has no counters). A FAIL whose cause is the engine's own misbehaviour (a crash, a token of probability 0) has no test statistics: its row reads '-' and n 0, and its cause says what was drawn. Check names: joint[i] the joint law for prompt i, pit[j,...] the law of new token j "
                 "(from 1), pit_pairs / pit_tuple the tokens jointly.", "",
                 "| setting | option | verdict | p-value | TV estimate (upper) | detectable TV joint (per position) "
                 "| n | cont./s | s | law TV | acceptance |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in self.cells:
            verdict = {"FAIL": "**FAIL**"}.get(c.verdict, c.verdict)
            label = c.setting.replace("|", r"\|")  # bad_words' '|' would split the Markdown cell
            lines.append(f"| {label} | {c.option} | {verdict} | {num(c.pvalue)} | {num(c.tv_estimate)} "
                         f"({num(c.tv_upper)}) | {num(c.detectable_tv)} ({num(c.position_detectable_tv)}) | "
                         f"{c.n:,} | {num(c.rate, '.1f')} | {c.seconds:.0f} | {num(c.law_tv, '.1e')} | "
                         f"{num((c.acceptance or {}).get('rate'), '.3f')} |")
        lines += self._notes() + self._failing()
        lines += ["", "A FAIL is a finding about the engine (reproduce it with its script where the engine has a "
                  "reproduction template (its repro_script); a planted bug (--plant) has none: it lives in the "
                  "audit's patch); INCONCLUSIVE means the cell could not run (its cause); PASS means no bias was "
                  "detected at the detectable TV of its row.", ""]
        return "\n".join(lines)

    @property
    def underpowered(self) -> list:
        """PASS cells that did not reach the asked detectable TV per position (``tv``; the engine's rate within
        ``cell_seconds`` capped them); none when the caller fixed ``n`` (no TV was asked)."""
        if self.n_given is not None:
            return []
        return [c for c in self.cells if c.verdict == "PASS" and (c.position_detectable_tv or 1) > self.tv]

    @property
    def exit_code(self) -> int:
        """1 a FAIL cell; 3 no FAIL but an INCONCLUSIVE cell, a law finding, a PASS short of the asked TV
        (:attr:`underpowered`) or an incomplete run; 0 otherwise (as every certify command: docs/certify.md)."""
        if self.failed:
            return 1
        return 3 if (self.inconclusive or self.law_findings or self.underpowered or self.status != "complete"
                      or not self.cells or self.write_error) else 0

    def write(self, out) -> tuple[str, ...]:
        """Write ``audit_<engine>.md``, ``.json`` and ``.png`` under the folder ``out``; returns the paths."""
        from resispec._io import write_markdown_and_json

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        stem = out / f"audit_{self.engine.replace('.', '_')}"
        md, js = write_markdown_and_json(str(stem) + ".md", self.to_markdown(), self.to_json())
        png = _plot(self, str(stem) + ".png")
        return (md, js) + ((png,) if png else ())


def _plot(report: AuditReport, path: str) -> str | None:
    """TV estimate, its upper bound and the detectable TV per cell (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cells = [c for c in report.cells if c.tv_estimate is not None and math.isfinite(c.tv_estimate)]
    if not cells:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(cells) + 2), 4))
    x = np.arange(len(cells))
    ax.bar(x, [c.tv_upper for c in cells], color="#ddd", label="TV upper bound")
    ax.bar(x, [c.tv_estimate for c in cells], color=["#c33" if c.verdict == "FAIL" else "#48a" for c in cells],
           label="TV estimate (red: FAIL)")
    ax.plot(x, [c.position_detectable_tv for c in cells], "k_", markersize=14, label="detectable TV per position")
    ax.axhline(report.tv, color="k", lw=0.6, ls=":")
    ax.set_xticks(x, [f"{c.setting}\n{c.option}" for c in cells], rotation=90, fontsize=6)
    ax.set_ylabel("TV")
    ax.set_title(f"{report.engine} {report.version}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    Path(tmp).replace(path)
    return path


@dataclass(frozen=True)
class _Outcome:
    """What one guarded call into the engine gave: its value, or how it went wrong (never raised)."""

    value: object = None
    kind: str | None = None   # None: returned; "unavailable": EngineUnavailable; "timeout"; "raised"
    why: str = ""             # the cause, for a cell or a report


def _guarded(call, seconds: float) -> _Outcome:
    """``call()`` under a ``seconds`` time limit (0: none): an engine that raises, calls ``sys.exit`` or hangs gives an
    :class:`_Outcome` naming it (``kind``) instead of an exception, so no cell and no report is ever lost."""
    from .._checks import exception_line, passes_through
    from .._timeout import TimeLimitExceeded, time_limit

    try:
        with time_limit(seconds):
            return _Outcome(call())
    except EngineUnavailable as exc:
        return _Outcome(kind="unavailable", why=str(exc))
    except TimeLimitExceeded:
        return _Outcome(kind="timeout", why=f"did not return within {seconds:g} s (raise --cell-seconds / "
                                            "--hang-seconds if it is merely slow)")
    except BaseException as exc:
        if passes_through(exc):             # Ctrl-C, the harness's time limit
            raise
        return _Outcome(kind="raised", why=exception_line(exc))


class _Recorder:
    """Wraps a decoder, keeping every (prompt, continuation) it emits (for the offending-token analysis)."""

    def __init__(self, decoder):
        self.decoder, self.seen = decoder, []
        if hasattr(decoder, "no_events_reason"):
            self.no_events_reason = decoder.no_events_reason
        if hasattr(decoder, "sample"):
            self.sample = self._sample

    def __call__(self, prompt, new_tokens, rng):
        out = self.decoder(prompt, new_tokens, rng)
        self.seen.append((tuple(int(t) for t in prompt), np.asarray(out).reshape(1, -1).copy()))
        return out

    def _sample(self, prompts, new_tokens, rng):
        out = self.decoder.sample(prompts, new_tokens, rng)
        arr = np.asarray(out)
        for b in range(len(prompts)):
            self.seen.append((tuple(int(t) for t in prompts[b]), arr[b:b + 1].copy()))
        return out


#: Prefixes per position the offending-token search scores (the most frequent ones), and the fewest draws a prefix
#: needs to be scored.
OFFENDING_PREFIXES, OFFENDING_MIN_DRAWS = 8, 20


def offending_token(recorder: _Recorder, cert, target, prompts=None) -> dict | None:
    """The observed vs exact law of the worst token: over every position and its most frequent prefixes
    (:data:`OFFENDING_PREFIXES`, each with >= :data:`OFFENDING_MIN_DRAWS` draws), the prefix whose emitted token's
    chi-square against the law is smallest (the most frequent prefix alone had p = 0.006 where the cell failed at
    p = 1e-77, and its reproduction script then could not reproduce), and in it the token farthest from the law.

    A token of target probability 0 (``cert.details["impossible"]``) is the offending token itself: exact 0.
    """
    from scipy import stats

    imp = cert.details.get("impossible") or {}
    if "token" in imp and prompts is not None:
        prompt = np.asarray(prompts)[imp["prompt"]].tolist()
        return {"position": imp["position"], "prompt": prompt, "prefix": list(imp["prefix"]), "token": imp["token"],
                "observed": imp["count"] / max(imp["n"], 1), "exact": 0.0, "count": imp["n"], "tv": float("nan"),
                "pvalue": 0.0}
    pos = cert.details.get("positions") or []
    if not pos or not recorder.seen:
        return None
    best = None
    for j in sorted({d["position"] - 1 for d in pos}):
        groups: dict = {}
        for prompt, toks in recorder.seen:
            for row in toks:
                if row.size > j:
                    groups.setdefault((prompt, tuple(int(t) for t in row[:j])), []).append(int(row[j]))
        ranked = sorted(groups.items(), key=lambda kv: -len(kv[1]))
        ranked = [kv for kv in ranked[:OFFENDING_PREFIXES] if len(kv[1]) >= OFFENDING_MIN_DRAWS] or ranked[:1]
        laws = target(np.array([list(pr) + list(px) for (pr, px), _ in ranked], dtype=np.int64))
        for ((prompt, prefix), tokens), law in zip(ranked, laws):
            counts = np.bincount(tokens, minlength=law.size)[: law.size]
            keep = law > 0
            p = float(stats.chisquare(counts[keep], law[keep] / law[keep].sum() * counts[keep].sum()).pvalue) \
                if counts[~keep].sum() == 0 else 0.0
            if best is None or (p, -counts.sum()) < (best[0], -best[4].sum()):
                best = (p, j, prompt, prefix, counts, law)
    p, j, prompt, prefix, counts, law = best
    freq = counts / counts.sum()
    worst = int(np.argmax(np.abs(freq - law)))
    return {"position": j + 1, "prompt": list(prompt), "prefix": list(prefix), "token": worst,
            "observed": float(freq[worst]), "exact": float(law[worst]), "count": int(counts.sum()),
            "tv": float(0.5 * np.abs(freq - law).sum()), "pvalue": p,
            "observed_law": freq.round(6).tolist(), "exact_law": law.round(6).tolist()}


def checked_law(law, prompts: np.ndarray, V: int):
    """``law`` after one look at the prompts: (P, V) finite non-negative rows summing to 1 (within 1e-6), else a
    ValueError naming what it returned (the cell is then INCONCLUSIVE: the law is not the subject)."""
    rows = np.asarray(law(np.array(prompts, dtype=np.int64)), dtype=np.float64)
    want = (len(prompts), V)
    if rows.shape != want:
        raise ValueError(f"target(contexts) returned shape {rows.shape} for {len(prompts)} contexts; expected {want} "
                         f"(one law over the vocabulary of {V} tokens per context)")
    if not np.all(np.isfinite(rows)) or rows.min() < 0 or np.abs(rows.sum(axis=1) - 1).max() > 1e-6:
        raise ValueError("target(contexts) returned rows that are not laws (non-finite, negative or not summing to 1)")
    return law


def _law_tv(engine, handle, settings, models, f64, prompt_len, new_tokens, rng):
    """Max TV between the engine's law and the independent float64 law at the prompts and random prefixes."""
    from ..settings import ORDERS, processed_law

    law = checked_law(engine.target(handle, settings, prompt_len), models.prompts, models.vocab)
    if engine.order not in ORDERS or f64 is None:  # no documented order or no float64 twin: nothing to compare
        return law, None
    ctx = [models.prompts]
    for g in range(1, new_tokens):
        pre = rng.integers(0, models.vocab, size=(models.prompts.shape[0] * 4, g))
        ctx.append(np.concatenate([np.repeat(models.prompts, 4, axis=0), pre], axis=1))
    worst = 0.0
    for c in ctx:
        a = np.asarray(law(c), dtype=np.float64)
        if a.shape != (len(c), models.vocab):
            raise ValueError(f"target(contexts) returned shape {a.shape} for {len(c)} contexts of {c.shape[1]} tokens; "
                             f"expected {(len(c), models.vocab)}")
        b = processed_law(f64(c), c, prompt_len, settings, engine.order)
        worst = max(worst, float(0.5 * np.abs(a - b).sum(axis=1).max()))
    return law, worst


def _gguf_note(models) -> str:
    """The report's line on the user's GGUF files (no float64 twin: 'law TV' is '-')."""
    name = Path(models.target_dir).name if models.target_dir == models.draft_dir else \
        f"{Path(models.target_dir).name} (draft {Path(models.draft_dir).name})"
    return (f"The user's GGUF files {name} (vocabulary {models.vocab:,}; the law is NOT cross-checked against a "
            "float64 law: GGUF weights have no float64 twin here, so 'law TV' is '-'; where the law is asked for "
            "after sampling (the PIT checks of a large vocabulary) it reads the engine's own logits at the emitted "
            "positions, spot-checked against fresh plain forwards: the 'scores_*' and 'law_rows_served_from_scores' "
            "fields of each cell's acceptance in the JSON)")


def _plan_n(decoder, prompts, new_tokens, tv, cell_seconds, seed):
    """(n per prompt, continuations/s): the n detecting ``tv`` per position, capped by the pilot's rate."""
    from .. import samples_for_tv
    from ..pit import PIT_BINS

    rng = np.random.default_rng([seed, 7])
    if hasattr(decoder, "sample"):  # a batched decoder: time a batch as the certificate draws them (rows a call)
        np.asarray(decoder.sample(prompts[:1].copy(), new_tokens, rng))          # warm-up, untimed
        rows = prompts[np.arange(PILOT_ROWS) % len(prompts)].copy()              # (PILOT_ROWS, L) prompts cycled
        t0 = time.perf_counter()
        np.asarray(decoder.sample(rows, new_tokens, rng))
        rate = PILOT_ROWS / max(time.perf_counter() - t0, 1e-9)
    else:  # one untimed call per prompt first: an engine that loads per prompt (llama-cpp-python's warm Llama per
        # prompt, its draft model pool) pays that once, and the pilot timed it (2.6 continuations/s planned on the
        # real GGUF pair where the cell then ran at 4.1/s)
        for i in range(len(prompts)):
            np.asarray(decoder(prompts[i].copy(), new_tokens, rng))
        t0 = time.perf_counter()
        for i in range(PILOT):
            np.asarray(decoder(prompts[i % len(prompts)].copy(), new_tokens, rng))
        rate = PILOT / max(time.perf_counter() - t0, 1e-9)
    want = math.ceil(samples_for_tv(tv, PIT_BINS - 1) / len(prompts))
    fit = int(rate * cell_seconds / len(prompts) / 1.25)  # 25 % for the harness's extra calls (seed probe, ...)
    return max(MIN_N, min(want, fit)), rate


def _acceptance(counters, dec) -> dict:
    """The engine's counters as a dict with a float ``rate`` (None when absent or not a finite number)."""
    acc = dict(counters(dec))
    rate = acc.get("acceptance_rate", acc.get("rate"))
    try:
        rate = float(rate)
    except (TypeError, ValueError):
        rate = None
    acc["rate"] = rate if rate is not None and math.isfinite(rate) else None
    return acc


def run_cell(engine, handle, settings, option, models, *, law, n, tv, new_tokens, cell_seconds, seed,
             alpha=AUDIT_ALPHA):
    """Certify one cell; returns ``(Cell, certificate or None, recorder or None)``."""
    from .. import certify_decoder
    from .._checks import SubjectError, exception_line, passes_through

    t0 = time.perf_counter()
    cell = Cell(settings.label(), option, "INCONCLUSIVE")
    limit = cell_seconds + HANG_SLACK
    got = _guarded(lambda: engine.decoder(handle, settings, option), limit)
    if got.kind is not None:  # the engine cannot start this option: nothing was decoded (INCONCLUSIVE)
        cell.cause = (got.why if got.kind == "unavailable" else
                      f"the engine could not start option {option!r}: {got.why}")
        return cell, None, None
    dec = got.value
    got = _guarded(lambda: _Recorder(dec), limit)  # reads the decoder's hooks (sample, no_events_reason)
    if got.kind is not None:  # the engine's decoder object itself misbehaves: a FAIL naming it
        cell.verdict, cell.cause = "FAIL", f"the engine's decoder misbehaved: {got.why}"
        cell.seconds = time.perf_counter() - t0
        return cell, None, None
    rec = got.value
    got = _guarded(lambda: (n, None) if n is not None else _plan_n(rec, models.prompts, new_tokens, tv, cell_seconds,
                                                                   seed), limit)
    if got.kind == "unavailable":
        cell.cause = got.why
        return cell, None, None
    if got.kind is not None:  # the engine hung, raised or exited while decoding: a FAIL naming it
        cell.verdict = "FAIL"
        cell.cause = (f"the engine {got.why} while decoding {PILOT} continuations (option {option!r})"
                      if got.kind == "timeout" else f"the engine raised while decoding: {got.why}")
        cell.seconds = time.perf_counter() - t0
        return cell, None, rec
    n_cell, rate = got.value
    cell.rate = rate
    try:
        cert = certify_decoder(rec, law, models.prompts, new_tokens=new_tokens, n=n_cell, alpha=alpha, seed=seed,
                               time_limit=3 * cell_seconds + HANG_SLACK)
    except SubjectError as exc:
        cell.verdict, cell.cause = "FAIL", exc.cause
        cell.seconds = time.perf_counter() - t0
        return cell, None, rec
    except BaseException as exc:  # certify_decoder blames its target: the engine's own law broke
        if passes_through(exc):             # Ctrl-C, the harness's time limit
            raise
        # (the decoder's own raises, exits and hangs are SubjectErrors above; the law is not the subject)
        cell.cause = f"the engine's own law (speculation off) failed: {exception_line(exc)}"
        cell.seconds = time.perf_counter() - t0
        return cell, None, rec
    cell.seconds = time.perf_counter() - t0
    stopped = (cert.details.get("time_limit") or {}).get("running") or ""
    if stopped.startswith("target("):   # the engine's own law hung, not its speculative decoder: INCONCLUSIVE
        cell.cause = (f"the engine's own law (speculation off) {stopped} did not return within "
                      f"{3 * cell_seconds + HANG_SLACK:g} s (3 x --cell-seconds + --hang-seconds)")
        return cell, None, rec
    counters = getattr(engine, "acceptance", None)
    if counters is not None:  # a courtesy of the engine: never a verdict
        got = _guarded(lambda: _acceptance(counters, dec), cell_seconds + HANG_SLACK)
        cell.acceptance = got.value if got.kind is None else {"error": got.why}
    cell.verdict = "PASS" if cert.passed else "FAIL"
    cell.cause = "" if cert.passed else cert._verdict_head(width=400).removeprefix("FAIL: ").replace(
        "raise time_limit / --time-limit", "raise --cell-seconds / --hang-seconds: the limit is 3 x cell + hang")
    cell.pvalue, cell.tv_estimate, cell.tv_upper = cert.pvalue, cert.tv_estimate, cert.tv_upper
    cell.detectable_tv, cell.n = cert.detectable_tv, int(cert.n)
    pos = cert.details.get("positions") or []
    cell.position_detectable_tv = max((d["detectable_tv"] for d in pos), default=None)
    return cell, cert, rec


def _smaller(settings):
    """The settings with one active field reset to its default, one per active field."""
    from dataclasses import replace

    from ..settings import SamplingSettings

    base = SamplingSettings()
    for name in settings.active():
        yield replace(settings, **{name: getattr(base, name)})


class EngineNotInstalled(EngineUnavailable, ValueError):
    """The engine is not installed here (bad input: the message names the install command); a ``ValueError`` too, so
    a caller catching bad input (``ValueError`` / ``TypeError``) catches it."""


def check_request(eng, *, settings=None, options=None, tv: float | None = None, n: int | None = None,
                  cell_seconds: float = CELL_SECONDS, new_tokens: int = NEW_TOKENS, seed: int = 0):
    """Check an audit request before anything is loaded; return ``(grid, options)``.

    ``eng`` is an ``Engine`` instance; the other arguments as :func:`audit` takes them.  Runs no engine and loads
    no model (the CLI calls it before reading a GGUF), so a typo is refused at once.

    Returns
    -------
    grid : list of SamplingSettings     the parsed settings (default :data:`DEFAULT_SETTINGS`)
    options : list of str               the speculative options (default all of ``eng.options``)

    Raises
    ------
    ValueError
        An unknown option or setting, a setting given twice, ``tv`` / ``n`` / ``cell_seconds`` / ``new_tokens`` /
        ``seed`` out of range.
    """
    from .._timeout import MAX_TIMEOUT as MAX_SECONDS
    from ..settings import SamplingSettings, parse_settings

    if n is not None and tv is not None:
        raise ValueError(f"n = {n!r} and tv = {tv!r} both given: n fixes the continuations per prompt, tv plans them; "
                         "give one of the two")
    tv = DEFAULT_TV if tv is None else tv
    if isinstance(tv, bool) or not (isinstance(tv, (int, float)) and MIN_TV <= tv < 1):
        raise ValueError(f"tv must lie in [{MIN_TV:g}, 1) (the detectable TV per position to aim at; below "
                         f"{MIN_TV:g} no run could reach it), got {tv!r}")
    if isinstance(cell_seconds, bool) or not (isinstance(cell_seconds, (int, float)) and math.isfinite(cell_seconds)
                                              and 0 < cell_seconds <= 1e6):
        raise ValueError(f"cell_seconds must be a finite number of seconds in (0, 1e6], got {cell_seconds!r}")
    if 4 * cell_seconds + 2 * HANG_SLACK > MAX_SECONDS:   # the longest time limit built from them (a FAIL's shrink)
        raise ValueError(f"4 x cell_seconds + 2 x hang seconds = {4 * cell_seconds + 2 * HANG_SLACK:.3g} s exceed the "
                         f"{MAX_SECONDS:g} s a time limit can hold; give a smaller --cell-seconds / --hang-seconds")
    for what, v, e in (("settings", settings, "['T=1', 'top_k=3']"), ("options", options, "['off', 'draft']")):
        if isinstance(v, (str, bytes)) or (v is not None and not hasattr(v, "__iter__")):
            raise TypeError(f"{what} must be a list (e.g. {what}={e}) or None, got {v!r}")
    settings = None if settings is None else list(settings)     # a generator is read once, here
    options = None if options is None else list(options)
    bad = [o for o in (options or ()) if not isinstance(o, str)]
    if bad:
        raise TypeError(f"options must hold option names (str), e.g. ['off', 'draft'], got {bad[0]!r}")
    twice = sorted({o for o in (options or ()) if options.count(o) > 1})
    if twice:
        raise ValueError(f"options lists {', '.join(twice)} more than once; give each option once")
    if any(isinstance(x, str) and not x.strip() for x in (settings or ())):
        raise ValueError("settings holds an empty string; give each setting as NAME=VALUE[,NAME=VALUE], e.g. 'T=1'")
    if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < MIN_USER_N):
        raise ValueError(f"n must be an integer >= {MIN_USER_N} (fewer continuations leave the checks no degree of "
                         f"freedom), got {n!r}")
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, (int, np.integer)) or not 1 <= new_tokens <= 64:
        raise ValueError(f"new_tokens must be an integer in [1, 64], got {new_tokens!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    if settings is not None and not list(settings):
        raise ValueError("settings is empty: give at least one setting (or None for the default grid)")
    bad = [s for s in (settings or ()) if not isinstance(s, (str, SamplingSettings))]
    if bad:
        raise TypeError(f"settings must hold strings such as 'temperature=0.7,top_k=3' or SamplingSettings, got "
                        f"{bad[0]!r}")
    grid = [s if isinstance(s, SamplingSettings) else parse_settings(s) for s in (settings or DEFAULT_SETTINGS)]
    labels = [s.label() for s in grid]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ValueError(f"settings lists {', '.join(repr(x) for x in twice)} more than once (the same law after "
                         "parsing: top_k=0, top_p=1, penalties 1 or 0 are the defaults); give each setting once")
    if options is not None and not list(options):
        raise ValueError("options is empty: give at least one option (or None for all the engine's options)")
    opts = list(options or eng.options)
    if not opts:
        raise ValueError(f"{eng.name} declares no speculative options: nothing to audit")
    unknown = [o for o in opts if o not in eng.options]
    if unknown:
        raise ValueError(f"{eng.name} has no option {', '.join(unknown)}; options: {', '.join(eng.options)}")
    return grid, opts


@dataclass
class _AuditRequest:
    """:func:`audit`'s arguments checked at its door (nothing run, only the folders made)."""

    eng: Engine
    grid: list            # SamplingSettings to audit (the default grid: those the engine implements)
    opts: list            # the engine's speculative options to audit
    tv: float
    left_out: list        # default-grid settings the engine does not implement (labels)
    gguf: bool            # the user's models are GGUF files
    f64: object           # float64 logits of the user's target checkpoint (None: built later / GGUF)


def _audit_door(engine, *, settings, options, tv, n, cell_seconds, new_tokens, vocab, seed, workdir, out, shrink,
                models) -> _AuditRequest:
    """Check :func:`audit`'s arguments and the engine's declared attributes; make ``workdir`` / ``out`` only once
    all is well (a refusal leaves nothing behind).  Raises what :func:`audit` documents (``SubjectError`` for an
    engine attribute or ``missing()`` that misbehaves)."""
    from .tiny import float64_logits

    eng = get_engine(engine) if isinstance(engine, str) else engine
    if not isinstance(eng, Engine):
        raise TypeError(f"engine must be an engine name (resispec audit list) or an exactness.engines.base.Engine "
                        f"instance, got {type(engine).__name__}")
    from .._checks import SubjectError

    for attr in ENGINE_ATTRS:                 # a declared attribute that raises is the engine's failure, not bad input
        try:
            getattr(eng, attr, None)
        except Exception as exc:
            raise SubjectError(f"{type(eng).__name__}.{attr} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(eng.name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", eng.name):
        raise TypeError(f"the engine's name must be a non-empty str of letters, digits and . _ + - (it names the "
                        f"report files), got {eng.name!r} on {type(eng).__name__}")
    ctx = getattr(eng, "context", None)
    if ctx is not None and (isinstance(ctx, bool) or not isinstance(ctx, (int, np.integer)) or ctx < 1):
        raise TypeError(f"the engine's context must be None or an int >= 1 (tokens a prompt plus its new tokens may "
                        f"hold), got {ctx!r} on {type(eng).__name__}")
    if models is not None and not isinstance(models, TinyModels):
        raise TypeError(f"models must be an exactness.engines.tiny.TinyModels (target_dir, draft_dir, vocab, "
                        f"prompts) or None, got {type(models).__name__}")
    if models is not None:
        pr = models.prompts
        if not (isinstance(pr, np.ndarray) and pr.ndim == 2 and pr.size and np.issubdtype(pr.dtype, np.integer)):
            raise TypeError(f"models.prompts must be a non-empty (P, L) int64 numpy array of token ids, got "
                            f"{type(pr).__name__}{' of shape ' + str(pr.shape) if isinstance(pr, np.ndarray) else ''}")
        if pr.min() < 0 or pr.max() >= models.vocab:
            raise ValueError(f"models.prompts ids must lie in [0, {models.vocab}) (models.vocab)")
    if not isinstance(shrink, (bool, np.bool_)):
        raise TypeError(f"shrink must be True or False, got {shrink!r}")
    for what, folder in (("out", out), ("workdir", workdir)):
        if isinstance(folder, str) and not folder.strip():
            raise ValueError(f"{what} is an empty path; give a folder (or None)")
        if folder is not None and Path(folder).exists() and not Path(folder).is_dir():
            raise ValueError(f"{what} = {folder!r} cannot be a folder (a file is there); give a folder path")
    if not isinstance(eng.options, dict) or not all(isinstance(o, str) and o for o in eng.options):
        raise TypeError(f"the engine's options must be a dict of option name (str) -> description, got "
                        f"{eng.options!r} on {type(eng).__name__}")
    grid, opts = check_request(eng, settings=settings, options=options, tv=tv, n=n, cell_seconds=cell_seconds,
                               new_tokens=new_tokens, seed=seed)
    tv = DEFAULT_TV if tv is None else tv
    left_out = []
    if settings is None:        # the default grid: only what the engine implements (asked for by name: INCONCLUSIVE)
        supported = set(eng.supported)
        left_out = [s.label() for s in grid if not set(s.active()) <= supported]
        grid = [s for s in grid if set(s.active()) <= supported]
    got = _guarded(eng.missing, PREPARE_SECONDS)
    if got.kind is not None:                  # the engine's own check misbehaved: not the caller's bad input
        raise SubjectError(f"{eng.name}.missing() (is the engine installed?) failed: {got.why}")
    if got.value:
        raise EngineNotInstalled(got.value)
    gguf = bool(getattr(models, "gguf", False))   # the user's GGUF files (models None: the tiny pair, not GGUF)
    if gguf and "gguf" not in getattr(eng, "formats", ("hf",)):
        raise ValueError(f"{eng.name} takes Hugging Face checkpoint folders, not GGUF files; audit a GGUF with "
                         "llama-cpp-python (resispec audit llama-cpp-python --target FILE.gguf)")
    context = getattr(eng, "context", None)
    L = (models.prompts if models is not None else PROMPTS).shape[1]
    if context is not None and L + new_tokens > context:
        raise ValueError(f"--prompt-ids of {L} tokens plus --new-tokens {new_tokens} exceed {eng.name}'s context of "
                         f"{context} tokens; give shorter prompts or fewer new tokens")
    for s in grid:
        s.vocab_check(models.vocab if models is not None else vocab)
    P = len(models.prompts) if models is not None else len(PROMPTS)
    from ..decoder import MAX_DECODER_TOKENS

    if n is not None and n * P * new_tokens > MAX_DECODER_TOKENS:
        raise ValueError(f"n = {n:,} x {P} prompts x {new_tokens} tokens exceeds the {MAX_DECODER_TOKENS:,} tokens a "
                         "certificate keeps; give a smaller n")
    if models is None and (isinstance(vocab, bool) or not isinstance(vocab, (int, np.integer))
                           or not 8 <= vocab <= 4096):      # build_tiny's own check, before any folder is made
        raise ValueError(f"vocab must be an integer in [8, 4096], got {vocab!r}")
    f64 = None
    if models is not None and not gguf:       # the user's checkpoint must load: a refusal naming it, not a traceback
        try:
            f64 = float64_logits(models.target_dir)
        except Exception as exc:
            raise ValueError(f"the target checkpoint {models.target_dir} (--target) does not load as a transformers "
                             f"model: {type(exc).__name__}: {str(exc)[:300]}") from None
    for what, folder in (("workdir", workdir), ("out", out)):   # created only now: a refusal leaves nothing behind
        if folder is not None:
            try:
                Path(folder).mkdir(parents=True, exist_ok=True)
            except (OSError, TypeError, ValueError) as exc:
                raise ValueError(f"{what} = {folder!r} cannot be a folder ({exc}); give a folder path") from None
    return _AuditRequest(eng, grid, opts, tv, left_out, gguf, f64)


def audit(engine, *, settings=None, options=None, tv: float | None = None, n: int | None = None,
          cell_seconds: float = CELL_SECONDS, new_tokens: int = NEW_TOKENS, vocab: int = VOCAB, seed: int = 0,
          workdir=None, out=None, shrink: bool = True, command: str = "", progress=None, models=None) -> AuditReport:
    """Audit ``engine``'s speculative decoding over ``settings`` x ``options`` (module docstring).

    Parameters
    ----------
    engine : str or Engine
        A registered engine name (``exactness.engines.base.ENGINE_MODULES``) or an instance.
    settings : sequence of str or SamplingSettings, optional
        Default :data:`DEFAULT_SETTINGS`.  Strings as ``exactness.settings.parse_settings`` reads them.
    options : sequence of str, optional
        Speculative options of the engine (``engine.options``); default all of them.
    tv : float in (0, 1), default 0.02
        Detectable TV per position the budget aims at.
    n : int, optional
        Continuations per prompt (overrides the planned budget; for tests and quick looks).
    cell_seconds : float > 0, default 600
        Engine time per cell the planned budget may use (the certificate's hard time limit is 3x this + 300 s).
    new_tokens, vocab, seed : int
    workdir : path, optional
        Where the tiny models are built (default: a temporary folder).
    out : path, optional
        Folder of the reports, rewritten after each cell (``audit_<engine>.md/json/png``, repro scripts).
    shrink : bool, default True
        For a FAIL, look for the smallest setting that still fails (one more cell per active field).
    progress : callable(str), optional
        Called with one line per finished cell.
    models : exactness.engines.tiny.TinyModels, optional
        The user's own checkpoints (``target_dir``, ``draft_dir`` in Hugging Face format, ``vocab``, ``prompts``)
        instead of the built tiny pair; ``vocab`` and ``seed`` then only label the report.

    Returns
    -------
    AuditReport

    Raises
    ------
    ValueError
        Unknown engine, option or setting; ``tv``, ``n`` or ``cell_seconds`` out of range.
    EngineUnavailable
        The engine is not installed (the message names the install command).
    """
    import tempfile

    from .tiny import build_tiny, float64_logits

    req = _audit_door(engine, settings=settings, options=options, tv=tv, n=n, cell_seconds=cell_seconds,
                      new_tokens=new_tokens, vocab=vocab, seed=seed, workdir=workdir, out=out, shrink=shrink,
                      models=models)
    eng, grid, opts, tv, left_out, gguf, f64 = req.eng, req.grid, req.opts, req.tv, req.left_out, req.gguf, req.f64
    t_start = time.perf_counter()
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="resispec-audit-")
        workdir = tmp.name
    try:
        user_models = models is not None
        if models is None:
            models = build_tiny(Path(workdir) / f"tiny-v{vocab}-s{seed}", vocab=vocab, seed=seed)
        vocab = models.vocab
        version = _guarded(eng.version, PREPARE_SECONDS)
        law_source = _guarded(lambda: str(getattr(eng, "law_source", "its non-speculative path")), PREPARE_SECONDS)
        report = AuditReport(eng.name, version.value if version.kind is None else f"unknown ({version.why})",
                             eng.order,
                             f"{platform.machine()}, Python {platform.python_version()}, {_cores()} cores",
                             vocab, new_tokens, models.prompts.tolist(), float(tv), float(cell_seconds),
                             command or f"resispec audit {eng.name}",
                             law_source=law_source.value if law_source.kind is None else f"unknown ({law_source.why})",
                             user_models=user_models, n_given=None if n is None else int(n),
                             models_note=_gguf_note(models) if gguf else "", python=sys.executable,
                             left_out=left_out, run_id=os.environ.get(RUN_ENV, ""), status=PREPARING)
        _finish(report, out, t_start)             # the phase is on disk: a supervisor times each phase from here
        got = _guarded(lambda: eng.prepare(models, Path(workdir)), PREPARE_SECONDS)
        if got.kind is not None:  # nothing can run: every cell says why
            why = (got.why if got.kind == "unavailable" else
                   f"the engine did not convert the models within {PREPARE_SECONDS:g} s" if got.kind == "timeout" else
                   f"the engine could not load the models: {got.why}")
            report.cells = [Cell(s.label(), o, "INCONCLUSIVE", cause=why) for s in grid for o in opts]
            report.status = "complete"
            _finish(report, out, t_start)
            return report
        handle = got.value
        if f64 is None and not gguf:           # the tiny pair (the user's was loaded above); GGUF: no float64 twin
            f64 = float64_logits(models.target_dir)
        _run_grid(report, eng, handle, grid, opts, models, f64, out=out, t_start=t_start, n=n, tv=tv,
                  new_tokens=new_tokens, cell_seconds=cell_seconds, seed=seed, shrink=shrink, progress=progress)
        report.status = "complete"
        _finish(report, out, t_start)
        return report
    finally:
        if tmp is not None:
            tmp.cleanup()


def _run_grid(report, eng, handle, grid, opts, models, f64, *, out, t_start, n, tv, new_tokens, cell_seconds, seed,
              shrink, progress) -> None:
    """Every setting x option cell of a prepared engine into ``report.cells``, the report rewritten after each:
    per setting the engine's own law (speculation off), then per option its certificate, a FAIL explained."""
    L = models.prompts.shape[1]
    rng = np.random.default_rng([seed, 3])
    own_law = frozenset(getattr(eng, "own_law_options", ()) or ())
    for s in grid:
        def law_of(s=s):
            eng.check_settings(s)
            return _law_tv(eng, handle, s, models, f64, L, new_tokens, rng)

        report.status = f"running: {s.label()} (the engine's own law)"
        _finish(report, out, t_start)
        got = _guarded(law_of, cell_seconds + HANG_SLACK)
        if got.kind is not None:  # no law: nothing to certify against
            why = (got.why if got.kind == "unavailable" else
                   f"the engine's own law (speculation off) {got.why}" if got.kind == "timeout" else
                   f"the engine's own law (speculation off) failed: {got.why}")
            for o in opts:
                report.cells.append(Cell(s.label(), o, "INCONCLUSIVE", cause=why))
            _finish(report, out, t_start)
            continue
        shared, shared_tv = got.value
        for o in opts:
            report.status = f"running: {s.label()} / {o}"
            _finish(report, out, t_start)         # a run the engine kills says which cell it was in
            law, law_tv = shared, shared_tv
            if o in own_law:                      # the option runs a model of its own: its law is that model's
                got = _guarded(lambda s=s, o=o: checked_law(eng.target(handle, s, L, option=o), models.prompts,
                                                            models.vocab), cell_seconds + HANG_SLACK)
                if got.kind is not None:
                    report.cells.append(Cell(s.label(), o, "INCONCLUSIVE", cause=(
                        f"option {o}'s own law (its model, speculation off) "
                        f"{got.why if got.kind in ('timeout', 'unavailable') else 'failed: ' + got.why}")))
                    _finish(report, out, t_start)
                    continue
                law, law_tv = got.value, None     # no float64 twin of that model here: 'law TV' is '-'
            cell, cert, rec = run_cell(eng, handle, s, o, models, law=law, n=n, tv=tv, new_tokens=new_tokens,
                                       cell_seconds=cell_seconds, seed=seed)
            cell.law_tv = law_tv
            cell.own_law = o in own_law
            if law_tv is not None and law_tv > LAW_TOL:
                cell.cause = (cell.cause + "; " if cell.cause else "") + (
                    f"law finding: the engine's own law differs from the float64 law by TV {law_tv:.2e}")
            if cell.verdict == "FAIL":
                report.status = f"running: {s.label()} / {o} (explaining its FAIL)"
                _explain(eng, handle, report, cell, cert, rec, law, s, o, models, out, shrink=shrink, n=n, tv=tv,
                         new_tokens=new_tokens, cell_seconds=cell_seconds, seed=seed,
                         touch=lambda: _finish(report, out, t_start))
            report.cells.append(cell)
            if progress:
                progress(f"{eng.name} {cell.setting} / {cell.option}: {cell.verdict} "
                         f"(n {cell.n:,}, {cell.seconds:.0f} s){' ' + cell.cause if cell.cause else ''}")
            _finish(report, out, t_start)


def _explain(eng, handle, report, cell, cert, rec, law, s, o, models, out, *, shrink, n, tv, new_tokens,
             cell_seconds, seed, touch=lambda: None):
    """For a FAIL: the offending token, the smallest failing setting, the repro script -- none of which may lose
    the cell (an engine breaking here is noted in the cell, never raised)."""

    impossible = cert is not None and (cert.details.get("impossible") or {}).get("token") is not None
    statistical = cert is not None and ("subject" not in cert.checks or impossible)
    if cert is not None:
        touch()
        got = _guarded(lambda: offending_token(rec, cert, law, models.prompts), cell_seconds + HANG_SLACK)
        cell.offending = got.value
        if got.kind is not None:
            cell.cause += f"; (the FAIL analysis stopped: {got.why})"
    if shrink and statistical:  # a raise or hang would only repeat once per field: shrink statistical FAILs
        fields = len(s.active())
        from .._timeout import MAX_TIMEOUT

        shrink_limit = min(MAX_TIMEOUT, fields * (fields + 1) / 2 * (4 * cell_seconds + 2 * HANG_SLACK))  # all tried
        touch()
        got = _guarded(lambda: _shrink(eng, handle, s, o, models, n=cell.n // len(models.prompts) or n, tv=tv,
                                       new_tokens=new_tokens, cell_seconds=cell_seconds, seed=seed, touch=touch),
                       shrink_limit)
        cell.smallest_setting = got.value
        if got.kind is not None:
            cell.cause += f"; (the FAIL analysis stopped: {got.why})"
    touch()
    crash = cert is not None and "subject" in cert.checks and not impossible   # the engine itself failed
    got = _guarded(lambda: _write_repro(eng, report, cell, out, models, crash=crash), cell_seconds + HANG_SLACK)
    cell.repro = got.value
    if got.kind is not None:
        cell.cause += f"; (no reproduction script: the engine's repro_script failed: {got.why})"

def _shrink(eng, handle, settings, option, models, *, n, tv, new_tokens, cell_seconds, seed,
            touch=lambda: None) -> str:
    """The smallest setting (fewest active fields) whose cell still FAILs at the same n; ``touch()`` after each try
    (the report rewritten: progress a supervisor can see)."""
    cur = settings
    changed = True
    while changed and cur.active():
        changed = False
        for smaller in _smaller(cur):
            touch()
            own = {"option": option} if option in (getattr(eng, "own_law_options", ()) or ()) else {}
            got = _guarded(lambda: eng.target(handle, smaller, models.prompts.shape[1], **own),
                           cell_seconds + HANG_SLACK)
            if got.kind is not None:  # no law for this smaller setting: try another
                continue
            law = got.value
            cell, _, _ = run_cell(eng, handle, smaller, option, models, law=law, n=max(n or MIN_N, MIN_N), tv=tv,
                                  new_tokens=new_tokens, cell_seconds=cell_seconds, seed=seed + 1)
            if cell.verdict == "FAIL":
                cur, changed = smaller, True
                break
    return cur.label()


#: Put after a reproduction script's docstring: an error exits 2, so that exit 1 always means "bias reproduced" (a
#: missing scipy or an engine crash exited 1 by its traceback before).
REPRO_GUARD = '''
import sys as _sys


def _could_not_run(kind, value, tb):  # an error is not a reproduced bias: exit 2 (1 means p < 1e-3)
    import atexit, os, traceback
    traceback.print_exception(kind, value, tb)
    print("could not run this reproduction (an error, not a reproduced bias): exit 2", file=_sys.stderr)
    atexit._run_exitfuncs()  # the temporary models are removed
    _sys.stdout.flush()
    _sys.stderr.flush()
    os._exit(2)


_sys.excepthook = _could_not_run
'''


#: The guard of a FAIL whose cause is the engine's own failure (it raised, crashed, hung): the script reproduces it
#: when the engine raises again, so that exception exits 1; a missing module or file still exits 2.
CRASH_GUARD = REPRO_GUARD.replace('''def _could_not_run(kind, value, tb):''', '''def _could_not_run(kind, value, tb):
    if _CAUSE_TYPE in [k.__name__ for k in kind.__mro__]:   # the exception the audit saw, not any error
        import atexit, os, traceback
        traceback.print_exception(kind, value, tb)
        print("the engine failed again: the FAIL reproduced (the audit's cell: " + _CAUSE + "): exit 1",
              file=_sys.stderr)
        atexit._run_exitfuncs()  # the temporary models are removed
        _sys.stdout.flush()
        _sys.stderr.flush()
        os._exit(1)
''')


def _with_guard(src: str, guard: str = REPRO_GUARD) -> str:
    """``src`` with ``guard`` (:data:`REPRO_GUARD`) after its leading comment lines (a shebang, an encoding) and
    its module docstring, so both keep their place."""
    import ast

    compile(src, "<repro_script>", "exec")          # a SyntaxError here: the caller notes it, no script is written
    body = ast.parse(src).body
    at = 0                                           # after the docstring and any `from __future__` imports
    for node in body:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and \
            isinstance(node.value.value, str) and node is body[0]
        if docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            at = node.end_lineno
        else:
            break
    lines = src.splitlines(keepends=True)
    return "".join(lines[:at]) + ("\n" if at else "") + guard + "".join(lines[at:])


def _write_repro(eng, report, cell, out, models, crash: bool = False) -> str | None:
    """Write the cell's reproduction script next to the report; its path (None without ``out``).  ``crash``: the
    cell failed because the engine did (raised, crashed): the script exits 1 when it fails again
    (:data:`CRASH_GUARD`)."""
    if out is None:
        return None
    from ..settings import parse_settings

    make = getattr(eng, "repro_script", None)
    if make is None:
        return None
    setting = parse_settings(cell.smallest_setting or cell.setting)
    off = cell.offending or {"position": 1, "prompt": models.prompts[0].tolist(), "prefix": []}
    src = make(models, setting, cell.option, off, report)
    if not isinstance(src, str):
        raise TypeError(f"repro_script returned {type(src).__name__}, not the script's source (str)")
    if crash:                                 # "... raised EngineDeadError: ..." -> only that exception reproduces it
        kind = re.search(r"raised (\w+)", cell.cause)
        guard = (f"\n_CAUSE = {cell.cause[:300]!r}\n_CAUSE_TYPE = {(kind.group(1) if kind else 'Exception')!r}\n"
                 + CRASH_GUARD)
    src = _with_guard(src, guard if crash else REPRO_GUARD)
    k = sum(1 for c in report.cells if c.repro) + 1
    path = Path(out) / f"audit_{report.engine.replace('.', '_')}_repro_{k}.py"
    from resispec._io import atomic_write

    atomic_write(str(path), src)
    return str(path)


def _finish(report, out, t_start):
    """Time the run and rewrite the report under ``out``; a write that fails (the folder gone, the disk full) is
    recorded in ``report.write_error`` and the run goes on: the CLI prints the report and exits 3, never losing it."""
    report.seconds = time.perf_counter() - t_start
    if out is not None:
        try:
            report.write(out)
        except OSError as exc:
            report.write_error = f"the report could not be written under {out}: {exc}"


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def summary(folder) -> str:
    """One Markdown table over every ``audit_*.json`` under ``folder``: per engine the version, cells PASS / FAIL /
    INCONCLUSIVE, the smallest and largest per-position detectable TV of its cells, the run time, the command."""
    import json

    rows = ["| engine | version | PASS | FAIL | INCONCLUSIVE | law findings (max law TV) | detectable TV per position "
            "(min-max) | s | command |", "|---|---|---|---|---|---|---|---|---|"]
    for path in sorted(Path(folder).glob("audit_*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:  # truncated, not JSON: name it
            raise ValueError(f"{path} is not readable JSON ({exc}); rerun that audit or remove the file") from None
        try:
            rep = AuditReport.from_json(data)
        except (ValueError, TypeError, AttributeError):
            continue  # another report (e.g. a benchmark's) that shares the prefix
        try:
            count = {v: sum(c.verdict == v for c in rep.cells) for v in ("PASS", "FAIL", "INCONCLUSIVE")}
            det = [float(c.position_detectable_tv) for c in rep.cells if c.position_detectable_tv is not None]
            span = f"{min(det):.3f}-{max(det):.3f}" if det else "-"
            law = rep.law_findings
            law = f"{len(law)} ({max(c.law_tv for c in law):.1e})" if law else "0"
            status = "" if rep.status == "complete" else " (INCOMPLETE RUN)"
            rows.append(f"| [{rep.engine}]({path.stem}.md){status} | {rep.version} | {count['PASS']} | "
                        f"{count['FAIL']} | {count['INCONCLUSIVE']} | {law} | {span} | {rep.seconds:.0f} | "
                        f"`{rep.command}` |")
        except (TypeError, ValueError) as exc:   # an audit JSON with fields of the wrong type: name the file
            raise ValueError(f"{path} is not a readable audit report ({exc}); rerun that audit or remove the file") \
                from None
    return "\n".join(rows) + "\n"


def engine_table() -> list[dict]:
    """One row per known engine: name, installed version or why not, install command, options, order."""
    from .base import ENGINE_MODULES

    rows = []
    for name in sorted(ENGINE_MODULES):
        try:
            eng = get_engine(name)
        except ImportError as exc:  # the engine module itself cannot import (a missing dependency)
            rows.append({"engine": name, "installed": f"no: {exc}", "install": "-", "options": "-", "order": "-"})
            continue
        why = eng.missing()
        rows.append({"engine": name, "installed": eng.version() if why is None else f"no ({why})",
                     "install": eng.install, "options": ", ".join(eng.options), "order": eng.order})
    return rows


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: resispec audit ENGINE")
