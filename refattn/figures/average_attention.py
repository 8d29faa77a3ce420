r"""Figure of the Average Attention Network (Zhang et al., 2018): uniform causal weights beside softmax's; the gates.

Seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 12, d = 8, seed 5). Top: the
registry record's weights with ``causal=True`` (the paper's mask matrix, 1/(i + 1) on j ≤ i, the same
for every input) beside causal softmax attention on the same q, k, and the output difference.
Bottom: the whole sub-layer (:func:`~refattn.prior.average_attention_layer`, parameters from
:func:`~refattn.prior.init_average_attention` with seed 5, d_ff = 16) run on v as its input y: its
input gate i and forget gate f (n × d, between 0 and 1), which mix the position's own input with
the FFN of the running average.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..prior import average_attention_layer, init_average_attention
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["average_attention"]

N, SEED, D_FF = 12, 5, 16


@matplotlib.style.context(STYLE_PATH)
def average_attention() -> Figure:
    """The uniform causal weights, softmax's, and the sub-layer's gates.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    result = registry.get("average_attention").apply(q, k, v, causal=True, return_weights=True)
    out, A = scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)
    causal = np.tril(np.ones((N, N), dtype=bool))
    params = init_average_attention(SEED, v.shape[-1], D_FF)
    _, i, f = average_attention_layer(v, params, return_gates=True)

    fig = figure((12.0, 9.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.0])
    weights, difference = top.subfigures(1, 2, width_ratios=[2.0, 1.0])
    draw_attention(weights, np.stack([result.weights, A]), allowed=causal, annotate=False,
                   titles=["average attention: 1/(i + 1) on j ≤ i", "causal softmax(Q Kᵀ/√d)"])
    draw_attention(difference, result.output - out, signed=True, annotate=False, xlabel="feature c",
                   titles="output difference (average − softmax)")
    columns = [str(c) for c in range(v.shape[-1])]
    draw_attention(bottom, np.stack([i, f]), vmin=0.0, vmax=1.0, annotate=False, xlabel="feature c",
                   ylabel="position j", col_labels=columns,
                   titles=["input gate i = σ(·)[:d]  (weight of y_j)",
                           "forget gate f = σ(·)[d:]  (weight of FFN(g_j))"],
                   suptitle="the sub-layer's gates, σ([y_j; FFN(g_j)] W + b), on y = v (initial parameters)")
    fig.suptitle(f"Average Attention Network (Zhang et al., 2018): a fixed cumulative average in place of "
                 f"self-attention; n = {N}, d = 8, seed {SEED}")
    return fig
