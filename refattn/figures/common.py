"""What the figure modules share: seeded inputs and a mechanism's weights through the registry."""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .. import registry
from ..mechanism import AttentionResult

__all__ = ["seeded_qkv", "registry_result"]


def seeded_qkv(seed: int, n: int, m: int | None = None, *, heads: int | None = None, d: int = 8,
               q_scale: float = 1.5) -> tuple[NDArray, NDArray, NDArray]:
    """Seeded q (n, d), k and v (m, d), with a leading head axis if ``heads``; q is scaled by
    ``q_scale`` so that the weights are not all flat."""
    rng = np.random.default_rng(seed)
    lead = () if heads is None else (heads,)
    m = n if m is None else m
    return (q_scale * rng.standard_normal((*lead, n, d)), rng.standard_normal((*lead, m, d)),
            rng.standard_normal((*lead, m, d)))


def registry_result(mechanism: str, n: int, m: int | None = None, *, seed: int, causal=False,
                    **options) -> AttentionResult:
    """The registry record's ``apply`` with weights on :func:`seeded_qkv` input (``rng=seed`` too)."""
    q, k, v = seeded_qkv(seed, n, m)
    return registry.get(mechanism).apply(q, k, v, causal=causal, rng=seed, return_weights=True, **options)
