"""A tiny random Qwen3.5 with a random 1-layer MTP head, converted for onnxruntime-genai's ``og.MtpGenerator``.

The shared tiny Llama pair (``exactness.engines.tiny``) has no MTP head and onnxruntime-genai 0.18's builder writes
an MTP graph only for a Qwen3.5 / Qwen3.6 checkpoint that declares ``mtp_num_hidden_layers`` and carries ``mtp.*``
tensors (``models/builders/mtp.py``).  :func:`build_mtp_models` therefore writes its own checkpoint, offline, with
transformers (fixed torch seeds, nothing downloaded): ``Qwen3_5ForConditionalGeneration`` (the builder's
architecture for ``qwen3_5_text``), text model hidden 64, 2 full-attention layers, 4 heads of 16 dimensions
(onnxruntime's CPU GroupQueryAttention takes multiples of 16), ``partial_rotary_factor`` 0.5 so the interleaved
mrope sections [2, 1, 1] sum to rotary_dim / 2, the output head sharpened by ``scale``, random norm offsets; plus
a random Qwen3-Next-layout MTP head (``mtp.fc``, ``mtp.pre_fc_norm_{embedding,hidden}``, ``mtp.norm``,
``mtp.layers.0.*``) in ``mtp.safetensors``.  The vocabulary is the caller's ``V`` (word-level ``t0 .. t{V-1}``), so
the audit's prompts and contexts are valid as they are.

The builder (``parse_extra_options`` + ``create_model``, fp32, CPU) writes ``model.onnx`` (with a
``hidden_states`` output), ``mtp.onnx`` and a ``genai_config.json`` with a ``model.mtp`` section.  Edits, each
needed for 0.18.0 on CPU to load and run:

* ``shared_initializers`` dropped from ``genai_config.json``: on CPU ``og.Model`` fails with "GetMemoryInfo for CPU
  should not be used"; ``mtp.onnx``'s external-data entries already point into ``model.onnx.data``.
* The head as its own ``og.Model`` package (``mtp_pkg/``): ``og.MtpGenerator(main, mtp, params)`` takes two models;
  the package's decoder is ``mtp.onnx`` with the ``model.mtp`` I/O names.
* ``model.onnx`` emits **float16** logits (a ``Cast`` at the end): the CPU path of ``MtpGenerator`` casts the main
  logits to fp32 and genai's ``Cast`` throws "Cast - input and output types are the same" on fp32 logits.  The law
  must therefore be read from these fp16 logits (``OrtGenaiEngine.target`` does, for option ``mtp``).
* The ghost EOS of ``exactness.engines.ortgenai`` (one extra logit column ``V`` never drawn, so EOS never stops a
  sequence and exactly ``new_tokens`` tokens come out): in ``model.onnx`` its logit is -65504 (float16 lowest,
  finite; written before the cast), in ``mtp.onnx`` float32 lowest; ``vocab_size = V + 1``, ``eos_token_id =
  pad_token_id = bos_token_id = V``.
* ``image_token_id = video_token_id = vision_start_token_id = V`` in ``genai_config.json``: unset, the engine's
  Qwen3.5 position-id code reads them as 0 and a context holding "0 0" raises "Not enough image_grid_thw data for
  image tokens"; V (the ghost) is never in a context.

This module imports nothing from the project at module level and its functions only the libraries they name, so
its source is pasted whole into the standalone reproduction scripts (``OrtGenaiEngine.repro_script``).
"""

from __future__ import annotations

import json
import os
import shutil

#: The ghost logit written in model.onnx before the float16 cast: float16 lowest (finite; float32 lowest -> -inf).
FP16_GHOST = -65504.0
#: The ghost logit of mtp.onnx (float32 logits): float32 lowest.
FP32_GHOST = -3.4028234663852886e38


def write_checkpoint(hf_dir, vocab: int, seed: int = 0, scale: float = 8.0) -> None:
    """Write the tiny Qwen3.5 + random MTP head checkpoint (config.json, model.safetensors, mtp.safetensors,
    tokenizer.json, tokenizer_config.json) under ``hf_dir`` (created; must not hold another checkpoint).

    ``vocab`` V >= 8 (the multimodal special ids V-5 .. V-2 are configuration only: no image is ever given);
    ``seed`` seeds the main model (the head: ``seed + 1``); ``scale`` multiplies ``lm_head`` (sharper laws).
    """
    import copy

    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer

    V = int(vocab)
    text = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                layer_types=["full_attention", "full_attention"], tie_word_embeddings=False,
                eos_token_id=V - 1, pad_token_id=V - 1, bos_token_id=None, mtp_num_hidden_layers=1,
                rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": 0.5, "rope_type": "default",
                                 "mrope_section": [2, 1, 1], "mrope_interleaved": True})
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16)
    cfg = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=False, image_token_id=V - 4,
                        video_token_id=V - 3, vision_start_token_id=V - 2, vision_end_token_id=V - 5)
    cfg.architectures = ["Qwen3_5ForConditionalGeneration"]
    torch.manual_seed(seed)
    model = Qwen3_5ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
        for name, p in model.named_parameters():
            if "norm" in name:  # Qwen3.5 norms scale by (1 + w): random nonzero offsets
                p.normal_(0, 0.1)
    os.makedirs(hf_dir, exist_ok=True)
    model.save_pretrained(hf_dir, safe_serialization=True)
    # the MTP head: one full-attention decoder layer + fc (2H -> H) and three norms, random (seed + 1)
    tc = copy.deepcopy(cfg.text_config)
    tc.layer_types, tc.num_hidden_layers = ["full_attention"], 1
    torch.manual_seed(seed + 1)
    layer = Qwen3_5DecoderLayer(tc, layer_idx=0)
    H = tc.hidden_size
    mtp = {f"mtp.layers.0.{k}": v.detach().clone().normal_(0, 0.05 if v.dim() > 1 else 0.1)
           for k, v in layer.state_dict().items()}
    mtp["mtp.fc.weight"] = torch.randn(H, 2 * H) * 0.05
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        mtp[f"mtp.{name}.weight"] = torch.randn(H) * 0.1
    save_file({k: v.contiguous() for k, v in mtp.items()}, os.path.join(hf_dir, "mtp.safetensors"))
    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(V)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(os.path.join(hf_dir, "tokenizer.json"))
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": f"t{V - 1}",
                   "eos_token": f"t{V - 1}", "unk_token": "t0", "model_max_length": 256}, f)


def edit_logits(onnx_path, vocab: int, ghost: float, fp16: bool) -> None:
    """Output ``logits`` (B, S, V) -> (B, S, V + 1): column V = ``ghost``; then cast to float16 when ``fp16``."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(onnx_path), load_external_data=False)
    g = model.graph
    out = next(o for o in g.output if o.name == "logits")
    dims = out.type.tensor_type.shape.dim
    if out.type.tensor_type.elem_type != TensorProto.FLOAT or dims[-1].dim_value != vocab:
        raise ValueError(f"{onnx_path}: logits are not float32 (B, S, {vocab})")
    for node in g.node:
        node.output[:] = ["logits_real" if o == "logits" else o for o in node.output]
    g.initializer.extend([
        helper.make_tensor("ghost_starts", TensorProto.INT64, [1], [0]),
        helper.make_tensor("ghost_ends", TensorProto.INT64, [1], [1]),
        helper.make_tensor("ghost_axes", TensorProto.INT64, [1], [-1]),
        helper.make_tensor("ghost_zero", TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor("ghost_value", TensorProto.FLOAT, [], [ghost]),
    ])
    last = "logits_ghost" if fp16 else "logits"
    g.node.extend([
        helper.make_node("Slice", ["logits_real", "ghost_starts", "ghost_ends", "ghost_axes"], ["ghost_col"]),
        helper.make_node("Mul", ["ghost_col", "ghost_zero"], ["ghost_zeros"]),       # (B, S, 1) zeros
        helper.make_node("Add", ["ghost_zeros", "ghost_value"], ["ghost_logit"]),    # (B, S, 1) = ghost
        helper.make_node("Concat", ["logits_real", "ghost_logit"], [last], axis=-1),
    ])
    if fp16:
        g.node.append(helper.make_node("Cast", [last], ["logits"], to=TensorProto.FLOAT16, name="logits_to_fp16"))
        out.type.tensor_type.elem_type = TensorProto.FLOAT16
    dims[-1].dim_value = vocab + 1
    onnx.save(model, str(onnx_path))


def build_mtp_models(root, vocab: int, seed: int = 0, scale: float = 8.0):
    """Checkpoint + conversion under ``root``: returns ``(main_dir, mtp_dir)``, the two ``og.Model`` folders.

    ``root/hf`` the checkpoint (:func:`write_checkpoint`), ``root/onnx`` the main model (fp16 logits, ghost EOS,
    ``model.mtp`` section kept for ``MtpGenerator``), ``root/mtp_pkg`` the head's package (its files are symbolic
    links into ``root/onnx``).  Any earlier content of ``root`` is removed.  The builder's errors propagate.
    """
    import contextlib
    import copy
    import io

    from onnxruntime_genai.models import builder

    V = int(vocab)
    shutil.rmtree(root, ignore_errors=True)
    hf, onnx_dir, pkg = (os.path.join(str(root), d) for d in ("hf", "onnx", "mtp_pkg"))
    write_checkpoint(hf, V, seed, scale)
    args = (None, hf, onnx_dir, "fp32", "cpu", os.path.join(str(root), "cache"))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        builder.create_model(*args, **builder.parse_extra_options(*args, {}))
    edit_logits(os.path.join(onnx_dir, "model.onnx"), V, FP16_GHOST, fp16=True)
    edit_logits(os.path.join(onnx_dir, "mtp.onnx"), V, FP32_GHOST, fp16=False)
    path = os.path.join(onnx_dir, "genai_config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["model"].update(vocab_size=V + 1, eos_token_id=V, pad_token_id=V, bos_token_id=V, image_token_id=V,
                        video_token_id=V, vision_start_token_id=V)
    cfg["model"]["decoder"].pop("shared_initializers", None)
    cfg["model"]["mtp"].pop("shared_initializers", None)
    cfg["search"].update(top_k=0, top_p=1.0, do_sample=True)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    os.makedirs(pkg)
    for name in ("mtp.onnx", "mtp.onnx.data", "model.onnx.data", "tokenizer.json", "tokenizer_config.json"):
        os.symlink(os.path.join(os.path.abspath(onnx_dir), name), os.path.join(pkg, name))
    head = cfg["model"].pop("mtp")
    dec = copy.deepcopy(cfg["model"]["decoder"])
    dec.update(filename="mtp.onnx", num_hidden_layers=head["num_hidden_layers"], inputs=head["inputs"],
               outputs=head["outputs"])
    cfg["model"]["decoder"] = dec
    with open(os.path.join(pkg, "genai_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return onnx_dir, pkg
