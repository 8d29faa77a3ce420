r"""The figure of multi-scale attention (survey §4.6): the scales across layers and heads, each head's weights.

On the left, :func:`~refattn.heads.layer_windows` for 6 layers of 4 heads over the scales 1, 2, 4, …, 32 (small
scales low in the stack, large ones high, several in every layer). On the right, one layer with the scales
ω = (1, 2, 4, 8) on a seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 3;
projections drawn by the registry record's ``apply``, ``rng=3``): each head's weights, the pairs outside
|t − r| ≤ ω in grey, and below the causal form, the past half of each window.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry
from ..heads import layer_windows, multi_scale_mask
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["multi_scale"]

N, SEED, WINDOWS, LAYERS, SCALES = 16, 3, (1, 2, 4, 8), 6, (1, 2, 4, 8, 16, 32)


@matplotlib.style.context(STYLE_PATH)
def multi_scale() -> Figure:
    """The layer × head table of scales on the left; one layer's heads, bidirectional and causal, on the right.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N, d=8)
    record = registry.get("multi_scale")
    options = {"rng": SEED, "num_heads": len(WINDOWS), "windows": WINDOWS, "return_weights": True}
    both, past = record.apply(q, k, v, **options), record.apply(q, k, v, causal=True, **options)
    if not np.array_equal(both.allowed, multi_scale_mask(WINDOWS, N)):
        raise ValueError("multi_scale: the figure's windows and the record's apply disagree")
    table = layer_windows(LAYERS, len(WINDOWS), SCALES)

    fig = figure((14.0, 7.4))
    left, right = fig.subfigures(1, 2, width_ratios=[0.95, 3.2])
    draw_attention(left, table.astype(float), xlabel="head", ylabel="layer (1 = lowest)", cmap="viridis",
                   annotate=True, vmin=0.0, gamma=0.5, row_labels=[str(layer + 1) for layer in range(LAYERS)],
                   col_labels=[str(j + 1) for j in range(len(WINDOWS))],
                   titles=f"layer_windows(ω = {SCALES[0]} … {SCALES[-1]}):\nω per layer and head")
    titles = [[f"head {i + 1}: ω = {w}" for i, w in enumerate(WINDOWS)],
              [f"head {i + 1}, causal: ω = {w}" for i, w in enumerate(WINDOWS)]]
    draw_attention(right, np.stack([both.weights, past.weights]), allowed=np.stack([both.allowed, past.allowed]),
                   titles=titles, xlabel="key r", ylabel="query t", annotate=False)
    fig.suptitle(f"Multi-scale multi-head attention (Guo et al., 2020): head i sees |t − r| ≤ ω_i "
                 f"(n = {N}, d_model = 8, seed {SEED})")
    return fig
