#!/usr/bin/env bash
# The engine audits committed in reports/ (docs/audit.md), and the summary table reports/audit.md.
# Each line is one `resispec audit` run; an engine that is not installed exits 2 with its install command and is
# skipped here. Budgets: onnxruntime-genai and llama-cpp-python at the default (TV 0.02 per position, 600 s a cell);
# mlx-lm and transformers decode 10-100x slower here, so their full grids are capped (--cell-seconds) and each report
# states the detectable TV each cell reached; two settings of each at the default budget follow. Measured on 2 shared cores: about 15, 40, 35 and 30 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
R=resispec
command -v resispec >/dev/null || R="python -m resispec"
$R audit onnxruntime-genai --out reports
$R audit llama-cpp-python --out reports
$R audit mlx-lm --seed 1 --out reports --cell-seconds 60 --settings "T=1;temperature=0.7;top_k=3;top_p=0.8;min_p=0.1;\
repetition_penalty=1.5;presence_penalty=0.5,frequency_penalty=0.5;presence_penalty=1.5;frequency_penalty=1.0;\
logit_bias=2:2 3:-2;temperature=0.7,top_k=5,top_p=0.9,repetition_penalty=1.3"
$R audit transformers --out reports --cell-seconds 30
# vLLM lives in its own venv (docs/audit.md#the-engines); --n 1000: its pilot times one request per call while the
# adapter batches; --no-shrink: every option FAILs at T=1 already (about 21 minutes here).
[ -x vllm-venv/bin/resispec ] && vllm-venv/bin/resispec audit vllm --out reports --n 1000 --no-shrink
$R audit --summary reports docs/audit.md
# The default budget (TV 0.02 per position, 600 s a cell) on the two slow engines, two settings each: about 50 and 30
# minutes here (reports/audit_power/).
$R audit transformers --settings 'T=1;temperature=0.7,top_k=5,top_p=0.9,repetition_penalty=1.3' --out reports/audit_power
$R audit mlx-lm --settings 'T=1;temperature=0.7,top_k=5,top_p=0.9,repetition_penalty=1.3' --out reports/audit_power
$R audit --summary reports/audit_power
# A real GGUF pair (issue 38, item 4): Qwen2.5-Coder 1.5B target, 0.5B draft (Q4_K_M, `resispec models fetch
# qwen2.5-coder-1.5b qwen2.5-coder-0.5b --no-convert`, 1.6 GB), TV 0.05 per position within 30 minutes a cell:
# about 70 minutes here (reports/audit_gguf/).
$R audit llama-cpp-python --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b \
    --prompt-ids "750,3974,6860,53322,982,257;750,374,38217,1445,982,262" \
    --settings "T=1;temperature=0.7,top_k=40,top_p=0.95,min_p=0.05,repetition_penalty=1.1" --options off draft \
    --tv 0.05 --cell-seconds 1800 --new-tokens 2 --out reports/audit_gguf
