r"""Figure of T5's relative position buckets (Raffel et al., 2020): the bucket maps over (i, j) and one head's bias.

Top: the bucket of every pair (i, j) for n = m = 160 at the official defaults (32 buckets,
max_distance 128), bidirectional (the encoder's table: keys in the future get their own 16 buckets)
and causal (the decoder's: 32 buckets for the past, the future masked), and the bucket against the
relative position r = j − i for both. Bottom: one head's bias B_ij = b[bucket(j − i)] for a table
drawn by :func:`~refattn.positional.init_t5_bias` (seed 4, 8 heads, head 0) on n = m = 24, through
the bidirectional and the causal buckets (the official initialisation is small, |b| ≤ √(6/40)), the
bidirectional weights softmax(QKᵀ/√d + B) on a seeded input (:func:`~refattn.figures.common.seeded_qkv`,
d = 8, seed 4), and softmax's weights without the bias.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import scaled_dot_product_attention
from ..core.causal_mask import causal_mask
from ..positional import T5BiasParams, init_t5_bias, relative_positions, t5_relative_position_bucket
from ..positional import t5_bias as t5_bias_of
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["t5_bias"]

N_MAP, N, SEED, HEADS = 160, 24, 4, 8
SPAN = 150                                                         # r = −SPAN … SPAN in the line plot


@matplotlib.style.context(STYLE_PATH)
def t5_bias() -> Figure:
    """Bucket maps (bidirectional, causal) and bucket(r) on top; a head's bias and its weights below.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    r = relative_positions(N_MAP, N_MAP)
    maps = np.stack([t5_relative_position_bucket(r, bidirectional=True),
                     t5_relative_position_bucket(r, bidirectional=False)]).astype(np.float64)
    allowed = np.stack([np.ones((N_MAP, N_MAP), dtype=bool), causal_mask(N_MAP, N_MAP)])
    head = T5BiasParams(init_t5_bias(SEED, num_heads=HEADS).table[0])
    B = np.stack([t5_bias_of(head, N, N), t5_bias_of(head, N, N, causal=True)])   # (2, N, N)
    q, k, v = seeded_qkv(SEED, N)
    weights = scaled_dot_product_attention(q, k, v, B[0], return_weights=True)[1]
    softmax = scaled_dot_product_attention(q, k, v, return_weights=True)[1]

    fig = figure((14.0, 9.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.0])
    maps_panel, line_panel = top.subfigures(1, 2, width_ratios=[2.0, 1.1])
    draw_attention(maps_panel, maps, allowed=allowed, vmin=0.0, vmax=31.0, cmap="turbo", annotate=False,
                   titles=["bidirectional buckets (encoder)", "causal buckets (decoder)"])
    ax = line_panel.subplots()
    span = np.arange(-SPAN, SPAN + 1)
    for bidirectional, color in ((True, "#4e79a7"), (False, "#e15759")):
        ax.step(span, t5_relative_position_bucket(span, bidirectional=bidirectional), where="mid", color=color,
                label="bidirectional" if bidirectional else "causal (future → 0)")
    for x in (-128, 128):
        ax.axvline(x, color="grey", linewidth=0.8, linestyle="--")
    ax.set(xlabel="relative position r = j − i", ylabel="bucket", title="bucket(r): exact for |r| small, "
           "logarithmic beyond,\none bucket past max_distance = 128 (dashed)")
    ax.legend(fontsize=8)
    bias_panel, weights_panel = bottom.subfigures(1, 2, width_ratios=[1.9, 1.9])
    draw_attention(bias_panel, B, allowed=np.stack([np.ones((N, N), dtype=bool), causal_mask(N, N)]), signed=True,
                   vmin=None, annotate=False, titles=["head 0's bias b[bucket(j − i)]\n(bidirectional buckets)",
                                                      "the same table, causal buckets"])
    draw_attention(weights_panel, np.stack([weights, softmax]), vmax=1.0, annotate=False,
                   titles=["softmax(Q Kᵀ/√d + B)", "softmax(Q Kᵀ/√d) (no bias)"])
    fig.suptitle(f"T5 relative position buckets (Raffel et al., 2020): 32 buckets, max_distance 128, a learned scalar "
                 f"per bucket and head;\nmaps n = m = {N_MAP}; bias and weights n = m = {N}, d = 8, seed {SEED}")
    return fig
