r"""Figure of KERPLE (Chi et al., 2022): the log and power biases over (i, j) at a few (r1, r2).

Top row: the log variant B_ij = −r1·log(1 + r2|i − j|) at three (r1, r2), with the causal mask of
the paper's language models (future keys grey), and B against the distance |i − j|. Bottom row:
the power variant −r1·|i − j|^r2, r2 ∈ (0, 2] (r2 = 1 is ALiBi's linear bias). n = m = 24; the
colour scale stops at −8 (the power variant at r2 = 2 reaches about −11).
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from ..core.causal_mask import causal_mask
from ..positional import KerpleParams, kerple_bias
from ..viz import STYLE_PATH, draw_attention, figure
from .common import GROUP_COLORS

__all__ = ["kerple"]

N = 24
FLOOR = -8.0
SETTINGS = {"log": ((1.0, 0.5), (2.0, 1.0), (0.5, 10.0)), "power": ((0.5, 0.5), (0.25, 1.0), (0.02, 2.0))}
FORMULA = {"log": "−r1·log(1 + r2|i − j|)", "power": "−r1·|i − j|^r2"}


@matplotlib.style.context(STYLE_PATH)
def kerple() -> Figure:
    """The log variant on top, the power variant below: three (r1, r2) each and B against the distance.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    fig = figure((14.0, 8.6))
    rows = fig.subfigures(2, 1)
    distance = np.arange(N)
    for row, (kind, settings) in zip(rows, SETTINGS.items(), strict=True):
        maps_panel, line_panel = row.subfigures(1, 2, width_ratios=[3.0, 1.0])
        biases = np.stack([kerple_bias(KerpleParams(r1, r2), N, N, kind=kind) for r1, r2 in settings])
        draw_attention(maps_panel, np.maximum(biases, FLOOR), allowed=causal_mask(N, N), vmin=FLOOR, vmax=0.0,
                       annotate=False, titles=[f"{kind}: r1 = {r1:g}, r2 = {r2:g}" for r1, r2 in settings])
        ax = line_panel.subplots()
        for (r1, r2), color in zip(settings, GROUP_COLORS, strict=False):
            line = kerple_bias(KerpleParams(r1, r2), 1, N, kind=kind, causal="bottom-right")[0, ::-1]
            ax.plot(distance, line, marker="o", markersize=2.5, color=color, label=f"r1 = {r1:g}, r2 = {r2:g}")
        ax.set(xlabel="distance |i − j|", ylabel="bias", title=f"B = {FORMULA[kind]}")
        ax.legend(fontsize=7)
    fig.suptitle(f"KERPLE (Chi et al., 2022): conditionally positive definite kernels of the distance as biases, "
                 f"learned r1, r2 per head; causal, n = m = {N}, colours stop at {FLOOR:g}")
    return fig
