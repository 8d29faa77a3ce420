r"""The figure of Long-Short attention: its token-mixing matrix W = A_short + A_long Pᵀ, part by part, beside softmax.

One seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 5) and the record's
``apply`` (its default DualLN on the keys, values as given, so out = W V) with w = 4, r = 2 and W^P drawn with unit
entries (the official N(0, 0.02²) start makes P nearly a mean over the keys; a trained projection is not). Top
row, bidirectional: the projection P (m × r), the window part A_short (its segment-wise window, the rest grey), the
projection part A_long Pᵀ, their sum W and softmax attention. Bottom row, causal with segments of l = 4: the same
parts, the projection part reading only the segments before each query's own.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..beyond.long_short import LongShortParams, init_long_short, long_short_window_pattern
from ..core.layer_norm import layer_norm
from ..core.softmax import softmax
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["long_short"]

N, SEED, WINDOW, RANK = 16, 5, 4, 2


@matplotlib.style.context(STYLE_PATH)
def long_short() -> Figure:
    """P, the window part, the projection part, W and softmax: bidirectional on top, causal below.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    start = init_long_short(SEED, q.shape[-1], RANK)
    params = LongShortParams(np.random.default_rng(SEED).standard_normal(start.w_proj.shape), start.ln_short,
                             start.ln_long)
    mech = registry.get("long_short")
    fig = figure((14.0, 8.6))
    rows = fig.subfigures(2, 1)
    for row, causal in zip(rows, (False, True), strict=True):
        result = mech.apply(q, k, v, causal=causal, params=params, window=WINDOW, return_weights=True)
        window = long_short_window_pattern(N, WINDOW, causal=causal).to_mask()
        short, long_part, P = _parts(q, k, params, window, causal)
        if not np.allclose(short + long_part, result.weights, rtol=1e-12, atol=1e-12):
            raise ValueError("long_short: the figure's parts and the record's apply disagree")
        S = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)[1]
        what = (f"causal: window i − w < j ≤ i, P_s over segments of l = w = {WINDOW}, seen by later segments"
                if causal else f"bidirectional: segments of w = {WINDOW} plus e = {WINDOW // 2} keys each side, "
                f"P over all m keys")
        left, right = row.subfigures(1, 2, width_ratios=[0.16, 1.0])
        draw_attention(left, P, xlabel="ρ", ylabel="key j", col_labels=[str(c) for c in range(P.shape[1])],
                       titles="P (columns: softmax\nover " + ("each segment)" if causal else "the keys)"),
                       annotate=False)
        draw_attention(right, np.stack([short, long_part, result.weights, S]),
                       allowed=np.stack([window, result.allowed, result.allowed, S > 0 if causal else S >= 0]),
                       titles=["window part A_short", "projection part A_long Pᵀ", "W = A_short + A_long Pᵀ",
                               "softmax(Q Kᵀ/√d)" + (", causal" if causal else "")], annotate=False)
        row.suptitle(what)
    fig.suptitle(f"Long-Short attention (Zhu et al., 2021): one softmax over a window and r = {RANK} projected keys "
                 f"P = softmax(K W^P), DualLN on the keys; n = m = {N}, d = 8, seed {SEED}")
    return fig


def _parts(q, k, params, window, causal):
    """(A_short, A_long Pᵀ, P) from the definition: LN_L(K) in the window, LN_G(Pᵀ K) projected, one softmax."""
    ln_s, ln_g = params.ln_short, params.ln_long
    logits = k @ params.w_proj                                     # (m, r)
    if causal:                                                     # P_s within each segment of l = w keys
        segments = [slice(s * WINDOW, (s + 1) * WINDOW) for s in range(N // WINDOW)]
    else:
        segments = [slice(0, N)]
    P = np.concatenate([softmax(logits[seg], axis=0) for seg in segments])                  # (m, r)
    placed = np.zeros((len(segments) * RANK, N))                   # row s·r + ρ: P_s's column ρ at segment s
    for s, seg in enumerate(segments):
        placed[s * RANK:(s + 1) * RANK, seg] = P[seg].T
    k_bar = layer_norm(placed @ k, ln_g.gamma, ln_g.beta)          # (R, d)  LN_G(Pᵀ K)
    seen = np.ones((N, len(placed)), bool)
    if causal:
        seen = np.arange(len(placed)) // RANK < (np.arange(N) // WINDOW)[:, None]
    scores = q @ np.concatenate([k_bar, layer_norm(k, ln_s.gamma, ln_s.beta)]).T / np.sqrt(q.shape[-1])
    A = softmax(scores, mask=np.concatenate([seen, window], axis=1))
    return A[:, len(placed):], A[:, :len(placed)] @ placed, P
