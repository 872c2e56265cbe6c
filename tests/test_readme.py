"""The README stays true: its quick start prints what it says, its set-up commands are the
ones CI runs, and every page it links exists."""

import contextlib
import io
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
