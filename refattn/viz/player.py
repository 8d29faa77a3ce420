"""Stepping through frames: a self-contained HTML (JavaScript) player or an ipywidgets slider."""
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
from matplotlib.figure import Figure
from numpy.typing import ArrayLike

from ..common.checks import check_choice
from .draw import _allowed_grid, _as_grid, _density_title, _limits, _write_values, plot_attention, plot_pattern
from .stable import _STABLE_METADATA, _round_drawn, _savefig
from .style import STYLE_PATH

__all__ = ["STEP_KINDS", "STEP_MODES", "step_through"]


STEP_MODES = ("html", "widget")


STEP_KINDS = ("attention", "pattern")


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


def _require(module: str, who: str, package: str):
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{who} needs the {module.split('.')[0]} package; install it with `pip install {package}` "
            "(or `pip install refattn[notebooks]`)"
        ) from err
