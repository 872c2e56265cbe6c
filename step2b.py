import numpy as np, inspect
from exactness.acceptance_bound import AcceptanceBound, too_generous_block
import exactness.power as pw
print([a for a in dir(AcceptanceBound) if not a.startswith('_')])
print(inspect.signature(AcceptanceBound.detectable_excess), inspect.signature(AcceptanceBound.n_for_excess))
print([a for a in dir(pw) if not a.startswith('_')])
