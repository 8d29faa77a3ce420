r"""The figure of Lazyformer (Ying et al., 2021; survey §4.5.2): a map computed once per block and reused.

Drawn by :func:`~refattn.figures.lower_layer.stack_figure`: the registry entry's attention-only stack
on seeded input, four layers in blocks of two, one row per layer. Layers 1 and 3 compute their own
map (w1, w2 = 1, 0: the prior is left out); layers 2 and 4 reuse the map from below (w1, w2 = 0, 1:
no scores of their own), so their weights repeat the row above exactly.
"""
from __future__ import annotations

import matplotlib.style
from matplotlib.figure import Figure

from ..prior import lazy_rules
from ..viz import STYLE_PATH
from .lower_layer import stack_figure

__all__ = ["lazyformer"]

BLOCK = 2


@matplotlib.style.context(STYLE_PATH)
def lazyformer() -> Figure:
    """Four Lazyformer layers in blocks of two: prior from below, own scores, their sum, weights.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    return stack_figure("lazyformer", lambda L, draws: lazy_rules(L, BLOCK), "Lazyformer (Ying et al., 2021): blocks "
                        f"of {BLOCK} layers; the first of each computes its map (w1, w2 = 1, 0), the next reuses "
                        "it (w1, w2 = 0, 1); n = 10", layers=4, block=BLOCK)
