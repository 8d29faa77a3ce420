r"""Figure of RoPE (Su et al., 2021): the per-pair angles over positions, the Toeplitz score map, and the weights.

Top: cos(p·θ_t) for the 8 pairs and positions p = 0 … 47 of d = 16 (θ_t = 10000^(−2t/16): pair 0 turns a
radian per position, pair 7 barely moves); the score (R_i q)ᵀ(R_j k)/√d of one fixed q and k placed at every
position, constant along each diagonal because it depends on i − j only; and RoPE's causal weights beside
softmax's on seeded input (:func:`~refattn.figures.common.seeded_qkv`, n = 14, d = 16, seed 5). Bottom: that score
as a function of i − j for both pairings and for position interpolation with factor 4 (the same curve stretched
four times).
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import scaled_dot_product_attention
from ..positional import rope_attention, rope_frequencies, rotate
from ..viz import STYLE_PATH, draw_attention, figure
from .common import GROUP_COLORS, seeded_qkv

__all__ = ["rope"]

N, D, P, SEED = 14, 16, 48, 5


def _score_map(q, k, **options):
    """(P, P) scores (R_i q)ᵀ(R_j k)/√d of q and k placed at positions 0 … P − 1."""
    positions = np.arange(P)
    Q, K = rotate(np.tile(q, (P, 1)), positions, **options), rotate(np.tile(k, (P, 1)), positions, **options)
    return Q @ K.T / np.sqrt(q.size)


@matplotlib.style.context(STYLE_PATH)
def rope() -> Figure:
    """The rotation's angles, the Toeplitz score map, the weights, and the score against i − j.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N, d=D)
    angles = np.cos(rope_frequencies(D)[:, None] * np.arange(P)[None, :])       # (d/2, P)  cos(p·θ_t)
    S = _score_map(q[0], k[0])
    A = rope_attention(q, k, v, causal=True, return_weights=True)[1]
    A_plain = scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)[1]
    causal = np.tril(np.ones((N, N), dtype=bool))

    fig = figure((13.0, 9.0))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.15, 1.0])
    left, right = top.subfigures(1, 2, width_ratios=[1.1, 1.0])
    draw_attention(left, angles, signed=True, vmin=None,
                   titles=["cos(p·θ_t), θ_t = 10000^(−2t/d)"], xlabel="position p", ylabel="pair t", annotate=False)
    draw_attention(right, np.stack([A, A_plain]), allowed=causal, annotate=False,
                   titles=["RoPE, causal", "softmax, causal (no position)"])
    axes = bottom.subplots(1, 2)
    axes[0].imshow(S, cmap="RdBu_r", vmin=-np.abs(S).max(), vmax=np.abs(S).max())
    axes[0].set(xlabel="key position j", ylabel="query position i", title="(R_i q)ᵀ(R_j k)/√d: Toeplitz in (i, j)")
    distance = np.arange(P)
    for (label, options), color in zip((("interleaved", {}), ("half", {"pairing": "half"}),
                                        ("interleaved, scaling 4", {"scaling": 4.0})), GROUP_COLORS, strict=False):
        axes[1].plot(distance, _score_map(q[0], k[0], **options)[:, 0], color=color, label=label)
    axes[1].set(xlabel="i − j", ylabel="score", title="the same q, k: the score depends on i − j only")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"RoPE (Su et al., 2021): each pair of dimensions turned by p·θ_t; d = {D}, base 10000, "
                 f"seed {SEED}")
    return fig
