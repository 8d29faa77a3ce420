r"""The figure of Reformer's LSH attention (Kitaev et al. 2020, §2, Fig. 2): hash buckets, the sorted order and its
chunks in each round, and the effective matrix of the merged rounds beside exact shared-QK softmax.

The tokens are drawn around four directions (a seeded mixture), so that buckets gather similar tokens and the
pairs LSH keeps carry most of softmax's mass. Every panel's strips colour the bucket of each row's and
column's token in that panel's round (the bottom panels: round 1).
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure
from numpy.typing import NDArray

from .. import registry, scaled_dot_product_attention
from ..sparse import lsh_buckets, lsh_chunks
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text
from .common import group_strips

__all__ = ["reformer_lsh"]

_styled = matplotlib.style.context(STYLE_PATH)
N, D, BUCKETS, ROUNDS, SEED = 24, 8, 8, 2, 14
CHUNK = 2 * N // BUCKETS                                           # the paper's default, c = 2n/b


def _tokens() -> tuple[NDArray, NDArray]:
    """Seeded shared queries around four directions, and values."""
    rng = np.random.default_rng(SEED)
    centres = 3.0 * rng.standard_normal((4, D))
    qk = centres[rng.integers(0, 4, N)] + 0.5 * rng.standard_normal((N, D))
    return qk, rng.standard_normal((N, D))


def _round_panel(sub, qk, v, rotations, r: int) -> None:
    """Round r on its own, rows and columns in its sorted order, chunk boundaries drawn."""
    result = registry.get("reformer_lsh").apply(qk, qk, v, rotations=rotations[r:r + 1], num_buckets=BUCKETS,
                                                return_weights=True)
    buckets = lsh_buckets(qk, rotations[r:r + 1])[0]
    order, _ = lsh_chunks(buckets, CHUNK)
    (ax,) = draw_attention(sub, result.weights[np.ix_(order, order)], allowed=result.allowed[np.ix_(order, order)],
                           titles=f"round {r + 1} alone, sorted by (bucket, position):\n"
                                  f"chunks of c = {CHUNK} see their own and the previous chunk",
                           row_labels=[str(i) for i in order], col_labels=[str(j) for j in order],
                           xlabel="key j (sorted)", ylabel="query i (sorted)").ravel()
    for edge in range(CHUNK, N, CHUNK):
        ax.axhline(edge - 0.5, color="black", linewidth=0.8)
        ax.axvline(edge - 0.5, color="black", linewidth=0.8)
    group_strips(ax, buckets[order], buckets[order])


@_styled
def reformer_lsh() -> Figure:
    """Two hash rounds sorted and chunked, then their LSE merge beside exact shared-QK softmax without self."""
    qk, v = _tokens()
    rotations = np.random.default_rng(SEED + 1).standard_normal((ROUNDS, D, BUCKETS // 2))
    merged = registry.get("reformer_lsh").apply(qk, qk, v, rotations=rotations, num_buckets=BUCKETS,
                                                return_weights=True)
    unit = qk / np.linalg.norm(qk, axis=-1, keepdims=True)
    _, exact = scaled_dot_product_attention(qk, unit, v, mask=~np.eye(N, dtype=bool), return_weights=True)
    kept = float(np.sum(exact[merged.allowed]) / N)
    error = float(np.max(np.abs(merged.weights - exact)))
    first = lsh_buckets(qk, rotations[:1])[0]

    fig = figure((12.4, 11.4))
    top, bottom = fig.subfigures(2, 1)
    for r, sub in enumerate(top.subfigures(1, ROUNDS)):
        _round_panel(sub, qk, v, rotations, r)
    left, right = bottom.subfigures(1, 2)
    (ax,) = draw_attention(left, merged.weights, allowed=merged.allowed,
                           titles=f"both rounds merged by their log-sum-exp (−log N_ij\nfor pairs in both rounds); "
                                  f"max |A − softmax| = {roundoff_text(error, '.2f')}").ravel()
    group_strips(ax, first, first)
    (ax,) = draw_attention(right, exact, allowed=~np.eye(N, dtype=bool),
                           titles=f"exact shared-QK softmax, self excluded;\n"
                                  f"the pairs LSH kept hold {roundoff_text(kept, '.0%')} of its mass").ravel()
    group_strips(ax, first, first)
    fig.suptitle(f"Reformer LSH attention (Kitaev et al., 2020): n = {N} tokens, keys k = q/‖q‖, b = {BUCKETS} "
                 f"buckets (strips), {ROUNDS} rounds, seed {SEED}; grey: pairs not computed")
    return fig
