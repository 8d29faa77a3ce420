r"""The Routing Transformer's figure: clusters coloured beside the effective matrix, exact softmax, the k-means update.

The input has cluster structure: n = 24 tokens, each drawn around one of three random directions
u_z of R^8 (q_t, k_t = 3 (u_{z_t} + 0.15 ε), ε ~ N(0, I)), so that routing by direction has
something to find. The centroids are :func:`refattn.sparse.draw_centroids`'s draw, then moved by
:func:`refattn.sparse.update_centroids` (the paper's online k-means step, λ = 0.9 here so that a
few steps show) on this same input.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure
from numpy.typing import NDArray

from .. import registry, scaled_dot_product_attention
from ..sparse import draw_centroids, nearest_centroid, update_centroids
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text
from .common import GROUP_COLORS, group_strips

__all__ = ["routing"]

N, D, K = 24, 8, 3                          # tokens, width, clusters
SEED, DRAW = 5, 9                           # the input; the initial centroids
STEPS, DECAY = 8, 0.9                       # online k-means steps shown, λ

_styled = matplotlib.style.context(STYLE_PATH)


def _qkv() -> tuple[NDArray, NDArray, NDArray]:
    """q, k around three random unit directions (one per token, shared by its query and key), v ~ N(0, 1)."""
    rng = np.random.default_rng(SEED)
    directions = draw_centroids(rng, K, D)
    z = rng.integers(0, K, N)
    q = 3.0 * (directions[z] + 0.15 * rng.standard_normal((N, D)))
    k = 3.0 * (directions[z] + 0.15 * rng.standard_normal((N, D)))
    return q, k, rng.standard_normal((N, D))


def _centroid_steps(q: NDArray, k: NDArray) -> list[NDArray]:
    """The drawn centroids and each of the STEPS online updates on (q, k)."""
    steps = [draw_centroids(DRAW, K, D)]
    for _ in range(STEPS):
        steps.append(update_centroids(steps[-1], q, k, decay=DECAY))
    return steps


def _kept_mass(S: NDArray, allowed: NDArray) -> float:
    """The share of exact softmax's weight on the routed pairs, averaged over the queries."""
    return float(np.sum(S[allowed]) / S.shape[0])


def _routed(container, q, k, v, centroids, S, *, causal: bool, title: str) -> None:
    """[routing | softmax] on one scale, the routing panel with its clusters as colour strips."""
    result = registry.get("routing").apply(q, k, v, causal=causal, centroids=centroids, return_weights=True)
    allowed = result.allowed
    causal_ok = np.tril(np.ones((N, N), dtype=bool)) if causal else np.ones((N, N), dtype=bool)
    axes = draw_attention(container, np.stack([result.weights, S]), allowed=np.stack([allowed, causal_ok]),
                          titles=[f"routing: {roundoff_text(_kept_mass(S, allowed), '.0%')} of softmax's mass "
                                  "on its pairs",
                                  "softmax" + (" (causal)" if causal else "")])
    group_strips(axes[0, 0], nearest_centroid(q, centroids), nearest_centroid(k, centroids))
    container.suptitle(title)


@_styled
def routing() -> Figure:
    """Drawn centroids, then after 8 online k-means steps (non-causal and causal), each beside softmax; at each step
    the softmax mass on the routed pairs and the share of pairs routed."""
    q, k, v = _qkv()
    steps = _centroid_steps(q, k)
    S = scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    S_causal = scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)[1]
    fig = figure((12.8, 10.4))
    top, bottom = fig.subfigures(2, 1)
    first, last = top.subfigures(1, 2)
    _routed(first, q, k, v, steps[0], S, causal=False, title=f"the {K} drawn centroids (unit, seed {DRAW})")
    _routed(last, q, k, v, steps[-1], S, causal=False, title=f"after {STEPS} online k-means steps, λ = {DECAY}")
    causal_panel, curve = bottom.subfigures(1, 2, width_ratios=[1.0, 0.8])
    _routed(causal_panel, q, k, v, steps[-1], S_causal, causal=True,
            title=f"causal: j ≤ i within a cluster, after {STEPS} steps")
    allowed = [registry.get("routing").apply(q, k, v, centroids=mu, return_weights=True).allowed for mu in steps]
    ax = curve.add_subplot()
    ax.plot(range(STEPS + 1), [_kept_mass(S, a) for a in allowed], "o-", color=GROUP_COLORS[0],
            label="softmax mass on the routed pairs")
    ax.plot(range(STEPS + 1), [a.mean() for a in allowed], "s--", color=GROUP_COLORS[1],
            label="share of the n² pairs routed")
    ax.set(xlabel="online k-means step", ylim=(0.0, 1.0),
           title="μ_c ← λμ_c + (1 − λ)/2 (Σ q̂ + Σ k̂) over c's members:\n"
                 "as many clusters as directions, less computed, as much kept")
    ax.legend(loc="lower left")
    curve.suptitle("non-causal, step by step")
    fig.suptitle(f"Routing Transformer (Roy et al., 2021): queries attend the keys of their own cluster; n = {N}, "
                 f"d = {D}, k = {K}\nstrips: the cluster of each query (left) and key (top)")
    return fig
