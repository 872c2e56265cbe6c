"""llama.cpp's next-token law depends on how the context was batched (standalone: llama-cpp-python and numpy only).

    python llamacpp_batching_repro.py MODEL.gguf [--threads 2]

For a few contexts (a prompt plus one token), evaluates the same context two ways in a fresh ``Llama``
(``logits_all=True``, n_ctx 256): (a) the prompt as one batch, then the token ALONE (what plain decoding does for
a generated token); (b) the prompt as one batch, then the token together with 3 more tokens in one batch (what
speculative decoding's verify step does with a drafted token).  Both rows are the logits after the SAME context,
so an exact engine would give identical laws.  Prints, per context, the total variation distance between
softmax(a) and softmax(b) and the largest logit difference; exit status 1 when some TV exceeds 1e-3 (the
dependence reproduced), 0 otherwise.  Each schedule is deterministic (the same call twice gives the same bits).

Found by `resispec audit llama-cpp-python` on Qwen2.5-Coder-1.5B/0.5B-Instruct Q4_K_M (docs/audit.md, "A real
GGUF"): TV 0.014-0.063 per context on a 2-core AVX2 CPU, llama-cpp-python 0.3.36.
"""

import argparse
import sys

import numpy as np
from llama_cpp import Llama

# "def quicksort(xs):\n    " in the Qwen2.5 tokenizer, then a few next tokens; any ids < n_vocab will do.
PROMPT = [750, 3974, 6860, 53322, 982, 257]
NEXT = [671, 421, 4210, 707, 470]
FILL = [5, 6, 7]


def law(logits):
    x = np.asarray(logits, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    llm = Llama(model_path=args.model, logits_all=True, n_ctx=256, n_threads=args.threads,
                n_threads_batch=args.threads, n_batch=128, n_ubatch=128, verbose=False)
    if max(PROMPT + NEXT + FILL) >= llm.n_vocab():
        sys.exit(f"the built-in ids need a vocabulary of at least {max(PROMPT + NEXT + FILL) + 1}; edit PROMPT/NEXT")

    def row(tail):
        llm.reset()
        llm.eval(PROMPT)
        llm.eval(tail)
        return np.array(llm.scores[len(PROMPT)])   # the logits after PROMPT + tail[0]

    worst = 0.0
    for t in NEXT:
        alone, batched = row([t]), row([t] + FILL)
        again = row([t])
        tv = 0.5 * float(np.abs(law(alone) - law(batched)).sum())
        worst = max(worst, tv)
        print(f"context PROMPT+[{t}]: TV(alone, in a batch of {1 + len(FILL)}) = {tv:.4f}, max |logit diff| = "
              f"{float(np.abs(alone - batched).max()):.3f}, alone twice identical: {np.array_equal(alone, again)}")
    print("batching changes the law (TV > 1e-3)" if worst > 1e-3 else "no dependence on batching above TV 1e-3")
    return 1 if worst > 1e-3 else 0


if __name__ == "__main__":
    sys.exit(main())
