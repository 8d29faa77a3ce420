r"""The figure of collaborative heads (Cordonnier et al., 2020): mixing vectors, per-head weights, compression.

A multi-head layer (d_model = 12, h = 4 heads of d_k = 3, seed 6) re-parameterised into collaborative heads. Left:
the mixing vectors m_i (rows) at D̃_k = h·d_k = 12, one-hot by block, and at D̃_k = 6 from the CP decomposition of
the head products. Middle: each head's weights on one seeded sequence (n = 8): multi-head, collaborative at
D̃_k = 12 (the same), collaborative at D̃_k = 6 with the trained scale 1/√d_k. Right: the relative error of the
head products ‖T − T̂‖/‖T‖ against D̃_k for these random heads (with the lower bound from the best rank-D̃_k
approximation of T's unfolding: no D̃_k < 12 is exact) and for redundant heads built from 4 shared directions
(exact at D̃_k = 4 once ALS converges; the official stopping rule, tolerance 1e-6 and 100 sweeps, stops earlier,
and above the CP rank ALS from a random start converges slowly).
"""
from __future__ import annotations

import math

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import MultiHeadParams, init_multi_head, multi_head_attention
from ..heads.collaborative_heads import (
    collaborative_attention,
    collaborative_from_multi_head,
    cp_decomposition,
    head_products,
)
from ..viz import STYLE_PATH, draw_attention, figure, roundoff, shade_roundoff
from .common import GROUP_COLORS

__all__ = ["collaborative_heads"]

D_MODEL, HEADS, D_K, N, SEED, COMPRESSED, SHARED_DIRECTIONS = 12, 4, 3, 8, 6, 6, 4


def _redundant_heads(rng) -> MultiHeadParams:
    """Heads of width d_k from 4 shared directions: head i uses all but the i-th, with its own weights."""
    A, C = rng.standard_normal((D_MODEL, SHARED_DIRECTIONS)), rng.standard_normal((D_MODEL, SHARED_DIRECTIONS))
    M = rng.standard_normal((HEADS, SHARED_DIRECTIONS)) * (1 - np.eye(HEADS, SHARED_DIRECTIONS))
    w_q = np.hstack([A[:, M[i] != 0] * M[i][M[i] != 0] for i in range(HEADS)])
    w_k = np.hstack([C[:, M[i] != 0] for i in range(HEADS)])
    return MultiHeadParams(w_q, w_k, np.eye(D_MODEL), np.eye(D_MODEL))


@matplotlib.style.context(STYLE_PATH)
def collaborative_heads() -> Figure:
    """Mixing vectors, per-head weights of multi-head and collaborative layers, error against D̃_k.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    rng = np.random.default_rng(SEED)
    params = init_multi_head(rng, D_MODEL, HEADS)
    x = rng.standard_normal((N, D_MODEL))
    full = collaborative_from_multi_head(params, HEADS)
    compressed = collaborative_from_multi_head(params, HEADS, COMPRESSED, rng=SEED)
    A_multi = multi_head_attention(x, x, params, num_heads=HEADS, return_weights=True)[1]
    A_full = collaborative_attention(x, x, full, return_weights=True)[1]
    A_compressed = collaborative_attention(x, x, compressed, scale=1 / math.sqrt(D_K), return_weights=True)[1]
    if not np.allclose(A_full, A_multi, rtol=1e-12, atol=1e-12):
        raise ValueError("collaborative_heads: one-hot block mixing does not reproduce multi-head attention")

    fig = figure((14.0, 10.2))
    top, bottom = fig.subfigures(2, 1, height_ratios=[0.3, 1.0])
    heads = [str(i + 1) for i in range(HEADS)]
    for panel, mixing, title in zip(top.subfigures(1, 2, width_ratios=[D_MODEL + 3, COMPRESSED + 3]),
                                    (full.mixing, compressed.mixing),
                                    (f"m_i at D̃_k = h·d_k = {D_MODEL}: one-hot blocks (multi-head)",
                                     f"m_i at D̃_k = {COMPRESSED}: CP decomposition (ALS)"), strict=True):
        draw_attention(panel, mixing, signed=True, titles=title, xlabel="shared dimension r", ylabel="head i",
                       row_labels=heads)
    middle, right = bottom.subfigures(1, 2, width_ratios=[2.2, 1.3])
    draw_attention(middle, np.stack([A_multi, A_full, A_compressed]), titles=[
        [f"multi-head\nhead {i + 1}" for i in range(HEADS)],
        [f"collaborative, D̃_k = {D_MODEL}\nhead {i + 1}" for i in range(HEADS)],
        [f"collaborative, D̃_k = {COMPRESSED}\nhead {i + 1}" for i in range(HEADS)]], annotate=False)
    middle.suptitle(f"weights, n = {N}: D̃_k = {D_MODEL} equals multi-head; D̃_k = {COMPRESSED} (scale 1/√d_k) "
                    "approximates it", fontsize=10)
    _errors(right.add_subplot(), params, _redundant_heads(np.random.default_rng(0)))
    fig.suptitle(f"Collaborative heads (Cordonnier et al., 2020): shared W̃_Q, W̃_K and per-head mixing m_i, "
                 f"re-parameterised from a multi-head layer (d_model = {D_MODEL}, h = {HEADS}, d_k = {D_K}, "
                 f"seed {SEED})")
    return fig


def _errors(ax, params: MultiHeadParams, redundant: MultiHeadParams) -> None:
    """‖T − T̂‖/‖T‖ against D̃_k: random heads, their Eckart–Young bound, redundant heads (official and converged)."""
    dims = np.arange(1, HEADS * D_K + 1)
    T = head_products(params, HEADS)
    sigma = np.linalg.svd(T.reshape(D_MODEL, -1), compute_uv=False)
    bound = [math.sqrt(np.sum(sigma[R:] ** 2)) / np.linalg.norm(T) for R in dims]
    random_heads = [cp_decomposition(T, R, rng=SEED).error for R in dims[:-1]] + [0.0]   # h·d_k: copied, exact
    T_red = head_products(redundant, HEADS)
    official = [cp_decomposition(T_red, R, rng=0).error for R in dims[:-1]] + [0.0]
    converged = [cp_decomposition(T_red, R, rng=0, tol=0.0, max_sweeps=500).error for R in dims[:-1]] + [0.0]
    for values, label, color, marker, style in (
            (random_heads, "random heads, official ALS", GROUP_COLORS[0], "o", "-"),
            (bound, "random heads, unfolding bound", GROUP_COLORS[0], "", ":"),
            (official, "heads of 4 shared directions, official ALS", GROUP_COLORS[1], "s", "-"),
            (converged, "the same, ALS to 500 sweeps", GROUP_COLORS[2], "^", "--")):
        ax.semilogy(dims, roundoff(values), linestyle=style, marker=marker, markersize=4, color=color, label=label)
    ax.axvline(SHARED_DIRECTIONS, color="black", linestyle=":", linewidth=1, label="their CP rank, 4")
    shade_roundoff(ax)
    ax.set(xlabel="shared width D̃_k", ylabel="‖T − T̂‖ / ‖T‖", ylim=(None, 3.0), xticks=dims,
           title="error of the head products\nW_Qⁱ W_Kⁱᵀ ≈ W̃_Q diag(m_i) W̃_Kᵀ")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2)   # below: lines fill the axes
