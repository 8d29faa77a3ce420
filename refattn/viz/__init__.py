r"""Matplotlib helpers: attention matrices, sparsity patterns, head grids, stepping through frames.

Grid convention (as d2l's ``show_heatmaps``): the last two axes of the array are one panel, rows =
queries *i* (top to bottom), columns = keys *j* (left to right), exactly the ``(..., n, m)`` layout
of every weights array in refattn. The leading axes lay the panels out::

    (n, m)          one panel
    (c, n, m)       one row of c panels           e.g. the h heads of one layer
    (r, c, n, m)    r rows of c panels            e.g. layers × heads, or steps × heads

All the panels of a figure share one colour scale (and one colour bar), so panels compare
directly. The same conventions hold in every figure and notebook:

- **Weights** are drawn on a one-sided scale from 0, light to dark (:data:`WEIGHTS_CMAP`), through
  a square root (:data:`WEIGHTS_GAMMA`), so that a weight of 0.01 on a scale to 1 is already
  tinted (a tenth of the way) instead of lost in the bottom colour. Dark means attends strongly,
  as dark means may attend in the boolean patterns.
- **Signed quantities** (differences, weights that can be negative, encodings) are drawn with
  ``signed=True``: a diverging scale centred on 0 (:data:`SIGNED_CMAP`), linear.
- **Masked cells** (outside ``allowed=``) and NaN or ±inf entries are one neutral grey
  (:data:`BAD_COLOR`), apart from every colour of both scales, never a small weight.
- **Small panels** (at most :data:`SMALL_PANEL` rows and columns) carry a label on every row and
  column and each cell's value to 2 decimals, in black or white, whichever contrasts more.
- Entries beyond the colour scale are marked by an arrow on the colour bar.
- **Computed quantities** on a log axis or in a label (errors, residuals, deviations from 1,
  singular values near 0) pass through :func:`roundoff` or :func:`roundoff_text` first: below a
  floor of :data:`ROUNDOFF` = 1e-12 of their scale they are round-off, drawn at the floor (the
  decade under it shaded by :func:`shade_roundoff`) and read "< 1e-12"; the rest are rounded to
  a few digits. Their last bits, which change with the machine, never reach the figure.

Figures are plain :class:`matplotlib.figure.Figure` objects, made without ``pyplot``: no global
figure list, nothing to close, nothing shown twice in Jupyter (a figure displays as one PNG, with or
without ``%matplotlib inline``). The style ``refattn.mplstyle`` (in the package's folder) is applied with
``matplotlib.style.context`` while drawing, never globally. :func:`save_figure` writes byte-stable
files: no software version or date in the metadata, and every drawn value rounded to
:data:`SIGNIFICANT_DIGITS` significant digits first, so that last-bit differences between BLAS
builds, CPUs or thread counts do not reach the pixels.

To compose a sheet (a matrix beside a line plot), make a :func:`figure`, split it with
``fig.subfigures`` and draw into the parts with :func:`draw_attention` / :func:`draw_pattern`.

Modules: :mod:`~refattn.viz.style` (the shared look), :mod:`~refattn.viz.draw` (matrices and patterns),
:mod:`~refattn.viz.player` (stepping through frames), :mod:`~refattn.viz.roundoff` (computed quantities) and
:mod:`~refattn.viz.stable` (figures without pyplot, byte-stable saving).
"""
from .draw import draw_attention, draw_pattern, plot_attention, plot_pattern
from .player import step_through
from .roundoff import roundoff, roundoff_text, shade_roundoff
from .stable import figure, pin_layout, save_figure
from .style import (
    BAD_COLOR,
    MIN_FONTSIZE,
    PATTERN_CMAP,
    ROUNDOFF,
    SIGNED_CMAP,
    SIGNIFICANT_DIGITS,
    SMALL_PANEL,
    STYLE_PATH,
    WEIGHTS_CMAP,
    WEIGHTS_GAMMA,
)

__all__ = [
    "BAD_COLOR",
    "MIN_FONTSIZE",
    "PATTERN_CMAP",
    "ROUNDOFF",
    "SIGNED_CMAP",
    "SIGNIFICANT_DIGITS",
    "SMALL_PANEL",
    "STYLE_PATH",
    "WEIGHTS_CMAP",
    "WEIGHTS_GAMMA",
    "draw_attention",
    "draw_pattern",
    "figure",
    "plot_attention",
    "plot_pattern",
    "pin_layout",
    "roundoff",
    "roundoff_text",
    "save_figure",
    "shade_roundoff",
    "step_through",
]
