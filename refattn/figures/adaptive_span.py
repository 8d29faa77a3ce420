r"""The figure of adaptive attention span (survey §4.6): each head's mask m_z(x) over x and (t, r), and its weights.

One seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 5) and the projections drawn
by the registry record's ``apply`` (``rng=5``), h = 4 heads with spans z = (0.5, 2.5, 5.5, 10.0), ramp R = 3 and
maximum span S = 14. On the left, m_z(x) against the distance x = t − r for each head; then each head's soft mask
over the (query, key) pairs, and below it the weights that the mask leaves after the softmax and the
renormalisation, with the pairs no head may weigh (future keys, x ≥ S, x ≥ z + R) in grey.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry
from ..heads import adaptive_span_mask, span_cache_length
from ..viz import STYLE_PATH, draw_attention, figure
from .common import GROUP_COLORS, seeded_qkv

__all__ = ["adaptive_span"]

N, SEED, SPANS, RAMP, MAX_SPAN = 16, 5, (0.5, 2.5, 5.5, 10.0), 3, 14


@matplotlib.style.context(STYLE_PATH)
def adaptive_span() -> Figure:
    """m_z(x) per head on the left; each head's mask over (t, r) on top and its weights below.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N, d=8)
    z = np.array(SPANS)
    result = registry.get("adaptive_span").apply(q, k, v, causal=True, rng=SEED, num_heads=len(z), z=z, ramp=RAMP,
                                                 max_span=MAX_SPAN, return_weights=True)
    M = adaptive_span_mask(z, N, max_span=MAX_SPAN, ramp=RAMP)
    if not np.array_equal(result.allowed, M > 0):
        raise ValueError("adaptive_span: the figure's masks and the record's apply disagree")

    fig = figure((14.0, 8.0))
    curves, grids = fig.subfigures(1, 2, width_ratios=[0.9, 3.2])
    ax = curves.add_subplot()
    x = np.arange(MAX_SPAN + 2)
    for i, (span, color) in enumerate(zip(z, GROUP_COLORS, strict=False)):
        m_x = np.where(x < MAX_SPAN, np.clip((RAMP + span - x) / RAMP, 0.0, 1.0), 0.0)
        ax.plot(x, m_x, marker="o", markersize=3.5, color=color, label=f"head {i + 1}: z = {span:g}")
    ax.axvline(MAX_SPAN - 0.5, color="black", linestyle=":", linewidth=1)
    ax.text(MAX_SPAN - 0.6, 0.5, "S", ha="right")
    ax.set(xlabel="distance x = t − r", ylabel="m_z(x)", ylim=(-0.05, 1.45),
           title=f"m_z(x) = min(max((R + z − x)/R, 0), 1)\nR = {RAMP}, S = {MAX_SPAN}")
    ax.legend(loc="upper left", fontsize=7)
    titles = [[f"head {i + 1}: mask, z = {span:g}" for i, span in enumerate(z)],
              [f"head {i + 1}: weights a_tr" for i in range(len(z))]]
    draw_attention(grids, np.stack([M, result.weights]), allowed=np.stack([M > 0, result.allowed]), titles=titles,
                   xlabel="key r", ylabel="query t", annotate=False)
    fig.suptitle(f"Adaptive attention span (Sukhbaatar et al., 2019): softmax, times each head's soft mask, "
                 f"renormalised;\na cache of the last {span_cache_length(z, max_span=MAX_SPAN, ramp=RAMP)} "
                 f"positions serves every head (n = {N}, d_model = 8, seed {SEED})")
    return fig
