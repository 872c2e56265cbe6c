"""The README stays true: its quick start prints what it says, its set-up commands are the
ones CI runs, and every page it links exists; numbers the docs quote are the committed reports', and
those reports are strict JSON."""

import contextlib
import io
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def test_quick_start_prints_what_the_readme_says():
    code = _blocks("python")[0]
    printed = re.search(r"\nprints\n\n```\n(.*?)```", README, re.S).group(1)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "README quick start", "exec"), {})
    assert buf.getvalue() == printed


def test_exactly_two_setup_commands_and_ci_runs_the_test_one():
    setup = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    cmds = re.findall(r"```bash\n(.*?)\n```", setup, re.S)
    assert len(cmds) == 2, cmds
    assert cmds[0].strip() == "python3 -m pip install -e . && resispec certify"
    ci = (ROOT / ".ci" / "run").read_text()
    assert cmds[1].strip() in ci.splitlines(), "the README's test command must be .ci/run's, verbatim"


def test_every_linked_doc_exists():
    links = re.findall(r"\]\(((?:docs/)?[^)#\s]+\.md)(?:#[^)]*)?\)", README)
    assert links
    for link in links:
        assert (ROOT / link).is_file(), link
    for page in (ROOT / "docs").glob("*.md"):
        text = page.read_text()
        for link in re.findall(r"\]\(([^)#\s:]+\.md)(?:#[^)]*)?\)", text):
            assert (page.parent / link).resolve().is_file(), f"{page.name} links to missing {link}"


# ---------------------------------------------------------------- numbers in the docs come from the reports


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN / Infinity): write null")

    return json.loads(text, parse_constant=refuse)


def test_every_committed_json_report_is_strict_json():
    reports = sorted((ROOT / "reports").glob("*.json"))
    assert reports
    for path in reports:
        try:
            _strict(path.read_text())
        except ValueError as exc:
            raise AssertionError(f"{path.name}: {exc}") from None


def test_drift_numbers_in_simulators_md_are_the_committed_report():
    data = _strict((ROOT / "reports" / "drift.json").read_text())
    s = data["settings"]
    rows = {r["label"]: r for r in data["results"]}
    text = (ROOT / "docs" / "simulators.md").read_text()
    para = text.split("Measured (`resispec bench drift --families softmax_noise --k 8 --temperature 1.0`", 1)[1]
    para = para.split("\n\n", 1)[0]
    assert (s["family"], s["k"], s["temperature"], s["V"], s["B"]) == ("softmax_noise", 8, 1.0, 1000, 32)
    assert f"V = {s['V']}, {s['B']} pairs, k = {s['k']}" in para and "reports/drift.md" in para
    rrs, best = rows["rrs"], rows["resispec[draft, gamma=1]"]
    acc = lambda r: r["cumulative_acceptance"][-1]  # noqa: E731
    gap = (acc(best) - acc(rrs)) / (data["alpha_star"] - acc(rrs))
    quoted = [f"beta_1 = {rrs['beta'][0]:.3f}", f"beta_8 = {rrs['beta'][-1]:.3f}",
              f"from {rrs['top_mass'][0]:.3f} to {rrs['top_mass'][-1]:.3f}", f"TV(p_8, q) = {rrs['tv'][-1]:.3f}",
              f"acceptance {acc(rrs):.4f}",
              f"at {min(best['top_mass']):.3f}-{max(best['top_mass']):.3f}", f"TV(p_8, q) at {best['tv'][-1]:.3f}",
              f"beta_8 = {best['beta'][-1]:.3f}", f"acceptance {acc(best):.4f}",
              f"alpha* = {data['alpha_star']:.4f}", f"{gap:.2f} of the"]
    quoted += [f"{g} gives {acc(rows[f'resispec[draft, gamma={g}]']):.4f}" for g in ("0.75", "1.25", "2")]
    quoted += [f"`{px}` {acc(rows[f'resispec[{px}, gamma=1]']):.4f}"
               for px in ("coverage", "uniform_mix", "topk", "tempered")]
    missing = [q for q in quoted if q not in para]
    assert not missing, f"docs/simulators.md does not quote reports/drift.json: {missing}"


def test_certify_numbers_in_certify_md_are_the_committed_report():
    from exactness.mutants import CATALOGUE

    data = _strict((ROOT / "reports" / "certify.json").read_text())
    md = (ROOT / "reports" / "certify.md").read_text()
    grid_s, mut_s = re.search(r"wall time ([\d.]+) s \(grid\), ([\d.]+) s \(mutants\)", md).groups()
    doc = (ROOT / "docs" / "certify.md").read_text()
    assert len(data["mutants"]) == len(CATALOGUE)
    assert f"`exactness.mutants.CATALOGUE`, {len(CATALOGUE)} realistic buggy verifiers" in doc
    row = [x for x in doc.splitlines() if "the shipped [reports/certify.md]" in x]
    assert len(row) == 1, "docs/certify.md's timing table needs one row for the shipped report"
    assert f"{len(data['cells'])} cells + {len(data['mutants'])} mutants" in row[0]
    assert f"grid {grid_s} s, mutants {mut_s} s" in row[0]
    assert data["meta"]["command"] in row[0]
