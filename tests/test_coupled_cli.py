"""resispec certify-coupled (CLI), the shrunk counterexample, and conventions crossed."""

import subprocess
import sys

import numpy as np

from exactness import mutants
from exactness.coupled import certify_coupled, reference_kernel
from exactness.coupled.shrink import MAX_DROP_V
from resispec import get_verifier
from resispec.cli import main


def test_cli_pass_fail_and_bad_args(capsys, tmp_path):
    assert main(["certify-coupled", "--verifier", "rrs", "--reference", "rrs", "--n", "5000", "--V", "20"]) == 0
    assert "NO BIAS DETECTED" in capsys.readouterr().out
    out = tmp_path / "cex.py"
    rc = main(["certify-coupled", "--verifier", "exactness.mutants:CATALOGUE.residual_is_p", "--reference", "rrs",
               "--k", "1", "--V", "20", "--stop-after", "1", "--out", str(out)])
    assert rc == 1 and "FAIL" in capsys.readouterr().out
    r = subprocess.run([sys.executable, str(out)], capture_output=True, text=True)   # the file reproduces it
    assert r.returncode == 0, r.stderr
    assert "kernel: token" in r.stdout
    assert main(["certify-coupled", "--verifier", "no_such_module:X"]) == 2


def test_shrunk_counterexample_is_small_and_reproduces():
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(300)), rng.dirichlet(np.ones(300))
    cert = certify_coupled(mutants.CATALOGUE["residual_not_renormalised"], "rrs", p, q, 3, n=20_000, stop_after=1)
    assert cert.counterexample and not cert.passed
    ns = {}
    exec(compile(cert.counterexample, "<cex>", "exec"), ns)      # asserts the mismatch itself
    assert ns["p"].shape[1] <= MAX_DROP_V and ns["c"].shape[1] <= 3


def test_other_exact_convention_is_not_called_biased():
    """An exact kernel in the sglang layout, checked under ours, mismatches but is never 'biased'."""

    class Crossed:
        drafting = "iid"

        def __init__(self):
            self.k = reference_kernel(get_verifier("resispec"), "sglang")

        def verify(self, p, q, c, rng=None, *, uniforms):
            return self.k.verify(p, q, c, uniform_samples=uniforms, uniform_samples_for_final_sampling=uniforms[:, -1])

    P = np.array([0.3, 0.05, 0.15, 0.1, 0.02, 0.18, 0.12, 0.08])
    Q = np.array([0.1, 0.2, 0.05, 0.25, 0.1, 0.05, 0.15, 0.1])
    cert = certify_coupled(Crossed(), "resispec", P, Q, 3, n=4000)
    assert not cert.passed and cert.classification == "not the same coupling", cert.verdict


def test_docs_worked_example_passes_and_its_broken_variant_fails():
    import re
    from pathlib import Path

    import pytest

    pytest.importorskip("torch")
    src = Path(__file__).resolve().parents[1].joinpath("docs", "coupled.md").read_text()
    block = re.findall(r"```python\n(import numpy as np, torch.*?)```", src, re.S)[0].replace("n=200_000", "n=5_000")
    ns = {}
    exec(compile(block, "docs/coupled.md", "exec"), ns)
    assert ns["cert"].passed
    broken = block.replace("p_i = torch.where(z > 1e-13, r / torch.where(z > 1e-13, z, 1), p_i)", "p_i = r")
    assert broken != block
    ns = {}
    exec(compile(broken, "docs/coupled.md (broken)", "exec"), ns)
    assert not ns["cert"].passed and ns["cert"].first_mismatch is not None


def test_counterexample_reproduces_under_every_convention():
    import pytest

    from exactness.coupled import CONVENTIONS

    rng = np.random.default_rng(7)
    p, q = rng.dirichlet(np.ones(30)), rng.dirichlet(np.ones(30))
    for conv in CONVENTIONS:
        kernel = reference_kernel(mutants.CATALOGUE["residual_is_p"], conv)
        cert = certify_coupled(kernel, "rrs", p, q, 2, n=20_000, convention=conv, stop_after=1,
                               kernel_spec="exactness.mutants:CATALOGUE.residual_is_p")
        assert not cert.passed and cert.counterexample, (conv, cert.verdict)
        if conv == "sglang":   # the snippet imports the bare mutant; rewrap it in the sglang layout
            src = cert.counterexample.replace(
                "kernel = load_verifier('exactness.mutants:CATALOGUE.residual_is_p')[1]",
                "from exactness.coupled import reference_kernel\n"
                "kernel = reference_kernel(load_verifier('exactness.mutants:CATALOGUE.residual_is_p')[1], 'sglang')")
            assert src != cert.counterexample
        else:
            src = cert.counterexample
        exec(compile(src, f"<cex {conv}>", "exec"), {})
    with pytest.raises(ValueError, match="convention"):
        reference_kernel(get_verifier("rrs"), "nope")


def test_cli_copies_for_a_kernel_that_normalises_in_place(capsys, tmp_path, monkeypatch):
    mod = tmp_path / "inplace_kernel.py"
    mod.write_text("from resispec import get_verifier\n"
                   "class InPlace:\n"
                   "    drafting = 'iid'\n"
                   "    def verify(self, p, q, c, rng=None, *, uniforms):\n"
                   "        p /= p.sum(axis=1, keepdims=True)\n"
                   "        return get_verifier('rrs').verify(p, q, c, rng, uniforms=uniforms)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["certify-coupled", "--verifier", "inplace_kernel:InPlace", "--reference", "rrs", "--n", "2000", "--V", "20"]
    assert main(args) == 1                          # writing into its read-only inputs: the kernel misbehaved
    out = capsys.readouterr().out
    assert "wrote into its read-only inputs" in out and "--copies" in out
    assert main(args + ["--copies"]) == 0
    assert "NO BIAS DETECTED" in capsys.readouterr().out
