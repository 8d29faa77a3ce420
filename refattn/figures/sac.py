r"""The figure of Sparse Adaptive Connection (Li et al., 2020; survey §4.1.2): predicted edges, attention on them.

n = m = 12 seeded tokens. Left: the demonstration predictor's edge probabilities
:math:`\sigma(q_i W k_j^\top)` (W from seed 41, the draw the registry record's ``apply`` makes), with
the r = 3 edges it keeps for each query marked; then the effective weights of ``apply`` on those
edges (grey: no edge), the causal form (3 edges among j ≤ i), and exact softmax attention on the
same q, k, v. Rows = queries *i*, columns = keys *j*.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry
from ..core.sdpa import scaled_dot_product_attention
from ..sparse import predictor_scores
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["sac"]

N_TOKENS, EDGES, SEED = 12, 3, 41


@matplotlib.style.context(STYLE_PATH)
def sac() -> Figure:
    """Edge probabilities with the kept edges marked, SAC's weights non-causal and causal, and softmax."""
    q, k, v = seeded_qkv(SEED, N_TOKENS)
    record = registry.get("sac")
    plain = record.apply(q, k, v, rng=SEED, r=EDGES, return_weights=True, return_draws=True)
    causal = record.apply(q, k, v, causal=True, r=EDGES, return_weights=True, **plain.draws)
    exact = scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    p = predictor_scores(q, k, plain.draws["predictor"])
    every = np.ones((N_TOKENS, N_TOKENS), dtype=bool)
    fig = figure((14.0, 4.6))
    axes = draw_attention(fig, np.stack([p, plain.weights, causal.weights, exact]),
                          allowed=np.stack([every, plain.allowed, causal.allowed, every]), vmax=1.0, titles=[
        f"edge probabilities σ(q_i W k_jᵀ)\n(● the r = {EDGES} edges of each query)",
        f"SAC: softmax on the {EDGES} edges\nof each query (grey: no edge)",
        f"causal: {EDGES} edges among j ≤ i\n(rows 0–1 have fewer keys)",
        "exact softmax attention\n(same q, k, v)",
    ], annotate=False)
    rows, cols = np.nonzero(plain.allowed)
    axes[0, 0].plot(cols, rows, "o", ms=6, mfc="#f28e2b", mec="white", mew=0.8, ls="none")
    fig.suptitle(f"Sparse Adaptive Connection (Li et al., 2020): a seeded bilinear predictor picks {EDGES} keys per "
                 "query,\nattention runs on those edges only (the paper's predictor is a learned LSTM)")
    return fig
