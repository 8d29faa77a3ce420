r"""Figure of hard-coded Gaussian attention (You et al., 2020): each head's fixed Gaussian beside softmax's weights.

Seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 14, d = 8, seed 9). Top: the
paper's heads with σ = 1 (:data:`~refattn.prior.HARDCODED_OFFSETS`): encoder self-attention centred at
i − 1 and i + 1, decoder self-attention at i − 1 and i under the causal mask (normalised over the
keys each query sees), beside softmax attention on the same input, plain and causal. Bottom: one
row's weights (query 0 and query 7, offset −1) as σ grows from ½ to ∞ (uniform), and the official
code's unnormalised density for comparison.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import scaled_dot_product_attention
from ..prior import HARDCODED_OFFSETS, hardcoded_gaussian_weights
from ..viz import STYLE_PATH, draw_attention, figure
from .common import GROUP_COLORS, seeded_qkv

__all__ = ["hardcoded_gaussian"]

N, SEED = 14, 9
SIGMAS = (0.5, 1.0, 2.0, 4.0, np.inf)


@matplotlib.style.context(STYLE_PATH)
def hardcoded_gaussian() -> Figure:
    """The paper's encoder and decoder heads, softmax's weights, and one row as σ grows.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    encoder, _ = hardcoded_gaussian_weights(N, offsets=HARDCODED_OFFSETS["encoder"])
    decoder, causal = hardcoded_gaussian_weights(N, offsets=HARDCODED_OFFSETS["decoder"], causal=True)
    A = scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    A_causal = scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)[1]
    every = np.ones((N, N), dtype=bool)

    fig = figure((12.5, 9.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.25, 1.0])
    draw_attention(top, np.stack([np.stack([*encoder, A]), np.stack([*decoder, A_causal])]),
                   allowed=np.stack([np.stack([every] * 3), np.stack([causal] * 3)]), annotate=False,
                   titles=[["encoder head: i − 1", "encoder head: i + 1", "softmax(Q Kᵀ/√d)"],
                           ["decoder head: i − 1 (causal)", "decoder head: i (causal)", "causal softmax"]])
    axes = bottom.subplots(1, 2)
    for ax, row in zip(axes, (0, 7), strict=True):
        for sigma, color in zip(SIGMAS, GROUP_COLORS, strict=False):
            weights = hardcoded_gaussian_weights(N, offsets=(-1,), sigma=sigma)[0][0, row]
            ax.plot(np.arange(N), weights, marker="o", markersize=3, color=color, label=f"σ = {sigma:g}")
        density = hardcoded_gaussian_weights(N, offsets=(-1,), normalize="density")[0][0, row]
        ax.plot(np.arange(N), density, linestyle="--", color="black", label="σ = 1, official density")
        centre = str(row - 1).replace("-", "−")
        ax.set(xlabel="key j", ylabel="weight", title=f"query {row}, centre {centre} (offset −1)")
        ax.legend(fontsize=7)
    fig.suptitle(f"Hard-coded Gaussian attention (You et al., 2020): fixed Gaussians over positions, no queries or "
                 f"keys, σ = 1; n = {N}, seed {SEED}")
    return fig
