"""Shared tiny models for the decoder-certification tests (V 4-8 Markov pairs)."""

import numpy as np

from exactness.chain import chain_target
from simulators.autoregressive import MarkovPair


def pair(V=4, seed=0, noise=2.0):
    return MarkovPair.random(np.random.default_rng(seed), V, noise=noise)


def setup(V=4, seed=0, noise=2.0, prompts=(0, 1, 3)):
    model = pair(V, seed, noise)
    return model, chain_target(model), np.array(prompts, dtype=np.int64)[:, None] % V
