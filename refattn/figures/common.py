"""What the figure modules share: seeded inputs and a mechanism's weights through the registry."""
from __future__ import annotations

import numpy as np
from matplotlib.patches import Rectangle
from numpy.typing import ArrayLike, NDArray

from .. import registry
from ..mechanism import AttentionResult

__all__ = ["GROUP_COLORS", "group_strips", "registry_result", "seeded_qkv"]

#: Colours of clusters, buckets and sorted blocks, by group index (cycled past the last).
GROUP_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f",
                "#ff9da7", "#bab0ac")


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


def group_strips(ax, row_groups: ArrayLike | None = None, col_groups: ArrayLike | None = None, *,
                 colors=GROUP_COLORS) -> None:
    """Colour strips beside an attention heat map: query *i*'s group left of row *i*, key *j*'s above column *j*.

    The group of a query or key (its cluster, hash bucket, sorted block) is an integer ≥ 0, coloured
    ``colors[g % len(colors)]``; a negative group (no group: a padded or unused position) is left blank.
    The strips sit inside the axes, which widen by a margin to hold them.
    """
    n, m = ax.images[0].get_array().shape
    width = max(0.6, 0.04 * max(n, m))                             # in cells, so the strip scales with the panel
    for groups, size, place in ((row_groups, n, "rows"), (col_groups, m, "cols")):
        if groups is None:
            continue
        groups = np.asarray(groups)
        if groups.shape != (size,):
            raise ValueError(f"{place} groups must have shape ({size},), got {groups.shape}")
        for index, g in enumerate(groups.tolist()):
            if g < 0:
                continue
            xy, w, h = ((-0.5 - 1.15 * width, index - 0.5), width, 1.0) if place == "rows" else \
                ((index - 0.5, -0.5 - 1.15 * width), 1.0, width)
            ax.add_patch(Rectangle(xy, w, h, facecolor=colors[g % len(colors)], edgecolor="none", clip_on=False))
