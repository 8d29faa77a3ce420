r"""Figure of the Dense Synthesizer (Tay et al. 2021, §3): synthesized logits and weights beside dot-product ones.

Seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 5) and the registry record's
``apply`` with F drawn from the same seed (the official initialisation). Top: the logits each query synthesizes
from itself, B = W₂ ReLU(W₁q + b₁) + b₂, beside the scaled dot products QKᵀ/√d on the same input (one signed
scale), and the factorised form's logits (a = b = 4) with one row folded to b × a, the outer product of its two
heads' outputs (rank one). Bottom: the weights softmax(B), causal, the factorised form's, the mixture D+V with
equal weights, and softmax attention, on one scale.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

import refattn as ra

from .. import registry
from ..prior import dense_logits
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text
from .common import seeded_qkv

__all__ = ["synthesizer_dense"]

N, SEED, FACTORS, ROW = 16, 5, (4, 4), 3


@matplotlib.style.context(STYLE_PATH)
def synthesizer_dense() -> Figure:
    """Logits (synthesized, dot-product, factorised, one factorised row) and the weights beside softmax's.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    mech = registry.get("synthesizer_dense")
    plain = mech.apply(q, k, v, rng=SEED, return_weights=True, return_draws=True)
    params = plain.draws["params"]
    causal = mech.apply(q, k, v, params=params, causal=True, return_weights=True)
    factorised = mech.apply(q, k, v, rng=SEED, factors=FACTORS, return_weights=True, return_draws=True)
    mixed = mech.apply(q, k, v, params=params, mix="dot", return_weights=True)
    exact, S_soft = ra.scaled_dot_product_attention(q, k, v, return_weights=True)

    B = dense_logits(q, params)                                    # (n, m)  ℓ = m
    S = q @ k.T / np.sqrt(q.shape[-1])
    C = dense_logits(q, factorised.draws["params"])
    a, b = FACTORS
    folded = C[ROW].reshape(b, a)                                  # B_i A_iᵀ

    fig = figure((14.0, 9.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.05])
    logits, fold = top.subfigures(1, 2, width_ratios=[3.0, 0.9])
    draw_attention(logits, np.stack([B, S, C]), signed=True, annotate=False,
                   titles=["dense: B = W₂ ReLU(W₁q + b₁) + b₂", "dot product: QKᵀ/√d (same input)",
                           f"factorised, a = b = {a}: C = H_A(A) ∗ H_B(B)"])
    logits.suptitle("logits before the softmax (one signed scale): B has no key in it, row i is a function of q_i")
    draw_attention(fold, folded, signed=True, annotate=False, xlabel="r (A's entry)", ylabel="p (B's entry)",
                   titles=f"row {ROW} of C as b × a: rank {np.linalg.matrix_rank(folded)}")

    error = roundoff_text(np.linalg.norm(plain.output - exact) / np.linalg.norm(exact), ".2f")
    draw_attention(bottom, np.stack([plain.weights, causal.weights, factorised.weights, mixed.weights, S_soft]),
                   allowed=np.stack([np.ones((N, N), bool), causal.allowed, *(np.ones((N, N), bool),) * 3]),
                   annotate=False,
                   titles=[f"softmax(B) (output error {error})", "softmax(B), causal", "softmax(C), factorised",
                           "D+V: softmax(½B + ½QKᵀ/√d)", "softmax attention"])
    bottom.suptitle("weights; error = ‖y − y_sm‖/‖y_sm‖ against softmax attention (untrained F: they differ)")
    fig.suptitle(f"Dense Synthesizer (Tay et al., 2021): each query synthesizes its logits over the key positions, "
                 f"n = m = {N}, d = 8; F at the official initialisation (seed {SEED})")
    return fig
