r"""The figures of ``figures/``: one per registry record, plus a few overview sheets.

Each record says how it is drawn (:attr:`refattn.mechanism.Mechanism.figure`): a
:class:`~refattn.mechanism.FigureSpec` drawn by the generic template (:mod:`refattn.figures.template`),
or ``"module:name"`` naming, in its family's figure module, a :class:`~refattn.mechanism.FigureSpec`
(drawn by the template too) or a function whose picture is particular to the mechanism: such a
module's first docstring line says what it draws beyond the template's pattern and weights. The
overview sheets (:data:`SHEETS`) compare several mechanisms and are listed here by name.
:func:`write_figures` is what ``python -m refattn figures`` runs: it iterates the registry, every call draws the same
pixels, and :func:`refattn.viz.save_figure` leaves no version or date in the files, so re-running
it changes no bytes.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import matplotlib.style
from matplotlib.figure import Figure

from .. import registry
from ..mechanism import FigureSpec
from ..viz import STYLE_PATH, pin_layout, save_figure
from .template import draw_spec

__all__ = ["SHEETS", "draw_figure", "figure_names", "write_figures"]

#: Overview sheets: several mechanisms side by side (not one registry id each).
SHEETS = {
    "vanilla_overview": "refattn.figures.vanilla:vanilla_overview",
    "sparse_atomic": "refattn.figures.sparse:sparse_atomic",
    "sparse_compound": "refattn.figures.sparse:sparse_compound",
    "sparse_extended": "refattn.figures.sparse:sparse_extended",
    "linear_overview": "refattn.figures.linear:linear_overview",
    "gallery": "refattn.figures.gallery:gallery",
}


def figure_names() -> list[str]:
    """Every figure: the registry's ids in catalogue order, then the overview sheets."""
    return [*registry.ids(), *SHEETS]


def draw_figure(name: str) -> Figure:
    r"""Draw the figure ``name`` (a registry id or a key of :data:`SHEETS`).

    Parameters
    ----------
    name : str
        The figure's name, which is also its file name without ``.png``.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    if name in SHEETS:
        return _resolve(SHEETS[name])()
    record = registry.get(name)
    how = record.figure if isinstance(record.figure, FigureSpec) else _resolve(record.figure)
    return draw_spec(record, how) if isinstance(how, FigureSpec) else how()


def write_figures(out: str | Path, names: list[str] | None = None, *, progress: bool = False) -> list[Path]:
    r"""Draw figures and write them as ``<out>/<name>.png``.

    Parameters
    ----------
    out : str or pathlib.Path
        Output folder (created if missing).
    names : list of str, optional
        Figure names (:func:`figure_names`); default all of them, in order.
    progress : bool, default False
        Print one line per written file to stderr.

    Returns
    -------
    paths : list of pathlib.Path
        The files written, in the order of ``names``.

    Notes
    -----
    Each figure is drawn and saved under matplotlib's default settings plus ``refattn.mplstyle``
    (``after_reset=True``), so a user's matplotlibrc cannot change the bytes, and its layout is
    pinned (:func:`refattn.viz.pin_layout`), so that neither can the process it runs in.
    """
    known = figure_names()
    names = known if names is None else list(names)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise KeyError(f"unknown figure(s) {', '.join(unknown)}; known: {', '.join(known)}")
    paths = []
    for name in names:
        with matplotlib.style.context(STYLE_PATH, after_reset=True):
            path = save_figure(pin_layout(draw_figure(name)), Path(out) / f"{name}.png")
        if progress:
            print(f"wrote {path}", file=sys.stderr)
        paths.append(path)
    return paths


def _resolve(target: str):
    """The object (a figure function or a :class:`~refattn.mechanism.FigureSpec`) named by ``"module:name"``."""
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)
