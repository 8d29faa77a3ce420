r"""Figure of XCiT's cross-covariance attention (El-Nouby et al., 2021): the d × d channel map beside softmax.

Left: the channel map A = softmax_j(τ Q̂ᵀK̂) (rows: output channels, columns: value channels, out = V Aᵀ) at
N = 16 tokens and at N = 256 tokens of the same seeded distribution: d × d both times. Right: softmax
attention's N × N token map on the same 16 tokens. d = 8, τ = 1 (the official initialisation) and τ = 4.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..beyond import XcitParams
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["xcit"]

N, N_LONG, SEED = 16, 256, 0


@matplotlib.style.context(STYLE_PATH)
def xcit() -> Figure:
    """The channel maps (d × d at N = 16 and N = 256, τ = 1 and 4) and softmax attention's N × N map.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    record = registry.get("xcit")
    q, k, v = seeded_qkv(SEED, N)
    q_long, k_long, v_long = seeded_qkv(SEED, N_LONG)
    maps = np.stack([record.apply(q, k, v, return_weights=True, params=XcitParams(t)).weights for t in (1.0, 4.0)]
                    + [record.apply(q_long, k_long, v_long, return_weights=True).weights])
    _, S = scaled_dot_product_attention(q, k, v, return_weights=True)
    d = q.shape[-1]
    fig = figure((13.5, 4.6))
    channels, tokens = fig.subfigures(1, 2, width_ratios=[2.9, 1.3])
    draw_attention(channels, maps, vmax=1.0, xlabel="value channel j", ylabel="output channel i",
                   titles=[f"XCA, N = {N}, τ = 1", f"XCA, N = {N}, τ = 4", f"XCA, N = {N_LONG}, τ = 1"])
    draw_attention(tokens, S, vmax=1.0, annotate=False, titles=f"softmax attention, {N} × {N}")
    fig.suptitle(f"XCiT cross-covariance attention: a {d} × {d} map over channels whatever the number of tokens N "
                 f"(out = V Aᵀ), beside softmax attention's N × N map on the same input")
    return fig
