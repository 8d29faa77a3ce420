"""Figure of the disagreement terms (Li et al., 2018) for identical, random and pairwise orthogonal heads.

h = 4 heads, n = 8 positions. Random: a seeded multi-head layer (d_model = 16, seed 11) on seeded input:
its value projections V^i, its weights A^i = softmax(Q^i K^iᵀ/√d) and outputs O^i = A^i V^i. Identical:
head 1 of that layer copied into every head. Orthogonal: V^i_t along the i-th axis (a positive length)
and A^i the identity rolled by i, so the heads attend to disjoint positions and their outputs are orthogonal.
Left: the three terms (the position term divided by n to share the [−1, 0] axis); right: the heads' weights.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

import refattn as ra

from ..core.multi_head import init_multi_head, project_heads
from ..heads import output_disagreement, position_disagreement, subspace_disagreement
from ..viz import STYLE_PATH, draw_attention, figure

__all__ = ["disagreement_reg"]

H, N, D_MODEL, SEED = 4, 8, 16, 11


def _cases() -> dict[str, tuple]:
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((N, D_MODEL))
    p = init_multi_head(rng, D_MODEL, H)
    q, k, v = (project_heads(x, w, b, H) for w, b in ((p.w_q, p.b_q), (p.w_k, p.b_k), (p.w_v, p.b_v)))
    A = ra.softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]))
    random = (v, A)
    identical = (np.repeat(v[:1], H, axis=0), np.repeat(A[:1], H, axis=0))
    d = v.shape[-1]
    lengths = 0.5 + rng.random((H, N))
    v_orth = np.zeros((H, N, d))
    v_orth[np.arange(H)[:, None], np.arange(N)[None, :], np.arange(H)[:, None]] = lengths
    A_orth = np.stack([np.roll(np.eye(N), i, axis=1) for i in range(H)])
    return {"identical": identical, "random": random, "orthogonal": (v_orth, A_orth)}


@matplotlib.style.context(STYLE_PATH)
def disagreement_reg() -> Figure:
    """The three disagreement terms for identical, random and orthogonal heads, beside the heads' weights.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    cases = _cases()
    fig = figure((14.0, 9.0))
    left, right = fig.subfigures(1, 2, width_ratios=[0.9, 2.0])
    ax = left.subplots()
    names = ["subspace", "position / n", "output"]
    width = 0.26
    for c, (case, (v, A)) in enumerate(cases.items()):
        terms = [float(subspace_disagreement(v)), float(position_disagreement(A)) / N,
                 float(output_disagreement(A @ v))]
        bars = ax.bar(np.arange(3) + (c - 1) * width, terms, width, label=case)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.axhline(-1.0 / H, color="0.4", lw=0.8, ls="--")
    ax.text(2.45, -1.0 / H, "−1/h", va="bottom", ha="right", fontsize=8)
    ax.set_xticks(np.arange(3), names)
    ax.set_ylim(-1.1, 0.05)
    ax.set_ylabel("D (maximised: −1 = identical heads)")
    ax.legend(loc="lower left")
    left.suptitle("D = −(1/h²) Σᵢ Σⱼ (i = j included)")
    rows = right.subfigures(3, 1)
    for row, (case, (_, A)) in zip(rows, cases.items(), strict=True):
        draw_attention(row, A, annotate=False, colorbar=False, titles=[f"{case}: head {i + 1}" for i in range(H)])
    fig.suptitle(f"Disagreement regularisation (Li et al., 2018): h = {H} heads, n = {N}; "
                 "subspace on Vⁱ, position on Aⁱ, output on Oⁱ = AⁱVⁱ")
    return fig
