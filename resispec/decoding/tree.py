"""A drafted token tree and its attention mask / position ids.

Nodes are stored in creation order (breadth first, depth by depth).  The
root is the last committed token (it is not a node); node ``i`` has a
``parent`` (-1 for children of the root), a ``depth`` (1 for children of
the root) and its drafted ``token``.  ``children[j]`` lists node ids in the
order the candidates were drawn, which is the order the verifier walks
them (``docs/RESISPEC.md`` section 6).
"""

from __future__ import annotations

import numpy as np

ROOT = -1


class DraftTree:
    """Growing token tree (tokens, parents, depths, ancestor matrix)."""

    def __init__(self):
        self.tokens: list[int] = []
        self.parent: list[int] = []
        self.depth: list[int] = []
        self.children: dict[int, list[int]] = {ROOT: []}
        self._anc: list[np.ndarray] = []  # ancestor-or-self node ids per node

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, parent: int, token: int) -> int:
        """Append a child of ``parent`` (``ROOT`` = -1) and return its node id."""
        i = len(self.tokens)
        self.tokens.append(int(token))
        self.parent.append(int(parent))
        self.depth.append(1 if parent == ROOT else self.depth[parent] + 1)
        self.children.setdefault(parent, []).append(i)
        self.children[i] = []
        up = self._anc[parent] if parent != ROOT else np.zeros(0, dtype=np.int64)
        self._anc.append(np.append(up, i))
        return i

    def ancestors(self, i: int) -> np.ndarray:
        """Ancestor-or-self node ids of node ``i`` (root excluded), shallow first."""
        return self._anc[i]

    def visibility(self, rows, cols) -> np.ndarray:
        """Boolean (len(rows), len(cols)): ``True`` where node ``rows[a]`` may attend to node ``cols[b]``.

        A node attends to itself and its ancestors only (tree attention;
        SpecInfer, arXiv 2305.09781).
        """
        cols = np.asarray(cols, dtype=np.int64)
        out = np.zeros((len(rows), len(cols)), dtype=bool)
        for a, r in enumerate(rows):
            out[a] = np.isin(cols, self._anc[r])
        return out


def attention_mask(prefix_len: int, visible_new, dtype, device):
    """Additive 4-D attention mask for one forward pass over new tokens.

    Parameters
    ----------
    prefix_len : int
        Tokens already in the KV cache that every new token may see.
    visible_new : ndarray, shape (T, T_prev + T), bool
        Visibility of the cached tree tokens after the prefix and of the
        new tokens themselves (``True`` = attend).
    dtype, device : torch dtype/device of the model.

    Returns
    -------
    torch.Tensor, shape (1, 1, T, prefix_len + T_prev + T), ``dtype``
        0 where attention is allowed, ``finfo(dtype).min`` elsewhere (works
        with the eager and the SDPA attention of transformers).
    """
    import torch

    vis = torch.as_tensor(np.asarray(visible_new, dtype=bool), device=device)
    T = vis.shape[0]
    full = torch.cat([torch.ones((T, prefix_len), dtype=torch.bool, device=device), vis], dim=1)
    mask = torch.zeros(full.shape, dtype=dtype, device=device)
    mask.masked_fill_(~full, torch.finfo(dtype).min)
    return mask[None, None]
