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
without ``%matplotlib inline``). The style ``refattn.mplstyle`` (next to this file) is applied with
``matplotlib.style.context`` while drawing, never globally. :func:`save_figure` writes byte-stable
files: no software version or date in the metadata, and every drawn value rounded to
:data:`SIGNIFICANT_DIGITS` significant digits first, so that last-bit differences between BLAS
builds, CPUs or thread counts do not reach the pixels.

To compose a sheet (a matrix beside a line plot), make a :func:`figure`, split it with
``fig.subfigures`` and draw into the parts with :func:`draw_attention` / :func:`draw_pattern`.
"""
from __future__ import annotations

import hashlib
import importlib
import io
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib as mpl
import matplotlib.style
import numpy as np
from matplotlib.collections import QuadMesh
from matplotlib.colors import Colormap, ListedColormap, LogNorm, Normalize, PowerNorm
from matplotlib.figure import Figure, SubFigure
from matplotlib.patches import Polygon, Rectangle
from matplotlib.ticker import MaxNLocator
from numpy.typing import ArrayLike, NDArray

from .common.checks import check_bool, check_choice

__all__ = [
    "BAD_COLOR",
    "MIN_FONTSIZE",
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

STYLE_PATH = Path(__file__).parent / "refattn.mplstyle"
BAD_COLOR = "0.72"                     # masked, NaN, ±inf: a grey outside both scales and white/navy
WEIGHTS_CMAP = "YlGnBu"                # one-sided: pale yellow (0) to navy, lightness falling throughout
WEIGHTS_GAMMA = 0.5                    # colour ∝ (A / vmax)^γ on the weights scale: small weights show
SIGNED_CMAP = "RdBu_r"                 # two-sided: blue < 0 < red, white at 0
SMALL_PANEL = 12                       # panels of at most 12 × 12 cells: every label, values printed
MIN_FONTSIZE = 4.5                     # points: smaller printed values are not drawn by default
SIGNIFICANT_DIGITS = 6                 # drawn values are rounded to this before saving (save_figure)
ROUNDOFF = 1e-12                       # relative round-off floor of computed quantities (roundoff)
PATTERN_CMAP = ListedColormap(["white", "#1b2a49"], name="refattn_pattern")   # False, True
STEP_MODES = ("html", "widget")
STEP_KINDS = ("attention", "pattern")
_STABLE_METADATA = {
    "png": {"Software": None},
    "pdf": {"Creator": None, "Producer": None, "CreationDate": None},
    "svg": {"Creator": None, "Date": None},
}


class _Figure(Figure):
    """A Figure that shows itself in Jupyter as one PNG, whether or not pyplot is loaded."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        _savefig(self, buffer, "png")
        return buffer.getvalue()


def figure(figsize: tuple[float, float]) -> Figure:
    r"""A blank figure (constrained layout) in refattn's style, made without ``pyplot``.

    Parameters
    ----------
    figsize : (float, float)
        Width and height in inches (100 px per inch).

    Returns
    -------
    fig : matplotlib.figure.Figure
        Displays as a PNG in Jupyter; split it with ``fig.subfigures`` to compose a sheet.

    Examples
    --------
    >>> fig = figure((6, 3))
    >>> left, right = fig.subfigures(1, 2)
    >>> axes = draw_attention(left, np.eye(3))
    >>> len(fig.axes)                         # the panel and its colour bar
    2
    """
    return _new_figure(figsize, "constrained")


def plot_attention(
    A: ArrayLike, *, allowed: ArrayLike | None = None, row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None, titles: Sequence[str] | str | None = None, xlabel: str = "key j",
    ylabel: str = "query i", signed: bool = False, cmap: str | Colormap | None = None,
    vmin: float | None = 0.0, vmax: float | None = None, gamma: float | None = None,
    annotate: bool | None = None, colorbar: bool = True, size: float = 2.4, suptitle: str | None = None,
) -> Figure:
    r"""Heat maps of attention matrices, one panel per matrix, on one shared colour scale.

    Parameters
    ----------
    A : (n, m), (c, n, m) or (r, c, n, m) array_like of float or bool
        One matrix, a row of *c* matrices, or an *r* × *c* grid (see the module docstring).
        NaN and ±inf entries are drawn grey.
    allowed : array_like of bool, optional
        ``True`` where query *i* may attend to key *j* (refattn's mask polarity), broadcastable to
        ``A`` (one (n, m) mask for every panel, or one per panel). The cells outside it are drawn
        in the neutral grey :data:`BAD_COLOR`, whatever ``A`` holds there, and are left out of the
        colour range and the printed values: a masked pair is shown as masked, not as a weight 0.
    row_labels : sequence of str, optional
        *n* query labels (tokens); default the positions, every one on panels of at most
        :data:`SMALL_PANEL` rows, sparse integer ticks on larger ones.
    col_labels : sequence of str, optional
        *m* key labels (tokens); default as for ``row_labels``.
    titles : str or sequence of str, optional
        One title per panel, flat (*r·c*) or nested (*r* lists of *c*), in row-major order.
    xlabel, ylabel : str
        Axis labels, written on the bottom row and the left column.
    signed : bool, default False
        ``False``: a one-sided scale from ``vmin`` (weights). ``True``: a signed quantity, drawn on a
        linear diverging scale centred on 0, from −``vmax`` to ``vmax`` (default the largest
        finite \|entry\|); ``vmin`` is then not used and must be left at its default.
    cmap : str or Colormap, optional
        Colour map; default :data:`WEIGHTS_CMAP`, or :data:`SIGNED_CMAP` when ``signed``.
    vmin : float or None, default 0.0
        Bottom of a one-sided colour scale; ``None``: the smallest finite entry.
    vmax : float, optional
        Top of the colour scale; default the largest finite entry (the largest \|entry\| when
        ``signed``) over all panels.
    gamma : float, optional
        Exponent of a one-sided scale: an entry's colour is that of ((A − vmin)/(vmax − vmin))^γ.
        Default :data:`WEIGHTS_GAMMA` (square root) with the default colour map, 1 (linear) when
        ``cmap`` is given; signed scales are always linear.
    annotate : bool, optional
        Print each cell's value (2 decimals) in it, in black or white for contrast. Default: on
        for panels of at most :data:`SMALL_PANEL` rows and columns drawn on refattn's own scales
        (``cmap`` not given) whose cells are wide enough for :data:`MIN_FONTSIZE`-point digits;
        off otherwise (e.g. integer codes on a categorical map).
    colorbar : bool, default True
        Draw one colour bar for the whole grid, with an arrow at an end passed by some entry.
    size : float, default 2.4
        Inches of the longer side of each panel.
    suptitle : str, optional
        Title of the whole figure.

    Returns
    -------
    fig : matplotlib.figure.Figure

    Examples
    --------
    >>> A = np.full((2, 4, 5, 7), 1 / 7)              # 2 layers × 4 heads, n = 5, m = 7
    >>> len(plot_attention(A).axes)                    # 8 panels and one colour bar
    9
    >>> causal = np.tril(np.ones((5, 5), dtype=bool))
    >>> ax = plot_attention(np.where(causal, 0.2, 0.0), allowed=causal, colorbar=False).axes[0]
    >>> [t.get_text() for t in ax.texts[:3]]           # cells outside `allowed`: grey, no value
    ['0.20', '', '']
    """
    grid = _allowed_grid(_as_grid("A", A, "fb").astype(np.float64), allowed, np.shape(A))
    fig = _new_figure(_grid_figsize(grid.shape, size, colorbar=colorbar, suptitle=suptitle, title_lines=1,
                                    col_labels=col_labels))
    draw_attention(fig, grid, row_labels=row_labels, col_labels=col_labels, titles=titles, xlabel=xlabel,
                   ylabel=ylabel, signed=signed, cmap=cmap, vmin=vmin, vmax=vmax, gamma=gamma, annotate=annotate,
                   colorbar=colorbar, suptitle=suptitle)
    return fig


def draw_attention(
    container: Figure | SubFigure, A: ArrayLike, *, allowed: ArrayLike | None = None,
    row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None,
    titles: Sequence[str] | str | None = None, xlabel: str = "key j", ylabel: str = "query i",
    signed: bool = False, cmap: str | Colormap | None = None, vmin: float | None = 0.0, vmax: float | None = None,
    gamma: float | None = None, annotate: bool | None = None, colorbar: bool = True, suptitle: str | None = None,
) -> NDArray:
    r"""Draw :func:`plot_attention`'s panels into an existing figure or subfigure.

    Parameters
    ----------
    container : matplotlib.figure.Figure or matplotlib.figure.SubFigure
        Where to draw (it should have no axes yet).
    A : (n, m), (c, n, m) or (r, c, n, m) array_like of float or bool
        As in :func:`plot_attention`.
    allowed : array_like of bool, optional
        As in :func:`plot_attention`: ``True`` = may attend, broadcastable to ``A``; the cells
        outside it are drawn grey.
    row_labels, col_labels, titles, xlabel, ylabel, signed, cmap, vmin, vmax, gamma, annotate, colorbar, suptitle
        As in :func:`plot_attention`.

    Returns
    -------
    axes : (r, c) ndarray of matplotlib.axes.Axes
    """
    grid = _allowed_grid(_as_grid("A", A, "fb").astype(np.float64), allowed, np.shape(A))
    check_bool("signed", signed)
    norm = _norm(grid, vmin, vmax, signed=signed, gamma=gamma, own_cmap=cmap is not None)
    fontsize = _cell_fontsize(container, grid, colorbar=colorbar, suptitle=suptitle)
    if annotate is None:                                           # small panels, cells wide enough to read
        annotate = cmap is None and max(grid.shape[2:]) <= SMALL_PANEL and fontsize >= MIN_FONTSIZE
    check_bool("annotate", annotate)
    cmap = _colormap(cmap, signed)
    with mpl.style.context(STYLE_PATH):
        axes = _panels(container, grid, cmap.with_extremes(bad=BAD_COLOR), norm, _titles(titles, grid.shape),
                       row_labels, col_labels, xlabel, ylabel, cell_lines=False)
        if annotate:
            for (i, j), ax in np.ndenumerate(axes):
                _cell_values(ax, grid[i, j], float(np.clip(fontsize, MIN_FONTSIZE, 8.0)))
        if colorbar:
            container.colorbar(axes[0, 0].images[0], ax=axes, shrink=0.9, aspect=25, pad=0.02,
                               extend=_extend(grid, norm))
        if suptitle:
            container.suptitle(suptitle)
    return axes


def plot_pattern(
    mask: ArrayLike, *, titles: Sequence[str] | str | None = None, row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None, xlabel: str = "key j", ylabel: str = "query i",
    size: float = 2.4, suptitle: str | None = None, annotate_density: bool = True,
) -> Figure:
    r"""Boolean attention patterns: ``True`` (may attend) dark, ``False`` white.

    Parameters
    ----------
    mask : (n, m), (c, n, m) or (r, c, n, m) array_like of bool
        Masks in refattn's polarity, ``True`` = query *i* may attend to key *j*; same grid rules
        as :func:`plot_attention`.
    titles : str or sequence of str, optional
        One title per panel (flat or nested, row-major).
    row_labels, col_labels : sequence of str, optional
        *n* query and *m* key labels; default sparse integer ticks.
    xlabel, ylabel : str
        Axis labels, written on the bottom row and the left column.
    size : float, default 2.4
        Inches of the longer side of each panel.
    suptitle : str, optional
        Title of the whole figure.
    annotate_density : bool, default True
        Add "nnz=…, density=…" (kept entries, and their fraction of *n·m*) to each panel's title.

    Returns
    -------
    fig : matplotlib.figure.Figure

    Examples
    --------
    >>> masks = np.tril(np.ones((5, 8), dtype=bool))[None].repeat(3, axis=0)
    >>> fig = plot_pattern(masks, titles=["a", "b", "c"])
    >>> len(fig.axes), fig.axes[0].get_title()
    (3, 'a\nnnz=15, density=0.38')
    """
    grid = _as_grid("mask", mask, "b")
    figsize = _grid_figsize(grid.shape, size, colorbar=False, suptitle=suptitle,
                            title_lines=1 + (annotate_density and titles is not None), col_labels=col_labels)
    fig = _new_figure(figsize)
    draw_pattern(fig, grid, titles=titles, row_labels=row_labels, col_labels=col_labels, xlabel=xlabel,
                 ylabel=ylabel, suptitle=suptitle, annotate_density=annotate_density)
    return fig


def draw_pattern(
    container: Figure | SubFigure, mask: ArrayLike, *, titles: Sequence[str] | str | None = None,
    row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None,
    xlabel: str = "key j", ylabel: str = "query i", suptitle: str | None = None,
    annotate_density: bool = True,
) -> NDArray:
    r"""Draw :func:`plot_pattern`'s panels into an existing figure or subfigure.

    Parameters
    ----------
    container : matplotlib.figure.Figure or matplotlib.figure.SubFigure
        Where to draw (it should have no axes yet).
    mask : (n, m), (c, n, m) or (r, c, n, m) array_like of bool
        As in :func:`plot_pattern`.
    titles, row_labels, col_labels, xlabel, ylabel, suptitle, annotate_density
        As in :func:`plot_pattern`.

    Returns
    -------
    axes : (r, c) ndarray of matplotlib.axes.Axes
    """
    grid = _as_grid("mask", mask, "b")
    r, c = grid.shape[:2]
    titles = _titles(titles, grid.shape)
    if annotate_density:
        panels = grid.reshape(r * c, *grid.shape[2:])
        titles = [_density_title(t, panel) for t, panel in zip(titles, panels, strict=True)]
    with mpl.style.context(STYLE_PATH):
        axes = _panels(container, grid.astype(np.float64), PATTERN_CMAP, Normalize(0.0, 1.0), titles,
                       row_labels, col_labels, xlabel, ylabel, cell_lines=max(grid.shape[2:]) <= 40)
        if suptitle:
            container.suptitle(suptitle)
    return axes


def step_through(
    frames: ArrayLike, *, titles: Sequence[str] | None = None, mode: str = "html",
    kind: str = "attention", interval: int = 800, **plot_kwargs,
):
    r"""Step through a sequence of matrices: rows revealed one by one, heads, decoding steps.

    Parameters
    ----------
    frames : (T, n, m) array_like
        The *T* matrices, float (``kind="attention"``) or bool (``kind="pattern"``). NaN entries
        (e.g. rows not revealed yet) are drawn grey.
    titles : sequence of str, optional
        One title per frame; default "1 / T", "2 / T", ...
    mode : {"html", "widget"}, default "html"
        "html": a self-contained JavaScript player (works in live Jupyter and in rendered
        notebooks that run JavaScript; byte-identical on re-execution). "widget": an ipywidgets
        slider (and play button) that redraws the frame; needs a live kernel.
    kind : {"attention", "pattern"}, default "attention"
        Draw with :func:`plot_attention`'s look (one colour scale over all frames) or
        :func:`plot_pattern`'s.
    interval : int, default 800
        Milliseconds per frame when playing.
    **plot_kwargs
        Passed to :func:`plot_attention` or :func:`plot_pattern` (``cmap``, ``vmax``,
        ``row_labels``, ``size``, ...).

    Returns
    -------
    IPython.display.HTML or ipywidgets.VBox

    Notes
    -----
    The element ids of the HTML player are a hash of its content (matplotlib draws a random
    uuid), so re-executing a notebook gives the same bytes; two identical players shown in one
    notebook therefore share ids, and the second one's buttons would drive the first. The
    font-awesome stylesheet that matplotlib links from a CDN is dropped and the buttons get
    Unicode symbols, so the player needs no network.

    Examples
    --------
    >>> A = np.full((4, 6), 1 / 6)
    >>> frames = np.where(np.tril(np.ones((4, 4), bool))[:, :, None], A, np.nan)  # frame t: rows <= t
    >>> html = step_through(frames)
    >>> html.data.count("data:image/png;base64"), html.data == step_through(frames).data
    (4, True)
    """
    check_choice("mode", mode, STEP_MODES)
    check_choice("kind", kind, STEP_KINDS)
    if isinstance(interval, bool) or not isinstance(interval, (int, np.integer)) or interval < 1:
        raise ValueError(f"interval must be a positive int (milliseconds), got {interval!r}")
    frames = np.asarray(frames)
    if frames.ndim != 3 or 0 in frames.shape:
        raise ValueError(f"frames must have shape (T, n, m) with T, n, m >= 1, got shape {frames.shape}")
    if mode == "html":
        display = _require("IPython.display", "step_through(mode='html')", "ipykernel")
        with mpl.style.context(STYLE_PATH):
            fig, show = _frame_player(frames, titles, kind, plot_kwargs)
            return display.HTML(_html_player(fig, show, len(frames), interval))
    widgets = _require("ipywidgets", "step_through(mode='widget')", "ipywidgets")
    fig, show = _frame_player(frames, titles, kind, plot_kwargs)
    return _widget_player(widgets, fig, show, len(frames), interval)


def pin_layout(fig: Figure) -> Figure:
    r"""Round the drawn values, run the figure's layout engine once, freeze it, and round every box.

    The constrained-layout solution of a nested sheet varies in its last bits from one process to
    the next (~1e-16 of the figure), and that occasionally moves an anti-aliased pixel: the PNG
    bytes change although nothing was redrawn differently. Pinned and rounded to 1e-6 of their
    parents, the boxes do not. The drawn values are rounded first, as :func:`save_figure` does,
    so that the layout (which sees the tick labels) is computed from the rounded values.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        A finished figure (call it after drawing, before saving).

    Returns
    -------
    fig : matplotlib.figure.Figure
        The same figure, its layout engine removed.
    """
    _round_drawn(fig)
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)
        fig.set_layout_engine("none")
    _round_subfigures(fig)
    for ax in fig.axes:                                            # every axes, subfigures' included
        ax.set_position(np.round(ax.get_position(original=True).bounds, 6))
    return fig


def _round_subfigures(container) -> None:
    for sub in container.subfigs:
        sub.bbox_relative.set_points(np.round(sub.bbox_relative.get_points(), 6))
        _round_subfigures(sub)


def save_figure(fig: Figure, path: str | Path) -> Path:
    r"""Write ``fig`` to ``path`` at 100 dpi with no software/date metadata, so re-runs change no bytes.

    Every drawn value is first rounded in place to :data:`SIGNIFICANT_DIGITS` significant digits
    (see Notes), so that last-bit differences between machines do not reach the file.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    path : str or pathlib.Path
        Output file; its suffix picks the format (PNG when there is none). Missing parent folders
        are created.

    Returns
    -------
    path : pathlib.Path

    Notes
    -----
    The drawn values are computed through BLAS, whose last bits depend on the CPU kernel and the
    thread count, and through NumPy's vectorised ``exp`` and ``log``, whose last bits depend on
    the CPU's instruction set. A difference of ~1e-16 of a value rarely moves a pixel, but near a
    tie it does: a dashed straight line on log-log axes (Lemma 2's MSE against m in
    ``performer_trig.png``) moves anti-aliased pixels of its dashes when its axis limits change
    by a few units in the last place. So every drawn value is first rounded in place:

    - image data, the coordinates of lines, collections (``fill_between``, scatter offsets) and
      patches (bars, spans), and the axis limits (on an autoscaled axis, the data limits that
      autoscaling starts from): to :data:`SIGNIFICANT_DIGITS` = 6 significant digits of the
      largest \|value\| of the array on linear axes and colour scales, a step of 1e-6 to 1e-5 of
      that value, so that noise around 0 (a difference of two equal numbers) becomes exactly 0;
      on a logarithmic axis, 6 significant digits of each value;
    - the colour limits: 6 significant digits of the larger of \|vmin\| and \|vmax\|.

    Why no figure changes visibly: a value moves by at most half a step, 5e-6 of the largest
    \|value\| of its array. On an axis spanning at least a tenth of that magnitude (every refattn
    figure) that is under 0.07 px of a 1400 px axis; on a log axis, under 2.2e-6 decade; on a
    linear colour scale from 0 to its largest entry, 1/780 of one of its 256 colour levels (on the
    square-root weights scale, under a tenth of a level above 0.4 % of vmax, at most one below).
    Printed values (2 decimals) are formatted from the rounded numbers, so a tie such as 0.125
    is broken the same way everywhere.

    What remains: noise carries a value across a rounding boundary with a probability of about
    noise / step, below 1e-15 / 1e-6 = 1e-9 per value for noise of a few units in the last place;
    the crossed value then moves by one step, itself far below a pixel, and changes the file only
    if that meets a tie as well (in refattn's figures, the noise between OpenBLAS kernels is at
    most 1e-9 of a step). The rounding uses only correctly rounded operations (scaling by powers
    of ten, ``rint``, decimal formatting and parsing), so it gives the same numbers on every
    IEEE 754 machine. Matplotlib's transforms (the logarithm of a log axis) run after it and can
    still differ in the last bit between CPUs; text placed at computed positions is not rounded.

    A quantity that is zero up to round-off (an error of 8e-15 on one machine, 1.05e-14 on
    another) differs in its first digit, which no rounding to significant digits removes: the
    figures pass such quantities, and every computed number they print, through
    :func:`roundoff` and :func:`roundoff_text` before drawing them.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = save_figure(plot_attention(np.eye(3)), Path(tmp) / "sub" / "eye.png")
    ...     out.read_bytes()[:4]
    b'\x89PNG'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _savefig(fig, path, path.suffix[1:].lower() or "png")
    return path


# --- round-off quantities -------------------------------------------------------------------------

def roundoff(values: ArrayLike, *, scale: float = 1.0, below: str = "floor") -> NDArray:
    r"""Computed quantities as a figure shows them: round-off level at the floor, the rest rounded.

    Every number a figure computes and then draws on a logarithmic axis or prints into a label (an
    error, a residual, a deviation from 1, a singular value near zero) passes through this rule:

    - \|value\| below the **floor** (zero in exact arithmetic, or as good as the arithmetic can
      tell) becomes the floor (``below="floor"``: drawn at it, its label reads "< 1e-12") or NaN
      (``below="nan"``: left off the axis);
    - any other value is rounded to :data:`SIGNIFICANT_DIGITS` significant digits, but to no finer
      a step than the floor (a value of 5.8e-12 against a floor of 1e-12 keeps one digit: 6e-12).

    The floor is the power of ten at or above :data:`ROUNDOFF` · ``scale`` (1e-12 for a quantity of
    scale 1, such as a relative error, a row sum's deviation from 1 or σ_i/σ_1).

    Parameters
    ----------
    values : array_like of float
        The computed quantities (NaN and ±inf are kept).
    scale : float, default 1.0
        The size of the numbers the quantity is computed from, relative to which its rounding
        error is measured: 1 for a relative error; κ(A) for an error against ``pinv(A)``; σ_1
        for singular values. A positive finite number (its own last bits move the floor only if
        ROUNDOFF · scale lies within them of a power of ten).
    below : {"floor", "nan"}, default "floor"
        What a value below the floor becomes: the floor, with the sign of the value, or NaN.

    Returns
    -------
    shown : ndarray of float
        The same shape as ``values``.

    Notes
    -----
    Why :data:`ROUNDOFF` = 1e-12, about 4500 float64 eps (2.2e-16): a quantity computed from *n*
    numbers of size ``scale`` is exact to about n·eps·scale, and which of those last bits come
    out depends on the machine: the BLAS kernel and its thread count (OpenBLAS picks SkylakeX,
    Haswell, Sandybridge, Prescott ... by CPU) sum in another order, and NumPy's ``exp``/``log``
    loops differ by instruction set. Between those, refattn's figure quantities differ by up to
    2.5e-15·scale (Skyformer's Nyström error on all 32 points: 8.0e-15 with SkylakeX, 1.05e-14
    with Haswell; a Sinkhorn row sum's deviation: 2.2e-16 or 4.4e-16). Drawn as data on a log axis
    they move points by a tenth of a decade, and printed they read "8e-15" on one machine and
    "1e-14" on another. A floor 400 times that noise puts every such value below it on every
    machine, and a value rounded in steps of at least the floor (and at least 1e-6 of the value)
    lands on the other side of a rounding boundary only if the noise carries it there, with a
    probability of about noise / step: 2.5e-3 just above the floor, 2.5e-9 for values near 1.
    1e-12 is also the tolerance at which refattn's tests call two float64 results equal.

    Examples
    --------
    >>> roundoff([0.0, 8.0e-15, 5.83e-12, 0.123456789])
    array([1.00000e-12, 1.00000e-12, 6.00000e-12, 1.23457e-01])
    >>> roundoff([3e-16, 0.5], below="nan")
    array([nan, 0.5])
    >>> roundoff([3e-16, 2.1e-11], scale=7.0)              # an error against pinv(A), κ(A) = 7
    array([1.e-11, 2.e-11])
    """
    check_choice("below", below, ("floor", "nan"))
    floor, exponent = _roundoff_floor(scale)
    x = np.asarray(values)
    if x.dtype.kind not in "fiu":
        raise TypeError(f"values must be real numbers, got dtype {x.dtype}")
    x = x.astype(np.float64)                                       # a copy
    finite = np.isfinite(x)
    small = finite & (np.abs(x) < floor)
    rest = finite & ~small
    x[rest] = [_significant(v, exponent) for v in x[rest]]
    x[small] = np.where(x[small] < 0, -floor, floor) if below == "floor" else np.nan
    return x + 0.0                                                 # −0.0 made 0.0


def roundoff_text(value: float, spec: str = ".2g", *, scale: float = 1.0, equals: bool = False) -> str:
    r"""A computed number for a label, legend or title: :func:`roundoff`'s value, then ``format(value, spec)``.

    Parameters
    ----------
    value : float
        The computed number (finite).
    spec : str, default ".2g"
        Format specification of the shown value (``".2f"``, ``".1e"``, ...).
    scale : float, default 1.0
        As in :func:`roundoff`.
    equals : bool, default False
        Write "= " before a value at or above the floor, so that the text reads as a relation
        either way ("error = 0.31", "error < 1e-12").

    Returns
    -------
    text : str
        "< 1e-12" (the floor) for a value below the floor, "> −1e-12" for a negative one; otherwise
        the rounded value formatted, with a minus sign (−) for a negative one and no sign on 0.

    Examples
    --------
    >>> roundoff_text(8.0e-15), roundoff_text(0.48731, ".3f"), roundoff_text(-0.0091, ".3f")
    ('< 1e-12', '0.487', '−0.009')
    >>> roundoff_text(0.125 + 1e-17, ".2f"), roundoff_text(0.125 - 1e-17, ".2f")   # a tie, broken one way
    ('0.12', '0.12')
    >>> [f"max |row sum − 1| {roundoff_text(x, equals=True)}" for x in (0.18, 4e-16)]
    ['max |row sum − 1| = 0.18', 'max |row sum − 1| < 1e-12']
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value):
        raise ValueError(f"value must be a finite real number, got {value!r}")
    check_bool("equals", equals)
    floor, _ = _roundoff_floor(scale)
    if abs(value) < floor:
        return f"< {floor:.0e}" if value >= 0 else f"> \u2212{floor:.0e}"
    text = format(float(roundoff([value], scale=scale)[0]), spec)
    if text.startswith("-"):
        text = text[1:] if float(text) == 0 else "\u2212" + text[1:]
    return f"= {text}" if equals else text


def shade_roundoff(ax, *, scale: float = 1.0, axis: str = "y") -> float:
    r"""Shade the decade below :func:`roundoff`'s floor on a log axis, where values at the floor sit.

    The axis' lower limit becomes a tenth of the floor and the band from there to the floor is
    light grey, with a legend entry "round-off (< 1e-12, drawn at 1e-12)".

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Axes whose ``axis`` is logarithmic.
    scale : float, default 1.0
        As in :func:`roundoff`: the same as for the values drawn.
    axis : {"x", "y"}, default "y"
        The logarithmic axis.

    Returns
    -------
    floor : float
    """
    check_choice("axis", axis, ("x", "y"))
    if getattr(ax, f"get_{axis}scale")() != "log":
        raise ValueError(f"shade_roundoff needs a log {axis} axis, got {getattr(ax, f'get_{axis}scale')()!r}")
    floor, _ = _roundoff_floor(scale)
    label = f"round-off (< {floor:.0e}, drawn at {floor:.0e})"
    span = ax.axhspan if axis == "y" else ax.axvspan
    span(floor / 10, floor, facecolor="0.9", edgecolor="none", zorder=0, label=label)
    getattr(ax, f"set_{axis}lim")(floor / 10, None)
    return floor


def _roundoff_floor(scale) -> tuple[float, int]:
    """(floor, its decimal exponent): the smallest power of ten at or above ROUNDOFF · scale."""
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.integer, np.floating)) \
            or not 0 < scale < np.inf:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    bound = ROUNDOFF * float(scale)
    exponent = int(f"{bound:e}".split("e")[1])                    # bound = d.ddd × 10^exponent
    if float(f"1e{exponent}") < bound:
        exponent += 1
    return float(f"1e{exponent}"), exponent


def _significant(value: float, floor_exponent: int) -> float:
    """``value`` (≥ the floor in magnitude) to SIGNIFICANT_DIGITS significant digits, in steps of at least the
    floor; decimal formatting and parsing are correctly rounded, so every IEEE 754 machine gets the same double."""
    exponent = int(f"{value:.{SIGNIFICANT_DIGITS - 1}e}".split("e")[1])
    digits = min(SIGNIFICANT_DIGITS, exponent - floor_exponent + 1)
    return float(f"{value:.{digits - 1}e}")


# --- drawing ---------------------------------------------------------------------------------------

def _panels(container, grid, cmap, norm, titles, row_labels, col_labels, xlabel, ylabel, *, cell_lines):
    """imshow each (n, m) panel of the (r, c, n, m) grid on shared axes; return the (r, c) axes."""
    r, c, n, m = grid.shape
    row_labels = _labels("row_labels", row_labels, n, "n", grid.shape)
    col_labels = _labels("col_labels", col_labels, m, "m", grid.shape)
    axes = container.subplots(r, c, squeeze=False, sharex=True, sharey=True)
    for (i, j), ax in np.ndenumerate(axes):
        ax.imshow(grid[i, j], cmap=cmap, norm=norm, aspect="equal")
        ax.spines[:].set_visible(True)
        ax.set_title(titles[i * c + j] or "")
        if i == r - 1:
            ax.set_xlabel(xlabel)
        if j == 0:
            ax.set_ylabel(ylabel)
    _ticks(axes[0, 0].xaxis, col_labels, m)                        # shared: sets every panel's ticks
    _ticks(axes[0, 0].yaxis, row_labels, n)
    if _rotated(col_labels):
        for ax in axes[-1]:                                        # the labels each panel shows
            ax.tick_params(axis="x", labelrotation=90)
    if cell_lines:
        ax = axes[0, 0]
        ax.set_xticks(np.arange(m + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(n + 1) - 0.5, minor=True)
        for ax in axes.flat:
            ax.grid(which="minor", color="0.82", linewidth=0.5)
            ax.tick_params(which="minor", length=0)
    return axes


def _ticks(axis, labels, size):
    """Every position (or the given labels) on a small panel, sparse integer ticks on a larger one."""
    if labels is None and size > SMALL_PANEL:
        axis.set_major_locator(MaxNLocator(nbins=6, integer=True, steps=[1, 2, 5, 10]))
        return
    axis.set_ticks(np.arange(size), labels=labels)


def _cell_fontsize(container, grid, *, colorbar: bool, suptitle) -> float:
    """Points at which the printed values ("0.00", "−0.00") fill at most ~80 % of a cell's width.

    The cell size is estimated from the container, less the room the labels, titles and colour
    bar usually take (the layout has not run yet).
    """
    r, c, n, m = grid.shape
    dpi = container.figure.dpi
    width = container.bbox.width - dpi * (0.55 + 0.1 * c + (0.75 if colorbar else 0.0))
    height = container.bbox.height - dpi * (0.6 + 0.25 * r + (0.3 if suptitle else 0.0))
    cell = max(min(width / (c * m), height / (r * n)), 0.0) * 72 / dpi          # points
    chars = 5 if np.nanmin(grid, initial=0.0) < 0 else 4
    return min(0.8 * cell / (0.6 * chars), 0.55 * cell)


def _cell_values(ax, panel: NDArray, fontsize: float) -> None:
    """One centred text per cell of the panel (row-major), written by :func:`_write_values`."""
    for (i, j), _ in np.ndenumerate(panel):
        ax.text(j, i, "", ha="center", va="center", fontsize=fontsize)
    _write_values(ax, panel)


def _write_values(ax, panel: NDArray) -> None:
    """Set the cell texts of ``ax`` to the panel's values (2 decimals), in black or white on the cell's colour.

    Values are formatted after the rounding of :func:`save_figure`, so last-bit noise does not
    decide a rounding tie; masked, NaN and ±inf cells get no text.
    """
    image, shown = ax.images[0], _rounded(panel)
    colours = image.cmap(image.norm(np.ma.masked_invalid(shown))).reshape(-1, 4)
    for text, value, colour in zip(ax.texts, shown.ravel(), colours, strict=True):
        text.set_text(_value_label(value))
        text.set_color("white" if _luminance(colour) < 0.179 else "black")


def _value_label(value: float) -> str:
    if not np.isfinite(value):
        return ""
    label = f"{value:.2f}"
    return "0.00" if label == "-0.00" else label.replace("-", "\u2212")


def _luminance(rgba) -> float:
    """WCAG relative luminance; black text contrasts more above 0.179, white below."""
    rgb = np.asarray(rgba[:3])
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    return float(linear @ [0.2126, 0.7152, 0.0722])


def _rotated(col_labels) -> bool:
    """Key labels longer than two characters are written vertically."""
    return col_labels is not None and max(len(str(s)) for s in col_labels) > 2


def _frame_player(frames, titles, kind, plot_kwargs) -> tuple[Figure, Callable[[int], None]]:
    """A one-panel figure of frame 0 and ``show(t)``, which puts frame *t* (data and title) in it."""
    T = len(frames)
    titles = [f"{t + 1} / {T}" for t in range(T)] if titles is None else [str(t) for t in titles]
    if len(titles) != T:
        raise ValueError(f"titles has {len(titles)} entries but frames has T={T} (shape {frames.shape})")
    if kind == "pattern":
        frames = _as_grid("frames", frames, "b")[0]
        annotate = plot_kwargs.get("annotate_density", True)
        fig = plot_pattern(frames[0], titles=titles[0], **plot_kwargs)
        title = [_density_title(titles[t], frames[t]) if annotate else titles[t] for t in range(T)]
    else:
        grid = _as_grid("frames", frames, "fb").astype(np.float64)
        frames = _allowed_grid(grid, plot_kwargs.pop("allowed", None), frames.shape)[0]
        signed = plot_kwargs.get("signed", False)
        lo, hi = _limits(frames, plot_kwargs.pop("vmin", 0.0), plot_kwargs.pop("vmax", None), signed=signed)
        scale = {"vmax": hi} if signed else {"vmin": lo, "vmax": hi}     # one scale for every frame
        fig = plot_attention(frames[0], titles=titles[0], **scale, **plot_kwargs)
        title = titles
    ax = fig.axes[0]

    def show(t: int) -> None:
        ax.images[0].set_data(frames[t])
        ax.set_title(title[t])
        if ax.texts:                                               # printed values
            _write_values(ax, frames[t])
        _round_drawn(fig)                                          # the HTML writer saves without _savefig

    return fig, show


def _html_player(fig: Figure, show: Callable[[int], None], T: int, interval: int) -> str:
    from matplotlib.animation import FuncAnimation, HTMLWriter

    anim = FuncAnimation(fig, show, frames=T, interval=interval, repeat=True, cache_frame_data=False)
    with tempfile.TemporaryDirectory() as tmp:                     # what to_jshtml does, but with frames
        path = Path(tmp, "player.html")                            # free of the matplotlib version
        writer = HTMLWriter(fps=1000.0 / interval, embed_frames=True, default_mode="loop")
        anim.save(str(path), writer=writer, savefig_kwargs={"metadata": _STABLE_METADATA["png"]})
        html = path.read_text()
    html = re.sub(r'<link rel="stylesheet"\s+href="[^"]*font-awesome[^"]*">', "", html)
    html = re.sub(r'<i class="fa ([^"]+)"></i>', lambda mo: _BUTTONS.get(mo.group(1), mo.group(0)), html)
    uid = re.search(r'id="_anim_img([0-9a-f]+)"', html).group(1)       # uuid4().hex
    stable = hashlib.sha256(html.replace(uid, "").encode()).hexdigest()[:len(uid)]
    return html.replace(uid, stable)


_BUTTONS = {
    "fa-minus": "&minus;", "fa-plus": "+", "fa-pause": "&#10074;&#10074;", "fa-play": "&#9654;",
    "fa-play fa-flip-horizontal": "&#9664;", "fa-fast-backward": "|&#9664;&#9664;",
    "fa-step-backward": "|&#9664;", "fa-step-forward": "&#9654;|", "fa-fast-forward": "&#9654;&#9654;|",
}


def _widget_player(widgets, fig: Figure, show: Callable[[int], None], T: int, interval: int):
    def png(t: int) -> bytes:
        show(t)
        buffer = io.BytesIO()
        _savefig(fig, buffer, "png")
        return buffer.getvalue()

    image = widgets.Image(value=png(0), format="png")
    slider = widgets.IntSlider(value=0, min=0, max=T - 1, description="frame")
    play = widgets.Play(value=0, min=0, max=T - 1, interval=interval)
    widgets.jslink((play, "value"), (slider, "value"))
    slider.observe(lambda change: setattr(image, "value", png(change["new"])), names="value")
    return widgets.VBox([widgets.HBox([play, slider]), image])


def _new_figure(figsize, layout: str = "constrained") -> Figure:
    """A styled figure made without pyplot."""
    with mpl.style.context(STYLE_PATH):
        return _Figure(figsize=figsize, layout=layout)


def _savefig(fig: Figure, target, fmt: str) -> None:
    _round_drawn(fig)
    with mpl.style.context(STYLE_PATH):
        fig.savefig(target, format=fmt, dpi=100, metadata=_STABLE_METADATA.get(fmt))


# --- validation and layout -------------------------------------------------------------------------

def _as_grid(name: str, A: ArrayLike, kinds: str) -> NDArray:
    """``A`` as an (r, c, n, m) array; ``kinds`` are the allowed dtype kinds ("f" float, "b" bool)."""
    arr = np.asarray(A)
    if arr.dtype.kind not in kinds:
        wanted = {"fb": "a real floating-point or bool", "b": "a boolean (True = may attend)"}[kinds]
        raise TypeError(f"{name} must be {wanted} array, got dtype {arr.dtype} with shape {arr.shape}")
    if not 2 <= arr.ndim <= 4 or 0 in arr.shape:
        raise ValueError(
            f"{name} must have shape (n, m), (c, n, m) or (r, c, n, m) with no empty axis, "
            f"got shape {arr.shape}"
        )
    return arr.reshape((1,) * (4 - arr.ndim) + arr.shape)


def _labels(name: str, labels, size: int, symbol: str, shape) -> list[str] | None:
    if labels is None:
        return None
    if isinstance(labels, str):
        raise TypeError(f"{name} must be a sequence of labels, not a string ({labels!r})")
    labels = [str(label) for label in labels]
    if len(labels) != size:
        raise ValueError(f"{name} has {len(labels)} entries but the panels have {symbol}={size} (shape {shape})")
    return labels


def _titles(titles, shape) -> list[str | None]:
    r, c = shape[:2]
    if titles is None:
        return [None] * (r * c)
    if isinstance(titles, str):
        titles = [titles]
    flat = [t for row in titles for t in (row if isinstance(row, (list, tuple)) else [row])]
    if len(flat) != r * c:
        raise ValueError(f"titles has {len(flat)} entries but the grid has {r}×{c} = {r * c} panels (shape {shape})")
    return [None if t is None else str(t) for t in flat]


def _density_title(title: str | None, panel: NDArray) -> str:
    nnz = int(np.count_nonzero(panel))
    stats = f"nnz={nnz}, density={nnz / panel.size:.2f}"
    return f"{title}\n{stats}" if title else stats


def _allowed_grid(grid: NDArray, allowed, shape) -> NDArray:
    """The (r, c, n, m) grid with NaN (drawn grey) outside ``allowed``, which must broadcast to it."""
    if allowed is None:
        return grid
    mask = np.asarray(allowed)
    if mask.dtype.kind != "b":
        raise TypeError(f"allowed must be a boolean (True = may attend) array, got dtype {mask.dtype} "
                        f"with shape {mask.shape}")
    try:
        mask = np.broadcast_to(mask.reshape((1,) * max(0, 4 - mask.ndim) + mask.shape), grid.shape)
    except ValueError:
        raise ValueError(f"allowed has shape {mask.shape}, which does not broadcast to the matrices' "
                         f"shape {tuple(shape)}") from None
    return np.where(mask, grid, np.nan)


def _colormap(cmap, signed: bool) -> Colormap:
    if cmap is None:
        cmap = SIGNED_CMAP if signed else WEIGHTS_CMAP
    if isinstance(cmap, str):
        if cmap not in mpl.colormaps:
            raise ValueError(f"cmap {cmap!r} is not a matplotlib colormap name")
        cmap = mpl.colormaps[cmap]
    return cmap


def _norm(values: NDArray, vmin, vmax, *, signed: bool, gamma, own_cmap: bool) -> Normalize:
    """The colour scale: linear and centred on 0 when ``signed``, else from vmin through a power γ."""
    if signed and gamma not in (None, 1):
        raise ValueError(f"gamma={gamma!r} applies to one-sided scales; a signed scale is linear")
    lo, hi = _limits(values, vmin, vmax, signed=signed)
    if gamma is None:
        gamma = 1.0 if signed or own_cmap else WEIGHTS_GAMMA
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.integer, np.floating)) or not gamma > 0:
        raise ValueError(f"gamma must be a positive number, got {gamma!r}")
    return Normalize(lo, hi) if gamma == 1 else PowerNorm(float(gamma), lo, hi)


def _limits(values: NDArray, vmin, vmax, *, signed: bool) -> tuple[float, float]:
    """(bottom, top) of the colour scale; signed: (−top, top), top default the largest finite |entry|."""
    if not signed:
        return _color_range(values, vmin, vmax)
    if vmin not in (None, 0.0):
        raise ValueError(f"a signed scale is centred on 0 (from -vmax to vmax): give vmax only, got vmin={vmin!r}")
    finite = np.abs(values[np.isfinite(values)])
    top = (float(finite.max()) if finite.size else 0.0) if vmax is None else float(vmax)
    if vmax is not None and not top > 0:
        raise ValueError(f"vmax={vmax!r} must be positive on a signed scale (from -vmax to vmax)")
    top = top if top > 0 else 1.0
    return -top, top


def _extend(values: NDArray, norm: Normalize) -> str:
    """The colour bar's arrows: which ends of the scale some finite entry passes."""
    finite = values[np.isfinite(values)]
    over = bool(finite.size and finite.max() > norm.vmax)
    under = bool(finite.size and finite.min() < norm.vmin)
    return {(False, False): "neither", (True, False): "max", (False, True): "min", (True, True): "both"}[over, under]


def _color_range(values: NDArray, vmin: float | None, vmax: float | None) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    lo = (float(finite.min()) if finite.size else 0.0) if vmin is None else float(vmin)
    if vmax is not None:
        if not float(vmax) > lo:
            raise ValueError(f"vmax={vmax!r} must be greater than vmin={lo!r}")
        return lo, float(vmax)
    hi = float(finite.max()) if finite.size else lo + 1.0
    return lo, hi if hi > lo else lo + 1.0


def _grid_figsize(shape, size: float, *, colorbar: bool, suptitle, title_lines: int,
                  col_labels=None) -> tuple[float, float]:
    """Inches for an (r, c, n, m) grid whose panels have ``size`` inches on their longer side."""
    if not (isinstance(size, (int, float, np.integer, np.floating)) and size > 0):
        raise ValueError(f"size must be a positive number of inches, got {size!r}")
    r, c, n, m = shape
    panel_width, panel_height = size * max(min(1.0, m / n), 0.3), size * max(min(1.0, n / m), 0.3)
    width = c * (panel_width + 0.1) + 0.6 + (0.7 if colorbar else 0.0)
    height = r * (panel_height + 0.2 * title_lines + 0.1) + 0.55 + (0.3 if suptitle else 0.0)
    if _rotated(col_labels):                                       # vertical key labels below the grid
        height += 0.075 * max(len(str(s)) for s in col_labels)
    return width, height


# --- byte-stable values (see save_figure's Notes) -------------------------------------------------------

def _rounded(values: ArrayLike, *, relative: bool = False) -> NDArray:
    """``values`` to SIGNIFICANT_DIGITS significant digits of the largest |value| (one step for the
    whole array), or of each value when ``relative`` (log axes); NaN, ±inf kept, −0.0 made 0.0."""
    x = np.array(values, dtype=np.float64)
    finite = np.isfinite(x)
    if not finite.any():
        return x
    if relative:                                   # decimal formatting and parsing are correctly rounded
        x[finite] = [float(f"{v:.{SIGNIFICANT_DIGITS - 1}e}") for v in x[finite]]
        return x + 0.0
    scale = float(np.max(np.abs(x[finite])))
    if scale == 0.0:
        return x + 0.0
    decimals = SIGNIFICANT_DIGITS - 1 - int(f"{scale:.{SIGNIFICANT_DIGITS - 1}e}".split("e")[1])
    if decimals >= 0:                              # k / 10^decimals: the double nearest the decimal k·10^−decimals
        x[finite] = np.rint(x[finite] * float(10**decimals)) / float(10**decimals)
    else:
        x[finite] = np.rint(x[finite] / float(10**-decimals)) * float(10**-decimals)
    return x + 0.0


def _round_drawn(fig: Figure) -> None:
    """Round, in place, every value ``fig`` draws: images, colour limits, lines, collections, patches, limits."""
    for ax in fig.axes:
        log_x, log_y = ax.xaxis.get_scale() != "linear", ax.yaxis.get_scale() != "linear"

        def xy(points, log_x=log_x, log_y=log_y):
            points = np.ma.filled(np.ma.asarray(points, dtype=np.float64), np.nan).reshape(-1, 2)
            return np.column_stack([_rounded(points[:, 0], relative=log_x), _rounded(points[:, 1], relative=log_y)])

        for image in ax.images:
            data = image.get_array()
            if data is not None and data.dtype.kind == "f":
                image.set_data(np.ma.masked_array(_rounded(np.ma.getdata(data)), mask=np.ma.getmaskarray(data)))
            if image.norm.scaled():
                image.set_clim(*_rounded(image.get_clim(), relative=isinstance(image.norm, LogNorm)))
        for line in ax.lines:
            try:
                points = np.column_stack([np.ma.asarray(d, dtype=np.float64) for d in line.get_data()])
            except (TypeError, ValueError):                # units (dates, categories): not numbers
                continue
            line.set_data(*xy(points).T)
        for collection in ax.collections:
            data_x, data_y = collection.get_offset_transform().contains_branch_separately(ax.transData)
            offsets = collection.get_offsets()
            if (data_x or data_y) and len(offsets):
                collection.set_offsets(xy(offsets))        # scatter
            if isinstance(collection, QuadMesh):           # drawn from its coordinates (colour bars)
                continue
            if any(collection.get_transform().contains_branch_separately(ax.transData)):
                for path in collection.get_paths():        # fill_between, fill, hlines
                    if not path.readonly:
                        path.vertices = xy(path.vertices)
        for patch in ax.patches:
            if isinstance(patch, Rectangle):               # bars, spans
                (x0, y0), (x1, y1) = xy([patch.get_xy(), (patch.get_x() + patch.get_width(),
                                                          patch.get_y() + patch.get_height())])
                patch.set_bounds(x0, y0, x1 - x0, y1 - y0)
            elif isinstance(patch, Polygon):
                patch.set_xy(xy(patch.get_xy()))
    for ax in fig.axes:                                    # limits after set_clim, which the colour bars follow
        relative_x, relative_y = ax.xaxis.get_scale() != "linear", ax.yaxis.get_scale() != "linear"
        ax.dataLim.intervalx = _rounded(ax.dataLim.intervalx, relative=relative_x)   # autoscaling starts here
        ax.dataLim.intervaly = _rounded(ax.dataLim.intervaly, relative=relative_y)
        if not ax.get_autoscalex_on():
            ax.xaxis.set_view_interval(*_rounded(ax.xaxis.get_view_interval(), relative=relative_x), ignore=True)
        if not ax.get_autoscaley_on():
            ax.yaxis.set_view_interval(*_rounded(ax.yaxis.get_view_interval(), relative=relative_y), ignore=True)
    for ax in fig.axes:                                    # shared axes: after every sibling's data limits
        ax.autoscale_view()


def _require(module: str, who: str, package: str):
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{who} needs the {module.split('.')[0]} package; install it with `pip install {package}` "
            "(or `pip install refattn[notebooks]`)"
        ) from err
