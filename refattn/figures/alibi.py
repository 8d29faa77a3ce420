r"""Figure of ALiBi (Press et al., 2022): the per-head bias over (i, j), the slopes, and the weights.

Top: the bias −m_h·(i − j) of heads 1, 4 and 8 of an 8-head model (slopes 1/2, 1/16, 1/256) under the causal
mask, and head 1's symmetric form −m_h·|i − j| for encoders, n = 12. Bottom: the slopes of
:func:`~refattn.positional.alibi_slopes` for h = 8, 12 and 16 (12 is not a power of two: the 8 slopes of h = 8,
then every other slope of h = 16), and head 1's causal weights beside softmax's on seeded input
(:func:`~refattn.figures.common.seeded_qkv`, n = 12, d = 8, seed 3).
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import scaled_dot_product_attention
from ..positional import alibi_attention, alibi_bias, alibi_slopes
from ..viz import STYLE_PATH, draw_attention, figure
from .common import GROUP_COLORS, seeded_qkv

__all__ = ["alibi"]

N, SEED, HEADS = 12, 3, (0, 3, 7)


@matplotlib.style.context(STYLE_PATH)
def alibi() -> Figure:
    """Three heads' causal biases, the symmetric form, the slopes for h = 8, 12, 16, and the weights.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    slopes = alibi_slopes(8)
    causal_bias = alibi_bias(N, slopes=slopes[list(HEADS)])
    symmetric = alibi_bias(N, slopes=slopes[:1], form="symmetric")
    causal = np.tril(np.ones((N, N), dtype=bool))
    every = np.ones((N, N), dtype=bool)
    q, k, v = seeded_qkv(SEED, N)
    A = alibi_attention(q[None], k[None], v[None], slopes=slopes[:1], causal=True, return_weights=True)[1][0]
    A_plain = scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)[1]

    fig = figure((13.0, 8.4))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.1])
    draw_attention(top, np.concatenate([causal_bias, symmetric]), vmin=None, vmax=0.0, cmap="magma",
                   allowed=np.stack([causal, causal, causal, every]), annotate=False,
                   titles=[*(f"head {h + 1}: −(1/{round(1 / slopes[h])})·(i − j)" for h in HEADS),
                           "head 1, symmetric: −(1/2)·|i − j|"])
    left, right = bottom.subfigures(1, 2, width_ratios=[1.0, 1.3])
    ax = left.subplots()
    for (h, marker), color in zip(((8, "s"), (12, "o"), (16, "o")), GROUP_COLORS, strict=False):
        ax.plot(np.arange(1, h + 1), alibi_slopes(h), marker=marker, markersize=9 if h == 8 else 4,
                fillstyle="none" if h == 8 else "full", color=color, label=f"h = {h}")
    ax.set_yscale("log", base=2)
    ax.set(xlabel="head", ylabel="slope m (log₂ scale)", title="slopes: 2^(−8t/h); h = 12 takes h = 8's, then "
           "16's odd ones")
    ax.legend(fontsize=7)
    draw_attention(right, np.stack([A, A_plain]), allowed=causal, annotate=False,
                   titles=["ALiBi head 1 (m = 1/2), causal", "softmax, causal (no position)"])
    fig.suptitle(f"ALiBi (Press et al., 2022): a linear penalty on distance per head; n = {N}, seed {SEED}")
    return fig
