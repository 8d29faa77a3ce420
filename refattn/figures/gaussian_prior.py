r"""The figure of the Gaussian prior (Yang et al., 2018; survey §4.5.1): the prior, the scores, their softmax.

One seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 5) and the
predictors drawn by the registry record's ``apply`` (``rng=5``), query-specific window. Top row:
the prior G with each query's predicted centre P_i (●) and σ_i = D_i/2 (bar), the scores
QKᵀ/√d, the combined weights softmax(QKᵀ/√d + G) with the centres again, and softmax's weights
without the prior. Bottom row: the same centres with a fixed window D = 1, 3, 8 and ∞: the weights
gather on the key nearest P_i as σ shrinks and become softmax's as σ grows (D = ∞: exactly).
Positions count from 1, so the key in column j sits at position j + 1 and P_i is drawn at
column P_i − 1.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..prior import gaussian_prior_bias, predict_gaussian_prior
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["gaussian_prior"]

N, SEED = 16, 5
FIXED = (1.0, 3.0, 8.0, np.inf)
G_FLOOR = -6.0                   # the colour scale of G stops here (it reaches about −19)
CENTRE = {"marker": "o", "ms": 4.5, "mfc": "#f28e2b", "mec": "white", "mew": 0.7, "ls": "none"}


@matplotlib.style.context(STYLE_PATH)
def gaussian_prior() -> Figure:
    """G with the centres, the scores, the combined weights and softmax's on top; fixed windows D below.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    record = registry.get("gaussian_prior")
    result = record.apply(q, k, v, rng=SEED, return_weights=True, return_draws=True)
    params = result.draws["params"]
    P, D = predict_gaussian_prior(q, k, params)
    G = gaussian_prior_bias(P, D, N)
    scores = q @ k.T / np.sqrt(q.shape[-1])
    softmax = scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    fixed = [record.apply(q, k, v, window=window, return_weights=True, **result.draws).weights for window in FIXED]
    if not np.array_equal(fixed[-1], softmax):
        raise ValueError("gaussian_prior: a window D = ∞ should give softmax's weights exactly")

    fig = figure((14.0, 9.2))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.0])
    prior_panel, score_panel, weights_panel = top.subfigures(1, 3, width_ratios=[1.0, 1.0, 1.9])
    rows = np.arange(N)
    title = f"prior G_ij = −(j − P_i)²/(2σ_i²)\n(● P_i, bar ± σ_i; colours stop at {G_FLOOR:g})"
    ax = draw_attention(prior_panel, G, vmin=G_FLOOR, vmax=0.0, annotate=False, titles=title)[0, 0]
    ax.errorbar(P - 1, rows, xerr=D / 2, color="#f28e2b", capsize=2, elinewidth=1, **CENTRE)
    ax.set_xlim(-0.5, N - 0.5)                                     # the bars of wide windows run past the keys
    draw_attention(score_panel, scores, signed=True, annotate=False, titles="scores Q Kᵀ/√d")
    axes = draw_attention(weights_panel, np.stack([result.weights, softmax]), vmax=1.0, annotate=False,
                          titles=["softmax(Q Kᵀ/√d + G)\n(● P_i)", "softmax(Q Kᵀ/√d)\n(no prior)"])
    axes[0, 0].plot(P - 1, rows, **CENTRE)
    axes = draw_attention(bottom, np.stack(fixed), vmax=1.0, annotate=False,
                          titles=[f"fixed window D = {w:g} (σ = {w / 2:g})" for w in FIXED[:-1]]
                          + ["D = ∞: G = 0, softmax exactly"])
    for ax in axes[0, :-1]:
        ax.plot(P - 1, rows, **CENTRE)
    bottom.suptitle("the same centres P_i with a fixed window: the weights gather on the key nearest P_i as σ "
                    "shrinks, and become softmax's as σ grows")
    fig.suptitle(f"Gaussian prior (Yang et al., 2018): a centre P_i = I·sigmoid(v_pᵀ tanh(W_p q_i)) and a window "
                 f"D_i predicted from each query,\nadded to the scores before the softmax; n = m = I = {N}, d = 8, "
                 f"seed {SEED}, positions j = 1 … I")
    return fig
