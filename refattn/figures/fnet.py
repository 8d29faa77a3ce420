r"""Figure of FNet (Lee-Thorp et al., 2022): the DFT matrix that mixes the tokens, beside softmax attention.

Seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 2). Left: the real and
imaginary parts of F₁₆, :math:`\cos(2\pi ij/n)` and :math:`-\sin(2\pi ij/n)`, the two planes ``apply`` returns
as weights (signed, one scale; every entry of F has modulus 1, so every output reads every position equally
hard), and the hidden-axis DFT's real part, Re F₈. Bottom: softmax attention's weights on the same input, and the
output of each (rows: positions, columns: channels), each on its own signed scale: the DFT is unnormalised, so
FNet's outputs are sums, up to √(n·d) times larger than the values, where attention's are averages.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..beyond import dft_matrix
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text
from .common import seeded_qkv

__all__ = ["fnet"]

N, SEED = 16, 2


@matplotlib.style.context(STYLE_PATH)
def fnet() -> Figure:
    """Re F_n, Im F_n and Re F_d; softmax attention's weights; both outputs.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    result = registry.get("fnet").apply(q, k, v, return_weights=True)
    out_sm, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    F_d = dft_matrix(v.shape[-1])

    fig = figure((14.0, 8.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.0])
    mixing, hidden = top.subfigures(1, 2, width_ratios=[2.2, 1.0])
    draw_attention(mixing, result.weights, signed=True, annotate=False,
                   titles=["Re F₁₆ = cos(2πij/n)", "Im F₁₆ = −sin(2πij/n)"])
    mixing.suptitle("FNet's token mixing: the DFT matrix F_n (weights = its two real planes)")
    draw_attention(hidden, F_d.real, signed=True, annotate=False, xlabel="channel c", ylabel="channel c′",
                   titles=["Re F₈ (hidden axis)"])
    attention, fnet_out, sm_out = bottom.subfigures(1, 3, width_ratios=[1.4, 1.0, 1.0])
    draw_attention(attention, A, annotate=False, titles=["softmax attention, same input"])
    for panel, out, title in ((fnet_out, result.output, "FNet output Re(F_n V F_d)"),
                              (sm_out, out_sm, "softmax output A V")):
        draw_attention(panel, out, signed=True, annotate=False, xlabel="channel", ylabel="position", titles=[title])
    fnet_out.suptitle(f"unnormalised: entries up to {roundoff_text(np.abs(result.output).max(), '.0f')}")
    sm_out.suptitle(f"averages of v: up to {roundoff_text(np.abs(out_sm).max(), '.1f')}")
    fig.suptitle(f"FNet (Lee-Thorp et al., 2022): y = Re(F_seq(F_hidden(v))), no q, no k, no parameters; "
                 f"n = {N}, d = {v.shape[-1]}, seed {SEED}")
    return fig
