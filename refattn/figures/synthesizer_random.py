r"""Figure of the Random Synthesizer (Tay et al. 2021, §3): logits that read no input, beside dot-product ones.

Seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 5). Top: a random R and the
factorised R = R₁R₂ᵀ of rank k = 2 (one signed scale), beside the scaled dot products QKᵀ/√d on the same input,
and the singular values of both R's (the factorised one has k non-zero). R is drawn N(0, 1) here so that its
weights are visible: at the official initialisation (Glorot, entries within ±√(6/(ℓ + ℓ²)) ≈ ±0.15 for ℓ = 16,
the rightmost panel) the weights start almost uniform and training shapes them. Bottom: softmax(R), causal,
the factorised form's, the mixture R+V with equal weights, and softmax attention, on one scale.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

import refattn as ra

from .. import registry
from ..prior import FactorizedRandomSynthesizer, RandomSynthesizer
from ..viz import STYLE_PATH, draw_attention, figure, roundoff, roundoff_text
from .common import seeded_qkv

__all__ = ["synthesizer_random"]

N, SEED, RANK = 16, 5, 2


@matplotlib.style.context(STYLE_PATH)
def synthesizer_random() -> Figure:
    """R, R₁R₂ᵀ and QKᵀ/√d, their spectra, and the weights beside softmax's.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    rng = np.random.default_rng(SEED)
    R = rng.standard_normal((N, N))
    R1, R2 = rng.standard_normal((2, N, RANK)) / np.sqrt(RANK)
    mech = registry.get("synthesizer_random")
    full = mech.apply(q, k, v, params=RandomSynthesizer(R), return_weights=True)
    causal = mech.apply(q, k, v, params=RandomSynthesizer(R), causal=True, return_weights=True)
    factorised = mech.apply(q, k, v, params=FactorizedRandomSynthesizer(R1, R2), return_weights=True)
    mixed = mech.apply(q, k, v, params=RandomSynthesizer(R), mix="dot", return_weights=True)
    official = mech.apply(q, k, v, rng=SEED, return_weights=True)
    exact, S_soft = ra.scaled_dot_product_attention(q, k, v, return_weights=True)
    S = q @ k.T / np.sqrt(q.shape[-1])

    fig = figure((14.0, 9.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.05])
    logits, spectrum = top.subfigures(1, 2, width_ratios=[3.0, 1.0])
    draw_attention(logits, np.stack([R, R1 @ R2.T, S]), signed=True, annotate=False,
                   titles=["random R (no input)", f"factorised R₁R₂ᵀ, k = {RANK}", "dot product: QKᵀ/√d"])
    logits.suptitle("logits before the softmax (one signed scale): row i of R is position i's, whatever the input")
    ax = spectrum.add_subplot()
    ax.semilogy(np.arange(1, N + 1), roundoff(np.linalg.svd(R, compute_uv=False)), "o-", label="R")
    sigma = np.linalg.svd(R1 @ R2.T, compute_uv=False)
    ax.semilogy(np.arange(1, N + 1), roundoff(sigma, scale=sigma[0], below="nan"), "s-",   # the rest: off the axis
                label=f"R₁R₂ᵀ: {RANK} non-zero, the rest 0 to round-off")
    ax.set(xlabel="index", ylabel="singular value", ylim=(1e-2, 1e2))
    ax.set_title("singular values")
    ax.legend(loc="lower left", fontsize=8, frameon=False)

    error = np.linalg.norm(full.output - exact) / np.linalg.norm(exact)
    ones = np.ones((N, N), bool)
    draw_attention(bottom, np.stack([full.weights, causal.weights, factorised.weights, mixed.weights,
                                     official.weights, S_soft]),
                   allowed=np.stack([ones, causal.allowed, ones, ones, ones, ones]), annotate=False,
                   titles=[f"softmax(R) (error {roundoff_text(error, '.2f')})", "softmax(R), causal", "softmax(R₁R₂ᵀ)",
                           "R+V: softmax(½R + ½QKᵀ/√d)", "official init: near uniform", "softmax attention"])
    bottom.suptitle("weights; error = ‖y − y_sm‖/‖y_sm‖ against softmax attention")
    fig.suptitle(f"Random Synthesizer (Tay et al., 2021): logits learned per position pair, no input in them, "
                 f"n = m = {N}; R ~ N(0, 1) (seed {SEED}) and the official Glorot initialisation")
    return fig
