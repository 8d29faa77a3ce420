"""Attention matrices and boolean patterns drawn as grids of panels (the conventions of :mod:`refattn.viz`)."""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.style
import numpy as np
from matplotlib.colors import Colormap, Normalize, PowerNorm
from matplotlib.figure import Figure, SubFigure
from matplotlib.ticker import MaxNLocator
from numpy.typing import ArrayLike, NDArray

from ..common.checks import check_bool
from .stable import _new_figure, _rounded
from .style import (
    BAD_COLOR,
    MIN_FONTSIZE,
    PATTERN_CMAP,
    SIGNED_CMAP,
    SMALL_PANEL,
    STYLE_PATH,
    WEIGHTS_CMAP,
    WEIGHTS_GAMMA,
)

__all__ = ["draw_attention", "draw_pattern", "plot_attention", "plot_pattern"]


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
