r"""The figure of Predictive Attention (Wang et al., 2021; survey §4.5.2): the map below, convolved, as a prior.

Drawn by :func:`~refattn.figures.lower_layer.stack_figure`: the registry entry's attention-only stack
on seeded input, three layers, α = 0.5, each layer above the bottom with a 3 × 3 convolution followed
by a ReLU. The convolution is set by hand, standing in for a trained one (a freshly drawn one, small
taps around 0, leaves little after the ReLU): centre tap 1, the four edge neighbours 1/4, bias 0. The
prior panel is then (1 − α)·ReLU(conv(Â⁽ˡ⁻¹⁾)): the positive logits below, spread to their
neighbours, added to α·S⁽ˡ⁾.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from ..prior import AttentionConv, predictive_rules
from ..viz import STYLE_PATH
from .lower_layer import stack_figure

__all__ = ["predictive_attention"]

ALPHA, LAYERS = 0.5, 3
#: Centre 1, edge neighbours 1/4, no bias: a readable stand-in for a trained 3 × 3 convolution.
CONV = AttentionConv(np.array([[[[0.0, 0.25, 0.0], [0.25, 1.0, 0.25], [0.0, 0.25, 0.0]]]]), np.zeros(1))


@matplotlib.style.context(STYLE_PATH)
def predictive_attention() -> Figure:
    """Three Predictive Attention layers: convolved prior from below, own scores, their sum, weights.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    return stack_figure("predictive_attention", lambda L, draws: predictive_rules(ALPHA, draws["convs"]),
                        f"Predictive Attention (Wang et al., 2021): Â⁽ˡ⁾ = α·S⁽ˡ⁾ + (1 − α)·ReLU(conv₃ₓ₃(Â⁽ˡ⁻¹⁾)), "
                        f"α = {ALPHA}; a hand-set kernel (centre 1, edge neighbours 1/4); n = 10", layers=LAYERS,
                        alpha=ALPHA, convs=(CONV,) * (LAYERS - 1))
