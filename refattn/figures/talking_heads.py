r"""The figure of talking-heads attention (Shazeer et al., 2020): the two mixing matrices and every head's matrices.

One seeded causal self-attention (n = 8, d_model = 12, seed 4) with h_k = 2 key heads, h = 3 softmax heads and
h_v = 2 value heads, parameters drawn by the registry record's ``apply`` (``rng=4``). Top row: the dot products J
of each key head, P_l (h_k × h) and the logits L = J P_l of each softmax head; bottom row: the weights
W = softmax(L), P_w (h × h_v) and the matrices U = W P_w that weigh the values. The causal mask acts on L, so
the future (grey) is hidden in L, W and U alike.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry
from ..core.causal_mask import causal_mask
from ..core.softmax import masked_softmax
from ..viz import STYLE_PATH, draw_attention, figure

__all__ = ["talking_heads"]

N, D_MODEL, SEED, KEY_HEADS, HEADS, VALUE_HEADS = 8, 12, 4, 2, 3, 2


@matplotlib.style.context(STYLE_PATH)
def talking_heads() -> Figure:
    """J, P_l, L on top; W, P_w, U below (causal, n = 8, h_k = 2, h = 3, h_v = 2).

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((N, D_MODEL))
    result = registry.get("talking_heads").apply(x, x, x, causal=True, rng=SEED, num_heads=HEADS,
                                                 key_heads=KEY_HEADS, value_heads=VALUE_HEADS,
                                                 return_weights=True, return_draws=True)
    params = result.draws["params"]
    p = params.projections
    d_k = p.w_q.shape[1] // KEY_HEADS
    Q = (x @ p.w_q).reshape(N, KEY_HEADS, d_k).transpose(1, 0, 2)  # (h_k, n, d_k)
    K = (x @ p.w_k).reshape(N, KEY_HEADS, d_k).transpose(1, 0, 2)
    J = Q @ K.transpose(0, 2, 1) / np.sqrt(d_k)                    # (h_k, n, n)
    L = np.einsum("knm,kh->hnm", J, params.P_l)                    # (h, n, n)
    allowed = causal_mask(N)
    W = masked_softmax(L, allowed, "zero")[0]
    U = np.einsum("hnm,hv->vnm", W, params.P_w)
    if not np.allclose(U, result.weights, rtol=1e-12, atol=1e-12):
        raise ValueError("talking_heads: the figure's einsums and the record's apply disagree")

    fig = figure((14.0, 7.4))
    top, bottom = fig.subfigures(2, 1)
    for row, (before, mix, after) in zip((top, bottom), (
            ((J, "J", "key head", None), (params.P_l, "P_l (h_k × h)", "h_k", "h"),
             (L, "L = J P_l", "softmax head", allowed)),
            ((W, "W = softmax(L)", "softmax head", allowed), (params.P_w, "P_w (h × h_v)", "h", "h_v"),
             (U, "U = W P_w", "value head", allowed))), strict=True):
        left, middle, right = row.subfigures(1, 3, width_ratios=[len(before[0]), 1.2, len(after[0])])
        grids = [(left, before), (right, after)]
        for panel, (A, name, kind, mask) in grids:
            is_weights = name.startswith("W")
            draw_attention(panel, A, allowed=None if mask is None else np.broadcast_to(mask, A.shape),
                           signed=not is_weights, titles=[f"{name}\n{kind} {i + 1}" for i in range(len(A))],
                           annotate=False)
        M, name, rows, cols = mix
        draw_attention(middle, M, signed=True, titles=name, xlabel=cols, ylabel=rows,
                       row_labels=[str(i + 1) for i in range(M.shape[0])],
                       col_labels=[str(j + 1) for j in range(M.shape[1])])
    fig.suptitle(f"Talking-heads attention (Shazeer et al., 2020): h_k = {KEY_HEADS} key heads → P_l → h = {HEADS} "
                 f"softmax heads → P_w → h_v = {VALUE_HEADS} value heads\ncausal mask applied to L, after P_l (grey), "
                 f"n = {N}, d_model = {D_MODEL}, seed {SEED}")
    return fig
