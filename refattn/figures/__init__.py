r"""The figures of ``figures/``: one seeded function per mechanism id, plus overview sheets.

``FIGURES`` maps each name to a function returning a :class:`matplotlib.figure.Figure`; it is
written out by hand (no auto-discovery), and the tests check that it covers every registry id.
:func:`write_figures` is what ``python -m refattn figures`` runs: every call draws the same
pixels and :func:`refattn.viz.save_figure` leaves no version or date in the files, so re-running it
changes no bytes.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import matplotlib.style
from matplotlib.figure import Figure

from ..viz import STYLE_PATH, pin_layout, save_figure
from . import linear, sparse, vanilla

__all__ = ["FIGURES", "write_figures"]

FIGURES: dict[str, Callable[[], Figure]] = {
    # vanilla Transformer (registry family "vanilla")
    "softmax": vanilla.softmax,
    "sdpa": vanilla.sdpa,
    "causal_mask": vanilla.causal_mask,
    "padding_mask": vanilla.padding_mask,
    "multi_head": vanilla.multi_head,
    "cross_attention": vanilla.cross_attention,
    "sinusoidal_pe": vanilla.sinusoidal_pe,
    "layer_norm": vanilla.layer_norm,
    "ffn": vanilla.ffn,
    "encoder_layer": vanilla.encoder_layer,
    "decoder_layer": vanilla.decoder_layer,
    "transformer": vanilla.transformer,
    # overview sheets
    "vanilla_overview": vanilla.vanilla_overview,
    # position-based sparse attention (registry family "sparse"; survey §3.1.1)
    "global": sparse.global_,
    "band": sparse.band,
    "dilated": sparse.dilated,
    "strided": sparse.strided,
    "random": sparse.random,
    "block_local": sparse.block_local,
    "star_transformer": sparse.star_transformer,
    "longformer": sparse.longformer,
    "etc": sparse.etc,
    "bigbird": sparse.bigbird,
    "sparse_transformer": sparse.sparse_transformer,
    "bp_transformer": sparse.bp_transformer,
    "image_transformer": sparse.image_transformer,
    "axial": sparse.axial,
    # overview sheets of the survey's Figs. 4-6
    "sparse_atomic": sparse.sparse_atomic,
    "sparse_compound": sparse.sparse_compound,
    "sparse_extended": sparse.sparse_extended,
    # linearised attention (registry family "linear"; survey §3.2)
    "linear_elu": linear.linear_elu,
    "performer_positive": linear.performer_positive,
    "performer_trig": linear.performer_trig,
    "efficient_attention": linear.efficient_attention,
    "rfa": linear.rfa,
    "delta_rule": linear.delta_rule,
    # overview sheet: every linear mechanism beside softmax
    "linear_overview": linear.linear_overview,
}


def write_figures(out: str | Path, names: list[str] | None = None, *, progress: bool = False) -> list[Path]:
    r"""Draw figures and write them as ``<out>/<name>.png``.

    Parameters
    ----------
    out : str or pathlib.Path
        Output folder (created if missing).
    names : list of str, optional
        Keys of :data:`FIGURES`; default all of them, in order.
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
    names = list(FIGURES) if names is None else list(names)
    unknown = [name for name in names if name not in FIGURES]
    if unknown:
        raise KeyError(f"unknown figure(s) {', '.join(unknown)}; known: {', '.join(FIGURES)}")
    paths = []
    for name in names:
        with matplotlib.style.context(STYLE_PATH, after_reset=True):
            path = save_figure(pin_layout(FIGURES[name]()), Path(out) / f"{name}.png")
        if progress:
            print(f"wrote {path}", file=sys.stderr)
        paths.append(path)
    return paths
