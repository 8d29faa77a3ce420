r"""Figure of Scatterbrain: the LSH support, the low-rank part and their sum beside softmax attention.

n = m = 16 seeded tokens in R^8 (:func:`~refattn.figures.common.seeded_qkv`, seed 0), 2 hash rounds of
4 buckets and r = 8 Performer projections (16 hyperbolic features), drawn by the registry entry. Top:
softmax attention A; the support, the pairs that share a bucket in some round (strips: each query's
and key's bucket in round 0); Performer alone, L with each row divided by its sum; Scatterbrain's
weights, the rows of L + S. Bottom: the sparse part S = exp(q̃·k̃) − L on the support; the errors of Performer
alone and of Scatterbrain against A. Rows = queries *i*, columns = keys *j*.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..beyond import scatterbrain_parts
from ..sparse import lsh_buckets
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text
from .common import group_strips, seeded_qkv

__all__ = ["scatterbrain"]

N, SEED, BUCKETS, ROUNDS, FEATURES = 16, 0, 4, 2, 8


@matplotlib.style.context(STYLE_PATH)
def scatterbrain() -> Figure:
    """Softmax attention, the LSH support, Performer alone, Scatterbrain, the sparse part and both errors.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N, q_scale=1.0)
    _, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    result = registry.get("scatterbrain").apply(q, k, v, rng=SEED, num_buckets=BUCKETS, num_rounds=ROUNDS,
                                                num_features=FEATURES, return_weights=True, return_draws=True)
    rotations, omega = result.draws["rotations"], result.draws["omega"]
    parts = scatterbrain_parts(q, k, rotations, omega)
    if not np.allclose(parts.weights, result.weights, rtol=1e-12, atol=1e-12):
        raise ValueError("scatterbrain: the figure's parts and the record's apply disagree")
    performer = parts.low_rank / parts.low_rank.sum(axis=-1, keepdims=True)
    root = q.shape[-1] ** -0.25
    h_q, h_k = lsh_buckets(q * root, rotations)[0], lsh_buckets(k * root, rotations)[0]   # round 0
    err = {name: roundoff_text(np.linalg.norm(W - A) / np.linalg.norm(A), ".3f") for name, W in
           (("performer", performer), ("scatterbrain", result.weights))}

    fig = figure((14.0, 8.8))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.0])
    weights, support = top.subfigures(1, 2, width_ratios=[3.1, 1.0])
    vmax = float(max(A.max(), performer.max(), result.weights.max()))
    draw_attention(weights, np.stack([A, performer, result.weights]), vmax=vmax, annotate=False,
                   titles=["softmax(QKᵀ/√d)", f"Performer alone: L / L1 (error {err['performer']})",
                           f"Scatterbrain: (L + S) / (L + S)1 (error {err['scatterbrain']})"])
    ax = draw_attention(support, parts.support.astype(float), cmap="Greys", vmax=1.0, colorbar=False,
                        annotate=False, titles=f"support: {int(parts.support.sum())} of {N * N} pairs\n"
                                               f"({ROUNDS} rounds × {BUCKETS} buckets; strips: round 0)")[0, 0]
    group_strips(ax, h_q, h_k)
    sparse, errors = bottom.subfigures(1, 2, width_ratios=[1.0, 2.1])
    draw_attention(sparse, np.where(parts.support, parts.sparse, np.nan), signed=True, annotate=False,
                   titles="S = exp(q̃·k̃) − φ(q̃)ᵀφ(k̃) on the support (grey: off it)")
    draw_attention(errors, np.stack([performer - A, result.weights - A]), signed=True, annotate=False,
                   titles=["Performer alone − softmax", "Scatterbrain − softmax"])
    fig.suptitle("Scatterbrain (Chen, Dao et al., 2021): Performer's low-rank estimate everywhere, replaced by the "
                 "exact exp(q̃·k̃) on the pairs LSH finds\n"
                 f"n = m = {N}, d = 8, r = {FEATURES} projections; relative Frobenius errors against softmax in the "
                 "titles")
    return fig
