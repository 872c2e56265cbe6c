"""The benchmark wing's default grids, in a module that imports nothing (so ``resispec --help`` stays light).

Each driver module re-exports its own as ``DEFAULT_*`` (``resispec.bench.trees.DEFAULT_SHAPES`` is
``TREES_SHAPES`` here); the CLI's option defaults read them from here.
"""

# resispec bench (resispec.bench.trees): token-tree shapes x families x temperatures
TREES_SHAPES = (
    "1,1,1,1,1,1,1,1", "2,2,2", "4,2,2,1", "8,1,1,1", "4,4", "16", "8,4", "32", "16,3", "64",
    "wor:4,2,2,1", "wor:8,4", "wor:16", "wor:16,3",
)
TREES_FAMILIES = ("softmax_noise", "zipf", "shifted", "dirichlet", "temp_mismatch", "softmax_noise_top_k", "ngram")
TREES_TEMPERATURES = (0.7, 1.0, 1.5)

# resispec bench accept (resispec.bench.accept)
ACCEPT_FAMILIES = ("softmax_noise", "zipf", "shifted", "ngram")
ACCEPT_V = (1000, 32000)
ACCEPT_K = (2, 4, 8)
ACCEPT_T = (0.7, 1.0, 1.5)

# resispec bench gap (resispec.bench.gap)
GAP_FAMILIES = ("softmax_noise", "zipf", "shifted")
GAP_T = (0.7, 1.0, 1.5)
GAP_K = (2, 4, 8)

# resispec bench decode (resispec.bench.decode)
DECODE_VERIFIERS = ("rrs", "rrs_wor", "kseq", "target_only", "resispec")

# resispec bench verify (resispec.bench.throughput)
VERIFY_VERIFIERS = ("rrs", "kseq", "resispec")
VERIFY_K = (2, 4, 8)
