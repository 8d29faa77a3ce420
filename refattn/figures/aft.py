r"""Figure of the Attention Free Transformer (Zhai et al., 2021): its position biases and its per-channel mixing.

Top: the position biases w_tt′ of the four variants on n = m = 14 positions: AFT-full's factorised
w = u u′ᵀ (d′ = 8, u, u′ ~ N(0, 0.5²): larger than the initialisation's 0.01, as after training, so that
the structure shows), AFT-local's band of the same w (s = 3, 0 outside: not masked), AFT-conv's filter
on the offsets (s = 5, head 0, γ = 1, β = 0) and AFT-simple's none. Middle: the implicit mixing matrix
of channel 0, A⁰_tt′ = σ(Q_t0) e^{K_t′0 + w_tt′} / Σ_t″ e^{K_t″0 + w_tt″}, of each variant on a seeded
input (:func:`~refattn.figures.common.seeded_qkv`, d = 8, seed 3), beside softmax attention's weights on the
same q, k. Bottom: causal AFT-full's matrices of channels 0-3: one matrix per channel, each row summing to
its gate σ(Q_tc), not to 1.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import scaled_dot_product_attention
from ..beyond import AFTConvFilter, AFTPositionBias, aft_attention, aft_position_bias
from ..core.causal_mask import causal_mask
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["aft"]

N, SEED, WINDOW, KERNEL = 14, 3, 3, 5


@matplotlib.style.context(STYLE_PATH)
def aft() -> Figure:
    """Position biases of AFT-full/local/conv/simple; channel 0's mixing of each beside softmax; causal channels.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    rng = np.random.default_rng(SEED)
    bias = AFTPositionBias(0.5 * rng.standard_normal((N, 8)), 0.5 * rng.standard_normal((N, 8)))
    conv = AFTConvFilter(rng.standard_normal((2, KERNEL)), np.ones(2), np.zeros(2))
    settings = [("AFT-full", {"kind": "full", "params": bias}),
                ("AFT-local (s = 3)", {"kind": "local", "params": bias, "window": WINDOW}),
                ("AFT-conv (s = 5, head 0)", {"kind": "conv", "params": conv}),
                ("AFT-simple", {"kind": "simple"})]
    biases = np.stack([aft_position_bias(o["kind"], N, params=o.get("params"), window=o.get("window"))[0]
                       for _, o in settings])                      # (4, N, N)
    q, k, v = seeded_qkv(SEED, N)
    mixing = np.stack([aft_attention(q, k, v, return_weights=True, **o)[1][0] for _, o in settings])
    softmax = scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    causal = aft_attention(q, k, v, params=bias, causal=True, return_weights=True)[1][:4]

    fig = figure((14.0, 13.5))
    top, middle, bottom = fig.subfigures(3, 1)
    draw_attention(top, biases, signed=True, vmin=None, annotate=False, xlabel="key t′", ylabel="query t",
                   titles=[f"{name}: w" for name, _ in settings])
    draw_attention(middle, np.concatenate([mixing, softmax[None]]), vmax=float(max(mixing.max(), softmax.max())),
                   annotate=False, xlabel="key t′", ylabel="query t",
                   titles=[f"{name}: channel 0" for name, _ in settings] + ["softmax(QKᵀ/√d)"])
    draw_attention(bottom, causal, allowed=causal_mask(N, N), annotate=False, xlabel="key t′", ylabel="query t",
                   titles=[f"causal AFT-full: channel {c}" for c in range(4)])
    top.suptitle("position biases w_tt′ (signed; 0 outside AFT-local's window and AFT-conv's filter: not masked)")
    middle.suptitle("implicit mixing A⁰_tt′ = σ(Q_t0) e^{K_t′0 + w_tt′} / Σ e^{K_t″0 + w_tt″} beside softmax attention")
    bottom.suptitle("one matrix per channel: rows sum to the gate σ(Q_tc), not to 1")
    fig.suptitle(f"Attention Free Transformer (Zhai et al., 2021): n = m = {N}, d = 8, seed {SEED}; "
                 f"w = u u′ᵀ with d′ = 8, u, u′ ~ N(0, 0.5²)")
    return fig
