r"""Figure of Informer's ProbSparse attention (survey §4.3.1): the measure, the queries it picks, the matrix.

One seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 7) and one
seeded sample of keys (the registry record's ``apply`` with ``rng=7`` and c = 2, so u = ⌈2 ln 16⌉ =
6 active queries and U = 6 sampled keys per query). The top panel shows each query's measure on
its sample, coloured by whether it is active, beside the same max-mean over every key (Eq. 4)
and the exact measure (Eq. 2); below, the effective matrix from ``apply`` beside exact softmax
attention, non-causal and causal, with each query's colour (active or lazy) left of its row and
its sampled keys marked. Rows = queries *i*, columns = keys *j*.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

import refattn as ra

from .. import registry
from ..compressed import informer_counts, query_sparsity, top_queries
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text
from .common import GROUP_COLORS, group_strips, seeded_qkv

__all__ = ["informer"]

N, SEED, FACTOR = 16, 7, 2
LAZY, ACTIVE = GROUP_COLORS[0], GROUP_COLORS[1]                    # group 0 = lazy, 1 = active


@matplotlib.style.context(STYLE_PATH)
def informer() -> Figure:
    """The sampled measure and the queries it picks; Informer's effective matrix beside softmax, (non-)causal.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    record = registry.get("informer")
    runs = {causal: record.apply(q, k, v, causal=causal, rng=SEED, factor=FACTOR, return_weights=True,
                                 return_draws=True) for causal in (False, True)}
    sample = runs[False].draws["sampled_keys"]                     # "all": the same draw in both forms
    M = query_sparsity(q, k, sample)
    u = informer_counts(N, N, factor=FACTOR)[0]
    active = np.zeros(N, dtype=int)
    active[top_queries(M, u)] = 1
    lazy_rows = np.all(runs[False].weights == runs[False].weights[:, :1], axis=-1)   # uniform rows: lazy
    if not (np.array_equal(active == 0, lazy_rows) and np.array_equal(runs[True].draws["sampled_keys"], sample)):
        raise ValueError("informer: the figure's choice of queries and the record's apply disagree")

    fig = figure((13.2, 9.4))
    top, bottom = fig.subfigures(2, 1, height_ratios=[0.85, 1.0])
    _measure_panel(top.add_subplot(), q, k, M, active, u, sample.shape[1])
    for sub, causal in zip(bottom.subfigures(1, 2), (False, True), strict=True):
        _versus(sub, runs[causal], q, k, v, causal, active, sample)
    fig.suptitle(f"Informer ProbSparse attention (Zhou et al., 2021): n = m = {N}, c = {FACTOR}: "
                 f"u = ⌈c ln n⌉ = {u} active queries, U = ⌈c ln m⌉ = {sample.shape[1]} sampled keys each "
                 f"(seed {SEED})")
    return fig


def _measure_panel(ax, q, k, M, active, u: int, U: int) -> None:
    """Bars: the sampled max-mean M̄_i, coloured active/lazy; markers: Eq. 4 on every key, Eq. 2 minus ln m."""
    i = np.arange(N)
    ax.bar(i, M, width=0.7, color=[ACTIVE if a else LAZY for a in active])
    ax.plot(i, query_sparsity(q, k), "_", color="black", markersize=14, markeredgewidth=2)
    ax.plot(i, query_sparsity(q, k, kind="lse") - np.log(N), "o", color="black", markersize=4, fillstyle="none")
    cut = np.sort(M)[-u]
    ax.axhline(cut, color=ACTIVE, linestyle="--", linewidth=1)
    ax.set(xlabel="query i", ylabel="sparsity measure", xticks=i, xlim=(-0.6, N - 0.4))
    ax.set_title(f"each query's max − mean of its {U} sampled scores s_ij = q_i·k_j/√d: the top u = {u} "
                 "attend (orange), the others output mean(V) (blue)")
    ax.legend(handles=[Patch(color=ACTIVE, label="M̄ on the sample, active"),
                       Patch(color=LAZY, label="M̄ on the sample, lazy"),
                       Line2D([], [], color=ACTIVE, linestyle="--", label=f"the u-th largest ({u})"),
                       Line2D([], [], color="black", marker="_", linestyle="", markersize=10, markeredgewidth=2,
                              label="M̄ on every key (Eq. 4)"),
                       Line2D([], [], color="black", marker="o", linestyle="", fillstyle="none",
                              label="exact M − ln m = KL(uniform ‖ softmax) (Eq. 2)")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _versus(container, result, q, k, v, causal: bool, active, sample) -> None:
    """[Informer | softmax] on one weights scale; strips: each query active (orange) or lazy (blue)."""
    out, S = ra.scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    error = np.linalg.norm(result.output - out) / np.linalg.norm(out)
    allowed = ra.causal_mask(N) if causal else None
    axes = draw_attention(container, np.stack([result.weights, S]), allowed=allowed,
                          titles=["informer (dots: sampled keys)", "softmax"])
    group_strips(axes[0, 0], active)
    group_strips(axes[0, 1], active)
    rows = np.repeat(np.arange(N), sample.shape[1])
    axes[0, 0].plot(sample.ravel(), rows, ".", color="#e15759", markersize=3)
    label = ("causal, j ≤ i: lazy rows the running mean of v_0 … v_i,\n"
             "and the sample reaches later keys (dots on grey)") if causal else "non-causal: lazy rows 1/m on every key"
    container.suptitle(f"{label}\nrelative output error ‖y − y_sm‖/‖y_sm‖ = {roundoff_text(error, '.2f')}")
