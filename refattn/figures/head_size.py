r"""The figure of the head size (Bhojanapalli et al., 2020; survey §4.6): the low-rank bottleneck of small heads.

Top left: the rank of one head's n × n scores (n = 16 tokens, d_model = 32, seed 4) against its size
d_p, which follows min(d_p, n). Top right: the rank at d_model = 32 as heads are added, with the
head size tied to d_model / h (falling below n from h = 4 on) and fixed at d_p = n (staying at n).
Bottom: a target attention matrix on n = 8 tokens (each token attends mostly to itself and to the
one before, seed 4) and what a head of size d_p reaches on the same tokens
(:func:`~refattn.heads.represent_attention`): the best rank-d_p logits for d_p < n, and the target
exactly from d_p = n on.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import init_multi_head, softmax
from ..heads import head_scores, represent_attention
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text
from .common import GROUP_COLORS

__all__ = ["head_size"]

N, D_MODEL, SEED = 16, 32, 4
N_TARGET, TARGET_SIZES = 8, (1, 2, 4, 8)


@matplotlib.style.context(STYLE_PATH)
def head_size() -> Figure:
    """Score rank against d_p and against h (tied and fixed head size) above a target and the heads that reach it.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((N, D_MODEL))
    sizes = np.arange(1, 25)
    ranks = [np.linalg.matrix_rank(head_scores(x, x, init_multi_head(rng, D_MODEL, 1, d_k=int(d_p)),
                                               num_heads=1)[0]) for d_p in sizes]
    heads = 2 ** np.arange(6)                                      # h = 1 … 32
    tied = [max(np.linalg.matrix_rank(S) for S in head_scores(x, x, init_multi_head(rng, D_MODEL, int(h)),
                                                                num_heads=int(h))) for h in heads]
    fixed = [min(np.linalg.matrix_rank(S) for S in head_scores(x, x, init_multi_head(rng, D_MODEL, int(h), d_k=N),
                                                                 num_heads=int(h))) for h in heads]

    tokens = rng.standard_normal((N_TARGET, D_MODEL))
    logits = 3.0 * (np.eye(N_TARGET) + np.eye(N_TARGET, k=-1)) + 0.5 * rng.standard_normal((N_TARGET, N_TARGET))
    P = softmax(logits)
    reached = []
    for d_p in TARGET_SIZES:
        w_q, w_k = represent_attention(tokens, P, d_p)
        reached.append(softmax((tokens @ w_q) @ (tokens @ w_k).T / np.sqrt(d_p)))

    fig = figure((13.0, 9.4))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 0.95])
    left, right = top.subfigures(1, 2)
    ax = left.add_subplot()
    ax.plot(sizes, np.minimum(sizes, N), color="black", linestyle=":", linewidth=1, label="min(d_p, n)")
    ax.plot(sizes, ranks, "o", color=GROUP_COLORS[0], markersize=4, label="rank of its scores S = QKᵀ/√d_p")
    ax.axvline(N, color=GROUP_COLORS[3], linewidth=1, linestyle="--")
    ax.text(N + 0.3, 8, "d_p = n", color=GROUP_COLORS[3], fontsize=8)
    ax.set(xlabel="head size d_p", ylabel="rank of one head's n × n scores",
           title=f"a head's scores have rank ≤ d_p\n(n = {N} tokens, d_model = {D_MODEL})")
    ax.legend(loc="upper left", fontsize=8)
    ax = right.add_subplot()
    ax.plot(heads, tied, "o-", color=GROUP_COLORS[1], markersize=4, label="tied: d_p = d_model / h")
    ax.plot(heads, fixed, "s-", color=GROUP_COLORS[2], markersize=4, label="fixed: d_p = n")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="heads h (d_model = 32)", ylabel="rank of a head's scores", ylim=(0, N + 2),
           title="more heads at a fixed d_model shrink each head\nunless the head size is fixed (§4)")
    ax.legend(loc="lower left", fontsize=8)

    errors = [roundoff_text(np.abs(A - P).max(), ".2f") for A in reached]
    exact = roundoff_text(np.abs(reached[-1] - P).max(), equals=True)
    if not exact.startswith("<"):
        raise ValueError(f"head_size: the head of size n misses the target: max |A − P| {exact}")
    titles = ["target P"] + [f"head of d_p = {d_p}\nmax |A − P| = {e}" if d_p < N_TARGET else
                             f"head of d_p = n = {N_TARGET}\nmax |A − P| {exact}: exact"
                             for d_p, e in zip(TARGET_SIZES, errors, strict=True)]
    draw_attention(bottom, np.stack([P, *reached])[None], titles=titles,
                   suptitle=f"what one head of size d_p can express on n = {N_TARGET} tokens of d_model = {D_MODEL}: "
                            "softmax of the best rank-d_p logits (exact for d_p ≥ n)")
    fig.suptitle("Head size (Bhojanapalli et al., 2020): a head of size d_p < n has scores of rank ≤ d_p, so it "
                 "cannot express\nevery n × n attention matrix (the low-rank bottleneck); d_p chosen apart from "
                 "d_model / h removes it")
    return fig
