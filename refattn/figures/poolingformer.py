r"""Poolingformer's figure (survey §4.3.2): the two levels' factors and their product beside exact softmax.

One seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 24, d = 8, seed 3) and the
second level's parameters drawn by the registry record's ``apply`` (``rng=3``), with w₁ = 2,
w₂ = 7 and κ = ξ = 3 (five segments of three outputs tile each query's window of 15), LDConv
pooling. The top row shows the factors of W = (I + A₂P)A₁: the band attention A₁, the pooling P of
the first level's outputs into segments, and the second level's attention A₂ over the segments
(columns: a segment's first position s); the bottom row the effective matrix W, its second-level
part A₂PA₁ and exact softmax attention on the same input. Rows = queries *i*.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..compressed import pooling_matrix, pooling_pattern
from ..sparse import band_pattern, sparse_attention
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text
from .common import seeded_qkv

__all__ = ["poolingformer"]

N, SEED = 24, 3
GEOMETRY = {"window": 2, "pool_window": 7, "kernel_size": 3, "stride": 3}


@matplotlib.style.context(STYLE_PATH)
def poolingformer() -> Figure:
    """A₁, P, A₂ on top; W = (I + A₂P)A₁, A₂PA₁ and softmax below.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    result = registry.get("poolingformer").apply(q, k, v, rng=SEED, return_weights=True, return_draws=True,
                                                 **GEOMETRY)
    params, kappa = result.draws["params"], GEOMETRY["kernel_size"]
    first = band_pattern(N, GEOMETRY["window"])
    y, A1 = sparse_attention(q, k, v, first, method="equation", return_weights=True)
    P = pooling_matrix(y, kappa, pooling="conv", w_kernel=params.w_kernel)
    second = pooling_pattern(N, GEOMETRY["pool_window"], kappa, GEOMETRY["stride"])
    A2 = scaled_dot_product_attention(y @ params.w_q, P @ y @ params.w_k, P @ y, second.to_mask(),
                                      return_weights=True)[1]
    if not np.allclose(result.weights, (np.eye(N) + A2 @ P) @ A1, rtol=1e-12, atol=1e-12):
        raise ValueError("poolingformer: the figure's factors and the record's apply disagree")
    out, S = scaled_dot_product_attention(q, k, v, return_weights=True)
    error, half = (roundoff_text(np.linalg.norm(y_hat - out) / np.linalg.norm(out), ".2f")
                   for y_hat in (result.output, result.output / 2))

    fig = figure((14.0, 10.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.05])
    left, middle, right = top.subfigures(1, 3, width_ratios=[1.0, 1.05, 1.05])
    starts = [str(s) for s in range(1 - kappa, N)]                 # a segment's first position
    sparse_starts = [label if int(label) % 5 == 0 else "" for label in starts]
    draw_attention(left, A1, allowed=first.to_mask(), titles="A₁: first level, |i − j| ≤ w₁ = 2")
    draw_attention(middle, P, allowed=P > 0, row_labels=starts, xlabel="position l", ylabel="segment s",
                   titles=f"P: LDConv pooling of y into segments\n{{s, …, s + {kappa - 1}}} (rows sum to 1)")
    draw_attention(right, A2, allowed=second.to_mask(), col_labels=sparse_starts, xlabel="segment s",
                   titles=f"A₂: second level, the {second.row_counts().max()} segments\nof [i − w₂, i + w₂], w₂ = 7")
    draw_attention(bottom, np.stack([result.weights, A2 @ P @ A1, S]),
                   allowed=np.stack([result.allowed, A2 @ P @ A1 > 0, np.ones((N, N), dtype=bool)]),
                   titles=["W = (I + A₂P)A₁ (rows sum to 2)", "A₂PA₁: the second level's part", "softmax"])
    bottom.suptitle(f"out = W v exactly; relative output error against softmax ‖y − y_sm‖/‖y_sm‖ = {error}, "
                    f"and {half} for out/2 (the residual doubles the scale)")
    fig.suptitle(f"Poolingformer (Zhang et al., 2021): sliding window, then attention over pooled segments of the "
                 f"first level's outputs; n = m = {N}, κ = ξ = {kappa}, seed {SEED}")
    return fig
