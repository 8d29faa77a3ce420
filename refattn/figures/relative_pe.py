r"""Figure of Shaw et al.'s relative position representations (2018; survey §5.1.2): the clipped index map and the
biased weights.

Seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 12, d = 8, seed 3) and tables drawn
with :func:`~refattn.positional.init_relative_embeddings` (k = 3, Glorot, seed 3). Top: the clipped
distance clip(j − i, k) that picks each pair's vectors a^K_ij, a^V_ij (constant along diagonals,
saturated at ±k beyond the band), and the key term it adds to the scores, q_i·a^K_ij/√d, beside
the content scores q_i·k_j/√d. Bottom: softmax attention without the embeddings, then with them,
encoder and causal (the pairs a causal query may not see in grey).
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..positional import init_relative_embeddings, relative_index
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["relative_pe"]

N, K, SEED = 12, 3, 3


@matplotlib.style.context(STYLE_PATH)
def relative_pe() -> Figure:
    """The clipped index map, the key term and the scores on top; weights without and with the embeddings below.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    emb = init_relative_embeddings(SEED, K, q.shape[-1], v.shape[-1])
    record = registry.get("relative_pe")
    clipped = relative_index(N, N, K) - K                          # (n, n)  clip(j − i, k)
    scale = 1.0 / np.sqrt(q.shape[-1])
    key_term = np.take_along_axis(q @ emb.keys.T, relative_index(N, N, K), axis=-1) * scale
    S = q @ k.T * scale
    plain = scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    biased = record.apply(q, k, v, embeddings=emb, return_weights=True)
    causal = record.apply(q, k, v, embeddings=emb, causal=True, return_weights=True)

    fig = figure((13.6, 8.6))
    top, bottom = fig.subfigures(2, 1)
    left, right = top.subfigures(1, 2, width_ratios=(1, 2))
    draw_attention(left, clipped.astype(float), signed=True, vmax=K, annotate=False,
                   titles=[f"clip(j − i, k), k = {K}: row of w^K, w^V"])
    draw_attention(right, np.stack([key_term, S]), signed=True, annotate=False,
                   titles=["key term q_i·a^K_ij/√d", "content scores q_i·k_j/√d"])
    draw_attention(bottom, np.stack([plain, biased.weights, causal.weights]),
                   allowed=np.stack([np.ones((N, N), bool), np.ones((N, N), bool), causal.allowed]), annotate=False,
                   titles=["softmax(QKᵀ/√d), no embeddings", "α: q_i(k_j + a^K_ij)ᵀ/√d", "α, causal"])
    fig.suptitle(f"Relative position representations (Shaw et al., 2018): 2k + 1 learned vectors per table, "
                 f"distances clipped at k\nn = m = {N}, d = 8, k = {K}, seed {SEED}; "
                 "z_i = Σ_j α_ij (v_j + a^V_ij)")
    return fig
