r"""The figure of RealFormer (He et al., 2021; survey §4.5.2): residual scores stepped through three layers.

Drawn by :func:`~refattn.figures.lower_layer.stack_figure`: the registry entry's attention-only stack
on seeded input, one row per layer. Each layer adds its own scores S⁽ˡ⁾ to the raw map passed up
from below (w1 = w2 = 1, g = identity), so the map Â⁽ˡ⁾ = S⁽¹⁾ + … + S⁽ˡ⁾ keeps what the layers
below found (the bottom layer's strong pairs stay visible in the top layer's map); the causal form
greys the pairs no layer may use, whose residual scores never reach a row.
"""
from __future__ import annotations

import matplotlib.style
from matplotlib.figure import Figure

from ..prior import realformer_rules
from ..viz import STYLE_PATH
from .lower_layer import stack_figure

__all__ = ["realformer"]


@matplotlib.style.context(STYLE_PATH)
def realformer() -> Figure:
    """Three causal RealFormer layers: prior from below, own scores, their sum, weights.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    return stack_figure("realformer", lambda L, draws: realformer_rules(L),
                        "RealFormer (He et al., 2021): each layer adds its own scores to the raw map from below, "
                        "Â⁽ˡ⁾ = S⁽ˡ⁾ + Â⁽ˡ⁻¹⁾ (w1 = w2 = 1, g = identity); causal, n = 10", layers=3, causal=True)
