r"""Figure of GAU and FLASH (Hua et al., 2022): relu² token mixing and the mixed chunk matrix beside softmax.

Top: GAU's weights relu²(QKᵀ/n), non-causal and causal, beside softmax attention on the same seeded input
(n = 16, d = 8; Q and K made from z with γ = 1, β = 0 so that the scores are z_i·z_j/n). Bottom: FLASH's causal
mixed chunk matrix M with chunks of c = 4, out = M v, split into its quadratic part (relu²(QKᵀ/c) inside each
diagonal block) and its linear part (Q'K'ᵀ/n on the earlier chunks, signed).
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..beyond import ScaleOffset
from ..core.causal_mask import causal_mask
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["gau"]

N, C, SEED = 16, 4, 0


@matplotlib.style.context(STYLE_PATH)
def gau() -> Figure:
    """GAU non-causal and causal beside softmax; FLASH's causal chunk matrix and its two parts.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    record = registry.get("gau")
    z, _, v = seeded_qkv(SEED, N)
    d = z.shape[-1]
    two, four = (ScaleOffset(np.ones((r, d)), np.zeros((r, d))) for r in (2, 4))
    plain, causal = (record.apply(z, z, v, causal=c, params=two, return_weights=True).weights for c in (False, True))
    _, S = scaled_dot_product_attention(z, z, v, return_weights=True)
    M = record.apply(z, z, v, causal=True, params=four, chunk=C, return_weights=True).weights
    no_linear = record.apply(z, z, v, causal=True, params=four, chunk=C, linear_scale=0.0, return_weights=True)
    quad = no_linear.weights
    linear = M - quad
    fig = figure((13.5, 9.4))
    top, bottom = fig.subfigures(2, 1)
    gau_panel, soft_panel = top.subfigures(1, 2, width_ratios=[2.0, 1.2])
    allowed = causal_mask(N, N)
    draw_attention(gau_panel, np.stack([plain, causal]), allowed=np.stack([np.ones((N, N), bool), allowed]),
                   vmax=None, annotate=False, titles=["GAU relu²(QKᵀ/n)", "GAU, causal"])
    draw_attention(soft_panel, S, vmax=1.0, annotate=False, titles="softmax attention")
    quad_panel, lin_panel = bottom.subfigures(1, 2, width_ratios=[2.0, 1.2])
    draw_attention(quad_panel, np.stack([M, quad]), allowed=allowed, signed=True, vmin=None, annotate=False,
                   titles=[f"FLASH causal, c = {C}: M", "quadratic part (within chunks)"])
    draw_attention(lin_panel, linear, allowed=allowed, signed=True, vmin=None, annotate=False,
                   titles="linear part (earlier chunks)")
    fig.suptitle(f"GAU / FLASH (Hua et al., 2022): relu² token mixing (no normalisation) beside softmax, and the "
                 f"mixed chunk matrix, out = M v; n = {N}, d = {d}, γ = 1, β = 0")
    return fig
