r"""The figure of DeBERTa's disentangled attention (He et al., 2021): its three score terms, δ(i, j), the weights.

One seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 3) and the
position table K^r, Q^r drawn by the registry record's ``apply`` (``rng=3``, k = 4). Top row: the
three terms over (i, j), each already over √(3d): content-to-content Q^c K^cᵀ, content-to-position
q_i·K^r[δ(i, j)] (constant along each diagonal once it is clipped: a band of width 2k, and two flat
corners), position-to-content k_j·Q^r[δ(j, i)] as the paper's Eq. 4 writes it, and the same term read
at δ(i, j) as the official code does. Bottom row: the relative index δ(i, j) with k = 4, the log
buckets of v2/v3 (position_buckets = 8, max_position = 32) over 48 positions, and the weights of
DeBERTa beside softmax's on the same q, k, v.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..positional import deberta_delta, disentangled_scores
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["deberta"]

N, SEED, SPAN = 16, 3, 4
BUCKET_N, BUCKETS, MAX_POSITION = 48, 8, 32


@matplotlib.style.context(STYLE_PATH)
def deberta() -> Figure:
    """The three terms (p2c both ways) on top; δ, the log-bucket δ and the weights below.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    result = registry.get("deberta").apply(q, k, v, rng=SEED, span=SPAN, return_weights=True, return_draws=True)
    params = result.draws["params"]
    S = disentangled_scores(q, k, params)
    official = disentangled_scores(q, k, params, p2c_index="official")["p2c"]
    softmax = scaled_dot_product_attention(q, k, v, return_weights=True)[1]

    fig = figure((14.0, 8.6))
    top, bottom = fig.subfigures(2, 1)
    draw_attention(top, np.stack([S["c2c"], S["c2p"], S["p2c"], official]), signed=True, annotate=False,
                   titles=["content → content\nQᶜ_i·Kᶜ_j/√(3d)", "content → position\nQᶜ_i·Kʳ_δ(i,j)/√(3d)",
                           "position → content (paper, Eq. 4)\nKᶜ_j·Qʳ_δ(j,i)/√(3d)",
                           "position → content (official code)\nKᶜ_j·Qʳ_δ(i,j)/√(3d)"])
    index_panel, bucket_panel, weights_panel = bottom.subfigures(1, 3, width_ratios=[1.0, 1.0, 1.9])
    draw_attention(index_panel, deberta_delta(N, N, SPAN).astype(float), cmap="viridis", annotate=False,
                   titles=f"δ(i, j), k = {SPAN}\n(0 … 2k − 1 = {2 * SPAN - 1})")
    draw_attention(bucket_panel, deberta_delta(BUCKET_N, BUCKET_N, None, position_buckets=BUCKETS,
                                                max_position=MAX_POSITION).astype(float), cmap="viridis",
                   annotate=False, titles=f"δ with log buckets (v2/v3)\nposition_buckets = {BUCKETS}, "
                                          f"max_position = {MAX_POSITION}")
    draw_attention(weights_panel, np.stack([result.weights, softmax]), vmax=1.0, annotate=False,
                   titles=["DeBERTa: softmax(sum of the three terms)", "softmax(Q Kᵀ/√d)\n(no position term)"])
    fig.suptitle(f"DeBERTa (He et al., 2021): content and relative position as separate score terms, "
                 f"distances clipped at k = {SPAN};\nn = m = {N}, d = 8, seed {SEED}, query i at position i, "
                 f"key j at j")
    return fig
