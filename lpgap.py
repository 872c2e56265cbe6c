import numpy as np, warnings, time, sys
warnings.simplefilter("ignore")
from resispec.pathlevel import optimal_accepted, analyse_path, get_path_verifier
from resispec.pathlevel.analysis import analyse_tree
from simulators.autoregressive import MarkovPair
rng = np.random.default_rng(int(sys.argv[1]))
block = get_path_verifier("block"); trav = get_path_verifier("traversal")
worst = (-1, None); t = time.time(); cnt = 0
while time.time() - t < float(sys.argv[2]):
    V = int(rng.integers(2, 6)); L = int(rng.integers(1, 4)) if V <= 4 else int(rng.integers(1, 3))
    scale = float(rng.choice([1, 3, 8, 15])); noise = float(rng.choice([1e-4, 0.01, 0.3, 1, 3]))
    pair = MarkovPair.random(rng, V, scale=scale, noise=noise)
    b = optimal_accepted(pair, (1,) * L)
    e = analyse_path(block, pair, L).expected_accepted
    gap = e - (b.expected_accepted + 10 * b.tolerance); cnt += 1
    if gap > worst[0]: worst = (gap, (V, L, scale, noise, e, b.expected_accepted, b.tolerance))
    if gap > 0: print("EXACT BLOCK EXCEEDS BOUND", V, L, scale, noise, e, b)
print(cnt, "cases; worst gap (E_block - bound)", worst)
