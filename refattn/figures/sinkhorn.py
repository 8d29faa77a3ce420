r"""The figure of Sparse Sinkhorn attention (Tay et al., 2020; survey §4.1.2): the soft sort and what it does.

Top: the sorting matrix P of n = 16 seeded keys in N = 4 blocks of b = 4, after k = 1, 2, 7 (the
default) and 30 Sinkhorn iterations, and the causal P at k = 7; each title gives how far P's rows
are from summing to 1 (its columns sum to 1 after every iteration). Bottom: the effective n × m
weights of the registry record's ``apply`` (same draws throughout: the sorting network and the
Gumbel noise from seed 40) beside exact softmax attention on the same q, k, v. The colour strips
beside each panel mark the blocks: query *i*'s block left of row *i*, key *j*'s block above column *j*.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry
from ..core.sdpa import scaled_dot_product_attention
from ..sparse import sorting_matrix
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text
from .common import group_strips, seeded_qkv

__all__ = ["sinkhorn"]

N_TOKENS, BLOCK, SEED = 16, 4, 40
ITERATIONS = (1, 2, 7, 30)


@matplotlib.style.context(STYLE_PATH)
def sinkhorn() -> Figure:
    """P converging with the iterations, the causal P, and the effective weights beside softmax."""
    q, k, v = seeded_qkv(SEED, N_TOKENS)
    record = registry.get("sinkhorn")
    base = record.apply(q, k, v, rng=SEED, block_size=BLOCK, return_weights=True, return_draws=True)
    draws = dict(base.draws)
    blocks = np.arange(N_TOKENS) // BLOCK
    places = np.arange(N_TOKENS // BLOCK)

    sorts = [sorting_matrix(k, BLOCK, draws["sort_net"], draws["gumbel"], iterations=t) for t in ITERATIONS]
    sorts.append(sorting_matrix(k, BLOCK, draws["sort_net"], draws["gumbel"], causal=True))
    titles = [f"k = {t}{' (default)' if t == 7 else ''}: rows\nmax |sum − 1| {_row_error(P)}"
              for t, P in zip(ITERATIONS, sorts, strict=False)]
    titles.append("causal, k = 7: J < I only, near\nthe shift I ← I − 1 (its one limit)")

    causal = record.apply(q, k, v, causal=True, block_size=BLOCK, return_weights=True, **draws)
    cut = record.apply(q, k, v, sortcut=1, block_size=BLOCK, return_weights=True, **draws)
    exact = scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    weights = np.stack([base.weights, causal.weights, cut.weights, exact])
    future = np.triu(np.ones((N_TOKENS, N_TOKENS), dtype=bool), k=1)
    if np.any(causal.weights[future] != 0):
        raise ValueError("sinkhorn: the causal weights put mass on future keys")
    allowed = np.stack([np.ones_like(future), ~future, np.ones_like(future), np.ones_like(future)])
    sources = ", ".join(f"{I}←{J}" for I, J in enumerate(np.argmax(sorts[2], axis=1)))

    fig = figure((14.0, 8.8))
    top, bottom = fig.subfigures(2, 1, height_ratios=[0.8, 1.0])
    axes = draw_attention(top, np.stack(sorts), titles=titles, xlabel="block J (sorted from)",
                          ylabel="place I (sorted to)", vmax=1.0,
                          suptitle="sorting matrix P = S^k((R + ε)/τ), τ = 0.75: columns sum to 1 after each "
                                   "iteration; the rows approach 1")
    for ax in axes.flat:
        group_strips(ax, places, places)
    axes = draw_attention(bottom, weights, allowed=allowed, titles=[
        f"Sinkhorn, b = {BLOCK}, k = 7\nlargest source per place: {sources}",
        "causal: own block up to i,\nsorted earlier blocks (grey: j > i)",
        "SortCut c = 1: every query\nattends sorted block 0 only",
        "exact softmax attention\n(same q, k, v)",
    ], suptitle="effective weights A_ij = [J = I] α_local + α_sorted P_IJ (colour strips: blocks)")
    for ax in axes.flat:
        group_strips(ax, blocks, blocks)
    fig.suptitle(f"Sparse Sinkhorn attention (Tay et al., 2020): n = {N_TOKENS} in {N_TOKENS // BLOCK} blocks "
                 f"of {BLOCK}; each block attends its own block and a softly sorted one")
    return fig


def _row_error(P) -> str:
    """max |Σ_J P_IJ − 1| over the rows of P, for a title: "= 0.045", "< 1e-12"."""
    return roundoff_text(np.max(np.abs(P.sum(axis=-1) - 1.0)), ".2g", equals=True)
