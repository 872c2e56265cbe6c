"""CPU half-precision support: the detection never fails, and the warning names the fix only where it applies."""

import pytest

torch = pytest.importorskip("torch")

from resispec.decoding import models  # noqa: E402


def test_support_is_a_plain_dict_and_never_raises():
    sup = models.cpu_matmul_support()
    assert set(sup) == {"capability", "bf16", "fp16"}
    assert isinstance(sup["capability"], str) and sup["bf16"] in (True, False, None)


@pytest.mark.parametrize("native,expect", [(False, True), (True, False), (None, False)])
def test_warning_only_for_emulated_half_precision_on_cpu(monkeypatch, native, expect):
    monkeypatch.setattr(models, "cpu_matmul_support", lambda: {"capability": "AVX2", "bf16": native, "fp16": native})
    note = models.half_precision_warning("bfloat16", "cpu")
    assert (note is not None) == expect
    if expect:
        assert "AVX512-BF16" in note and "float32" in note and "cpu_linear.py" in note
    assert models.half_precision_warning("float32", "cpu") is None           # float32: nothing to say
    assert models.half_precision_warning(torch.bfloat16, "cuda:0") is None   # not a CPU


def test_private_torch_helpers_that_fail_read_as_unknown(monkeypatch):
    def boom():
        raise RuntimeError("moved")

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", boom, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", boom, raising=False)
    sup = models.cpu_matmul_support()
    assert sup["bf16"] is None and models.half_precision_warning("bfloat16", "cpu") is None


def test_warning_reads_dtype_aliases_and_device_case(monkeypatch):
    monkeypatch.setattr(models, "cpu_matmul_support", lambda: {"capability": "AVX2", "bf16": False, "fp16": False})
    assert models.half_precision_warning("bf16", "CPU") is not None
    assert models.half_precision_warning("fp16", "cpu") is not None
    assert models.half_precision_warning("not-a-dtype", "cpu") is None
