r"""The figure of low-rank and band attention (survey §4.4.1): the factors, the two modules, the mixture, the spectra.

One seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 24, d = 8, seed 11) and the
projections drawn by the registry record's ``apply`` (``rng=11``) with D_k = 2, w = 2 and α = ½. The
top row shows the low-rank module's factors Q W_q and K W_k (24 × 2), its scores (rank 2), its
softmax A_low and the band module A_band; the bottom row the mixture A = α A_low + (1 − α) A_band
beside exact softmax attention, and the singular values of each matrix: the scores stop after D_k,
their softmax does not, but falls fast.
"""
from __future__ import annotations

import math

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..sparse import band_pattern, sparse_attention
from ..viz import STYLE_PATH, draw_attention, figure, roundoff, roundoff_text, shade_roundoff
from .common import GROUP_COLORS, seeded_qkv

__all__ = ["lowrank_band"]

N, SEED, RANK, WINDOW, ALPHA = 24, 11, 2, 2, 0.5


@matplotlib.style.context(STYLE_PATH)
def lowrank_band() -> Figure:
    """Q W_q, K W_k, their scores, A_low and A_band on top; A beside softmax and the singular values below.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    result = registry.get("lowrank_band").apply(q, k, v, rng=SEED, rank=RANK, window=WINDOW, alpha=ALPHA,
                                                return_weights=True, return_draws=True)
    params = result.draws["params"]
    q_r, k_r = q @ params.w_q, k @ params.w_k
    scores = q_r @ k_r.T / math.sqrt(RANK)
    A_low = scaled_dot_product_attention(q_r, k_r, v, return_weights=True)[1]
    band = band_pattern(N, WINDOW)
    A_band = sparse_attention(q, k, v, band, method="equation", return_weights=True)[1]
    if not np.allclose(result.weights, ALPHA * A_low + (1 - ALPHA) * A_band, rtol=1e-12, atol=1e-12):
        raise ValueError("lowrank_band: the figure's modules and the record's apply disagree")
    out, S = scaled_dot_product_attention(q, k, v, return_weights=True)
    error = np.linalg.norm(result.output - out) / np.linalg.norm(out)

    fig = figure((14.0, 10.4))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.1])
    factors, score_panel, modules = top.subfigures(1, 3, width_ratios=[0.42, 0.85, 1.6])
    columns = [str(c) for c in range(RANK)]
    draw_attention(factors, np.stack([q_r, k_r]), signed=True, col_labels=columns, xlabel="c",
                   ylabel="token", titles=["Q W_q", "K W_k"], annotate=False)
    draw_attention(score_panel, scores, signed=True, annotate=False,
                   titles=f"scores Q W_q (K W_k)ᵀ/√D_k\n(rank {RANK} = D_k)")
    draw_attention(modules, np.stack([A_low, A_band]), allowed=np.stack([np.ones((N, N), dtype=bool),
                                                                          band.to_mask()]),
                   titles=["A_low = softmax(scores)", f"A_band: |i − j| ≤ w = {WINDOW}"])
    mixture, spectra = bottom.subfigures(1, 2, width_ratios=[1.5, 1.0])
    draw_attention(mixture, np.stack([result.weights, S]), titles=[f"A = {ALPHA} A_low + {1 - ALPHA} A_band",
                                                                   "softmax(Q Kᵀ/√d)"])
    mixture.suptitle(f"relative output error against softmax ‖y − y_sm‖/‖y_sm‖ = {roundoff_text(error, '.2f')}")
    _spectra(spectra.add_subplot(), {"scores (rank ≤ D_k)": scores, "A_low": A_low, "A_band": A_band,
                                     "A": result.weights, "softmax": S})
    fig.suptitle(f"Low-rank and band attention (Guo et al., 2019): a softmax over scores of rank D_k = {RANK} "
                 f"mixed with a softmax within a band; n = m = {N}, d = 8, seed {SEED}")
    return fig


def _spectra(ax, matrices: dict) -> None:
    """σ_i / σ_1 of each matrix on a log scale (round-off drawn at :func:`~refattn.viz.roundoff`'s floor)."""
    index = np.arange(1, N + 1)
    for (label, M), color, marker in zip(matrices.items(), GROUP_COLORS, "os^Dv", strict=False):
        sigma = np.linalg.svd(M, compute_uv=False)
        ax.semilogy(index, roundoff(sigma / sigma[0]), marker=marker, markersize=3.5, color=color, label=label)
    ax.axvline(RANK + 0.5, color="black", linestyle=":", linewidth=1)
    shade_roundoff(ax)
    ax.set(xlabel="i", ylabel="σ_i / σ_1", ylim=(None, 2.0), xlim=(0.5, N + 0.5),
           title=f"singular values: the scores stop after D_k = {RANK},\ntheir softmax keeps falling")
    ax.legend(loc="center", bbox_to_anchor=(0.5, 0.3), fontsize=8)
