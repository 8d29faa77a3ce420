r"""Figure of Skyformer: softmax attention, the Gaussian kernel that replaces it, and its Nyström approximation.

n = m = 16 tokens in R^8 whose queries and keys follow one random walk (Nyströmformer's figure input,
:func:`refattn.figures.nystromformer.walk_qkv`, seed 0), so that the kernel matrix has the fast
spectral decay that makes landmarks useful. Top: softmax
attention A, kernelized attention C = κ(Q/d^{1/4}, K/d^{1/4}) (its rows do not sum to 1), Skyformer's
C̃ with l = 8 landmarks drawn by the registry entry among the 32 queries and keys (strips: a query row or
key column that is a landmark, blue for a query, orange for a key) and γ = 0.1 with the official 6
iteration steps, and C̃ − C. Bottom: the relative error ‖C̃ − C‖_F/‖C‖_F against l (mean of 8 draws),
with the 6 steps, with the exact pseudoinverse, and with γ = 0 and the exact pseudoinverse, which
reaches C when the landmarks are all 32 points. Rows = queries *i*, columns = keys *j*.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..beyond import kernelized_attention, skyformer_attention
from ..viz import STYLE_PATH, draw_attention, figure, roundoff, roundoff_text, shade_roundoff
from .common import GROUP_COLORS, group_strips
from .nystromformer import walk_qkv

__all__ = ["skyformer"]

N, L, SEED, DRAWS = 16, 8, 0, 8


def _landmark_groups(landmarks, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Strips: query i is 0 (a landmark) or −1; key j is 1 or −1."""
    rows, cols = np.full(n, -1), np.full(m, -1)
    rows[landmarks[landmarks < n]] = 0
    cols[landmarks[landmarks >= n] - n] = 1
    return rows, cols


@matplotlib.style.context(STYLE_PATH)
def skyformer() -> Figure:
    """Softmax, the Gaussian kernel, Skyformer's Nyström approximation and its error against the landmarks.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = walk_qkv(SEED, N)
    _, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    _, C = kernelized_attention(q, k, v, return_weights=True)
    result = registry.get("skyformer").apply(q, k, v, rng=SEED, num_landmarks=L, return_weights=True,
                                             return_draws=True)
    C_tilde, landmarks = result.weights, result.draws["landmarks"]
    fig = figure((14.0, 8.4))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 0.85])
    left, right = top.subfigures(1, 2, width_ratios=[3.0, 1.05])
    vmax = float(max(A.max(), C.max(), C_tilde.max()))
    sums = [roundoff_text(total, ".2f") for total in (C.sum(axis=1).min(), C.sum(axis=1).max())]
    least = roundoff_text(C_tilde.min(), ".3f")
    axes = draw_attention(left, np.stack([A, C, C_tilde]), vmax=vmax, signed=True, annotate=False,
                          titles=["softmax(QKᵀ/√d): rows sum to 1",
                                  f"C = κ(Q/d^¼, K/d^¼):\nrow sums {sums[0]} … {sums[1]}",
                                  f"C̃: l = {L} landmarks, γ = 0.1,\n6 steps (min {least})"])
    rows, cols = _landmark_groups(landmarks, N, N)
    group_strips(axes[0, 2], rows, cols)
    draw_attention(right, C_tilde - C, signed=True, annotate=False, titles="C̃ − C")
    ax = bottom.add_subplot()
    sizes = np.arange(2, 2 * N + 1, 2)
    settings = (("γ = 0.1, 6 steps (official)", {}), ("γ = 0.1, exact pseudoinverse", {"pinv": "exact"}),
                ("γ = 0, exact pseudoinverse", {"pinv": "exact", "gamma": 0.0}))
    norm = np.linalg.norm(C)
    for (label, options), color in zip(settings, GROUP_COLORS, strict=False):
        errors = [np.mean([np.linalg.norm(skyformer_attention(q, k, v, num_landmarks=int(l), rng=s,
                                                              return_weights=True, **options)[1] - C) / norm
                           for s in range(DRAWS)]) for l in sizes]
        ax.semilogy(sizes, roundoff(errors), "o-", color=color, markersize=3, label=label)
    every = skyformer_attention(q, k, v, landmarks=np.arange(2 * N), gamma=0.0, pinv="exact", return_weights=True)[1]
    exact_error = np.linalg.norm(every - C) / norm
    ax.semilogy([2 * N], roundoff([exact_error]), "*", color="black", markersize=10,
                label=f"all {2 * N} points once, γ = 0, exact: error {roundoff_text(exact_error, '.0e', equals=True)}")
    shade_roundoff(ax)
    ax.set(xlabel="landmarks l (drawn with replacement among the n + m = 32 points)",
           ylabel="‖C̃ − C‖_F / ‖C‖_F", title=f"Nyström error against l, mean of {DRAWS} draws")
    ax.legend(loc="center left", fontsize=8)
    fig.suptitle("Skyformer (Chen et al., 2021): a Gaussian kernel in place of softmax, approximated by Nyström "
                 "on the PSD kernel matrix of all queries and keys\n"
                 f"n = m = {N} tokens along a random walk in R^8; strips: the landmarks (blue a query, orange a key)")
    return fig
