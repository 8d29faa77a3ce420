"""``python -m refattn bench FAMILY``: speed and memory figures, measured in one process.

Targets live here, never in timed unit tests: shared machines are noisy, so each benchmark prints
ratios against a baseline measured in the same run (t(n)/t(n/2), CSR vs dense) next to the raw
times, and states each target with its measured value.
"""
from __future__ import annotations

from . import backward, beyond, content, linear, lowrank, memory, oracle, sdpa, sparse

FAMILIES = {"sdpa": sdpa, "sparse": sparse, "linear": linear, "content": content, "lowrank": lowrank,
            "beyond": beyond, "memory": memory, "oracle": oracle,
            "backward": backward}

__all__ = ["FAMILIES"]
