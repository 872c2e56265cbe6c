"""Token-tree shapes: branching factor per depth (``"4,2,2,1"``).

A tree of shape ``(k_1, ..., k_D)`` gives every node at depth ``d`` (root at
depth 0) ``k_{d+1}`` children drafted from the draft's law at that node
(``docs/RESISPEC.md`` section 6).  Used by the tree simulators and by
real-model decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._validation import check_drafting

#: Largest drafted tree (nodes) the harness and the benchmarks take: every node is drawn and verified in Python
#: (``exactness.pathlevel.certify_tree_rule``: (50, 50), 2,550 nodes, ~20 s at n = 4,000; ``resispec bench``'s
#: 9,9,9,9,9,9,9,9 -- 48 million nodes -- was killed for memory at 24 GB); Sequoia's largest trees have 768.
MAX_TREE_NODES = 4096


@dataclass(frozen=True)
class TreeShape:
    """Branching factors per depth and the drafting law.

    Attributes
    ----------
    branching : tuple of int
        ``branching[d]`` children per node at depth ``d``; all >= 1.
    drafting : {"iid", "without_replacement"}
    """

    branching: tuple[int, ...]
    drafting: str = "iid"

    def __post_init__(self):
        b = tuple(self.branching)
        if len(b) == 0:
            raise ValueError("tree shape needs at least one depth, e.g. '4,2,1'")
        for d, x in enumerate(b):
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
                raise TypeError(f"branching factor at depth {d} must be an integer, got {x!r}")
            if x < 1:
                raise ValueError(f"branching factor at depth {d} is {x}; every depth needs >= 1 child")
        check_drafting(self.drafting)
        object.__setattr__(self, "branching", tuple(int(x) for x in b))

    @classmethod
    def parse(cls, spec: "str | TreeShape | tuple | list", drafting: str = "iid") -> "TreeShape":
        """Parse ``"4,2,2,1"`` (or ``"4x2x2x1"``, a list, or a TreeShape); a ``"wor:"`` prefix
        (``"wor:4,2"``) means without-replacement drafting and overrides ``drafting``.

        Raises ValueError for empty, non-integer or zero entries.
        """
        if isinstance(spec, TreeShape):
            return spec
        if isinstance(spec, str) and spec.strip().startswith("wor:"):
            spec, drafting = spec.strip()[4:], "without_replacement"
        if isinstance(spec, str):
            parts = [s.strip() for s in spec.replace("x", ",").split(",")]
            if not spec.strip() or any(not s for s in parts):
                raise ValueError(f"malformed tree shape {spec!r}; write branching factors per depth like '4,2,2,1'")
            try:
                vals = tuple(int(s) for s in parts)
            except ValueError:
                raise ValueError(f"malformed tree shape {spec!r}; entries must be integers like '4,2,2,1'") from None
            return cls(vals, drafting)
        try:
            vals = tuple(spec)
        except TypeError:
            raise TypeError(f"tree shape must be a string like '4,2,2,1', a sequence of ints or a TreeShape, "
                            f"got {type(spec).__name__}") from None
        return cls(vals, drafting)

    @property
    def depth(self) -> int:
        return len(self.branching)

    @property
    def num_nodes(self) -> int:
        """Number of drafted tokens (tree nodes below the root)."""
        total, width = 0, 1
        for b in self.branching:
            width *= b
            total += width
        return total

    def __str__(self) -> str:
        return ",".join(map(str, self.branching))

    @property
    def label(self) -> str:
        """``"4,2"``, or ``"wor:4,2"`` for without-replacement drafting (what :meth:`parse` reads back)."""
        return ("wor:" if self.drafting == "without_replacement" else "") + str(self)
