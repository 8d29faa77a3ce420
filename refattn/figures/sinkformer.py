r"""The figure of Sinkformer (Sander et al., 2022): Sinkhorn's steps on exp(scores), and the sums they balance.

Top: the matrix after T = 1 single step (a row normalisation: exact softmax attention), T = 2 (then the
columns), T = 3 (the default) and T = 31, on seeded input (:func:`~refattn.figures.common.seeded_qkv`,
n = m = 12, d = 8, seed 5). Bottom: the largest deviation of the row sums and of the column sums from 1 after
each step T = 1 … 40 (log scale; each step sets its own side to 1 up to round-off, drawn at
:func:`~refattn.viz.roundoff`'s floor).
The other side's error falls geometrically, faster than the bound stated in
:func:`~refattn.beyond.sinkformer_weights`, which at these scores (Δ ≈ 8.3, κ ≈ 0.97) exceeds 1 until T = 81.
"""
from __future__ import annotations

import math

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry
from ..beyond import sinkformer_weights
from ..viz import STYLE_PATH, draw_attention, figure, roundoff, roundoff_text, shade_roundoff
from .common import GROUP_COLORS, seeded_qkv

__all__ = ["sinkformer"]

N, SEED, STEPS = 12, 5, 40
SHOWN = (1, 2, 3, 31)


@matplotlib.style.context(STYLE_PATH)
def sinkformer() -> Figure:
    """The matrix after 1, 2, 3 and 31 steps, and its row and column sums against the steps.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    apply = registry.get("sinkformer").apply
    S = q @ k.T / math.sqrt(q.shape[-1])
    matrices = np.stack([apply(q, k, v, iterations=T, return_weights=True).weights for T in SHOWN])
    steps = np.arange(1, STEPS + 1)
    K = [sinkformer_weights(S, T) for T in steps]
    rows = np.array([np.max(np.abs(P.sum(axis=1) - 1.0)) for P in K])
    cols = np.array([np.max(np.abs(P.sum(axis=0) - 1.0)) for P in K])

    fig = figure((14.0, 8.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 0.85])
    notes = {1: ": one row step = softmax", 3: " (default)"}
    titles = [f"T = {T}{notes.get(T, '')}\nrows: max |sum − 1| {_deviation(P, 1)}\n"
              f"columns: max |sum − 1| {_deviation(P, 0)}" for T, P in zip(SHOWN, matrices, strict=True)]
    draw_attention(top, matrices, titles=titles, annotate=False,
                   suptitle="K^T: rows first, then columns, alternately (log domain)")
    ax = bottom.subplots()
    ax.semilogy(steps, roundoff(rows), marker="o", markersize=3, color=GROUP_COLORS[0], label="max |row sum − 1|")
    ax.semilogy(steps, roundoff(cols), marker="s", markersize=3, color=GROUP_COLORS[1],
                label="max |column sum − 1|")
    shade_roundoff(ax)
    ax.set(xlabel="T (single steps)", ylabel="deviation from 1", ylim=(None, 10.0), xticks=steps[::3],
           title="odd T: a row step sets the rows to 1; even T: a column step sets the columns; the other side's "
                 "error falls geometrically")
    ax.legend(fontsize=8)
    fig.suptitle(f"Sinkformer (Sander et al., 2022): Sinkhorn's steps on exp(QKᵀ/√d), n = m = {N}, seed {SEED}")
    return fig


def _deviation(P, axis: int) -> str:
    """max |sum − 1| of P's rows (axis 1) or columns (axis 0), for a title: "= 0.06", "< 1e-12"."""
    return roundoff_text(np.max(np.abs(P.sum(axis=axis) - 1.0)), ".1g", equals=True)
