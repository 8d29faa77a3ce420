"""The look every refattn figure shares: colour scales, the grey of masked cells, panel sizes, the style file."""
from __future__ import annotations

from pathlib import Path

from matplotlib.colors import ListedColormap

__all__ = ["BAD_COLOR", "MIN_FONTSIZE", "PATTERN_CMAP", "ROUNDOFF", "SIGNED_CMAP", "SIGNIFICANT_DIGITS", "SMALL_PANEL",
           "STYLE_PATH", "WEIGHTS_CMAP", "WEIGHTS_GAMMA"]

STYLE_PATH = Path(__file__).parents[1] / "refattn.mplstyle"    # refattn/refattn.mplstyle
BAD_COLOR = "0.72"                     # masked, NaN, ±inf: a grey outside both scales and white/navy
WEIGHTS_CMAP = "YlGnBu"                # one-sided: pale yellow (0) to navy, lightness falling throughout
WEIGHTS_GAMMA = 0.5                    # colour ∝ (A / vmax)^γ on the weights scale: small weights show
SIGNED_CMAP = "RdBu_r"                 # two-sided: blue < 0 < red, white at 0
SMALL_PANEL = 12                       # panels of at most 12 × 12 cells: every label, values printed
MIN_FONTSIZE = 4.5                     # points: smaller printed values are not drawn by default
SIGNIFICANT_DIGITS = 6                 # drawn values are rounded to this before saving (save_figure)
ROUNDOFF = 1e-12                       # relative round-off floor of computed quantities (roundoff)
PATTERN_CMAP = ListedColormap(["white", "#1b2a49"], name="refattn_pattern")   # False, True
