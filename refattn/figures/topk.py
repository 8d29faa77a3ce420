r"""The figure of top-k attention (Zhao et al., 2019; Gupta et al., 2021): the kept support and its weights.

Top: exact softmax attention on seeded input (:func:`~refattn.figures.common.seeded_qkv`, n = m = 16, d = 8,
seed 17), then top-k attention with k = 1, 4 and, causal, k = 3; the grey cells are the pairs each row drops
(``allowed`` of the registry entry: the kept support). Bottom: the distance of each row to softmax's,
Σ_j |A^k_ij − A_ij| = 2·(1 − softmax's mass on the kept keys), for every k (its mean and its spread over the
rows), which falls to 0 at k = m.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry
from ..core.sdpa import scaled_dot_product_attention
from ..viz import STYLE_PATH, draw_attention, figure
from .common import GROUP_COLORS, seeded_qkv

__all__ = ["topk"]

N, SEED = 16, 17
PANELS = ((1, False), (4, False), (3, True))


@matplotlib.style.context(STYLE_PATH)
def topk() -> Figure:
    """Softmax, the top-k weights on their kept support for three settings, and the distance to softmax against k.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    apply = registry.get("topk").apply
    exact = scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    results = [apply(q, k, v, top_k=top_k, causal=causal, return_weights=True) for top_k, causal in PANELS]
    weights = np.stack([exact] + [r.weights for r in results])
    allowed = np.stack([np.ones((N, N), dtype=bool)] + [r.allowed for r in results])
    distances = np.array([np.abs(apply(q, k, v, top_k=top_k, return_weights=True).weights - exact).sum(axis=-1)
                          for top_k in range(1, N + 1)])          # (k, n)

    fig = figure((14.0, 8.4))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 0.8])
    draw_attention(top, weights, allowed=allowed, annotate=False, titles=[
        "exact softmax attention", "top-k, k = 1: one key per row", "top-k, k = 4",
        "top-k, k = 3, causal (row 0 sees one key,\nrow 1 two)"],
        suptitle="grey: the pairs each row drops; the kept scores are renormalised by one softmax")
    ax = bottom.subplots()
    ks = np.arange(1, N + 1)
    ax.fill_between(ks, distances.min(axis=1), distances.max(axis=1), color=GROUP_COLORS[0], alpha=0.25,
                    label="rows: smallest to largest")
    ax.plot(ks, distances.mean(axis=1), marker="o", color=GROUP_COLORS[0], label="mean over the rows")
    ax.set(xlabel="k (keys kept per row)", ylabel="Σ_j |A^k_ij − A_ij|", xticks=ks,
           title="distance to softmax per row = 2 · (softmax's mass on the dropped keys): 0 at k = m")
    ax.legend(fontsize=8)
    fig.suptitle(f"Top-k attention (Zhao et al., 2019; Gupta et al., 2021): n = m = {N}, seed {SEED}; "
                 "ties keep every score equal to the k-th largest")
    return fig
