"""Record (p, q) at real decoding nodes into a capture file (see ``simulators.captured``)."""

from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

from simulators.captured import save_capture, sparsify

from .engine import speculative_decode
from .laws import SamplingConfig


def capture(pair, prompts: list[list[int]], path, *, verifier, tree="4,2,1", sampling=SamplingConfig(),
            max_new_tokens: int = 48, seed: int = 0, top_n: int = 64, progress: bool = True,
            prompt_names=None):
    """Decode ``prompts`` speculatively and store every verified node's (p, q).

    Parameters
    ----------
    pair : ModelPair
    prompts : list of token-id lists
    path : output ``.npz`` (written atomically)
    verifier : Verifier deciding the walk (the laws at the visited nodes depend on it)
    tree, sampling, max_new_tokens, seed : as in :func:`speculative_decode`
    top_n : int
        Keep the union of the top-``top_n`` tokens of p and of q per node.

    Returns
    -------
    (path, number of nodes)
    """
    idx, pv, qv, depth = [], [], [], []
    for i, ids in enumerate(tqdm(prompts, desc="capture", disable=not progress)):
        nodes = speculative_decode(pair.target, pair.draft, ids, verifier, tree, sampling=sampling,
                                   max_new_tokens=max_new_tokens, rng=np.random.default_rng([seed, i]),
                                   eos_token_id=pair.eos_ids(), record=True).nodes
        if not nodes:
            continue
        a, b, c = sparsify(np.stack([n["p"] for n in nodes]), np.stack([n["q"] for n in nodes]), top_n)
        idx.append(a), pv.append(b), qv.append(c)
        depth.extend(n["depth"] for n in nodes)
    if not idx:
        raise ValueError("no nodes were captured; use longer generations or more prompts")
    meta = {"target": pair.target_name, "draft": pair.draft_name, "temperature": sampling.temperature,
            "top_k": sampling.top_k, "top_p": sampling.top_p, "tree": str(tree), "verifier": verifier.name,
            "max_new_tokens": max_new_tokens, "seed": seed, "top_n": top_n, "prompts": len(prompts),
            "prompt_names": list(prompt_names) if prompt_names is not None else None}
    out = save_capture(path, np.concatenate(idx), np.concatenate(pv), np.concatenate(qv), np.asarray(depth), meta)
    return out, int(sum(len(a) for a in idx))
