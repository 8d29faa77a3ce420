"""Figure of attention guidance (Deshpande and Narasimhan, 2020): the predefined patterns beside heads' weights.

n = 8 with delimiters at positions 3 and 7. Top: the five patterns. Bottom: the four heads of a seeded
multi-head layer (d_model = 16, seed 13), each guided by one pattern (next, previous, first, delimiter),
with its term ‖A_h − P_h‖_F² and λ = 1, and the same heads after gradient steps on the scores alone
(the loss's gradient chained through the softmax), which pull each head towards its pattern.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

import refattn as ra

from ..core.multi_head import init_multi_head, project_heads
from ..heads import PATTERNS, guide_pattern, guide_patterns, pattern_loss, pattern_loss_score_grad
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text

__all__ = ["pattern_aux_loss"]

H, N, D_MODEL, SEED, DELIMITERS, STEPS, RATE = 4, 8, 16, 13, (3, 7), 40, 2.0
GUIDE = ("next", "previous", "first", "delimiter")


@matplotlib.style.context(STYLE_PATH)
def pattern_aux_loss() -> Figure:
    """The patterns, a layer's heads with their guidance terms, and the heads after gradient steps on the scores.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((N, D_MODEL))
    p = init_multi_head(rng, D_MODEL, H)
    q, k = (project_heads(x, w, b, H) for w, b in ((p.w_q, p.b_q), (p.w_k, p.b_k)))
    S = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    P, guided = guide_patterns(GUIDE, N, delimiters=DELIMITERS)
    stepped = S.copy()
    for _ in range(STEPS):
        stepped = stepped - RATE * pattern_loss_score_grad(stepped, P, guided=guided)
    A, B = ra.softmax(S), ra.softmax(stepped)

    def per_head(W):
        return [roundoff_text(float(pattern_loss(W[h:h + 1], P[h:h + 1])), ".2f") for h in range(H)]

    fig = figure((14.0, 10.0))
    top, middle, bottom = fig.subfigures(3, 1)
    shown = np.stack([guide_pattern(name, N, delimiters=DELIMITERS if name == "delimiter" else None)
                      for name in PATTERNS])
    draw_attention(top, shown, annotate=False, colorbar=False, titles=[f"P: {name}" for name in PATTERNS])
    top.suptitle(f"the predefined patterns (delimiters at {', '.join(map(str, DELIMITERS))})")
    draw_attention(middle, A, annotate=False, colorbar=False,
                   titles=[f"head {h + 1} → {GUIDE[h]}: ‖A − P‖² = {t}" for h, t in enumerate(per_head(A))])
    middle.suptitle(f"a seeded layer's heads, total loss {roundoff_text(float(pattern_loss(A, P)), '.2f')} (λ = 1)")
    draw_attention(bottom, B, annotate=False, colorbar=False,
                   titles=[f"head {h + 1}: ‖A − P‖² = {t}" for h, t in enumerate(per_head(B))])
    bottom.suptitle(f"after {STEPS} gradient steps of size {RATE} on the scores, total loss "
                    f"{roundoff_text(float(pattern_loss(B, P)), '.2f')}")
    fig.suptitle(f"Attention guidance (Deshpande & Narasimhan, 2020): λ Σ_h ‖A_h − P_h‖_F², h = {H}, n = {N}")
    return fig
