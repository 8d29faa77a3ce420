r"""Figure of CSALR (survey §4.4.2): the factors with (Ã + εI)⁻¹, the product beside softmax, the error against ε.

The input is Nyströmformer's figure's (:func:`~refattn.figures.nystromformer.walk_qkv`: n = 22
tokens along one random walk in R^8, seed 0). Average pooling with window = stride s = 4 makes
l = ⌊22/4⌋ = 5 landmarks from tokens 0 … 19; tokens 20 and 21 are in no window (no strip). Top:
the Nyström block picture [[Ã, B̃], [F̃, Ŝ]] with the survey's ε = 1, exact softmax S on the same
scale, and (Ã + εI)⁻¹. Bottom: Ŝ − S for ε = 1, 0.1 and 0, and the relative output error as ε
shrinks, with these landmarks and with every token a landmark (s = 1), where the error is ε + O(ε²).
Rows = queries *i*, columns = keys *j*.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..lowrank import average_pool, landmark_kernels
from ..viz import STYLE_PATH, draw_attention, figure, roundoff, roundoff_text
from .common import GROUP_COLORS, group_strips
from .nystromformer import D, N, draw_blocks, token_groups, walk_qkv

__all__ = ["nystrom_csalr"]

POOL, EPS = 4, 1.0
SHOWN = (1.0, 0.1, 0.0)                             # ε of the difference panels
SWEEP = np.logspace(-6, 1, 15)                      # ε of the error curve


def _error(q, k, v, out, pool: int, eps: float) -> float:
    got = registry.get("nystrom_csalr").apply(q, k, v, pool=pool, eps=eps).output
    return float(np.linalg.norm(got - out) / np.linalg.norm(out))


@matplotlib.style.context(STYLE_PATH)
def nystrom_csalr() -> Figure:
    """The factors with (Ã + I)⁻¹ and their product beside softmax; Ŝ − S for three ε; the error against ε.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = walk_qkv()
    l = N // POOL
    groups = token_groups(np.arange(l + 1) * POOL, N)
    F_tilde, A_tilde, B_tilde = landmark_kernels(q, k, average_pool(q, POOL), average_pool(k, POOL))
    middle = np.linalg.inv(A_tilde + EPS * np.eye(l))
    S_hat = F_tilde @ middle @ B_tilde
    out, S = scaled_dot_product_attention(q, k, v, return_weights=True)
    record = registry.get("nystrom_csalr")
    runs = {eps: record.apply(q, k, v, pool=POOL, eps=eps, return_weights=True) for eps in SHOWN}
    if not np.allclose(runs[EPS].weights, S_hat, rtol=1e-12, atol=1e-12):
        raise ValueError("nystrom_csalr: the figure's factors and the record's apply disagree")

    fig = figure((14.0, 10.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.15, 1.0])
    blocks, exact, inverse = top.subfigures(1, 3, width_ratios=[1.25, 1.0, 0.6])
    vmax = float(np.abs(np.stack([S_hat, S])).max())
    draw_blocks(blocks, A_tilde, B_tilde, F_tilde, S_hat, groups, vmax=vmax,
                product=f"Ŝ = F̃ (Ã + εI)⁻¹ B̃, ε = {EPS:g}")
    ax = draw_attention(exact, S, signed=True, vmax=vmax, annotate=False, titles="S = softmax(QKᵀ/√d), exact")[0, 0]
    group_strips(ax, groups, groups)
    ax = draw_attention(inverse, middle, signed=True, xlabel="landmark query", ylabel="landmark key",
                        titles=f"(Ã + εI)⁻¹, ε = {EPS:g}")[0, 0]
    group_strips(ax, np.arange(l), np.arange(l))

    diff, curve = bottom.subfigures(1, 2, width_ratios=[1.6, 0.8])
    axes = draw_attention(diff, np.stack([runs[eps].weights - S for eps in SHOWN]), signed=True, annotate=False,
                          titles=[f"Ŝ − S, ε = {eps:g}: rows sum to {1 / (1 + eps):.3g}" for eps in SHOWN])
    for ax in axes.ravel():
        group_strips(ax, groups, groups)
    ax = curve.add_subplot()
    for pool, color, label in ((POOL, GROUP_COLORS[0], f"s = {POOL}: {l} landmarks"),
                               (1, GROUP_COLORS[1], "s = 1: every token a landmark")):
        ax.loglog(SWEEP, roundoff([_error(q, k, v, out, pool, eps) for eps in SWEEP]), "o-", color=color,
                  markersize=3, label=label)
    ax.loglog(SWEEP, SWEEP, ":", color="black", linewidth=1, label="slope 1 (at s = 1, Ŝ − S = −εI + O(ε²))")
    ax.axvline(EPS, color="grey", linewidth=0.8)
    ax.set(xlabel="ε", ylabel="‖y − y_sm‖ / ‖y_sm‖", title="relative output error against ε\n"
           "(ε ≥ 1: Ã + εI diagonally dominant, always invertible)")
    ax.legend(loc="upper left", fontsize=7)
    survey, none = (roundoff_text(_error(q, k, v, out, POOL, eps), ".3f") for eps in (EPS, 0.0))
    fig.suptitle(f"CSALR (Chen et al., 2020): n = m = {N}, d = {D}, landmarks by average pooling, window = stride "
                 f"s = {POOL}: l = {l} (tokens {l * POOL}–{N - 1} in none)\nrelative output error "
                 f"‖y − y_sm‖/‖y_sm‖ = {survey} with the survey's ε = {EPS:g} (I added to Ã), {none} with ε = 0")
    return fig
