r"""Figure of Set Transformer's inducing points (Lee et al., 2019, §3.1; survey §4.3.2): the points, both factors.

One seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 11) and ℓ = 4
inducing points drawn by the registry record's ``apply`` (``rng=11``). Top: the keys, queries and
inducing points in the plane of the keys' first two principal directions, each inducing point
in its colour; its weights on the keys, :math:`A_{IK}` (ℓ × m, each row coloured by its inducing
point); the queries' weights on the ℓ memory slots, :math:`A_{QH}` (n × ℓ, each column coloured
likewise). Bottom: their product W = A_QH·A_IK, the effective matrix from ``apply`` (checked
against the product), beside exact softmax attention on the same input and the difference.
Rows = queries *i* (or inducing points), columns = keys *j* (or memory slots).
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

import refattn as ra

from .. import registry
from ..compressed import induced_maps
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text
from .common import GROUP_COLORS, group_strips, seeded_qkv

__all__ = ["set_transformer"]

N, SEED, ELL = 16, 11, 4


@matplotlib.style.context(STYLE_PATH)
def set_transformer() -> Figure:
    """ℓ = 4 inducing points among the keys, their two attention maps, and the composition beside softmax.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    result = registry.get("set_transformer").apply(q, k, v, rng=SEED, num_inducing=ELL, return_weights=True,
                                                   return_draws=True)
    inducing = result.draws["inducing"]
    A_QH, A_IK = induced_maps(q, k, inducing)
    if not np.allclose(result.weights, A_QH @ A_IK, rtol=1e-12, atol=1e-12):
        raise ValueError("set_transformer: the figure's maps and the record's apply disagree")
    fig = figure((13.0, 9.0))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.05])
    scatter, to_keys, to_slots = top.subfigures(1, 3, width_ratios=[1.0, 1.3, 0.8])
    _scatter(scatter.add_subplot(), q, k, inducing)
    (ax,) = draw_attention(to_keys, A_IK, ylabel="inducing point a",
                           titles=f"A_IK ({ELL} × m): inducing points on the keys").ravel()
    group_strips(ax, np.arange(ELL))
    (ax,) = draw_attention(to_slots, A_QH, xlabel="memory slot a",
                           titles=f"A_QH (n × {ELL}):\nqueries on the memory H").ravel()
    group_strips(ax, None, np.arange(ELL))
    out, S = ra.scaled_dot_product_attention(q, k, v, return_weights=True)
    error = np.linalg.norm(result.output - out) / np.linalg.norm(out)
    pair, diff = bottom.subfigures(1, 2, width_ratios=[1.9, 1.0])
    draw_attention(pair, np.stack([result.weights, S]), titles=["W = A_QH·A_IK", "softmax"])
    draw_attention(diff, result.weights - S, signed=True, titles="W − softmax", ylabel="")
    bottom.suptitle(f"the effective matrix beside exact softmax: relative output error ‖y − y_sm‖/‖y_sm‖ = "
                    f"{roundoff_text(error, '.2f')}")
    fig.suptitle(f"Set Transformer inducing-point attention (Lee et al., 2019, ISAB's attention path): n = m = {N}, "
                 f"ℓ = {ELL} inducing points (seed {SEED}); W = A_QH·A_IK has rank ≤ ℓ")
    return fig


def _scatter(ax, q, k, inducing) -> None:
    """Keys, queries and the inducing points in the plane of the keys' first two principal directions."""
    centre = k.mean(axis=0)
    basis = np.linalg.svd(k - centre, full_matrices=False)[2][:2].T   # (d, 2)
    basis *= np.where(basis[np.argmax(np.abs(basis), axis=0), [0, 1]] < 0, -1.0, 1.0)   # a fixed sign per axis
    for points, style in ((k, {"marker": "o", "color": "#bab0ac", "label": "keys k_j"}),
                          (q, {"marker": ".", "color": "#4e4e4e", "label": "queries q_i"})):
        xy = (points - centre) @ basis
        ax.scatter(xy[:, 0], xy[:, 1], s=22, **style)
    xy = (inducing - centre) @ basis
    ax.scatter(xy[:, 0], xy[:, 1], s=140, marker="*", c=[GROUP_COLORS[a % len(GROUP_COLORS)]
                                                         for a in range(len(inducing))],
               edgecolors="black", linewidths=0.6, label="inducing points I_a")
    ax.set(xlabel="keys' 1st principal direction", ylabel="2nd", title="keys, queries and inducing points")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(loc="best", fontsize=8)
