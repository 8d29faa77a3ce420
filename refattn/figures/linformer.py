r"""Figure of Linformer (Wang et al. 2020, §4): the projections, the effective matrix, the error as k grows.

Seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 3) and the registry
record's ``apply`` with k = 4 and E, F drawn from the fixed seed (the paper's N(0, 1/k)). Top: the two
projections E and F (k × m, a signed scale), and beside them E = F = mean pooling of m/k neighbours
(the paper's "general projections"). Middle: the n × k context mapping P̄ = softmax(Q(EK)ᵀ/√d) of the
random projections, then the effective matrix W = P̄F of both beside exact softmax attention on one
signed scale (W's rows need not sum to 1 and may be negative; pooling's do and are not). Bottom: the
relative output error against softmax as k grows, n = m = 64, for random projections (the paper's
draw, untrained: the mean over 8 draws) and for mean pooling (exact at k = m), on i.i.d. input and on
input that varies smoothly along the sequence.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure
from numpy.typing import NDArray

import refattn as ra

from .. import registry
from ..compressed import compression_matrix, linformer_attention
from ..viz import STYLE_PATH, draw_attention, figure, roundoff, roundoff_text
from .common import seeded_qkv

__all__ = ["linformer", "smooth_qkv"]

N, K, SEED = 16, 4, 3
SWEEP_N, SWEEP_K, SWEEP_DRAWS = 64, (1, 2, 4, 8, 16, 32, 64), 8


def smooth_qkv(seed: int, n: int, *, d: int = 8, width: float = 4.0) -> tuple[NDArray, NDArray, NDArray]:
    """Seeded q, k, v (n, d) whose rows vary smoothly along the sequence: white noise convolved with a Gaussian of
    ``width`` positions, scaled to unit variance (q to 1.5, as :func:`~refattn.figures.common.seeded_qkv`)."""
    rng = np.random.default_rng(seed)
    t = np.arange(-3 * int(width), 3 * int(width) + 1)
    g = np.exp(-t**2 / (2 * width**2))
    out = []
    for scale in (1.5, 1.0, 1.0):
        x = rng.standard_normal((n, d))
        y = np.stack([np.convolve(x[:, c], g, mode="same") for c in range(d)], axis=1)
        out.append(scale * y / y.std())
    return tuple(out)


@matplotlib.style.context(STYLE_PATH)
def linformer() -> Figure:
    """E and F, the context mapping, W = P̄F beside softmax, and the error against k.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    result = registry.get("linformer").apply(q, k, v, rng=SEED, proj_dim=K, return_weights=True, return_draws=True)
    E, F = result.draws["E"], result.draws["F"]
    P = ra.scaled_dot_product_attention(q, E @ k, F @ v, return_weights=True)[1]
    exact, S = ra.scaled_dot_product_attention(q, k, v, return_weights=True)
    if not np.allclose(P @ F, result.weights, rtol=1e-12, atol=1e-12):
        raise ValueError("linformer: the figure's P̄F and the record's weights disagree")
    error = roundoff_text(np.linalg.norm(result.output - exact) / np.linalg.norm(exact), ".2f")

    pool = _pooling(N, K)
    pooled, W_pool = linformer_attention(q, k, v, E=pool, sharing="kv", return_weights=True)
    pooled_error = roundoff_text(np.linalg.norm(pooled - exact) / np.linalg.norm(exact), ".2f")

    fig = figure((13.6, 12.6))
    top, middle, bottom = fig.subfigures(3, 1, height_ratios=[0.55, 1.0, 0.9])
    draw_attention(top, np.stack([E, F, pool]), signed=True, annotate=False, xlabel="position j", ylabel="row r",
                   titles=["random E (projects the keys)", "random F (the values)", f"mean pooling of {N // K}: E = F"])
    mapping, matrices = middle.subfigures(1, 2, width_ratios=[0.75, 3.0])
    draw_attention(mapping, P, titles="random: P̄", xlabel="row r", annotate=False)
    draw_attention(matrices, np.stack([result.weights, W_pool, S]), signed=True, annotate=False, ylabel="",
                   titles=[f"random: W = P̄F (error {error})", f"pooling: W = P̄F (error {pooled_error})",
                           "softmax attention"])
    matrices.suptitle("P̄ = softmax(Q(EK)ᵀ/√d), n × k; the effective matrix W (out = W V) beside softmax, one "
                      "signed scale; error = ‖y − y_sm‖/‖y_sm‖")
    _error_panel(bottom.add_subplot())
    fig.suptitle(f"Linformer (Wang et al., 2020): keys and values projected along the sequence, n = m = {N}, "
                 f"k = {K}; random E, F ~ N(0, 1/k) (seed {SEED}), or mean pooling")
    return fig


def _error_panel(ax) -> None:
    """‖y − y_sm‖/‖y_sm‖ against k: random projections and mean pooling, i.i.d. and smooth input."""
    inputs = {"i.i.d. input": seeded_qkv(SEED, SWEEP_N), "smooth input": smooth_qkv(SEED, SWEEP_N)}
    for (label, (q, k, v)), color in zip(inputs.items(), ("#4e79a7", "#f28e2b"), strict=True):
        exact = ra.scaled_dot_product_attention(q, k, v)

        def rel(out, exact=exact):
            return np.linalg.norm(out - exact) / np.linalg.norm(exact)

        random = [np.mean([rel(linformer_attention(q, k, v, proj_dim=r, rng=s)) for s in range(SWEEP_DRAWS)])
                  for r in SWEEP_K]
        pooled = [rel(linformer_attention(q, k, v, E=_pooling(SWEEP_N, r), sharing="kv")) for r in SWEEP_K]
        ax.plot(SWEEP_K, roundoff(random), "o--", color=color, label=f"random E, F ~ N(0, 1/k), {label}")
        ax.plot(SWEEP_K, roundoff(pooled, below="nan"), "s-", color=color,     # k = m: exact, off the log axis
                label=f"E = F mean pooling of m/k neighbours, {label}")
    ax.set(xscale="log", yscale="log", xlabel="k (projected length)", ylabel="relative output error",
           xticks=SWEEP_K, xticklabels=[str(r) for r in SWEEP_K])
    ax.set_title(f"error against softmax as k grows (n = m = {SWEEP_N}): untrained random projections stay far "
                 "(the paper learns E and F); pooling is exact at k = m (error at round-off, off the axis)")
    ax.minorticks_off()
    ax.legend(loc="lower left", fontsize=8, frameon=False)


def _pooling(m: int, r: int) -> NDArray:
    """The (r, m) mean pooling of m/r neighbours along the sequence."""
    return compression_matrix(m, np.full(m // r, r / m))
