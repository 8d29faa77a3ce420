r"""Figure of Gaussian Transformer's self-attention (Guo et al., 2019): the prior −|w(i − j)² + b| beside the scores.

Seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 6) and two settings
of the prior: w = 0.5, b = 0 (the centre preferred, the prior falling fast with the distance) and
w = 0.1, b = −2.5 (the centre lowered to b, the prior's maximum 0 at |i − j| = √(−b/w) = 5). Top:
both priors and the scores QKᵀ/√d on one signed scale clipped at ±4 (the priors fall far below it
at the corners: −112 and −20). Bottom: softmax attention without the prior,
then with each prior.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..prior import GaussianTransformerParams, gaussian_transformer_prior
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["gaussian_transformer"]

N, SEED = 16, 6
SETTINGS = ((0.5, 0.0), (0.1, -2.5))
LIMIT = 4.0                                                        # colour scale of the top row: ±4


@matplotlib.style.context(STYLE_PATH)
def gaussian_transformer() -> Figure:
    """Two priors and the scores on top; the weights without and with each prior below.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    record = registry.get("gaussian_transformer")
    params = [GaussianTransformerParams(w, b) for w, b in SETTINGS]
    G = np.stack([gaussian_transformer_prior(p, N) for p in params])
    weights = [record.apply(q, k, v, params=p, return_weights=True).weights for p in params]
    S = q @ k.T / np.sqrt(q.shape[-1])
    plain = scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    for prior, A in zip(G, weights, strict=True):
        if not np.allclose(A, scaled_dot_product_attention(q, k, v, mask=prior, return_weights=True)[1],
                           rtol=1e-12, atol=1e-12):
            raise ValueError("gaussian_transformer: the figure's prior and the record's apply disagree")

    fig = figure((13.6, 8.4))
    top, bottom = fig.subfigures(2, 1)
    labels = [f"w = {w}, b = {b}" for w, b in SETTINGS]
    draw_attention(top, np.stack([*G, S]), signed=True, vmax=LIMIT, annotate=False,
                   titles=[*(f"prior G: {label}" for label in labels), "scores QKᵀ/√d"])
    draw_attention(bottom, np.stack([plain, *weights]), annotate=False,
                   titles=["softmax(QKᵀ/√d), no prior", *(f"softmax(QKᵀ/√d + G): {label}" for label in labels)])
    fig.suptitle(f"Gaussian Transformer (Guo et al., 2019): G_ij = −|w (i − j)² + b| added to the scores, "
                 f"w ≥ 0, b ≤ 0\nn = m = {N}, d = 8, seed {SEED}")
    return fig
