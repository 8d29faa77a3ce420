r"""Figure of routing-by-agreement of heads (Li et al., 2019; survey §4.6): the heads' weights and, for one
position, the coupling coefficients of dynamic and EM routing iteration by iteration.

Seeded (seed 1): d_model = 16, h = 4 heads, N = 2 output capsules, causal self-attention on n = 10 inputs
x ~ N(0, 4); the parameters are :func:`~refattn.heads.init_capsule_routing`'s with the vote transforms
scaled by 3, so that the votes agree or disagree visibly. Top: the heads' weights (routing does not change
them). Middle and bottom: the coupling coefficients c_ij (dynamic) and R_ij (EM) of position 7 in each of
T = 6 iterations, heads × output capsules, each row a distribution over the capsules: both start uniform
and settle on an assignment of heads to capsules, dynamic routing smoothly, EM routing after swinging heads
between the capsules (each E-step is nearly hard here: tight clusters give sharp Gaussian densities); the
right panels plot the largest change per step.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from ..heads import CapsuleRoutingParams, capsule_routing_attention, init_capsule_routing
from ..viz import STYLE_PATH, draw_attention, figure

__all__ = ["capsule_routing"]

SEED, D_MODEL, HEADS, CAPSULES, N, T, POSITION = 1, 16, 4, 2, 10, 6, 7


@matplotlib.style.context(STYLE_PATH)
def capsule_routing() -> Figure:
    """The heads' weights and one position's coupling coefficients per iteration, dynamic and EM routing.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    rng = np.random.default_rng(SEED)
    p = init_capsule_routing(rng, D_MODEL, HEADS, num_capsules=CAPSULES)
    params = CapsuleRoutingParams(p.w_q, p.w_k, p.w_v, 3 * p.w_votes, p.w_o, p.beta_u, p.beta_a,
                                  p.b_q, p.b_k, p.b_v, p.b_o)
    x = 2 * rng.standard_normal((N, D_MODEL))
    couplings = {}
    for routing in ("dynamic", "em"):
        _, A, C = capsule_routing_attention(x, x, params, routing=routing, iterations=T, causal=True,
                                            return_weights=True, return_coupling=True)
        couplings[routing] = C[POSITION]                                   # (T, h, N)

    fig = figure((14.0, 11.0))
    top, middle, bottom = fig.subfigures(3, 1, height_ratios=[1.0, 0.8, 0.8])
    draw_attention(top, A, allowed=np.tril(np.ones((N, N), bool)), annotate=False,
                   titles=[f"head {i + 1}" for i in range(HEADS)])
    top.suptitle(f"the heads' causal weights (routing combines the heads' outputs, not their weights); "
                 f"position {POSITION} is routed below")
    heads = [f"head {i + 1}" for i in range(HEADS)]
    capsules = [f"Ω{j + 1}" for j in range(CAPSULES)]
    for sub, routing, name in ((middle, "dynamic", "dynamic routing: c_ij = softmax_j(b_ij)"),
                               (bottom, "em", "EM routing: R_ij = a_j p_ij / Σ_k a_k p_ik")):
        C = couplings[routing]
        grid, curve = sub.subfigures(1, 2, width_ratios=[4.0, 1.0])
        draw_attention(grid, C, row_labels=heads, col_labels=capsules, xlabel="output capsule j", ylabel="head i",
                       vmax=1.0, titles=[f"iteration {t + 1}" for t in range(T)])
        grid.suptitle(f"{name}, position {POSITION}: rows are distributions over the output capsules")
        ax = curve.add_subplot()
        ax.plot(np.arange(1, T), np.abs(np.diff(C, axis=0)).max(axis=(1, 2)), "o-")
        ax.set(xlabel="step t → t + 1", ylabel="max |Δ coupling|", ylim=(-0.05, 1.05), xticks=np.arange(1, T))
        ax.set_title("change per step")
    fig.suptitle(f"Routing-by-agreement of heads (Li et al., 2019): h = {HEADS} heads as input capsules, "
                 f"N = {CAPSULES} output capsules, T = {T} iterations, causal, n = {N} (seed {SEED})")
    return fig
