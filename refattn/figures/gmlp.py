r"""Figure of gMLP's spatial gating unit (Liu et al., 2021): the matrix W that mixes the tokens, beside attention.

Seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 4). Top: W at the paper's
initialisation (near 0: U(±10⁻³/n), its own signed scale), where the unit is close to identity gating
(out ≈ q); a local, shift-invariant W of the kind the paper finds after training (its Fig. 3: learned W are
Toeplitz-like, a bump around the diagonal; here a difference of Gaussians), in full and under the causal mask.
Bottom: aMLP's matrix M = W + softmax(q kᵀ/√d) at initialisation (the tiny attention is all of it) beside
softmax attention on the same input, and the relative change |out − q|/|q| at initialisation against the bound
10⁻³·√(d − 1).
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..beyond import GMLP_INIT_EPS, SpatialGatingParams
from ..viz import STYLE_PATH, draw_attention, figure, roundoff
from .common import seeded_qkv

__all__ = ["gmlp"]

N, SEED = 16, 4


@matplotlib.style.context(STYLE_PATH)
def gmlp() -> Figure:
    """W at initialisation, a local W (full and causal), aMLP's W + A, softmax's A, the identity-gating bound.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    mech = registry.get("gmlp")
    init = mech.apply(q, k, v, rng=SEED, return_weights=True, return_draws=True)
    offset = np.subtract.outer(np.arange(N), np.arange(N))        # i − j
    local = np.exp(-(offset**2) / 4.0) - 0.5 * np.exp(-(offset**2) / 16.0)
    params = SpatialGatingParams(local, np.ones(N))
    full = mech.apply(q, k, v, params=params, return_weights=True)
    causal = mech.apply(q, k, v, params=params, causal=True, return_weights=True)
    amlp = mech.apply(q, k, v, params=init.draws["params"], tiny_attention=True, return_weights=True)
    A = scaled_dot_product_attention(q, k, v, return_weights=True)[1]

    fig = figure((14.0, 8.8))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.0])
    at_init, learned = top.subfigures(1, 2, width_ratios=[1.0, 2.0])
    draw_attention(at_init, init.weights, signed=True, annotate=False, titles=["W at initialisation"])
    at_init.suptitle(f"near 0: U(±{GMLP_INIT_EPS:g}/n), b = 1")
    ones = np.ones((N, N), dtype=bool)
    draw_attention(learned, np.stack([full.weights, causal.weights]), allowed=np.stack([ones, causal.allowed]),
                   signed=True, annotate=False, titles=["a local W (Toeplitz)", "the same W, causal (j ≤ i)"])
    learned.suptitle("W as training shapes it: each position reads its neighbours")
    weights, bound = bottom.subfigures(1, 2, width_ratios=[2.0, 1.0])
    draw_attention(weights, np.stack([amlp.weights, A]), annotate=False,
                   titles=["aMLP at initialisation: W + A", "softmax attention, same input"])
    weights.suptitle("aMLP's tiny attention adds softmax's matrix to W")
    ax = bound.add_subplot()
    change = np.abs(init.output - q) / np.abs(q)
    limit = GMLP_INIT_EPS * np.sqrt(q.shape[-1] - 1)
    ax.semilogy(np.arange(N), roundoff(change.max(axis=-1)), "o", label="max over channels of |out − q|/|q|")
    ax.axhline(limit, color="k", linestyle="--", label=f"bound ε·√(d − 1) = {limit:.2g}")
    ax.set(xlabel="position i", ylabel="relative change", ylim=(limit / 1e3, limit * 10))
    ax.set_title("identity gating at initialisation")
    ax.legend(loc="lower left", fontsize=8, frameon=False)
    fig.suptitle(f"gMLP (Liu et al., 2021): out = q ⊙ (W·LayerNorm(v) + b), no softmax; n = {N}, d = {q.shape[-1]}, "
                 f"seed {SEED}")
    return fig
