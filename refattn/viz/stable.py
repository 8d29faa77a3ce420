"""Figures made without pyplot, and byte-stable saving.

A figure displays in Jupyter as one PNG, with or without pyplot; :func:`save_figure` and :func:`pin_layout` round
every drawn value and the layout first, so that the same figure gives the same bytes on every machine (see
:func:`save_figure`'s Notes).
"""
from __future__ import annotations

import io
from pathlib import Path

import matplotlib as mpl
import matplotlib.style
import numpy as np
from matplotlib.collections import QuadMesh
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Polygon, Rectangle
from numpy.typing import ArrayLike, NDArray

from .style import SIGNIFICANT_DIGITS, STYLE_PATH

__all__ = ["figure", "pin_layout", "save_figure"]


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
    >>> from refattn.viz import draw_attention
    >>> fig = figure((6, 3))
    >>> left, right = fig.subfigures(1, 2)
    >>> axes = draw_attention(left, np.eye(3))
    >>> len(fig.axes)                         # the panel and its colour bar
    2
    """
    return _new_figure(figsize, "constrained")


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
    >>> from refattn.viz import plot_attention
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = save_figure(plot_attention(np.eye(3)), Path(tmp) / "sub" / "eye.png")
    ...     out.read_bytes()[:4]
    b'\x89PNG'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _savefig(fig, path, path.suffix[1:].lower() or "png")
    return path


def _new_figure(figsize, layout: str = "constrained") -> Figure:
    """A styled figure made without pyplot."""
    with mpl.style.context(STYLE_PATH):
        return _Figure(figsize=figsize, layout=layout)


def _savefig(fig: Figure, target, fmt: str) -> None:
    _round_drawn(fig)
    with mpl.style.context(STYLE_PATH):
        fig.savefig(target, format=fmt, dpi=100, metadata=_STABLE_METADATA.get(fmt))


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
